#include "escpod/demux/gbm_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "json_fields.hpp"

namespace escpod::demux {

using detail::Json;
using detail::JsonFields;

Result<GbmModel> GbmModel::load(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(Json j, detail::parse_json_file(path));
  return detail::ModelBuilder::gbm(j, path);
}

Result<GbmModel> detail::ModelBuilder::gbm(const Json& j, const std::filesystem::path& path) {
  using Head = GbmModel::Head;
  using Node = GbmModel::Node;
  const JsonFields f(path.string());
  if (!j.is_object()) return f.error("top level must be a JSON object");
  GbmModel m;
  m.m_path = path;
  if (const Json* mt = JsonFields::optional_member(j, "model_type")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*mt, "model_type"));
    if (s != "gbm") return f.error("model_type is '" + s + "', expected 'gbm'");
  } else if (!j.contains("trees")) {
    return f.error("not a GBM model (no model_type \"gbm\" and no trees)");
  }
  if (const Json* h = JsonFields::optional_member(j, "head")) {
    ESCPOD_ASSIGN_OR_RETURN(std::string s, f.string(*h, "head"));
    if (s == "softmax") m.m_head = Head::kSoftmax;
    else if (s == "sigmoid") m.m_head = Head::kSigmoid;
    else return f.error("head is '" + s + "', expected softmax or sigmoid");
  }
  ESCPOD_ASSIGN_OR_RETURN(const Json* nc_j, f.member(j, "n_classes"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t nc, f.integer(*nc_j, "n_classes"));
  if (nc < 2 || nc > 100000) return f.error("n_classes must be at least 2");
  if (m.m_head == Head::kSigmoid && nc != 2) return f.error("a sigmoid head needs n_classes 2");
  const auto k = static_cast<size_t>(nc);
  ESCPOD_ASSIGN_OR_RETURN(const Json* nf_j, f.member(j, "n_features"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t nf, f.integer(*nf_j, "n_features"));
  if (nf < 1 || nf > std::numeric_limits<int32_t>::max()) return f.error("n_features must be >= 1");
  m.m_n_features = static_cast<size_t>(nf);
  m.m_n_groups = m.m_head == Head::kSoftmax ? k : 1;

  ESCPOD_ASSIGN_OR_RETURN(const Json* bl_j, f.member(j, "baseline"));
  ESCPOD_RETURN_IF_ERROR(f.doubles(*bl_j, "baseline", m.m_n_groups, m.m_baseline));

  ESCPOD_ASSIGN_OR_RETURN(const Json* trees_j, f.member(j, "trees"));
  if (!trees_j->is_array()) return f.error("trees must be an array of iterations");
  m.m_n_iterations = trees_j->size();
  for (size_t it = 0; it < m.m_n_iterations; ++it) {
    const Json& iter = (*trees_j)[it];
    if (!iter.is_array() || iter.size() != m.m_n_groups)
      return f.error("trees[" + std::to_string(it) + "] must hold " +
                     std::to_string(m.m_n_groups) + " trees (one per " +
                     (m.m_head == Head::kSoftmax ? "class" : "iteration, sigmoid head") + ")");
    for (size_t g = 0; g < m.m_n_groups; ++g) {
      const Json& tree = iter[g];
      const std::string where = "trees[" + std::to_string(it) + "][" + std::to_string(g) + "]";
      if (!tree.is_array() || tree.empty()) return f.error(where + " must be a non-empty node array");
      const size_t n_nodes = tree.size();
      if (m.m_nodes.size() + n_nodes > std::numeric_limits<uint32_t>::max())
        return f.error("too many tree nodes");
      const auto base = static_cast<uint32_t>(m.m_nodes.size());
      m.m_roots.push_back(base);
      for (size_t nd = 0; nd < n_nodes; ++nd) {
        const Json& node = tree[nd];
        const std::string at = where + "[" + std::to_string(nd) + "]";
        bool leaf = false;
        if (const Json* v = JsonFields::optional_member(node, "leaf")) {
          ESCPOD_ASSIGN_OR_RETURN(leaf, f.boolean(*v, at + ".leaf"));
        } else {
          return f.error(at + " has no 'leaf' field");
        }
        Node out{};
        if (leaf) {
          ESCPOD_ASSIGN_OR_RETURN(const Json* v, f.member(node, "value"));
          ESCPOD_ASSIGN_OR_RETURN(out.threshold, f.number(*v, at + ".value"));
          out.feature = -1;
          out.left = out.right = 0;
          out.missing_left = false;
        } else {
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
          out.missing_left = false;
          if (const Json* ml = JsonFields::optional_member(node, "missing_left")) {
            ESCPOD_ASSIGN_OR_RETURN(out.missing_left, f.boolean(*ml, at + ".missing_left"));
          }
        }
        m.m_nodes.push_back(out);
      }
    }
  }

  ESCPOD_ASSIGN_OR_RETURN(const Json* lm_j, f.member(j, "label_mapper"));
  if (!lm_j->is_object()) return f.error("label_mapper must be an object {class index: label}");
  m.m_labels.resize(k);
  for (size_t c = 0; c < k; ++c) {
    const std::string key = std::to_string(c);
    auto it = lm_j->find(key);
    if (it == lm_j->end()) return f.error("label_mapper has no entry for class index " + key);
    ESCPOD_ASSIGN_OR_RETURN(int64_t lab, f.integer(*it, "label_mapper[\"" + key + "\"]"));
    m.m_labels[c] = static_cast<int32_t>(lab);
  }
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
    out.status = CallStatus::kInvalidInput;
    out.label = out.best_label = kUnclassifiedLabel;
    out.class_index = -1;
    out.confidence = 0.0;
    out.threshold = 0.0;
    out.probabilities.clear();
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
