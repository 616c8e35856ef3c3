// The fingerprint table (docs/formats.md §3.2) in its two encodings: CSV
// (`read_id,fp_0..fp_{N-1}[,dwell_0..dwell_{N-1}]`, 6 decimals, gzip accepted when reading) and
// Parquet (`read_id` string, float64 fp_*/dwell_* columns, zstd). `demux fingerprint` writes it,
// `demux classify` reads it; the encoding follows the file name (`.parquet` or not), so tables
// move between escpod, escapepod, pandas and polars without conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline {

enum class FingerprintFormat { kCsv, kParquet };

// kParquet when the name ends in ".parquet" (any case), else kCsv.
FingerprintFormat fingerprint_format_of(const std::filesystem::path& path);

// Streams rows to `out`, in the order add() is called. Memory: one row group of Parquet rows
// (kParquetRowGroup) at most. finish() must be called for a complete table; errors name the
// output as `what`.
class FingerprintTableWriter {
 public:
  static constexpr size_t kParquetRowGroup = 16384;

  virtual ~FingerprintTableWriter() = default;
  // n_features fp_* columns; with_dwell adds as many dwell_* columns (event lengths, samples).
  static Result<std::unique_ptr<FingerprintTableWriter>> open(FingerprintFormat format,
                                                              std::ostream& out, size_t n_features,
                                                              bool with_dwell,
                                                              const std::string& what);
  // features.size() == n_features; dwells.size() == n_features when with_dwell, else ignored.
  virtual Status add(const pod5::ReadId& id, std::span<const double> features,
                     std::span<const double> dwells) = 0;
  virtual Status finish() = 0;
};

// Reads the fp_0..fp_{n_features-1} columns (found by name; read_id required; other columns
// such as barcode or dwell_* ignored) in row order, a chunk at a time. CSV: a leading '#' on the
// header is stripped, later '#' lines skipped, empty/nan/inf cells read as NaN (the classifier
// calls them invalid input). Parquet: read_id may be Utf8 or LargeUtf8, features any float or
// integer type. Errors name the file and the line (CSV) or row (Parquet).
class FingerprintTableReader {
 public:
  virtual ~FingerprintTableReader() = default;
  // `model` names who wants n_features values, for the error when the table has fewer.
  static Result<std::unique_ptr<FingerprintTableReader>> open(const std::filesystem::path& path,
                                                              size_t n_features,
                                                              const std::string& model);
  // Replaces ids and x (row-major, n_features per row) with up to max_rows rows; 0 at the end.
  virtual Result<size_t> next(size_t max_rows, std::vector<pod5::ReadId>& ids,
                              std::vector<double>& x) = 0;
};

// A labelled fingerprint table, the training input of a DTW-SVM: CSV
// `read_id,fp_0..fp_{N-1},barcode` with 6 decimals (what `demux train --fingerprints` writes and
// `demux train-svm` reads).
struct LabelledFingerprints {
  size_t n_features = 0;
  std::vector<std::string> read_ids;  // one per row; empty when the table has no read_id column
  std::vector<double> features;       // row-major, n_features values per row
  std::vector<int32_t> labels;        // barcode numbers; kNoiseLabel (-1) for the noise class
};

// Writes `table` as CSV (labels as label_name: BC04, unclassified). Precondition: read_ids and
// labels have one entry per row, features n_features per row. Errors name `what`.
Status write_labelled_fingerprints(std::ostream& out, const LabelledFingerprints& table,
                                   const std::string& what);

// Reads a labelled fingerprint CSV (plain or gzip): fp_<k> columns in any order covering
// 0..N-1 without gaps or repeats, a `barcode` column read with parse_barcode_label, read_id if
// present, other columns ignored; a leading '#' on the header stripped, '#' and blank lines
// skipped. Every row must have the header's field count and numeric fp cells. Errors name the
// file and line, and the label for a label that is neither a barcode nor the noise class.
Result<LabelledFingerprints> read_labelled_fingerprints(const std::filesystem::path& path);

}  // namespace escpod::pipeline
