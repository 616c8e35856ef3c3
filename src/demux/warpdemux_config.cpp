// Pairing a WarpDemuX joblib model with its signal-processing config (joblib_model.hpp): the
// folder's config.toml names the config, WarpDemuX's TOML holds the keys it changes, and ADAPTed's
// configuration for the chemistry lies beneath (docs/formats.md, "WarpDemuX model files").
#include <toml++/toml.h>

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "joblib_model.hpp"

namespace escpod::demux::detail {

namespace fs = std::filesystem;

namespace {

// ADAPTed 0.2.4's configuration of each chemistry (its config_files/<name>@v0.2.4.toml; values
// only), with WarpDemuX's segmentation dataclass defaults: the layer under a WarpDemuX config.
// RNA002's is RNA004's with the keys its file sets differently. Ranges use null for an unbounded
// side, as our JSON layout does.
constexpr const char* kAdaptedRna004 = R"({
  "core": {"max_obs_trace": 16000, "min_obs_adapter": 1000, "max_obs_adapter": 6500,
           "min_obs_polya": 100, "downscale_factor": 10, "sig_norm_outlier_thresh": 5.0},
  "cnn_boundaries": {"cnn_detect": true, "fallback_to_llr": true,
                     "model_name": "rna004_130bps@v0.2.4.pth", "polya_cand_k": 10,
                     "fallback_to_llr_short_reads": true},
  "llr_boundaries": {"llr_detect": false, "adapter_peak_prominence": 1.0,
                     "adapter_peak_rel_height": 1.0, "adapter_peak_width": 1000,
                     "polya_peak_prominence": 1.0, "polya_peak_rel_height": 0.5,
                     "polya_peak_width": 50},
  "mvs_polya": {"mvs_detect_check": true, "mvs_detect_overwrite": false, "search_window": 500,
                "pA_mean_window": 20, "pA_var_window": 100, "pA_var_range": [null, 30.0],
                "median_shift_range": [5.0, null], "median_shift_window": 1000,
                "polyA_med_range": [null, null], "polyA_local_range": [null, null],
                "pA_mean_adapter_med_scale_range": [1.3, null]},
  "real_range": {"detect_open_pores": true, "real_signal_check": true, "mean_window": 300,
                 "mean_start_range": [null, null], "mean_end_range": [null, null],
                 "max_obs_local_range": 5000, "local_range": [7.0, 35.0],
                 "adapter_mad_range": [3.0, 12.0]},
  "med_shift": {"detect_med_shift": false, "med_shift_window": 2000, "med_shift_range": [5.0, null]},
  "rna_start_peak": {"detect_rna_start_peak": false},
  "segmentation": {"min_obs_per_base": 15, "running_stat_width": 30}
})";
constexpr const char* kAdaptedRna002OverRna004 = R"({
  "core": {"max_obs_trace": 25000, "min_obs_adapter": 2000, "max_obs_adapter": 12000, "downscale_factor": 20},
  "cnn_boundaries": {"cnn_detect": false, "model_name": "rna002_70bps@v0.2.4.pth", "polya_cand_k": 15},
  "llr_boundaries": {"llr_detect": true, "adapter_peak_width": 1500},
  "mvs_polya": {"pA_var_range": [null, 20.0]},
  "med_shift": {"med_shift_window": 1000}
})";

struct ChemistryBase {
  const char* prefix;     // config names start with it
  const char* chemistry;  // SQK
  const char* overlay;    // keys over kAdaptedRna004, or nullptr
};
constexpr ChemistryBase kBases[] = {
    {"rna004_130bps", "RNA004", nullptr},
    {"rna002_70bps", "RNA002", kAdaptedRna002OverRna004},
};

const ChemistryBase* base_for(const std::string& config_name) {
  for (const ChemistryBase& b : kBases)
    if (config_name.rfind(b.prefix, 0) == 0) return &b;
  return nullptr;
}

std::string base_names() {
  std::string s;
  for (const ChemistryBase& b : kBases) s += (s.empty() ? "" : ", ") + std::string(b.prefix);
  return s;
}

Result<toml::table> parse_toml(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::not_found(path.string() + ": no such file");
  try {
    return toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return Status::corrupt(path.string() + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                           ": not valid TOML: " + std::string(e.description()));
  }
}

