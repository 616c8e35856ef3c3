// The result of classifying one read's fingerprint, shared by every classifier head (DTW-SVM,
// GBM), and the one decision rule that turns class probabilities into a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace escpod::demux {

// Label of an unclassified read (WarpDemuX's -1; also the noise class's label).
inline constexpr int32_t kUnclassifiedLabel = -1;

enum class CallStatus : uint8_t {
  kClassified = 0,   // confident call of a barcode
  kBelowThreshold,   // best class is a barcode, but confidence < its threshold
  kNoise,            // best class is the model's noise class (or maps to label -1)
  kInvalidInput,     // fingerprint unusable (wrong length, NaN/inf); probabilities are empty
  kNoFingerprint,    // the read never got a fingerprint (set by callers, e.g. the pipeline)
  kNoWindow,         // a signal-window head (CRF) found no usable window for the read
};

// Fixed reason text for the report, e.g. "below threshold". Never allocates.
std::string_view call_status_reason(CallStatus status);

// A plain value. Reuse one per worker: classify() overwrites every field and only resizes
// `probabilities`, so after the first read no allocation happens.
struct Classification {
  int32_t label = kUnclassifiedLabel;  // final call: barcode number, or -1 (noise / not confident)
  int32_t best_label = kUnclassifiedLabel;  // label of the argmax class before thresholding
  int32_t class_index = -1;            // argmax class index, -1 when no probabilities exist
  double confidence = 0.0;             // top-1 minus top-2 probability (1 with a single class)
  double threshold = 0.0;              // threshold of the argmax class (0 when the model has none)
  CallStatus status = CallStatus::kInvalidInput;
  std::vector<double> probabilities;   // per class index, sums to 1 (empty for kInvalidInput)
  // Optional finer reason for an unclassified call (e.g. which CRF gate rejected it), replacing
  // call_status_reason(status) in reason(). Must point at static storage (a string literal): calls
  // are swapped between reads and scratch, and copying it would allocate per read. Empty = none.
  std::string_view detail;

  // The call for an unusable input: kInvalidInput, unclassified, no probabilities, no detail.
  // Keeps the probabilities' capacity (no allocation on reuse).
  void set_invalid_input() {
    status = CallStatus::kInvalidInput;
    label = best_label = kUnclassifiedLabel;
    class_index = -1;
    confidence = 0.0;
    threshold = 0.0;
    probabilities.clear();
    detail = {};
  }

  bool is_classified() const { return status == CallStatus::kClassified; }
  std::string_view reason() const {
    return detail.empty() || is_classified() ? call_status_reason(status) : detail;
  }
};

enum class TieRule : uint8_t {
  kFirstMax,  // numpy argmax / WarpDemuX: the first maximal index wins
  kLastMax,   // the Rust escapepod: the last maximal index wins
};

// Applies the decision rule to out.probabilities (already filled, size n_classes >= 1):
// class_index = argmax (ties per `tie`), best_label = labels[class_index], confidence = p(1) -
// p(2) (1.0 with one class), threshold = thresholds[class_index] or 0 when thresholds is empty;
// status kNoise if best_label == -1 or `noise_index` == class_index, else kBelowThreshold if
// confidence < threshold, else kClassified; label = best_label only when kClassified.
// Preconditions: labels.size() == probabilities.size(); thresholds empty or the same size.
void apply_decision_rule(std::span<const int32_t> labels, std::span<const double> thresholds,
                         int32_t noise_index, TieRule tie, Classification& out);

}  // namespace escpod::demux
