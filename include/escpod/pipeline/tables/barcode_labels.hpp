// Barcode labels as tables spell them, and the label tables demux training and scoring read:
// one strict parser, so a label that cannot be read is an error naming the file, the line and
// the label, never a silent noise read (docs/formats.md §3.3-§3.6 name the columns).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline {

// The classifier label of the noise class (reads that carry no barcode).
inline constexpr int32_t kNoiseLabel = -1;
// Barcode numbers run 1..kMaxBarcodeNumber (the DTW-SVM trainer's range).
inline constexpr int32_t kMaxBarcodeNumber = 999;

// The barcode number a label names. Accepted, case-insensitive:
//   noise class: "noise", "unclassified", "-1"                          -> kNoiseLabel
//   a barcode:   an optional name of letters and '_' followed by its number 1..999, leading
//                zeros allowed ("BC04", "bc4", "barcode04", "demo04", "4", "04") -> 4
// Anything else (empty, "BC", "BC4x", "BC-4", "4.0", "0", "BC1000", ...) is kInvalidArgument:
// "<where>: label '<label>' is not a barcode (...) or the noise class (...)". `where` names the
// file and line ("labels.csv:12"). Pure and thread-safe.
Result<int32_t> parse_barcode_label(std::string_view label, std::string_view where);

// The text of a classifier label: "BC" + at least two digits, or "unclassified" for the noise
// class (any negative label). parse_barcode_label reads it back.
std::string label_name(int32_t label);

// The column that holds a read's barcode label in a classifications, calls, truth or labels
// table. Every table escpod writes names it `barcode`; `predicted_barcode` (escapepod's classify
// table, and escpod's before the names were unified) is accepted when reading.
inline constexpr std::string_view kLabelColumn = "barcode";
inline constexpr std::string_view kLegacyLabelColumn = "predicted_barcode";

// read_id text (canonical dashed lowercase) -> barcode number from a labels CSV (plain or gzip):
// a header naming read_id and barcode (a leading '#' stripped; other columns ignored), '#' lines
// and blank lines skipped. Every label goes through parse_barcode_label; a bad read id, a bad or
// empty label, a short row or a read id listed twice is an error naming the file and line.
// kInvalidArgument also when the table has no rows.
Result<std::map<std::string, int32_t>> read_training_labels(const std::filesystem::path& path);

// (read id, label text) rows of a classifications or calls CSV (plain or gzip; the label column
// found as kLabelColumn, else kLegacyLabelColumn), in file order. An empty label cell reads as
// "unclassified". Errors name the file and line; a header with neither column names both.
Result<std::vector<std::pair<pod5::ReadId, std::string>>> read_call_labels(
    const std::filesystem::path& path);

}  // namespace escpod::pipeline
