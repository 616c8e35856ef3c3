// Writing POD5 files that the official pod5 library reads back with every field equal.
//
// Layout follows the current official writer (reads table V7, stamped with the matching library
// version): signal table streamed first, then run infos, then reads; signal cut into chunks of
// at most max_chunk_samples, signal batches of exactly signal_batch_rows rows except the last
// (official readers assume a uniform stride), real read ids in the signal table, VBZ frames with
// their content size. The file is written to a staging file beside the destination and renamed
// into place by close(); a writer destroyed without close() leaves nothing behind.
// Not thread-safe: one thread drives a writer (compress in workers, then add_read_chunks).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/records.hpp"

namespace escpod::pod5 {

// The pod5 library version our files are stamped with: the first whose reads-table layout (V7)
// is the one we write, so no official reader migrates (or rewrites) what we wrote.
inline constexpr const char* kWrittenPod5Version = "0.3.49";

// Bytes of pending (not yet written) signal that all writers sharing it may hold in memory
// together; a writer over budget spills its pending chunks to a scratch file beside its output.
// Lets a run with hundreds of outputs keep memory bounded whatever their number. Thread-safe.
class SignalMemoryBudget {
 public:
  explicit SignalMemoryBudget(int64_t bytes) : m_available(bytes) {}
  bool try_take(int64_t n) {
    int64_t have = m_available.load(std::memory_order_relaxed);
    while (have >= n) {
      if (m_available.compare_exchange_weak(have, have - n)) return true;
    }
    return false;
  }
  void give_back(int64_t n) { m_available.fetch_add(n); }
  int64_t available() const { return m_available.load(); }

 private:
  std::atomic<int64_t> m_available;
};

struct WriterOptions {
  std::string software = "escpod";  // recorded in the footer and schema metadata
  bool vbz = true;                   // false: uncompressed LargeList<int16> signal
  uint32_t max_chunk_samples = 102400;
  uint32_t signal_batch_rows = 100;
  uint32_t read_batch_rows = 1000;
  int zstd_level = 1;
  bool overwrite = false;            // replace an existing destination
  FsyncMode fsync = FsyncMode::kNone;
  // Shared cap on pending signal held in memory (nullptr: a full batch stays in memory).
  std::shared_ptr<SignalMemoryBudget> signal_budget;
  // Fail on a read id added twice: at add_read when the first is among the last few thousand
  // ids, else at finish() (bounded memory: ids beyond a window spill, ~20 bytes a read, to an
  // unlinked scratch file in the output's folder). Off only where the caller proved the ids
  // unique already (merge's pre-pass).
  bool check_duplicate_ids = true;
};

// What add_read_chunks does with the chunk bytes it is given.
enum class ChunkBytes {
  kCopy,    // copied into the writer before the call returns
  kBorrow,  // written later straight from where they lie (no copy): they must stay readable and
            // unchanged until finish()/close() returns, the writer is destroyed, or
            // copy_borrowed_in() is called for them (e.g. a FileReader's mapping, outliving the
            // writer, before its pages are released). Writers under a signal budget copy.
};

class FileWriter {
 public:
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Starts writing `path` (through a staging file in its folder). kAlreadyExists unless
  // options.overwrite; kIoError/kNotFound naming the folder if it cannot be written.
  static Result<std::unique_ptr<FileWriter>> create(const std::filesystem::path& path,
                                                    const WriterOptions& options = {});

  // Adds a run info. One with an acquisition id already added is ignored (deduplication).
  Status add_run_info(const RunInfo& run_info);

  // Adds a read and its samples (ADC counts). read.run_info must name a run info added before;
  // read.end_reason must be a known end reason; read.num_samples and read.signal_rows are
  // ignored (computed from `signal`). Read ids must be unique (see check_duplicate_ids).
  Status add_read(const ReadRecord& read, std::span<const int16_t> signal);

  // Adds a read whose signal is already stored in this file's format (VBZ cells for a VBZ
  // writer, raw little-endian int16 bytes otherwise): chunks are stored as they are, copied now
  // or borrowed until the file is finished (see ChunkBytes).
  Status add_read_chunks(const ReadRecord& read, std::span<const SignalChunk> chunks,
                         ChunkBytes how = ChunkBytes::kCopy);

  // Copies the bytes of pending borrowed chunks that lie in [lo, hi) into the writer, after
  // waiting for the batch being written: the caller may then change or release that memory.
  Status copy_borrowed_in(const void* lo, const void* hi);

  bool is_vbz() const;
  uint64_t n_reads() const;

  // Finishes the file and renames it into place. Afterwards the writer accepts nothing.
  // close() = finish() + commit(); the two steps let a caller writing several outputs finish
  // them all before any appears (all or nothing).
  Status close();
  Status finish();  // completes the staging file; nothing visible at the destination yet
  Status commit();  // renames a finished staging file into place

 private:
  struct Impl;
  explicit FileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::pod5
