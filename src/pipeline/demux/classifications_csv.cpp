#include "pipeline/demux/classifications_csv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "escpod/pipeline/tables/barcode_labels.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline::detail {

std::string fingerprint_mismatch(const demux::Head& head, size_t n_features) {
  const size_t want = head.input().fingerprint_length;
  if (want == 0 || want == n_features) return {};
  return fmt::format("{} model expects {} features, the fingerprint has {}", head.name(), want, n_features);
}

ClassificationsCsv::ClassificationsCsv(const demux::Head& head) {
  for (const auto& c : head.extra_columns()) m_columns.push_back(c);
  m_kinds.assign(m_columns.size(), demux::ColumnKind::kNumber);
  const auto kinds = head.extra_column_kinds();
  std::copy_n(kinds.begin(), std::min(kinds.size(), m_kinds.size()), m_kinds.begin());
  const auto labels = head.labels();
  const auto names = head.label_names();
  for (size_t i = 0; i < labels.size(); ++i) {
    m_outputs.emplace(labels[i], i < names.size() ? names[i] : label_name(labels[i]));
    m_class_names.push_back(m_outputs.at(labels[i]));
  }
}

std::string ClassificationsCsv::header() const {
  std::string h = "read_id,barcode,confidence,adapter_start,adapter_end,detector,reason";
  for (const auto& c : m_columns) h.append(",").append(c);
  return h + '\n';
}

std::string ClassificationsCsv::label_output(int32_t label) const {
  const auto it = m_outputs.find(label);
  return it != m_outputs.end() ? it->second : label_name(label);
}

void ClassificationsCsv::append_row(std::string& line, const pod5::ReadId& id, const std::string& label,
                                    const demux::Classification& call, const std::optional<RowBoundaries>& bounds,
                                    const std::string& reason) const {
  char text[36];
  id.format_to(text);
  line.append(text, 36);
  fmt::format_to(std::back_inserter(line), ",{},{:.6f},", label, call.confidence);
  if (bounds) {
    fmt::format_to(std::back_inserter(line), "{},{},{},", bounds->adapter_start, bounds->adapter_end,
                   bounds->detector);
  } else {
    line += ",,,";
  }
  append_csv_cell(line, reason);
  append_head_cells(line, call.probabilities);
  line += '\n';
}

void ClassificationsCsv::append_head_cells(std::string& line, std::span<const double> values) const {
  for (size_t k = 0; k < m_columns.size(); ++k) {
    line += ',';
    if (k >= values.size()) continue;
    if (m_kinds[k] == demux::ColumnKind::kNumber) {
      fmt::format_to(std::back_inserter(line), "{:.6f}", values[k]);
      continue;
    }
    const double v = values[k];
    if (v >= 0.0 && v < static_cast<double>(m_class_names.size())) {
      append_csv_cell(line, m_class_names[static_cast<size_t>(v)]);
    }
  }
}

}  // namespace escpod::pipeline::detail
