// FAST5 -> POD5 conversion (`escpod convert fast5`): every read of the inputs, with the fields
// and run information the official `pod5 convert fast5` writes (mapping: fast5/fast5_file.hpp),
// signal re-encoded as POD5 VBZ in chunks of writer.max_chunk_samples.
//
// Threads: one thread reads the FAST5 files (HDF5 serialises its calls anyway) and hands each
// read's stored signal to n_threads workers, which decode it (deflate/VBZ) and compress it for
// POD5; one thread writes, in input order, so output is identical for any thread count.
// Memory: at most 2 * n_threads reads in flight plus the writers' pending batches.
// All or nothing: on the first error (message naming file and read) no output appears.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_writer.hpp"

namespace escpod::pipeline {

struct Fast5ConvertOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;
  // Unset: all reads go to one file (`output`, or `output`/output.pod5 when `output` is an
  // existing directory, as the official converter does). Set: one POD5 per input, at
  // `output` / (input relative to this folder, extension .pod5); every input must lie under it.
  std::optional<std::filesystem::path> one_to_one;
};

struct Fast5ConvertStats {
  uint64_t n_files = 0;
  uint64_t n_reads = 0;
  uint64_t n_samples = 0;
  std::vector<std::filesystem::path> outputs;  // in the order they were started
};

// Expands inputs: files as given, directories walked recursively for `*.fast5` (sorted).
// kNotFound for a missing input, kInvalidArgument when nothing is found.
Result<std::vector<std::filesystem::path>> collect_fast5_inputs(const std::vector<std::string>& inputs);

Status convert_fast5(const std::vector<std::filesystem::path>& inputs,
                     const std::filesystem::path& output, const Fast5ConvertOptions& options,
                     Fast5ConvertStats* stats);

}  // namespace escpod::pipeline
