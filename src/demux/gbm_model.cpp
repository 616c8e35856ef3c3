#include "escpod/demux/gbm_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "json_fields.hpp"

namespace escpod::demux {

using detail::Json;
using detail::JsonFields;

namespace {

// ---- reading a GBM model file, one part per function, in the order the file is checked -------

Status check_gbm_kind(const Json& j, const JsonFields& f) {
  if (const Json* mt = JsonFields::optional_member(j, "model_type")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*mt, "model_type"));
    if (s != "gbm") return f.error("model_type is '" + s + "', expected 'gbm'");
  } else if (!j.contains("trees")) {
    return f.error("not a GBM model (no model_type \"gbm\" and no trees)");
  }
  return Status::ok();
}

Result<GbmModel::Head> read_head(const Json& j, const JsonFields& f) {
  const Json* h = JsonFields::optional_member(j, "head");
  if (h == nullptr) return GbmModel::Head::kSoftmax;
  ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*h, "head"));
  if (s == "softmax") return GbmModel::Head::kSoftmax;
  if (s == "sigmoid") return GbmModel::Head::kSigmoid;
  return f.error("head is '" + s + "', expected softmax or sigmoid");
}

Result<size_t> read_n_classes(const Json& j, const JsonFields& f, GbmModel::Head head) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* nc_j, f.member(j, "n_classes"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t nc, f.integer(*nc_j, "n_classes"));
  if (nc < 2 || nc > 100000) return f.error("n_classes must be at least 2");
  if (head == GbmModel::Head::kSigmoid && nc != 2) return f.error("a sigmoid head needs n_classes 2");
  return static_cast<size_t>(nc);
}

Result<size_t> read_n_features(const Json& j, const JsonFields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* nf_j, f.member(j, "n_features"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t nf, f.integer(*nf_j, "n_features"));
  if (nf < 1 || nf > std::numeric_limits<int32_t>::max()) return f.error("n_features must be >= 1");
  return static_cast<size_t>(nf);
}

// A tree node as stored in the model's arena (GbmModel::Node, whose type is private).
struct TreeNode {
  double threshold = 0.0;  // internal: go left iff x <= threshold; leaf: the value
  int32_t feature = -1;    // -1 for a leaf
  uint32_t left = 0, right = 0;  // arena indices
  bool missing_left = false;
};

