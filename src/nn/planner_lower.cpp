// Shape propagation, folding and lowering (the first planner pass, planner_ir.hpp): graph nodes
// are visited in order; a node whose inputs are all constant is folded into a constant, any other
// becomes one or more runtime nodes with its output shape known.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "nn/planner_ir.hpp"

namespace escpod::nn::detail {
namespace {

class Lowering {
 public:
  Lowering(const Graph& g, PlanIr& ir) : m_g(g), m_ir(ir) {}

  Status run(std::span<const int64_t> input_shape) {
    m_ir.values.assign(m_g.values.size(), PlanValue{});
    for (size_t i = 0; i < m_g.values.size(); ++i) {
      if (m_g.values[i].constant) {
        m_ir.values[i].known = true;
        m_ir.values[i].constant = &*m_g.values[i].constant;
      }
    }
    m_ir.values[static_cast<size_t>(m_g.input)].known = true;
    m_ir.values[static_cast<size_t>(m_g.input)].shape.assign(input_shape.begin(), input_shape.end());
    for (const Node& n : m_g.nodes) ESCPOD_RETURN_IF_ERROR(visit(n));
    const PlanValue& out = m_ir.values[static_cast<size_t>(m_g.output)];
    if (!out.known) return Status::internal("output value never computed");
    if (!out.constant) {
      m_ir.output = m_g.output;
      return Status::ok();
    }
    return copy_constant_output(*out.constant);
  }

 private:
  // ---- helpers -------------------------------------------------------------------------------
  const Tensor* const_of(int id) const { return m_ir.const_of(id); }
  const Tensor* float_const(int id) const { return m_ir.float_const(id); }
  bool is_runtime(int id) const { return m_ir.is_runtime(id); }
  const Shape& shape_of(int id) const { return m_ir.shape_of(id); }
  const Tensor* own(Tensor t) { return m_ir.own(std::move(t)); }

  Status err(const Node& n, const std::string& what) const {
    return Status::unsupported(fmt::format("{}: {}: {}", m_g.info.source, n.label(), what));
  }
  Status set_runtime(const Node& n, int out, Shape shape) {
    if (shape.size() > kMaxPlanRank) return err(n, "tensor rank above 8");
    for (int64_t d : shape) {
      if (d < 0) return err(n, "negative dimension");
    }
    m_ir.values[static_cast<size_t>(out)].known = true;
    m_ir.values[static_cast<size_t>(out)].shape = std::move(shape);
    return Status::ok();
  }
  void set_const(int id, const Tensor* t) {
    m_ir.values[static_cast<size_t>(id)].known = true;
    m_ir.values[static_cast<size_t>(id)].constant = t;
  }
  // A runtime node of kind `kind` reading `x`, labelled after `n` and writing its first output.
  static RtNode node_for(const Node& n, RtKind kind, int x) {
    RtNode r;
    r.kind = kind;
    r.label = n.label();
    if (x != kNoInput) r.in = {x};
    r.out = n.outputs[0];
    return r;
  }
  // Records `r`, whose output has `shape`.
  Status add(const Node& n, RtNode r, Shape shape) {
    ESCPOD_RETURN_IF_ERROR(set_runtime(n, r.out, std::move(shape)));
    m_ir.nodes.push_back(std::move(r));
    return Status::ok();
  }
  std::vector<int64_t> ints_input(const Node& n, size_t i) const {
    const Tensor* t = i < n.inputs.size() ? const_of(n.inputs[i]) : nullptr;
    return t ? t->as_ints() : std::vector<int64_t>{};
  }
  bool input_is_runtime(const Node& n, size_t i) const {
    return i < n.inputs.size() && is_runtime(n.inputs[i]);
  }
  bool graph_uses(int id) const {
    if (id == m_g.output) return true;
    for (const Node& n : m_g.nodes) {
      for (int i : n.inputs) if (i == id) return true;
    }
    return false;
  }
  static constexpr int kNoInput = -2;

  // Degenerate: the whole graph is constant. Copy it out.
  Status copy_constant_output(const Tensor& c) {
    if (c.dtype != DType::kFloat32) return Status::unsupported("constant integer output");
    RtNode r;
    r.kind = RtKind::kCopy;
    r.label = "constant output";
    r.copy.out_shape = c.shape;
    r.copy.src_strides = strides_of(c.shape);
    r.copy.src_const = c.f32.data();
    const int id = m_ir.new_value(c.shape);
    r.out = id;
    m_ir.nodes.push_back(std::move(r));
    m_ir.output = id;
    return Status::ok();
  }

