// Plan building for one input shape: shape propagation with folding of shape arithmetic,
// lowering to runtime nodes, fusion (SiLU, activations and biases into conv/matmul, time
// reversals into LSTM direction), arena assignment with buffer reuse, and step creation.
#include <algorithm>

#include <fmt/format.h>

#include "nn/plan.hpp"
#include "nn/shape_ops.hpp"

namespace escpod::nn::detail {
namespace {

constexpr size_t kMaxRank = 8;
constexpr size_t kAlignFloats = 16;  // 64-byte aligned buffers

struct PlanValue {
  bool known = false;
  const Tensor* constant = nullptr;  // graph-owned or plan-owned
  Shape shape;                       // runtime shape
};

enum class RtKind { kConv, kMatMul, kLstm, kEltwise, kBinary, kCopy, kPad, kConcat, kAlias };

struct RtNode {
  RtKind kind = RtKind::kAlias;
  std::string label;             // ONNX node for messages
  std::vector<int> in;           // runtime value ids (main operand first)
  int out = -1;
  bool dead = false;
  ConvParams conv;
  MatMulParams mm;
  LstmParams lstm;
  std::vector<PostOp> post;      // kEltwise ops
  BinaryParams bin;              // a/b const pointers when constant
  StridedCopyParams copy;
  bool axis0_reverse = false;    // kCopy that fully reverses axis 0
  // kCopy from a runtime tensor: output axis i reads source axis copy_axis[i] with step
  // copy_step[i], starting at index copy_first[d] of source axis d (layout-independent form).
  std::vector<int64_t> copy_axis, copy_step, copy_first;
  PadParams pad;
  int64_t concat_axis = 0;
  std::vector<const float*> concat_consts;  // per input, null when runtime
  std::vector<Shape> concat_shapes;
};

class Planner {
 public:
  Planner(const Graph& g, Backend backend, Plan& plan) : m_g(g), m_backend(backend), m_plan(plan) {}

  Status run(std::span<const int64_t> input_shape) {
    m_values.assign(m_g.values.size(), PlanValue{});
    for (size_t i = 0; i < m_g.values.size(); ++i) {
      if (m_g.values[i].constant) {
        m_values[i].known = true;
        m_values[i].constant = &*m_g.values[i].constant;
      }
    }
    m_values[static_cast<size_t>(m_g.input)].known = true;
    m_values[static_cast<size_t>(m_g.input)].shape.assign(input_shape.begin(), input_shape.end());
    for (const Node& n : m_g.nodes) ESCPOD_RETURN_IF_ERROR(visit(n));
    const PlanValue& out = m_values[static_cast<size_t>(m_g.output)];
    if (!out.known) return Status::internal("output value never computed");
    if (out.constant) {
      // Degenerate: the whole graph is constant. Copy it out.
      if (out.constant->dtype != DType::kFloat32) return Status::unsupported("constant integer output");
      RtNode r;
      r.kind = RtKind::kCopy;
      r.label = "constant output";
      r.copy.out_shape = out.constant->shape;
      r.copy.src_strides = strides_of(out.constant->shape);
      r.copy.src_const = out.constant->f32.data();
      const int id = new_value(out.constant->shape);
      r.out = id;
      m_rt.push_back(std::move(r));
      m_output = id;
    } else {
      m_output = m_g.output;
    }
    m_plan.output_shape = m_values[static_cast<size_t>(m_output)].shape;
    fuse();
    return lower();
  }

 private:
  // ---- helpers -------------------------------------------------------------------------------
  const Tensor* const_of(int id) const {
    return id < 0 ? nullptr : m_values[static_cast<size_t>(id)].constant;
  }
  bool is_runtime(int id) const { return id >= 0 && m_values[static_cast<size_t>(id)].constant == nullptr; }
  const Shape& shape_of(int id) const { return m_values[static_cast<size_t>(id)].shape; }
  int new_value(Shape shape) {
    m_values.push_back(PlanValue{true, nullptr, std::move(shape)});
    return static_cast<int>(m_values.size()) - 1;
  }
  const Tensor* own(Tensor t) {
    m_plan_owned.push_back(std::make_unique<Tensor>(std::move(t)));
    return m_plan_owned.back().get();
  }
  Status err(const Node& n, const std::string& what) const {
    return Status::unsupported(fmt::format("{}: {}: {}", m_g.info.source, n.label(), what));
  }
  Status set_runtime(const Node& n, int out, Shape shape) {
    if (shape.size() > kMaxRank) return err(n, "tensor rank above 8");
    for (int64_t d : shape) {
      if (d < 0) return err(n, "negative dimension");
    }
    m_values[static_cast<size_t>(out)].known = true;
    m_values[static_cast<size_t>(out)].shape = std::move(shape);
    return Status::ok();
  }
  const Tensor* float_const(int id) const {
    const Tensor* t = const_of(id);
    return (t && t->dtype == DType::kFloat32) ? t : nullptr;
  }

  // ---- per-node shape propagation, folding and lowering --------------------------------------
  Status visit(const Node& n) {
    std::vector<const Tensor*> in;
    bool all_const = true;
    for (int id : n.inputs) {
      if (id >= 0 && !m_values[static_cast<size_t>(id)].known) {
        return Status::internal(fmt::format("{}: input not computed", n.label()));
      }
      in.push_back(const_of(id));
      if (id >= 0 && !const_of(id)) all_const = false;
    }
    if (n.op == "Shape") {
      const int x = n.inputs.at(0);
      const Shape& s = const_of(x) ? const_of(x)->shape : shape_of(x);
      const int64_t rank = static_cast<int64_t>(s.size());
      int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
      if (start < 0) start += rank;
      if (end < 0) end += rank;
      start = std::clamp<int64_t>(start, 0, rank);
      end = std::clamp<int64_t>(end, start, rank);
      Shape v(s.begin() + start, s.begin() + end);
      set_const(n.outputs[0], own(Tensor::ints({static_cast<int64_t>(v.size())}, v)));
      return Status::ok();
    }
    if (all_const) {
      std::vector<Tensor> out;
      ESCPOD_ASSIGN_OR_RETURN(bool folded, fold_node(n, in, out));
      if (!folded) return err(n, "cannot be evaluated on constant inputs");
      for (size_t i = 0; i < out.size() && i < n.outputs.size(); ++i) {
        if (n.outputs[i] >= 0) set_const(n.outputs[i], own(std::move(out[i])));
      }
      return Status::ok();
    }
    return lower_runtime(n);
  }

