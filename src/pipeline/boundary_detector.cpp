// BoundaryDetector: ADAPTed's combined CNN detection with validation and LLR fallbacks
// (shared/docs/warpdemux-algorithm.md 3.1-3.4), or escapepod's LLR-only detector (4.1).
#include "escpod/pipeline/boundary_detector.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "escpod/nn/model.hpp"

namespace escpod::pipeline {

namespace {

using Json = nlohmann::json;
constexpr size_t kMaxBatch = 32;

Status bad(const std::string& where, const std::string& what) {
  return Status::invalid_argument(where + ": signal_processing: " + what);
}

// Reads optional key `key` of section object `sec` into `out`.
Status get_int(const Json& sec, const char* section, const char* key, int64_t& out,
               const std::string& where) {
  auto it = sec.find(key);
  if (it == sec.end() || it->is_null()) return Status::ok();
  if (it->is_number_integer() || it->is_number_unsigned()) {
    out = it->get<int64_t>();
    return Status::ok();
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (v == std::floor(v) && std::fabs(v) < 9e15) {
      out = static_cast<int64_t>(v);
      return Status::ok();
    }
  }
  return bad(where, std::string(section) + "." + key + " must be an integer");
}

Status get_double(const Json& sec, const char* section, const char* key, double& out,
                  const std::string& where) {
  auto it = sec.find(key);
  if (it == sec.end() || it->is_null()) return Status::ok();
  if (!it->is_number()) return bad(where, std::string(section) + "." + key + " must be a number");
  out = it->get<double>();
  return Status::ok();
}

Status get_bool(const Json& sec, const char* section, const char* key, bool& out,
                const std::string& where) {
  auto it = sec.find(key);
  if (it == sec.end() || it->is_null()) return Status::ok();
  if (!it->is_boolean()) return bad(where, std::string(section) + "." + key + " must be a boolean");
  out = it->get<bool>();
  return Status::ok();
}

Status get_range(const Json& sec, const char* section, const char* key, signal::Range& out,
                 const std::string& where) {
  auto it = sec.find(key);
  if (it == sec.end()) return Status::ok();
  if (it->is_null()) {  // None: unbounded
    out = signal::Range{};
    return Status::ok();
  }
  if (!it->is_array() || it->size() != 2) {
    return bad(where, std::string(section) + "." + key + " must be [lo, hi]");
  }
  signal::Range r;
  for (size_t i = 0; i < 2; ++i) {
    const Json& v = (*it)[i];
    if (v.is_null()) continue;
    if (!v.is_number()) {
      return bad(where, std::string(section) + "." + key + " must hold numbers or null");
    }
    (i == 0 ? r.lo : r.hi) = v.get<double>();
  }
  out = r;
  return Status::ok();
}

const Json& section_of(const Json& root, const char* name) {
  static const Json kEmpty = Json::object();
  auto it = root.find(name);
  if (it == root.end() || !it->is_object()) return kEmpty;
  return *it;
}

}  // namespace

Result<DetectorConfig> detector_config_from_json(const std::string& text, const std::string& where) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const std::exception& e) {
    return bad(where, std::string("malformed JSON: ") + e.what());
  }
  if (!root.is_object()) return bad(where, "not a JSON object");
  DetectorConfig c;
  {
    const Json& s = section_of(root, "core");
    ESCPOD_RETURN_IF_ERROR(get_int(s, "core", "min_obs_adapter", c.min_obs_adapter, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, "core", "max_obs_adapter", c.max_obs_adapter, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, "core", "min_obs_polya", c.min_obs_polya, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, "core", "downscale_factor", c.downscale_factor, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, "core", "max_obs_trace", c.max_obs_trace, where));
    ESCPOD_RETURN_IF_ERROR(
        get_double(s, "core", "sig_norm_outlier_thresh", c.sig_norm_outlier_thresh, where));
  }
  {
    const Json& s = section_of(root, "cnn_boundaries");
    const char* n = "cnn_boundaries";
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "cnn_detect", c.cnn_detect, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "polya_cand_k", c.polya_cand_k, where));
    ESCPOD_RETURN_IF_ERROR(
        get_bool(s, n, "fallback_to_llr_short_reads", c.fallback_to_llr_short_reads, where));
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "fallback_to_llr", c.fallback_to_llr, where));
  }
  {
    const Json& s = section_of(root, "llr_boundaries");
    const char* n = "llr_boundaries";
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "llr_detect", c.llr_detect, where));
    ESCPOD_RETURN_IF_ERROR(
        get_double(s, n, "adapter_peak_prominence", c.adapter_peak_prominence, where));
    ESCPOD_RETURN_IF_ERROR(
        get_double(s, n, "adapter_peak_rel_height", c.adapter_peak_rel_height, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "adapter_peak_width", c.adapter_peak_width, where));
  }
  {
    const Json& s = section_of(root, "mvs_polya");
    const char* n = "mvs_polya";
    bool overwrite = false;
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "mvs_detect_check", c.mvs_detect_check, where));
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "mvs_detect_overwrite", overwrite, where));
    if (overwrite) {
      return Status::unsupported(where + ": signal_processing: mvs_polya.mvs_detect_overwrite "
                                         "= true is not implemented");
    }
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "search_window", c.search_window, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "pA_mean_window", c.pA_mean_window, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "pA_mean_range", c.pA_mean_range, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "pA_var_window", c.pA_var_window, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "pA_var_range", c.pA_var_range, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "median_shift_window", c.median_shift_window, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "median_shift_range", c.median_shift_range, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "polyA_window", c.polyA_window, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "polyA_med_range", c.polyA_med_range, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "polyA_local_range", c.polyA_local_range, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "pA_mean_adapter_med_scale_range",
                                     c.pA_mean_adapter_med_scale_range, where));
  }
  {
    const Json& s = section_of(root, "real_range");
    const char* n = "real_range";
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "detect_open_pores", c.detect_open_pores, where));
    ESCPOD_RETURN_IF_ERROR(get_bool(s, n, "real_signal_check", c.real_signal_check, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "mean_window", c.mean_window, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "mean_start_range", c.mean_start_range, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "mean_end_range", c.mean_end_range, where));
    ESCPOD_RETURN_IF_ERROR(get_int(s, n, "max_obs_local_range", c.max_obs_local_range, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "local_range", c.local_range, where));
    ESCPOD_RETURN_IF_ERROR(get_range(s, n, "adapter_mad_range", c.adapter_mad_range, where));
  }
  {
    bool on = false;
    ESCPOD_RETURN_IF_ERROR(
        get_bool(section_of(root, "med_shift"), "med_shift", "detect_med_shift", on, where));
    if (on) {
      return Status::unsupported(where +
                                 ": signal_processing: med_shift.detect_med_shift = true is not "
                                 "implemented");
    }
    on = false;
    ESCPOD_RETURN_IF_ERROR(get_bool(section_of(root, "rna_start_peak"), "rna_start_peak",
                                    "detect_rna_start_peak", on, where));
    if (on) {
      return Status::unsupported(where +
                                 ": signal_processing: rna_start_peak.detect_rna_start_peak = true "
                                 "(tRNA configuration) is not implemented");
    }
  }
  if (c.downscale_factor < 1 || c.min_obs_adapter < 0 || c.max_obs_adapter < c.min_obs_adapter ||
      c.max_obs_trace < 1 || c.pA_mean_window < 1 || c.pA_var_window < 1 || c.mean_window < 1 ||
      c.median_shift_window < 1 || c.sig_preload_size() <= c.min_obs_adapter) {
    return bad(where, "inconsistent core/window values");
  }
  {
    int64_t derived = -1;
    ESCPOD_RETURN_IF_ERROR(
        get_int(section_of(root, "derived"), "derived", "sig_preload_size", derived, where));
    if (derived >= 0 && derived != c.sig_preload_size()) {
      return bad(where, "derived.sig_preload_size " + std::to_string(derived) +
                            " disagrees with the value computed from the other keys (" +
                            std::to_string(c.sig_preload_size()) + ")");
    }
  }
  return c;
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

