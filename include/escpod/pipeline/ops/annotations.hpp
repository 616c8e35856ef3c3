// Annotations in `.p5s` sidecars over many POD5 inputs: writing a column from a table
// (`escpod annotate`), routing and selecting reads by a column (`demux split --sidecar`,
// `filter --annotation`), and printing columns (`view --include NAME`). The sidecar format and
// its rules live in escpod/pod5/sidecar.hpp.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/sidecar.hpp"

namespace escpod::pipeline {

// A column to write into every input's sidecar, keyed by read id.
struct AnnotationSource {
  std::string name;
  pod5::AnnotationKind kind = pod5::AnnotationKind::kLabel;
  std::unordered_map<pod5::ReadId, std::string, pod5::ReadIdHash> labels;
  std::unordered_map<pod5::ReadId, float, pod5::ReadIdHash> scores;
  size_t size() const { return kind == pod5::AnnotationKind::kLabel ? labels.size() : scores.size(); }
};

// Reads a `read_id,<value>` CSV (header required) into column `name`. The value column is
// `value_column` when given, else the column called `name`, else the only column besides
// read_id. Scores must parse as finite or infinite numbers (NaN refused); labels must not be
// empty. Blank lines and '#' lines are skipped; a read id given twice is an error. Errors name
// the file and line.
Result<AnnotationSource> read_annotation_csv(const std::string& path, const std::string& name,
                                             pod5::AnnotationKind kind, const std::string& value_column = "");

// A design table from a CSV: the header names the columns, `key_columns` which of them are keys
// (the rest are values).
Result<pod5::SidecarDesign> read_design_csv(const std::string& path, const std::vector<std::string>& key_columns);

struct AnnotateOptions {
  int n_threads = 1;
  FsyncMode fsync = FsyncMode::kNone;
  std::string writer = "escpod";
  std::optional<pod5::SidecarDesign> design;  // set the design in every sidecar
};

struct AnnotateReport {
  std::vector<std::pair<std::filesystem::path, uint64_t>> assigned_per_file;  // reads given a value
  uint64_t n_not_in_inputs = 0;  // source rows whose read is in no input
  uint64_t n_indexes_built = 0;  // inputs that had no sidecar
};

// Writes `sources` into the sidecar of every input (each restricted to that file's reads) in one
// read-modify-write per file. Every input is checked first (a damaged or foreign sidecar stops
// the run before any file is written), and a set of sources that matches no read of any input is
// an error (kInvalidArgument). With only a design and no source, sets the design.
Status annotate_files(const std::vector<std::filesystem::path>& inputs,
                      const std::vector<AnnotationSource>& sources, const AnnotateOptions& options,
                      AnnotateReport* report);

// Refuses (with the sidecar's own error) any input whose existing sidecar is damaged or belongs
// to another POD5; inputs without one are fine. Run before a long job that annotates at the end.
Status check_sidecars_writable(const std::vector<std::filesystem::path>& inputs);

// The label column `column` of every input's sidecar as (read id, label) rows, "" for reads with
// no label. kNotFound naming the input that has no sidecar or no such column; kCorrupt when a
// sidecar's index disagrees with its POD5 (Sidecar::verify_index).
Result<std::vector<std::pair<pod5::ReadId, std::string>>> sidecar_labels(
    const std::vector<std::filesystem::path>& inputs, const std::string& column, int n_threads = 1);

// Every annotation column name of the inputs' sidecars, in first-seen order (inputs without a
// sidecar contribute none; a damaged or foreign sidecar is an error).
Result<std::vector<std::string>> sidecar_column_names(const std::vector<std::filesystem::path>& inputs);

// Per-file sidecars looked up while streaming reads batches (filter, view). A read's row is found
// by id and its locator must equal the batch and row the read was streamed from; a mismatch
// means the sidecar is damaged, and is reported through error() (the read is then not selected
// and gets no value), so wrong data never comes out.
class SidecarLookup {
 public:
  // Opens the sidecar of every reader. `required`: an input without one is an error; otherwise
  // it just has no values. Damaged or foreign sidecars are always errors.
  static Result<std::unique_ptr<SidecarLookup>> open(const std::vector<const pod5::FileReader*>& readers,
                                                     bool required);
  // The sidecar of `reader` (nullptr when it has none).
  const pod5::Sidecar* sidecar_of(const pod5::FileReader& reader) const;
  // Sidecar row of read `i` of `batch` from `reader`, checked against its locator; nullopt when
  // the reader has no sidecar or the check fails (error() is then set). Thread-safe.
  std::optional<size_t> row(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i) const;
  // The first locator mismatch seen, or OK.
  Status error() const;
  // Every column name of every sidecar, in first-seen order.
  std::vector<std::string> column_names() const;

 private:
  std::unordered_map<const pod5::FileReader*, std::unique_ptr<pod5::Sidecar>> m_sidecars;
  std::vector<const pod5::Sidecar*> m_order;
  mutable std::mutex m_mutex;
  mutable Status m_error;
  mutable std::atomic<bool> m_failed{false};
};

// `NAME=LABEL` criteria: reads whose label in NAME is one of the LABELs given for NAME (OR), for
// every NAME given (AND).
class AnnotationFilter {
 public:
  // Parses "NAME=LABEL" texts (kInvalidArgument on a malformed one) and resolves them against
  // the sidecar of every reader: each needs a sidecar holding every NAME as a label column.
  static Result<std::unique_ptr<AnnotationFilter>> create(const std::vector<std::string>& criteria,
                                                          const std::vector<const pod5::FileReader*>& readers);
  // Thread-safe.
  bool accepts(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i) const;
  Status error() const { return m_lookup->error(); }

 private:
  struct PerFile {
    // One entry per NAME: the column and which of its label indices are accepted.
    std::vector<std::pair<const pod5::AnnotationColumn*, std::vector<uint8_t>>> names;
  };
  std::unique_ptr<SidecarLookup> m_lookup;
  std::unordered_map<const pod5::FileReader*, PerFile> m_per_file;
};

}  // namespace escpod::pipeline
