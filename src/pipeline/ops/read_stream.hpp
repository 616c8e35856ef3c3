// The per-read streaming engine shared by the demultiplexer and its stage commands: a serial
// reader hands out consecutive reads of the inputs in blocks, workers (each with its own
// scratch) process blocks in parallel, and a serial consumer sees every read in input order, so
// results never depend on the thread count. Internal to the pipeline layer.
#pragma once

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/parallel.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"

namespace escpod::pipeline::detail {

using escpod::Executor;
using escpod::OrderedStream;
using escpod::StreamLimits;

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

// The stream limits of the per-read commands: as many blocks in flight as the former pipeline
// had tokens (4 per thread), bounded in bytes by the reads' signal (256 MiB, or 32 MiB a thread
// on wide machines).
inline StreamLimits read_stream_limits(const Executor& ex) {
  const auto width = static_cast<uint64_t>(ex.width());
  return {.max_bytes = std::max<uint64_t>(uint64_t{256} << 20, width * (uint64_t{32} << 20)),
          .max_items = static_cast<size_t>(4 * width)};
}

// "<file>: read <id>: <message>", unless the message already names the read.
inline Status with_read_context(Status s, const pod5::FileReader& file, const pod5::ReadId& id) {
  if (s.is_ok()) return s;
  const std::string read = id.to_string();
  if (s.message().find(read) != std::string::npos) return s;
  return s.with_context(file.path().string() + ": read " + read);
}

template <class Payload>
struct ReadTask {
  const pod5::FileReader* file = nullptr;
  std::shared_ptr<const pod5::ReadBatch> batch;
  size_t row = 0;
  size_t tag = 0;  // caller's per-read tag (the fingerprint stage: boundary row)
  Payload out;     // reset for every read: Payload{} (or out.reset() where Payload has one,
                   // which may keep its buffers)
};

// Consecutive reads handed to one worker together (the CNN runs on several reads per call).
// Blocks are records of the engine's ring: reused, so their vector is allocated once.
template <class Payload>
struct ReadBlock {
  std::vector<ReadTask<Payload>> reads;
  uint64_t n_scanned = 0;      // input reads behind this block, selected or not (progress)
  uint64_t bytes_scanned = 0;  // their input bytes (input_bytes_of)
};

// Where the serial reader stands in the inputs.
struct ReadCursor {
  size_t file_idx = 0, batch_idx = 0, row = 0;
  std::shared_ptr<const pod5::ReadBatch> batch;
};

// Moves `at` to the next read of the inputs (decoding the next batch when needed); false at the
// end of the inputs.
inline Result<bool> advance_to_next_read(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                                         ReadCursor& at) {
  while (at.file_idx < readers.size()) {
    const pod5::FileReader& reader = *readers[at.file_idx];
    if (at.batch && at.row < at.batch->size()) return true;
    if (at.batch_idx == reader.n_read_batches()) {
      ++at.file_idx;
      at.batch_idx = 0;
      at.batch.reset();
      continue;
    }
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch next, reader.read_batch(at.batch_idx++));
    at.batch = std::make_shared<const pod5::ReadBatch>(std::move(next));
    at.row = 0;
  }
  return false;
}

template <class Payload>
void reset_payload(Payload& p) {
  if constexpr (requires { p.reset(); }) {
    p.reset();
  } else {
    p = Payload{};
  }
}

// Runs `work(block, scratch)` on blocks of up to `block_size` consecutive reads that
// `select(batch, row, &tag)` accepts, in parallel, and `emit(task)` on every read in input
// order, on the streaming engine (core/ordered_stream.hpp): signal bytes in flight bounded,
// blocks reused, the first error (or an interrupt) stops every stage; an error of `emit` names
// its file and read. Results depend only on what `work` does per read, never on the thread
// count.
template <class Payload, class Scratch, class Select, class MakeScratch, class Work, class Emit>
Status for_each_read_ordered(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                             int n_threads, size_t block_size, Select select,
                             MakeScratch make_scratch, Work work, Emit emit) {
  using Block = ReadBlock<Payload>;
  Executor& ex = Executor::for_threads(std::max(1, n_threads));
  OrderedStream<Block, Scratch> stream(ex, read_stream_limits(ex));
  // Once every read of a batch has been emitted (in input order, so when the next batch's first
  // read is), the signal below it will not be read again: its mapped pages are released, so
  // resident memory stays bounded on huge inputs instead of growing with the mapped file.
  std::shared_ptr<const pod5::ReadBatch> emitted_batch;
  const pod5::FileReader* emitted_file = nullptr;
  ReadCursor at;
  const size_t per_block = std::max<size_t>(1, block_size);
  const auto progress = start_read_progress(readers);
  auto fill_block = [&](Block& block, uint64_t* bytes, bool* end) -> Status {
    block.n_scanned = block.bytes_scanned = 0;
    size_t n = 0;
    while (n < per_block) {
      ESCPOD_ASSIGN_OR_RETURN(const bool more, advance_to_next_read(readers, at));
      if (!more) break;
      const pod5::FileReader& reader = *readers[at.file_idx];
      const size_t r = at.row++;
      ++block.n_scanned;
      block.bytes_scanned += input_bytes_of(reader, at.batch->first_read_idx + r, 1);
      size_t tag = 0;
      if (!select(*at.batch, r, &tag)) continue;
      if (n == block.reads.size()) block.reads.emplace_back();
      ReadTask<Payload>& t = block.reads[n++];
      t.file = &reader;
      t.batch = at.batch;
      t.row = r;
      t.tag = tag;
      reset_payload(t.out);
      *bytes += 2 * at.batch->num_samples[r];  // its signal once decoded (int16 samples)
    }
    block.reads.resize(n);  // shrinks only for the last block or a selective `select`
    if (n == 0) {
      progress->add(block.n_scanned, block.bytes_scanned);
      *end = true;
    }
    return Status::ok();
  };
  return stream.run(
      fill_block, make_scratch,
      [&](Block& b, Scratch& scratch) {
        work(b, scratch);
        return Status::ok();
      },
      [&](Block& b, bool*) -> Status {
        for (auto& t : b.reads) {
          ESCPOD_RETURN_IF_ERROR(with_read_context(emit(t), *t.file, t.batch->read_id[t.row]));
          if (t.batch != emitted_batch) {
            if (emitted_batch) emitted_file->drop_signal_pages_behind(*emitted_batch);
            emitted_batch = t.batch;
            emitted_file = t.file;
          }
        }
        progress->add(b.n_scanned, b.bytes_scanned);
        return Status::ok();
      });
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
    // Each input's error is kept in `opened` (reported below in input order), so none stops the loop.
    (void)parallel_for(Executor::for_threads(n_threads), inputs.size(), open_one);
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
