// GraphBuilder: ONNX-semantics nodes assembled in code (see escpod/nn/graph_builder.hpp).
#include "escpod/nn/graph_builder.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "nn/graph.hpp"

namespace escpod::nn {
namespace {

detail::Attribute ints_attr(std::vector<int64_t> v) {
  detail::Attribute a;
  a.kind = detail::Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}
detail::Attribute int_attr(int64_t v) {
  detail::Attribute a;
  a.kind = detail::Attribute::Kind::kInt;
  a.i = v;
  return a;
}
detail::Attribute string_attr(std::string v) {
  detail::Attribute a;
  a.kind = detail::Attribute::Kind::kString;
  a.s = std::move(v);
  return a;
}

// Rows of a [4H, X] LSTM block matrix (or a [4H] bias) reordered from PyTorch's gate order
// (i, f, g, o) to ONNX's (i, o, f, c).
std::vector<float> onnx_gate_rows(const FloatTensor& t, LstmGates gates) {
  if (gates == LstmGates::kOnnx) return t.values;
  const size_t block = t.values.size() / 4;
  static constexpr size_t kFromTorch[4] = {0, 3, 1, 2};  // ONNX block b comes from torch block kFromTorch[b]
  std::vector<float> out(t.values.size());
  for (size_t b = 0; b < 4; ++b) {
    std::copy_n(t.values.begin() + static_cast<std::ptrdiff_t>(kFromTorch[b] * block), block,
                out.begin() + static_cast<std::ptrdiff_t>(b * block));
  }
  return out;
}

}  // namespace

GraphBuilder::GraphBuilder(std::string label, std::string producer, std::vector<int64_t> input_dims,
                           std::vector<std::string> dim_params)
    : m_graph(std::make_unique<detail::Graph>()) {
  detail::Graph& g = *m_graph;
  g.info.source = std::move(label);
  g.info.producer = std::move(producer);
  dim_params.resize(input_dims.size());
  g.info.inputs.push_back(ValueInfo{"signal", std::move(input_dims), std::move(dim_params)});
  g.values.push_back(detail::Value{"signal", std::nullopt});
  g.input = 0;
}
GraphBuilder::~GraphBuilder() = default;
GraphBuilder::GraphBuilder(GraphBuilder&&) noexcept = default;
GraphBuilder& GraphBuilder::operator=(GraphBuilder&&) noexcept = default;

GraphBuilder::Value GraphBuilder::input() const { return m_graph->input; }

GraphBuilder::Value GraphBuilder::constant(FloatTensor t) {
  detail::Graph& g = *m_graph;
  g.info.n_parameters += static_cast<int64_t>(t.values.size());
  g.values.push_back(detail::Value{fmt::format("const_{}", g.values.size()),
                                   detail::Tensor::floats(std::move(t.shape), std::move(t.values))});
  return static_cast<Value>(g.values.size()) - 1;
}

GraphBuilder::Value GraphBuilder::int_constant(std::vector<int64_t> values) {
  detail::Graph& g = *m_graph;
  const auto n = static_cast<int64_t>(values.size());
  g.values.push_back(detail::Value{fmt::format("const_{}", g.values.size()), detail::Tensor::ints({n}, std::move(values))});
  return static_cast<Value>(g.values.size()) - 1;
}

GraphBuilder::Value GraphBuilder::node(const std::string& op, std::vector<Value> inputs) {
  detail::Graph& g = *m_graph;
  detail::Node n;
  n.op = op;
  n.name = fmt::format("{}_{}", op, m_next_node++);
  n.inputs = std::move(inputs);
  g.values.push_back(detail::Value{n.name + ":0", std::nullopt});
  n.outputs = {static_cast<int>(g.values.size()) - 1};
  g.nodes.push_back(std::move(n));
  return g.nodes.back().outputs[0];
}

GraphBuilder::Value GraphBuilder::conv1d(Value x, FloatTensor weights, FloatTensor bias, int64_t stride,
                                         int64_t pad_left, int64_t pad_right) {
  std::vector<Value> in{x, constant(std::move(weights))};
  if (!bias.values.empty()) in.push_back(constant(std::move(bias)));
  const Value y = node("Conv", std::move(in));
  auto& attrs = m_graph->nodes.back().attrs;
  attrs["strides"] = ints_attr({stride});
  attrs["pads"] = ints_attr({pad_left, pad_right});
  return y;
}

GraphBuilder::Value GraphBuilder::silu(Value x) { return node("Mul", {x, node("Sigmoid", {x})}); }
GraphBuilder::Value GraphBuilder::tanh(Value x) { return node("Tanh", {x}); }
GraphBuilder::Value GraphBuilder::scale(Value x, float factor) { return node("Mul", {x, constant({{1}, {factor}})}); }

GraphBuilder::Value GraphBuilder::transpose(Value x, std::vector<int64_t> perm) {
  const Value y = node("Transpose", {x});
  m_graph->nodes.back().attrs["perm"] = ints_attr(std::move(perm));
  return y;
}

GraphBuilder::Value GraphBuilder::reshape(Value x, std::vector<int64_t> shape) {
  return node("Reshape", {x, int_constant(std::move(shape))});
}

GraphBuilder::Value GraphBuilder::pad(Value x, std::vector<int64_t> pads, float value) {
  return node("Pad", {x, int_constant(std::move(pads)), constant({{}, {value}})});
}

GraphBuilder::Value GraphBuilder::lstm(Value x, const FloatTensor& w_ih, const FloatTensor& w_hh, const FloatTensor& b_ih,
                                       const FloatTensor& b_hh, bool reverse, LstmGates gates) {
  const int64_t h = w_hh.shape.empty() ? 0 : w_hh.shape.back();
  const int64_t c = w_ih.shape.empty() ? 0 : w_ih.shape.back();
  const int64_t rows = w_ih.shape.empty() ? 0 : w_ih.shape.front();
  std::vector<float> bias = onnx_gate_rows(b_ih, gates);
  const std::vector<float> bh = onnx_gate_rows(b_hh, gates);
  bias.insert(bias.end(), bh.begin(), bh.end());  // ONNX B = [Wb, Rb]
  const Value w = constant({{1, rows, c}, onnx_gate_rows(w_ih, gates)});
  const Value r = constant({{1, static_cast<int64_t>(w_hh.shape.empty() ? 0 : w_hh.shape.front()), h}, onnx_gate_rows(w_hh, gates)});
  const Value b = constant({{1, static_cast<int64_t>(bias.size())}, std::move(bias)});
  const Value y = node("LSTM", {x, w, r, b});
  auto& attrs = m_graph->nodes.back().attrs;
  attrs["hidden_size"] = int_attr(h);
  attrs["direction"] = string_attr(reverse ? "reverse" : "forward");
  return node("Squeeze", {y, int_constant({1})});  // [T, 1, N, H] -> [T, N, H]
}

GraphBuilder::Value GraphBuilder::linear(Value x, const FloatTensor& weight, const FloatTensor& bias) {
  const int64_t out = weight.shape.size() == 2 ? weight.shape[0] : 0;
  const int64_t in = weight.shape.size() == 2 ? weight.shape[1] : 0;
  FloatTensor wt{{in, out}, std::vector<float>(weight.values.size())};  // MatMul wants [in, out]
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) wt.values[static_cast<size_t>(i * out + o)] = weight.values[static_cast<size_t>(o * in + i)];
  }
  const Value y = node("MatMul", {x, constant(std::move(wt))});
  return bias.values.empty() ? y : node("Add", {y, constant(bias)});
}

void GraphBuilder::describe_output(std::string name, std::vector<int64_t> dims, std::vector<std::string> dim_params) {
  dim_params.resize(dims.size());
  m_output_info = ValueInfo{std::move(name), std::move(dims), std::move(dim_params)};
}

Result<Model> GraphBuilder::finish(Value output, const LoadOptions& options, std::span<const int64_t> probe_shape) {
  detail::Graph& g = *m_graph;
  g.output = output;
  g.info.outputs.push_back(m_output_info ? *m_output_info : ValueInfo{g.values[static_cast<size_t>(output)].name, {}, {}});
  std::map<std::string, int> counts;
  for (const detail::Node& n : g.nodes) ++counts[n.op];
  for (const auto& [op, n] : counts) g.info.op_counts.emplace_back(op, n);
  ESCPOD_ASSIGN_OR_RETURN(Model model, detail::make_model(std::move(g), options));
  if (!probe_shape.empty()) {
    auto shape = model.output_shape(probe_shape);  // kept: the macro must not bind a temporary
    ESCPOD_RETURN_IF_ERROR(shape);
  }
  return model;
}

}  // namespace escpod::nn
