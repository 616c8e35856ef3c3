// BoundaryDetector: ADAPTed's combined CNN detection with validation and LLR fallbacks
// (docs/demux.md §3.1-§3.4), or escapepod's LLR-only detector (§3.6).
#include "escpod/pipeline/detect/boundary_detector.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "escpod/demux/crf_model.hpp"  // sha256_hex (a bundle's pinned CNN)
#include "escpod/demux/model_file.hpp"
#include "escpod/nn/model.hpp"

namespace escpod::pipeline {

namespace {
constexpr size_t kMaxBatch = 32;
}  // namespace

Result<DetectorConfig> detector_config_from_json(const std::string& text, const std::string& where) {
  // The one parser of the block (demux::parse_signal_processing); the text is the caller's
  // argument, so a bad block is kInvalidArgument here (kUnsupported stays).
  auto parsed = demux::parse_signal_processing(text, where);
  if (!parsed.is_ok()) {
    const Status& s = parsed.status();
    if (s.code() == StatusCode::kCorrupt) return Status::invalid_argument(s.message());
    return s;
  }
  return parsed->boundaries;
}

// ---- detector ------------------------------------------------------------------------------

struct BoundaryDetector::Scratch::Impl {
  std::unique_ptr<nn::Workspace> ws;
  signal::BoundaryWork work;
  std::vector<float> input, output;
  std::vector<float> norm;
  std::vector<int64_t> cands;
  std::vector<int64_t> a_ends;
  std::vector<std::vector<int64_t>> batch_cands;
};

BoundaryDetector::Scratch::Scratch() : impl(std::make_unique<Impl>()) {
  impl->ws = std::make_unique<nn::Workspace>(1);
}
BoundaryDetector::Scratch::~Scratch() = default;
BoundaryDetector::Scratch::Scratch(Scratch&&) noexcept = default;
BoundaryDetector::Scratch& BoundaryDetector::Scratch::operator=(Scratch&&) noexcept = default;

BoundaryDetector::BoundaryDetector(BoundaryDetector&&) noexcept = default;
BoundaryDetector& BoundaryDetector::operator=(BoundaryDetector&&) noexcept = default;
BoundaryDetector::~BoundaryDetector() = default;

namespace {

// The boundary CNN from its file; with a pin, checked against its SHA-256 on the same bytes.
Result<nn::Model> load_cnn(const std::filesystem::path& onnx, const std::string& expected_sha256,
                           CnnPrecision precision) {
  nn::LoadOptions options;
  options.bf16_conv = precision == CnnPrecision::kBfloat16;
  if (expected_sha256.empty()) return nn::Model::load(onnx, options);
  std::ifstream in(onnx, std::ios::binary);
  if (!in) return Status::not_found(onnx.string() + ": cannot open the pinned boundary CNN");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::io_error(onnx.string() + ": cannot read the pinned boundary CNN");
  const std::string got = demux::sha256_hex(bytes);
  if (got != expected_sha256) {
    return Status::corrupt("pinned boundary CNN " + onnx.string() + " has sha256 " + got + ", the bundle pins " +
                           expected_sha256);
  }
  return nn::Model::load_from_bytes(bytes, onnx.string(), options);
}

}  // namespace

Result<CnnPrecision> parse_cnn_precision(const std::string& name) {
  if (name == "float32") return CnnPrecision::kFloat32;
  if (name == "bfloat16") return CnnPrecision::kBfloat16;
  return Status::invalid_argument("CNN precision '" + name + "': expected float32 or bfloat16");
}

Result<BoundaryDetector> BoundaryDetector::create(const DetectorConfig& cfg, DetectMethod method,
                                                  const std::filesystem::path& cnn_onnx,
                                                  const std::string& expected_sha256,
                                                  CnnPrecision precision) {
  BoundaryDetector d;
  d.m_cfg = cfg;
  d.m_method = method;
  if (method == DetectMethod::kLlr) return d;
  if (!cfg.cnn_detect) {
    return Status::unsupported(
        "boundary detector: the configuration does not use the CNN (cnn_boundaries.cnn_detect "
        "= false); only the CNN primary path is implemented");
  }
  if (cnn_onnx.empty()) {
    return Status::invalid_argument("boundary detector: the CNN method needs an ONNX model");
  }
  ESCPOD_ASSIGN_OR_RETURN(nn::Model model, load_cnn(cnn_onnx, expected_sha256, precision));
  d.m_input_len = cfg.cnn_input_len();
  const std::array<int64_t, 3> shape{1, 1, d.m_input_len};
  ESCPOD_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, model.output_shape(shape));
  if (out_shape.size() != 3 || out_shape[0] != 1 || out_shape[1] != 2 || out_shape[2] < 1) {
    return Status::invalid_argument(cnn_onnx.string() +
                                    ": boundary CNN must map [B,1,L] to [B,2,L_out]");
  }
  d.m_output_len = out_shape[2];
  // oneDNN's bfloat16 convolutions sum in an order that depends on the batch's shape, so one read
  // per network call keeps a read's boundaries independent of its neighbours (detect() ==
  // detect_batch(), the stages == the fused run); float32 batches are exact either way.
  d.m_max_batch = precision == CnnPrecision::kFloat32 ? kMaxBatch : 1;
  // A dummy run proves the plan executes.
  nn::Workspace ws(1);
  std::vector<float> in(static_cast<size_t>(d.m_input_len), 0.0f);
  std::vector<float> out(static_cast<size_t>(2 * d.m_output_len));
  ESCPOD_RETURN_IF_ERROR(model.run(ws, in, shape, out));
  d.m_model = std::make_shared<const nn::Model>(std::move(model));
  return d;
}

