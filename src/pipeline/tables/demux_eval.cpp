#include "escpod/pipeline/tables/demux_eval.hpp"

#include <fmt/format.h>

#include "escpod/pipeline/tables/barcode_labels.hpp"
#include "pipeline/ops/csv_text.hpp"

#include <algorithm>

#include <unordered_map>
#include <vector>

namespace escpod::pipeline {
namespace {

// read_id -> barcode number (parse_barcode_label: every label strict, errors name file, line and
// label) from a CSV (plain or gzip) whose header names read_id and one of `label_columns` (the
// first found wins); a leading '#' on the header is stripped and later '#' lines are skipped.
Result<std::unordered_map<std::string, int32_t>> read_labels(
    const std::string& path, std::initializer_list<std::string_view> label_columns) {
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader in, detail::LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  std::vector<std::string> header;
  while (in.next(line)) {
    if (line.empty()) continue;
    detail::split_csv(line[0] == '#' ? std::string_view(line).substr(1) : std::string_view(line), cells,
                      storage);
    header.assign(cells.begin(), cells.end());
    break;
  }
  const auto column = [&header](std::string_view name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t id_col = column("read_id");
  size_t label_col = header.size();
  for (std::string_view name : label_columns) {
    if (label_col == header.size()) label_col = column(name);
  }
  if (id_col == header.size() || label_col == header.size()) {
    return Status::invalid_argument(path + ": header needs read_id and a barcode column");
  }
  std::unordered_map<std::string, int32_t> labels;
  while (in.next(line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(in.line_no());
    detail::split_csv(line, cells, storage);
    if (cells.size() <= std::max(id_col, label_col)) return Status::invalid_argument(where + ": too few columns");
    ESCPOD_ASSIGN_OR_RETURN(labels[std::string(cells[id_col])], parse_barcode_label(cells[label_col], where));
  }
  if (!in.error().empty()) return Status::io_error(path + ": " + in.error());
  return labels;
}

}  // namespace

Result<CallScores> score_calls(const std::string& calls_csv, const std::string& truth_csv) {
  ESCPOD_ASSIGN_OR_RETURN(auto calls, read_labels(calls_csv, {kLabelColumn, kLegacyLabelColumn}));
  ESCPOD_ASSIGN_OR_RETURN(auto truth, read_labels(truth_csv, {kLabelColumn}));
  CallScores s;
  for (const auto& [id, t] : truth) {
    auto it = calls.find(id);
    if (it == calls.end()) {
      ++s.n_missing_calls;
      continue;
    }
    const int32_t c = it->second;
    ++s.n_reads;
    ++s.per_barcode[t].n_truth;
    if (c < 0) {
      ++s.n_unclassified;
    } else {
      ++s.per_barcode[c].n_called;
    }
    if (c == t && c >= 0) {
      ++s.per_barcode[c].n_correct;
      ++s.n_correct;
    }
  }
  return s;
}

std::string format_scores(const CallScores& s) {
  std::string out = fmt::format("{:<10} {:>8} {:>8} {:>8} {:>10} {:>8}\n", "barcode", "truth", "called",
                                "correct", "precision", "recall");
  for (const auto& [bc, x] : s.per_barcode) {
    if (bc < 0) continue;
    out += fmt::format("{:<10} {:>8} {:>8} {:>8} {:>10.3f} {:>8.3f}\n", fmt::format("BC{:02d}", bc),
                       x.n_truth, x.n_called, x.n_correct, x.precision(), x.recall());
  }
  const uint64_t classified = s.n_reads - s.n_unclassified;
  out += fmt::format("overall: {} reads, {} classified ({:.1f}%), precision {:.3f}, recall {:.3f}\n",
                     s.n_reads, classified,
                     s.n_reads ? 100.0 * static_cast<double>(classified) / static_cast<double>(s.n_reads) : 0.0,
                     classified ? static_cast<double>(s.n_correct) / static_cast<double>(classified) : 0.0,
                     s.n_reads ? static_cast<double>(s.n_correct) / static_cast<double>(s.n_reads) : 0.0);
  if (s.n_missing_calls) out += fmt::format("{} truth reads have no call\n", s.n_missing_calls);
  return out;
}

}  // namespace escpod::pipeline
