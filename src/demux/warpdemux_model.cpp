#include "escpod/demux/warpdemux_model.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "demux/kernel_exp.hpp"
#include "json_fields.hpp"

namespace escpod::demux {

namespace {

using detail::Json;
using detail::JsonFields;

constexpr size_t kAny = std::numeric_limits<size_t>::max();

std::string label_column(int32_t label) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "p%02d", static_cast<int>(label));
  return buf;
}

// libsvm's sigmoid_predict, written to avoid overflow on either side.
double platt(double decision, double a, double b) {
  const double f = decision * a + b;
  if (f >= 0.0) {
    const double e = std::exp(-f);
    return e / (1.0 + e);
  }
  return 1.0 / (1.0 + std::exp(f));
}

// libsvm's multiclass_probability (Wu, Lin and Weng 2004, method 2). r is k x k with
// r[i][j] = P(i | i or j); p receives the k probabilities. Every value is computed with libsvm's
// operations in libsvm's order; two things only change how fast: the Qp products run 8 rows at a
// time (independent add chains, each in column order) and the body is also compiled for AVX2
// (the update loop's divisions 4 wide). With many classes this is most of a read's time.
__attribute__((always_inline)) inline void couple_body(size_t k, const double* r, double* q,
                                                        double* qp, double* p) {
  const size_t max_iter = std::max<size_t>(100, k);
  const double eps = 0.005 / static_cast<double>(k);
  for (size_t t = 0; t < k; ++t) {
    p[t] = 1.0 / static_cast<double>(k);
    q[t * k + t] = 0.0;
    for (size_t j = 0; j < t; ++j) {
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = q[j * k + t];
    }
    for (size_t j = t + 1; j < k; ++j) {
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = -r[j * k + t] * r[t * k + j];
    }
  }
  constexpr size_t kRows = 8;
  for (size_t iter = 0; iter < max_iter; ++iter) {
    // qp[t] = sum_j q[t][j] p[j] (j ascending), kRows rows at once.
    size_t t0 = 0;
    for (; t0 + kRows <= k; t0 += kRows) {
      double acc[kRows] = {};
      for (size_t j = 0; j < k; ++j) {
        const double pj = p[j];
        for (size_t u = 0; u < kRows; ++u) acc[u] += q[(t0 + u) * k + j] * pj;
      }
      for (size_t u = 0; u < kRows; ++u) qp[t0 + u] = acc[u];
    }
    for (size_t t = t0; t < k; ++t) {
      double acc = 0.0;
      for (size_t j = 0; j < k; ++j) acc += q[t * k + j] * p[j];
      qp[t] = acc;
    }
    double pqp = 0.0;
    for (size_t t = 0; t < k; ++t) pqp += p[t] * qp[t];
    double max_error = 0.0;
    for (size_t t = 0; t < k; ++t) max_error = std::max(max_error, std::fabs(qp[t] - pqp));
    if (max_error < eps) break;
    for (size_t t = 0; t < k; ++t) {
      const double diff = (-qp[t] + pqp) / q[t * k + t];
      p[t] += diff;
      pqp = (pqp + diff * (diff * q[t * k + t] + 2.0 * qp[t])) / (1.0 + diff) / (1.0 + diff);
      for (size_t j = 0; j < k; ++j) {
        qp[j] = (qp[j] + diff * q[t * k + j]) / (1.0 + diff);
        p[j] /= (1.0 + diff);
      }
    }
  }
}

void couple_generic(size_t k, const double* r, double* q, double* qp, double* p) {
  couple_body(k, r, q, qp, p);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void couple_avx2(size_t k, const double* r, double* q, double* qp,
                                                 double* p) {
  couple_body(k, r, q, qp, p);
}
#endif

void couple(size_t k, const double* r, double* q, double* qp, double* p) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return couple_avx2(k, r, q, qp, p);
#endif
  couple_generic(k, r, q, qp, p);
}

// ---- reading a DTW-SVM model file, one part per function, in the order the file is checked ----

// A DTW-SVM file, not a GBM one or another format or version.
Status check_dtw_svm_kind(const Json& j, const JsonFields& f) {
  if (!j.is_object()) return f.error("top level must be a JSON object");
  if (const Json* mt = JsonFields::optional_member(j, "model_type");
      (mt && mt->is_string() && mt->get<std::string>() == "gbm") || j.contains("trees")) {
    return f.error("this is a GBM model (model_type gbm), not a DTW-SVM model");
  }
  if (const Json* fmt = JsonFields::optional_member(j, "format")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*fmt, "format"));
    if (s != "escapepod-wdx-dtw-svm") {
      return Status::unsupported(f.file() + ": format '" + s +
                                 "' is not a DTW-SVM model (expected escapepod-wdx-dtw-svm)");
    }
  }
  if (const Json* fv = JsonFields::optional_member(j, "format_version")) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t v, f.integer(*fv, "format_version"));
    if (v != 1) {
      return Status::unsupported(f.file() + ": format_version " + std::to_string(v) +
                                 " is not supported (this build reads 1)");
    }
  }
  return Status::ok();
}

