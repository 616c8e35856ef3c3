// Scoring barcode calls against ground truth (simulated reads, or any labelled set).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "escpod/core/status.hpp"

namespace escpod::pipeline {

struct LabelScore {
  uint64_t n_truth = 0;   // reads whose true barcode is this one
  uint64_t n_called = 0;  // reads called this barcode
  uint64_t n_correct = 0;
  double precision() const { return n_called ? static_cast<double>(n_correct) / static_cast<double>(n_called) : 0.0; }
  double recall() const { return n_truth ? static_cast<double>(n_correct) / static_cast<double>(n_truth) : 0.0; }
};

struct CallScores {
  std::map<int32_t, LabelScore> per_barcode;  // by barcode number
  uint64_t n_reads = 0;          // reads in both files
  uint64_t n_unclassified = 0;   // called unclassified
  uint64_t n_correct = 0;
  uint64_t n_missing_calls = 0;  // truth reads without a call row
};

// Joins a calls CSV (read_id + barcode, or predicted_barcode) with a truth CSV (read_id +
// barcode; '#' comment lines skipped) on read_id and scores each barcode. Labels of both are
// read with parse_barcode_label: one it cannot read is an error naming file, line and label.
Result<CallScores> score_calls(const std::string& calls_csv, const std::string& truth_csv);

// A fixed-width table of the scores (per barcode and overall).
std::string format_scores(const CallScores& s);

}  // namespace escpod::pipeline
