// WarpDemuX DTW-kernel SVM barcode classifier (docs/demux.md §5):
// DTW distance from the read's fingerprint to every training fingerprint -> kernel exp(-g d^p)
// -> libsvm one-vs-one decision values -> Platt scaling -> pairwise coupling (Wu-Lin-Weng,
// libsvm's second method) -> argmax, confidence = p1 - p2, per-class threshold -> barcode or -1.
//
// Loads the `escapepod-wdx-dtw-svm` JSON converted from WarpDemuX's joblib models
// (shared/data/warpdemux/README.md) and the Rust escapepod's `DtwSvmModel` schema it is a
// superset of (docs/formats.md §4.1, demux.md §5). Models are validated completely at load; a
// loaded model is immutable and may be shared by any number of threads, each with its own
// Scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/classification.hpp"
#include "escpod/demux/dtw.hpp"

namespace escpod::demux {

namespace detail {
struct ModelBuilder;  // builds models from a parsed file (src/demux)
}  // namespace detail

// Which kernel arithmetic to use. WarpDemuX casts distances to float32 and evaluates
// K = exp(-g d^p) in float32 (K = float(exp(-float(d))) for its models); the golden files'
// `proba` follow that path, `proba_f64` the double one (they differ by <= 2.5e-7).
enum class KernelPrecision : uint8_t {
  kModelDefault,  // float32 when the model's kernel.distance_dtype is "float32", else double
  kFloat32,
  kFloat64,
};

class WarpDemuxModel {
 public:
  // Per-worker buffers for classify(). Build with make_scratch() (sized once); reuse for every
  // read. After a classify() call they also expose the intermediate values (tests, debugging).
  struct Scratch {
    std::vector<double> dtw;       // DtwBank scratch
    std::vector<float> dtw_f32;    // DtwBank scratch of the float32 path
    std::vector<double> distances; // per training row
    std::vector<double> kernel;    // per training row, as fed to the SVM
    std::vector<float> kernel_arg; // per training row, -gamma * d^p in float32 (float32 kernel)
    std::vector<double> sv_kernel; // per support vector: kernel of its training row
    std::vector<double> decision;  // per pair (0,1), (0,2), ..., (k-2, k-1)
    std::vector<double> pairwise;  // Platt probabilities r_ab per pair (after clipping)
    std::vector<double> r;         // k x k pairwise matrix
    std::vector<double> q;         // k x k coupling matrix
    std::vector<double> qp;        // k
  };

  // Reads and validates the model. Errors (Status codes): io_error when the file cannot be read;
  // corrupt for malformed JSON or any inconsistency: class count, fingerprint widths, labels not
  // in `classes`, support indices out of range or not grouped by class, dual_coef / intercept /
  // Platt / threshold lengths, non-finite numbers, label_mapper not covering every class,
  // gamma/power <= 0, negative window or penalty. Every message names the file and the field.
  static Result<WarpDemuxModel> load(const std::filesystem::path& path);

  // Multi-line human-readable summary (for `escpod demux --model M --info`): name, chemistry,
  // barcodes, classes with labels and thresholds, training/support-vector counts, DTW and kernel
  // parameters, source and licence.
  std::string describe() const;

  Scratch make_scratch() const;

  // Classifies one fingerprint (length n_features(), values in z-score units as produced by
  // signal::barcode_fingerprint). A fingerprint of the wrong length or with NaN/inf values gives
  // status kInvalidInput (never an error or an assert). Otherwise `out` holds the probabilities
  // (class-index order), argmax (first maximum wins, as numpy), confidence and the thresholded
  // call (label -1 for noise or below threshold). Allocation-free once `scratch` and
  // out.probabilities have been used once. Thread safety: const; one scratch per thread.
  // `dtw` picks the DTW arithmetic (see DtwPrecision).
  void classify(std::span<const double> fingerprint, Scratch& scratch, Classification& out,
                KernelPrecision precision = KernelPrecision::kModelDefault,
                DtwPrecision dtw = DtwPrecision::kFloat64) const;

  // DTW distances from `fingerprint` (length n_features()) to every training fingerprint, in
  // training order, into `out` (size n_training()). Preconditions asserted.
  void distances(std::span<const double> fingerprint, Scratch& scratch, std::span<double> out,
                 DtwPrecision dtw = DtwPrecision::kFloat64) const;
  // Whether the float32 DTW runs on SIMD here (for `--info` and benchmark labels).
  bool dtw_f32_uses_simd() const { return m_bank.f32_uses_simd(); }

  const std::string& name() const { return m_name; }
  const std::filesystem::path& path() const { return m_path; }
  size_t n_classes() const { return m_labels.size(); }
  size_t n_features() const { return m_bank.length(); }
  size_t n_training() const { return m_bank.n_rows(); }
  size_t n_support() const { return m_support_rows.size(); }
  size_t n_pairs() const { return n_classes() * (n_classes() - 1) / 2; }
  // Output label of each class index (barcode number, -1 for the noise class).
  std::span<const int32_t> labels() const { return m_labels; }
  // Per-class thresholds (empty when the model has none).
  std::span<const double> thresholds() const { return m_thresholds; }
  // Class index of the noise class, -1 if none.
  int32_t noise_index() const { return m_noise_index; }
  const DtwParams& dtw_params() const { return m_dtw; }
  bool has_platt() const { return !m_prob_a.empty(); }
  // Probability column names (WarpDemuX "p03" ... "p-1"), in class-index order.
  std::span<const std::string> output_columns() const { return m_output_columns; }

 private:
  friend struct detail::ModelBuilder;
  std::filesystem::path m_path;
  std::string m_name;
  std::string m_chemistry;
  std::string m_source;  // one line: project, version, commit, licence
  std::vector<int32_t> m_barcodes;
  std::vector<std::string> m_output_columns;

  DtwBank m_bank;
  DtwParams m_dtw;
  double m_gamma = 1.0;
  double m_power = 1.0;
  bool m_kernel_f32 = false;
  bool m_kernel_weighted = false;

  std::vector<int32_t> m_training_class;  // class index of each training row
  std::vector<size_t> m_class_rows;       // training rows per class (kernel-weighted mode)
  // The steps of classify(), in order: s.kernel from s.distances; s.decision (one value per
  // class pair); the class probabilities into `p` (n_classes() values).
  void kernel_values(Scratch& s, bool f32) const;
  void pair_decisions(Scratch& s) const;
  void decision_values(Scratch& s) const;  // pair_decisions of the SVM (not kernel-weighted)
  void class_probabilities(Scratch& s, double* p) const;

  std::vector<uint32_t> m_support_rows;   // training row of each support vector
  std::vector<size_t> m_sv_start;         // first support vector of class c (size k + 1)
  // The dual coefficients ((k - 1) x n_sv in the file) in the order decision_values() consumes
  // them: groups of kDecisionLanes pairs, [sv][lane] within a group, zero-padded lanes.
  static constexpr size_t kDecisionLanes = 8;
  std::vector<double> m_coef_by_group;
  void build_decision_layout(const std::vector<double>& dual_coef);
  std::vector<double> m_intercept;        // per pair
  std::vector<double> m_prob_a, m_prob_b; // per pair, empty without Platt scaling

  std::vector<int32_t> m_labels;
  std::vector<double> m_thresholds;
  int32_t m_noise_index = -1;
};

}  // namespace escpod::demux
