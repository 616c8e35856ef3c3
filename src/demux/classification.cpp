#include "escpod/demux/classification.hpp"

#include <cassert>

namespace escpod::demux {

std::string_view call_status_reason(CallStatus status) {
  switch (status) {
    case CallStatus::kClassified: return "";
    case CallStatus::kBelowThreshold: return "below threshold";
    case CallStatus::kNoise: return "noise class";
    case CallStatus::kInvalidInput: return "invalid fingerprint";
    case CallStatus::kNoFingerprint: return "no fingerprint";
    case CallStatus::kNoWindow: return "no usable barcode window";
  }
  return "unknown";
}

void apply_decision_rule(std::span<const int32_t> labels, std::span<const double> thresholds,
                         int32_t noise_index, TieRule tie, Classification& out) {
  out.detail = {};
  const auto& p = out.probabilities;
  const size_t k = p.size();
  assert(k >= 1 && labels.size() == k);
  assert(thresholds.empty() || thresholds.size() == k);
  size_t best = 0;
  for (size_t i = 1; i < k; ++i) {
    if (p[i] > p[best] || (tie == TieRule::kLastMax && p[i] == p[best])) best = i;
  }
  double second = -1.0;
  for (size_t i = 0; i < k; ++i) {
    if (i != best && p[i] > second) second = p[i];
  }
  out.class_index = static_cast<int32_t>(best);
  out.best_label = labels[best];
  out.confidence = k == 1 ? 1.0 : p[best] - second;
  out.threshold = thresholds.empty() ? 0.0 : thresholds[best];
  if (out.best_label == kUnclassifiedLabel || static_cast<int32_t>(best) == noise_index) {
    out.status = CallStatus::kNoise;
  } else if (out.confidence < out.threshold) {
    out.status = CallStatus::kBelowThreshold;
  } else {
    out.status = CallStatus::kClassified;
  }
  out.label = out.status == CallStatus::kClassified ? out.best_label : kUnclassifiedLabel;
}

}  // namespace escpod::demux
