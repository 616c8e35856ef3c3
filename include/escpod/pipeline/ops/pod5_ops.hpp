// File operations over POD5 inputs: merge, filter, subset. Each streams reads batch by batch from
// memory-mapped inputs into staged outputs (see FileWriter), copying stored signal chunks as they
// are whenever the output keeps the input's compression, and visiting each input's signal table
// in ascending order. Peak memory: per open output, one pending signal batch (signal_batch_rows
// stored chunks, ~20 MB for full 102,400-sample VBZ chunks) plus one pending reads batch and a
// 1 MiB write buffer; plus 16 bytes per distinct read id seen (duplicate detection), whatever
// the input size.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline {

struct MergeOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;  // reads batches prepared in parallel (stream_reads)
  bool duplicate_ok = false;  // keep the first of reads sharing an id instead of failing
  bool skip_bad = false;  // leave out inputs that fail to open or validate (see `skipped`)
};

// Writes every read of `inputs` (in order) to `output`. Run infos are deduplicated by
// acquisition id. A read id seen twice fails naming the id and both files, unless duplicate_ok.
// With options.skip_bad, inputs that fail to open or validate are left out and listed in
// `skipped` (optional) instead of failing the merge.
Status merge_files(const std::vector<std::filesystem::path>& inputs,
                   const std::filesystem::path& output, const MergeOptions& options,
                   CopyStats* stats, uint64_t* n_duplicates_skipped,
                   SkippedInputs* skipped = nullptr);

struct FilterCriteria {
  std::optional<std::vector<pod5::ReadId>> ids;  // keep only these
  std::optional<uint64_t> min_samples, max_samples;  // inclusive
  std::vector<std::string> end_reasons;          // keep only these (empty: any)
  std::vector<std::string> exclude_end_reasons;  // drop these
  // "NAME=LABEL" sidecar criteria (see AnnotationFilter): same NAME OR-ed, NAMEs AND-ed. Every
  // input then needs a sidecar holding each NAME as a label column.
  std::vector<std::string> annotations;
  bool any() const {
    return ids || min_samples || max_samples || !end_reasons.empty() || !exclude_end_reasons.empty() ||
           !annotations.empty();
  }
};

struct FilterOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;  // reads batches prepared in parallel (stream_reads)
  bool missing_ok = false;  // listed ids absent from every input are a warning, not an error
  bool skip_bad = false;  // leave out inputs that fail to open or validate (report.skipped)
  // With ids: use read-id indexes beside the inputs (plan_id_lookup in read_lookup.hpp), so that
  // only the rows holding listed ids are decoded. The reads written are the same either way; an
  // indexed input holding none of the ids is not opened, so the run infos only it holds (which
  // no read written refers to) are left out of the output.
  bool use_index = true;
};

struct FilterReport {
  CopyStats copied;
  uint64_t n_reads_seen = 0;
  std::vector<pod5::ReadId> missing_ids;  // listed but not found
  SkippedInputs skipped;  // skip_bad: inputs left out, with the reason
  size_t n_files_indexed = 0;  // inputs located through a read-id index (not scanned)
  size_t n_files_not_opened = 0;  // of those, inputs holding none of the ids (not opened)
};

// Writes the reads of `inputs` that meet every criterion to `output`, in input order. Fails (and
// writes nothing) when listed ids are missing, unless missing_ok. At least one criterion is
// required. With ids and an index, n_reads_seen counts only the rows decoded; an index whose
// rows do not hold the ids it names is reported and the file scanned in full for those ids.
Status filter_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& output, const FilterCriteria& criteria,
                    const FilterOptions& options, FilterReport* report);

struct SubsetOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;  // reads batches prepared in parallel (stream_reads)
  // Mode 1: read id -> output name (a file name in out_dir; ".pod5" appended if missing).
  std::optional<std::vector<std::pair<pod5::ReadId, std::string>>> mapping;
  // Mode 2: group by read fields, naming outputs with a template such as
  // "{channel}_{end_reason}.pod5" (fields as in `escpod view`).
  std::vector<std::string> columns;
  std::string name_template;
  // Mode 1 only: where reads no mapping row names go (empty: they are dropped and counted).
  std::string unmapped_output;
  bool skip_bad = false;  // leave out inputs that fail to open or validate (report.skipped)
};

struct SubsetReport {
  std::map<std::string, uint64_t> reads_per_output;
  uint64_t n_unmapped = 0;  // reads of the inputs no mapping row names (dropped)
  uint64_t n_mapped_missing = 0;  // mapping rows whose read is in no input
  SkippedInputs skipped;  // skip_bad: inputs left out, with the reason
};

// Partitions the reads of `inputs` into one POD5 per distinct output name in `out_dir`.
Status subset_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const SubsetOptions& options,
                    SubsetReport* report);

// Reads a `read_id,output` CSV (header required, columns found by name, extra columns ignored).
// The output is in the first of `output_columns` the header names (default "output"); with
// empty_as, an empty output cell maps to that name instead of being an error.
Result<std::vector<std::pair<pod5::ReadId, std::string>>> read_subset_csv(
    const std::string& path, const std::vector<std::string>& output_columns = {"output"},
    const std::string& empty_as = "");

}  // namespace escpod::pipeline
