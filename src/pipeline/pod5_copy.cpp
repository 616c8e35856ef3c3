#include "escpod/pipeline/pod5_copy.hpp"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "escpod/core/log.hpp"

namespace escpod::pipeline {

Status copy_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                 pod5::FileWriter& writer, CopyScratch& scratch, CopyStats* stats) {
  pod5::ReadRecord record = reader.record(batch, i);
  scratch.chunks.clear();
  uint64_t stored = 0;
  for (uint64_t row : batch.rows_of(i)) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::SignalChunk c, reader.signal_chunk(row));
    stored += c.n_samples;
    scratch.chunks.push_back(c);
  }
  if (stored != record.num_samples) {
    return Status::corrupt(reader.path().string() + ": read " + record.read_id.to_string() +
                           " has num_samples " + std::to_string(record.num_samples) +
                           " but its signal rows hold " + std::to_string(stored));
  }
  if (reader.info().is_vbz == writer.is_vbz()) {
    ESCPOD_RETURN_IF_ERROR(writer.add_read_chunks(record, scratch.chunks));
    if (stats) stats->n_chunks_copied += scratch.chunks.size();
  } else {
    scratch.samples.resize(stored);
    ESCPOD_RETURN_IF_ERROR(reader.read_signal(batch.rows_of(i), scratch.samples, scratch.codec));
    ESCPOD_RETURN_IF_ERROR(writer.add_read(record, scratch.samples));
    if (stats) ++stats->n_reads_reencoded;
  }
  if (stats) {
    ++stats->n_reads;
    stats->n_samples += stored;
  }
  return Status::ok();
}

Status copy_reads(const pod5::FileReader& reader, pod5::FileWriter& writer,
                  const ReadPredicate& keep, CopyStats* stats) {
  for (const auto& ri : reader.run_infos()) ESCPOD_RETURN_IF_ERROR(writer.add_run_info(ri));
  CopyScratch scratch;
  for (size_t b = 0; b < reader.n_read_batches(); ++b) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch batch, reader.read_batch(b));
    for (size_t i = 0; i < batch.size(); ++i) {
      if (keep) {
        ESCPOD_ASSIGN_OR_RETURN(bool wanted, keep(reader, batch, i));
        if (!wanted) continue;
      }
      if (interrupted()) return Status::cancelled("interrupted");
      ESCPOD_RETURN_IF_ERROR(copy_read(reader, batch, i, writer, scratch, stats));
    }
    // Signal rows ascend with reads in files from MinKNOW and from writers like ours: release
    // what lies behind so resident memory stays bounded on huge inputs.
    if (!batch.signal_rows.empty()) {
      reader.drop_signal_pages(*std::min_element(batch.signal_rows.begin(), batch.signal_rows.end()));
    }
  }
  return Status::ok();
}

Status repack_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const RepackOptions& options,
                    CopyStats* total) {
  std::set<std::string> names;
  for (const auto& in : inputs) {
    if (!names.insert(in.filename().string()).second) {
      return Status::invalid_argument("two inputs are named " + in.filename().string() +
                                      ": their repacked outputs would collide in " + out_dir.string());
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) {
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Status::io_error("cannot create output folder " + out_dir.string() + ": " + ec.message());
  }
  std::mutex mutex;
  Status first_error;
  auto repack_one = [&](const std::filesystem::path& in) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(auto reader, pod5::FileReader::open(in));
    const auto out_path = out_dir / in.filename();
    pod5::WriterOptions wo = options.writer;
    // Replacing the input itself is the point of repacking in place.
    if (std::filesystem::equivalent(in, out_path, ec)) wo.overwrite = true;
    ESCPOD_ASSIGN_OR_RETURN(auto writer, pod5::FileWriter::create(out_path, wo));
    CopyStats stats;
    ESCPOD_RETURN_IF_ERROR(copy_reads(*reader, *writer, nullptr, &stats));
    ESCPOD_RETURN_IF_ERROR(writer->close());
    log::debug("repacked {} -> {}: {} reads", in.string(), out_path.string(), stats.n_reads);
    std::lock_guard lock(mutex);
    if (total) {
      total->n_reads += stats.n_reads;
      total->n_samples += stats.n_samples;
      total->n_chunks_copied += stats.n_chunks_copied;
      total->n_reads_reencoded += stats.n_reads_reencoded;
    }
    return Status::ok();
  };
  tbb::task_arena arena(std::max(1, options.n_threads));
  arena.execute([&] {
    tbb::parallel_for(size_t{0}, inputs.size(), [&](size_t k) {
      {
        std::lock_guard lock(mutex);
        if (!first_error.is_ok()) return;
      }
      Status s = repack_one(inputs[k]);
      if (!s.is_ok()) {
        std::lock_guard lock(mutex);
        if (first_error.is_ok()) first_error = s;
      }
    });
  });
  return first_error;
}

}  // namespace escpod::pipeline
