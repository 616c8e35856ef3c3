#include "escpod/demux/train_svm.hpp"

#include <svm.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/demux/dtw.hpp"

namespace escpod::demux {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kNoise = -1;
constexpr int32_t kMaxBarcode = 999;
constexpr size_t kMaxRows = 40000;    // kernel matrix 16 n^2 bytes (25.6 GB at the limit)
constexpr double kNeverThreshold = 1.01;  // above any confidence: the class is never called

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// libsvm keeps global state (print hook) and draws Platt folds from rand(): one user at a time.
std::mutex& libsvm_mutex() {
  static std::mutex m;
  return m;
}

void libsvm_quiet(const char*) {}

struct ModelDeleter {
  void operator()(svm_model* m) const { svm_free_and_destroy_model(&m); }
};
using ModelPtr = std::unique_ptr<svm_model, ModelDeleter>;

// The n x n precomputed kernel as libsvm rows: row i is n + 2 nodes, [0] = (0, i + 1) (libsvm's
// 1-based sample id), [j + 1] = (j + 1, K(i, j)), [n + 1] = (-1, 0) terminator.
struct KernelMatrix {
  size_t n = 0;
  std::vector<svm_node> nodes;
  std::vector<svm_node*> rows;

  svm_node* row(size_t i) { return rows[i]; }
};

double kernel_value(double d, const SvmTrainOptions& o) {
  if (o.float32_kernel) {
    // Same arithmetic as WarpDemuxModel::classify's float32 path (and WarpDemuX's numpy float32).
    const auto d32 = static_cast<float>(d);
    const float dp =
        o.power == 1.0 ? d32 : static_cast<float>(std::pow(static_cast<double>(d32), o.power));
    const float x = static_cast<float>(-o.gamma) * dp;
    return static_cast<double>(static_cast<float>(std::exp(static_cast<double>(x))));
  }
  return std::exp(-o.gamma * (o.power == 1.0 ? d : std::pow(d, o.power)));
}

KernelMatrix build_kernel(std::span<const double> rows, size_t n, size_t width,
                          const SvmTrainOptions& o) {
  KernelMatrix km;
  km.n = n;
  km.nodes.resize(n * (n + 2));
  km.rows.resize(n);
  const DtwBank bank(rows, n, width);
  const DtwParams params{static_cast<size_t>(o.window), o.penalty};
  // The n x n DTW distances are the long part of training (the SVM fit itself is quick).
  progress::Task task(n, 0, {.label = "train: DTW kernel", .unit = "rows"});
  auto rows_of_chunk = [&](size_t begin, size_t end) {
    std::vector<double> scratch(bank.scratch_size());
    std::vector<double> dist(n);
    for (size_t i = begin; i != end; ++i) {
      bank.distances_to(rows.subspan(i * width, width), params, scratch, dist);
      svm_node* r = km.nodes.data() + i * (n + 2);
      r[0].index = 0;
      r[0].value = static_cast<double>(i + 1);
      for (size_t j = 0; j < n; ++j) {
        r[j + 1].index = static_cast<int>(j + 1);
        r[j + 1].value = kernel_value(dist[j], o);
      }
      r[n + 1].index = -1;
      r[n + 1].value = 0.0;
    }
    task.add(end - begin);
  };
  // In the process's pool (n_threads 0: the one the CLI installed from -t); chunks of 4 rows
  // share one scratch.
  (void)parallel_for_chunks(Executor::for_threads(o.n_threads), n, 4, rows_of_chunk);
  // DTW is symmetric bit for bit for equal lengths; enforce it so that libsvm sees an exactly
  // symmetric Gram matrix whatever the arithmetic did.
  for (size_t i = 0; i < n; ++i) {
    km.rows[i] = km.nodes.data() + i * (n + 2);
    for (size_t j = 0; j < i; ++j) km.rows[i][j + 1].value = km.nodes[j * (n + 2) + i + 1].value;
  }
  return km;
}

struct Problem {
  std::vector<double> y;
  std::vector<svm_node*> x;
  svm_problem prob{};
  void finish() {
    prob.l = static_cast<int>(y.size());
    prob.y = y.data();
    prob.x = x.data();
  }
};

// Trains on the given rows (sorted by class, so that libsvm's class order, which is the order of
// first appearance, is the class-index order). Caller holds libsvm_mutex().
Result<ModelPtr> train_svm_locked(KernelMatrix& km, std::span<const size_t> train_rows,
                                  std::span<const int32_t> row_class, size_t k,
                                  std::span<const double> weights, const SvmTrainOptions& o,
                                  unsigned seed, Problem& problem) {
  problem.y.clear();
  problem.x.clear();
  for (size_t r : train_rows) {
    problem.y.push_back(static_cast<double>(row_class[r]));
    problem.x.push_back(km.row(r));
  }
  problem.finish();
  std::vector<int> weight_label(k);
  std::vector<double> weight(weights.begin(), weights.end());
  for (size_t c = 0; c < k; ++c) weight_label[c] = static_cast<int>(c);
  svm_parameter p{};
  p.svm_type = C_SVC;
  p.kernel_type = PRECOMPUTED;
  p.degree = 3;
  p.gamma = 0.0;
  p.coef0 = 0.0;
  p.cache_size = o.cache_mb;
  p.eps = o.tolerance;
  p.C = o.C;
  p.nr_weight = static_cast<int>(k);
  p.weight_label = weight_label.data();
  p.weight = weight.data();
  p.nu = 0.5;
  p.p = 0.1;
  p.shrinking = o.shrinking ? 1 : 0;
  p.probability = o.probability ? 1 : 0;
  if (const char* err = svm_check_parameter(&problem.prob, &p))
    return Status::invalid_argument(std::string("libsvm rejected the parameters: ") + err);
  svm_set_print_string_function(&libsvm_quiet);
  std::srand(seed);
  svm_model* m = svm_train(&problem.prob, &p);
  if (m == nullptr) return Status::internal("libsvm svm_train returned no model");
  // svm_train keeps pointers to param's weight arrays only during training; clear them so the
  // model never refers to our locals.
  m->param.weight_label = nullptr;
  m->param.weight = nullptr;
  m->param.nr_weight = 0;
  return ModelPtr(m);
}

struct Call {
  int32_t cls = -1;  // argmax class index
  double confidence = 0.0;
};

// Class probabilities of kernel row `x` under `m`, mapped to class indices (classes absent from
// the model get 0), argmax (first maximum) and top-1 minus top-2.
Call predict_locked(const svm_model* m, const svm_node* x, size_t k, std::vector<double>& buf,
                    std::vector<double>& p) {
  const int nc = svm_get_nr_class(m);
  buf.assign(static_cast<size_t>(nc), 0.0);
  p.assign(k, 0.0);
  if (svm_check_probability_model(m)) {
    svm_predict_probability(m, x, buf.data());
    for (int i = 0; i < nc; ++i) p[static_cast<size_t>(m->label[i])] = buf[static_cast<size_t>(i)];
  } else {
    const double lab = svm_predict(m, x);
    p[static_cast<size_t>(lab)] = 1.0;
  }
  Call c;
  size_t best = 0;
  for (size_t i = 1; i < k; ++i)
    if (p[i] > p[best]) best = i;
  double second = -1.0;
  for (size_t i = 0; i < k; ++i)
    if (i != best) second = std::max(second, p[i]);
  c.cls = static_cast<int32_t>(best);
  c.confidence = k > 1 ? p[best] - second : 1.0;
  return c;
}

Status validate(std::span<const double> fps, size_t width, std::span<const int32_t> labels,
                const SvmTrainOptions& o) {
  if (labels.empty()) return Status::invalid_argument("no training fingerprints");
  if (width == 0) return Status::invalid_argument("n_features must be positive");
  if (labels.size() > kMaxRows)
    return Status::invalid_argument(
        std::to_string(labels.size()) + " training fingerprints: at most " +
        std::to_string(kMaxRows) + " (the n x n kernel matrix takes 16 n^2 bytes; subsample)");
  if (fps.size() != labels.size() * width)
    return Status::invalid_argument(
        "fingerprints hold " + std::to_string(fps.size()) + " values, expected " +
        std::to_string(labels.size()) + " rows x " + std::to_string(width) + " features = " +
        std::to_string(labels.size() * width));
  for (size_t i = 0; i < fps.size(); ++i)
    if (!std::isfinite(fps[i]))
      return Status::invalid_argument("fingerprint row " + std::to_string(i / width) + " value " +
                                      std::to_string(i % width) + " is not finite");
  for (size_t r = 0; r < labels.size(); ++r)
    if (labels[r] != kNoise && (labels[r] < 1 || labels[r] > kMaxBarcode))
      return Status::invalid_argument("label of row " + std::to_string(r) + " is " +
                                      std::to_string(labels[r]) +
                                      " (expected a barcode number 1..999 or -1 for noise)");
  auto positive = [](double v) { return std::isfinite(v) && v > 0.0; };
  if (!positive(o.C)) return Status::invalid_argument("C must be a positive number");
  if (!positive(o.tolerance)) return Status::invalid_argument("tolerance must be positive");
  if (!positive(o.cache_mb)) return Status::invalid_argument("cache_mb must be positive");
  if (!positive(o.gamma)) return Status::invalid_argument("gamma must be positive");
  if (!positive(o.power)) return Status::invalid_argument("power must be positive");
  if (o.window < 0) return Status::invalid_argument("window must not be negative");
  if (!(std::isfinite(o.penalty) && o.penalty >= 0.0))
    return Status::invalid_argument("penalty must be a non-negative number");
  if (o.n_threads < 0) return Status::invalid_argument("n_threads must not be negative");
  if (o.thresholds == ThresholdMode::kCrossValidated) {
    if (!(o.target_precision > 0.0 && o.target_precision <= 1.0))
      return Status::invalid_argument("target_precision must be in (0, 1]");
    if (o.threshold_folds < 2) return Status::invalid_argument("threshold_folds must be >= 2");
    if (!o.probability)
      return Status::invalid_argument(
          "cross-validated thresholds need probability estimates (probability = true)");
  }
  return Status::ok();
}

// Stratified folds: rows of each class shuffled (mt19937_64, seed) and dealt round-robin.
std::vector<int> make_folds(std::span<const int32_t> row_class, size_t k, int folds,
                            uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<int> fold(row_class.size(), 0);
  for (size_t c = 0; c < k; ++c) {
    std::vector<size_t> rows;
    for (size_t r = 0; r < row_class.size(); ++r)
      if (row_class[r] == static_cast<int32_t>(c)) rows.push_back(r);
    for (size_t i = rows.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(rng() % i);
      std::swap(rows[i - 1], rows[j]);
    }
    for (size_t i = 0; i < rows.size(); ++i)
      fold[rows[i]] = static_cast<int>(i % static_cast<size_t>(folds));
  }
  return fold;
}

// The classes of a training set: barcodes ascending, then noise when any row is noise.
struct ClassSet {
  std::vector<int32_t> labels;    // label of each class index
  std::vector<int64_t> internal;  // WarpDemuX's (scikit-learn) class number of each class index
  bool has_noise = false;

