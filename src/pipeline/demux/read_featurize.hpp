// The demultiplexer's per-read steps after the signal is calibrated: detect the boundaries,
// fingerprint when the head reads fingerprints, and place what the head reads (docs/demux.md
// §1.1 steps 2-3). One implementation for the fused run (demux.cpp, which decodes POD5 rows
// first) and the streaming classifier (live_classifier.cpp, which is fed chunks), so a live
// decision on the whole read is the fused run's call by construction. Internal to the layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "escpod/demux/head.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/signal/fingerprint.hpp"

namespace escpod::pipeline::detail {

// Per-worker buffers of featurize_signal.
struct FeaturizeScratch {
  BoundaryDetector::Scratch detector;
  signal::FingerprintScratch fingerprint;
};

// Detects the boundaries of `pa` (the read's first samples, calibrated; num_samples: its full
// length, as BoundaryDetector::detect takes them) into `bounds`, then, when `want_fingerprint`,
// its barcode fingerprint into `features` (params.barcode_num_events values). True when the read
// is ready for the head; otherwise `reason` says why not ("boundary detection failed: ...",
// "no fingerprint: ..."). Allocation-free once the buffers have held one read. `retries`: the
// detector's LLR retries as configured (every whole-read call), or none (a prefix).
bool featurize_signal(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                      bool want_fingerprint, std::span<const float> pa, uint64_t num_samples,
                      FeaturizeScratch& scratch, Boundaries& bounds, std::vector<double>& features,
                      std::string& reason, DetectRetries retries = DetectRetries::kAsConfigured);

// What the head reads of a featurized read: the fingerprint, or the signal window
// [adapter_end + window_begin, adapter_end + window_end) clipped to `pa` (demux/head.hpp).
// The spans point into `pa` and `features`.
demux::PreparedRead prepare_for_head(const demux::HeadInput& input, std::span<const float> pa,
                                     uint64_t num_samples, const Boundaries& bounds,
                                     std::span<const double> features);

}  // namespace escpod::pipeline::detail