// One TOML value as JSON: +-inf become null (an unbounded range side, as in our layout).
Result<Json> toml_to_json(const toml::node& n, const std::string& where) {
  if (const auto* t = n.as_table()) {
    Json o = Json::object();
    for (const auto& [k, v] : *t) {
      ESCPOD_ASSIGN_OR_RETURN(Json x, toml_to_json(v, where + "." + std::string(k.str())));
      o[std::string(k.str())] = std::move(x);
    }
    return o;
  }
  if (const auto* a = n.as_array()) {
    Json o = Json::array();
    for (size_t i = 0; i < a->size(); ++i) {
      ESCPOD_ASSIGN_OR_RETURN(Json x, toml_to_json(*a->get(i), where + "[" + std::to_string(i) + "]"));
      o.push_back(std::move(x));
    }
    return o;
  }
  if (const auto* v = n.as_boolean()) return Json(v->get());
  if (const auto* v = n.as_integer()) return Json(v->get());
  if (const auto* v = n.as_string()) return Json(v->get());
  if (const auto* v = n.as_floating_point()) {
    const double x = v->get();
    if (std::isinf(x)) return Json(nullptr);
    if (std::isnan(x)) return Status::corrupt(where + " is nan");
    return Json(x);
  }
  return Status::corrupt(where + ": a TOML date or time, not a setting");
}

// `layer`'s keys over `block`'s, key by key inside each section (WarpDemuX's merge).
Status merge_layer(Json& block, const toml::table& layer, const std::string& where) {
  for (const auto& [section, node] : layer) {
    const std::string name(section.str());
    const toml::table* t = node.as_table();
    if (t == nullptr) return Status::corrupt(where + ": top-level key '" + name + "' is not a [section]");
    ESCPOD_ASSIGN_OR_RETURN(Json values, toml_to_json(*t, where + ": " + name));
    Json& target = block[name];
    if (!target.is_object()) target = Json::object();
    for (auto& [k, v] : values.items()) target[k] = v;
  }
  return Status::ok();
}

// A config.toml entry (WarpDemuX's model registry): which config a model uses and its barcodes.
struct RegistryEntry {
  std::string name, chemistry, config_name;
  std::vector<std::string> barcodes;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "WDX4_rna002_v0_4_4" -> "WDX4_rna002": names that differ only in their version match (a
// trailing "_v" followed by digits and underscores, starting with a digit).
std::string without_version(const std::string& name) {
  const size_t v = name.rfind("_v");
  if (v == std::string::npos || v + 2 >= name.size() || !is_digit(name[v + 2])) return name;
  for (size_t i = v + 2; i < name.size(); ++i)
    if (!is_digit(name[i]) && !(name[i] == '_' && i + 1 < name.size() && is_digit(name[i + 1]))) return name;
  return name.substr(0, v);
}

// "rna002_70bps@v1.0_live" -> {"rna002_70bps", "_live"}: a config name's base and variant around
// its version (digits and dots after "@v"); nullopt for a name without "@v<digit>".
std::optional<std::pair<std::string, std::string>> config_base_and_variant(const std::string& name) {
  const size_t at = name.rfind("@v");
  if (at == std::string::npos || at + 2 >= name.size() || !is_digit(name[at + 2])) return std::nullopt;
  size_t end = at + 2;
  while (end < name.size() && (is_digit(name[end]) || name[end] == '.')) ++end;
  // "1.0." would leave a dot before the variant: the version ends at its last digit.
  while (name[end - 1] == '.') --end;
  return std::make_pair(name.substr(0, at), name.substr(end));
}

Result<RegistryEntry> read_entry(const toml::table& t, const std::string& name, const fs::path& where) {
  RegistryEntry e;
  e.name = name;
  const std::string at = where.string() + ": [" + name + "]";
  if (auto v = t["spc"].value<std::string>()) e.config_name = *v;
  else return Status::corrupt(at + " has no spc (signal-processing config name) string");
  if (auto v = t["SQK"].value<std::string>()) e.chemistry = *v;
  if (const toml::array* bcs = t["which_barcodes"].as_array()) {
    for (const auto& b : *bcs) {
      if (auto s = b.value<std::string>()) e.barcodes.push_back(*s);
      else if (auto i = b.value<int64_t>()) e.barcodes.push_back(std::to_string(*i));
      else return Status::corrupt(at + ": which_barcodes holds a value that is neither a number nor a name");
    }
  }
  return e;
}

// The entry of config.toml beside the model for the model's name (exact, else the one entry
// whose name differs only in its version); nullopt when there is no config.toml or no entry.
Result<std::optional<RegistryEntry>> find_registry_entry(const fs::path& model, std::string& note) {
  const fs::path registry = model.parent_path() / "config.toml";
  std::error_code ec;
  if (!fs::is_regular_file(registry, ec)) return std::optional<RegistryEntry>{};
  ESCPOD_ASSIGN_OR_RETURN(toml::table t, parse_toml(registry));
  const std::string stem = model.stem().string();
  if (const toml::table* exact = t[stem].as_table()) {
    ESCPOD_ASSIGN_OR_RETURN(RegistryEntry e, read_entry(*exact, stem, registry));
    note = registry.string() + " [" + stem + "]";
    return std::optional<RegistryEntry>(std::move(e));
  }
  std::vector<std::string> close;
  for (const auto& [k, v] : t)
    if (v.is_table() && without_version(std::string(k.str())) == without_version(stem)) close.emplace_back(k.str());
  if (close.size() != 1) return std::optional<RegistryEntry>{};
  ESCPOD_ASSIGN_OR_RETURN(RegistryEntry e, read_entry(*t[close[0]].as_table(), close[0], registry));
  note = registry.string() + " [" + close[0] + "] (its version differs from the file's name)";
  return std::optional<RegistryEntry>(std::move(e));
}

// `<name>.toml` beside the model, else the one `<base>@v<version><variant>.toml` there whose
// variant (e.g. "_live") matches: WarpDemuX's registries name configs v1.0 that ship as v0.4.4.
Result<fs::path> find_config_file(const fs::path& dir, const std::string& config_name, const fs::path& registry) {
  const fs::path exact = dir / (config_name + ".toml");
  std::error_code ec;
  if (fs::is_regular_file(exact, ec)) return exact;
  std::vector<fs::path> close;
  if (const auto want = config_base_and_variant(config_name)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".toml") continue;
      if (config_base_and_variant(entry.path().stem().string()) == want) close.push_back(entry.path());
    }
  }
  if (close.size() == 1) return close[0];
  return Status::not_found(registry.string() + " pairs the model with the signal-processing config '" +
                           config_name + "', but " + exact.string() + " does not exist" +
                           (close.empty() ? std::string() : " and several files could be it") +
                           "; give the config with --config FILE.toml");
}

