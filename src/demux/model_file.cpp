// load_model_file: one read, one parse, the kind from the file's own fields, then the typed parts.
#include "escpod/demux/model_file.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <span>

#include "joblib_model.hpp"
#include "json_fields.hpp"

namespace escpod::demux {

using detail::Json;
using detail::JsonFields;

namespace {

constexpr const char* kDtwSvmFormat = "escapepod-wdx-dtw-svm";

// The kind a model file declares (see load_model_file for the rules).
Result<ModelKind> model_kind(const Json& j, const JsonFields& f) {
  if (!j.is_object()) return f.error("top level must be a JSON object (a demux model)");
  if (const Json* mt = JsonFields::optional_member(j, "model_type")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*mt, "model_type"));
    if (s == "gbm") return ModelKind::kGbm;
    return f.error("model_type '" + s + "' is not a model kind this build reads (gbm; DTW-SVM " +
                   "models say format \"" + kDtwSvmFormat + "\")");
  }
  if (j.contains("trees")) return ModelKind::kGbm;
  if (const Json* fm = JsonFields::optional_member(j, "format")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*fm, "format"));
    if (s == kDtwSvmFormat) return ModelKind::kDtwSvm;
    return Status::unsupported(f.file() + ": format '" + s + "' is not a demux model (expected " +
                               kDtwSvmFormat + ", or model_type \"gbm\")");
  }
  if (j.contains("training_fingerprints")) return ModelKind::kDtwSvm;
  return f.error(std::string("cannot tell the model kind: no model_type \"gbm\", no trees, no format \"") +
                 kDtwSvmFormat + "\" and no training_fingerprints");
}

// Everything but the classifier.
Result<ModelFile> read_header(const Json& j, const std::filesystem::path& path) {
  const JsonFields f(path.string());
  ModelFile m;
  m.path = path;
  ESCPOD_ASSIGN_OR_RETURN(m.kind, model_kind(j, f));
  if (const Json* v = JsonFields::optional_member(j, "chemistry")) {
    ESCPOD_ASSIGN_OR_RETURN(m.chemistry, f.string(*v, "chemistry"));
  }
  if (const Json* v = JsonFields::optional_member(j, "signal_processing_config_name")) {
    ESCPOD_ASSIGN_OR_RETURN(m.signal_processing_config_name,
                            f.string(*v, "signal_processing_config_name"));
  }
  if (const Json* sp = JsonFields::optional_member(j, "signal_processing")) {
    ESCPOD_ASSIGN_OR_RETURN(SignalProcessing s, detail::signal_processing_from_json(*sp, f.file()));
    m.signal_processing = std::move(s);
  }
  return m;
}

}  // namespace

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kDtwSvm: return "DTW-SVM";
    case ModelKind::kGbm: return "GBM";
  }
  return "?";
}

namespace {

// The first bytes of the file decide its format (model_file.hpp).
// Whether a model file's first bytes are a joblib pickle (else it is read as JSON).
bool is_joblib(const std::vector<uint8_t>& bytes) {
  return detail::looks_like_joblib(std::span<const uint8_t>(bytes.data(), std::min<size_t>(bytes.size(), 8)));
}

struct JoblibModel {
  Json json;
  detail::WarpDemuxPairing pairing;
};

// The whole model file, read once (its format is sniffed from these bytes).
Result<std::vector<uint8_t>> read_model_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return Status::io_error(path.string() + ": no such file");
    return Status::io_error(path.string() + ": cannot open");
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::io_error(path.string() + ": read failed");
  return bytes;
}

Result<JoblibModel> read_joblib(std::vector<uint8_t> file, const std::filesystem::path& path,
                                const ModelLoadOptions& options) {
  JoblibModel m;
  ESCPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, detail::joblib_pickle_bytes(std::move(file), path));
  ESCPOD_ASSIGN_OR_RETURN(m.pairing, detail::pair_warpdemux_config(path, options));
  ESCPOD_ASSIGN_OR_RETURN(m.json, detail::dtw_svm_json_from_joblib(bytes, path, m.pairing));
  return m;
}

// The header and, when `classifier`, the typed classifier of one parsed object.
Result<ModelFile> build_model_file(const Json& j, const std::filesystem::path& path, bool classifier) {
  ESCPOD_ASSIGN_OR_RETURN(ModelFile m, read_header(j, path));
  if (!classifier) return m;
  if (m.kind == ModelKind::kGbm) {
    ESCPOD_ASSIGN_OR_RETURN(GbmModel g, detail::ModelBuilder::gbm(j, path));
    m.gbm.emplace(std::move(g));
  } else {
    ESCPOD_ASSIGN_OR_RETURN(WarpDemuxModel w, detail::ModelBuilder::dtw_svm(j, path));
    m.dtw_svm.emplace(std::move(w));
  }
  return m;
}

Result<ModelFile> load(const std::filesystem::path& path, const ModelLoadOptions& options, bool classifier) {
  ESCPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_model_bytes(path));
  if (is_joblib(bytes)) {
    ESCPOD_ASSIGN_OR_RETURN(JoblibModel jm, read_joblib(std::move(bytes), path, options));
    ESCPOD_ASSIGN_OR_RETURN(ModelFile m, build_model_file(jm.json, path, classifier));
    m.format = ModelFormat::kJoblib;
    m.settings_source = std::move(jm.pairing.source);
    m.barcode_names = std::move(jm.pairing.barcode_names);
    return m;
  }
  if (!options.warpdemux_config.empty())
    return Status::usage("--config " + options.warpdemux_config.string() + " pairs a WarpDemuX joblib model with "
                                    "its signal-processing config, but " + path.string() +
                                    " is a JSON model, which records its own (signal_processing)");
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_text(std::string(bytes.begin(), bytes.end()), path.string()));
  return build_model_file(j, path, classifier);
}

}  // namespace

Result<ModelFile> load_model_settings(const std::filesystem::path& path, const ModelLoadOptions& options) {
  return load(path, options, /*classifier=*/false);
}

Result<ModelFile> load_model_file(const std::filesystem::path& path, const ModelLoadOptions& options) {
  return load(path, options, /*classifier=*/true);
}

Result<std::string> joblib_model_as_json(const std::filesystem::path& path, const ModelLoadOptions& options) {
  ESCPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_model_bytes(path));
  if (!is_joblib(bytes))
    return Status::invalid_argument(path.string() + ": not a WarpDemuX joblib model file (it is read as JSON already)");
  ESCPOD_ASSIGN_OR_RETURN(JoblibModel jm, read_joblib(std::move(bytes), path, options));
  // Built once to check it: the text is only written for a model that loads.
  ESCPOD_RETURN_IF_ERROR(build_model_file(jm.json, path, /*classifier=*/true).status());
  return jm.json.dump() + "\n";
}

}  // namespace escpod::demux