  size_t size() const { return labels.size(); }
};

Result<ClassSet> find_classes(std::span<const int32_t> labels) {
  ClassSet cs;
  for (int32_t l : labels) {
    if (l == kNoise) {
      cs.has_noise = true;
    } else if (std::find(cs.labels.begin(), cs.labels.end(), l) == cs.labels.end()) {
      cs.labels.push_back(l);
    }
  }
  std::sort(cs.labels.begin(), cs.labels.end());
  if (cs.has_noise) cs.labels.push_back(kNoise);
  const size_t k = cs.size();
  if (k < 2)
    return Status::invalid_argument(
        "training needs at least two classes (barcodes, or one barcode and noise); found " +
        std::to_string(k) + (k == 1 ? " (label " + std::to_string(cs.labels[0]) + ")" : ""));
  // scikit-learn's numbers as WarpDemuX assigns them: barcode - 1, noise = the largest barcode.
  const size_t n_barcodes = cs.has_noise ? k - 1 : k;
  cs.internal.resize(k);
  for (size_t c = 0; c < n_barcodes; ++c) cs.internal[c] = cs.labels[c] - 1;
  if (cs.has_noise) cs.internal[k - 1] = cs.labels[n_barcodes - 1];
  return cs;
}

// The training rows sorted by class index (stable): libsvm numbers classes in order of first
// appearance, so this makes its class order the class-index order.
struct SortedRows {
  std::vector<double> rows;        // n x width, row-major
  std::vector<int32_t> row_class;  // class index of each row
  std::vector<size_t> class_rows;  // rows per class index
};

SortedRows sort_rows_by_class(std::span<const double> fingerprints, size_t width,
                              std::span<const int32_t> labels, const ClassSet& classes) {
  const size_t n = labels.size();
  std::vector<int32_t> class_of_input(n);
  for (size_t r = 0; r < n; ++r)
    class_of_input[r] = static_cast<int32_t>(
        std::find(classes.labels.begin(), classes.labels.end(), labels[r]) - classes.labels.begin());
  std::vector<size_t> order(n);
  for (size_t r = 0; r < n; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return class_of_input[a] < class_of_input[b]; });
  SortedRows s;
  s.rows.resize(n * width);
  s.row_class.resize(n);
  s.class_rows.assign(classes.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(fingerprints.begin() + static_cast<std::ptrdiff_t>(order[i] * width), width,
                s.rows.begin() + static_cast<std::ptrdiff_t>(i * width));
    s.row_class[i] = class_of_input[order[i]];
    ++s.class_rows[static_cast<size_t>(s.row_class[i])];
  }
  return s;
}

