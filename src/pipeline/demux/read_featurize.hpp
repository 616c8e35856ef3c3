// The demultiplexer's per-read steps (docs/demux.md §1.1 steps 1-3), one implementation each:
// decode and calibrate a read's first samples, detect its boundaries, fingerprint it from its
// boundaries when the head reads fingerprints, and place what the head reads. The fused run
// (demux.cpp) calls them all. The stages, the fused run cut at a table boundary, call the same
// steps (demux_stages.cpp: detect, with the detector batched; fingerprint, on a boundaries
// table's positions; crf_basecall.cpp: decode and placement). The streaming classifier
// (live_classifier.cpp) calls them from detection on, on the chunks it is fed and calibrates. So
// a stage's row and a live decision on the whole read are the fused run's by construction.
// Internal to the layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "escpod/demux/head.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pipeline/ops/read_signals.hpp"
#include "escpod/signal/fingerprint.hpp"

namespace escpod::pipeline::detail {

using pipeline::DecodeScratch;  // per-worker buffers of decode_read_prefix

// Decodes the first min(num_samples, max_samples) samples of row `row` of `batch` (a batch of
// `file`) and calibrates them to pA (pipeline::decode_read_samples) into `pa`, resized to that count.
// True on success, `reason` untouched; otherwise `reason` says why: "read has no signal" (no
// samples or no signal rows) or "signal could not be decoded: <the reader's error>". Thread-safe
// for distinct scratch buffers; allocation-free once `scratch` and `pa` have held as many samples.
bool decode_read_prefix(const pod5::FileReader& file, const pod5::ReadBatch& batch, size_t row,
                        size_t max_samples, DecodeScratch& scratch, std::vector<float>& pa,
                        std::string& reason);

// Per-worker buffers of featurize_signal.
struct FeaturizeScratch {
  BoundaryDetector::Scratch detector;
  signal::FingerprintScratch fingerprint;
};

// The detect step's verdict on boundaries BoundaryDetector::detect or detect_batch found (the
// detect stage batches its reads): true when `bounds.success`; otherwise `reason` is "boundary
// detection failed: <bounds.fail_reason>".
bool boundaries_found(const Boundaries& bounds, std::string& reason);

// Detects the boundaries of `pa` (the read's first samples, calibrated; num_samples: its full
// length, as BoundaryDetector::detect takes them) into `bounds` (boundaries_found), then, when
// `want_fingerprint`, fingerprints it from them (fingerprint_signal). True when the read is ready
// for the head; otherwise `reason` says why not ("boundary detection failed: ...", "no
// fingerprint: ..."). Allocation-free once the buffers have held one read. `retries`: the
// detector's LLR retries as configured (every whole-read call), or none (a prefix).
bool featurize_signal(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                      bool want_fingerprint, std::span<const float> pa, uint64_t num_samples,
                      FeaturizeScratch& scratch, Boundaries& bounds, std::vector<double>& features,
                      std::string& reason, DetectRetries retries = DetectRetries::kAsConfigured);

// The barcode fingerprint of `pa` (the read's first samples, calibrated) from its boundaries
// (bounds.adapter_start and adapter_end, samples from the read start; detected, or read from a
// boundaries table) into `features` (params.barcode_num_events values); the events' lengths are
// left in scratch.dwells, the fingerprint's the last params.barcode_num_events of them. True on
// success; otherwise `reason` is "no fingerprint: <why>". Allocation-free once the buffers have
// held one read.
bool fingerprint_signal(const signal::FingerprintParams& params, std::span<const float> pa,
                        const Boundaries& bounds, signal::FingerprintScratch& scratch,
                        std::vector<double>& features, std::string& reason);

// What the head reads of a featurized read: the fingerprint, or the signal window
// [adapter_end + window_begin, adapter_end + window_end) clipped to `pa` (demux/head.hpp).
// The spans point into `pa` and `features`.
demux::PreparedRead prepare_for_head(const demux::HeadInput& input, std::span<const float> pa,
                                     uint64_t num_samples, const Boundaries& bounds,
                                     std::span<const double> features);

}  // namespace escpod::pipeline::detail
