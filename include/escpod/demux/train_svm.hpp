// Training of the WarpDemuX-compatible DTW-kernel SVM (docs/demux.md
// §5, §5.7) from labelled fingerprints. The result is a TrainedDtwSvm (the model as values);
// serialize_dtw_svm writes it as the `escapepod-wdx-dtw-svm` JSON that load_model_file and
// WarpDemuxModel::load read.
//
// Steps: DTW distance matrix of the training fingerprints (DtwBank, band |i-j| <= window-1,
// squared penalty per non-diagonal step; oneTBB over rows) -> kernel K = exp(-gamma d^power)
// (float32 like WarpDemuX by default) -> libsvm C-SVC, one-vs-one, precomputed kernel, with
// per-class weights and Platt scaling (libsvm's internal 5-fold CV, seeded) -> support vectors,
// dual coefficients, intercepts (= -rho), prob_a/prob_b -> per-class confidence thresholds ->
// JSON.
//
// Classes: every distinct barcode label (ascending) is one class, and label -1 (noise) is the
// last class when present, matching the shipped WDX models (class index -> label via
// label_mapper; the `classes` field uses WarpDemuX's internal numbering barcode - 1, noise =
// largest barcode).
//
// Only the support vectors are stored as `training_fingerprints` (support_indices = 0..n_sv-1,
// grouped by class): the classifier computes distances to every stored row, and rows that are no
// support vectors never contribute to a decision value.
//
// Determinism: the same inputs and options (seed included) give byte-identical JSON, whatever
// n_threads is. libsvm's Platt cross-validation draws from the C library's rand(); the call
// seeds it with srand(seed) and serialises libsvm use within the process with a mutex (rand() is
// process-global: other code calling rand() concurrently would break reproducibility).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/model_file.hpp"

namespace escpod::demux {

enum class ClassWeighting : uint8_t {
  kBalanced,  // w_c = n / (k * n_c) (scikit-learn "balanced", what WarpDemuX uses)
  kNone,      // every class weight 1
  kExplicit,  // SvmTrainOptions::class_weights, one per class in class-index order
};

enum class ThresholdMode : uint8_t {
  kZero,            // no filtering: every threshold 0 (like WDX4b)
  kFixed,           // SvmTrainOptions::fixed_thresholds, one per class in class-index order
  kCrossValidated,  // per class, the smallest confidence threshold at which the calls of that
                    // class reach target_precision in a stratified threshold_folds-fold
                    // cross-validation (WarpDemuX's "99 % precision" operating points)
};

struct SvmTrainOptions {
  // libsvm C-SVC (the values of WarpDemuX's shipped RNA004 models, `svc` block).
  double C = 1.0;
  double tolerance = 1e-3;  // libsvm eps
  bool shrinking = true;
  bool probability = true;  // Platt scaling (prob_a / prob_b); false: no Platt parameters
  double cache_mb = 200.0;  // libsvm kernel cache
  ClassWeighting weighting = ClassWeighting::kBalanced;
  std::vector<double> class_weights;  // kExplicit only

  // DTW and kernel (the `dtw` / `kernel_params` / `kernel` blocks of the shipped models).
  int window = 15;        // DTW band: |i-j| <= window-1 for equal lengths; 0 = unbanded
  double penalty = 0.1;   // DTW penalty, squared per vertical/horizontal step
  double gamma = 1.0;     // K = exp(-gamma * d^power)
  double power = 1.0;
  bool float32_kernel = true;  // WarpDemuX: float32 distances, kernel evaluated in float32

  // Per-class thresholds (the noise class's threshold is always 0: noise already maps to -1).
  ThresholdMode thresholds = ThresholdMode::kZero;
  std::vector<double> fixed_thresholds;  // kFixed only
  double target_precision = 0.99;        // kCrossValidated only
  int threshold_folds = 5;               // kCrossValidated only

  uint64_t seed = 9;   // srand() seed for libsvm's Platt CV and the threshold folds
  int n_threads = 0;   // DTW matrix workers; 0 = oneTBB default

