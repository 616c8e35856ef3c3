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

// The values of `t` (n of them, by its shape) into `out`, one function per stored element type.
// Each returns the number of values found when it differs from n (SIZE check), else -1.
int64_t read_floats(const onnx::TensorProto& t, int64_t n, Tensor& out) {
  const std::string& bytes = t.raw_data();
  out.dtype = DType::kFloat32;
  out.f32.resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (bytes.size() != static_cast<size_t>(n) * 4) return static_cast<int64_t>(bytes.size() / 4);
    std::memcpy(out.f32.data(), bytes.data(), bytes.size());
  } else {
    if (t.float_data_size() != n) return t.float_data_size();
    std::copy(t.float_data().begin(), t.float_data().end(), out.f32.begin());
  }
  return -1;
}

// float64 constants are narrowed to float32.
int64_t read_doubles(const onnx::TensorProto& t, int64_t n, Tensor& out) {
  const std::string& bytes = t.raw_data();
  out.dtype = DType::kFloat32;
  out.f32.resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (bytes.size() != static_cast<size_t>(n) * 8) return static_cast<int64_t>(bytes.size() / 8);
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes.data() + i * 8, 8);
      out.f32[static_cast<size_t>(i)] = static_cast<float>(v);
    }
  } else {
    if (t.double_data_size() != n) return t.double_data_size();
    for (int64_t i = 0; i < n; ++i) out.f32[static_cast<size_t>(i)] = static_cast<float>(t.double_data(static_cast<int>(i)));
  }
  return -1;
}

int64_t read_int64s(const onnx::TensorProto& t, int64_t n, Tensor& out) {
  const std::string& bytes = t.raw_data();
  out.dtype = DType::kInt64;
  out.i64.resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (bytes.size() != static_cast<size_t>(n) * 8) return static_cast<int64_t>(bytes.size() / 8);
    std::memcpy(out.i64.data(), bytes.data(), bytes.size());
  } else {
    if (t.int64_data_size() != n) return t.int64_data_size();
    std::copy(t.int64_data().begin(), t.int64_data().end(), out.i64.begin());
  }
  return -1;
}

// INT32 and BOOL, widened to int64.
int64_t read_narrow_ints(const onnx::TensorProto& t, int64_t n, Tensor& out) {
  const std::string& bytes = t.raw_data();
  const size_t width = t.data_type() == onnx::TensorProto_DataType_INT32 ? 4 : 1;
  out.dtype = DType::kInt64;
  out.i64.resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (bytes.size() != static_cast<size_t>(n) * width) return static_cast<int64_t>(bytes.size() / width);
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
    if (t.int32_data_size() != n) return t.int32_data_size();
    std::copy(t.int32_data().begin(), t.int32_data().end(), out.i64.begin());
  }
  return -1;
}

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
  int64_t got = -1;
  switch (t.data_type()) {
    case onnx::TensorProto_DataType_FLOAT: got = read_floats(t, n, out); break;
    case onnx::TensorProto_DataType_DOUBLE: got = read_doubles(t, n, out); break;
    case onnx::TensorProto_DataType_INT64: got = read_int64s(t, n, out); break;
    case onnx::TensorProto_DataType_INT32:
    case onnx::TensorProto_DataType_BOOL: got = read_narrow_ints(t, n, out); break;
    default:
      return Status::unsupported(fmt::format("{}: tensor '{}' has element type {} (float32, "
                                             "float64 constants and integers are supported)",
                                             label, t.name(), onnx::TensorProto_DataType_Name(
                                                 static_cast<onnx::TensorProto_DataType>(t.data_type()))));
  }
  if (got >= 0) {
    return Status::corrupt(fmt::format("{}: tensor '{}' has {} values, its shape needs {}", label,
                                       t.name(), got, n));
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

// One node attribute; false (without error) for an empty STRINGS attribute, which is skipped
// (LSTM activations etc. are checked by the planner).
Result<bool> convert_attribute(const onnx::AttributeProto& a, const Node& node, std::string_view label,
                               Attribute& attr) {
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
      if (a.strings_size() == 0) return false;
      attr.kind = Attribute::Kind::kString;
      for (int i = 0; i < a.strings_size(); ++i) attr.s += (i ? "," : "") + a.strings(i);
      break;
    default:
      return Status::unsupported(fmt::format("{}: attribute '{}' of {} node '{}' has a type "
                                             "the engine does not read (graph/sparse/type)",
                                             label, a.name(), node.op, node.name));
  }
  return true;
}

// Builds the Graph of one ModelProto, in file order: header, initializers, inputs and outputs,
// nodes (topologically sorted, as ONNX requires), the output value.
class OnnxImporter {
 public:
  explicit OnnxImporter(std::string_view label) : m_label(label) { m_g.info.source = std::string(label); }

  Result<Graph> run(const onnx::ModelProto& model) {
    ESCPOD_RETURN_IF_ERROR(read_header(model));
    const onnx::GraphProto& graph = model.graph();
    ESCPOD_RETURN_IF_ERROR(add_initializers(graph));
    ESCPOD_RETURN_IF_ERROR(add_inputs_and_outputs(graph));
    std::map<std::string, int> counts;
    for (int k = 0; k < graph.node_size(); ++k) {
      ESCPOD_RETURN_IF_ERROR(add_node(graph.node(k), k));
      counts[m_g.nodes.back().op] += 1;
    }
    for (const auto& [op, n] : counts) m_g.info.op_counts.emplace_back(op, n);
    auto out_it = m_ids.find(graph.output(0).name());
    if (out_it == m_ids.end()) {
      return Status::corrupt(fmt::format("{}: output '{}' is not produced by any node", m_label, graph.output(0).name()));
    }
    m_g.output = out_it->second;
    return std::move(m_g);
  }

