// Graph helpers, constant folding and the load-time checks and rewrites.
#include "nn/graph.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "nn/plan.hpp"
#include "nn/shape_ops.hpp"

namespace escpod::nn::detail {

int64_t Tensor::numel() const { return detail::numel(shape); }

std::vector<int64_t> Tensor::as_ints() const {
  if (dtype == DType::kInt64) return i64;
  std::vector<int64_t> v;
  v.reserve(f32.size());
  for (float f : f32) v.push_back(static_cast<int64_t>(f));
  return v;
}

Tensor Tensor::floats(std::vector<int64_t> shape, std::vector<float> values) {
  Tensor t;
  t.dtype = DType::kFloat32;
  t.shape = std::move(shape);
  t.f32 = std::move(values);
  return t;
}

Tensor Tensor::ints(std::vector<int64_t> shape, std::vector<int64_t> values) {
  Tensor t;
  t.dtype = DType::kInt64;
  t.shape = std::move(shape);
  t.i64 = std::move(values);
  return t;
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.i;
}
float Node::attr_float(const std::string& key, float fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.f;
}
std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? std::vector<int64_t>{} : it->second.ints;
}
std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.s;
}
std::string Node::label() const { return fmt::format("{} node '{}'", op, name); }

namespace {

// Operators the engine runs (on runtime tensors) or folds (shape arithmetic the exporters emit
// around them, evaluated once the input shape is known). Everything else is refused at load.
const std::set<std::string>& supported_ops() {
  static const std::set<std::string> ops = {
      // runtime
      "Conv", "ConvTranspose", "Relu", "Sigmoid", "Tanh", "Mul", "Add", "MatMul", "Gemm", "LSTM",
      "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Slice", "Pad", "Concat",
      "BatchNormalization", "Identity",
      // shape arithmetic, folded to constants at plan time
      "Constant", "Shape", "Gather", "ConstantOfShape", "Cast"};
  return ops;
}

template <typename T>
std::vector<T>& data_of(Tensor& t);
template <>
std::vector<float>& data_of<float>(Tensor& t) { return t.f32; }
template <>
std::vector<int64_t>& data_of<int64_t>(Tensor& t) { return t.i64; }

template <typename T>
const std::vector<T>& cdata_of(const Tensor& t) { return data_of<T>(const_cast<Tensor&>(t)); }

Tensor make_like(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

template <typename T>
Tensor gather_copy(const Tensor& in, const Shape& out_shape, const Shape& strides, int64_t start) {
  Tensor t = make_like(in.dtype, out_shape);
  data_of<T>(t) = strided_gather<T>(cdata_of<T>(in).data(), out_shape, strides, start);
  return t;
}

Tensor strided(const Tensor& in, const Shape& out_shape, const Shape& strides, int64_t start) {
  return in.dtype == DType::kFloat32 ? gather_copy<float>(in, out_shape, strides, start)
                                     : gather_copy<int64_t>(in, out_shape, strides, start);
}

template <typename T>
T binary_apply(const std::string& op, T a, T b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  return b == T(0) ? T(0) : a / b;  // Div
}

template <typename T>
Tensor binary_fold(const std::string& op, const Tensor& a, const Tensor& b, const Shape& out) {
  Tensor t = make_like(a.dtype, out);
  auto& o = data_of<T>(t);
  o.resize(static_cast<size_t>(numel(out)));
  const Shape ea = expand_rank(a.shape, out.size()), eb = expand_rank(b.shape, out.size());
  const Shape sa = strides_of(ea), sb = strides_of(eb);
  const Shape so = strides_of(out);
  for (int64_t i = 0; i < numel(out); ++i) {
    int64_t ia = 0, ib = 0, rem = i;
    for (size_t d = 0; d < out.size(); ++d) {
      const int64_t idx = rem / so[d];
      rem %= so[d];
      if (ea[d] != 1) ia += idx * sa[d];
      if (eb[d] != 1) ib += idx * sb[d];
    }
    o[static_cast<size_t>(i)] = binary_apply<T>(op, cdata_of<T>(a)[static_cast<size_t>(ia)], cdata_of<T>(b)[static_cast<size_t>(ib)]);
  }
  return t;
}

Tensor cast_to(const Tensor& in, DType to) {
  if (in.dtype == to) return in;
  Tensor t = make_like(to, in.shape);
  if (to == DType::kFloat32) {
    for (int64_t v : in.i64) t.f32.push_back(static_cast<float>(v));
  } else {
    for (float v : in.f32) t.i64.push_back(static_cast<int64_t>(v));
  }
  return t;
}

// ---- constant folding, one function per operator -------------------------------------------
// Each returns true with the result in `out`, false when the node cannot be folded here (it then
// stays a runtime node), or an error naming the node.

Status bad_fold(const Node& node, const Status& s) {
  return Status::invalid_argument(fmt::format("{}: {}", node.label(), s.message()));
}

const Tensor* input_at(const std::vector<const Tensor*>& in, size_t i) {
  return i < in.size() ? in[i] : nullptr;
}

Result<bool> fold_constant(const Node& node, std::vector<Tensor>& out) {
  auto it = node.attrs.find("value");
  if (it != node.attrs.end()) {
    out.push_back(it->second.t);
  } else if (node.has("value_float")) {
    out.push_back(Tensor::floats({}, {node.attr_float("value_float", 0)}));
  } else if (node.has("value_floats")) {
    const auto& f = node.attrs.at("value_floats").floats;
    out.push_back(Tensor::floats({static_cast<int64_t>(f.size())}, f));
  } else if (node.has("value_int")) {
    out.push_back(Tensor::ints({}, {node.attr_int("value_int", 0)}));
  } else if (node.has("value_ints")) {
    const auto& v = node.attr_ints("value_ints");
    out.push_back(Tensor::ints({static_cast<int64_t>(v.size())}, v));
  } else {
    return Status::unsupported(fmt::format("{}: no value attribute the engine reads", node.label()));
  }
  return true;
}

Result<bool> fold_cast(const Node& node, const Tensor& x, std::vector<Tensor>& out) {
  const int64_t to = node.attr_int("to", 1);
  if (to == 1 || to == 11) {
    out.push_back(cast_to(x, DType::kFloat32));
  } else if (to == 7 || to == 6 || to == 9) {
    out.push_back(cast_to(x, DType::kInt64));
  } else {
    return Status::unsupported(fmt::format("{}: cast to element type {}", node.label(), to));
  }
  return true;
}

Result<bool> fold_constant_of_shape(const Node& node, const Tensor& x, std::vector<Tensor>& out) {
  Tensor value = Tensor::floats({1}, {0.0f});
  if (node.has("value")) value = node.attrs.at("value").t;
  const Shape shape = x.as_ints();
  Tensor t = make_like(value.dtype, shape);
  if (value.dtype == DType::kFloat32) {
    t.f32.assign(static_cast<size_t>(numel(shape)), value.f32.empty() ? 0.0f : value.f32[0]);
  } else {
    t.i64.assign(static_cast<size_t>(numel(shape)), value.i64.empty() ? 0 : value.i64[0]);
  }
  out.push_back(std::move(t));
  return true;
}

Result<bool> fold_gather(const Node& node, const Tensor& x, const std::vector<const Tensor*>& in,
                         std::vector<Tensor>& out) {
  const Tensor* idx = input_at(in, 1);
  if (idx == nullptr) return false;
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = norm_axis(node.attr_int("axis", 0), rank);
  if (axis < 0) return bad_fold(node, Status::invalid_argument("bad axis"));
  const std::vector<int64_t> ids = idx->as_ints();
  const Shape st = strides_of(x.shape);
  const int64_t outer = numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  const int64_t inner = st[static_cast<size_t>(axis)];
  const int64_t dim = x.shape[static_cast<size_t>(axis)];
  Shape oshape(x.shape.begin(), x.shape.begin() + axis);
  oshape.insert(oshape.end(), idx->shape.begin(), idx->shape.end());
  oshape.insert(oshape.end(), x.shape.begin() + axis + 1, x.shape.end());
  Tensor t = make_like(x.dtype, oshape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t id : ids) {
      if (id < 0) id += dim;
      if (id < 0 || id >= dim) return bad_fold(node, Status::invalid_argument("gather index out of range"));
      for (int64_t i = 0; i < inner; ++i) {
        const size_t s = static_cast<size_t>((o * dim + id) * inner + i);
        if (x.dtype == DType::kFloat32) t.f32.push_back(x.f32[s]); else t.i64.push_back(x.i64[s]);
      }
    }
  }
  out.push_back(std::move(t));
  return true;
}

// Unsqueeze, Squeeze, Reshape: the same values under another shape.
Result<bool> fold_reshape(const Node& node, const Tensor& x, const std::vector<const Tensor*>& in,
                          std::vector<Tensor>& out) {
  const std::string& op = node.op;
  const Tensor* arg = input_at(in, 1);
  Tensor t = x;
  Result<Shape> shape = Shape{};
  if (op == "Reshape") {
    if (!arg) return false;
    shape = reshape_shape(x.shape, arg->as_ints(), node.attr_int("allowzero", 0) != 0);
  } else if (op == "Squeeze") {
    shape = squeeze_shape(x.shape, arg ? arg->as_ints() : std::vector<int64_t>{});
  } else {
    if (!arg) return false;
    shape = unsqueeze_shape(x.shape, arg->as_ints());
  }
  if (!shape.is_ok()) return bad_fold(node, shape.status());
  t.shape = shape.value();
  out.push_back(std::move(t));
  return true;
}

Result<bool> fold_concat(const Node& node, const Tensor& x, const std::vector<const Tensor*>& in,
                         std::vector<Tensor>& out) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = norm_axis(node.attr_int("axis", 0), rank);
  if (axis < 0) return bad_fold(node, Status::invalid_argument("bad axis"));
  Shape oshape = x.shape;
  oshape[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : in) {
    if (!t || t->dtype != x.dtype || t->shape.size() != x.shape.size()) return bad_fold(node, Status::invalid_argument("concat inputs differ"));
    oshape[static_cast<size_t>(axis)] += t->shape[static_cast<size_t>(axis)];
  }
  const int64_t outer = numel(Shape(x.shape.begin(), x.shape.begin() + axis));
  Tensor t = make_like(x.dtype, oshape);
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor* s : in) {
      const int64_t block = numel(Shape(s->shape.begin() + axis, s->shape.end()));
      for (int64_t i = 0; i < block; ++i) {
        const size_t k = static_cast<size_t>(o * block + i);
        if (x.dtype == DType::kFloat32) t.f32.push_back(s->f32[k]); else t.i64.push_back(s->i64[k]);
      }
    }
  }
  out.push_back(std::move(t));
  return true;
}