// Platt scaling cross-validates inside libsvm, so each class needs two rows with probabilities.
Status check_class_rows(const SortedRows& s, const ClassSet& classes, const SvmTrainOptions& o) {
  const size_t min_rows = o.probability ? 2 : 1;
  for (size_t c = 0; c < classes.size(); ++c)
    if (s.class_rows[c] < min_rows)
      return Status::invalid_argument(
          "class " + std::to_string(classes.labels[c]) + " has " + std::to_string(s.class_rows[c]) +
          " training row(s); at least " + std::to_string(min_rows) +
          " needed (Platt scaling cross-validates)");
  return Status::ok();
}

// libsvm's per-class C multipliers: n / (k * rows of the class) when balanced.
Result<std::vector<double>> class_weights(std::span<const size_t> class_rows,
                                          const SvmTrainOptions& o) {
  const size_t k = class_rows.size();
  size_t n = 0;
  for (size_t r : class_rows) n += r;
  std::vector<double> weights(k, 1.0);
  switch (o.weighting) {
    case ClassWeighting::kBalanced:
      for (size_t c = 0; c < k; ++c)
        weights[c] = static_cast<double>(n) /
                     (static_cast<double>(k) * static_cast<double>(class_rows[c]));
      break;
    case ClassWeighting::kNone:
      break;
    case ClassWeighting::kExplicit:
      if (o.class_weights.size() != k)
        return Status::invalid_argument("class_weights has " +
                                        std::to_string(o.class_weights.size()) +
                                        " entries, expected one per class (" + std::to_string(k) +
                                        ")");
      for (size_t c = 0; c < k; ++c) {
        if (!(std::isfinite(o.class_weights[c]) && o.class_weights[c] > 0.0))
          return Status::invalid_argument("class_weights must be positive numbers");
        weights[c] = o.class_weights[c];
      }
      break;
  }
  return weights;
}

