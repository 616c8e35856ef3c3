// ONNX protobuf -> Graph. The only file that sees protobuf types.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "nn/graph.hpp"

namespace escpod::nn::detail {
namespace {

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 17;

Result<Tensor> convert_tensor(const onnx::TensorProto& t, std::string_view label) {
  Tensor out;
  out.shape.assign(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : out.shape) {
    if (d < 0) return Status::corrupt(fmt::format("{}: tensor '{}' has a negative dimension", label, t.name()));
    n *= d;
  }
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    return Status::unsupported(
        fmt::format("{}: tensor '{}' keeps its data in an external file; save the model with "
                    "the weights inside", label, t.name()));
  }
  const bool raw = t.has_raw_data();
  const std::string& bytes = t.raw_data();
  auto size_error = [&](int64_t got) {
    return Status::corrupt(fmt::format("{}: tensor '{}' has {} values, its shape needs {}", label,
                                       t.name(), got, n));
  };
  switch (t.data_type()) {
    case onnx::TensorProto_DataType_FLOAT: {
      out.dtype = DType::kFloat32;
      out.f32.resize(static_cast<size_t>(n));
      if (raw) {
        if (bytes.size() != static_cast<size_t>(n) * 4) return size_error(static_cast<int64_t>(bytes.size() / 4));
        std::memcpy(out.f32.data(), bytes.data(), bytes.size());
      } else {
        if (t.float_data_size() != n) return size_error(t.float_data_size());
        std::copy(t.float_data().begin(), t.float_data().end(), out.f32.begin());
      }
      break;
    }
    case onnx::TensorProto_DataType_DOUBLE: {
      out.dtype = DType::kFloat32;
      out.f32.resize(static_cast<size_t>(n));
      if (raw) {
        if (bytes.size() != static_cast<size_t>(n) * 8) return size_error(static_cast<int64_t>(bytes.size() / 8));
        for (int64_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, bytes.data() + i * 8, 8);
          out.f32[static_cast<size_t>(i)] = static_cast<float>(v);
        }
      } else {
        if (t.double_data_size() != n) return size_error(t.double_data_size());
        for (int64_t i = 0; i < n; ++i) out.f32[static_cast<size_t>(i)] = static_cast<float>(t.double_data(static_cast<int>(i)));
      }
      break;
    }
    case onnx::TensorProto_DataType_INT64: {
      out.dtype = DType::kInt64;
      out.i64.resize(static_cast<size_t>(n));
      if (raw) {
        if (bytes.size() != static_cast<size_t>(n) * 8) return size_error(static_cast<int64_t>(bytes.size() / 8));
        std::memcpy(out.i64.data(), bytes.data(), bytes.size());
      } else {
        if (t.int64_data_size() != n) return size_error(t.int64_data_size());
        std::copy(t.int64_data().begin(), t.int64_data().end(), out.i64.begin());
      }
      break;
    }
    case onnx::TensorProto_DataType_INT32:
    case onnx::TensorProto_DataType_BOOL: {
      const size_t width = t.data_type() == onnx::TensorProto_DataType_INT32 ? 4 : 1;
      out.dtype = DType::kInt64;
      out.i64.resize(static_cast<size_t>(n));
      if (raw) {
        if (bytes.size() != static_cast<size_t>(n) * width) return size_error(static_cast<int64_t>(bytes.size() / width));
        for (int64_t i = 0; i < n; ++i) {
          if (width == 4) {
            int32_t v;
            std::memcpy(&v, bytes.data() + i * 4, 4);
            out.i64[static_cast<size_t>(i)] = v;
          } else {
            out.i64[static_cast<size_t>(i)] = bytes[static_cast<size_t>(i)] != 0;
          }
        }
      } else {
        if (t.int32_data_size() != n) return size_error(t.int32_data_size());
        std::copy(t.int32_data().begin(), t.int32_data().end(), out.i64.begin());
      }
      break;
    }
    default:
      return Status::unsupported(fmt::format("{}: tensor '{}' has element type {} (float32, "
                                             "float64 constants and integers are supported)",
                                             label, t.name(), onnx::TensorProto_DataType_Name(
                                                 static_cast<onnx::TensorProto_DataType>(t.data_type()))));
  }
  return out;
}

ValueInfo convert_value_info(const onnx::ValueInfoProto& v) {
  ValueInfo info;
  info.name = v.name();
  if (v.type().has_tensor_type() && v.type().tensor_type().has_shape()) {
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      info.dim_params.push_back(d.has_dim_param() ? d.dim_param() : std::string());
    }
  }
  return info;
}

}  // namespace