Result<Json> layered_block(const std::string& config_name, const fs::path& config_file) {
  const ChemistryBase* base = base_for(config_name);
  if (base == nullptr)
    return Status::unsupported("signal-processing config '" + config_name + "' (" + config_file.string() +
                               ") is for a chemistry this build has no ADAPTed configuration of (" +
                               base_names() + ")");
  ESCPOD_ASSIGN_OR_RETURN(Json block, parse_json_text(kAdaptedRna004, "ADAPTed base configuration"));
  if (base->overlay) {
    ESCPOD_ASSIGN_OR_RETURN(const Json overlay, parse_json_text(base->overlay, "ADAPTed base configuration"));
    for (const auto& [section, values] : overlay.items())
      for (const auto& [key, value] : values.items()) block[section][key] = value;
  }
  ESCPOD_ASSIGN_OR_RETURN(toml::table layer, parse_toml(config_file));
  ESCPOD_RETURN_IF_ERROR(merge_layer(block, layer, config_file.string()));
  return block;
}

}  // namespace

Result<WarpDemuxPairing> pair_warpdemux_config(const fs::path& model, const ModelLoadOptions& options) {
  WarpDemuxPairing p;
  std::string registry_note;
  ESCPOD_ASSIGN_OR_RETURN(std::optional<RegistryEntry> entry, find_registry_entry(model, registry_note));
  if (entry) {
    p.chemistry = entry->chemistry;
    p.barcode_names = entry->barcodes;
  }
  fs::path config_file = options.warpdemux_config;
  if (!config_file.empty()) {
    p.config_name = config_file.stem().string();
    p.source = config_file.string() + " (--config)";
  } else if (entry) {
    ESCPOD_ASSIGN_OR_RETURN(config_file, find_config_file(model.parent_path(), entry->config_name,
                                                          model.parent_path() / "config.toml"));
    p.config_name = entry->config_name;
    p.source = config_file.string() + ", named by " + registry_note;
  } else if (model.stem().string().find("rna004") != std::string::npos) {
    // WarpDemuX 1.0's rna004_130bps@v1.0, which our RNA004 defaults are.
    p.config_name = kRna004SignalProcessingConfigName;
    p.chemistry = kRna004Chemistry;
    p.block = signal_processing_json(SignalProcessing::rna004(true));
    p.source = std::string("built in (WarpDemuX 1.0's ") + kRna004SignalProcessingConfigName +
               "; no config.toml entry for the model beside it)";
    return p;
  } else {
    return Status::not_found(model.string() + ": a WarpDemuX model file needs its signal-processing config: " +
                             "no config.toml beside it names the model '" + model.stem().string() +
                             "'; give the config with --config FILE.toml (e.g. rna002_70bps@v0.4.4.toml)");
  }
  ESCPOD_ASSIGN_OR_RETURN(p.block, layered_block(p.config_name, config_file));
  if (p.chemistry.empty()) p.chemistry = base_for(p.config_name)->chemistry;
  return p;
}

}  // namespace escpod::demux::detail
