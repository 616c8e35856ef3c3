// Decodes every read's signal of POD5 files, to int16 or to picoamps, and reports throughput:
//   decode_bench [--pa] [--threads N] FILE...
// Prints one JSON line: tool, mode, threads, reads, samples, seconds, reads_per_s, samples_per_s.
// Work is handed out per read batch (work stealing); each worker keeps its codec and buffers.
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for_each.h>
#include <tbb/task_arena.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "escpod/pod5/file_reader.hpp"
#include "escpod/signal/calibration.hpp"

using namespace escpod;

struct Worker {
  pod5::VbzCodec codec;
  std::vector<int16_t> samples;
  std::vector<float> pa;
  double checksum = 0;
};

int main(int argc, char** argv) {
  bool to_pa = false;
  int threads = 1;
  std::vector<std::string> paths;
  for (int a = 1; a < argc; ++a) {
    std::string arg = argv[a];
    if (arg == "--pa") to_pa = true;
    else if (arg == "--threads" && a + 1 < argc) threads = std::atoi(argv[++a]);
    else paths.push_back(arg);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<pod5::FileReader>> files;
  struct Job {
    const pod5::FileReader* file;
    size_t batch;
  };
  std::vector<Job> jobs;
  for (const auto& p : paths) {
    auto r = pod5::FileReader::open(p);
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      return 1;
    }
    files.push_back(std::move(*r));
    for (size_t b = 0; b < files.back()->n_read_batches(); ++b) jobs.push_back({files.back().get(), b});
  }
  std::atomic<uint64_t> n_reads{0}, n_samples{0};
  std::atomic<bool> failed{false};
  tbb::enumerable_thread_specific<Worker> workers;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_for_each(jobs.begin(), jobs.end(), [&](const Job& job) {
      Worker& w = workers.local();
      auto batch = job.file->read_batch(job.batch);
      if (!batch.is_ok()) {
        failed = true;
        return;
      }
      uint64_t local_samples = 0;
      for (size_t i = 0; i < batch->size(); ++i) {
        w.samples.resize(batch->num_samples[i]);
        if (!job.file->read_signal(batch->rows_of(i), w.samples, w.codec).is_ok()) {
          failed = true;
          return;
        }
        if (to_pa) {
          w.pa.resize(w.samples.size());
          signal::calibrate_to_pa(w.samples, {batch->calibration_offset[i], batch->calibration_scale[i]}, w.pa);
          if (!w.pa.empty()) w.checksum += w.pa[w.pa.size() / 2];
        } else if (!w.samples.empty()) {
          w.checksum += w.samples[w.samples.size() / 2];
        }
        local_samples += w.samples.size();
      }
      n_reads += batch->size();
      n_samples += local_samples;
    });
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (failed) {
    std::fprintf(stderr, "decode failed\n");
    return 1;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::printf("{\"tool\": \"escpod\", \"mode\": \"%s\", \"threads\": %d, \"cpu_s\": %.3f, \"reads\": %llu, "
              "\"samples\": %llu, \"seconds\": %.4f, \"reads_per_s\": %.1f, \"samples_per_s\": %.1f}\n",
              to_pa ? "pa" : "int16", threads, cpu, static_cast<unsigned long long>(n_reads.load()),
              static_cast<unsigned long long>(n_samples.load()), secs,
              static_cast<double>(n_reads.load()) / secs, static_cast<double>(n_samples.load()) / secs);
  return 0;
}
