// The per-read streaming engine shared by the demultiplexer and its stage commands: a serial
// reader hands out consecutive reads of the inputs in blocks, workers (each with its own
// scratch) process blocks in parallel, and a serial consumer sees every read in input order, so
// results never depend on the thread count. Internal to the pipeline layer.
#pragma once

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "escpod/core/log.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"

namespace escpod::pipeline::detail {

// ---- progress over POD5 inputs -----------------------------------------------------------------

// Input bytes counted once the first `reads_done` reads of `reader` are done: the file's size
// apportioned to its reads, so a file's bytes are all counted with its last read (exact totals,
// no per-read signal lookups).
inline uint64_t input_bytes_through(const pod5::FileReader& reader, uint64_t reads_done) {
  const uint64_t n = reader.info().n_reads;
  const uint64_t size = reader.info().file_size;
  if (n == 0 || reads_done >= n) return n == 0 ? 0 : size;
  // size * reads_done / n without overflow (r * reads_done < n^2, fine below 4e9 reads a file).
  return size / n * reads_done + size % n * reads_done / n;
}
// Bytes of reads [first, first + count) of `reader`.
inline uint64_t input_bytes_of(const pod5::FileReader& reader, uint64_t first, uint64_t count) {
  return input_bytes_through(reader, first + count) - input_bytes_through(reader, first);
}

// A progress task over every read of `readers`: totals from their footers and file sizes (files
// without reads add no bytes, as none are ever counted for them).
inline std::unique_ptr<progress::Task> start_read_progress(
    const std::vector<std::unique_ptr<pod5::FileReader>>& readers) {
  uint64_t n_reads = 0, n_bytes = 0;
  for (const auto& r : readers) {
    n_reads += r->info().n_reads;
    if (r->info().n_reads > 0) n_bytes += r->info().file_size;
  }
  return std::make_unique<progress::Task>(n_reads, n_bytes);
}

// ---- ordered per-read pipeline over POD5 inputs -------------------------------------------------

template <class Payload>
struct ReadTask {
  const pod5::FileReader* file = nullptr;
  std::shared_ptr<const pod5::ReadBatch> batch;
  size_t row = 0;
  size_t tag = 0;  // caller's per-read tag (the fingerprint stage: boundary row)
  Payload out;
};

// Consecutive reads handed to one worker together (the CNN runs on several reads per call).
template <class Payload>
struct ReadBlock {
  std::vector<ReadTask<Payload>> reads;
  uint64_t n_scanned = 0;      // input reads behind this block, selected or not (progress)
  uint64_t bytes_scanned = 0;  // their input bytes (input_bytes_of)
};

// Runs `work(block, scratch)` on blocks of up to `block_size` consecutive reads that
// `select(batch, row, &tag)` accepts, in parallel, and `emit(task)` on every read in input
// order. Stops at the first error (or an interrupt). Results depend only on what `work` does per
// read, never on the thread count.
template <class Payload, class Scratch, class Select, class MakeScratch, class Work, class Emit>
Status for_each_read_ordered(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                             int n_threads, size_t block_size, Select select,
                             MakeScratch make_scratch, Work work, Emit emit) {
  using Block = ReadBlock<Payload>;
  std::mutex error_mutex;
  Status first_error;
  std::atomic<bool> failed{false};
  auto fail = [&](Status s) {
    std::lock_guard lock(error_mutex);
    if (first_error.is_ok()) first_error = std::move(s);
    failed = true;
  };
  tbb::enumerable_thread_specific<Scratch> scratch(make_scratch);
  // Once every read of a batch has been emitted (in input order, so when the next batch's first
  // read is), the signal below it will not be read again: its mapped pages are released, so
  // resident memory stays bounded on huge inputs instead of growing with the mapped file.
  std::shared_ptr<const pod5::ReadBatch> emitted_batch;
  const pod5::FileReader* emitted_file = nullptr;
  size_t file_idx = 0, batch_idx = 0, row = 0;
  std::shared_ptr<const pod5::ReadBatch> batch;
  const int threads = std::max(1, n_threads);
  const size_t tokens = static_cast<size_t>(4 * threads);
  const size_t per_block = std::max<size_t>(1, block_size);
  const auto progress = start_read_progress(readers);
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        tokens,
        tbb::make_filter<void, Block*>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> Block* {
              auto block = std::make_unique<Block>();
              block->reads.reserve(per_block);
              while (block->reads.size() < per_block) {
                if (failed || interrupted()) {
                  if (interrupted()) fail(Status::cancelled("interrupted"));
                  fc.stop();
                  return nullptr;
                }
                if (file_idx == readers.size()) break;
                const pod5::FileReader& reader = *readers[file_idx];
                if (!batch || row == batch->size()) {
                  if (batch_idx == reader.n_read_batches()) {
                    ++file_idx;
                    batch_idx = 0;
                    batch.reset();
                    continue;
                  }
                  auto next = reader.read_batch(batch_idx++);
                  if (!next.is_ok()) {
                    fail(next.status());
                    continue;
                  }
                  batch = std::make_shared<const pod5::ReadBatch>(std::move(next).value());
                  row = 0;
                  if (batch->size() == 0) continue;
                }
                const size_t r = row++;
                ++block->n_scanned;
                block->bytes_scanned += input_bytes_of(reader, batch->first_read_idx + r, 1);
                size_t tag = 0;
                if (!select(*batch, r, &tag)) continue;
                auto& t = block->reads.emplace_back();
                t.file = &reader;
                t.batch = batch;
                t.row = r;
                t.tag = tag;
              }
              if (block->reads.empty()) {
                progress->add(block->n_scanned, block->bytes_scanned);
                fc.stop();
                return nullptr;
              }
              return block.release();
            }) &
            tbb::make_filter<Block*, Block*>(tbb::filter_mode::parallel,
                                            [&](Block* b) {
                                              if (!failed) work(*b, scratch.local());
                                              return b;
                                            }) &
            tbb::make_filter<Block*, void>(tbb::filter_mode::serial_in_order, [&](Block* b) {
              std::unique_ptr<Block> owned(b);
              for (auto& t : owned->reads) {
                if (failed) return;
                Status s = emit(t);
                if (!s.is_ok()) fail(std::move(s));
                if (t.batch != emitted_batch) {
                  if (emitted_batch) emitted_file->drop_signal_pages_behind(*emitted_batch);
                  emitted_batch = t.batch;
                  emitted_file = t.file;
                }
              }
              progress->add(owned->n_scanned, owned->bytes_scanned);
            }));
  });
  if (failed) return first_error;
  return Status::ok();
}