// Transpose and Slice: strided gathers.
Result<bool> fold_strided(const Node& node, const Tensor& x, const std::vector<const Tensor*>& in,
                          std::vector<Tensor>& out) {
  Shape oshape, strides;
  int64_t start = 0;
  Status s;
  if (node.op == "Transpose") {
    s = transpose_geometry(x.shape, node.attr_ints("perm"), oshape, strides);
  } else {
    const Tensor* starts = input_at(in, 1);
    const Tensor* ends = input_at(in, 2);
    if (!starts || !ends) return false;
    const Tensor* axes = input_at(in, 3);
    const Tensor* steps = input_at(in, 4);
    bool rev = false;
    s = slice_geometry(x.shape, starts->as_ints(), ends->as_ints(),
                       axes ? axes->as_ints() : std::vector<int64_t>{},
                       steps ? steps->as_ints() : std::vector<int64_t>{}, oshape, strides, start, rev);
  }
  if (!s.is_ok()) return bad_fold(node, s);
  out.push_back(strided(x, oshape, strides, start));
  return true;
}

Result<bool> fold_arithmetic(const Node& node, const Tensor& x, const std::vector<const Tensor*>& in,
                             std::vector<Tensor>& out) {
  const Tensor* y = input_at(in, 1);
  if (!y) return false;
  if (x.dtype != y->dtype) return bad_fold(node, Status::invalid_argument("operand types differ"));
  Result<Shape> shape = broadcast_shape(x.shape, y->shape);
  if (!shape.is_ok()) return bad_fold(node, shape.status());
  out.push_back(x.dtype == DType::kFloat32 ? binary_fold<float>(node.op, x, *y, shape.value())
                                           : binary_fold<int64_t>(node.op, x, *y, shape.value()));
  return true;
}

