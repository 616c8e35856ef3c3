// load_model_file: one read, one parse, the kind from the file's own fields, then the typed parts.
#include "escpod/demux/model_file.hpp"

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

Result<ModelFile> load_model_settings(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  return read_header(j, path);
}

Result<ModelFile> load_model_file(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  ESCPOD_ASSIGN_OR_RETURN(ModelFile m, read_header(j, path));
  if (m.kind == ModelKind::kGbm) {
    ESCPOD_ASSIGN_OR_RETURN(GbmModel g, detail::ModelBuilder::gbm(j, path));
    m.gbm.emplace(std::move(g));
  } else {
    ESCPOD_ASSIGN_OR_RETURN(WarpDemuxModel w, detail::ModelBuilder::dtw_svm(j, path));
    m.dtw_svm.emplace(std::move(w));
  }
  return m;
}

}  // namespace escpod::demux