// What describe() prints about the model's origin.
struct ModelIdentity {
  std::string name;       // model_name, else the file's stem
  std::string chemistry;  // empty when not given
  std::string source;     // one line: project, version, commit, licence; empty when not given
};

Result<ModelIdentity> read_identity(const Json& j, const JsonFields& f,
                                    const std::filesystem::path& path) {
  ModelIdentity id;
  id.name = path.stem().string();
  if (const Json* v = JsonFields::optional_member(j, "model_name")) {
    ESCPOD_ASSIGN_OR_RETURN(id.name, f.string(*v, "model_name"));
  }
  if (const Json* v = JsonFields::optional_member(j, "chemistry"); v && v->is_string()) {
    id.chemistry = v->get<std::string>();
  }
  if (const Json* src = JsonFields::optional_member(j, "source"); src && src->is_object()) {
    auto str = [&](const char* key) {
      const Json* e = JsonFields::optional_member(*src, key);
      return e && e->is_string() ? e->get<std::string>() : std::string();
    };
    id.source = !str("description").empty()
                    ? str("description")
                    : str("project") + " " + str("warpdemux_version") + " (commit " +
                          str("commit").substr(0, 7) + "), licence " + str("license");
  }
  return id;
}

// The class numbers (at least two, distinct), agreeing with n_classes when given.
Result<std::vector<int64_t>> read_classes(const Json& j, const JsonFields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* classes_j, f.member(j, "classes"));
  std::vector<int64_t> classes;
  ESCPOD_RETURN_IF_ERROR(f.integers(*classes_j, "classes", kAny, classes));
  const size_t k = classes.size();
  if (k < 2) return f.error("classes has " + std::to_string(k) + " entries, need at least 2");
  for (size_t a = 0; a < k; ++a)
    for (size_t b = a + 1; b < k; ++b)
      if (classes[a] == classes[b])
        return f.error("classes lists " + std::to_string(classes[a]) + " twice");
  if (const Json* v = JsonFields::optional_member(j, "n_classes")) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t nc, f.integer(*v, "n_classes"));
    if (nc != static_cast<int64_t>(k))
      return f.error("n_classes is " + std::to_string(nc) + " but classes has " +
                     std::to_string(k) + " entries");
  }
  return classes;
}

// training_fingerprints: equally long rows (n_features long when given), n_training of them
// when given.
struct TrainingRows {
  std::vector<double> values;  // n x width, row-major
  size_t n = 0, width = 0;
};

Result<TrainingRows> read_training_rows(const Json& j, const JsonFields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* fps_j, f.member(j, "training_fingerprints"));
  if (!fps_j->is_array() || fps_j->empty())
    return f.error("training_fingerprints must be a non-empty array of arrays");
  TrainingRows t;
  t.n = fps_j->size();
  t.width = kAny;
  if (const Json* v = JsonFields::optional_member(j, "n_features")) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t nf, f.integer(*v, "n_features"));
    if (nf <= 0) return f.error("n_features must be positive");
    t.width = static_cast<size_t>(nf);
  }
  std::vector<double> row;
  for (size_t r = 0; r < t.n; ++r) {
    ESCPOD_RETURN_IF_ERROR(f.doubles((*fps_j)[r], "training_fingerprints[" + std::to_string(r) + "]",
                                     t.width, row));
    if (row.empty()) return f.error("training_fingerprints[0] is empty");
    if (t.width == kAny) {
      t.width = row.size();
      t.values.reserve(t.n * t.width);
    }
    t.values.insert(t.values.end(), row.begin(), row.end());
  }
  if (const Json* v = JsonFields::optional_member(j, "n_training")) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t nt, f.integer(*v, "n_training"));
    if (nt != static_cast<int64_t>(t.n))
      return f.error("n_training is " + std::to_string(nt) + " but training_fingerprints has " +
                     std::to_string(t.n) + " rows");
  }
  return t;
}

