// Copying reads between POD5 files: the engine under repack (and merge, filter, subset).
// Signal is copied as stored whenever the output keeps the input's compression; otherwise it is
// decoded and re-encoded. Read fields, run infos and dictionaries are carried over exactly.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"

namespace escpod::pipeline {

// Inputs left out by --skip-bad: (file, why it could not be used), in input order.
using SkippedInputs = std::vector<std::pair<std::string, std::string>>;

struct CopyStats {
  uint64_t n_reads = 0;
  uint64_t n_samples = 0;
  uint64_t n_chunks_copied = 0;     // stored chunks copied byte for byte
  uint64_t n_reads_reencoded = 0;   // reads decoded and compressed again
};

// A read made ready for copying: its record and its stored chunks (pointing into the reader's
// mapping), with num_samples checked against them.
struct PreparedRead {
  size_t row = 0;  // in its reads batch
  pod5::ReadRecord record;
  std::vector<pod5::SignalChunk> chunks;
};

// Per-worker scratch for copy_read (a codec, a sample buffer, a prepared read), reused across
// reads.
struct CopyScratch {
  pod5::VbzCodec codec;
  std::vector<int16_t> samples;
  PreparedRead prepared;
};

// Appends read `i` of `batch` to `writer` (its run info must have been added): stored chunks
// as they are when the compression matches, else decoded and re-encoded. Checks num_samples
// against the stored chunks (kCorrupt naming the file and read).
Status copy_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                 pod5::FileWriter& writer, CopyScratch& scratch, CopyStats* stats);

// Resolves read `i` of `batch` into `out` (kCorrupt naming the file and read when num_samples
// disagrees with the stored chunks). Thread-safe.
Status prepare_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                    PreparedRead& out);

// Appends a prepared read to `writer`, as copy_read does. With ChunkBytes::kBorrow, stored
// chunks are written from the reader's mapping when the writer writes its batch (no copy): the
// reader must outlive the writer's finish(), and the writer must copy what it borrowed before
// the reader releases those pages (stream_reads' `before_release`, FileWriter::copy_borrowed_in).
Status copy_prepared(const pod5::FileReader& reader, const pod5::ReadBatch& batch,
                     const PreparedRead& read, pod5::FileWriter& writer, CopyScratch& scratch,
                     CopyStats* stats, pod5::ChunkBytes how = pod5::ChunkBytes::kCopy);

// Picks reads from their batch alone; called from several threads at once, so it may only read
// shared state.
using ReadSelector = std::function<bool(const pod5::FileReader&, const pod5::ReadBatch&, size_t)>;
// Sees every selected read in input order, on one thread at a time (duplicate checks, routing,
// writing). `file` indexes the readers.
using PreparedConsumer = std::function<Status(size_t file, const pod5::FileReader&,
                                              const pod5::ReadBatch&, const PreparedRead&)>;

// The copy engine under merge, filter and subset: the reads batches of all `readers`, in input
// order, are decoded, filtered by `select`, resolved (prepare_read) and their signal pages
// faulted in on up to `n_threads` threads, several batches at once; `consume` then takes the
// selected reads in input order on one thread, and each batch's mapped pages are released once
// it is consumed. Results never depend on the thread count. Runs on the streaming engine
// (core/ordered_stream.hpp): memory in flight bounded in bytes (the batches' estimated input
// bytes, 512 MiB or 128 MiB a thread, and at most 2 x n_threads batches, whose records are
// reused), whatever the input size. `n_reads_seen` (optional) counts every read of every batch.
// Stops at the first error in input order (an error of `consume` names its file and read), or
// on an interrupt (kCancelled).
// Called on the consuming thread before a range of an input's mapping is released; writers that
// borrowed bytes from it copy them (FileWriter::copy_borrowed_in). An error stops the stream.
using BeforeRelease = std::function<Status(const void* lo, const void* hi)>;
Status stream_reads(const std::vector<std::unique_ptr<pod5::FileReader>>& readers, int n_threads,
                    const ReadSelector& select, const PreparedConsumer& consume,
                    uint64_t* n_reads_seen = nullptr, const BeforeRelease& before_release = nullptr);
// Part of one input's reads table: rows [first_row, first_row + n_rows) of reads batch
// batch_idx of readers[file]; n_rows kWholeBatch: every row of the batch.
struct ReadSlice {
  static constexpr size_t kWholeBatch = SIZE_MAX;
  size_t file = 0;
  size_t batch_idx = 0;
  size_t first_row = 0;
  size_t n_rows = kWholeBatch;
};
// stream_reads over the given slices only, in the order given (input order keeps the release of
// mapped pages effective): only those rows are decoded (FileReader::read_batch_rows), so pulling
// a few reads located by an index costs what those reads cost.
Status stream_read_slices(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                          const std::vector<ReadSlice>& slices, int n_threads,
                          const ReadSelector& select, const PreparedConsumer& consume,
                          uint64_t* n_reads_seen = nullptr,
                          const BeforeRelease& before_release = nullptr);
// The BeforeRelease of a stream copying into `writer` alone.
inline BeforeRelease copy_borrowed_by(pod5::FileWriter& writer) {
  return [&writer](const void* lo, const void* hi) { return writer.copy_borrowed_in(lo, hi); };
}

struct RepackOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;  // files repacked in parallel
  // Splitting (either > 0): each input goes to numbered files `<stem>_00001.pod5`,
  // `<stem>_00002.pod5`, ... (5 digits, more past 99999) in out_dir, reads in input order, a new
  // file started before a read that would take the current one past reads_per_file reads or
  // max_file_bytes bytes. The byte limit is kept with an estimate that over-counts the tables'
  // overhead (repack_size_estimate); a single read larger than the limit gets a file of its own
  // (with a warning).
  uint64_t reads_per_file = 0;
  uint64_t max_file_bytes = 0;
};

// Bytes a file written by FileWriter takes at most, for the reads added so far: `base` once per
// file (n_run_infos run infos), then `per_read(signal bytes, chunks)` for each read. Upper bounds
// measured on our writer's layout with margin.
uint64_t repack_size_base(size_t n_run_infos);
uint64_t repack_size_per_read(uint64_t signal_bytes, size_t n_chunks);

// Rewrites each input through our writer into `out_dir` under the input's file name (or split,
// see RepackOptions). Safe when out_dir holds an input (each output is staged and renamed over it
// only when complete). Two inputs with the same file name are refused up front.
Status repack_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const RepackOptions& options,
                    CopyStats* total);

}  // namespace escpod::pipeline
