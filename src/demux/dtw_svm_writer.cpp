// serialize_dtw_svm and the template reader of training (train_svm.hpp): the model file layout of
// the shipped WarpDemuX conversions (`escapepod-wdx-dtw-svm`, format_version 1).
#include <cstdio>

#include "escpod/demux/train_svm.hpp"
#include "json_fields.hpp"

namespace escpod::demux {

using detail::Json;
using detail::JsonFields;

namespace {

std::string column_name(int32_t label) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "p%02d", static_cast<int>(label));
  return buf;
}

const char* threshold_mode_name(ThresholdMode m) {
  switch (m) {
    case ThresholdMode::kZero: return "zero";
    case ThresholdMode::kFixed: return "fixed";
    case ThresholdMode::kCrossValidated: return "cross_validated";
  }
  return "?";
}

const char* weighting_name(ClassWeighting w) {
  switch (w) {
    case ClassWeighting::kBalanced: return "balanced";
    case ClassWeighting::kNone: return "none";
    case ClassWeighting::kExplicit: return "explicit";
  }
  return "?";
}

Json training_block(const TrainedDtwSvm& t) {
  const SvmTrainOptions& o = t.options;
  Json training;
  training["trained_by"] = "escapepod train_warpdemux_svm";
  training["solver"] = "libsvm " + std::to_string(t.libsvm_version) +
                       " C-SVC, precomputed DTW kernel, one-vs-one";
  training["seed"] = o.seed;
  training["n_rows"] = t.n_rows;
  training["class_rows"] = t.class_rows;
  training["training_accuracy"] = t.training_accuracy;
  training["thresholds"] = threshold_mode_name(o.thresholds);
  if (o.thresholds == ThresholdMode::kCrossValidated) {
    training["target_precision"] = o.target_precision;
    training["threshold_folds"] = o.threshold_folds;
  }
  training["stored_rows"] = "support vectors only";
  return training;
}

// The DTW, kernel and SVC parameters (the `dtw`, `kernel`, `svc` blocks and their top-level
// copies) as the shipped models record them.
void write_parameters(const TrainedDtwSvm& t, Json& j) {
  const SvmTrainOptions& o = t.options;
  j["window"] = o.window;
  j["penalty"] = o.penalty;
  j["kernel_params"] = {{"gamma", o.gamma}, {"power", o.power}};
  j["use_kernel_weighted"] = false;
  Json dtw;
  dtw["window"] = o.window;
  dtw["penalty"] = o.penalty;
  dtw["inner_dist"] = "squared_euclidean";
  dtw["band"] =
      "cell (i,j), 0-based, equal lengths L: allowed iff |i-j| <= window-1; window 0 = no band";
  dtw["step_cost"] =
      "D[i][j] = (q_i - t_j)^2 + min(D[i-1][j-1], D[i-1][j] + penalty^2, D[i][j-1] + penalty^2); "
      "D[-1][-1] = 0";
  dtw["result"] = "sqrt(D[L-1][L-1])";
  j["dtw"] = dtw;
  Json kernel;
  kernel["formula"] = "K = exp(-gamma * d^pwr_dist)";
  kernel["gamma"] = o.gamma;
  kernel["pwr_dist"] = o.power;
  kernel["distance_dtype"] = o.float32_kernel ? "float32" : "float64";
  kernel["kernel_dtype"] = o.float32_kernel ? "float32" : "float64";
  j["kernel"] = kernel;
  Json svc;
  svc["implementation"] = "libsvm C-SVC (one-vs-one)";
  svc["kernel"] = "precomputed";
  svc["C"] = o.C;
  svc["class_weight"] = weighting_name(o.weighting);
  svc["class_weight_"] = t.class_weights;
  svc["probability"] = o.probability;
  svc["random_state"] = o.seed;
  svc["tol"] = o.tolerance;
  svc["shrinking"] = o.shrinking;
  j["svc"] = svc;
}

Json postprocess_block(const std::vector<std::string>& columns) {
  Json post;
  post["pred_index"] = "argmax over probabilities (first maximum wins)";
  post["predicted_barcode"] = "label_mapper[pred_index]";
  post["confidence"] = "p_sorted[0] - p_sorted[1] (largest minus second largest)";
  post["threshold_rule"] = "if confidence < thresholds[pred_index] then predicted_barcode = -1";
  post["noise_label"] = kUnclassifiedLabel;
  std::vector<std::string> csv = {"#read_id", "predicted_barcode", "confidence_score"};
  csv.insert(csv.end(), columns.begin(), columns.end());
  post["csv_columns"] = csv;
  post["csv_rounding"] = {{"confidence_score", 3}, {"probabilities", 4}};
  return post;
}