 private:
  int value_id(const std::string& name) {
    auto it = m_ids.find(name);
    if (it != m_ids.end()) return it->second;
    int id = static_cast<int>(m_g.values.size());
    m_g.values.push_back(Value{name, std::nullopt});
    m_ids.emplace(name, id);
    return id;
  }

  Status read_header(const onnx::ModelProto& model) {
    m_g.info.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
    m_g.info.ir_version = model.ir_version();
    for (const auto& o : model.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") m_g.info.opset = o.version();
    }
    if (m_g.info.opset < kMinOpset || m_g.info.opset > kMaxOpset) {
      return Status::unsupported(fmt::format("{}: default-domain opset {} (supported: {} to {})",
                                             m_label, m_g.info.opset, kMinOpset, kMaxOpset));
    }
    return Status::ok();
  }

  Status add_initializers(const onnx::GraphProto& graph) {
    for (const auto& init : graph.initializer()) {
      ESCPOD_ASSIGN_OR_RETURN(Tensor t, convert_tensor(init, m_label));
      if (t.dtype == DType::kFloat32) m_g.info.n_parameters += t.numel();
      m_g.values[static_cast<size_t>(value_id(init.name()))].constant = std::move(t);
    }
    if (graph.sparse_initializer_size() > 0) {
      return Status::unsupported(fmt::format("{}: sparse initializers are not supported", m_label));
    }
    return Status::ok();
  }

  // One float32 runtime input (initializers listed as inputs aside) and one float32 output.
  Status add_inputs_and_outputs(const onnx::GraphProto& graph) {
    std::vector<int> runtime_inputs;
    for (const auto& in : graph.input()) {
      int id = value_id(in.name());
      if (m_g.values[static_cast<size_t>(id)].constant) continue;  // initializer listed as input
      runtime_inputs.push_back(id);
      m_g.info.inputs.push_back(convert_value_info(in));
      const auto& tt = in.type().tensor_type();
      if (!in.type().has_tensor_type() || tt.elem_type() != onnx::TensorProto_DataType_FLOAT) {
        return Status::unsupported(fmt::format("{}: input '{}' is not a float32 tensor", m_label, in.name()));
      }
    }
    for (const auto& out : graph.output()) {
      m_g.info.outputs.push_back(convert_value_info(out));
      if (out.type().tensor_type().elem_type() != onnx::TensorProto_DataType_FLOAT) {
        return Status::unsupported(fmt::format("{}: output '{}' is not a float32 tensor", m_label, out.name()));
      }
    }
    if (runtime_inputs.size() != 1 || graph.output_size() != 1) {
      return Status::unsupported(fmt::format("{}: the graph has {} inputs and {} outputs; the "
                                             "engine runs single-input, single-output models",
                                             m_label, runtime_inputs.size(), graph.output_size()));
    }
    m_g.input = runtime_inputs[0];
    return Status::ok();
  }

  // Node `k` (`np`) appended to the graph; its inputs must be defined already, its outputs not.
  Status add_node(const onnx::NodeProto& np, int k) {
    Node node;
    node.op = np.op_type();
    node.name = np.name().empty() ? fmt::format("#{}", k) : np.name();
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      return Status::unsupported(fmt::format("{}: operator {} of domain '{}' in node '{}' is not "
                                             "supported", m_label, np.op_type(), np.domain(), node.name));
    }
    for (const auto& name : np.input()) {
      if (name.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      auto it = m_ids.find(name);
      if (it == m_ids.end()) {
        return Status::corrupt(fmt::format("{}: node '{}' reads '{}', which no earlier node or "
                                           "initializer defines (graph not topologically sorted?)",
                                           m_label, node.name, name));
      }
      node.inputs.push_back(it->second);
    }
    for (const auto& name : np.output()) {
      if (name.empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      if (m_ids.count(name)) {
        return Status::corrupt(fmt::format("{}: value '{}' is defined twice (node '{}')", m_label, name, node.name));
      }
      node.outputs.push_back(value_id(name));
    }
    for (const auto& a : np.attribute()) {
      Attribute attr;
      ESCPOD_ASSIGN_OR_RETURN(const bool keep, convert_attribute(a, node, m_label, attr));
      if (keep) node.attrs.emplace(a.name(), std::move(attr));
    }
    m_g.nodes.push_back(std::move(node));
    return Status::ok();
  }

  std::string_view m_label;
  Graph m_g;
  std::unordered_map<std::string, int> m_ids;
};

}  // namespace

Result<Graph> parse_onnx(std::string_view bytes, std::string_view label) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::corrupt(fmt::format("{}: not an ONNX model (protobuf parse failed)", label));
  }
  if (!model.has_graph()) return Status::corrupt(fmt::format("{}: ONNX model has no graph", label));
  return OnnxImporter(label).run(model);
}

}  // namespace escpod::nn::detail