Status check_fixed_thresholds(size_t k, const SvmTrainOptions& o) {
  if (o.thresholds != ThresholdMode::kFixed) return Status::ok();
  if (o.fixed_thresholds.size() != k)
    return Status::invalid_argument("fixed_thresholds has " +
                                    std::to_string(o.fixed_thresholds.size()) +
                                    " entries, expected one per class (" + std::to_string(k) + ")");
  for (double t : o.fixed_thresholds)
    if (!std::isfinite(t)) return Status::invalid_argument("fixed_thresholds must be finite");
  return Status::ok();
}

// The model's classes must be 0..k-1 in that order (what sort_rows_by_class arranged).
Status check_class_order(const svm_model* m, size_t k) {
  if (svm_get_nr_class(m) != static_cast<int>(k))
    return Status::internal("libsvm found " + std::to_string(svm_get_nr_class(m)) +
                            " classes, expected " + std::to_string(k));
  for (size_t c = 0; c < k; ++c)
    if (m->label[c] != static_cast<int>(c))
      return Status::internal("libsvm class order differs from the class-index order");
  return Status::ok();
}

// Rows of the training set the model calls right (probability argmax, or votes). Caller holds
// libsvm_mutex().
size_t count_correct_locked(const svm_model* m, KernelMatrix& km,
                            std::span<const int32_t> row_class, size_t k) {
  size_t correct = 0;
  std::vector<double> buf, p;
  for (size_t i = 0; i < row_class.size(); ++i)
    if (predict_locked(m, km.row(i), k, buf, p).cls == row_class[i]) ++correct;
  return correct;
}