// The support vectors: fingerprints, labels, class indices, and the SVM's coefficients.
void write_support_vectors(const TrainedDtwSvm& t, Json& j) {
  const size_t k = t.class_labels.size();
  const size_t n_sv = t.row_class.size();
  std::vector<int64_t> train_labels(n_sv), train_class(n_sv), support(n_sv);
  for (size_t s = 0; s < n_sv; ++s) {
    const auto c = static_cast<size_t>(t.row_class[s]);
    train_labels[s] = t.classes[c];
    train_class[s] = static_cast<int64_t>(c);
    support[s] = static_cast<int64_t>(s);
  }
  j["training_labels"] = train_labels;
  j["training_class_index"] = train_class;
  j["support_indices"] = support;
  j["n_support"] = t.n_support;
  j["intercept"] = t.intercept;
  if (t.options.probability) {
    j["prob_a"] = t.prob_a;
    j["prob_b"] = t.prob_b;
  }
  Json dual = Json::array();
  for (size_t r = 0; r + 1 < k; ++r) {
    const auto* row = t.dual_coef.data() + r * n_sv;
    dual.push_back(std::vector<double>(row, row + n_sv));
  }
  j["dual_coef"] = dual;
  Json fps = Json::array();
  for (size_t s = 0; s < n_sv; ++s) {
    const double* row = t.fingerprints.data() + s * t.n_features;
    fps.push_back(std::vector<double>(row, row + t.n_features));
  }
  j["training_fingerprints"] = fps;
}

}  // namespace

std::string serialize_dtw_svm(const TrainedDtwSvm& t) {
  const size_t k = t.class_labels.size();
  const size_t n_barcodes = t.has_noise() ? k - 1 : k;
  Json j;
  j["format"] = "escapepod-wdx-dtw-svm";
  j["format_version"] = 1;
  j["version"] = "1.0";
  j["model_name"] = t.model_name;
  j["chemistry"] = t.options.chemistry;
  j["signal_processing_config_name"] = t.options.signal_processing_config_name;
  j["training"] = training_block(t);
  j["barcodes"] = std::vector<int32_t>(t.class_labels.begin(),
                                       t.class_labels.begin() + static_cast<std::ptrdiff_t>(n_barcodes));
  j["noise_class"] = t.has_noise();
  j["n_barcodes"] = n_barcodes;
  j["n_classes"] = k;
  j["n_features"] = t.n_features;
  j["n_training"] = t.row_class.size();
  j["classes"] = t.classes;
  Json mapper = Json::object();
  std::vector<std::string> columns;
  for (size_t c = 0; c < k; ++c) {
    mapper[std::to_string(c)] = t.class_labels[c];
    columns.push_back(column_name(t.class_labels[c]));
  }
  j["label_mapper"] = mapper;
  j["output_columns"] = columns;
  j["thresholds"] = t.thresholds;
  write_parameters(t, j);
  j["postprocess"] = postprocess_block(columns);
  j["signal_processing"] = detail::signal_processing_json(t.options.signal_processing);
  write_support_vectors(t, j);
  std::string text = j.dump();
  text.push_back('\n');
  return text;
}

Result<ModelTemplate> load_model_template(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  const JsonFields f(path.string());
  if (!j.is_object()) return f.error("a template model must be a JSON object");
  ModelTemplate t;
  if (const Json* v = JsonFields::optional_member(j, "chemistry")) {
    ESCPOD_ASSIGN_OR_RETURN(t.chemistry, f.string(*v, "chemistry"));
  }
  if (const Json* v = JsonFields::optional_member(j, "signal_processing_config_name")) {
    ESCPOD_ASSIGN_OR_RETURN(t.signal_processing_config_name, f.string(*v, "signal_processing_config_name"));
  }
  if (const Json* sp = JsonFields::optional_member(j, "signal_processing")) {
    ESCPOD_ASSIGN_OR_RETURN(t.signal_processing, detail::signal_processing_from_json(*sp, f.file()));
    t.has_signal_processing = true;
  }
  return t;
}

void apply_template(const ModelTemplate& t, SvmTrainOptions& options) {
  options.chemistry = t.chemistry;
  options.signal_processing_config_name = t.signal_processing_config_name;
  options.signal_processing = t.signal_processing;
}

}  // namespace escpod::demux
