// Plan building for one input shape: the passes of planner_ir.hpp (lowering, fusion, layouts,
// arena assignment), then kernel selection: one step per live node, from the reference kernels or
// oneDNN's as the backend says.
#include <algorithm>

#include <fmt/format.h>

#include "nn/gemm_amx.hpp"
#include "nn/gemm_bf16.hpp"
#include "nn/lstm_int8.hpp"
#include "nn/plan.hpp"
#include "nn/planner_ir.hpp"
#include "nn/shape_ops.hpp"

namespace escpod::nn::detail {
namespace {

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

// Kernel selection: the step of each live node, its description and its flop count, into the
// plan.
class StepBuilder {
 public:
  StepBuilder(const Graph& g, const LoadOptions& options, const PlanIr& ir, const ArenaAssignment& arena,
              Plan& plan)
      : m_g(g), m_backend(options.backend), m_lstm_int8(options.lstm_int8), m_bf16(options.bf16_gemm), m_bf16_conv(options.bf16_conv), m_amx_f32(options.amx_f32), m_ir(ir), m_arena(arena), m_plan(plan) {}

  Status run() {
    choose_bf16_storage();
    for (const RtNode* r : m_arena.order) {
      if (r->kind == RtKind::kAlias) continue;
      if (r->kind == RtKind::kConcat) {
        ESCPOD_RETURN_IF_ERROR(add_concat_parts(*r));
        continue;
      }
      ESCPOD_RETURN_IF_ERROR(add_step(*r));
    }
    return Status::ok();
  }

 private:
  Loc loc(int v) const { return m_arena.loc_of(v); }
  bool is_nwc(int v) const {
    return m_ir.nwc[static_cast<size_t>(m_arena.root[static_cast<size_t>(v)])];
  }
  bool reference() const { return m_backend == Backend::kReference; }
  // A float32 product [.. x k] x [k x n] the optimised backend runs on the AMX tile unit.
  bool amx_f32_ok(int64_t k, int64_t n) const {
    return m_amx_f32 && !reference() && amx_f32_available() && AmxF32Gemm::shape_ok(k, n);
  }

  Status add_step(const RtNode& r) {
    std::string error, text;
    std::unique_ptr<Step> step = make_step(r, text, error);
    if (!step) {
      return Status::unsupported(fmt::format("{}: {}: oneDNN could not build a kernel: {}", m_g.info.source, r.label, error));
    }
    step->text = text;
    m_plan.flops += step->flops;
    m_plan.scratch_bytes = std::max(m_plan.scratch_bytes, step->scratch_bytes());
    if (r.kind == RtKind::kConv || r.kind == RtKind::kMatMul || r.kind == RtKind::kLstm) {
      m_plan.needs_dnnl = m_backend == Backend::kOptimised;
    }
    m_plan.steps.push_back(std::move(step));
    return Status::ok();
  }

  // Null (with `error`) when oneDNN cannot build the primitive.
  std::unique_ptr<Step> make_step(const RtNode& r, std::string& text, std::string& error) const {
    const Shape& oshape = m_ir.shape_of(r.out);
    switch (r.kind) {
      case RtKind::kConv: return conv_step(r, text, error);
      case RtKind::kMatMul: return matmul_step(r, text, error);
      case RtKind::kLstm: return lstm_step(r, text, error);
      case RtKind::kEltwise:
        text = fmt::format("eltwise{} {}", describe_post_ops(r.post), shape_str(oshape));
        return make_eltwise(numel(oshape), r.post, loc(r.in[0]), loc(r.out));
      case RtKind::kBinary: return binary_step(r, text);
      case RtKind::kCopy: return copy_step(r, text);
      case RtKind::kPad: {
        PadParams p = r.pad;
        p.src = loc(r.in[0]);
        p.dst = loc(r.out);
        text = fmt::format("pad{} {}->{}", describe_post_ops(p.post_ops), shape_str(p.in_shape), shape_str(p.out_shape));
        return make_pad(std::move(p));
      }
      case RtKind::kConcat:
      case RtKind::kAlias: break;
    }
    error = "no kernel for this node";
    return nullptr;
  }

  // The convolution's parameters with the planner's choices: layouts, precision, and (once
  // choose_bf16_storage has run) which of its activations are stored in bfloat16.
  ConvParams conv_params(const RtNode& r) const {
    ConvParams p = r.conv;
    p.src = loc(r.in[0]);
    p.dst = loc(r.out);
    p.dst_nwc = is_nwc(r.out);
    p.src_nwc = is_nwc(r.in[0]) || (p.ic == 1 && p.dst_nwc);
    const bool post_ok = p.post_ops.empty() || (p.post_ops.size() == 1 && (p.post_ops[0].kind == PostOp::Kind::kSilu ||
                                                                           p.post_ops[0].kind == PostOp::Kind::kRelu));
    p.bf16 = m_bf16_conv && !reference() && bf16_available() && conv_takes_bf16(p);
    p.amx_f32 = !p.bf16 && !p.transposed && p.dilation == 1 && p.src_nwc && p.dst_nwc && post_ok &&
                amx_f32_ok(p.ic * p.k, p.oc);
    p.src_bf16 = stored_bf16(r.in[0]);
    p.dst_bf16 = stored_bf16(r.out);
    return p;
  }