// The class index of each training row, from training_labels (checked against
// training_class_index when given).
Result<std::vector<int32_t>> read_training_classes(const Json& j, const JsonFields& f,
                                                   std::span<const int64_t> classes, size_t n_train) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* labels_j, f.member(j, "training_labels"));
  std::vector<int64_t> train_labels;
  ESCPOD_RETURN_IF_ERROR(f.integers(*labels_j, "training_labels", n_train, train_labels));
  std::vector<int32_t> training_class(n_train);
  for (size_t r = 0; r < n_train; ++r) {
    auto it = std::find(classes.begin(), classes.end(), train_labels[r]);
    if (it == classes.end())
      return f.error("training_labels[" + std::to_string(r) + "] = " +
                     std::to_string(train_labels[r]) + " is not in classes");
    training_class[r] = static_cast<int32_t>(it - classes.begin());
  }
  if (const Json* v = JsonFields::optional_member(j, "training_class_index")) {
    std::vector<int64_t> tci;
    ESCPOD_RETURN_IF_ERROR(f.integers(*v, "training_class_index", n_train, tci));
    for (size_t r = 0; r < n_train; ++r)
      if (tci[r] != training_class[r])
        return f.error("training_class_index[" + std::to_string(r) + "] = " +
                       std::to_string(tci[r]) + " disagrees with training_labels (class index " +
                       std::to_string(training_class[r]) + ")");
  }
  return training_class;
}

// The support vectors: training rows, grouped by class (class c owns [start[c], start[c + 1])).
struct SupportVectors {
  std::vector<uint32_t> rows;
  std::vector<size_t> start;  // size k + 1
};

Result<std::vector<uint32_t>> read_support_rows(const Json& j, const JsonFields& f, size_t n_train) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* sup_j, f.member(j, "support_indices"));
  std::vector<int64_t> sup;
  ESCPOD_RETURN_IF_ERROR(f.integers(*sup_j, "support_indices", kAny, sup));
  if (sup.empty()) return f.error("support_indices is empty");
  std::vector<uint32_t> rows(sup.size());
  for (size_t s = 0; s < sup.size(); ++s) {
    if (sup[s] < 0 || static_cast<size_t>(sup[s]) >= n_train)
      return f.error("support_indices[" + std::to_string(s) + "] = " + std::to_string(sup[s]) +
                     " is outside the " + std::to_string(n_train) + " training rows");
    rows[s] = static_cast<uint32_t>(sup[s]);
  }
  return rows;
}

// Support vectors per class: n_support when given (summing to the support vectors), else counted
// from the rows' classes.
Result<std::vector<int64_t>> read_support_counts(const Json& j, const JsonFields& f,
                                                 std::span<const uint32_t> rows,
                                                 std::span<const int32_t> training_class, size_t k) {
  std::vector<int64_t> n_support(k, 0);
  const Json* v = JsonFields::optional_member(j, "n_support");
  if (v == nullptr) {
    for (uint32_t r : rows) ++n_support[static_cast<size_t>(training_class[r])];
    return n_support;
  }
  ESCPOD_RETURN_IF_ERROR(f.integers(*v, "n_support", k, n_support));
  int64_t total = 0;
  for (int64_t c : n_support) {
    if (c < 0) return f.error("n_support has a negative count");
    total += c;
  }
  if (total != static_cast<int64_t>(rows.size()))
    return f.error("n_support sums to " + std::to_string(total) + " but support_indices has " +
                   std::to_string(rows.size()) + " entries");
  return n_support;
}

Result<SupportVectors> read_support_vectors(const Json& j, const JsonFields& f,
                                            std::span<const int32_t> training_class, size_t k) {
  SupportVectors sv;
  ESCPOD_ASSIGN_OR_RETURN(sv.rows, read_support_rows(j, f, training_class.size()));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<int64_t> n_support,
                          read_support_counts(j, f, sv.rows, training_class, k));
  sv.start.assign(k + 1, 0);
  for (size_t c = 0; c < k; ++c) sv.start[c + 1] = sv.start[c] + static_cast<size_t>(n_support[c]);
  for (size_t c = 0; c < k; ++c)
    for (size_t s = sv.start[c]; s < sv.start[c + 1]; ++s)
      if (training_class[sv.rows[s]] != static_cast<int32_t>(c))
        return f.error("support vector " + std::to_string(s) + " (training row " +
                       std::to_string(sv.rows[s]) + ") belongs to class index " +
                       std::to_string(training_class[sv.rows[s]]) +
                       ", but n_support places it in class index " + std::to_string(c) +
                       " (support vectors must be grouped by class)");
  return sv;
}

// Dual coefficients, intercepts and the optional Platt parameters.
struct DecisionParams {
  std::vector<double> dual_coef;  // (k - 1) x n_sv, row-major, as in the file
  std::vector<double> intercept;  // per class pair
  std::vector<double> prob_a, prob_b;  // per class pair, empty without Platt scaling
};