size_t BoundaryDetector::preload_samples() const {
  if (m_method == DetectMethod::kLlr) return std::numeric_limits<size_t>::max();
  return static_cast<size_t>(m_cfg.sig_preload_size());
}

BoundaryDetector::Scratch BoundaryDetector::make_scratch() const { return Scratch(); }

std::span<const float> BoundaryDetector::clip_signal(std::span<const float> pa,
                                                     uint64_t num_samples) const {
  const uint64_t lim = std::min<uint64_t>(num_samples, preload_samples());
  return pa.first(static_cast<size_t>(std::min<uint64_t>(lim, pa.size())));
}

Boundaries BoundaryDetector::finish(std::span<const float> pa, uint64_t num_samples,
                                    int64_t adapter_end,
                                    std::span<const int64_t> candidates_in,
                                    Scratch& scratch_outer, DetectRetries retries) const {
  if (!scratch_outer.impl) scratch_outer = Scratch();  // a moved-from Scratch
  Scratch::Impl& scratch = *scratch_outer.impl;
  const std::span<const float> sig = clip_signal(pa, num_samples);
  const std::vector<int64_t> candidates(candidates_in.begin(), candidates_in.end());
  const DetectorConfig& c = m_cfg;
  signal::BoundaryWork& w = scratch.work;
  auto from = [](const signal::Validation& v, const std::vector<int64_t>& cands,
                 const char* method) {
    Boundaries b;
    b.success = v.success;
    b.method = method;
    b.fail_reason = v.fail_reason;
    if (!v.exception) {
      b.adapter_start = v.adapter_start;
      b.adapter_end = v.adapter_end;
      b.polya_end = v.polya_end;
      b.polya_candidates = cands;
    }
    return b;
  };
  signal::Validation v = signal::validate_boundaries(sig, adapter_end, candidates, c, w);
  Boundaries best = from(v, candidates, "cnn");
  if (v.success || v.exception || retries == DetectRetries::kPrimaryOnly) return best;

  // Fallbacks work on the winsorised, MAD-normalised first min(num_samples, max_obs_trace).
  const size_t n_norm = std::min<size_t>(
      sig.size(), static_cast<size_t>(std::min<uint64_t>(num_samples,
                                                         static_cast<uint64_t>(c.max_obs_trace))));
  if (!signal::winsor_mad_normalise(sig.first(n_norm), c.sig_norm_outlier_thresh, scratch.norm,
                                    w)) {
    Boundaries b;
    b.method = "cnn";
    b.fail_reason = "MAD normalization failed: scale is 0";
    return b;
  }
  const int64_t c0 = candidates.empty() ? 0 : candidates[0];
  if (adapter_end > 0 && c0 > 0 && c0 - adapter_end > 1000 &&
      num_samples < static_cast<uint64_t>(2 * c.max_obs_adapter) &&
      c.fallback_to_llr_short_reads) {
    const auto nn_ = static_cast<int64_t>(scratch.norm.size());
    const int64_t a = std::min(adapter_end, nn_), b = std::min(c0, nn_);
    std::span<const float> window;
    if (b > a) {
      window = std::span<const float>(scratch.norm).subspan(static_cast<size_t>(a),
                                                            static_cast<size_t>(b - a));
    }
    const int64_t q = signal::llr_short_read_polya(window, c, w);
    if (q > 0) {
      const std::vector<int64_t> cands{q * std::max<int64_t>(c.downscale_factor, 1) + adapter_end};
      v = signal::validate_boundaries(sig, adapter_end, cands, c, w);
      best = from(v, cands, "llr_short");
    }
  }
  if (!best.success && c.fallback_to_llr) {
    signal::block_means_f32(scratch.norm, c.downscale_factor, /*pad_partial=*/true, w.f2);
    size_t n_nan = 0;
    for (float x : w.f2) n_nan += std::isnan(x) ? 1 : 0;
    std::vector<double> s(w.f2.begin(), w.f2.end() - static_cast<std::ptrdiff_t>(n_nan));
    const signal::LlrBoundaries lb = signal::llr_detect_downscaled(s, c, w);
    std::vector<int64_t> cands;
    if (lb.polya_end > 0) cands.push_back(lb.polya_end);
    const signal::Validation v2 = signal::validate_boundaries(sig, lb.adapter_end, cands, c, w);
    if (v2.success) best = from(v2, cands, "llr");
  }
  return best;
}