// Calls of every row by a model trained without its fold. Caller holds libsvm_mutex().
Result<std::vector<Call>> held_out_calls_locked(KernelMatrix& km, std::span<const int32_t> row_class,
                                                size_t k, std::span<const double> weights,
                                                const SvmTrainOptions& o) {
  const size_t n = row_class.size();
  const std::vector<int> fold = make_folds(row_class, k, o.threshold_folds, o.seed);
  std::vector<Call> held_out(n);
  std::vector<double> buf, p;
  for (int f = 0; f < o.threshold_folds; ++f) {
    std::vector<size_t> train_rows, test_rows;
    for (size_t i = 0; i < n; ++i) (fold[i] == f ? test_rows : train_rows).push_back(i);
    if (test_rows.empty()) continue;
    Problem sub;
    ESCPOD_ASSIGN_OR_RETURN(
        ModelPtr fm, train_svm_locked(km, train_rows, row_class, k, weights, o,
                                      static_cast<unsigned>(o.seed + static_cast<uint64_t>(f) + 1),
                                      sub));
    for (size_t i : test_rows) held_out[i] = predict_locked(fm.get(), km.row(i), k, buf, p);
  }
  return held_out;
}

// The lowest confidence step (0.00, 0.01, ..., 1.00) at which the held-out calls of class `c`
// reach the target precision; kNeverThreshold when none does.
double lowest_precise_threshold(std::span<const Call> held_out, std::span<const int32_t> row_class,
                                size_t c, double target_precision) {
  for (int step = 0; step <= 100; ++step) {
    const double t = static_cast<double>(step) / 100.0;
    size_t called = 0, right = 0;
    for (size_t i = 0; i < held_out.size(); ++i) {
      if (held_out[i].cls != static_cast<int32_t>(c) || held_out[i].confidence < t) continue;
      ++called;
      if (row_class[i] == static_cast<int32_t>(c)) ++right;
    }
    if (called > 0 && static_cast<double>(right) >= target_precision * static_cast<double>(called))
      return t;
  }
  return kNeverThreshold;
}

// Per-class thresholds from held-out calls; the noise class keeps 0. Caller holds
// libsvm_mutex().
Result<std::vector<double>> cross_validated_thresholds_locked(KernelMatrix& km,
                                                              std::span<const int32_t> row_class,
                                                              const ClassSet& classes,
                                                              std::span<const double> weights,
                                                              const SvmTrainOptions& o) {
  const size_t k = classes.size();
  ESCPOD_ASSIGN_OR_RETURN(std::vector<Call> held_out,
                          held_out_calls_locked(km, row_class, k, weights, o));
  std::vector<double> thresholds(k, 0.0);
  for (size_t c = 0; c < k; ++c) {
    if (classes.has_noise && c == k - 1) break;
    thresholds[c] = lowest_precise_threshold(held_out, row_class, c, o.target_precision);
  }
  return thresholds;
}

// The model's support vectors, coefficients, intercepts and Platt parameters into `out` (the
// rows themselves copied from `s`, as the file stores them). Caller holds libsvm_mutex().
Status store_libsvm_model_locked(const svm_model* m, const SortedRows& s, size_t k, size_t width,
                                 bool probability, TrainedDtwSvm& out) {
  const size_t n_sv = static_cast<size_t>(m->l);
  const size_t n_pairs = k * (k - 1) / 2;
  std::vector<size_t> sv_rows(n_sv);
  std::vector<int64_t> n_support(k, 0);
  for (size_t sv = 0; sv < n_sv; ++sv) {
    sv_rows[sv] = static_cast<size_t>(m->sv_indices[sv] - 1);  // 1-based problem index
    ++n_support[static_cast<size_t>(s.row_class[sv_rows[sv]])];
  }
  for (size_t c = 0; c < k; ++c)
    if (n_support[c] != m->nSV[c]) return Status::internal("libsvm support counts disagree");
  out.fingerprints.reserve(n_sv * width);
  out.row_class.reserve(n_sv);
  for (size_t sv = 0; sv < n_sv; ++sv) {
    const double* row = s.rows.data() + sv_rows[sv] * width;
    out.fingerprints.insert(out.fingerprints.end(), row, row + width);
    out.row_class.push_back(s.row_class[sv_rows[sv]]);
  }
  out.n_support = n_support;
  out.dual_coef.reserve((k - 1) * n_sv);
  for (size_t r = 0; r + 1 < k; ++r)
    out.dual_coef.insert(out.dual_coef.end(), m->sv_coef[r], m->sv_coef[r] + n_sv);
  out.intercept.resize(n_pairs);
  for (size_t q = 0; q < n_pairs; ++q) out.intercept[q] = -m->rho[q];
  if (probability) {
    if (m->probA == nullptr || m->probB == nullptr)
      return Status::internal("libsvm returned no Platt parameters");
    out.prob_a.assign(m->probA, m->probA + n_pairs);
    out.prob_b.assign(m->probB, m->probB + n_pairs);
  }
  return Status::ok();
}