  void set_const(int id, const Tensor* t) {
    m_values[static_cast<size_t>(id)].known = true;
    m_values[static_cast<size_t>(id)].constant = t;
  }

  Status alias(const Node& n, int src, Shape shape) {
    RtNode r;
    r.kind = RtKind::kAlias;
    r.label = n.label();
    r.in = {src};
    r.out = n.outputs[0];
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, std::move(shape)));
    m_rt.push_back(std::move(r));
    return Status::ok();
  }

  Status lower_runtime(const Node& n) {
    const std::string& op = n.op;
    const int x = n.inputs.empty() ? -1 : n.inputs[0];
    auto ints_input = [&](size_t i) -> std::vector<int64_t> {
      const Tensor* t = i < n.inputs.size() ? const_of(n.inputs[i]) : nullptr;
      return t ? t->as_ints() : std::vector<int64_t>{};
    };
    auto input_is_runtime = [&](size_t i) { return i < n.inputs.size() && is_runtime(n.inputs[i]); };

    if (op == "Identity") return alias(n, x, shape_of(x));
    if (op == "Reshape") {
      if (input_is_runtime(1)) return err(n, "runtime target shape");
      ESCPOD_ASSIGN_OR_RETURN(Shape s, reshape_shape(shape_of(x), ints_input(1), n.attr_int("allowzero", 0) != 0));
      return alias(n, x, s);
    }
    if (op == "Squeeze" || op == "Unsqueeze") {
      if (input_is_runtime(1)) return err(n, "runtime axes");
      Result<Shape> s = op == "Squeeze" ? squeeze_shape(shape_of(x), ints_input(1))
                                        : unsqueeze_shape(shape_of(x), ints_input(1));
      if (!s.is_ok()) return err(n, s.status().message());
      return alias(n, x, s.value());
    }
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
      RtNode r;
      r.kind = RtKind::kEltwise;
      r.label = n.label();
      r.in = {x};
      r.out = n.outputs[0];
      PostOp p;
      p.kind = op == "Relu" ? PostOp::Kind::kRelu : op == "Sigmoid" ? PostOp::Kind::kSigmoid : PostOp::Kind::kTanh;
      r.post = {p};
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, shape_of(x)));
      m_rt.push_back(std::move(r));
      return Status::ok();
    }
    if (op == "Add" || op == "Mul") return lower_binary(n);
    if (op == "Conv" || op == "ConvTranspose") return lower_conv(n);
    if (op == "MatMul" || op == "Gemm") return lower_matmul(n);
    if (op == "LSTM") return lower_lstm(n);
    if (op == "Transpose" || op == "Slice") {
      RtNode r;
      r.kind = RtKind::kCopy;
      r.label = n.label();
      r.in = {x};
      r.out = n.outputs[0];
      Shape out;
      Status s;
      const Shape& in = shape_of(x);
      const Shape in_strides = strides_of(in);
      if (op == "Transpose") {
        s = transpose_geometry(in, n.attr_ints("perm"), out, r.copy.src_strides);
      } else {
        for (size_t i = 1; i < n.inputs.size(); ++i) {
          if (input_is_runtime(i)) return err(n, "runtime slice arguments");
        }
        s = slice_geometry(in, ints_input(1), ints_input(2), ints_input(3), ints_input(4), out,
                           r.copy.src_strides, r.copy.src_start, r.axis0_reverse);
      }
      if (!s.is_ok()) return err(n, s.message());
      // Layout-independent form: which source axis (and step) each output axis walks.
      r.copy_first.assign(in.size(), 0);
      int64_t rem = r.copy.src_start;
      for (size_t d = 0; d < in.size(); ++d) {
        r.copy_first[d] = rem / in_strides[d];
        rem %= in_strides[d];
      }
      for (size_t i = 0; i < out.size(); ++i) {
        const int64_t st = r.copy.src_strides[i];
        int64_t axis = out[i] == 1 ? 0 : -1, step = 0;  // a length-1 axis walks nothing
        for (size_t d = 0; d < in.size() && axis < 0; ++d) {
          if (st != 0 && in[d] > 1 && st % in_strides[d] == 0 && std::llabs(st / in_strides[d]) < in[d]) {
            axis = static_cast<int64_t>(d);
            step = st / in_strides[d];
            break;
          }
        }
        r.copy_axis.push_back(axis);
        r.copy_step.push_back(step);
      }
      r.copy.out_shape = out;
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out));
      m_rt.push_back(std::move(r));
      return Status::ok();
    }
    if (op == "Pad") {
      const std::string mode = n.attr_string("mode", "constant");
      if (mode != "constant") return err(n, fmt::format("pad mode '{}' (only constant)", mode));
      if (input_is_runtime(1) || input_is_runtime(2)) return err(n, "runtime pads");
      const std::vector<int64_t> pads = ints_input(1);
      const Shape& in = shape_of(x);
      if (pads.size() != 2 * in.size()) return err(n, "pads length is not twice the rank");
      float value = 0.0f;
      if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
        const Tensor* v = const_of(n.inputs[2]);
        if (!v || v->numel() != 1) return err(n, "constant_value must be a scalar");
        value = v->dtype == DType::kFloat32 ? v->f32[0] : static_cast<float>(v->i64[0]);
      }
      RtNode r;
      r.kind = RtKind::kPad;
      r.label = n.label();
      r.in = {x};
      r.out = n.outputs[0];
      r.pad.in_shape = in;
      r.pad.value = value;
      Shape out = in;
      for (size_t d = 0; d < in.size(); ++d) {
        const int64_t b = pads[d], e = pads[d + in.size()];
        if (b < 0 || e < 0) return err(n, "negative pads (cropping)");
        out[d] += b + e;
        r.pad.pads_begin.push_back(b);
      }
      r.pad.out_shape = out;
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out));
      m_rt.push_back(std::move(r));
      return Status::ok();
    }
    if (op == "Concat") {
      RtNode r;
      r.kind = RtKind::kConcat;
      r.label = n.label();
      r.out = n.outputs[0];
      const Shape& first = const_of(x) ? const_of(x)->shape : shape_of(x);
      const int64_t axis = norm_axis(n.attr_int("axis", 0), static_cast<int64_t>(first.size()));
      if (axis < 0) return err(n, "bad axis");
      r.concat_axis = axis;
      Shape out = first;
      out[static_cast<size_t>(axis)] = 0;
      for (int id : n.inputs) {
        const Tensor* c = float_const(id);
        if (const_of(id) && !c) return err(n, "integer constant joined to a float tensor");
        const Shape& s = c ? c->shape : shape_of(id);
        if (s.size() != first.size()) return err(n, "inputs differ in rank");
        for (size_t d = 0; d < s.size(); ++d) {
          if (d != static_cast<size_t>(axis) && s[d] != first[d]) return err(n, "inputs differ in shape");
        }
        out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
        r.in.push_back(c ? -1 : id);
        r.concat_consts.push_back(c ? c->f32.data() : nullptr);
        r.concat_shapes.push_back(s);
      }
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out));
      m_rt.push_back(std::move(r));
      return Status::ok();
    }
    if (op == "BatchNormalization") {
      // Not after a conv (those were folded at load): y = x * s + b per channel (axis 1).
      const Shape& in = shape_of(x);
      if (in.size() < 2) return err(n, "rank below 2");
      const Tensor* p[4];
      for (int i = 0; i < 4; ++i) {
        p[i] = float_const(n.inputs.at(static_cast<size_t>(i) + 1));
        if (!p[i] || p[i]->numel() != in[1]) return err(n, "parameters must be constant per-channel vectors");
      }
      const float eps = n.attr_float("epsilon", 1e-5f);
      Shape pshape(in.size(), 1);
      pshape[1] = in[1];
      std::vector<float> scale, shift;
      for (int64_t c = 0; c < in[1]; ++c) {
        const double s = p[0]->f32[static_cast<size_t>(c)] / std::sqrt(static_cast<double>(p[3]->f32[static_cast<size_t>(c)]) + eps);
        scale.push_back(static_cast<float>(s));
        shift.push_back(static_cast<float>(p[1]->f32[static_cast<size_t>(c)] - p[2]->f32[static_cast<size_t>(c)] * s));
      }
      const Tensor* sc = own(Tensor::floats(pshape, scale));
      const Tensor* sh = own(Tensor::floats(pshape, shift));
      const int mid = new_value(in);
      RtNode a;
      a.kind = RtKind::kBinary;
      a.label = n.label();
      a.in = {x};
      a.out = mid;
      a.bin.kind = BinaryParams::Kind::kMul;
      a.bin.out_shape = in;
      a.bin.a_shape = in;
      a.bin.b_shape = pshape;
      a.bin.b_const = sc->f32.data();
      RtNode b = a;
      b.in = {mid};
      b.out = n.outputs[0];
      b.bin.kind = BinaryParams::Kind::kAdd;
      b.bin.b_const = sh->f32.data();
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, b.out, in));
      m_rt.push_back(std::move(a));
      m_rt.push_back(std::move(b));
      return Status::ok();
    }
    return err(n, "operator not supported on runtime tensors");
  }

  Status lower_binary(const Node& n) {
    const int a = n.inputs.at(0), b = n.inputs.at(1);
    const Tensor* ca = float_const(a);
    const Tensor* cb = float_const(b);
    if ((const_of(a) && !ca) || (const_of(b) && !cb)) return err(n, "integer operand on a float tensor");
    const bool is_add = n.op == "Add";
    // Scalar constant: an element-wise linear op.
    const Tensor* scalar = (ca && ca->numel() == 1) ? ca : (cb && cb->numel() == 1) ? cb : nullptr;
    const int rt = ca ? b : a;
    if (scalar && (ca == nullptr || cb == nullptr)) {
      Shape out_shape = shape_of(rt);
      ESCPOD_ASSIGN_OR_RETURN(out_shape, broadcast_shape(out_shape, scalar->shape));
      if (out_shape != shape_of(rt)) return err(n, "scalar broadcast grows the tensor");
      RtNode r;
      r.kind = RtKind::kEltwise;
      r.label = n.label();
      r.in = {rt};
      r.out = n.outputs[0];
      PostOp p;
      p.kind = PostOp::Kind::kLinear;
      p.alpha = is_add ? 1.0f : scalar->f32[0];
      p.beta = is_add ? scalar->f32[0] : 0.0f;
      r.post = {p};
      ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out_shape));
      m_rt.push_back(std::move(r));
      return Status::ok();
    }
    const Shape sa = ca ? ca->shape : shape_of(a);
    const Shape sb = cb ? cb->shape : shape_of(b);
    Result<Shape> out = broadcast_shape(sa, sb);
    if (!out.is_ok()) return err(n, out.status().message());
    RtNode r;
    r.kind = RtKind::kBinary;
    r.label = n.label();
    r.out = n.outputs[0];
    r.bin.kind = is_add ? BinaryParams::Kind::kAdd : BinaryParams::Kind::kMul;
    r.bin.out_shape = out.value();
    r.bin.a_shape = expand_rank(sa, out.value().size());
    r.bin.b_shape = expand_rank(sb, out.value().size());
    r.bin.a_const = ca ? ca->f32.data() : nullptr;
    r.bin.b_const = cb ? cb->f32.data() : nullptr;
    r.in = {ca ? -1 : a, cb ? -1 : b};
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out.value()));
    m_rt.push_back(std::move(r));
    return Status::ok();
  }

  Status lower_conv(const Node& n) {
    const bool transposed = n.op == "ConvTranspose";
    const int x = n.inputs.at(0);
    const Shape& in = shape_of(x);
    const Tensor* w = float_const(n.inputs.size() > 1 ? n.inputs[1] : -1);
    const Tensor* b = n.inputs.size() > 2 ? float_const(n.inputs[2]) : nullptr;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && !b) return err(n, "bias must be a constant");
    if (!w) return err(n, "weights must be a constant initializer");
    if (in.size() != 3 || w->shape.size() != 3) {
      return err(n, fmt::format("only 1-D convolutions ([N, C, W]); input {}, weights {}", shape_str(in), shape_str(w->shape)));
    }
    if (n.attr_int("group", 1) != 1) return err(n, fmt::format("group {} (only 1)", n.attr_int("group", 1)));
    ConvParams p;
    p.transposed = transposed;
    p.n = in[0];
    p.ic = in[1];
    p.iw = in[2];
    p.k = w->shape[2];
    p.oc = transposed ? w->shape[1] : w->shape[0];
    const int64_t w_ic = transposed ? w->shape[0] : w->shape[1];
    if (w_ic != p.ic) return err(n, fmt::format("input has {} channels, weights expect {}", p.ic, w_ic));
    if (b && b->numel() != p.oc) return err(n, "bias size differs from output channels");
    const auto ks = n.attr_ints("kernel_shape");
    if (!ks.empty() && (ks.size() != 1 || ks[0] != p.k)) return err(n, "kernel_shape differs from the weights");
    const auto strides = n.attr_ints("strides");
    const auto dil = n.attr_ints("dilations");
    const auto pads = n.attr_ints("pads");
    p.stride = strides.empty() ? 1 : strides[0];
    p.dilation = dil.empty() ? 1 : dil[0];
    if (p.stride < 1 || p.dilation < 1) return err(n, "stride and dilation must be positive");
    const int64_t span = (p.k - 1) * p.dilation + 1;
    const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
    if (auto_pad == "NOTSET") {
      p.pad_l = pads.empty() ? 0 : pads[0];
      p.pad_r = pads.size() > 1 ? pads[1] : 0;
    } else if (auto_pad == "VALID") {
      p.pad_l = p.pad_r = 0;
    } else if (!transposed && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
      const int64_t out = (p.iw + p.stride - 1) / p.stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * p.stride + span - p.iw);
      p.pad_l = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.pad_r = total - p.pad_l;
    } else {
      return err(n, fmt::format("auto_pad {}", auto_pad));
    }
    if (p.pad_l < 0 || p.pad_r < 0) return err(n, "negative pads");
    if (transposed) {
      if (n.has("output_shape")) return err(n, "output_shape attribute (give pads instead)");
      const auto opad = n.attr_ints("output_padding");
      const int64_t op = opad.empty() ? 0 : opad[0];
      if (op != 0) return err(n, "output_padding other than 0");
      p.ow = (p.iw - 1) * p.stride + span - p.pad_l - p.pad_r;
    } else {
      p.ow = (p.iw + p.pad_l + p.pad_r - span) / p.stride + 1;
    }
    if (p.ow <= 0) return err(n, fmt::format("input length {} gives no output", p.iw));
    p.weights = w->f32.data();
    p.bias = b ? b->f32.data() : nullptr;
    RtNode r;
    r.kind = RtKind::kConv;
    r.label = n.label();
    r.in = {x};
    r.out = n.outputs[0];
    r.conv = p;
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, {p.n, p.oc, p.ow}));
    m_rt.push_back(std::move(r));
    return Status::ok();
  }

  Status lower_matmul(const Node& n) {
    const int a = n.inputs.at(0);
    const Tensor* bw = float_const(n.inputs.at(1));
    if (!bw || bw->shape.size() != 2) return err(n, "the second operand must be a constant matrix");
    if (!is_runtime(a)) return err(n, "constant first operand");
    const Shape& in = shape_of(a);
    MatMulParams p;
    Shape out;
    if (n.op == "MatMul") {
      if (in.size() < 2) return err(n, "first operand of rank below 2");
      p.k = in.back();
      if (bw->shape[0] != p.k) return err(n, fmt::format("inner sizes {} and {} differ", p.k, bw->shape[0]));
      p.n = bw->shape[1];
      p.m = numel(in) / p.k;
      p.weights = bw->f32.data();
      out = in;
      out.back() = p.n;
    } else {
      if (in.size() != 2) return err(n, "Gemm on a non-matrix");
      if (n.attr_int("transA", 0) != 0) return err(n, "transA=1");
      const bool tb = n.attr_int("transB", 0) != 0;
      const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
      p.m = in[0];
      p.k = in[1];
      p.n = tb ? bw->shape[0] : bw->shape[1];
      if ((tb ? bw->shape[1] : bw->shape[0]) != p.k) return err(n, "inner sizes differ");
      std::vector<float> wk(static_cast<size_t>(p.k * p.n));
      for (int64_t kk = 0; kk < p.k; ++kk) {
        for (int64_t j = 0; j < p.n; ++j) {
          wk[static_cast<size_t>(kk * p.n + j)] = alpha * (tb ? bw->f32[static_cast<size_t>(j * p.k + kk)] : bw->f32[static_cast<size_t>(kk * p.n + j)]);
        }
      }
      p.weights = own(Tensor::floats({p.k, p.n}, std::move(wk)))->f32.data();
      if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
        const Tensor* c = float_const(n.inputs[2]);
        if (!c) return err(n, "C must be a constant");
        std::vector<float> bias(static_cast<size_t>(p.n));
        if (c->numel() == 1) {
          std::fill(bias.begin(), bias.end(), beta * c->f32[0]);
        } else if (c->numel() == p.n) {
          for (int64_t j = 0; j < p.n; ++j) bias[static_cast<size_t>(j)] = beta * c->f32[static_cast<size_t>(j)];
        } else {
          return err(n, "C must be a scalar or a row of N values");
        }
        p.bias = own(Tensor::floats({p.n}, std::move(bias)))->f32.data();
      }
      out = {p.m, p.n};
    }
    RtNode r;
    r.kind = RtKind::kMatMul;
    r.label = n.label();
    r.in = {a};
    r.out = n.outputs[0];
    r.mm = p;
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, out));
    m_rt.push_back(std::move(r));
    return Status::ok();
  }

  Status lower_lstm(const Node& n) {
    const int x = n.inputs.at(0);
    const Shape& in = shape_of(x);
    if (in.size() != 3) return err(n, "input must be [T, N, C]");
    const std::string dir = n.attr_string("direction", "forward");
    if (dir != "forward" && dir != "reverse") return err(n, fmt::format("direction '{}'", dir));
    if (n.attr_int("layout", 0) != 0) return err(n, "layout=1 (batch-major)");
    if (n.attr_int("input_forget", 0) != 0) return err(n, "input_forget=1");
    if (n.has("clip")) return err(n, "cell clipping");
    if (n.has("activations")) {
      std::string acts = n.attr_string("activations", "");
      std::transform(acts.begin(), acts.end(), acts.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (acts != "sigmoid,tanh,tanh") return err(n, fmt::format("activations {}", acts));
    }
    const Tensor* w = float_const(n.inputs.at(1));
    const Tensor* r = float_const(n.inputs.at(2));
    if (!w || !r) return err(n, "W and R must be constant");
    const int64_t h = n.attr_int("hidden_size", r->shape.size() == 3 ? r->shape[2] : 0);
    if (w->shape != Shape{1, 4 * h, in[2]} || r->shape != Shape{1, 4 * h, h}) {
      return err(n, fmt::format("W {} / R {} do not match hidden {} and input {}", shape_str(w->shape), shape_str(r->shape), h, shape_str(in)));
    }
    std::vector<float> bias(static_cast<size_t>(4 * h), 0.0f);
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) {
      const Tensor* b = float_const(n.inputs[3]);
      if (!b || b->numel() != 8 * h) return err(n, "B must be a constant [1, 8H]");
      for (int64_t i = 0; i < 4 * h; ++i) bias[static_cast<size_t>(i)] = b->f32[static_cast<size_t>(i)] + b->f32[static_cast<size_t>(4 * h + i)];
    }
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      const Tensor* sl = const_of(n.inputs[4]);
      if (!sl) return err(n, "runtime sequence_lens");
      for (int64_t v : sl->as_ints()) {
        if (v != in[0]) return err(n, "sequence_lens shorter than the sequence");
      }
    }
    for (size_t i = 5; i <= 6 && i < n.inputs.size(); ++i) {
      if (n.inputs[i] < 0) continue;
      const Tensor* s = float_const(n.inputs[i]);
      if (!s) return err(n, "non-constant initial state");
      for (float v : s->f32) {
        if (v != 0.0f) return err(n, "non-zero initial state");
      }
    }
    if (n.inputs.size() > 7 && n.inputs[7] >= 0) return err(n, "peephole weights");
    for (size_t i = 1; i < n.outputs.size(); ++i) {
      if (n.outputs[i] >= 0 && graph_uses(n.outputs[i])) return err(n, "Y_h / Y_c outputs are used");
    }
    LstmParams p;
    p.t = in[0];
    p.n = in[1];
    p.c = in[2];
    p.h = h;
    p.reverse = dir == "reverse";
    p.w = w->f32.data();
    p.r = r->f32.data();
    p.bias = own(Tensor::floats({4 * h}, std::move(bias)))->f32.data();
    RtNode rt;
    rt.kind = RtKind::kLstm;
    rt.label = n.label();
    rt.in = {x};
    rt.out = n.outputs[0];
    rt.lstm = p;
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, rt.out, {p.t, 1, p.n, p.h}));
    m_rt.push_back(std::move(rt));
    return Status::ok();
  }

  bool graph_uses(int id) const {
    if (id == m_g.output) return true;
    for (const Node& n : m_g.nodes) {
      for (int i : n.inputs) if (i == id) return true;
    }
    return false;
  }

  // ---- fusion ----------------------------------------------------------------------------------
  std::vector<int> consumers(int id) const {
    std::vector<int> c;
    for (size_t i = 0; i < m_rt.size(); ++i) {
      if (m_rt[i].dead) continue;
      for (int v : m_rt[i].in) {
        if (v == id) {
          c.push_back(static_cast<int>(i));
          break;
        }
      }
    }
    return c;
  }
  int producer(int id) const {
    for (size_t i = 0; i < m_rt.size(); ++i) {
      if (!m_rt[i].dead && m_rt[i].out == id) return static_cast<int>(i);
    }
    return -1;
  }
  bool single_use(int id) const { return id != m_output && consumers(id).size() == 1; }

  static bool accepts_post_ops(const RtNode& r) {
    return r.kind == RtKind::kConv || r.kind == RtKind::kMatMul || r.kind == RtKind::kEltwise ||
           r.kind == RtKind::kBinary;
  }
  static std::vector<PostOp>& post_ops_of(RtNode& r) {
    switch (r.kind) {
      case RtKind::kConv: return r.conv.post_ops;
      case RtKind::kMatMul: return r.mm.post_ops;
      case RtKind::kBinary: return r.bin.post_ops;
      default: return r.post;
    }
  }

  void fuse() {
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t i = 0; i < m_rt.size() && !changed; ++i) {
        RtNode& r = m_rt[i];
        if (r.dead) continue;
        // x * sigmoid(x) -> silu(x)
        if (r.kind == RtKind::kBinary && r.bin.kind == BinaryParams::Kind::kMul && r.in.size() == 2 &&
            r.in[0] >= 0 && r.in[1] >= 0 && r.bin.post_ops.empty()) {
          for (int side = 0; side < 2 && !changed; ++side) {
            const int s = r.in[static_cast<size_t>(side)], other = r.in[static_cast<size_t>(1 - side)];
            const int pi = producer(s);
            if (pi < 0) continue;
            RtNode& sg = m_rt[static_cast<size_t>(pi)];
            if (sg.kind == RtKind::kEltwise && sg.post.size() == 1 && sg.post[0].kind == PostOp::Kind::kSigmoid &&
                sg.in[0] == other && single_use(s)) {
              sg.dead = true;
              r.kind = RtKind::kEltwise;
              r.in = {other};
              r.post = {PostOp{PostOp::Kind::kSilu, 1.0f, 0.0f}};
              changed = true;
            }
          }
          if (changed) break;
        }
        // Constant bias row after a MatMul, per-channel bias after a Conv.
        if (r.kind == RtKind::kBinary && r.bin.kind == BinaryParams::Kind::kAdd && r.bin.post_ops.empty()) {
          const bool a_rt = r.in[0] >= 0;
          const int src = a_rt ? r.in[0] : r.in[1];
          const float* c = a_rt ? r.bin.b_const : r.bin.a_const;
          const Shape& cs = a_rt ? r.bin.b_shape : r.bin.a_shape;
          const int pi = c ? producer(src) : -1;
          if (pi >= 0 && single_use(src)) {
            RtNode& p = m_rt[static_cast<size_t>(pi)];
            if (p.kind == RtKind::kMatMul && p.mm.post_ops.empty() && numel(cs) == p.mm.n && cs.back() == p.mm.n) {
              p.mm.bias = add_vectors(p.mm.bias, c, p.mm.n);
              p.out = r.out;
              r.dead = true;
              changed = true;
              break;
            }
            if (p.kind == RtKind::kConv && p.conv.post_ops.empty() && cs.size() == 3 && numel(cs) == p.conv.oc &&
                cs[1] == p.conv.oc) {
              p.conv.bias = add_vectors(p.conv.bias, c, p.conv.oc);
              p.out = r.out;
              r.dead = true;
              changed = true;
              break;
            }
          }
        }
        // Element-wise ops into their producer.
        if (r.kind == RtKind::kEltwise) {
          const int pi = producer(r.in[0]);
          if (pi >= 0 && single_use(r.in[0]) && accepts_post_ops(m_rt[static_cast<size_t>(pi)])) {
            RtNode& p = m_rt[static_cast<size_t>(pi)];
            auto& ops = post_ops_of(p);
            ops.insert(ops.end(), r.post.begin(), r.post.end());
            p.out = r.out;
            r.dead = true;
            changed = true;
            break;
          }
        }
        // flip -> LSTM -> (squeeze) -> flip  ==>  LSTM in the other direction.
        if (r.kind == RtKind::kLstm) {
          const int pi = producer(r.in[0]);
          if (pi >= 0 && m_rt[static_cast<size_t>(pi)].kind == RtKind::kCopy &&
              m_rt[static_cast<size_t>(pi)].axis0_reverse && single_use(r.in[0])) {
            int tail = r.out;
            int alias_idx = -1;
            std::vector<int> c = consumers(tail);
            if (c.size() == 1 && m_rt[static_cast<size_t>(c[0])].kind == RtKind::kAlias && tail != m_output) {
              alias_idx = c[0];
              tail = m_rt[static_cast<size_t>(c[0])].out;
              c = consumers(tail);
            }
            if (c.size() == 1 && tail != m_output && m_rt[static_cast<size_t>(c[0])].kind == RtKind::kCopy &&
                m_rt[static_cast<size_t>(c[0])].axis0_reverse) {
              RtNode& pre = m_rt[static_cast<size_t>(pi)];
              RtNode& post = m_rt[static_cast<size_t>(c[0])];
              r.in[0] = pre.in[0];
              r.lstm.reverse = !r.lstm.reverse;
              pre.dead = true;
              r.out = post.out;
              post.dead = true;
              if (alias_idx >= 0) m_rt[static_cast<size_t>(alias_idx)].dead = true;
              changed = true;
              break;
            }
          }
        }
      }
    }
  }

  const float* add_vectors(const float* a, const float* b, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (a ? a[i] : 0.0f) + b[i];
    return own(Tensor::floats({n}, std::move(v)))->f32.data();
  }

  // ---- arena assignment and step creation ------------------------------------------------------
  // Channels-last activations (optimised backend): every convolution writes [N, W, C], the
  // layout oneDNN's direct (brgemm) kernels want; convolutions and strided copies read either
  // layout, and any other consumer (or the graph output) gets a converting copy inserted.
  // A 1-channel input is the same bytes in both layouts.
  void assign_layouts() {
    m_nwc.assign(m_values.size(), false);
    if (m_backend != Backend::kOptimised) return;
    std::vector<RtNode> out;
    std::vector<int> to_plain(m_values.size(), -1), to_nwc(m_values.size(), -1);
    auto grow = [&] {
      m_nwc.resize(m_values.size(), false);
      to_plain.resize(m_values.size(), -1);
      to_nwc.resize(m_values.size(), -1);
    };
    auto nwc_to_plain = [&](int v) {
      if (to_plain[static_cast<size_t>(v)] >= 0) return to_plain[static_cast<size_t>(v)];
      const Shape sh = shape_of(v);
      RtNode c;
      c.kind = RtKind::kCopy;
      c.label = "layout nwc->ncw";
      c.in = {v};
      c.copy.out_shape = sh;
      c.copy.src_strides = strides_of(sh);
      c.copy_axis = {0, 1, 2};
      c.copy_step = {1, 1, 1};
      c.copy_first = {0, 0, 0};
      c.out = new_value(sh);
      grow();
      to_plain[static_cast<size_t>(v)] = c.out;
      out.push_back(std::move(c));
      return out.back().out;
    };
    auto plain_to_nwc = [&](int v) {
      if (to_nwc[static_cast<size_t>(v)] >= 0) return to_nwc[static_cast<size_t>(v)];
      const Shape sh = shape_of(v);
      RtNode c;
      c.kind = RtKind::kCopy;
      c.label = "layout ncw->nwc";
      c.in = {v};
      c.copy.out_shape = {sh[0], sh[2], sh[1]};
      c.copy.src_strides = {sh[1] * sh[2], 1, sh[2]};
      c.out = new_value(sh);
      grow();
      m_nwc[static_cast<size_t>(c.out)] = true;
      to_nwc[static_cast<size_t>(v)] = c.out;
      out.push_back(std::move(c));
      return out.back().out;
    };
    for (RtNode& r : m_rt) {
      if (r.dead) continue;
      // Element-wise nodes over same-shape operands do not care about layout: when all their
      // runtime inputs are channels-last, so is their output.
      const bool flat = (r.kind == RtKind::kEltwise) ||
                        (r.kind == RtKind::kBinary && r.in[0] >= 0 && r.in[1] >= 0 &&
                         r.bin.a_shape == r.bin.out_shape && r.bin.b_shape == r.bin.out_shape);
      if (flat && shape_of(r.out).size() == 3) {
        bool all = true;
        for (int v : r.in) all = all && v >= 0 && m_nwc[static_cast<size_t>(v)];
        if (all) {
          m_nwc[static_cast<size_t>(r.out)] = true;
          out.push_back(std::move(r));
          continue;
        }
      }
      for (int& v : r.in) {
        if (v < 0) continue;
        const bool copy_reads_any = r.kind == RtKind::kCopy && !r.copy_axis.empty() &&
                                    std::find(r.copy_axis.begin(), r.copy_axis.end(), -1) == r.copy_axis.end();
        if (m_nwc[static_cast<size_t>(v)] && r.kind != RtKind::kConv && !copy_reads_any) v = nwc_to_plain(v);
        if (!m_nwc[static_cast<size_t>(v)] && r.kind == RtKind::kConv && r.conv.ic > 1) v = plain_to_nwc(v);
      }
      if (r.kind == RtKind::kConv) m_nwc[static_cast<size_t>(r.out)] = true;
      out.push_back(std::move(r));
    }
    if (m_nwc[static_cast<size_t>(m_output)]) m_output = nwc_to_plain(m_output);
    m_rt = std::move(out);
  }

  Status lower() {
    assign_layouts();
    m_rt.reserve(m_rt.size() + 4);
    std::vector<RtNode*> order;
    for (RtNode& r : m_rt) {
      if (!r.dead) order.push_back(&r);
    }
    // Storage root of each runtime value (aliases share their source's storage).
    std::vector<int> root(m_values.size());
    for (size_t i = 0; i < root.size(); ++i) root[i] = static_cast<int>(i);
    for (RtNode* r : order) {
      if (r->kind == RtKind::kAlias) root[static_cast<size_t>(r->out)] = root[static_cast<size_t>(r->in[0])];
    }
    const int input_root = m_g.input;
    const int output_root = root[static_cast<size_t>(m_output)];
    // The output must be written by a step: when it is the input itself, add a copy.
    if (output_root == input_root) {
      RtNode copy;
      copy.kind = RtKind::kCopy;
      copy.label = "output copy";
      copy.in = {m_output};
      copy.copy.out_shape = shape_of(m_output);
      copy.copy.src_strides = strides_of(copy.copy.out_shape);
      copy.out = new_value(shape_of(m_output));
      root.push_back(copy.out);
      m_nwc.push_back(false);
      m_rt.push_back(std::move(copy));
      order.push_back(&m_rt.back());
      // m_rt may have reallocated: rebuild the order.
      order.clear();
      for (RtNode& r : m_rt) {
        if (!r.dead) order.push_back(&r);
      }
      m_output = m_rt.back().out;
    }
    const int out_root = root[static_cast<size_t>(m_output)];

    auto is_nwc = [&](int v) { return m_nwc[static_cast<size_t>(root[static_cast<size_t>(v)])]; };

    // Last use (step index) of each root.
    std::vector<int> last_use(m_values.size(), -1);
    for (size_t s = 0; s < order.size(); ++s) {
      for (int v : order[s]->in) {
        if (v >= 0) last_use[static_cast<size_t>(root[static_cast<size_t>(v)])] = static_cast<int>(s);
      }
    }
    // First-fit allocation over the arena.
    struct Block {
      size_t offset, size;
      int root;
    };
    std::vector<Block> live;
    std::vector<Loc> loc(m_values.size());
    size_t arena = 0;
    loc[static_cast<size_t>(input_root)] = Loc{Loc::Kind::kInput, 0};
    loc[static_cast<size_t>(out_root)] = Loc{Loc::Kind::kOutput, 0};
    for (size_t s = 0; s < order.size(); ++s) {
      RtNode* r = order[s];
      if (r->kind == RtKind::kAlias) continue;
      // Free blocks whose last use was before this step.
      live.erase(std::remove_if(live.begin(), live.end(), [&](const Block& b) {
        return last_use[static_cast<size_t>(b.root)] < static_cast<int>(s);
      }), live.end());
      const int v = r->out;
      const int rv = root[static_cast<size_t>(v)];
      if (rv == out_root) continue;
      const size_t need = (static_cast<size_t>(numel(shape_of(v))) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
      std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
      size_t at = 0;
      for (const Block& b : live) {
        if (at + need <= b.offset) break;
        at = std::max(at, b.offset + b.size);
      }
      live.push_back(Block{at, need, rv});
      loc[static_cast<size_t>(rv)] = Loc{Loc::Kind::kArena, at};
      arena = std::max(arena, at + need);
    }
    m_plan.arena_floats = arena;
    auto L = [&](int v) { return loc[static_cast<size_t>(root[static_cast<size_t>(v)])]; };

    for (RtNode* r : order) {
      if (r->kind == RtKind::kAlias) continue;
      std::unique_ptr<Step> step;
      std::string error;
      std::string text;
      const Shape& oshape = shape_of(r->out);
      switch (r->kind) {
        case RtKind::kConv: {
          ConvParams p = r->conv;
          p.src = L(r->in[0]);
          p.dst = L(r->out);
          p.dst_nwc = is_nwc(r->out);
          p.src_nwc = is_nwc(r->in[0]) || (p.ic == 1 && p.dst_nwc);
          text = fmt::format("{}{} {}->{} k{} s{} d{} p{},{}", p.transposed ? "conv_transpose1d" : "conv1d",
                             describe_post_ops(p.post_ops), shape_str(shape_of(r->in[0])), shape_str(oshape),
                             p.k, p.stride, p.dilation, p.pad_l, p.pad_r);
          const double flops = 2.0 * static_cast<double>(p.n) * static_cast<double>(p.oc) * static_cast<double>(p.ic) * static_cast<double>(p.k) *
                               static_cast<double>(p.transposed ? p.iw : p.ow);
          step = m_backend == Backend::kReference ? make_ref_conv(p) : make_dnnl_conv(p, &error);
          if (step) step->flops = flops;
          break;
        }
        case RtKind::kMatMul: {
          MatMulParams p = r->mm;
          p.src = L(r->in[0]);
          p.dst = L(r->out);
          text = fmt::format("matmul{} [{}x{}]x[{}x{}]", describe_post_ops(p.post_ops), p.m, p.k, p.k, p.n);
          step = m_backend == Backend::kReference ? make_ref_matmul(p) : make_dnnl_matmul(p, &error);
          if (step) step->flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.k) * static_cast<double>(p.n);
          break;
        }
        case RtKind::kLstm: {
          LstmParams p = r->lstm;
          p.src = L(r->in[0]);
          p.dst = L(r->out);
          text = fmt::format("lstm{} T{} N{} C{} H{}", p.reverse ? "(reverse)" : "", p.t, p.n, p.c, p.h);
          step = m_backend == Backend::kReference ? make_ref_lstm(p) : make_dnnl_lstm(p, &error);
          if (step) step->flops = 2.0 * static_cast<double>(p.t) * static_cast<double>(p.n) * 4.0 * static_cast<double>(p.h) * static_cast<double>(p.c + p.h);
          break;
        }
        case RtKind::kEltwise:
          text = fmt::format("eltwise{} {}", describe_post_ops(r->post), shape_str(oshape));
          step = make_eltwise(numel(oshape), r->post, L(r->in[0]), L(r->out));
          break;
        case RtKind::kBinary: {
          BinaryParams p = r->bin;
          if (r->in[0] >= 0) p.a = L(r->in[0]);
          if (r->in[1] >= 0) p.b = L(r->in[1]);
          p.dst = L(r->out);
          text = fmt::format("{}{} {}", p.kind == BinaryParams::Kind::kAdd ? "add" : "mul", describe_post_ops(p.post_ops), shape_str(oshape));
          step = make_binary(std::move(p));
          break;
        }
        case RtKind::kCopy: {
          StridedCopyParams p = r->copy;
          if (!r->in.empty()) p.src = L(r->in[0]);
          if (!r->in.empty() && r->in[0] >= 0 && is_nwc(r->in[0])) {
            // Source stored [N, W, C]: physical strides of the logical axes N, C, W.
            const Shape& in = shape_of(r->in[0]);
            const Shape phys{in[1] * in[2], 1, in[1]};
            p.src_start = 0;
            for (size_t d = 0; d < 3; ++d) p.src_start += r->copy_first[d] * phys[d];
            for (size_t i = 0; i < p.src_strides.size(); ++i) {
              p.src_strides[i] = r->copy_step[i] * phys[static_cast<size_t>(r->copy_axis[i])];
            }
          }
          p.dst = L(r->out);
          text = fmt::format("copy {}", shape_str(oshape));
          step = make_strided_copy(std::move(p));
          break;
        }
        case RtKind::kPad: {
          PadParams p = r->pad;
          p.src = L(r->in[0]);
          p.dst = L(r->out);
          text = fmt::format("pad {}->{}", shape_str(p.in_shape), shape_str(p.out_shape));
          step = make_pad(std::move(p));
          break;
        }
        case RtKind::kConcat: {
          // One strided copy per input into its slab of the output.
          const Shape ost = strides_of(oshape);
          const size_t axis = static_cast<size_t>(r->concat_axis);
          int64_t at = 0;
          for (size_t i = 0; i < r->in.size(); ++i) {
            const Shape& s = r->concat_shapes[i];
            // Gather form: destination is a sub-box; express as copy from source into a view.
            // Build as: for the output slab, out strides differ; do it with a pad-like step.
            PadParams p;
            p.in_shape = s;
            p.out_shape = oshape;
            p.pads_begin.assign(s.size(), 0);
            p.pads_begin[axis] = at;
            p.dst = L(r->out);
            at += s[axis];
            if (r->concat_consts[i]) {
              return Status::unsupported(fmt::format("{}: {}: concatenating constants with runtime tensors", m_g.info.source, r->label));
            }
            p.src = L(r->in[i]);
            auto st = make_concat_part(std::move(p));
            st->text = fmt::format("concat part {} {}", i, shape_str(s));
            m_plan.steps.push_back(std::move(st));
          }
          (void)ost;
          continue;
        }
        case RtKind::kAlias: break;
      }
      if (!step) {
        return Status::unsupported(fmt::format("{}: {}: oneDNN could not build a kernel: {}", m_g.info.source, r->label, error));
      }
      step->text = text;
      m_plan.flops += step->flops;
      m_plan.scratch_bytes = std::max(m_plan.scratch_bytes, step->scratch_bytes());
      if (r->kind == RtKind::kConv || r->kind == RtKind::kMatMul || r->kind == RtKind::kLstm) {
        m_plan.needs_dnnl = m_backend == Backend::kOptimised;
      }
      m_plan.steps.push_back(std::move(step));
    }
    return Status::ok();
  }

  // Writes `src` into a sub-box of `dst` without touching the rest (a Pad without the fill).
  static std::unique_ptr<Step> make_concat_part(PadParams p);

  const Graph& m_g;
  Backend m_backend;
  Plan& m_plan;
  std::vector<PlanValue> m_values;
  std::vector<RtNode> m_rt;
  std::vector<bool> m_nwc;  // per value: stored channels-last
  int m_output = -1;

 public:
  std::vector<std::unique_ptr<Tensor>> m_plan_owned;
};

// One input of a Concat: its block copied into place; the parts together tile the output.
class ConcatPart final : public Step {
 public:
  explicit ConcatPart(PadParams p) : m_p(std::move(p)), m_place(m_p) {}
  void run(const ExecContext& ctx, StepState*) const override {
    m_place.copy_block(m_p, resolve(ctx, m_p.src), resolve(ctx, m_p.dst));
  }

 private:
  PadParams m_p;
  PadPlacement m_place;
};

std::unique_ptr<Step> Planner::make_concat_part(PadParams p) { return std::make_unique<ConcatPart>(std::move(p)); }

}  // namespace

Result<std::unique_ptr<Plan>> build_plan(const Graph& graph, std::span<const int64_t> input_shape, Backend backend) {
  auto plan = std::make_unique<Plan>();
  plan->input_shape.assign(input_shape.begin(), input_shape.end());
  Planner planner(graph, backend, *plan);
  ESCPOD_RETURN_IF_ERROR(planner.run(input_shape));
  plan->owned = std::move(planner.m_plan_owned);
  return plan;
}

}  // namespace escpod::nn::detail