Result<Graph> parse_onnx(std::string_view bytes, std::string_view label) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::corrupt(fmt::format("{}: not an ONNX model (protobuf parse failed)", label));
  }
  if (!model.has_graph()) return Status::corrupt(fmt::format("{}: ONNX model has no graph", label));

  Graph g;
  g.info.source = std::string(label);
  g.info.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  g.info.ir_version = model.ir_version();
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") g.info.opset = o.version();
  }
  if (g.info.opset < kMinOpset || g.info.opset > kMaxOpset) {
    return Status::unsupported(fmt::format("{}: default-domain opset {} (supported: {} to {})",
                                           label, g.info.opset, kMinOpset, kMaxOpset));
  }
  const onnx::GraphProto& graph = model.graph();

  std::unordered_map<std::string, int> ids;
  auto value_id = [&](const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    int id = static_cast<int>(g.values.size());
    g.values.push_back(Value{name, std::nullopt});
    ids.emplace(name, id);
    return id;
  };

  for (const auto& init : graph.initializer()) {
    ESCPOD_ASSIGN_OR_RETURN(Tensor t, convert_tensor(init, label));
    if (t.dtype == DType::kFloat32) g.info.n_parameters += t.numel();
    g.values[static_cast<size_t>(value_id(init.name()))].constant = std::move(t);
  }
  if (graph.sparse_initializer_size() > 0) {
    return Status::unsupported(fmt::format("{}: sparse initializers are not supported", label));
  }

  std::vector<int> runtime_inputs;
  for (const auto& in : graph.input()) {
    int id = value_id(in.name());
    if (g.values[static_cast<size_t>(id)].constant) continue;  // initializer listed as input
    runtime_inputs.push_back(id);
    g.info.inputs.push_back(convert_value_info(in));
    const auto& tt = in.type().tensor_type();
    if (!in.type().has_tensor_type() || tt.elem_type() != onnx::TensorProto_DataType_FLOAT) {
      return Status::unsupported(fmt::format("{}: input '{}' is not a float32 tensor", label, in.name()));
    }
  }
  for (const auto& out : graph.output()) {
    g.info.outputs.push_back(convert_value_info(out));
    if (out.type().tensor_type().elem_type() != onnx::TensorProto_DataType_FLOAT) {
      return Status::unsupported(fmt::format("{}: output '{}' is not a float32 tensor", label, out.name()));
    }
  }
  if (runtime_inputs.size() != 1 || graph.output_size() != 1) {
    return Status::unsupported(fmt::format("{}: the graph has {} inputs and {} outputs; the "
                                           "engine runs single-input, single-output models",
                                           label, runtime_inputs.size(), graph.output_size()));
  }
  g.input = runtime_inputs[0];

  std::map<std::string, int> counts;
  for (int k = 0; k < graph.node_size(); ++k) {
    const auto& np = graph.node(k);
    Node node;
    node.op = np.op_type();
    node.name = np.name().empty() ? fmt::format("#{}", k) : np.name();
    counts[node.op] += 1;
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      return Status::unsupported(fmt::format("{}: operator {} of domain '{}' in node '{}' is not "
                                             "supported", label, np.op_type(), np.domain(), node.name));
    }
    for (const auto& name : np.input()) {
      if (name.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      auto it = ids.find(name);
      if (it == ids.end()) {
        return Status::corrupt(fmt::format("{}: node '{}' reads '{}', which no earlier node or "
                                           "initializer defines (graph not topologically sorted?)",
                                           label, node.name, name));
      }
      node.inputs.push_back(it->second);
    }
    for (const auto& name : np.output()) {
      if (name.empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      if (ids.count(name)) {
        return Status::corrupt(fmt::format("{}: value '{}' is defined twice (node '{}')", label, name, node.name));
      }
      node.outputs.push_back(value_id(name));
    }
    for (const auto& a : np.attribute()) {
      Attribute attr;
      switch (a.type()) {
        case onnx::AttributeProto_AttributeType_INT: attr.kind = Attribute::Kind::kInt; attr.i = a.i(); break;
        case onnx::AttributeProto_AttributeType_FLOAT: attr.kind = Attribute::Kind::kFloat; attr.f = a.f(); break;
        case onnx::AttributeProto_AttributeType_INTS:
          attr.kind = Attribute::Kind::kInts;
          attr.ints.assign(a.ints().begin(), a.ints().end());
          break;
        case onnx::AttributeProto_AttributeType_FLOATS:
          attr.kind = Attribute::Kind::kFloats;
          attr.floats.assign(a.floats().begin(), a.floats().end());
          break;
        case onnx::AttributeProto_AttributeType_STRING: attr.kind = Attribute::Kind::kString; attr.s = a.s(); break;
        case onnx::AttributeProto_AttributeType_TENSOR: {
          attr.kind = Attribute::Kind::kTensor;
          ESCPOD_ASSIGN_OR_RETURN(attr.t, convert_tensor(a.t(), label));
          break;
        }
        case onnx::AttributeProto_AttributeType_STRINGS:
          if (a.strings_size() == 0) continue;  // LSTM activations etc. checked by the planner
          attr.kind = Attribute::Kind::kString;
          for (int i = 0; i < a.strings_size(); ++i) attr.s += (i ? "," : "") + a.strings(i);
          break;
        default:
          return Status::unsupported(fmt::format("{}: attribute '{}' of {} node '{}' has a type "
                                                 "the engine does not read (graph/sparse/type)",
                                                 label, a.name(), node.op, node.name));
      }
      node.attrs.emplace(a.name(), std::move(attr));
    }
    g.nodes.push_back(std::move(node));
  }
  for (const auto& [op, n] : counts) g.info.op_counts.emplace_back(op, n);
  auto out_it = ids.find(graph.output(0).name());
  if (out_it == ids.end()) {
    return Status::corrupt(fmt::format("{}: output '{}' is not produced by any node", label, graph.output(0).name()));
  }
  g.output = out_it->second;
  return g;
}

}  // namespace escpod::nn::detail