  bool stored_bf16(int v) const {
    return !m_bf16_stored.empty() && m_bf16_stored[static_cast<size_t>(m_arena.root[static_cast<size_t>(v)])];
  }

  // Marks the activations stored in bfloat16 (ConvParams::dst_bf16): a convolution's output, not
  // shared with another value nor the graph output, whose writer can round it (conv_writes_bf16)
  // and whose every reader is a bfloat16 convolution taking it as its input.
  void choose_bf16_storage() {
    std::vector<int> readers(m_ir.values.size(), 0), bf16_readers(m_ir.values.size(), 0);
    for (const RtNode* r : m_arena.order) {
      for (size_t i = 0; i < r->in.size(); ++i) {
        if (r->in[i] < 0) continue;
        const auto root = static_cast<size_t>(m_arena.root[static_cast<size_t>(r->in[i])]);
        ++readers[root];
        if (i == 0 && r->kind == RtKind::kConv && conv_params(*r).bf16) ++bf16_readers[root];
      }
    }
    std::vector<bool> stored(m_ir.values.size(), false);
    const auto output_root = m_arena.root[static_cast<size_t>(m_ir.output)];
    for (const RtNode* r : m_arena.order) {
      if (r->kind != RtKind::kConv || reference()) continue;
      const auto v = static_cast<size_t>(r->out);
      if (m_arena.root[v] != r->out || r->out == output_root || readers[v] == 0 || readers[v] != bf16_readers[v]) continue;
      stored[v] = conv_writes_bf16(conv_params(*r));
    }
    m_bf16_stored = std::move(stored);
  }

  std::unique_ptr<Step> conv_step(const RtNode& r, std::string& text, std::string& error) const {
    const ConvParams p = conv_params(r);
    text = fmt::format("{}{} {}->{} k{} s{} d{} p{},{}{}{}", p.transposed ? "conv_transpose1d" : "conv1d",
                       describe_post_ops(p.post_ops), shape_str(m_ir.shape_of(r.in[0])),
                       shape_str(m_ir.shape_of(r.out)), p.k, p.stride, p.dilation, p.pad_l, p.pad_r,
                       p.bf16 ? " bf16" : p.amx_f32 ? " amx-f32" : "", p.dst_bf16 ? " (bf16 out)" : "");
    const double flops = 2.0 * static_cast<double>(p.n) * static_cast<double>(p.oc) * static_cast<double>(p.ic) * static_cast<double>(p.k) *
                         static_cast<double>(p.transposed ? p.iw : p.ow);
    std::unique_ptr<Step> step = reference() ? make_ref_conv(p) : make_dnnl_conv(p, &error);
    if (step) step->flops = flops;
    return step;
  }

  std::unique_ptr<Step> matmul_step(const RtNode& r, std::string& text, std::string& error) const {
    MatMulParams p = r.mm;
    p.src = loc(r.in[0]);
    p.dst = loc(r.out);
    p.bf16 = m_bf16 && !reference() && bf16_available();
    p.amx_f32 = !p.bf16 && p.post_ops.empty() && amx_f32_ok(p.k, p.n);
    text = fmt::format("matmul{}{} [{}x{}]x[{}x{}]{}", describe_post_ops(p.post_ops),
                       p.blank_pad ? fmt::format("+blank_pad(tanh,{},{})", p.blank_pad->alpha, p.blank_pad->beta) : "",
                       p.m, p.k, p.k, p.n, p.bf16 ? " bf16" : p.amx_f32 ? " amx-f32" : "");
    std::unique_ptr<Step> step = reference() ? make_ref_matmul(p) : make_dnnl_matmul(p, &error);
    if (step) step->flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.k) * static_cast<double>(p.n);
    return step;
  }