// Node `nd` of a tree of `n_nodes` whose first node is at arena index `base`; `at` names it.
Result<TreeNode> read_tree_node(const Json& node, const JsonFields& f, const std::string& at, size_t nd,
                                size_t n_nodes, size_t n_features, uint32_t base) {
  bool leaf = false;
  if (const Json* v = JsonFields::optional_member(node, "leaf")) {
    ESCPOD_ASSIGN_OR_RETURN(leaf, f.boolean(*v, at + ".leaf"));
  } else {
    return f.error(at + " has no 'leaf' field");
  }
  TreeNode out;
  if (leaf) {
    ESCPOD_ASSIGN_OR_RETURN(const Json* v, f.member(node, "value"));
    ESCPOD_ASSIGN_OR_RETURN(out.threshold, f.number(*v, at + ".value"));
    return out;
  }
  const auto nf = static_cast<int64_t>(n_features);
  ESCPOD_ASSIGN_OR_RETURN(const Json* fe, f.member(node, "feature"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t feat, f.integer(*fe, at + ".feature"));
  if (feat < 0 || feat >= nf)
    return f.error(at + ".feature = " + std::to_string(feat) + " is outside [0, " +
                   std::to_string(nf) + ")");
  ESCPOD_ASSIGN_OR_RETURN(const Json* th, f.member(node, "threshold"));
  if (!th->is_number()) return f.error(at + ".threshold must be a number");
  out.threshold = th->get<double>();
  if (std::isnan(out.threshold)) return f.error(at + ".threshold is NaN");
  int64_t lr[2];
  const char* keys[2] = {"left", "right"};
  for (int c = 0; c < 2; ++c) {
    ESCPOD_ASSIGN_OR_RETURN(const Json* cj, f.member(node, keys[c]));
    ESCPOD_ASSIGN_OR_RETURN(lr[c], f.integer(*cj, at + "." + keys[c]));
    if (lr[c] <= static_cast<int64_t>(nd) || lr[c] >= static_cast<int64_t>(n_nodes))
      return f.error(at + "." + keys[c] + " = " + std::to_string(lr[c]) +
                     " must point to a later node of the same tree (" +
                     std::to_string(n_nodes) + " nodes)");
  }
  out.feature = static_cast<int32_t>(feat);
  out.left = base + static_cast<uint32_t>(lr[0]);
  out.right = base + static_cast<uint32_t>(lr[1]);
  if (const Json* ml = JsonFields::optional_member(node, "missing_left")) {
    ESCPOD_ASSIGN_OR_RETURN(out.missing_left, f.boolean(*ml, at + ".missing_left"));
  }
  return out;
}

// Every tree, flattened: trees[iteration][group] appended to `nodes`, its root to `roots`.
struct Forest {
  size_t n_iterations = 0;
  std::vector<uint32_t> roots;  // [iteration * n_groups + group] -> arena index
  std::vector<TreeNode> nodes;
};

Status read_tree(const Json& tree, const JsonFields& f, const std::string& where, size_t n_features,
                 Forest& forest) {
  if (!tree.is_array() || tree.empty()) return f.error(where + " must be a non-empty node array");
  const size_t n_nodes = tree.size();
  if (forest.nodes.size() + n_nodes > std::numeric_limits<uint32_t>::max())
    return f.error("too many tree nodes");
  const auto base = static_cast<uint32_t>(forest.nodes.size());
  forest.roots.push_back(base);
  for (size_t nd = 0; nd < n_nodes; ++nd) {
    const std::string at = where + "[" + std::to_string(nd) + "]";
    ESCPOD_ASSIGN_OR_RETURN(TreeNode node, read_tree_node(tree[nd], f, at, nd, n_nodes, n_features, base));
    forest.nodes.push_back(node);
  }
  return Status::ok();
}

Result<Forest> read_forest(const Json& j, const JsonFields& f, size_t n_groups, GbmModel::Head head,
                           size_t n_features) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* trees_j, f.member(j, "trees"));
  if (!trees_j->is_array()) return f.error("trees must be an array of iterations");
  Forest forest;
  forest.n_iterations = trees_j->size();
  for (size_t it = 0; it < forest.n_iterations; ++it) {
    const Json& iter = (*trees_j)[it];
    if (!iter.is_array() || iter.size() != n_groups)
      return f.error("trees[" + std::to_string(it) + "] must hold " +
                     std::to_string(n_groups) + " trees (one per " +
                     (head == GbmModel::Head::kSoftmax ? "class" : "iteration, sigmoid head") + ")");
    for (size_t g = 0; g < n_groups; ++g) {
      const std::string where = "trees[" + std::to_string(it) + "][" + std::to_string(g) + "]";
      ESCPOD_RETURN_IF_ERROR(read_tree(iter[g], f, where, n_features, forest));
    }
  }
  return forest;
}

Result<std::vector<int32_t>> read_gbm_labels(const Json& j, const JsonFields& f, size_t k) {
  ESCPOD_ASSIGN_OR_RETURN(const Json* lm_j, f.member(j, "label_mapper"));
  if (!lm_j->is_object()) return f.error("label_mapper must be an object {class index: label}");
  std::vector<int32_t> labels(k);
  for (size_t c = 0; c < k; ++c) {
    const std::string key = std::to_string(c);
    auto it = lm_j->find(key);
    if (it == lm_j->end()) return f.error("label_mapper has no entry for class index " + key);
    ESCPOD_ASSIGN_OR_RETURN(int64_t lab, f.integer(*it, "label_mapper[\"" + key + "\"]"));
    labels[c] = static_cast<int32_t>(lab);
  }
  return labels;
}

}  // namespace

Result<GbmModel> GbmModel::load(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  return detail::ModelBuilder::gbm(j, path);
}