  // ---- per-node shape propagation, folding and lowering --------------------------------------
  Status visit(const Node& n) {
    std::vector<const Tensor*> in;
    bool all_const = true;
    for (int id : n.inputs) {
      if (id >= 0 && !m_ir.values[static_cast<size_t>(id)].known) {
        return Status::internal(fmt::format("{}: input not computed", n.label()));
      }
      in.push_back(const_of(id));
      if (id >= 0 && !const_of(id)) all_const = false;
    }
    if (n.op == "Shape") return fold_shape(n);
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

  // Shape of a runtime tensor is known here: always a constant.
  Status fold_shape(const Node& n) {
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

  Status lower_runtime(const Node& n) {
    const std::string& op = n.op;
    if (op == "Identity" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze") return lower_view(n);
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh") return lower_activation(n);
    if (op == "Add" || op == "Mul") return lower_binary(n);
    if (op == "Conv" || op == "ConvTranspose") return lower_conv(n);
    if (op == "MatMul" || op == "Gemm") return lower_matmul(n);
    if (op == "LSTM") return lower_lstm(n);
    if (op == "Transpose" || op == "Slice") return lower_strided_copy(n);
    if (op == "Pad") return lower_pad(n);
    if (op == "Concat") return lower_concat(n);
    if (op == "BatchNormalization") return lower_batch_norm(n);
    return err(n, "operator not supported on runtime tensors");
  }

  // Same data, another shape: an alias of its input's storage.
  Status lower_view(const Node& n) {
    const int x = n.inputs[0];
    Shape s;
    if (n.op == "Identity") {
      s = shape_of(x);
    } else if (n.op == "Reshape") {
      if (input_is_runtime(n, 1)) return err(n, "runtime target shape");
      ESCPOD_ASSIGN_OR_RETURN(s, reshape_shape(shape_of(x), ints_input(n, 1), n.attr_int("allowzero", 0) != 0));
    } else {
      if (input_is_runtime(n, 1)) return err(n, "runtime axes");
      Result<Shape> r = n.op == "Squeeze" ? squeeze_shape(shape_of(x), ints_input(n, 1))
                                          : unsqueeze_shape(shape_of(x), ints_input(n, 1));
      if (!r.is_ok()) return err(n, r.status().message());
      s = r.value();
    }
    return add(n, node_for(n, RtKind::kAlias, x), std::move(s));
  }

  Status lower_activation(const Node& n) {
    const int x = n.inputs[0];
    RtNode r = node_for(n, RtKind::kEltwise, x);
    PostOp p;
    p.kind = n.op == "Relu" ? PostOp::Kind::kRelu : n.op == "Sigmoid" ? PostOp::Kind::kSigmoid : PostOp::Kind::kTanh;
    r.post = {p};
    return add(n, std::move(r), shape_of(x));
  }

  Status lower_strided_copy(const Node& n) {
    const int x = n.inputs[0];
    RtNode r = node_for(n, RtKind::kCopy, x);
    Shape out;
    Status s;
    const Shape& in = shape_of(x);
    if (n.op == "Transpose") {
      s = transpose_geometry(in, n.attr_ints("perm"), out, r.copy.src_strides);
    } else {
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        if (input_is_runtime(n, i)) return err(n, "runtime slice arguments");
      }
      s = slice_geometry(in, ints_input(n, 1), ints_input(n, 2), ints_input(n, 3), ints_input(n, 4), out,
                         r.copy.src_strides, r.copy.src_start, r.axis0_reverse);
    }
    if (!s.is_ok()) return err(n, s.message());
    set_copy_axes(in, out, r);
    r.copy.out_shape = out;
    return add(n, std::move(r), out);
  }

  // Layout-independent form of a strided copy: which source axis (and step) each output axis
  // walks, and where on each source axis it starts (assign_layouts re-derives strides from it).
  static void set_copy_axes(const Shape& in, const Shape& out, RtNode& r) {
    const Shape in_strides = strides_of(in);
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
  }

  Status lower_pad(const Node& n) {
    const int x = n.inputs[0];
    const std::string mode = n.attr_string("mode", "constant");
    if (mode != "constant") return err(n, fmt::format("pad mode '{}' (only constant)", mode));
    if (input_is_runtime(n, 1) || input_is_runtime(n, 2)) return err(n, "runtime pads");
    const std::vector<int64_t> pads = ints_input(n, 1);
    const Shape& in = shape_of(x);
    if (pads.size() != 2 * in.size()) return err(n, "pads length is not twice the rank");
    float value = 0.0f;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      const Tensor* v = const_of(n.inputs[2]);
      if (!v || v->numel() != 1) return err(n, "constant_value must be a scalar");
      value = v->dtype == DType::kFloat32 ? v->f32[0] : static_cast<float>(v->i64[0]);
    }
    RtNode r = node_for(n, RtKind::kPad, x);
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
    return add(n, std::move(r), out);
  }

  Status lower_concat(const Node& n) {
    const int x = n.inputs.empty() ? -1 : n.inputs[0];
    RtNode r = node_for(n, RtKind::kConcat, kNoInput);
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
    return add(n, std::move(r), out);
  }

  // Not after a conv (those were folded at load): y = x * s + b per channel (axis 1).
  Status lower_batch_norm(const Node& n) {
    const int x = n.inputs[0];
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
    const int mid = m_ir.new_value(in);
    RtNode a = node_for(n, RtKind::kBinary, x);
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
    m_ir.nodes.push_back(std::move(a));
    m_ir.nodes.push_back(std::move(b));
    return Status::ok();
  }

  Status lower_binary(const Node& n) {
    const int a = n.inputs.at(0), b = n.inputs.at(1);
    const Tensor* ca = float_const(a);
    const Tensor* cb = float_const(b);
    if ((const_of(a) && !ca) || (const_of(b) && !cb)) return err(n, "integer operand on a float tensor");
    const bool is_add = n.op == "Add";
    // Scalar constant: an element-wise linear op.
    const Tensor* scalar = (ca && ca->numel() == 1) ? ca : (cb && cb->numel() == 1) ? cb : nullptr;
    if (scalar && (ca == nullptr || cb == nullptr)) return lower_scalar_linear(n, ca ? b : a, *scalar, is_add);
    const Shape sa = ca ? ca->shape : shape_of(a);
    const Shape sb = cb ? cb->shape : shape_of(b);
    Result<Shape> out = broadcast_shape(sa, sb);
    if (!out.is_ok()) return err(n, out.status().message());
    RtNode r = node_for(n, RtKind::kBinary, kNoInput);
    r.bin.kind = is_add ? BinaryParams::Kind::kAdd : BinaryParams::Kind::kMul;
    r.bin.out_shape = out.value();
    r.bin.a_shape = expand_rank(sa, out.value().size());
    r.bin.b_shape = expand_rank(sb, out.value().size());
    r.bin.a_const = ca ? ca->f32.data() : nullptr;
    r.bin.b_const = cb ? cb->f32.data() : nullptr;
    r.in = {ca ? -1 : a, cb ? -1 : b};
    return add(n, std::move(r), out.value());
  }

  // x + c or x * c for a scalar constant c.
  Status lower_scalar_linear(const Node& n, int rt, const Tensor& scalar, bool is_add) {
    Shape out_shape = shape_of(rt);
    ESCPOD_ASSIGN_OR_RETURN(out_shape, broadcast_shape(out_shape, scalar.shape));
    if (out_shape != shape_of(rt)) return err(n, "scalar broadcast grows the tensor");
    RtNode r = node_for(n, RtKind::kEltwise, rt);
    PostOp p;
    p.kind = PostOp::Kind::kLinear;
    p.alpha = is_add ? 1.0f : scalar.f32[0];
    p.beta = is_add ? scalar.f32[0] : 0.0f;
    r.post = {p};
    return add(n, std::move(r), out_shape);
  }

  // Fills p.pad_l / p.pad_r from `pads` or `auto_pad` (p's stride, dilation, k and iw set).
  Status conv_padding(const Node& n, ConvParams& p) const {
    const auto pads = n.attr_ints("pads");
    const int64_t span = (p.k - 1) * p.dilation + 1;
    const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
    if (auto_pad == "NOTSET") {
      p.pad_l = pads.empty() ? 0 : pads[0];
      p.pad_r = pads.size() > 1 ? pads[1] : 0;
    } else if (auto_pad == "VALID") {
      p.pad_l = p.pad_r = 0;
    } else if (!p.transposed && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
      const int64_t out = (p.iw + p.stride - 1) / p.stride;
      const int64_t total = std::max<int64_t>(0, (out - 1) * p.stride + span - p.iw);
      p.pad_l = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.pad_r = total - p.pad_l;
    } else {
      return err(n, fmt::format("auto_pad {}", auto_pad));
    }
    if (p.pad_l < 0 || p.pad_r < 0) return err(n, "negative pads");
    return Status::ok();
  }

  // Output length of a convolution whose geometry and padding are set.
  Status conv_output_length(const Node& n, ConvParams& p) const {
    const int64_t span = (p.k - 1) * p.dilation + 1;
    if (p.transposed) {
      if (n.has("output_shape")) return err(n, "output_shape attribute (give pads instead)");
      const auto opad = n.attr_ints("output_padding");
      const int64_t op = opad.empty() ? 0 : opad[0];
      if (op != 0) return err(n, "output_padding other than 0");
      p.ow = (p.iw - 1) * p.stride + span - p.pad_l - p.pad_r;
    } else {
      p.ow = (p.iw + p.pad_l + p.pad_r - span) / p.stride + 1;
    }
    if (p.ow <= 0) return err(n, fmt::format("input length {} gives no output", p.iw));
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
    p.stride = strides.empty() ? 1 : strides[0];
    p.dilation = dil.empty() ? 1 : dil[0];
    if (p.stride < 1 || p.dilation < 1) return err(n, "stride and dilation must be positive");
    ESCPOD_RETURN_IF_ERROR(conv_padding(n, p));
    ESCPOD_RETURN_IF_ERROR(conv_output_length(n, p));
    p.weights = w->f32.data();
    p.bias = b ? b->f32.data() : nullptr;
    RtNode r = node_for(n, RtKind::kConv, x);
    r.conv = p;
    return add(n, std::move(r), {p.n, p.oc, p.ow});
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
      ESCPOD_RETURN_IF_ERROR(gemm_params(n, in, *bw, p));
      out = {p.m, p.n};
    }
    RtNode r = node_for(n, RtKind::kMatMul, a);
    r.mm = p;
    return add(n, std::move(r), out);
  }

