// The one classifications table every head and every entry point writes (docs/formats.md,
// "Classifications table"): the fused run's --classifications, `demux classify` and the Python
// API's tables. Internal to the demux pipeline.
//
//   read_id,barcode,confidence,adapter_start,adapter_end,detector,reason,<the head's columns>
//
// Common columns first: `barcode` is the output label (the head's name for it, else BCnn, or
// `unclassified`), confidence 6 decimals, the boundaries and the detector that found them (empty
// where the table's stage did not see them: `demux classify` starts from fingerprints), the reason
// a read is unclassified (empty when classified). Then the head's extra columns
// (Head::extra_columns: e.g. the DTW-SVM head's per-class probabilities, the CRF head's distances
// and gates), numbers at 6 decimals or a class's output name; cells past a call's values empty.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/demux/classification.hpp"
#include "escpod/demux/head.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline::detail {

// Where a row's boundaries came from; absent (empty cells) where the stage did not detect them.
struct RowBoundaries {
  int64_t adapter_start = 0;
  int64_t adapter_end = 0;
  std::string_view detector;
};

// Why the head cannot classify a fingerprint of n_features values ("GBM model expects 6
// features, the fingerprint has 25"), or empty: the same check, and reason, in the fused run and
// `demux classify`.
std::string fingerprint_mismatch(const demux::Head& head, size_t n_features);

class ClassificationsCsv {
 public:
  explicit ClassificationsCsv(const demux::Head& head);

  // The header line, with its '\n'.
  std::string header() const;
  // The output label of a head label: the head's name for it, else BCnn.
  std::string label_output(int32_t label) const;
  // The label a row of `call` gets: its output label, or `unclassified` when `reason` is set.
  std::string row_label(const demux::Classification& call, const std::string& reason) const {
    return reason.empty() ? label_output(call.label) : std::string("unclassified");
  }
  // One row, with its '\n', appended to `line`: `label` (row_label), the call's confidence and
  // head values, the boundaries when given, and `reason`.
  void append_row(std::string& line, const pod5::ReadId& id, const std::string& label,
                  const demux::Classification& call, const std::optional<RowBoundaries>& bounds,
                  const std::string& reason) const;

 private:
  void append_head_cells(std::string& line, std::span<const double> values) const;

  std::vector<std::string> m_columns;          // the head's extra columns
  std::vector<demux::ColumnKind> m_kinds;      // one per column
  std::map<int32_t, std::string> m_outputs;    // label -> output name
  std::vector<std::string> m_class_names;      // output name of each class index
};

}  // namespace escpod::pipeline::detail