Result<DecisionParams> read_decision_params(const Json& j, const JsonFields& f, size_t k,
                                            size_t n_sv) {
  const size_t n_pairs = k * (k - 1) / 2;
  DecisionParams d;
  ESCPOD_ASSIGN_OR_RETURN(const Json* dc_j, f.member(j, "dual_coef"));
  if (!dc_j->is_array() || dc_j->size() != k - 1)
    return f.error("dual_coef must have n_classes - 1 = " + std::to_string(k - 1) + " rows");
  d.dual_coef.reserve((k - 1) * n_sv);
  std::vector<double> row;
  for (size_t r = 0; r + 1 < k; ++r) {
    ESCPOD_RETURN_IF_ERROR(
        f.doubles((*dc_j)[r], "dual_coef[" + std::to_string(r) + "] (one value per support vector)",
                  n_sv, row));
    d.dual_coef.insert(d.dual_coef.end(), row.begin(), row.end());
  }
  ESCPOD_ASSIGN_OR_RETURN(const Json* ic_j, f.member(j, "intercept"));
  ESCPOD_RETURN_IF_ERROR(f.doubles(*ic_j, "intercept (one per class pair)", n_pairs, d.intercept));
  const Json* pa = JsonFields::optional_member(j, "prob_a");
  const Json* pb = JsonFields::optional_member(j, "prob_b");
  if ((pa == nullptr) != (pb == nullptr)) return f.error("prob_a and prob_b must come together");
  if (pa) {
    ESCPOD_RETURN_IF_ERROR(f.doubles(*pa, "prob_a (one per class pair)", n_pairs, d.prob_a));
    ESCPOD_RETURN_IF_ERROR(f.doubles(*pb, "prob_b (one per class pair)", n_pairs, d.prob_b));
  }
  return d;
}

// A DTW setting given at the top level, under "dtw", or both (then equal); not negative.
// `found` says whether either was given (`out` is left alone otherwise).
Status read_dtw_setting(const Json& j, const JsonFields& f, const char* key, bool integral,
                        double& out, bool& found) {
  found = false;
  const Json* dtw_j = JsonFields::optional_member(j, "dtw");
  const Json* top = JsonFields::optional_member(j, key);
  const Json* nested = dtw_j ? JsonFields::optional_member(*dtw_j, key) : nullptr;
  auto read_value = [&](const Json& v, const std::string& what) -> Result<double> {
    if (!integral) return f.number(v, what);
    ESCPOD_ASSIGN_OR_RETURN(int64_t x, f.integer(v, what));
    return static_cast<double>(x);
  };
  double a = 0, b = 0;
  if (top) {
    ESCPOD_ASSIGN_OR_RETURN(a, read_value(*top, key));
  }
  if (nested) {
    ESCPOD_ASSIGN_OR_RETURN(b, read_value(*nested, std::string("dtw.") + key));
  }
  if (top && nested && a != b) return f.error(std::string(key) + " and dtw." + key + " disagree");
  if (top || nested) {
    found = true;
    out = top ? a : b;
    if (out < 0) return f.error(std::string(key) + " must not be negative");
  }
  return Status::ok();
}

// How a fingerprint is compared with the training rows: the kernel exp(-gamma d^power) over DTW
// distances d.
struct KernelSettings {
  double gamma = 1.0, power = 1.0;
  bool f32 = false;  // kernel.distance_dtype float32
  DtwParams dtw;
  bool weighted = false;  // use_kernel_weighted
};

Result<KernelSettings> read_kernel_settings(const Json& j, const JsonFields& f) {
  KernelSettings k;
  const Json* kp = JsonFields::optional_member(j, "kernel_params");
  if (kp == nullptr) return f.error("missing field 'kernel_params' (gamma, power)");
  ESCPOD_ASSIGN_OR_RETURN(const Json* g, f.member(*kp, "gamma"));
  ESCPOD_ASSIGN_OR_RETURN(k.gamma, f.number(*g, "kernel_params.gamma"));
  ESCPOD_ASSIGN_OR_RETURN(const Json* p, f.member(*kp, "power"));
  ESCPOD_ASSIGN_OR_RETURN(k.power, f.number(*p, "kernel_params.power"));
  if (!(k.gamma > 0.0)) return f.error("kernel_params.gamma must be > 0");
  if (!(k.power > 0.0)) return f.error("kernel_params.power must be > 0");
  if (const Json* kj = JsonFields::optional_member(j, "kernel")) {
    if (const Json* dt = JsonFields::optional_member(*kj, "distance_dtype"); dt && dt->is_string()) {
      k.f32 = dt->get<std::string>() == "float32";
    }
  }
  double window = 0, penalty = 0;
  bool found = false;
  ESCPOD_RETURN_IF_ERROR(read_dtw_setting(j, f, "window", true, window, found));
  ESCPOD_RETURN_IF_ERROR(read_dtw_setting(j, f, "penalty", false, penalty, found));
  k.dtw.window = static_cast<size_t>(window);
  k.dtw.penalty = penalty;
  if (const Json* v = JsonFields::optional_member(j, "use_kernel_weighted")) {
    ESCPOD_ASSIGN_OR_RETURN(k.weighted, f.boolean(*v, "use_kernel_weighted"));
  }
  return k;
}