  // Gemm as a MatMul: alpha and transB folded into [K][N] weights, beta * C into the bias.
  Status gemm_params(const Node& n, const Shape& in, const Tensor& bw, MatMulParams& p) {
    if (in.size() != 2) return err(n, "Gemm on a non-matrix");
    if (n.attr_int("transA", 0) != 0) return err(n, "transA=1");
    const bool tb = n.attr_int("transB", 0) != 0;
    const float alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
    p.m = in[0];
    p.k = in[1];
    p.n = tb ? bw.shape[0] : bw.shape[1];
    if ((tb ? bw.shape[1] : bw.shape[0]) != p.k) return err(n, "inner sizes differ");
    std::vector<float> wk(static_cast<size_t>(p.k * p.n));
    for (int64_t kk = 0; kk < p.k; ++kk) {
      for (int64_t j = 0; j < p.n; ++j) {
        wk[static_cast<size_t>(kk * p.n + j)] = alpha * (tb ? bw.f32[static_cast<size_t>(j * p.k + kk)] : bw.f32[static_cast<size_t>(kk * p.n + j)]);
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
    return Status::ok();
  }

  // The LSTM forms the kernels run: one direction, time-major, default activations, no clipping.
  Status check_lstm_attributes(const Node& n, const std::string& dir) const {
    if (dir != "forward" && dir != "reverse") return err(n, fmt::format("direction '{}'", dir));
    if (n.attr_int("layout", 0) != 0) return err(n, "layout=1 (batch-major)");
    if (n.attr_int("input_forget", 0) != 0) return err(n, "input_forget=1");
    if (n.has("clip")) return err(n, "cell clipping");
    if (n.has("activations")) {
      std::string acts = n.attr_string("activations", "");
      std::transform(acts.begin(), acts.end(), acts.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (acts != "sigmoid,tanh,tanh") return err(n, fmt::format("activations {}", acts));
    }
    return Status::ok();
  }

  // Inputs 4-7 and outputs 1-2: full-length sequences, zero initial state, no peepholes, and
  // only Y used.
  Status check_lstm_optional_io(const Node& n, int64_t t) const {
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      const Tensor* sl = const_of(n.inputs[4]);
      if (!sl) return err(n, "runtime sequence_lens");
      for (int64_t v : sl->as_ints()) {
        if (v != t) return err(n, "sequence_lens shorter than the sequence");
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
    return Status::ok();
  }

  Status lower_lstm(const Node& n) {
    const int x = n.inputs.at(0);
    const Shape& in = shape_of(x);
    if (in.size() != 3) return err(n, "input must be [T, N, C]");
    const std::string dir = n.attr_string("direction", "forward");
    ESCPOD_RETURN_IF_ERROR(check_lstm_attributes(n, dir));
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
    ESCPOD_RETURN_IF_ERROR(check_lstm_optional_io(n, in[0]));
    LstmParams p;
    p.t = in[0];
    p.n = in[1];
    p.c = in[2];
    p.h = h;
    p.reverse = dir == "reverse";
    p.w = w->f32.data();
    p.r = r->f32.data();
    p.bias = own(Tensor::floats({4 * h}, std::move(bias)))->f32.data();
    RtNode rt = node_for(n, RtKind::kLstm, x);
    rt.lstm = p;
    return add(n, std::move(rt), {p.t, 1, p.n, p.h});
  }

  const Graph& m_g;
  PlanIr& m_ir;
};

}  // namespace

Status lower_graph(const Graph& graph, std::span<const int64_t> input_shape, PlanIr& ir) {
  return Lowering(graph, ir).run(input_shape);
}

}  // namespace escpod::nn::detail