Result<bool> fold_activation(const Node& node, const Tensor& x, std::vector<Tensor>& out) {
  Tensor t = x;
  PostOp p;
  p.kind = node.op == "Relu" ? PostOp::Kind::kRelu : node.op == "Sigmoid" ? PostOp::Kind::kSigmoid : PostOp::Kind::kTanh;
  for (float& v : t.f32) v = apply_post_ops({p}, v);
  out.push_back(std::move(t));
  return true;
}

}  // namespace

Result<bool> fold_node(const Node& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const std::string& op = node.op;
  out.clear();
  if (op == "Constant") return fold_constant(node, out);
  const Tensor* x = input_at(in, 0);
  if (x == nullptr) return false;
  if (op == "Identity") {
    out.push_back(*x);
    return true;
  }
  if (op == "Cast") return fold_cast(node, *x, out);
  if (op == "ConstantOfShape") return fold_constant_of_shape(node, *x, out);
  if (op == "Gather") return fold_gather(node, *x, in, out);
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") return fold_reshape(node, *x, in, out);
  if (op == "Concat") return fold_concat(node, *x, in, out);
  if (op == "Transpose" || op == "Slice") return fold_strided(node, *x, in, out);
  if (op == "Add" || op == "Mul" || op == "Sub" || op == "Div") return fold_arithmetic(node, *x, in, out);
  if ((op == "Relu" || op == "Sigmoid" || op == "Tanh") && x->dtype == DType::kFloat32) return fold_activation(node, *x, out);
  return false;
}