void fill_report(const TrainedDtwSvm& model, size_t n_sv, SvmTrainReport& report) {
  report.n_rows = model.n_rows;
  report.n_features = model.n_features;
  report.n_classes = model.class_labels.size();
  report.n_support = n_sv;
  report.class_labels = model.class_labels;
  report.class_rows = model.class_rows;
  report.class_weights = model.class_weights;
  report.thresholds = model.thresholds;
  report.training_accuracy = model.training_accuracy;
}

}  // namespace

Result<TrainedDtwSvm> train_dtw_svm(std::span<const double> fingerprints, size_t n_features,
                                    std::span<const int32_t> labels, const SvmTrainOptions& o,
                                    const std::string& model_name, SvmTrainReport* report) {
  ESCPOD_RETURN_IF_ERROR(validate(fingerprints, n_features, labels, o));
  const size_t width = n_features;
  ESCPOD_ASSIGN_OR_RETURN(ClassSet classes, find_classes(labels));
  const size_t k = classes.size();
  const size_t n = labels.size();
  const SortedRows sorted = sort_rows_by_class(fingerprints, width, labels, classes);
  ESCPOD_RETURN_IF_ERROR(check_class_rows(sorted, classes, o));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<double> weights, class_weights(sorted.class_rows, o));
  ESCPOD_RETURN_IF_ERROR(check_fixed_thresholds(k, o));

  auto t0 = Clock::now();
  KernelMatrix km = build_kernel(sorted.rows, n, width, o);
  const double dtw_seconds = seconds_since(t0);

  std::vector<size_t> all_rows(n);
  for (size_t i = 0; i < n; ++i) all_rows[i] = i;
  std::unique_lock lock(libsvm_mutex());
  t0 = Clock::now();
  Problem problem;
  ESCPOD_ASSIGN_OR_RETURN(ModelPtr model,
                          train_svm_locked(km, all_rows, sorted.row_class, k, weights, o,
                                           static_cast<unsigned>(o.seed), problem));
  const double svm_seconds = seconds_since(t0);
  const svm_model* m = model.get();
  ESCPOD_RETURN_IF_ERROR(check_class_order(m, k));
  const size_t correct = count_correct_locked(m, km, sorted.row_class, k);

  std::vector<double> thresholds(k, 0.0);
  double threshold_seconds = 0.0;
  if (o.thresholds == ThresholdMode::kFixed) {
    thresholds = o.fixed_thresholds;
  } else if (o.thresholds == ThresholdMode::kCrossValidated) {
    t0 = Clock::now();
    ESCPOD_ASSIGN_OR_RETURN(thresholds, cross_validated_thresholds_locked(
                                            km, sorted.row_class, classes, weights, o));
    threshold_seconds = seconds_since(t0);
  }
  if (classes.has_noise) thresholds[k - 1] = 0.0;

  TrainedDtwSvm out;
  out.model_name = model_name;
  out.options = o;
  out.class_labels = classes.labels;
  out.classes = classes.internal;
  out.thresholds = thresholds;
  out.n_features = width;
  ESCPOD_RETURN_IF_ERROR(store_libsvm_model_locked(m, sorted, k, width, o.probability, out));
  out.class_weights = weights;
  out.class_rows = sorted.class_rows;
  out.n_rows = n;
  out.training_accuracy = static_cast<double>(correct) / static_cast<double>(n);
  out.libsvm_version = libsvm_version;
  const size_t n_sv = static_cast<size_t>(m->l);
  lock.unlock();

  if (report) {
    fill_report(out, n_sv, *report);
    report->dtw_seconds = dtw_seconds;
    report->svm_seconds = svm_seconds;
    report->threshold_seconds = threshold_seconds;
  }
  return out;
}

Result<std::string> train_warpdemux_svm(std::span<const double> fingerprints, size_t n_features,
                                        std::span<const int32_t> labels, const SvmTrainOptions& o,
                                        const std::string& model_name, SvmTrainReport* report) {
  ESCPOD_ASSIGN_OR_RETURN(TrainedDtwSvm model,
                          train_dtw_svm(fingerprints, n_features, labels, o, model_name, report));
  return serialize_dtw_svm(model);
}

int libsvm_runtime_version() { return libsvm_version; }

}  // namespace escpod::demux
