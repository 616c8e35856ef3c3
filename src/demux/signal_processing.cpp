// The one parser and serializer of the `signal_processing` block (model_file.hpp).
#include <cmath>
#include <limits>

#include "escpod/demux/model_file.hpp"
#include "json_fields.hpp"

namespace escpod::demux {

using detail::Json;

struct SignalProcessing::Source {
  Json block;  // the object as read (ordered)
};

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Reads the keys of one section of the block. Missing or null keys keep the value they have (the
// RNA004 defaults); a present key of the wrong type is an error naming its JSON path.
class SectionReader {
 public:
  SectionReader(const Json& root, const char* section, const std::string& where)
      : m_fields(where), m_section(section) {
    auto it = root.find(section);
    if (it != root.end() && it->is_object()) m_obj = &*it;
  }

  Status integer(const char* key, int64_t& out) const {
    const Json* v = find(key);
    if (!v) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(out, m_fields.integer(*v, path(key)));
    return Status::ok();
  }
  Status count(const char* key, size_t& out) const {
    int64_t x = static_cast<int64_t>(out);
    ESCPOD_RETURN_IF_ERROR(integer(key, x));
    if (x < 0) return m_fields.error(path(key) + " must not be negative");
    out = static_cast<size_t>(x);
    return Status::ok();
  }
  Status number(const char* key, double& out) const {
    const Json* v = find(key);
    if (!v) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(out, m_fields.number(*v, path(key)));
    return Status::ok();
  }
  Status boolean(const char* key, bool& out) const {
    const Json* v = find(key);
    if (!v) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(out, m_fields.boolean(*v, path(key)));
    return Status::ok();
  }
  Status string(const char* key, std::string& out) const {
    const Json* v = find(key);
    if (!v) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(out, m_fields.string(*v, path(key)));
    return Status::ok();
  }
  // [lo, hi] with null for an unbounded side; a null range is unbounded on both sides.
  Status range(const char* key, signal::Range& out) const {
    if (!m_obj) return Status::ok();
    auto it = m_obj->find(key);
    if (it == m_obj->end()) return Status::ok();
    if (it->is_null()) {
      out = signal::Range{};
      return Status::ok();
    }
    if (!it->is_array() || it->size() != 2) return m_fields.error(path(key) + " must be [lo, hi]");
    signal::Range r;
    for (size_t i = 0; i < 2; ++i) {
      const Json& v = (*it)[i];
      if (v.is_null()) continue;
      ESCPOD_ASSIGN_OR_RETURN(double x, m_fields.number(v, path(key) + "[" + std::to_string(i) + "]"));
      (i == 0 ? r.lo : r.hi) = x;
    }
    out = r;
    return Status::ok();
  }
  Status refuse_true(const char* key, const char* what) const {
    bool on = false;
    ESCPOD_RETURN_IF_ERROR(boolean(key, on));
    if (!on) return Status::ok();
    return Status::unsupported(m_fields.file() + ": " + path(key) + " = true (" + what +
                               ") is not implemented");
  }
  std::string path(const char* key) const {
    return std::string("signal_processing.") + m_section + "." + key;
  }
  const detail::JsonFields& fields() const { return m_fields; }

 private:
  const Json* find(const char* key) const {
    return m_obj ? detail::JsonFields::optional_member(*m_obj, key) : nullptr;
  }
  detail::JsonFields m_fields;
  const char* m_section;
  const Json* m_obj = nullptr;
};

Status read_core(const Json& root, const std::string& where, SignalProcessing& s) {
  const SectionReader r(root, "core", where);
  signal::BoundaryConfig& c = s.boundaries;
  ESCPOD_RETURN_IF_ERROR(r.integer("min_obs_adapter", c.min_obs_adapter));
  ESCPOD_RETURN_IF_ERROR(r.integer("max_obs_adapter", c.max_obs_adapter));
  ESCPOD_RETURN_IF_ERROR(r.integer("min_obs_polya", c.min_obs_polya));
  ESCPOD_RETURN_IF_ERROR(r.integer("downscale_factor", c.downscale_factor));
  ESCPOD_RETURN_IF_ERROR(r.integer("max_obs_trace", c.max_obs_trace));
  ESCPOD_RETURN_IF_ERROR(r.number("sig_norm_outlier_thresh", c.sig_norm_outlier_thresh));
  s.fingerprint.outlier_mads = c.sig_norm_outlier_thresh;
  return Status::ok();
}

Status read_boundary_sections(const Json& root, const std::string& where, SignalProcessing& s) {
  signal::BoundaryConfig& c = s.boundaries;
  {
    const SectionReader r(root, "cnn_boundaries", where);
    ESCPOD_RETURN_IF_ERROR(r.boolean("cnn_detect", c.cnn_detect));
    ESCPOD_RETURN_IF_ERROR(r.string("model_name", s.cnn_model_name));
    ESCPOD_RETURN_IF_ERROR(r.integer("polya_cand_k", c.polya_cand_k));
    ESCPOD_RETURN_IF_ERROR(r.boolean("fallback_to_llr_short_reads", c.fallback_to_llr_short_reads));
    ESCPOD_RETURN_IF_ERROR(r.boolean("fallback_to_llr", c.fallback_to_llr));
  }
  {
    const SectionReader r(root, "llr_boundaries", where);
    ESCPOD_RETURN_IF_ERROR(r.boolean("llr_detect", c.llr_detect));
    ESCPOD_RETURN_IF_ERROR(r.number("adapter_peak_prominence", c.adapter_peak_prominence));
    ESCPOD_RETURN_IF_ERROR(r.number("adapter_peak_rel_height", c.adapter_peak_rel_height));
    ESCPOD_RETURN_IF_ERROR(r.integer("adapter_peak_width", c.adapter_peak_width));
  }
  {
    const SectionReader r(root, "mvs_polya", where);
    ESCPOD_RETURN_IF_ERROR(r.boolean("mvs_detect_check", c.mvs_detect_check));
    ESCPOD_RETURN_IF_ERROR(r.refuse_true("mvs_detect_overwrite", "poly(A) end overwritten by MVS"));
    ESCPOD_RETURN_IF_ERROR(r.integer("search_window", c.search_window));
    ESCPOD_RETURN_IF_ERROR(r.integer("pA_mean_window", c.pA_mean_window));
    ESCPOD_RETURN_IF_ERROR(r.range("pA_mean_range", c.pA_mean_range));
    ESCPOD_RETURN_IF_ERROR(r.integer("pA_var_window", c.pA_var_window));
    ESCPOD_RETURN_IF_ERROR(r.range("pA_var_range", c.pA_var_range));
    ESCPOD_RETURN_IF_ERROR(r.integer("median_shift_window", c.median_shift_window));
    ESCPOD_RETURN_IF_ERROR(r.range("median_shift_range", c.median_shift_range));
    ESCPOD_RETURN_IF_ERROR(r.integer("polyA_window", c.polyA_window));
    ESCPOD_RETURN_IF_ERROR(r.range("polyA_med_range", c.polyA_med_range));
    ESCPOD_RETURN_IF_ERROR(r.range("polyA_local_range", c.polyA_local_range));
    ESCPOD_RETURN_IF_ERROR(
        r.range("pA_mean_adapter_med_scale_range", c.pA_mean_adapter_med_scale_range));
  }
  {
    const SectionReader r(root, "real_range", where);
    ESCPOD_RETURN_IF_ERROR(r.boolean("detect_open_pores", c.detect_open_pores));
    ESCPOD_RETURN_IF_ERROR(r.boolean("real_signal_check", c.real_signal_check));
    ESCPOD_RETURN_IF_ERROR(r.integer("mean_window", c.mean_window));
    ESCPOD_RETURN_IF_ERROR(r.range("mean_start_range", c.mean_start_range));
    ESCPOD_RETURN_IF_ERROR(r.range("mean_end_range", c.mean_end_range));
    ESCPOD_RETURN_IF_ERROR(r.integer("max_obs_local_range", c.max_obs_local_range));
    ESCPOD_RETURN_IF_ERROR(r.range("local_range", c.local_range));
    ESCPOD_RETURN_IF_ERROR(r.range("adapter_mad_range", c.adapter_mad_range));
  }
  ESCPOD_RETURN_IF_ERROR(SectionReader(root, "med_shift", where)
                             .refuse_true("detect_med_shift", "median-shift detection"));
  ESCPOD_RETURN_IF_ERROR(SectionReader(root, "rna_start_peak", where)
                             .refuse_true("detect_rna_start_peak", "the tRNA configuration"));
  return Status::ok();
}

Status read_fingerprint_sections(const Json& root, const std::string& where, SignalProcessing& s) {
  signal::FingerprintParams& fp = s.fingerprint;
  ESCPOD_RETURN_IF_ERROR(SectionReader(root, "sig_extract", where).count("padding", fp.padding_samples));
  const SectionReader r(root, "segmentation", where);
  ESCPOD_RETURN_IF_ERROR(r.count("num_events", fp.num_events));
  ESCPOD_RETURN_IF_ERROR(r.count("running_stat_width", fp.max_stat_width));
  ESCPOD_RETURN_IF_ERROR(r.count("min_obs_per_base", fp.max_min_gap));
  ESCPOD_RETURN_IF_ERROR(r.count("barcode_num_events", fp.barcode_num_events));
  return Status::ok();
}

// The derived values must agree with the keys they are derived from.
Status check_consistency(const Json& root, const std::string& where, const SignalProcessing& s) {
  const signal::BoundaryConfig& c = s.boundaries;
  const SectionReader core(root, "core", where);
  if (c.downscale_factor < 1 || c.min_obs_adapter < 0 || c.max_obs_adapter < c.min_obs_adapter ||
      c.max_obs_trace < 1 || c.pA_mean_window < 1 || c.pA_var_window < 1 || c.mean_window < 1 ||
      c.median_shift_window < 1 || c.sig_preload_size() <= c.min_obs_adapter) {
    return core.fields().error("signal_processing: inconsistent core/window values");
  }
  const SectionReader derived(root, "derived", where);
  int64_t preload = -1;
  ESCPOD_RETURN_IF_ERROR(derived.integer("sig_preload_size", preload));
  if (preload >= 0 && preload != c.sig_preload_size()) {
    return derived.fields().error(derived.path("sig_preload_size") + " " + std::to_string(preload) +
                                  " disagrees with the value computed from the other keys (" +
                                  std::to_string(c.sig_preload_size()) + ")");
  }
  return Status::ok();
}

// ---- writing --------------------------------------------------------------------------------

Json range_json(const signal::Range& r) {
  Json a = Json::array();
  a.push_back(std::isinf(r.lo) ? Json(nullptr) : Json(r.lo));
  a.push_back(std::isinf(r.hi) ? Json(nullptr) : Json(r.hi));
  return a;
}

bool same_range(const signal::Range& a, const signal::Range& b) { return a.lo == b.lo && a.hi == b.hi; }

// Writes block[section][key] = value when the source has the key, or `always`, or the value
// differs from the default; a null source value that already means `value` stays null.
class BlockWriter {
 public:
  BlockWriter(Json& block, bool always) : m_block(block), m_always(always) {}

  template <typename T>
  void put(const char* section, const char* key, const T& value, const T& default_value) {
    Json* sec = section_object(section, key, !(value == default_value));
    if (!sec) return;
    (*sec)[key] = value;
  }
  void put_range(const char* section, const char* key, const signal::Range& value,
                 const signal::Range& default_value) {
    Json* sec = section_object(section, key, !same_range(value, default_value));
    if (!sec) return;
    auto it = sec->find(key);
    if (it != sec->end() && it->is_null() && value.unbounded()) return;
    (*sec)[key] = range_json(value);
  }
  // Fixed-value keys of the compact block (not interpreted; the values every RNA004 model has).
  template <typename T>
  void put_fixed(const char* section, const char* key, const T& value) {
    if (!m_always) return;
    m_block[section][key] = value;
  }

 private:
  // The section to write `key` into, or nullptr when the key is to be left out.
  Json* section_object(const char* section, const char* key, bool differs) {
    auto it = m_block.find(section);
    const bool has_section = it != m_block.end() && it->is_object();
    const bool has_key = has_section && it->contains(key);
    if (!m_always && !differs && !has_key) return nullptr;
    if (!has_section) m_block[section] = Json::object();
    return &m_block[section];
  }
  Json& m_block;
  bool m_always;
};

}  // namespace

SignalProcessing SignalProcessing::rna004(bool use_cnn) {
  SignalProcessing s;
  s.set_detector(use_cnn);
  return s;
}

void SignalProcessing::set_detector(bool use_cnn) {
  boundaries.cnn_detect = use_cnn;
  boundaries.llr_detect = !use_cnn;
}

Result<SignalProcessing> parse_signal_processing(const std::string& text, const std::string& where) {
  ESCPOD_ASSIGN_OR_RETURN(Json root, detail::parse_json_text(text, where));
  return detail::signal_processing_from_json(root, where);
}

Result<SignalProcessing> detail::signal_processing_from_json(const Json& root, const std::string& where) {
  if (!root.is_object()) return JsonFields(where).error("signal_processing must be a JSON object");
  SignalProcessing s;
  ESCPOD_RETURN_IF_ERROR(read_core(root, where, s));
  ESCPOD_RETURN_IF_ERROR(read_boundary_sections(root, where, s));
  ESCPOD_RETURN_IF_ERROR(read_fingerprint_sections(root, where, s));
  ESCPOD_RETURN_IF_ERROR(check_consistency(root, where, s));
  s.source = std::make_shared<const SignalProcessing::Source>(SignalProcessing::Source{root});
  return s;
}

std::string serialize_signal_processing(const SignalProcessing& s) {
  return detail::signal_processing_json(s).dump();
}

namespace {

// core, cnn_boundaries, llr_boundaries: part of the compact block.
void write_compact_detector_sections(const SignalProcessing& s, BlockWriter& w) {
  const SignalProcessing d;
  const signal::BoundaryConfig& c = s.boundaries;
  const signal::BoundaryConfig& dc = d.boundaries;
  w.put("core", "min_obs_adapter", c.min_obs_adapter, dc.min_obs_adapter);
  w.put("core", "max_obs_adapter", c.max_obs_adapter, dc.max_obs_adapter);
  w.put("core", "min_obs_polya", c.min_obs_polya, dc.min_obs_polya);
  w.put("core", "downscale_factor", c.downscale_factor, dc.downscale_factor);
  w.put("core", "max_obs_trace", c.max_obs_trace, dc.max_obs_trace);
  w.put("core", "sig_norm_outlier_thresh", c.sig_norm_outlier_thresh, dc.sig_norm_outlier_thresh);
  w.put("cnn_boundaries", "cnn_detect", c.cnn_detect, dc.cnn_detect);
  w.put("cnn_boundaries", "model_name", s.cnn_model_name, d.cnn_model_name);
  w.put("cnn_boundaries", "polya_cand_k", c.polya_cand_k, dc.polya_cand_k);
  w.put("cnn_boundaries", "fallback_to_llr_short_reads", c.fallback_to_llr_short_reads,
        dc.fallback_to_llr_short_reads);
  w.put("cnn_boundaries", "fallback_to_llr", c.fallback_to_llr, dc.fallback_to_llr);
  w.put("llr_boundaries", "llr_detect", c.llr_detect, dc.llr_detect);
  w.put("llr_boundaries", "adapter_peak_prominence", c.adapter_peak_prominence, dc.adapter_peak_prominence);
  w.put("llr_boundaries", "adapter_peak_rel_height", c.adapter_peak_rel_height, dc.adapter_peak_rel_height);
  w.put("llr_boundaries", "adapter_peak_width", c.adapter_peak_width, dc.adapter_peak_width);
  w.put_fixed("llr_boundaries", "polya_peak_prominence", 1.0);
  w.put_fixed("llr_boundaries", "polya_peak_rel_height", 0.5);
  w.put_fixed("llr_boundaries", "polya_peak_width", 50);
}

// mvs_polya, real_range: written only where the source has them or they differ from the defaults.
void write_validation_sections(const signal::BoundaryConfig& c, BlockWriter& rest) {
  const signal::BoundaryConfig dc;
  rest.put("mvs_polya", "mvs_detect_check", c.mvs_detect_check, dc.mvs_detect_check);
  rest.put("mvs_polya", "search_window", c.search_window, dc.search_window);
  rest.put("mvs_polya", "pA_mean_window", c.pA_mean_window, dc.pA_mean_window);
  rest.put_range("mvs_polya", "pA_mean_range", c.pA_mean_range, dc.pA_mean_range);
  rest.put("mvs_polya", "pA_var_window", c.pA_var_window, dc.pA_var_window);
  rest.put_range("mvs_polya", "pA_var_range", c.pA_var_range, dc.pA_var_range);
  rest.put("mvs_polya", "median_shift_window", c.median_shift_window, dc.median_shift_window);
  rest.put_range("mvs_polya", "median_shift_range", c.median_shift_range, dc.median_shift_range);
  rest.put("mvs_polya", "polyA_window", c.polyA_window, dc.polyA_window);
  rest.put_range("mvs_polya", "polyA_med_range", c.polyA_med_range, dc.polyA_med_range);
  rest.put_range("mvs_polya", "polyA_local_range", c.polyA_local_range, dc.polyA_local_range);
  rest.put_range("mvs_polya", "pA_mean_adapter_med_scale_range", c.pA_mean_adapter_med_scale_range,
                 dc.pA_mean_adapter_med_scale_range);
  rest.put("real_range", "detect_open_pores", c.detect_open_pores, dc.detect_open_pores);
  rest.put("real_range", "real_signal_check", c.real_signal_check, dc.real_signal_check);
  rest.put("real_range", "mean_window", c.mean_window, dc.mean_window);
  rest.put_range("real_range", "mean_start_range", c.mean_start_range, dc.mean_start_range);
  rest.put_range("real_range", "mean_end_range", c.mean_end_range, dc.mean_end_range);
  rest.put("real_range", "max_obs_local_range", c.max_obs_local_range, dc.max_obs_local_range);
  rest.put_range("real_range", "local_range", c.local_range, dc.local_range);
  rest.put_range("real_range", "adapter_mad_range", c.adapter_mad_range, dc.adapter_mad_range);
}

// sig_extract, segmentation: part of the compact block.
void write_fingerprint_sections(const signal::FingerprintParams& f, BlockWriter& w) {
  const signal::FingerprintParams df;
  w.put("sig_extract", "padding", f.padding_samples, df.padding_samples);
  w.put_fixed("sig_extract", "normalization", std::string("none"));
  w.put("segmentation", "num_events", f.num_events, df.num_events);
  w.put("segmentation", "min_obs_per_base", f.max_min_gap, df.max_min_gap);
  w.put("segmentation", "running_stat_width", f.max_stat_width, df.max_stat_width);
  w.put_fixed("segmentation", "accept_less_cpts", false);
  w.put_fixed("segmentation", "normalization", std::string("mean"));
  w.put("segmentation", "barcode_num_events", f.barcode_num_events, df.barcode_num_events);
  w.put_fixed("segmentation", "consensus_refinement", false);
}

}  // namespace

Json detail::signal_processing_json(const SignalProcessing& s) {
  // Section and key order of the compact block: that of the WarpDemuX 1.0 RNA004 models.
  Json block = s.source ? s.source->block : Json::object();
  BlockWriter compact(block, /*always=*/!s.source);
  BlockWriter rest(block, /*always=*/false);
  write_compact_detector_sections(s, compact);
  write_validation_sections(s.boundaries, rest);
  write_fingerprint_sections(s.fingerprint, compact);
  // A source's derived.sig_preload_size follows the keys it is derived from.
  if (auto it = block.find("derived");
      it != block.end() && it->is_object() && it->contains("sig_preload_size")) {
    (*it)["sig_preload_size"] = s.boundaries.sig_preload_size();
  }
  return block;
}

bool operator==(const SignalProcessing& a, const SignalProcessing& b) {
  // Every interpreted value, compared through the serializer's sourceless form (which writes each
  // of them); the opaque source keys are not compared.
  SignalProcessing x = a, y = b;
  x.source.reset();
  y.source.reset();
  return serialize_signal_processing(x) == serialize_signal_processing(y);
}

}  // namespace escpod::demux