// What each class index is called and when it is called.
struct LabelSettings {
  std::vector<int32_t> labels;  // per class index, -1 = noise
  int32_t noise_index = -1;
  std::vector<double> thresholds;  // per class index, empty when not given
  std::vector<int32_t> barcodes;
  std::vector<std::string> output_columns;  // "p03" ... "p-1"
};

Result<std::vector<int32_t>> read_label_mapper(const Json& j, const JsonFields& f, size_t k) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* lm_j, f.member(j, "label_mapper"));
  if (!lm_j->is_object()) return f.error("label_mapper must be an object {class index: label}");
  if (lm_j->size() != k)
    return f.error("label_mapper has " + std::to_string(lm_j->size()) + " entries, expected " +
                   std::to_string(k) + " (one per class index)");
  std::vector<int32_t> labels(k);
  for (size_t c = 0; c < k; ++c) {
    const std::string key = std::to_string(c);
    auto it = lm_j->find(key);
    if (it == lm_j->end()) return f.error("label_mapper has no entry for class index " + key);
    ESCPOD_ASSIGN_OR_RETURN(int64_t lab, f.integer(*it, "label_mapper[\"" + key + "\"]"));
    if (lab < std::numeric_limits<int32_t>::min() || lab > std::numeric_limits<int32_t>::max())
      return f.error("label_mapper[\"" + key + "\"] is out of range");
    labels[c] = static_cast<int32_t>(lab);
  }
  return labels;
}

Result<LabelSettings> read_label_settings(const Json& j, const JsonFields& f, size_t k) {
  LabelSettings s;
  ESCPOD_ASSIGN_OR_RETURN(s.labels, read_label_mapper(j, f, k));
  for (size_t c = 0; c < k; ++c)
    if (s.labels[c] == kUnclassifiedLabel) s.noise_index = static_cast<int32_t>(c);
  bool noise_class = false;
  if (const Json* v = JsonFields::optional_member(j, "noise_class")) {
    ESCPOD_ASSIGN_OR_RETURN(noise_class, f.boolean(*v, "noise_class"));
  }
  if (noise_class && s.noise_index < 0)
    return f.error("noise_class is true but no class maps to label -1 in label_mapper");
  if (const Json* v = JsonFields::optional_member(j, "thresholds")) {
    ESCPOD_RETURN_IF_ERROR(f.doubles(*v, "thresholds (one per class)", k, s.thresholds));
  }
  if (const Json* v = JsonFields::optional_member(j, "barcodes")) {
    std::vector<int64_t> bc;
    ESCPOD_RETURN_IF_ERROR(f.integers(*v, "barcodes", kAny, bc));
    for (int64_t b : bc) s.barcodes.push_back(static_cast<int32_t>(b));
  } else {
    for (int32_t lab : s.labels)
      if (lab != kUnclassifiedLabel) s.barcodes.push_back(lab);
  }
  for (int32_t lab : s.labels) s.output_columns.push_back(label_column(lab));
  return s;
}

}  // namespace

Result<WarpDemuxModel> WarpDemuxModel::load(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  return detail::ModelBuilder::dtw_svm(j, path);
}

// The file's parts are read (and checked) in file order, so the first fault reported is always
// the same one.
Result<WarpDemuxModel> detail::ModelBuilder::dtw_svm(const Json& j, const std::filesystem::path& path) {
  const JsonFields f(path.string());
  ESCPOD_RETURN_IF_ERROR(check_dtw_svm_kind(j, f));
  ESCPOD_ASSIGN_OR_RETURN(ModelIdentity id, read_identity(j, f, path));
  ESCPOD_ASSIGN_OR_RETURN(const std::vector<int64_t> classes, read_classes(j, f));
  const size_t k = classes.size();
  ESCPOD_ASSIGN_OR_RETURN(TrainingRows training, read_training_rows(j, f));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<int32_t> training_class,
                          read_training_classes(j, f, classes, training.n));
  ESCPOD_ASSIGN_OR_RETURN(SupportVectors sv, read_support_vectors(j, f, training_class, k));
  ESCPOD_ASSIGN_OR_RETURN(DecisionParams decision, read_decision_params(j, f, k, sv.rows.size()));
  ESCPOD_ASSIGN_OR_RETURN(const KernelSettings kernel, read_kernel_settings(j, f));
  ESCPOD_ASSIGN_OR_RETURN(LabelSettings labels, read_label_settings(j, f, k));

  WarpDemuxModel m;
  m.m_path = path;
  m.m_name = std::move(id.name);
  m.m_chemistry = std::move(id.chemistry);
  m.m_source = std::move(id.source);
  m.m_class_rows.assign(k, 0);
  for (int32_t c : training_class) ++m.m_class_rows[static_cast<size_t>(c)];
  m.m_training_class = std::move(training_class);
  m.m_support_rows = std::move(sv.rows);
  m.m_sv_start = std::move(sv.start);
  m.m_intercept = std::move(decision.intercept);
  m.m_prob_a = std::move(decision.prob_a);
  m.m_prob_b = std::move(decision.prob_b);
  m.m_gamma = kernel.gamma;
  m.m_power = kernel.power;
  m.m_kernel_f32 = kernel.f32;
  m.m_dtw = kernel.dtw;
  m.m_kernel_weighted = kernel.weighted;
  m.m_labels = std::move(labels.labels);
  m.m_noise_index = labels.noise_index;
  m.m_thresholds = std::move(labels.thresholds);
  m.m_barcodes = std::move(labels.barcodes);
  m.m_output_columns = std::move(labels.output_columns);
  m.m_bank = DtwBank(training.values, training.n, training.width);
  m.build_decision_layout(decision.dual_coef);
  return m;
}

