// Copying reads between POD5 files: the engine under repack (and merge, filter, subset).
// Signal is copied as stored whenever the output keeps the input's compression; otherwise it is
// decoded and re-encoded. Read fields, run infos and dictionaries are carried over exactly.
#pragma once

#include <filesystem>
#include <functional>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"

namespace escpod::pipeline {

struct CopyStats {
  uint64_t n_reads = 0;
  uint64_t n_samples = 0;
  uint64_t n_chunks_copied = 0;     // stored chunks copied byte for byte
  uint64_t n_reads_reencoded = 0;   // reads decoded and compressed again
};

// Decides per read whether to copy it (nullptr: every read); an error stops the copy.
using ReadPredicate =
    std::function<Result<bool>(const pod5::FileReader&, const pod5::ReadBatch&, size_t)>;

// Per-worker scratch for copy_read (a codec and a sample buffer), reused across reads.
struct CopyScratch {
  pod5::VbzCodec codec;
  std::vector<pod5::SignalChunk> chunks;
  std::vector<int16_t> samples;
};

// Appends read `i` of `batch` to `writer` (its run info must have been added): stored chunks
// as they are when the compression matches, else decoded and re-encoded. Checks num_samples
// against the stored chunks (kCorrupt naming the file and read).
Status copy_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                 pod5::FileWriter& writer, CopyScratch& scratch, CopyStats* stats);

// Appends the reads of `reader` accepted by `keep` to `writer`, in file order, with their run
// infos. Checks each read's num_samples against its stored chunks (kCorrupt naming the read).
Status copy_reads(const pod5::FileReader& reader, pod5::FileWriter& writer,
                  const ReadPredicate& keep, CopyStats* stats);

struct RepackOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;  // files repacked in parallel
};

// Rewrites each input through our writer into `out_dir` under the input's file name. Safe when
// out_dir holds an input (each output is staged and renamed over it only when complete).
// Two inputs with the same file name are refused up front.
Status repack_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const RepackOptions& options,
                    CopyStats* total);

}  // namespace escpod::pipeline