  // Recorded in the model (the settings its fingerprints were made with); a template model's
  // (load_model_template) or the RNA004 defaults.
  std::string chemistry = kRna004Chemistry;
  std::string signal_processing_config_name = kRna004SignalProcessingConfigName;
  SignalProcessing signal_processing = SignalProcessing::rna004(true);
};

// The parts of an existing model that a trained model copies (--template): chemistry, settings
// name, signal_processing block. Any JSON object is accepted (a model of any kind or a bare
// settings file); what it lacks keeps the RNA004 defaults (has_signal_processing says whether the
// block was there). Errors as load_model_file's (file and field named).
struct ModelTemplate {
  std::string chemistry = kRna004Chemistry;
  std::string signal_processing_config_name = kRna004SignalProcessingConfigName;
  SignalProcessing signal_processing = SignalProcessing::rna004(true);
  bool has_signal_processing = false;
};
Result<ModelTemplate> load_model_template(const std::filesystem::path& path);
// Copies a template's fields into training options.
void apply_template(const ModelTemplate& t, SvmTrainOptions& options);

// A trained DTW-SVM model as values: everything serialize_dtw_svm writes. Classes are in
// class-index order (barcodes ascending, the noise class -1 last); stored rows are the support
// vectors, grouped by class.
struct TrainedDtwSvm {
  std::string model_name;
  SvmTrainOptions options;             // what it was trained with (recorded in the file)
  std::vector<int32_t> class_labels;   // label of each class index
  std::vector<int64_t> classes;        // WarpDemuX's class numbers (barcode - 1; noise = max barcode)
  std::vector<double> thresholds;      // per class
  size_t n_features = 0;
  std::vector<double> fingerprints;    // n_support x n_features, row-major (support vectors)
  std::vector<int32_t> row_class;      // class index of each stored row
  std::vector<int64_t> n_support;      // per class
  std::vector<double> dual_coef;       // (k - 1) x n_support, row-major (libsvm sv_coef)
  std::vector<double> intercept;       // per class pair (= -rho)
  std::vector<double> prob_a, prob_b;  // per class pair; empty without probability
  std::vector<double> class_weights;   // per class, as used
  std::vector<size_t> class_rows;      // training rows per class
  size_t n_rows = 0;                   // training rows
  double training_accuracy = 0.0;
  int libsvm_version = 0;

  bool has_noise() const { return !class_labels.empty() && class_labels.back() == -1; }
};

// The model file text: a compact JSON object ending in a newline. Deterministic (same model,
// same bytes).
std::string serialize_dtw_svm(const TrainedDtwSvm& model);

// What training did, for logs and tests.
struct SvmTrainReport {
  size_t n_rows = 0;
  size_t n_features = 0;
  size_t n_classes = 0;
  size_t n_support = 0;
  std::vector<int32_t> class_labels;   // label of each class index
  std::vector<size_t> class_rows;      // training rows per class
  std::vector<double> class_weights;   // weights used
  std::vector<double> thresholds;      // thresholds written
  double training_accuracy = 0.0;      // unthresholded argmax of the written model's
                                       // probabilities on the training rows (argmax of the
                                       // decision votes without probability)
  double dtw_seconds = 0.0;            // distance matrix
  double svm_seconds = 0.0;            // libsvm (incl. Platt CV)
  double threshold_seconds = 0.0;      // cross-validated thresholds
};

// Cost: n^2 DTW distances (oneTBB, n_threads) and an n x n kernel matrix of 16 n^2 bytes
// (libsvm nodes), plus libsvm's cache_mb; at most 40000 rows. Measured on this project's CI
// machine (2 cores): WDX4's 851 rows 0.2 s, WDX10's 2601 rows 1.4-2.3 s in all.
//
// Trains a model. `fingerprints` is n x n_features row-major (n = labels.size()); labels are
// barcode numbers (1..999) or -1 for the noise class. Errors (kInvalidArgument) name the problem:
// empty input, more than 40000 rows, n_features 0 or fingerprints.size() != n * n_features,
// non-finite values (row and column given), a label outside 1..999 and not -1, fewer than two
// classes, a class with fewer than 2 rows (Platt CV needs 2; 1 is allowed without probability),
// bad option values (C, gamma, power <= 0, window < 0, penalty < 0, weights or thresholds of the
// wrong length or non-finite, target_precision outside (0, 1], folds < 2, cross-validated
// thresholds without probability). `report` (optional) receives the statistics above.
Result<TrainedDtwSvm> train_dtw_svm(std::span<const double> fingerprints, size_t n_features,
                                    std::span<const int32_t> labels, const SvmTrainOptions& options,
                                    const std::string& model_name, SvmTrainReport* report = nullptr);

// train_dtw_svm, serialized (serialize_dtw_svm).
Result<std::string> train_warpdemux_svm(std::span<const double> fingerprints, size_t n_features,
                                        std::span<const int32_t> labels,
                                        const SvmTrainOptions& options,
                                        const std::string& model_name,
                                        SvmTrainReport* report = nullptr);

// The version of the libsvm loaded, as libsvm numbers it (e.g. 332 for 3.32; escpod --version).
int libsvm_runtime_version();

}  // namespace escpod::demux
