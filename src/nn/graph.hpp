// The engine's own graph representation: what the ONNX loader produces and the planner consumes.
// No protobuf types beyond onnx_loader.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/nn/model.hpp"

namespace escpod::nn::detail {

enum class DType { kFloat32, kInt64 };

// A constant tensor (initializer, Constant node, or a value folded at plan time).
struct Tensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<float> f32;    // when dtype == kFloat32
  std::vector<int64_t> i64;  // when dtype == kInt64

  int64_t numel() const;
  // Values as int64 (float values truncated); for shape-like inputs.
  std::vector<int64_t> as_ints() const;
  static Tensor floats(std::vector<int64_t> shape, std::vector<float> values);
  static Tensor ints(std::vector<int64_t> shape, std::vector<int64_t> values);
};

struct Attribute {
  enum class Kind { kInt, kFloat, kInts, kFloats, kString, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0.0f;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string s;
  Tensor t;
};

struct Node {
  std::string op;
  std::string name;
  std::vector<int> inputs;   // value ids; -1 for an omitted optional input
  std::vector<int> outputs;  // value ids; -1 for an omitted optional output
  std::map<std::string, Attribute> attrs;

  bool has(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;  // empty when absent
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  // "Conv '/conv/Conv_1'" for messages.
  std::string label() const;
};

struct Value {
  std::string name;
  std::optional<Tensor> constant;  // initializers and Constant outputs
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;  // topologically sorted
  int input = -1;           // value id of the single runtime input
  int output = -1;          // value id of the single output
  ModelInfo info;
};

// Parses a serialised ONNX ModelProto. `label` names the model in error messages.
Result<Graph> parse_onnx(std::string_view bytes, std::string_view label);

// Load-time rewrites: folds nodes whose inputs are all constant, and BatchNormalization that
// follows a Conv/ConvTranspose into that node's weights. Refuses unsupported operators.
Status prepare_graph(Graph& graph);

}  // namespace escpod::nn::detail
