#include "pipeline/demux/read_featurize.hpp"

#include <algorithm>
#include <cstddef>

namespace escpod::pipeline::detail {

bool decode_read_prefix(const pod5::FileReader& file, const pod5::ReadBatch& batch, size_t row,
                        size_t max_samples, DecodeScratch& scratch, std::vector<float>& pa,
                        std::string& reason) {
  const uint64_t n = batch.num_samples[row];
  if (n == 0 || batch.rows_of(row).empty()) {
    reason.assign("read has no signal");
    return false;
  }
  const size_t take = static_cast<size_t>(std::min<uint64_t>(n, max_samples));
  pa.resize(take);
  const Status s = decode_read_samples(file, batch.rows_of(row),
                                       {batch.calibration_offset[row], batch.calibration_scale[row]},
                                       SampleKind::kPicoamps, take, reinterpret_cast<std::byte*>(pa.data()), scratch);
  if (!s.is_ok()) {
    reason.assign("signal could not be decoded: ").append(s.message());
    return false;
  }
  return true;
}

bool boundaries_found(const Boundaries& bounds, std::string& reason) {
  if (bounds.success) return true;
  reason.assign("boundary detection failed: ").append(bounds.fail_reason);
  return false;
}

bool featurize_signal(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                      bool want_fingerprint, std::span<const float> pa, uint64_t num_samples,
                      FeaturizeScratch& scratch, Boundaries& bounds, std::vector<double>& features,
                      std::string& reason, DetectRetries retries) {
  bounds = detector.detect(pa, num_samples, scratch.detector, retries);
  if (!boundaries_found(bounds, reason)) return false;
  if (!want_fingerprint) return true;
  return fingerprint_signal(params, pa, bounds, scratch.fingerprint, features, reason);
}

bool fingerprint_signal(const signal::FingerprintParams& params, std::span<const float> pa,
                        const Boundaries& bounds, signal::FingerprintScratch& scratch,
                        std::vector<double>& features, std::string& reason) {
  const signal::SampleRange window =
      signal::barcode_window(static_cast<size_t>(bounds.adapter_start),
                             static_cast<size_t>(bounds.adapter_end), pa.size(), params);
  features.resize(params.barcode_num_events);
  const auto err =
      signal::barcode_fingerprint(pa.subspan(window.begin, window.size()), params, scratch, features);
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