WarpDemuxModel::Scratch WarpDemuxModel::make_scratch() const {
  Scratch s;
  const size_t k = n_classes();
  s.dtw.resize(m_bank.scratch_size());
  s.dtw_f32.resize(m_bank.scratch_size_f32());
  s.distances.resize(n_training());
  s.kernel.resize(n_training());
  s.kernel_arg.resize(n_training());
  s.sv_kernel.resize(n_support());
  s.decision.resize(n_pairs());
  s.pairwise.resize(n_pairs());
  s.r.resize(k * k);
  s.q.resize(k * k);
  s.qp.resize(k);
  return s;
}

void WarpDemuxModel::distances(std::span<const double> fingerprint, Scratch& s,
                               std::span<double> out, DtwPrecision dtw) const {
  if (dtw == DtwPrecision::kFloat32) {
    if (s.dtw_f32.size() < m_bank.scratch_size_f32()) s.dtw_f32.resize(m_bank.scratch_size_f32());
    m_bank.distances_to_f32(fingerprint, m_dtw, s.dtw_f32, out);
    return;
  }
  if (s.dtw.size() < m_bank.scratch_size()) s.dtw.resize(m_bank.scratch_size());
  m_bank.distances_to(fingerprint, m_dtw, s.dtw, out);
}

// One-vs-one decision values, libsvm's arithmetic exactly: for pair (a, b),
//   sum = 0; sum += coef[b-1][sv] * K[sv] over class a's SVs, then coef[a][sv] * K[sv] over class
//   b's, in SV order; decision = sum - rho.
// Each pair's sum is a chain of dependent adds and every coefficient is used once per read (24 MB
// a read for a 384-class model), so pairs go kDecisionLanes at a time with their coefficients
// stored in consumption order: pass 1 takes the class-a halves of pairs (a, b..b+7), which share
// K[sv]; pass 2 continues the class-b halves of pairs (a..a+7, b) from the partial sums. Per lane
// the operations and their order are libsvm's (mul, then add; no FMA), so the values are
// bit-identical to the pair-at-a-time loop (a unit test recomputes them), and the lanes are one
// SIMD vector each step reading one sequential stream.
void WarpDemuxModel::build_decision_layout(const std::vector<double>& dual_coef) {
  constexpr size_t L = kDecisionLanes;
  const size_t k = n_classes();
  const size_t n_sv = n_support();
  m_coef_by_group.clear();
  for (size_t a = 0; a < k; ++a) {  // pass 1
    for (size_t b0 = a + 1; b0 < k; b0 += L) {
      for (size_t sv = m_sv_start[a]; sv < m_sv_start[a + 1]; ++sv)
        for (size_t t = 0; t < L; ++t)
          m_coef_by_group.push_back(b0 + t < k ? dual_coef[(b0 + t - 1) * n_sv + sv] : 0.0);
    }
  }
  for (size_t b = 1; b < k; ++b) {  // pass 2
    for (size_t a0 = 0; a0 < b; a0 += L) {
      for (size_t sv = m_sv_start[b]; sv < m_sv_start[b + 1]; ++sv)
        for (size_t t = 0; t < L; ++t)
          m_coef_by_group.push_back(a0 + t < b ? dual_coef[(a0 + t) * n_sv + sv] : 0.0);
    }
  }
}

