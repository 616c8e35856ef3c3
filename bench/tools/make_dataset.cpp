// Builds benchmark inputs from real reads: copies the reads of SRC files over and over with
// fresh read ids (stored signal chunks copied as they are) until N reads are written, split over
// K output files.   make_dataset SRC.pod5... -o PREFIX -n N [-k K]
// Writes PREFIX_0.pod5 ... PREFIX_{K-1}.pod5 (or PREFIX.pod5 when K = 1).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"

using namespace escpod;

int main(int argc, char** argv) {
  std::vector<std::string> sources;
  std::string prefix;
  uint64_t n_reads = 0;
  int n_files = 1;
  for (int a = 1; a < argc; ++a) {
    std::string arg = argv[a];
    if (arg == "-o" && a + 1 < argc) prefix = argv[++a];
    else if (arg == "-n" && a + 1 < argc) n_reads = std::strtoull(argv[++a], nullptr, 10);
    else if (arg == "-k" && a + 1 < argc) n_files = std::atoi(argv[++a]);
    else sources.push_back(arg);
  }
  if (sources.empty() || prefix.empty() || n_reads == 0 || n_files < 1) {
    std::fprintf(stderr, "usage: make_dataset SRC.pod5... -o PREFIX -n N_READS [-k N_FILES]\n");
    return 2;
  }
  std::vector<std::unique_ptr<pod5::FileReader>> readers;
  for (const auto& s : sources) {
    auto r = pod5::FileReader::open(s);
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      return 1;
    }
    readers.push_back(std::move(*r));
  }
  uint64_t written = 0;
  for (int k = 0; k < n_files; ++k) {
    const std::string path = n_files == 1 ? prefix + ".pod5" : prefix + "_" + std::to_string(k) + ".pod5";
    pod5::WriterOptions opts;
    opts.overwrite = true;
    opts.software = "escpod make_dataset";
    auto writer = pod5::FileWriter::create(path, opts);
    if (!writer.is_ok()) {
      std::fprintf(stderr, "%s\n", writer.status().to_string().c_str());
      return 1;
    }
    const uint64_t target = n_reads * static_cast<uint64_t>(k + 1) / static_cast<uint64_t>(n_files);
    std::vector<pod5::SignalChunk> chunks;
    Status s;
    while (written < target && s.is_ok()) {
      for (const auto& reader : readers) {
        for (const auto& ri : reader->run_infos()) s = (*writer)->add_run_info(ri);
        for (size_t b = 0; b < reader->n_read_batches() && written < target && s.is_ok(); ++b) {
          auto batch = reader->read_batch(b);
          if (!batch.is_ok()) {
            s = batch.status();
            break;
          }
          for (size_t i = 0; i < batch->size() && written < target && s.is_ok(); ++i) {
            pod5::ReadRecord rec = reader->record(*batch, i);
            rec.read_id = pod5::ReadId::random();
            chunks.clear();
            for (uint64_t row : batch->rows_of(i)) chunks.push_back(*reader->signal_chunk(row));
            s = (*writer)->add_read_chunks(rec, chunks);
            ++written;
          }
        }
        if (written >= target) break;
      }
    }
    if (s.is_ok()) s = (*writer)->close();
    if (!s.is_ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", path.c_str());
  }
  return 0;
}