Result<GbmModel> detail::ModelBuilder::gbm(const Json& j, const std::filesystem::path& path) {
  using Head = GbmModel::Head;
  const JsonFields f(path.string());
  if (!j.is_object()) return f.error("top level must be a JSON object");
  ESCPOD_RETURN_IF_ERROR(check_gbm_kind(j, f));
  GbmModel m;
  m.m_path = path;
  ESCPOD_ASSIGN_OR_RETURN(m.m_head, read_head(j, f));
  ESCPOD_ASSIGN_OR_RETURN(const size_t k, read_n_classes(j, f, m.m_head));
  ESCPOD_ASSIGN_OR_RETURN(m.m_n_features, read_n_features(j, f));
  m.m_n_groups = m.m_head == Head::kSoftmax ? k : 1;
  ESCPOD_ASSIGN_OR_RETURN(const Json* bl_j, f.member(j, "baseline"));
  ESCPOD_RETURN_IF_ERROR(f.doubles(*bl_j, "baseline", m.m_n_groups, m.m_baseline));
  ESCPOD_ASSIGN_OR_RETURN(Forest forest, read_forest(j, f, m.m_n_groups, m.m_head, m.m_n_features));
  m.m_n_iterations = forest.n_iterations;
  m.m_roots = std::move(forest.roots);
  m.m_nodes.reserve(forest.nodes.size());
  for (const TreeNode& n : forest.nodes) {
    m.m_nodes.push_back(GbmModel::Node{n.threshold, n.feature, n.left, n.right, n.missing_left});
  }
  ESCPOD_ASSIGN_OR_RETURN(m.m_labels, read_gbm_labels(j, f, k));
  if (const Json* v = JsonFields::optional_member(j, "thresholds")) {
    ESCPOD_RETURN_IF_ERROR(f.doubles(*v, "thresholds (one per class)", k, m.m_thresholds));
  }
  return m;
}

double GbmModel::tree_value(uint32_t idx, std::span<const double> x) const {
  const Node* nodes = m_nodes.data();
  while (nodes[idx].feature >= 0) {
    const Node& n = nodes[idx];
    const double v = x[static_cast<size_t>(n.feature)];
    const bool go_left = std::isnan(v) ? n.missing_left : v <= n.threshold;
    idx = go_left ? n.left : n.right;
  }
  return nodes[idx].threshold;
}

Status GbmModel::predict_proba(std::span<const double> x, std::span<double> p) const {
  if (x.size() != m_n_features)
    return Status::invalid_argument("GBM model " + m_path.string() + " expects " +
                                    std::to_string(m_n_features) + " features, got " +
                                    std::to_string(x.size()));
  if (p.size() != n_classes())
    return Status::invalid_argument("probability output has the wrong size");
  const size_t g_count = m_n_groups;
  // raw[g] accumulates in p[g] (softmax) or p[1] (sigmoid).
  double raw[1];
  double* acc = m_head == Head::kSoftmax ? p.data() : raw;
  for (size_t g = 0; g < g_count; ++g) acc[g] = 0.0;
  for (size_t it = 0; it < m_n_iterations; ++it)
    for (size_t g = 0; g < g_count; ++g) acc[g] += tree_value(m_roots[it * g_count + g], x);
  for (size_t g = 0; g < g_count; ++g) acc[g] += m_baseline[g];
  if (m_head == Head::kSigmoid) {
    const double p1 = 1.0 / (1.0 + std::exp(-raw[0]));
    p[0] = 1.0 - p1;
    p[1] = p1;
    return Status::ok();
  }
  const double mx = *std::max_element(p.begin(), p.end());
  double sum = 0.0;
  for (double& v : p) {
    v = std::exp(v - mx);
    sum += v;
  }
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    std::fill(p.begin(), p.end(), 1.0 / static_cast<double>(p.size()));
  } else {
    for (double& v : p) v /= sum;
  }
  return Status::ok();
}

void GbmModel::classify(std::span<const double> features, Classification& out) const {
  out.probabilities.resize(n_classes());
  if (!predict_proba(features, out.probabilities).is_ok()) {
    out.set_invalid_input();
    return;
  }
  apply_decision_rule(m_labels, m_thresholds, /*noise_index=*/-1, TieRule::kLastMax, out);
}

std::string GbmModel::describe() const {
  std::ostringstream o;
  o << "model:          " << m_path.stem().string() << "\n";
  o << "file:           " << m_path.string() << "\n";
  o << "kind:           gradient-boosted trees (" << (m_head == Head::kSoftmax ? "softmax" : "sigmoid")
    << " head)\n";
  o << "classes:        " << n_classes() << " (labels";
  for (int32_t l : m_labels) o << " " << l;
  o << ")\n";
  o << "features:       " << m_n_features << "\n";
  o << "trees:          " << m_n_iterations << " iterations x " << m_n_groups << " = "
    << m_roots.size() << " trees, " << m_nodes.size() << " nodes\n";
  o << "thresholds:     " << (m_thresholds.empty() ? "none" : "per class") << "\n";
  return o.str();
}

}  // namespace escpod::demux
