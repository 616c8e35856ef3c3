// Adapter / poly(A) boundary detection per read, as WarpDemuX 1.0 runs ADAPTed on RNA004
// (docs/demux.md §2, §3.0-§3.5): the boundary CNN, the validation
// checks, the short-read LLR poly(A) retry and the full LLR retry. Or, with DetectMethod::kLlr,
// escapepod's LLR-only detector (docs/demux.md §3.6).
//
// Usage: one BoundaryDetector (immutable after create, shared by all workers) and one Scratch per
// worker thread. detect() and detect_batch() give identical results; the batched form runs the
// CNN on several reads per network call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/signal/boundaries.hpp"

namespace escpod::nn {
class Model;
class Workspace;
}  // namespace escpod::nn

namespace escpod::pipeline {

// Every key of the model JSON's `signal_processing` block that the detector uses, with the
// RNA004 defaults of docs/demux.md §3.0 (see signal::BoundaryConfig for the fields), plus
// the LLR-only parameters of §3.6 (llr_only_*; CLI --min-adapter 200, --border-trim 50,
// --downscale 10).
using DetectorConfig = signal::BoundaryConfig;

// The boundary settings of a `signal_processing` block given as JSON text (tests and tools; the
// demultiplexer reads them typed with its model, demux::load_model_file). Parsed by
// demux::parse_signal_processing (missing keys keep the RNA004 defaults; unknown keys ignored);
// its errors, with kCorrupt reported as kInvalidArgument (the text is the caller's argument), and
// kUnsupported for the tRNA-only options.
Result<DetectorConfig> detector_config_from_json(const std::string& json_text_of_signal_processing_block,
                                                 const std::string& where);

struct Boundaries {
  // Adapter start (moved past the last open pore by the validation), adapter end, poly(A) end, in
  // samples from the read start. Filled on failure too (what the failing attempt found, as
  // WarpDemuX reports it; 0 = none), except for a "MAD normalization failed" or "Validate
  // boundaries failed" read, which carries zeros.
  int64_t adapter_start = 0, adapter_end = 0, polya_end = 0;
  std::vector<int64_t> polya_candidates;  // CNN: k = polya_cand_k values (0-padded); LLR: one
  bool success = false;
  std::string method;       // which attempt produced this answer: "cnn", "llr_short", "llr"
  std::string fail_reason;  // as WarpDemuX words it, empty on success
};

// Whether the CNN path may retry with the LLR fallbacks (§3.3, §3.4) after a failed validation.
// kPrimaryOnly is for a signal prefix (the live classifier's early attempts): the retries exist
// for the whole read, and on a prefix they cost more than the CNN's answer is worth.
enum class DetectRetries { kAsConfigured, kPrimaryOnly };

// The boundary CNN's arithmetic. kBfloat16: its convolutions take bfloat16 inputs and weights
// with float32 accumulation (nn::LoadOptions::bf16_conv) where the CPU has AVX512_BF16 (Zen 4,
// Cooper Lake, Sapphire Rapids), ~2x the float32 CNN; elsewhere float32 runs. Opt-in: the
// boundaries can move by a few samples on some reads (bench/RESULTS.md, issue 34, states the
// agreement measured on real reads), so calls are not guaranteed byte-identical to float32's.
enum class CnnPrecision { kFloat32, kBfloat16 };

// "float32" or "bfloat16" (the CLI's --cnn-precision, Python's cnn_precision); else
// kInvalidArgument.
Result<CnnPrecision> parse_cnn_precision(const std::string& name);

enum class DetectMethod {
  kCnn,  // ADAPTed: CNN primary, validation, with the LLR fallbacks as configured
  kLlr,  // escapepod's LLR-only detector (§3.6) on the whole read; no validation
};

class BoundaryDetector {
 public:
  // Per-worker state: the network workspace and buffers (grow to the largest batch, then stay).
  // Default-constructible and movable; not thread-safe: one per worker.
  struct Scratch {
    Scratch();
    ~Scratch();
    Scratch(Scratch&&) noexcept;
    Scratch& operator=(Scratch&&) noexcept;
    struct Impl;
    std::unique_ptr<Impl> impl;
  };

  // kCnn needs the ONNX file of the boundary CNN (input [B,1,L], output [B,2,L_out]; verified by
  // a shape probe here) and cfg.cnn_detect; kLlr ignores `cnn_onnx` (may be empty).
  // `expected_sha256` (a CRF bundle's pin; empty: none): the file's bytes must have this SHA-256,
  // checked on the bytes the model is loaded from (the file is read once). `precision`: the
  // CNN's arithmetic (kLlr ignores it).
  // Errors: the model's load errors, kInvalidArgument for a model of the wrong shape or an empty
  // path with kCnn, kUnsupported for a configuration without the CNN under kCnn, kCorrupt for a
  // file whose SHA-256 is not the pinned one.
  static Result<BoundaryDetector> create(const DetectorConfig& cfg, DetectMethod method,
                                         const std::filesystem::path& cnn_onnx,
                                         const std::string& expected_sha256 = {},
                                         CnnPrecision precision = CnnPrecision::kFloat32);

  BoundaryDetector(BoundaryDetector&&) noexcept;
  BoundaryDetector& operator=(BoundaryDetector&&) noexcept;
  ~BoundaryDetector();

  const DetectorConfig& config() const { return m_cfg; }
  DetectMethod method() const { return m_method; }

  // How many calibrated samples detect() needs from the start of each read: 11 500 for RNA004
  // under kCnn (cfg.sig_preload_size()); SIZE_MAX under kLlr (the whole read).
  size_t preload_samples() const;

  Scratch make_scratch() const;

  // pa: the read's first min(num_samples, preload_samples()) samples in pA (calibrated as
  // signal::calibrate_to_pa does); num_samples: the read's full length. A shorter `pa` is
  // accepted (the missing samples count as absent). Never fails: problems become
  // success = false with a reason (an internal network error: "CNN inference failed: ...").
  Boundaries detect(std::span<const float> pa, uint64_t num_samples, Scratch& scratch,
                    DetectRetries retries = DetectRetries::kAsConfigured) const;

  // Same for several reads (pas[i], num_samples[i] -> out[i]); the CNN runs on up to 32 reads per
  // call (one with CnnPrecision::kBfloat16). Results are identical to detect() read by read. Sizes must match (asserted).
  void detect_batch(std::span<const std::span<const float>> pas,
                    std::span<const uint64_t> num_samples, Scratch& scratch,
                    std::span<Boundaries> out,
                    DetectRetries retries = DetectRetries::kAsConfigured) const;

  // kCnn only: the part of detect() after the network: validation of the CNN's decoded
  // boundaries (adapter end and poly(A) candidates in samples, as signal::cnn_decode returns
  // them) and the LLR fallbacks. For a CNN evaluated elsewhere (a GPU batch) and for tests.
  // `pa` and `num_samples` as for detect().
  Boundaries finish(std::span<const float> pa, uint64_t num_samples, int64_t cnn_adapter_end,
                    std::span<const int64_t> cnn_polya_candidates, Scratch& scratch,
                    DetectRetries retries = DetectRetries::kAsConfigured) const;

 private:
  BoundaryDetector() = default;
  std::span<const float> clip_signal(std::span<const float> pa, uint64_t num_samples) const;

  DetectorConfig m_cfg;
  DetectMethod m_method = DetectMethod::kCnn;
  std::shared_ptr<const nn::Model> m_model;
  int64_t m_input_len = 0;
  int64_t m_output_len = 0;
  size_t m_max_batch = 1;  // reads per network call
};

}  // namespace escpod::pipeline