namespace {

// The loops of decision_values (see there). The two passes are written once; `group` adds one
// group's coefficients times the SV kernels into its 8 sums: acc[t] += coef[sv][t] * kv[sv] for
// sv in [lo, hi), in SV order, and returns the next group's coefficients. A portable and an AVX2
// group perform the same operations per lane.
struct DecisionInputs {
  size_t k;
  const size_t* sv_start;
  const double* coef;
  const double* kv;
  const double* intercept;
  double* decision;
};

using DecisionGroup = const double* (*)(const double* c, const double* kv, size_t lo, size_t hi,
                                        double* acc);

void decision_passes(const DecisionInputs& in, DecisionGroup group) {
  constexpr size_t L = 8;
  const size_t k = in.k;
  const double* c = in.coef;
  auto pair_index = [k](size_t a, size_t b) { return a * k - a * (a + 1) / 2 + (b - a - 1); };
  alignas(32) double acc[L];
  for (size_t a = 0; a < k; ++a) {  // pass 1
    for (size_t b0 = a + 1; b0 < k; b0 += L) {
      for (double& v : acc) v = 0.0;
      c = group(c, in.kv, in.sv_start[a], in.sv_start[a + 1], acc);
      const size_t n = std::min(L, k - b0);
      for (size_t t = 0; t < n; ++t) in.decision[pair_index(a, b0 + t)] = acc[t];
    }
  }
  for (size_t b = 1; b < k; ++b) {  // pass 2
    for (size_t a0 = 0; a0 < b; a0 += L) {
      const size_t n = std::min(L, b - a0);
      for (size_t t = 0; t < L; ++t) acc[t] = t < n ? in.decision[pair_index(a0 + t, b)] : 0.0;
      c = group(c, in.kv, in.sv_start[b], in.sv_start[b + 1], acc);
      for (size_t t = 0; t < n; ++t) {
        const size_t pair = pair_index(a0 + t, b);
        in.decision[pair] = acc[t] - (-in.intercept[pair]);  // libsvm: sum - rho, rho = -intercept
      }
    }
  }
}

const double* decision_group_generic(const double* c, const double* kv, size_t lo, size_t hi,
                                     double* acc) {
  for (size_t sv = lo; sv < hi; ++sv, c += 8) {
    const double x = kv[sv];
    for (size_t t = 0; t < 8; ++t) acc[t] += c[t] * x;
  }
  return c;
}

#if defined(__x86_64__)
// The 8 sums held in two registers (left to itself, GCC keeps them in memory and shuffles).
__attribute__((target("avx2"))) const double* decision_group_avx2(const double* c,
                                                                   const double* kv, size_t lo,
                                                                   size_t hi, double* acc) {
  __m256d a0 = _mm256_load_pd(acc), a1 = _mm256_load_pd(acc + 4);
  for (size_t sv = lo; sv < hi; ++sv, c += 8) {
    const __m256d x = _mm256_set1_pd(kv[sv]);
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(_mm256_loadu_pd(c), x));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(_mm256_loadu_pd(c + 4), x));
  }
  _mm256_store_pd(acc, a0);
  _mm256_store_pd(acc + 4, a1);
  return c;
}
#endif

}  // namespace

void WarpDemuxModel::decision_values(Scratch& s) const {
  static_assert(kDecisionLanes == 8, "decision_passes groups 8 pairs");
  const size_t n_sv = n_support();
  double* kv = s.sv_kernel.data();
  for (size_t sv = 0; sv < n_sv; ++sv) kv[sv] = s.kernel[m_support_rows[sv]];
  const DecisionInputs in{n_classes(), m_sv_start.data(), m_coef_by_group.data(), kv,
                          m_intercept.data(), s.decision.data()};
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return decision_passes(in, decision_group_avx2);
#endif
  decision_passes(in, decision_group_generic);
}

void WarpDemuxModel::kernel_values(Scratch& s, bool f32) const {
  const size_t n_train = n_training();
  if (f32) {
    const auto neg_gamma = static_cast<float>(-m_gamma);
    float* x = s.kernel_arg.data();
    for (size_t r = 0; r < n_train; ++r) {
      const auto d = static_cast<float>(s.distances[r]);
      const float dp = m_power == 1.0 ? d : static_cast<float>(std::pow(static_cast<double>(d), m_power));
      x[r] = neg_gamma * dp;
    }
    detail::exp_to_float(x, n_train, s.kernel.data());
    return;
  }
  for (size_t r = 0; r < n_train; ++r) {
    const double d = s.distances[r];
    s.kernel[r] = std::exp(-m_gamma * (m_power == 1.0 ? d : std::pow(d, m_power)));
  }
}

void WarpDemuxModel::pair_decisions(Scratch& s) const {
  if (!m_kernel_weighted) return decision_values(s);
  // Class score = mean kernel over the class's training rows; f_ab = score_a - score_b.
  const size_t k = n_classes();
  double* score = s.qp.data();
  std::fill(score, score + k, 0.0);
  for (size_t r = 0; r < n_training(); ++r) score[m_training_class[r]] += s.kernel[r];
  for (size_t c = 0; c < k; ++c)
    score[c] = m_class_rows[c] ? score[c] / static_cast<double>(m_class_rows[c]) : 0.0;
  size_t pair = 0;
  for (size_t a = 0; a < k; ++a)
    for (size_t b = a + 1; b < k; ++b) s.decision[pair++] = score[a] - score[b];
}