namespace {

Status check_supported_ops(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (!supported_ops().count(n.op)) {
      return Status::unsupported(fmt::format("{}: unsupported operator {} in node '{}'", g.info.source, n.op, n.name));
    }
  }
  return Status::ok();
}

// Folds nodes whose inputs are all constant (weight transposes, the Pad-argument arithmetic
// exporters emit). Runtime-dependent shape arithmetic is folded later, per input shape.
Status fold_constant_nodes(Graph& g) {
  std::vector<Node> kept;
  for (Node& n : g.nodes) {
    bool all_const = true;
    std::vector<const Tensor*> in;
    for (int id : n.inputs) {
      if (id < 0) {
        in.push_back(nullptr);
        continue;
      }
      const auto& c = g.values[static_cast<size_t>(id)].constant;
      if (!c) all_const = false;
      in.push_back(c ? &*c : nullptr);
    }
    if (all_const && n.op != "Shape") {
      std::vector<Tensor> out;
      ESCPOD_ASSIGN_OR_RETURN(bool folded, fold_node(n, in, out));
      if (folded) {
        for (size_t i = 0; i < out.size() && i < n.outputs.size(); ++i) {
          if (n.outputs[i] >= 0) g.values[static_cast<size_t>(n.outputs[i])].constant = std::move(out[i]);
        }
        continue;
      }
    }
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return Status::ok();
}

// Readers of each value (the graph output counts as one).
std::vector<int> count_uses(const Graph& g) {
  std::vector<int> uses(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    for (int id : n.inputs) if (id >= 0) ++uses[static_cast<size_t>(id)];
  }
  if (g.output >= 0) ++uses[static_cast<size_t>(g.output)];
  return uses;
}

// An inference-mode BatchNormalization's constant float parameters: scale, B, mean, var.
Result<std::array<const Tensor*, 4>> batch_norm_params(const Graph& g, const Node& bn, const std::vector<int>& uses) {
  const std::string& label = g.info.source;
  if (bn.attr_int("training_mode", 0) != 0) {
    return Status::unsupported(fmt::format("{}: {} in training mode", label, bn.label()));
  }
  for (size_t i = 1; i < bn.outputs.size(); ++i) {
    if (bn.outputs[i] >= 0 && uses[static_cast<size_t>(bn.outputs[i])] > 0) {
      return Status::unsupported(fmt::format("{}: {} running-statistics outputs are used", label, bn.label()));
    }
  }
  std::array<const Tensor*, 4> p{};
  bool consts = bn.inputs.size() == 5;
  for (int i = 0; consts && i < 4; ++i) {
    const int id = bn.inputs[static_cast<size_t>(i) + 1];
    const auto& c = g.values[static_cast<size_t>(id)].constant;
    consts = consts && c && c->dtype == DType::kFloat32;
    p[static_cast<size_t>(i)] = consts ? &*c : nullptr;
  }
  if (!consts) {
    return Status::unsupported(fmt::format("{}: {} with non-constant parameters", label, bn.label()));
  }
  return p;
}

// The live Conv/ConvTranspose among the first `before` nodes that writes `x` as the only reader
// of it, -1 when none.
int conv_producer(const Graph& g, const std::vector<bool>& dead, const std::vector<int>& uses, int x, size_t before) {
  for (size_t j = 0; j < before; ++j) {
    const Node& conv = g.nodes[j];
    if (dead[j] || (conv.op != "Conv" && conv.op != "ConvTranspose") || conv.outputs[0] != x ||
        uses[static_cast<size_t>(x)] != 1 || conv.inputs.size() < 2) {
      continue;
    }
    return static_cast<int>(j);
  }
  return -1;
}

// Scales the convolution's weights and bias by the BatchNormalization `bn` (parameters `p`) into
// fresh constants (the originals may be shared with another node) and makes the convolution
// write the BN's output. False, changing nothing, when the weights do not allow it.
bool fold_batch_norm_into_conv(Graph& g, Node& conv, const Node& bn, const std::array<const Tensor*, 4>& p) {
  const float eps = bn.attr_float("epsilon", 1e-5f);
  auto& wv = g.values[static_cast<size_t>(conv.inputs[1])].constant;
  if (!wv || wv->shape.size() < 3 || conv.attr_int("group", 1) != 1) return false;
  const bool transposed = conv.op == "ConvTranspose";
  const int64_t oc = transposed ? wv->shape[1] : wv->shape[0];
  if (p[0]->numel() != oc) return false;
  Tensor w = *wv;
  std::vector<float> bias(static_cast<size_t>(oc), 0.0f);
  if (conv.inputs.size() > 2 && conv.inputs[2] >= 0) {
    const auto& b = g.values[static_cast<size_t>(conv.inputs[2])].constant;
    if (!b) return false;
    bias = b->f32;
  }
  const int64_t k_size = numel(Shape(wv->shape.begin() + 2, wv->shape.end()));
  const int64_t other = transposed ? wv->shape[0] : wv->shape[1];
  for (int64_t c = 0; c < oc; ++c) {
    const double s = p[0]->f32[static_cast<size_t>(c)] / std::sqrt(static_cast<double>(p[3]->f32[static_cast<size_t>(c)]) + eps);
    for (int64_t o = 0; o < other; ++o) {
      for (int64_t kk = 0; kk < k_size; ++kk) {
        const int64_t idx = transposed ? (o * oc + c) * k_size + kk : (c * other + o) * k_size + kk;
        w.f32[static_cast<size_t>(idx)] = static_cast<float>(w.f32[static_cast<size_t>(idx)] * s);
      }
    }
    bias[static_cast<size_t>(c)] = static_cast<float>((bias[static_cast<size_t>(c)] - p[2]->f32[static_cast<size_t>(c)]) * s + p[1]->f32[static_cast<size_t>(c)]);
  }
  const int wid = static_cast<int>(g.values.size());
  g.values.push_back(Value{conv.name + "/folded_weight", std::move(w)});
  const int bid = static_cast<int>(g.values.size());
  g.values.push_back(Value{conv.name + "/folded_bias", Tensor::floats({oc}, std::move(bias))});
  conv.inputs.resize(3);
  conv.inputs[1] = wid;
  conv.inputs[2] = bid;
  conv.outputs[0] = bn.outputs[0];
  return true;
}

// BatchNormalization directly after a Conv/ConvTranspose with constant weights whose output
// feeds only the BN: scale the weights and bias in place, drop the BN.
Status fold_batch_norms(Graph& g) {
  const std::vector<int> uses = count_uses(g);
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& bn = g.nodes[k];
    if (bn.op != "BatchNormalization") continue;
    ESCPOD_ASSIGN_OR_RETURN(const auto p, batch_norm_params(g, bn, uses));
    const int j = conv_producer(g, dead, uses, bn.inputs[0], k);
    if (j >= 0 && fold_batch_norm_into_conv(g, g.nodes[static_cast<size_t>(j)], bn, p)) dead[k] = true;
  }
  std::vector<Node> live;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!dead[k]) live.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(live);
  return Status::ok();
}

}  // namespace

Status prepare_graph(Graph& g) {
  ESCPOD_RETURN_IF_ERROR(check_supported_ops(g));
  ESCPOD_RETURN_IF_ERROR(fold_constant_nodes(g));
  return fold_batch_norms(g);
}

}  // namespace escpod::nn::detail