// Opens every input before any output is created (a bad input fails fast), several files at once
// (opening validates each reads table, which dominates short commands over many files); errors
// and warnings are reported in input order, so the first bad input named is always the same.
// n_threads 0: all cores.
// `options` (optional): how each input is opened (default: every batch validated).
// With `skipped` (--skip-bad): each input is also checked for a readable signal table, and an
// input that fails to open or validate is left out and listed in `skipped` with the reason
// instead of failing; the readers of the others are returned in input order. Fails only when
// every input is bad.
inline Result<std::vector<std::unique_ptr<pod5::FileReader>>> open_readers(
    const std::vector<std::filesystem::path>& inputs, int n_threads = 0,
    std::vector<std::pair<std::string, std::string>>* skipped = nullptr,
    const std::vector<pod5::OpenOptions>* options = nullptr) {
  std::vector<std::optional<Result<std::unique_ptr<pod5::FileReader>>>> opened(inputs.size());
  auto open_one = [&](size_t i) {
    auto r = options ? pod5::FileReader::open(inputs[i], (*options)[i]) : pod5::FileReader::open(inputs[i]);
    if (skipped && r.is_ok()) {
      if (auto sig = (*r)->signal_table_info(); !sig.is_ok()) {
        opened[i].emplace(sig.status());
        return;
      }
    }
    opened[i].emplace(std::move(r));
  };
  if (inputs.size() > 1 && n_threads != 1) {
    tbb::task_arena arena(n_threads > 0 ? n_threads : tbb::task_arena::automatic);
    arena.execute([&] { tbb::parallel_for(size_t{0}, inputs.size(), open_one); });
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) open_one(i);
  }
  std::vector<std::unique_ptr<pod5::FileReader>> readers;
  readers.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!opened[i]->is_ok()) {
      if (!skipped) return opened[i]->status();
      skipped->emplace_back(inputs[i].string(), opened[i]->status().message());
      continue;
    }
    readers.push_back(std::move(*opened[i]).value());
    for (const auto& w : readers.back()->info().warnings) log::warn("{}: {}", inputs[i].string(), w);
  }
  if (readers.empty() && skipped && !skipped->empty()) {
    return Status::corrupt("every input was skipped as bad (" + std::to_string(skipped->size()) +
                           "); the first: " + skipped->front().first + ": " + skipped->front().second);
  }
  return readers;
}

}  // namespace escpod::pipeline::detail
