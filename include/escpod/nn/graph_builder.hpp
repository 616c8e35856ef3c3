// Builds an nn::Model in code instead of from an ONNX file: for trained weights that arrive in
// another container (a PyTorch state_dict) and whose architecture is known from a config. The
// nodes follow the ONNX operator semantics the engine implements, so the model runs through the
// same planner, fusions and kernels (oneDNN or reference) as a loaded ONNX file, and no converted
// copy of the weights is ever written: they live only in the built Model.
//
// Usage: make a builder with the input's dimensions, chain operations on the returned value
// handles, then finish() with the output handle. Weight shapes are checked by the planner when
// the first plan is built; finish() builds the plan for batch 1 when the other dimensions are
// fixed, or when `probe_shape` is given, so mistakes surface at load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/nn/model.hpp"

namespace escpod::nn {

namespace detail {
struct Graph;
}

// A constant float32 tensor handed to the builder (C order).
struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Gate order of LSTM weight rows (4 blocks of H rows).
enum class LstmGates {
  kOnnx,     // input, output, forget, cell
  kPyTorch,  // input, forget, cell (g), output: torch.nn.LSTM's weight_ih/weight_hh/bias_*
};

class GraphBuilder {
 public:
  using Value = int;

  // `label` names the model in messages and in ModelInfo::source; `producer` is shown by
  // `model info`. `input_dims` may hold -1 for free dimensions, named by `dim_params`.
  GraphBuilder(std::string label, std::string producer, std::vector<int64_t> input_dims,
               std::vector<std::string> dim_params);
  ~GraphBuilder();
  GraphBuilder(GraphBuilder&&) noexcept;
  GraphBuilder& operator=(GraphBuilder&&) noexcept;

  Value input() const;

  // 1-D convolution, [N, C, W] -> [N, OC, W'] with weights [OC, C, K], bias [OC] (may be empty).
  Value conv1d(Value x, FloatTensor weights, FloatTensor bias, int64_t stride, int64_t pad_left, int64_t pad_right);
  // Activations (element-wise).
  Value silu(Value x);  // x * sigmoid(x) (emitted as Sigmoid + Mul, which the planner fuses)
  Value tanh(Value x);
  Value scale(Value x, float factor);  // x * factor
  Value transpose(Value x, std::vector<int64_t> perm);
  Value reshape(Value x, std::vector<int64_t> shape);  // ONNX Reshape: 0 copies, -1 infers
  // Constant padding of each axis (begin and end counts per axis, ONNX order: all begins, then
  // all ends) with `value`.
  Value pad(Value x, std::vector<int64_t> pads, float value);
  // One unidirectional LSTM layer with zero initial state: [T, N, C] -> [T, N, H]. `reverse`
  // runs it from the last step to the first (output stays in input time order). Weights
  // [4H, C] and [4H, H], biases [4H] each (added), rows in `gates` order.
  Value lstm(Value x, const FloatTensor& w_ih, const FloatTensor& w_hh, const FloatTensor& b_ih,
             const FloatTensor& b_hh, bool reverse, LstmGates gates);
  // y = x * W^T + b over the last axis, W [out, in] (torch.nn.Linear layout), b [out] or empty.
  Value linear(Value x, const FloatTensor& weight, const FloatTensor& bias);

  // How ModelInfo describes the output (default: the producing node's name, no shape).
  void describe_output(std::string name, std::vector<int64_t> dims, std::vector<std::string> dim_params);

  // Finishes the graph with `output` as its result and returns the model. When `probe_shape` is
  // not empty, the plan for that input shape is built now (reporting shape errors here).
  Result<Model> finish(Value output, const LoadOptions& options, std::span<const int64_t> probe_shape = {});

 private:
  Value constant(FloatTensor t);
  Value int_constant(std::vector<int64_t> values);
  Value node(const std::string& op, std::vector<Value> inputs);
  std::unique_ptr<detail::Graph> m_graph;
  int m_next_node = 0;
  std::optional<ValueInfo> m_output_info;
};

}  // namespace escpod::nn