Result<BoundaryDetector> BoundaryDetector::create(const DetectorConfig& cfg, DetectMethod method,
                                                  const std::filesystem::path& cnn_onnx) {
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
  ESCPOD_ASSIGN_OR_RETURN(nn::Model model, nn::Model::load(cnn_onnx));
  d.m_input_len = cfg.cnn_input_len();
  const std::array<int64_t, 3> shape{1, 1, d.m_input_len};
  ESCPOD_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, model.output_shape(shape));
  if (out_shape.size() != 3 || out_shape[0] != 1 || out_shape[1] != 2 || out_shape[2] < 1) {
    return Status::invalid_argument(cnn_onnx.string() +
                                    ": boundary CNN must map [B,1,L] to [B,2,L_out]");
  }
  d.m_output_len = out_shape[2];
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
                                    Scratch& scratch_outer) const {
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
  if (v.success || v.exception) return best;

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
                                    Scratch& scratch) const {
  Boundaries b;
  const std::span<const float> one[1] = {pa};
  const uint64_t n[1] = {num_samples};
  detect_batch(one, n, scratch, std::span<Boundaries>(&b, 1));
  return b;
}

void BoundaryDetector::detect_batch(std::span<const std::span<const float>> pas,
                                    std::span<const uint64_t> num_samples, Scratch& scratch_outer,
                                    std::span<Boundaries> out) const {
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
  for (size_t first = 0; first < pas.size(); first += kMaxBatch) {
    const size_t nb = std::min(kMaxBatch, pas.size() - first);
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
      b = finish(pas[first + j], num_samples[first + j], a, scratch.cands, scratch_outer);
    }
  }
}

}  // namespace escpod::pipeline