Boundaries BoundaryDetector::detect(std::span<const float> pa, uint64_t num_samples,
                                    Scratch& scratch, DetectRetries retries) const {
  Boundaries b;
  const std::span<const float> one[1] = {pa};
  const uint64_t n[1] = {num_samples};
  detect_batch(one, n, scratch, std::span<Boundaries>(&b, 1), retries);
  return b;
}

void BoundaryDetector::detect_batch(std::span<const std::span<const float>> pas,
                                    std::span<const uint64_t> num_samples, Scratch& scratch_outer,
                                    std::span<Boundaries> out, DetectRetries retries) const {
  assert(pas.size() == num_samples.size() && pas.size() == out.size());
  if (!scratch_outer.impl) scratch_outer = Scratch();  // a moved-from Scratch
  Scratch::Impl& scratch = *scratch_outer.impl;
  auto sig_of = [&](size_t i) { return clip_signal(pas[i], num_samples[i]); };
  if (m_method == DetectMethod::kLlr) {
    for (size_t i = 0; i < pas.size(); ++i) {
      const signal::LlrOnlyResult r =
          signal::llr_only_detect(sig_of(i), m_cfg.llr_only_min_adapter, m_cfg.llr_only_border_trim,
                                  m_cfg.llr_only_downscale, scratch.work);
      Boundaries& b = out[i];
      b = Boundaries{};
      b.method = "llr";
      b.adapter_start = r.adapter_start;
      b.adapter_end = r.adapter_end;
      b.success = r.adapter_end > 0;
      if (!b.success) b.fail_reason = "No adapter detected (primary)";
    }
    return;
  }
  const auto L = static_cast<size_t>(m_input_len);
  const auto Lo = static_cast<size_t>(m_output_len);
  for (size_t first = 0; first < pas.size(); first += m_max_batch) {
    const size_t nb = std::min(m_max_batch, pas.size() - first);
    scratch.input.resize(nb * L);
    scratch.output.resize(nb * 2 * Lo);
    for (size_t j = 0; j < nb; ++j) {
      signal::cnn_prepare_input(sig_of(first + j), m_cfg,
                                std::span<float>(scratch.input).subspan(j * L, L), scratch.work);
    }
    const std::array<int64_t, 3> shape{static_cast<int64_t>(nb), 1, m_input_len};
    const Status st = m_model->run(*scratch.ws, scratch.input, shape, scratch.output);
    for (size_t j = 0; j < nb; ++j) {
      Boundaries& b = out[first + j];
      if (!st.is_ok()) {
        b = Boundaries{};
        b.method = "cnn";
        b.fail_reason = "CNN inference failed: " + st.to_string();
        continue;
      }
      const std::span<const float> o(scratch.output.data() + j * 2 * Lo, 2 * Lo);
      const int64_t a = signal::cnn_decode(o.first(Lo), o.subspan(Lo, Lo), m_cfg, scratch.cands,
                                           scratch.work);
      b = finish(pas[first + j], num_samples[first + j], a, scratch.cands, scratch_outer, retries);
    }
  }
}

}  // namespace escpod::pipeline