void WarpDemuxModel::class_probabilities(Scratch& s, double* p) const {
  const size_t k = n_classes();
  size_t pair = 0;
  if (has_platt()) {
    constexpr double kMinProb = 1e-7;
    for (size_t a = 0; a < k; ++a) {
      for (size_t b = a + 1; b < k; ++b) {
        double r = platt(s.decision[pair], m_prob_a[pair], m_prob_b[pair]);
        r = std::min(std::max(r, kMinProb), 1.0 - kMinProb);
        s.pairwise[pair] = r;
        s.r[a * k + b] = r;
        s.r[b * k + a] = 1.0 - r;
        ++pair;
      }
    }
    if (k == 2) {
      p[0] = s.r[1];
      p[1] = s.r[2];
    } else {
      couple(k, s.r.data(), s.q.data(), s.qp.data(), p);
    }
    return;
  }
  // escapepod without Platt parameters: each pair votes sigmoid(f) / 1 - sigmoid(f).
  std::fill(p, p + k, 0.0);
  for (size_t a = 0; a < k; ++a) {
    for (size_t b = a + 1; b < k; ++b) {
      const double sig = 1.0 / (1.0 + std::exp(-s.decision[pair]));
      s.pairwise[pair] = sig;
      p[a] += sig;
      p[b] += 1.0 - sig;
      ++pair;
    }
  }
  double total = 0.0;
  for (size_t c = 0; c < k; ++c) total += p[c];
  if (total > 0.0)
    for (size_t c = 0; c < k; ++c) p[c] /= total;
}

void WarpDemuxModel::classify(std::span<const double> fingerprint, Scratch& s, Classification& out,
                              KernelPrecision precision, DtwPrecision dtw) const {
  const size_t k = n_classes();
  bool usable = fingerprint.size() == n_features();
  for (size_t i = 0; usable && i < fingerprint.size(); ++i) usable = std::isfinite(fingerprint[i]);
  if (!usable) {
    out.set_invalid_input();
    return;
  }
  if (s.distances.size() != n_training() || s.kernel_arg.size() != n_training() || s.r.size() != k * k ||
      s.sv_kernel.size() != n_support()) {
    s = make_scratch();
  }
  distances(fingerprint, s, s.distances, dtw);
  kernel_values(s, precision == KernelPrecision::kFloat32 ||
                       (precision == KernelPrecision::kModelDefault && m_kernel_f32));
  pair_decisions(s);
  out.probabilities.resize(k);
  class_probabilities(s, out.probabilities.data());
  apply_decision_rule(m_labels, m_thresholds, m_noise_index, TieRule::kFirstMax, out);
}

std::string WarpDemuxModel::describe() const {
  std::ostringstream o;
  o << "model:          " << m_name << "\n";
  o << "file:           " << m_path.string() << "\n";
  if (!m_chemistry.empty()) o << "chemistry:      " << m_chemistry << "\n";
  o << "kind:           DTW-kernel SVM (WarpDemuX-compatible)\n";
  o << "barcodes:      ";
  for (int32_t b : m_barcodes) o << " " << b;
  o << "\n";
  o << "classes:        " << n_classes();
  if (m_noise_index >= 0) o << " (class " << m_noise_index << " is the noise class, label -1)";
  o << "\n";
  o << "  index  label  column  threshold  training rows  support vectors\n";
  for (size_t c = 0; c < n_classes(); ++c) {
    char line[160];
    std::snprintf(line, sizeof line, "  %5zu  %5d  %-6s  %9s  %13zu  %15zu\n", c,
                  static_cast<int>(m_labels[c]), m_output_columns[c].c_str(),
                  m_thresholds.empty() ? "-" : std::to_string(m_thresholds[c]).substr(0, 6).c_str(),
                  m_class_rows[c], m_sv_start[c + 1] - m_sv_start[c]);
    o << line;
  }
  o << "fingerprint:    " << n_features() << " values\n";
  o << "training rows:  " << n_training() << " (" << n_support() << " support vectors)\n";
  o << "DTW:            window " << m_dtw.window << " (band |i-j| <= " << m_dtw.window
    << " - 1), penalty " << m_dtw.penalty << " (squared per non-diagonal step)\n";
  o << "DTW arithmetic: float32 by default (" << (m_bank.f32_uses_simd() ? "AVX2+FMA" : "portable")
    << "), or float64 = dtaidistance bit for bit (" << dtw_isa_name(m_bank.isa()) << ")\n";
  o << "kernel:         exp(-" << m_gamma << " * d^" << m_power << "), "
    << (m_kernel_f32 ? "float32" : "float64") << (m_kernel_weighted ? ", kernel-weighted" : "")
    << "\n";
  o << "probabilities:  "
    << (has_platt() ? "Platt scaling + pairwise coupling (libsvm)" : "pairwise sigmoid votes")
    << "\n";
  if (!m_source.empty()) o << "source:         " << m_source << "\n";
  return o.str();
}

}  // namespace escpod::demux
