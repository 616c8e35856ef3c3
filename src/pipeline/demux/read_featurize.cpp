#include "pipeline/demux/read_featurize.hpp"

#include <algorithm>

namespace escpod::pipeline::detail {

bool featurize_signal(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                      bool want_fingerprint, std::span<const float> pa, uint64_t num_samples,
                      FeaturizeScratch& scratch, Boundaries& bounds, std::vector<double>& features,
                      std::string& reason, DetectRetries retries) {
  bounds = detector.detect(pa, num_samples, scratch.detector, retries);
  if (!bounds.success) {
    reason.assign("boundary detection failed: ").append(bounds.fail_reason);
    return false;
  }
  if (!want_fingerprint) return true;
  const signal::SampleRange window =
      signal::barcode_window(static_cast<size_t>(bounds.adapter_start),
                             static_cast<size_t>(bounds.adapter_end), pa.size(), params);
  features.resize(params.barcode_num_events);
  const auto err = signal::barcode_fingerprint(pa.subspan(window.begin, window.size()), params,
                                               scratch.fingerprint, features);
  if (err != signal::FingerprintError::kNone) {
    reason.assign("no fingerprint: ").append(signal::fingerprint_error_reason(err));
    return false;
  }
  return true;
}

demux::PreparedRead prepare_for_head(const demux::HeadInput& input, std::span<const float> pa,
                                     uint64_t num_samples, const Boundaries& bounds,
                                     std::span<const double> features) {
  demux::PreparedRead r;
  r.pa = pa;
  r.num_samples = num_samples;
  r.adapter_start = bounds.adapter_start;
  r.adapter_end = bounds.adapter_end;
  if (input.kind == demux::HeadInputKind::kFingerprint) {
    r.fingerprint = features;
    return r;
  }
  const auto size = static_cast<int64_t>(pa.size());
  const int64_t begin = std::clamp<int64_t>(r.adapter_end + input.window_begin, 0, size);
  const int64_t end = std::clamp<int64_t>(r.adapter_end + input.window_end, begin, size);
  r.window = pa.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
  r.window_start = begin;
  return r;
}

}  // namespace escpod::pipeline::detail