  std::unique_ptr<Step> lstm_step(const RtNode& r, std::string& text, std::string& error) const {
    LstmParams p = r.lstm;
    p.src = loc(r.in[0]);
    p.dst = loc(r.out);
    p.int8_recurrent = m_lstm_int8 && !reference() && lstm_int8_available() && lstm_int8_shape_ok(4 * p.h, p.h);
    p.bf16_input = m_bf16 && !reference() && bf16_available();
    p.bf16_recurrent = p.bf16_input && !p.int8_recurrent;
    p.amx_f32_input = !p.bf16_input && amx_f32_ok(p.c, 4 * p.h);
    text = fmt::format("lstm{} T{} N{} C{} H{}{}{}", p.reverse ? "(reverse)" : "", p.t, p.n, p.c, p.h,
                       p.bf16_input ? " Wx bf16" : p.amx_f32_input ? " Wx amx-f32" : "",
                       p.int8_recurrent ? " R int8" : p.bf16_recurrent ? " R bf16" : "");
    std::unique_ptr<Step> step = reference() ? make_ref_lstm(p) : make_dnnl_lstm(p, &error);
    if (step) step->flops = 2.0 * static_cast<double>(p.t) * static_cast<double>(p.n) * 4.0 * static_cast<double>(p.h) * static_cast<double>(p.c + p.h);
    return step;
  }

  std::unique_ptr<Step> binary_step(const RtNode& r, std::string& text) const {
    BinaryParams p = r.bin;
    if (r.in[0] >= 0) p.a = loc(r.in[0]);
    if (r.in[1] >= 0) p.b = loc(r.in[1]);
    p.dst = loc(r.out);
    text = fmt::format("{}{} {}", p.kind == BinaryParams::Kind::kAdd ? "add" : "mul", describe_post_ops(p.post_ops),
                       shape_str(m_ir.shape_of(r.out)));
    return make_binary(std::move(p));
  }

  std::unique_ptr<Step> copy_step(const RtNode& r, std::string& text) const {
    StridedCopyParams p = r.copy;
    if (!r.in.empty()) p.src = loc(r.in[0]);
    if (!r.in.empty() && r.in[0] >= 0 && is_nwc(r.in[0])) {
      // Source stored [N, W, C]: physical strides of the logical axes N, C, W.
      const Shape& in = m_ir.shape_of(r.in[0]);
      const Shape phys{in[1] * in[2], 1, in[1]};
      p.src_start = 0;
      for (size_t d = 0; d < 3; ++d) p.src_start += r.copy_first[d] * phys[d];
      for (size_t i = 0; i < p.src_strides.size(); ++i) {
        p.src_strides[i] = r.copy_step[i] * phys[static_cast<size_t>(r.copy_axis[i])];
      }
    }
    p.dst = loc(r.out);
    text = fmt::format("copy {}", shape_str(m_ir.shape_of(r.out)));
    return make_strided_copy(std::move(p));
  }

  // One block copy per input into its slab of the output.
  Status add_concat_parts(const RtNode& r) {
    const Shape& oshape = m_ir.shape_of(r.out);
    const size_t axis = static_cast<size_t>(r.concat_axis);
    int64_t at = 0;
    for (size_t i = 0; i < r.in.size(); ++i) {
      const Shape& s = r.concat_shapes[i];
      PadParams p;
      p.in_shape = s;
      p.out_shape = oshape;
      p.pads_begin.assign(s.size(), 0);
      p.pads_begin[axis] = at;
      p.dst = loc(r.out);
      at += s[axis];
      if (r.concat_consts[i]) {
        return Status::unsupported(fmt::format("{}: {}: concatenating constants with runtime tensors", m_g.info.source, r.label));
      }
      p.src = loc(r.in[i]);
      auto st = std::make_unique<ConcatPart>(std::move(p));
      st->text = fmt::format("concat part {} {}", i, shape_str(s));
      m_plan.steps.push_back(std::move(st));
    }
    return Status::ok();
  }

  const Graph& m_g;
  Backend m_backend;
  bool m_lstm_int8;
  bool m_bf16;
  bool m_bf16_conv;
  bool m_amx_f32;
  const PlanIr& m_ir;
  const ArenaAssignment& m_arena;
  Plan& m_plan;
  std::vector<bool> m_bf16_stored;  // per value root: stored in bfloat16 (choose_bf16_storage)
};

}  // namespace

Result<std::unique_ptr<Plan>> build_plan(const Graph& graph, std::span<const int64_t> input_shape,
                                         const LoadOptions& options) {
  auto plan = std::make_unique<Plan>();
  plan->input_shape.assign(input_shape.begin(), input_shape.end());
  PlanIr ir;
  ESCPOD_RETURN_IF_ERROR(lower_graph(graph, input_shape, ir));
  plan->output_shape = ir.shape_of(ir.output);
  fuse(ir, options.backend);
  assign_layouts(ir, options.backend);
  const ArenaAssignment arena = assign_arena(ir, graph.input);
  plan->arena_floats = arena.arena_floats;
  ESCPOD_RETURN_IF_ERROR(StepBuilder(graph, options, ir, arena, *plan).run());
  plan->owned = std::move(ir.owned);
  return plan;
}

}  // namespace escpod::nn::detail
