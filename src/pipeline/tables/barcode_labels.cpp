#include "escpod/pipeline/tables/barcode_labels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline {

namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_name_char(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }

}  // namespace

Result<int32_t> parse_barcode_label(std::string_view label, std::string_view where) {
  if (equals_ignoring_case(label, "noise") || equals_ignoring_case(label, "unclassified") ||
      label == "-1") {
    return kNoiseLabel;
  }
  const size_t name_len = static_cast<size_t>(
      std::find_if_not(label.begin(), label.end(), is_name_char) - label.begin());
  const std::string_view number = label.substr(name_len);
  int32_t n = 0;
  const bool all_digits =
      !number.empty() && std::all_of(number.begin(), number.end(),
                                     [](char c) { return c >= '0' && c <= '9'; });
  if (all_digits) {
    const auto r = std::from_chars(number.data(), number.data() + number.size(), n);
    if (r.ec == std::errc() && n >= 1 && n <= kMaxBarcodeNumber) return n;
  }
  return Status::invalid_argument(fmt::format(
      "{}: label '{}' is not a barcode (a name ending in its number 1..{}: BC04, barcode4, 4) or "
      "the noise class (noise, unclassified, -1)",
      where, label, kMaxBarcodeNumber));
}

std::string label_name(int32_t label) {
  if (label < 0) return "unclassified";
  return fmt::format("BC{:02d}", label);
}

Result<std::map<std::string, int32_t>> read_training_labels(const std::filesystem::path& path) {
  const std::string file = path.string();
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader in, detail::LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  if (!in.next(line)) {
    if (!in.error().empty()) return Status::io_error(file + ": " + in.error());
    return Status::invalid_argument(file + ": empty labels CSV (needs a read_id,barcode header)");
  }
  detail::split_csv(!line.empty() && line[0] == '#' ? std::string_view(line).substr(1) : std::string_view(line),
                    cells, storage);
  const auto id_it = std::find(cells.begin(), cells.end(), "read_id");
  const auto label_it = std::find(cells.begin(), cells.end(), kLabelColumn);
  if (id_it == cells.end() || label_it == cells.end()) {
    return Status::invalid_argument(file + ": header must name the columns read_id and barcode, not '" +
                                    line + "'");
  }
  const auto id_col = static_cast<size_t>(id_it - cells.begin());
  const auto label_col = static_cast<size_t>(label_it - cells.begin());
  std::map<std::string, int32_t> labels;
  while (in.next(line)) {
    if (line.find_first_not_of(' ') == std::string::npos || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", file, in.line_no());
    detail::split_csv(line, cells, storage);
    if (cells.size() <= std::max(id_col, label_col)) {
      return Status::invalid_argument(where + ": too few columns");
    }
    auto id = pod5::ReadId::parse(cells[id_col]);
    if (!id.is_ok()) return id.status().with_context(where);
    ESCPOD_ASSIGN_OR_RETURN(const int32_t label, parse_barcode_label(cells[label_col], where));
    if (!labels.emplace(id->to_string(), label).second) {
      return Status::invalid_argument(where + ": read " + id->to_string() + " is listed twice");
    }
  }
  if (!in.error().empty()) return Status::io_error(file + ": " + in.error());
  if (labels.empty()) return Status::invalid_argument(file + ": no labelled reads");
  return labels;
}

Result<std::vector<std::pair<pod5::ReadId, std::string>>> read_call_labels(
    const std::filesystem::path& path) {
  return read_subset_csv(path.string(),
                         {std::string(kLabelColumn), std::string(kLegacyLabelColumn)},
                         "unclassified");
}

}  // namespace escpod::pipeline
