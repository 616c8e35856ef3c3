// Gradient-boosted trees head (scikit-learn HistGradientBoostingClassifier exported to the Rust
// escapepod's GBM JSON; docs/formats.md §4.1, demux.md §6). Trees are flattened into one node
// arena at load; prediction walks each tree from its root: left iff x[feature] <= threshold, a
// NaN feature goes left iff missing_left; raw[g] = baseline[g] + sum of the leaf values over
// iterations (leaves summed first, then the baseline added); softmax head (stable, uniform if
// it underflows) or sigmoid head [1 - s(raw), s(raw)]. The decision rule is escapepod's: argmax
// with the LAST maximal index on exact ties, confidence p1 - p2, per-class thresholds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/classification.hpp"

namespace escpod::demux {

namespace detail {
struct ModelBuilder;  // builds models from a parsed file (src/demux)
}  // namespace detail

class GbmModel {
 public:
  enum class Head : uint8_t { kSoftmax, kSigmoid };

  // Reads and validates: model_type "gbm" (or a `trees` key), head softmax|sigmoid, n_classes >= 2
  // (exactly 2 for sigmoid), n_features >= 1, baseline length (n_classes, or 1 for sigmoid),
  // trees[iteration][group] with the right group count, every internal node's feature in range,
  // threshold not NaN, children inside the tree and after the node (so every walk ends), leaf
  // values finite, label_mapper covering every class, thresholds (optional) one per class.
  // Errors: io_error (unreadable), corrupt (anything above; the message names file and field).
  static Result<GbmModel> load(const std::filesystem::path& path);

  size_t n_classes() const { return m_labels.size(); }
  size_t n_features() const { return m_n_features; }
  size_t n_iterations() const { return m_n_iterations; }
  Head head() const { return m_head; }
  std::span<const int32_t> labels() const { return m_labels; }
  std::span<const double> thresholds() const { return m_thresholds; }

  std::string describe() const;

  // Class probabilities of one feature vector into `probabilities` (size n_classes()).
  // Returns invalid_argument when features.size() != n_features() (an error for this read only);
  // NaN features are legal (missing values). Allocation-free; const and reentrant.
  Status predict_proba(std::span<const double> features, std::span<double> probabilities) const;

  // predict_proba plus the decision rule. A wrong feature count gives status kInvalidInput.
  // Allocation-free once out.probabilities has held n_classes() values.
  void classify(std::span<const double> features, Classification& out) const;

 private:
  friend struct detail::ModelBuilder;
  struct Node {
    double threshold;  // internal: go left iff x <= threshold; leaf: the value
    int32_t feature;   // -1 for a leaf
    uint32_t left;     // arena index of the left child
    uint32_t right;
    bool missing_left;
  };

  double tree_value(uint32_t root, std::span<const double> x) const;

  std::filesystem::path m_path;
  Head m_head = Head::kSoftmax;
  size_t m_n_features = 0;
  size_t m_n_iterations = 0;
  size_t m_n_groups = 0;              // trees per iteration
  std::vector<double> m_baseline;     // per group
  std::vector<uint32_t> m_roots;      // [iteration * n_groups + group] -> arena index
  std::vector<Node> m_nodes;
  std::vector<int32_t> m_labels;
  std::vector<double> m_thresholds;
};

}  // namespace escpod::demux
