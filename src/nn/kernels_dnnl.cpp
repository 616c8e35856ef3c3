// oneDNN-backed steps: convolution, deconvolution, matmul (with fused activations) and LSTM.
// Primitives and reordered weights belong to the plan (shared by workers); memory objects and
// argument lists are per worker (StepState). Execution uses the C API with prebuilt argument
// arrays so a run allocates nothing on our side.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "nn/gemm_amx.hpp"
#include "nn/gemm_bf16.hpp"
#include "nn/lstm_int8.hpp"
#include "nn/plan.hpp"
#include "nn/simd.hpp"

namespace escpod::nn::detail {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::algorithm eltwise_alg(PostOp::Kind k) {
  switch (k) {
    case PostOp::Kind::kRelu: return dnnl::algorithm::eltwise_relu;
    case PostOp::Kind::kSigmoid: return dnnl::algorithm::eltwise_logistic;
    case PostOp::Kind::kTanh: return dnnl::algorithm::eltwise_tanh;
    case PostOp::Kind::kSilu: return dnnl::algorithm::eltwise_swish;
    case PostOp::Kind::kLinear: return dnnl::algorithm::eltwise_linear;
  }
  return dnnl::algorithm::eltwise_linear;
}

dnnl::primitive_attr make_attr(const std::vector<PostOp>& ops) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (!ops.empty()) {
    dnnl::post_ops po;
    for (const PostOp& op : ops) {
      const float alpha = op.kind == PostOp::Kind::kSilu ? 1.0f : op.kind == PostOp::Kind::kLinear ? op.alpha : 0.0f;
      const float beta = op.kind == PostOp::Kind::kLinear ? op.beta : 0.0f;
      po.append_eltwise(1.0f, eltwise_alg(op.kind), alpha, beta);
    }
    attr.set_post_ops(po);
  }
  return attr;
}

// `bytes` rounded up to a whole number of 64-byte cache lines (scratch regions start aligned).
constexpr std::size_t align64(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// Weights in a primitive's preferred layout, shared across the plans (batch sizes) that ask for
// the same source tensor in the same layout, so the model keeps one copy per layout.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::shared_ptr<void>;

Buffer shared_weights(const void* source_key, const dnnl::memory::desc& want, const dnnl::memory& user) {
  struct Entry {
    const void* key;
    dnnl::memory::desc md;
    std::weak_ptr<void> buf;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.key == source_key && e.md == want) {
      if (Buffer b = e.buf.lock()) return b;
    }
  }
  const size_t bytes = align64(want.get_size());
  Buffer buf(std::aligned_alloc(64, bytes == 0 ? 64 : bytes), AlignedFree{});
  dnnl::memory dst(want, engine(), buf.get());
  dnnl::stream s(engine());
  dnnl::reorder(user, dst).execute(s, const_cast<dnnl::memory&>(user), dst);
  s.wait();
  std::erase_if(cache, [](const Entry& e) { return e.buf.expired(); });
  cache.push_back(Entry{source_key, want, buf});
  return buf;
}

// Weights w [K][N] (in the layout `w_tag`: ab row-major, ba [N][K]) as the row-major panel
// gemm_acc_fn reads, shared by every plan of the model: rows `*ld` floats apart, an odd number of
// cache lines, so that the rows of a panel of columns fall in different L1 sets (at 4 KB apart,
// N = 1024, they all shared one: the AVX2 product ran at ~0.6x its FMA peak).
int64_t gemm_panel_ld(int64_t n) {
  const int64_t lines = (n + 15) / 16;
  return 16 * (lines % 2 == 1 ? lines : lines + 1);
}
Buffer shared_gemm_panel(const float* w, int64_t k, int64_t n, tag w_tag, int64_t* ld) {
  *ld = gemm_panel_ld(n);
  const dnnl::memory::desc panel({k, n}, dt::f32, dnnl::memory::dims{*ld, 1});
  const dnnl::memory user(dnnl::memory::desc({k, n}, dt::f32, w_tag), engine(), const_cast<float*>(w));
  return shared_weights(w, panel, user);
}

// Per-worker bindings: memory objects and the argument array.
class DnnlState final : public StepState {
 public:
  std::vector<dnnl::memory> mems;
  std::vector<dnnl_exec_arg_t> args;
  dnnl::memory src, dst, scratch;
};

// A oneDNN primitive over the step's input and output. A bfloat16 primitive (convert_input_to_bf16)
// gets its float32 input rounded to bfloat16 into the step's scratch, after oneDNN's scratchpad.
class DnnlStep : public Step {
 public:
  std::size_t scratch_bytes() const override {
    return m_bf16_src_elems == 0 ? m_scratch_md.get_size() : converted_at() + m_bf16_src_elems * sizeof(uint16_t);
  }

  std::unique_ptr<StepState> bind() const override {
    auto st = std::make_unique<DnnlState>();
    st->src = dnnl::memory(m_src_md, engine(), DNNL_MEMORY_NONE);
    st->dst = dnnl::memory(m_dst_md, engine(), DNNL_MEMORY_NONE);
    st->scratch = dnnl::memory(m_scratch_md, engine(), DNNL_MEMORY_NONE);
    st->args.push_back({m_src_arg, st->src.get()});
    st->args.push_back({DNNL_ARG_DST, st->dst.get()});
    st->args.push_back({DNNL_ARG_SCRATCHPAD, st->scratch.get()});
    for (const auto& [arg, md, buf] : m_consts) {
      st->mems.emplace_back(md, engine(), buf.get());
      st->args.push_back({arg, st->mems.back().get()});
    }
    return st;
  }

  void run(const ExecContext& ctx, StepState* state) const override {
    if (m_bf16_src_elems == 0) return run_from(ctx, state, resolve(ctx, m_src));
    auto* converted = reinterpret_cast<uint16_t*>(static_cast<char*>(ctx.scratchpad) + converted_at());
    convert_to_bf16(resolve(ctx, m_src), converted, m_bf16_src_elems);
    run_from(ctx, state, converted);
  }

 protected:
  // The primitive takes its input (`elems` values) in bfloat16.
  void convert_input_to_bf16(std::size_t elems) { m_bf16_src_elems = elems; }

  // Runs the primitive on `src` (the step's input, or a converted copy of it).
  void run_from(const ExecContext& ctx, StepState* state, const void* src) const {
    auto* st = static_cast<DnnlState*>(state);
    dnnl_memory_set_data_handle(st->src.get(), const_cast<void*>(src));
    dnnl_memory_set_data_handle(st->dst.get(), resolve(ctx, m_dst));
    dnnl_memory_set_data_handle(st->scratch.get(), ctx.scratchpad);
    dnnl_primitive_execute(m_prim.get(), static_cast<dnnl_stream_t>(ctx.dnnl_stream),
                           static_cast<int>(st->args.size()), st->args.data());
  }

  void add_const(int arg, const dnnl::memory::desc& md, Buffer buf) {
    m_consts.push_back({arg, md, std::move(buf)});
  }
  struct Const {
    int arg;
    dnnl::memory::desc md;
    Buffer buf;
  };
  dnnl::primitive m_prim;
  dnnl::memory::desc m_src_md, m_dst_md, m_scratch_md;
  int m_src_arg = DNNL_ARG_SRC;
  Loc m_src, m_dst;
  std::vector<Const> m_consts;

 private:
  std::size_t converted_at() const { return align64(m_scratch_md.get_size()); }
  std::size_t m_bf16_src_elems = 0;  // 0: the primitive reads the float32 input in place
};

Buffer plain_copy(const float* data, size_t n) {
  Buffer b(std::aligned_alloc(64, align64(n * sizeof(float)) + 64), AlignedFree{});
  std::copy(data, data + n, static_cast<float*>(b.get()));
  return b;
}

// The `rows` rows of y ([rows][n]) set to the bias, or to zero without one: the start of the
// products that gemm_acc_fn accumulates.
void fill_rows_with_bias(float* y, int64_t rows, int64_t n, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * n;
    if (bias) {
      std::copy(bias, bias + n, row);
    } else {
      std::fill(row, row + n, 0.0f);
    }
  }
}

// Whether the convolution's post-operations are none or one SiLU or ReLU (what the direct
// kernels apply), and that activation over an output buffer (null for none).
bool activation_only(const ConvParams& p) {
  return p.post_ops.empty() || (p.post_ops.size() == 1 && (p.post_ops[0].kind == PostOp::Kind::kSilu ||
                                                           p.post_ops[0].kind == PostOp::Kind::kRelu));
}
void relu_in_place(float* y, int64_t n) {  // the reference backend's ReLU (plan.hpp)
  for (int64_t i = 0; i < n; ++i) y[i] = relu(y[i]);
}
using ActivationFn = void (*)(float* y, int64_t n);
ActivationFn activation_fn(const ConvParams& p) {
  if (p.post_ops.empty()) return nullptr;
  return p.post_ops[0].kind == PostOp::Kind::kSilu ? silu_fn(simd_level()) : &relu_in_place;
}

// oneDNN's forward convolution for `p` (not transposed), its weights in the layout it prefers.
dnnl::convolution_forward::primitive_desc conv_primitive_desc(const ConvParams& p) {
  const dt in = p.bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src({p.n, p.ic, p.iw}, in, p.src_nwc ? tag::nwc : tag::ncw);
  const dnnl::memory::desc dst({p.n, p.oc, p.ow}, p.dst_bf16 ? dt::bf16 : dt::f32, p.dst_nwc ? tag::nwc : tag::ncw);
  const dnnl::memory::desc w_any({p.oc, p.ic, p.k}, in, tag::any);
  const dnnl::memory::desc b_md({p.oc}, dt::f32, tag::x);
  const dnnl::memory::dims strides{p.stride}, dil{p.dilation - 1}, pl{p.pad_l}, pr{p.pad_r};
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                    w_any, p.bias ? b_md : dnnl::memory::desc(), dst, strides, dil, pl, pr);
  return dnnl::convolution_forward::primitive_desc(d, make_attr(p.post_ops), engine());
}

// With ConvParams::bf16 the input and the weights are bfloat16 (the input rounded per call, see
// DnnlStep, unless its producer stored it so: src_bf16); accumulation is float32, and so is the
// output unless dst_bf16 (oneDNN rounds it to nearest even after the post-ops).
class DnnlConv final : public DnnlStep {
 public:
  explicit DnnlConv(const ConvParams& p) {
    m_src = p.src;
    m_dst = p.dst;
    const dt in = p.bf16 ? dt::bf16 : dt::f32;
    m_src_md = dnnl::memory::desc({p.n, p.ic, p.iw}, in, p.src_nwc ? tag::nwc : tag::ncw);
    m_dst_md = dnnl::memory::desc({p.n, p.oc, p.ow}, p.dst_bf16 ? dt::bf16 : dt::f32, p.dst_nwc ? tag::nwc : tag::ncw);
    if (p.bf16 && !p.src_bf16) convert_input_to_bf16(static_cast<std::size_t>(p.n * p.ic * p.iw));
    const dnnl::memory::desc w_any({p.oc, p.ic, p.k}, in, tag::any);
    // ONNX weights: Conv [oc][ic][k] (oiw); ConvTranspose [ic][oc][k] (logical oc,ic,k -> bac).
    const dnnl::memory::desc w_user({p.oc, p.ic, p.k}, dt::f32, p.transposed ? tag::bac : tag::oiw);
    const dnnl::memory::desc b_md({p.oc}, dt::f32, tag::x);
    const dnnl::memory::desc no_bias;
    const dnnl::memory::dims strides{p.stride}, dil{p.dilation - 1}, pl{p.pad_l}, pr{p.pad_r};
    const dnnl::primitive_attr attr = make_attr(p.post_ops);
    dnnl::memory::desc w_md;
    if (p.transposed) {
      dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                          m_src_md, w_any, p.bias ? b_md : no_bias, m_dst_md, strides, dil, pl, pr);
      dnnl::deconvolution_forward::primitive_desc pd(d, attr, engine());
      m_prim = dnnl::deconvolution_forward(pd);
      w_md = pd.weights_desc();
      m_scratch_md = pd.scratchpad_desc();
    } else {
      const dnnl::convolution_forward::primitive_desc pd = conv_primitive_desc(p);
      m_prim = dnnl::convolution_forward(pd);
      w_md = pd.weights_desc();
      m_scratch_md = pd.scratchpad_desc();
    }
    dnnl::memory user(w_user, engine(), const_cast<float*>(p.weights));
    add_const(DNNL_ARG_WEIGHTS, w_md, shared_weights(p.weights, w_md, user));
    if (p.bias) add_const(DNNL_ARG_BIAS, b_md, plain_copy(p.bias, static_cast<size_t>(p.oc)));
  }
};

// Convolutions with few inputs per output (ic * k <= kMaxTaps) and at most 64 output channels,
// channels-last output: the direct kernel of small_conv_fn (AVX-512), faster than oneDNN's
// blocked convolution at these shapes (bench/results/crf_encoder.md, Session 14; the boundary
// CNN's first layer, Session 21). Post-ops: none, or one SiLU or ReLU. Above 16 channels where the
// planner chose the AMX tile unit (amx_f32), that runs instead. With dst_bf16 the output is
// written in bfloat16 for the bfloat16 convolution that reads it.
class SmallConv final : public Step {
 public:
  static constexpr int64_t kMaxTaps = 64;
  static bool handles(const ConvParams& p) {
    const bool post_ok = activation_only(p);
    return small_conv_fn(simd_level()) != nullptr && !p.transposed && p.dilation == 1 &&
           (p.oc <= 16 || (p.oc <= 64 && !p.amx_f32)) && p.ic * p.k <= kMaxTaps && (p.dst_nwc || p.oc == 1) &&
           post_ok;
  }
  explicit SmallConv(const ConvParams& p) : m_src(p.src), m_dst(p.dst), m_post(post_of(p)), m_fn(small_conv_fn(simd_level())) {
    m_g = SmallConvGeometry{p.n, p.ic, p.oc, p.iw, p.ow, p.k, p.stride, p.pad_l, p.src_nwc, p.dst_bf16};
    const int64_t lanes = (p.oc + 15) / 16 * 16;
    m_weights.assign(static_cast<size_t>(p.k * p.ic * lanes), 0.0f);
    for (int64_t o = 0; o < p.oc; ++o) {
      for (int64_t c = 0; c < p.ic; ++c) {
        for (int64_t kk = 0; kk < p.k; ++kk) m_weights[static_cast<size_t>((kk * p.ic + c) * lanes + o)] = p.weights[(o * p.ic + c) * p.k + kk];
      }
    }
    m_bias.assign(static_cast<size_t>(lanes), 0.0f);
    if (p.bias) std::copy(p.bias, p.bias + p.oc, m_bias.begin());
  }
  void run(const ExecContext& ctx, StepState*) const override {
    m_fn(m_g, resolve(ctx, m_src), m_weights.data(), m_bias.data(), resolve(ctx, m_dst), m_post);
  }

 private:
  static SmallConvPost post_of(const ConvParams& p) {
    if (p.post_ops.empty()) return SmallConvPost::kNone;
    return p.post_ops[0].kind == PostOp::Kind::kSilu ? SmallConvPost::kSilu : SmallConvPost::kRelu;
  }
  Loc m_src, m_dst;
  SmallConvPost m_post;
  SmallConvFn m_fn;
  SmallConvGeometry m_g;
  std::vector<float> m_weights;  // [k][ic][16 V]
  std::vector<float> m_bias;     // [16 V]
};

// Transposed convolutions with few outputs per input position (oc * k <= 16), no post-op: the
// direct kernel of small_deconv_fn (AVX-512 or AVX2), 2.6x oneDNN's at the boundary CNN's last
// layer (64 -> 2 channels, k 7, stride 3) on AVX-512 and ~2x under an AVX2 cap, with no layout
// copy after it (bench: `escpod model bench --profile [--isa avx2]`).
class SmallDeconv final : public Step {
 public:
  static bool handles(const ConvParams& p) {
    return small_deconv_fn(simd_level()) != nullptr && p.transposed && p.dilation == 1 && p.oc * p.k <= 16 &&
           p.post_ops.empty();
  }
  explicit SmallDeconv(const ConvParams& p)
      : m_src(p.src), m_dst(p.dst), m_dst_nwc(p.dst_nwc), m_fn(small_deconv_fn(simd_level())) {
    m_g = SmallConvGeometry{p.n, p.ic, p.oc, p.iw, p.ow, p.k, p.stride, p.pad_l, p.src_nwc};
    m_weights.assign(static_cast<size_t>(p.ic * 16), 0.0f);
    const int64_t row = p.oc * p.k;  // ONNX's [ic][oc][k]: row c holds the taps o * k + kk
    for (int64_t c = 0; c < p.ic; ++c) std::copy(p.weights + c * row, p.weights + (c + 1) * row, m_weights.begin() + c * 16);
    m_bias.assign(static_cast<size_t>(p.oc), 0.0f);
    if (p.bias) std::copy(p.bias, p.bias + p.oc, m_bias.begin());
  }
  std::size_t scratch_bytes() const override { return static_cast<std::size_t>(m_g.iw * 16) * sizeof(float); }
  void run(const ExecContext& ctx, StepState*) const override {
    m_fn(m_g, resolve(ctx, m_src), m_weights.data(), m_bias.data(), resolve(ctx, m_dst), m_dst_nwc,
         static_cast<float*>(ctx.scratchpad));
  }

 private:
  Loc m_src, m_dst;
  bool m_dst_nwc;
  SmallDeconvFn m_fn;
  SmallConvGeometry m_g;
  std::vector<float> m_weights;  // [ic][16]
  std::vector<float> m_bias;     // [oc]
};

// ConvParams::amx_f32: per batch element one product over the input windows (AmxF32Gemm): output
// position t reads the k * ic values from position t * stride - pad_l on, channels-last - a row at
// stride `stride * ic`, overlapping its neighbours. The element's input is split once into the
// tile unit's three bfloat16 planes, between zero paddings (run_planes), rather than once per
// window (k / stride times over). The activation (none, SiLU or ReLU: what the planner lets
// through) then runs over the element's output while it is in L2.
class AmxConv final : public Step {
 public:
  explicit AmxConv(const ConvParams& p)
      : m_p(p),
        m_gemm(p.ic * p.k, p.oc, p.weights, AmxF32Gemm::Layout::kConvOIW, p.bias, p.ic),
        m_plane(round_up32(std::max(m_gemm.plane_elems(p.ow, p.stride * p.ic), (p.pad_l + p.iw) * p.ic + 16))),
        m_post(activation_fn(p)) {}
  std::size_t scratch_bytes() const override { return gemm_scratch_at() + m_gemm.scratch_bytes(); }
  void run(const ExecContext& ctx, StepState*) const override {
    const ConvParams& p = m_p;
    auto* planes = static_cast<uint16_t*>(ctx.scratchpad);
    const int64_t lead = p.pad_l * p.ic, body = p.iw * p.ic;
    const int64_t written = (body + 15) / 16 * 16;  // split_to_planes writes whole vectors
    for (int q = 0; q < 3; ++q) {  // the zero paddings (and what the tiles read past them)
      std::fill(planes + q * m_plane, planes + q * m_plane + lead, uint16_t{0});
      std::fill(planes + q * m_plane + lead + written, planes + (q + 1) * m_plane, uint16_t{0});
    }
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    void* gemm_scratch = static_cast<char*>(ctx.scratchpad) + gemm_scratch_at();
    for (int64_t n = 0; n < p.n; ++n) {
      AmxF32Gemm::split_to_planes(x + n * body, body, planes + lead, m_plane);
      float* yn = y + n * p.ow * p.oc;
      m_gemm.run_planes(p.ow, planes, m_plane, p.stride * p.ic, yn, p.oc, gemm_scratch);
      if (m_post) m_post(yn, p.ow * p.oc);
    }
  }

 private:
  static int64_t round_up32(int64_t v) { return (v + 31) / 32 * 32; }
  std::size_t gemm_scratch_at() const { return align64(static_cast<std::size_t>(3 * m_plane) * sizeof(uint16_t)); }
  ConvParams m_p;
  AmxF32Gemm m_gemm;
  int64_t m_plane;  // uint16 per plane, a multiple of 32 (planes stay 64-byte aligned)
  ActivationFn m_post;  // the activation over the output (silu_fn's or ReLU), or null
};

// A float32 convolution below AVX-512 for which oneDNN has no direct kernel (it would run its
// im2col GEMM or its reference loops: the CRF encoders' 16 -> F, k 31, stride 10 layer under
// AVX2, its GEMM at ~0.35x the FMA peak), channels-last in and out: as AmxConv, output position t is the product of the k * ic
// values from input position t * stride - pad_l on (a row of a matrix whose rows lie `stride * ic`
// apart, overlapping) with the weights, here on gemm_acc_fn over a padded panel of them, each
// output the FMA chain over its window in order after the bias. Per batch element the input is
// copied once between zero paddings; the activation (none, SiLU or ReLU) then runs over the
// element's output.
class FmaConv final : public Step {
 public:
  static bool handles(const ConvParams& p) {
    const bool post_ok = activation_only(p);
    if (!fma_gemm_products() || p.transposed || p.dilation != 1 || !p.src_nwc || !p.dst_nwc || p.bf16 ||
        p.src_bf16 || p.dst_bf16 || p.amx_f32 || !post_ok) {
      return false;
    }
    const std::string_view impl = conv_primitive_desc(p).impl_info_str();  // "x64:gemm:jit", "ref:any", ...
    return impl.find("gemm") != std::string_view::npos || impl.rfind("ref", 0) == 0;
  }
  explicit FmaConv(const ConvParams& p)
      : m_p(p),
        m_gemm(gemm_acc_fn(simd_level())),
        m_padded(((p.ow - 1) * p.stride + p.k) * p.ic),
        m_post(activation_fn(p)) {
    // B[kk * ic + c][o] = w[o][c][kk]: ONNX's [oc][ic][k] with strides (1, ld, ic ld).
    m_ld = gemm_panel_ld(p.oc);
    const dnnl::memory::desc panel({p.oc, p.ic, p.k}, dt::f32, dnnl::memory::dims{1, m_ld, p.ic * m_ld});
    const dnnl::memory user(dnnl::memory::desc({p.oc, p.ic, p.k}, dt::f32, tag::oiw), engine(),
                            const_cast<float*>(p.weights));
    m_panel = shared_weights(p.weights, panel, user);
    m_bias.assign(static_cast<size_t>(p.oc), 0.0f);
    if (p.bias) std::copy(p.bias, p.bias + p.oc, m_bias.begin());
  }
  std::size_t scratch_bytes() const override { return static_cast<std::size_t>(m_padded) * sizeof(float); }
  void run(const ExecContext& ctx, StepState*) const override {
    const ConvParams& p = m_p;
    auto* padded = static_cast<float*>(ctx.scratchpad);
    const int64_t lead = std::min(p.pad_l * p.ic, m_padded), body = std::min(p.iw * p.ic, m_padded - lead);
    std::fill(padded, padded + lead, 0.0f);
    std::fill(padded + lead + body, padded + m_padded, 0.0f);
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    for (int64_t n = 0; n < p.n; ++n) {
      std::copy(x + n * p.iw * p.ic, x + n * p.iw * p.ic + body, padded + lead);
      float* yn = y + n * p.ow * p.oc;
      fill_rows_with_bias(yn, p.ow, p.oc, m_bias.data());
      m_gemm(padded, p.stride * p.ic, static_cast<const float*>(m_panel.get()), m_ld, yn, p.oc, p.ow, p.oc, p.k * p.ic);
      if (m_post) m_post(yn, p.ow * p.oc);
    }
  }

 private:
  ConvParams m_p;
  GemmAccFn m_gemm;
  int64_t m_padded;  // floats of one element's padded input: the last window's end
  ActivationFn m_post;
  Buffer m_panel;  // the weights as gemm_acc_fn's [k ic][oc] panel, rows m_ld floats apart
  int64_t m_ld = 0;
  std::vector<float> m_bias;
};

// With MatMulParams::bf16, the input is rounded to bfloat16 into the step's scratch (after
// oneDNN's scratchpad) and the weights are kept in bfloat16; the output stays float32.
class DnnlMatMul final : public DnnlStep {
 public:
  explicit DnnlMatMul(const MatMulParams& p) {
    m_src = p.src;
    m_dst = p.dst;
    const dt in = p.bf16 ? dt::bf16 : dt::f32;
    if (p.bf16) convert_input_to_bf16(static_cast<std::size_t>(p.m * p.k));
    m_src_md = dnnl::memory::desc({p.m, p.k}, in, tag::ab);
    m_dst_md = dnnl::memory::desc({p.m, p.n}, dt::f32, tag::ab);
    const dnnl::memory::desc w_any({p.k, p.n}, in, tag::any);
    const dnnl::memory::desc w_user({p.k, p.n}, dt::f32, tag::ab);
    const dnnl::memory::desc b_md({1, p.n}, dt::f32, tag::ab);
    dnnl::matmul::desc d(m_src_md, w_any, p.bias ? b_md : dnnl::memory::desc(), m_dst_md);
    dnnl::matmul::primitive_desc pd(d, make_attr(p.post_ops), engine());
    m_prim = dnnl::matmul(pd);
    m_scratch_md = pd.scratchpad_desc();
    const dnnl::memory::desc w_md = pd.weights_desc();
    dnnl::memory user(w_user, engine(), const_cast<float*>(p.weights));
    add_const(DNNL_ARG_WEIGHTS, w_md, shared_weights(p.weights, w_md, user));
    if (p.bias) add_const(DNNL_ARG_BIAS, b_md, plain_copy(p.bias, static_cast<size_t>(p.n)));
  }
};

// y[rows][N] = x[rows][K] w (+ bias) for a few fixed row counts (a full block of rows and the
// shorter last one), one oneDNN matmul each, over caller-given pointers: the blocked products of
// GemmLstm (the input projections, float32 or bf16) and DnnlMatMulBlankPad. `w` is float32
// [K][N] in the layout `w_tag` (ab: row-major [K][N]; ba: [N][K], i.e. W^T), kept in the
// primitives' layout and type (shared by every plan of the model); `in` is the input's type (f32
// or bf16); y is float32. A float32 product where fma_gemm_products() runs gemm_acc_fn over a
// panel of w instead (each output the chain of its K products in order, after the bias).
class RowBlockMatMul {
 public:
  RowBlockMatMul(std::initializer_list<int64_t> row_counts, int64_t k, int64_t n, dt in, const float* w, tag w_tag,
                 const float* bias)
      : m_n(n), m_k(k) {
    if (bias) m_bias = plain_copy(bias, static_cast<size_t>(n));
    if (in == dt::f32 && fma_gemm_products()) {
      m_panel = shared_gemm_panel(w, k, n, w_tag, &m_ld);
      m_gemm = gemm_acc_fn(simd_level());
      return;
    }
    for (int64_t rows : row_counts) {
      if (rows > 0 && std::none_of(m_prims.begin(), m_prims.end(), [&](const Prim& q) { return q.rows == rows; })) {
        m_prims.push_back(make(rows, k, n, in, w, w_tag));
      }
    }
  }
  std::size_t scratch_bytes() const {
    std::size_t b = 0;
    for (const Prim& q : m_prims) b = std::max(b, q.scratch_md.get_size());
    return b;
  }

  struct State {
    struct Bound {
      dnnl::memory src, dst, scratch, weights, bias;
      std::vector<dnnl_exec_arg_t> args;
    };
    std::vector<Bound> bound;  // one per primitive
  };
  State bind() const {
    State st;
    for (const Prim& q : m_prims) {
      State::Bound b;
      b.src = dnnl::memory(q.src_md, engine(), DNNL_MEMORY_NONE);
      b.dst = dnnl::memory(q.dst_md, engine(), DNNL_MEMORY_NONE);
      b.scratch = dnnl::memory(q.scratch_md, engine(), DNNL_MEMORY_NONE);
      b.weights = dnnl::memory(q.weights_md, engine(), q.weights.get());
      b.args = {{DNNL_ARG_SRC, b.src.get()}, {DNNL_ARG_WEIGHTS, b.weights.get()}, {DNNL_ARG_DST, b.dst.get()},
                {DNNL_ARG_SCRATCHPAD, b.scratch.get()}};
      if (m_bias) {
        b.bias = dnnl::memory(bias_md(), engine(), m_bias.get());
        b.args.push_back({DNNL_ARG_BIAS, b.bias.get()});
      }
      st.bound.push_back(std::move(b));
    }
    return st;
  }
  // y = x w (+ bias) for `rows`, one of the row counts given at construction.
  void run(int64_t rows, const void* x, float* y, void* scratch, void* stream, State& st) const {
    if (m_gemm) return run_fma(rows, static_cast<const float*>(x), y);
    size_t i = 0;
    while (m_prims[i].rows != rows) ++i;
    State::Bound& b = st.bound[i];
    dnnl_memory_set_data_handle(b.src.get(), const_cast<void*>(x));
    dnnl_memory_set_data_handle(b.dst.get(), y);
    dnnl_memory_set_data_handle(b.scratch.get(), scratch);
    dnnl_primitive_execute(m_prims[i].prim.get(), static_cast<dnnl_stream_t>(stream), static_cast<int>(b.args.size()),
                           b.args.data());
  }

 private:
  struct Prim {
    int64_t rows = 0;
    dnnl::primitive prim;
    dnnl::memory::desc src_md, dst_md, weights_md, scratch_md;
    Buffer weights;
  };
  void run_fma(int64_t rows, const float* x, float* y) const {
    fill_rows_with_bias(y, rows, m_n, static_cast<const float*>(m_bias.get()));
    m_gemm(x, m_k, static_cast<const float*>(m_panel.get()), m_ld, y, m_n, rows, m_n, m_k);
  }
  dnnl::memory::desc bias_md() const { return dnnl::memory::desc({1, m_n}, dt::f32, tag::ab); }
  Prim make(int64_t rows, int64_t k, int64_t n, dt in, const float* w, tag w_tag) const {
    Prim q;
    q.rows = rows;
    q.src_md = dnnl::memory::desc({rows, k}, in, tag::ab);
    q.dst_md = dnnl::memory::desc({rows, n}, dt::f32, tag::ab);
    dnnl::matmul::desc d(q.src_md, dnnl::memory::desc({k, n}, in, tag::any),
                         m_bias ? bias_md() : dnnl::memory::desc(), q.dst_md);
    dnnl::matmul::primitive_desc pd(d, make_attr({}), engine());
    q.prim = dnnl::matmul(pd);
    q.scratch_md = pd.scratchpad_desc();
    q.weights_md = pd.weights_desc();
    dnnl::memory user(dnnl::memory::desc({k, n}, dt::f32, w_tag), engine(), const_cast<float*>(w));
    q.weights = shared_weights(w, q.weights_md, user);
    return q;
  }
  int64_t m_n, m_k;
  Buffer m_bias;
  std::vector<Prim> m_prims;
  Buffer m_panel;              // with m_gemm: w as gemm_acc_fn's panel, rows m_ld floats apart
  int64_t m_ld = 0;
  GemmAccFn m_gemm = nullptr;  // set where fma_gemm_products() (no primitives then)
};

// MatMulParams::blank_pad: the product a block of rows at a time into scratch (kBlockBytes of
// output, L2-resident), then bonito's blank column, tanh and scale from there into the padded
// output (blank_pad_tanh_fn). With bf16, the whole input is converted once first, as DnnlMatMul
// does; with amx_f32 the product runs on the tile unit (AmxF32Gemm) instead of oneDNN.
class DnnlMatMulBlankPad final : public Step {
 public:
  explicit DnnlMatMulBlankPad(const MatMulParams& p)
      : m_p(p),
        m_pad(blank_pad_tanh_fn(simd_level())),
        m_block_rows(std::clamp<int64_t>(kBlockBytes / (p.n * static_cast<int64_t>(sizeof(float))), 1, p.m)) {
    if (p.amx_f32) {
      m_amx = std::make_unique<AmxF32Gemm>(p.k, p.n, p.weights, AmxF32Gemm::Layout::kKN, p.bias);
    } else {
      m_mm = std::make_unique<RowBlockMatMul>(std::initializer_list<int64_t>{m_block_rows, p.m % m_block_rows}, p.k, p.n,
                                              p.bf16 ? dt::bf16 : dt::f32, p.weights, tag::ab, p.bias);
    }
  }
  // Scratch: the block's product, the converted input (bf16), oneDNN's scratchpad or the tile
  // kernel's.
  std::size_t scratch_bytes() const override {
    return dnnl_scratch_at() + (m_amx ? m_amx->scratch_bytes() : m_mm->scratch_bytes());
  }
  std::unique_ptr<StepState> bind() const override {
    auto st = std::make_unique<State>();
    if (m_mm) st->mm = m_mm->bind();
    return st;
  }
  void run(const ExecContext& ctx, StepState* state) const override {
    char* scratch = static_cast<char*>(ctx.scratchpad);
    auto* block_out = reinterpret_cast<float*>(scratch);
    const char* x = reinterpret_cast<const char*>(resolve(ctx, m_p.src));
    size_t elem = sizeof(float);
    if (m_p.bf16) {
      auto* converted = reinterpret_cast<uint16_t*>(scratch + converted_at());
      convert_to_bf16(resolve(ctx, m_p.src), converted, in_elems());
      x = reinterpret_cast<const char*>(converted);
      elem = sizeof(uint16_t);
    }
    float* y = resolve(ctx, m_p.dst);
    const int64_t out_row = m_p.n / 4 * 5;
    const MatMulParams::BlankPad& bp = *m_p.blank_pad;
    if (m_amx) return run_amx(reinterpret_cast<const float*>(x), y, scratch);
    for (int64_t first = 0; first < m_p.m; first += m_block_rows) {
      const int64_t rows = std::min(m_block_rows, m_p.m - first);
      m_mm->run(rows, x + static_cast<size_t>(first * m_p.k) * elem, block_out, scratch + dnnl_scratch_at(),
                ctx.dnnl_stream, static_cast<State*>(state)->mm);
      m_pad(block_out, y + first * out_row, rows * m_p.n / 4, bp.blank, bp.alpha, bp.beta);
    }
  }

 private:
  static constexpr int64_t kBlockBytes = 256 << 10;
  struct State final : StepState {
    RowBlockMatMul::State mm;
  };

  // A finished block's blank pad, a slice per step (AmxSideWork): one round of the AVX-512 pad
  // (16 runs of 4 scores) is about a group of tile products long.
  struct PadCursor {
    static constexpr int64_t kRunsPerStep = 16;
    BlankPadTanhFn pad;
    MatMulParams::BlankPad bp;
    const float* x = nullptr;
    float* y = nullptr;
    int64_t runs = 0, done = 0;
    void advance(int64_t n) {
      n = std::min(n, runs - done);
      if (n <= 0) return;
      pad(x + done * 4, y + done * 5, n, bp.blank, bp.alpha, bp.beta);
      done += n;
    }
    static void step(void* self) { static_cast<PadCursor*>(self)->advance(kRunsPerStep); }
  };

  // On the tile unit: block i + 1's product runs while the vector ports pad block i (two output
  // blocks in scratch, used in turn).
  void run_amx(const float* x, float* y, char* scratch) const {
    const int64_t out_row = m_p.n / 4 * 5;
    PadCursor pad{m_pad, *m_p.blank_pad};
    const AmxSideWork side{&PadCursor::step, &pad};
    for (int64_t first = 0, b = 0; first < m_p.m; first += m_block_rows, ++b) {
      const int64_t rows = std::min(m_block_rows, m_p.m - first);
      float* out = reinterpret_cast<float*>(scratch + static_cast<size_t>(b & 1) * block_bytes());
      m_amx->run(rows, x + first * m_p.k, out, scratch + dnnl_scratch_at(), side);
      pad.advance(pad.runs);  // what the product left of the previous block
      pad.x = out;
      pad.y = y + first * out_row;
      pad.runs = rows * m_p.n / 4;
      pad.done = 0;
    }
    pad.advance(pad.runs);
  }

  std::size_t in_elems() const { return static_cast<std::size_t>(m_p.m * m_p.k); }
  std::size_t block_bytes() const { return align64(static_cast<std::size_t>(m_block_rows * m_p.n) * sizeof(float)); }
  std::size_t converted_at() const { return block_bytes() * (m_amx ? 2 : 1); }
  std::size_t dnnl_scratch_at() const {
    return converted_at() + (m_p.bf16 ? align64(in_elems() * sizeof(uint16_t)) : 0);
  }

  MatMulParams m_p;
  BlankPadTanhFn m_pad;
  int64_t m_block_rows;
  std::unique_ptr<RowBlockMatMul> m_mm;  // one of these two
  std::unique_ptr<AmxF32Gemm> m_amx;
};

// MatMulParams::amx_f32 without a blank pad: y = x w (+ bias) on the tile unit, all rows at once.
class AmxMatMul final : public Step {
 public:
  explicit AmxMatMul(const MatMulParams& p) : m_p(p), m_gemm(p.k, p.n, p.weights, AmxF32Gemm::Layout::kKN, p.bias) {}
  std::size_t scratch_bytes() const override { return m_gemm.scratch_bytes(); }
  void run(const ExecContext& ctx, StepState*) const override {
    m_gemm.run(m_p.m, resolve(ctx, m_p.src), resolve(ctx, m_p.dst), ctx.scratchpad);
  }

 private:
  MatMulParams m_p;
  AmxF32Gemm m_gemm;
};

// LSTM as GEMMs plus a fused cell: the input projections of a block of time steps in one sgemm
// ([Tb*N, C] x [C, 4H]), then per time step one sgemm of the previous output rows with R^T
// accumulated into that step's gates, and the vectorised cell (simd.cpp) writing h straight into
// the output. Blocks of steps keep the gates in L2 (all T steps at once is 79 MB at H = 128,
// batch 64, chunk 3000 / stride 5: the recurrence then streamed them from memory). At batch 1
// this is ~10x faster than oneDNN 2.6's LSTM primitive (whose per-step overhead dominates there;
// bench/results/nn.md), so the primitive is not used.
class GemmLstm final : public Step {
 public:
  explicit GemmLstm(const LstmParams& p)
      : m_p(p), m_cell(lstm_cell_fn(simd_level())), m_gemm(gemm_acc_fn(simd_level())) {
    if (p.int8_recurrent) {
      m_r_int8 = quantise_recurrent(p.r, 4 * p.h, p.h);
    } else if (p.bf16_recurrent) {
      m_rt = bf16_recurrent_panel(p, &m_rt_ld);
    } else {
      m_rt = shared_gemm_panel(p.r, p.h, 4 * p.h, tag::ba, &m_rt_ld);  // R [4H][H] -> R^T [H][4H]
    }
    m_bias = plain_copy(p.bias, static_cast<size_t>(4 * p.h));
    m_block_steps = gate_block_steps(p);
    // x W^T per block of steps (in bfloat16 with bf16_input, on the tile unit with
    // amx_f32_input): W is [4H][C], i.e. [C][4H] transposed (ba).
    if (p.amx_f32_input) {
      m_amx = std::make_unique<AmxF32Gemm>(p.c, 4 * p.h, p.w, AmxF32Gemm::Layout::kNK, nullptr);
    } else {
      m_proj = std::make_unique<RowBlockMatMul>(std::initializer_list<int64_t>{m_block_steps * p.n, (p.t % m_block_steps) * p.n},
                                                p.c, 4 * p.h, p.bf16_input ? dt::bf16 : dt::f32, p.w, tag::ba, nullptr);
    }
  }
  // Scratch: the gates of a block of steps and c (float32); with bf16_recurrent, one step's h in
  // bfloat16; with bf16_input, x in bfloat16; then the projection's oneDNN scratchpad or the tile
  // kernel's.
  std::size_t scratch_bytes() const override {
    return dnnl_scratch_at() + (m_amx ? m_amx->scratch_bytes() : m_proj->scratch_bytes());
  }
  std::unique_ptr<StepState> bind() const override {
    auto st = std::make_unique<ProjectionState>();
    if (m_proj) st->projection = m_proj->bind();
    return st;
  }
  void run(const ExecContext& ctx, StepState* state) const override {
    const LstmParams& p = m_p;
    const int64_t H = p.h, G = 4 * p.h, N = p.n;
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    float* gx = static_cast<float*>(ctx.scratchpad);
    float* c = gx + m_block_steps * N * G;
    const float* bias = static_cast<const float*>(m_bias.get());
    auto* h_bf16 = reinterpret_cast<uint16_t*>(static_cast<char*>(ctx.scratchpad) + h_bf16_at());
    std::fill(c, c + N * H, 0.0f);
    const void* xin = x;  // the projection's input: x, or x converted to bfloat16
    size_t xin_row = p.c * sizeof(float);
    if (m_p.bf16_input) {
      auto* xb = reinterpret_cast<uint16_t*>(static_cast<char*>(ctx.scratchpad) + converted_at());
      convert_to_bf16(x, xb, static_cast<size_t>(p.t * N * p.c));
      xin = xb;
      xin_row = p.c * sizeof(uint16_t);
    }
    for (int64_t first = 0; first < p.t; first += m_block_steps) {  // in processing order
      const int64_t nb = std::min(m_block_steps, p.t - first);
      const int64_t lo = p.reverse ? p.t - first - nb : first;  // the block is steps [lo, lo + nb)
      const void* block_x = static_cast<const char*>(xin) + lo * N * xin_row;
      void* proj_scratch = static_cast<char*>(ctx.scratchpad) + dnnl_scratch_at();
      if (m_amx) {
        m_amx->run(nb * N, static_cast<const float*>(block_x), gx, proj_scratch);
      } else {
        m_proj->run(nb * N, block_x, gx, proj_scratch, ctx.dnnl_stream, static_cast<ProjectionState*>(state)->projection);
      }
      for (int64_t step = first; step < first + nb; ++step) {
        const int64_t t = p.reverse ? p.t - 1 - step : step;
        float* g = gx + (t - lo) * N * G;
        if (step > 0) recurrent_product(y + (p.reverse ? t + 1 : t - 1) * N * H, g, h_bf16);
        m_cell(g, bias, c, y + t * N * H, N, H, H);
      }
    }
  }

 private:
  // g += h_prev R^T for the N rows of one step, in the step's precision (h_bf16: scratch for
  // h_prev rounded to bfloat16, as the next layer's bfloat16 projection rounds it).
  void recurrent_product(const float* h_prev, float* g, uint16_t* h_bf16) const {
    const int64_t H = m_p.h, G = 4 * m_p.h, N = m_p.n;
    if (m_p.int8_recurrent) {
      gemv_acc_int8(m_r_int8, h_prev, H, g, G, N);
    } else if (m_p.bf16_recurrent) {
      convert_to_bf16(h_prev, h_bf16, static_cast<size_t>(N * H));
      gemm_acc_bf16(h_bf16, H, static_cast<const uint32_t*>(m_rt.get()), m_rt_ld, g, G, N, G, H);
    } else {
      m_gemm(h_prev, H, static_cast<const float*>(m_rt.get()), m_rt_ld, g, G, N, G, H);
    }
  }

  // R^T [H][4H] as gemm_acc_bf16's panel of bfloat16 pairs, rows *ld words apart (an odd number
  // of cache lines, as shared_gemm_panel's). Each plan packs its own (~H * 4H * 2 bytes).
  static Buffer bf16_recurrent_panel(const LstmParams& p, int64_t* ld) {
    *ld = gemm_panel_ld(4 * p.h);
    const size_t bytes = align64(static_cast<size_t>(bf16_pairs_rows(p.h) * *ld) * sizeof(uint32_t));
    Buffer panel(std::aligned_alloc(64, bytes), AlignedFree{});
    pack_bf16_pairs(p.r, 1, p.h, p.h, 4 * p.h, static_cast<uint32_t*>(panel.get()), *ld);  // B[k][j] = R[j][k]
    return panel;
  }

  // Time steps whose gates fit in ~256 KB (an eighth of a core's L2 on the AMX CPUs, half on
  // older ones), at least one; on the tile unit ~1 MB, in a whole number of 32-row blocks where
  // that fits (a short block computes 32 rows all the same): each projection call splits its
  // first row block with nothing to hide it behind and wakes the tile unit from idle, and with 4x
  // fewer calls the encoder ran 1.04-1.06x faster at B 1, 4 and 16 (bench/results/crf_encoder.md,
  // Session 15); the FMA path's time did not change.
  static int64_t gate_block_steps(const LstmParams& p) {
    const int64_t block_bytes = (p.amx_f32_input ? int64_t{1024} : int64_t{256}) << 10;
    const int64_t step_bytes = p.n * 4 * p.h * static_cast<int64_t>(sizeof(float));
    int64_t steps = std::clamp<int64_t>(block_bytes / std::max<int64_t>(1, step_bytes), 1, std::max<int64_t>(1, p.t));
    if (p.amx_f32_input && steps < p.t) {
      const int64_t whole = 32 / std::gcd<int64_t>(32, p.n);  // steps per whole number of 32-row blocks
      if (steps >= whole) steps -= steps % whole;
    }
    return steps;
  }

  struct ProjectionState final : StepState {
    RowBlockMatMul::State projection;
  };
  std::size_t float_scratch_bytes() const {
    return static_cast<std::size_t>(m_block_steps * m_p.n * 4 * m_p.h + m_p.n * m_p.h) * sizeof(float);
  }
  std::size_t h_bf16_at() const { return align64(float_scratch_bytes()); }
  std::size_t converted_at() const {
    if (!m_p.bf16_recurrent) return h_bf16_at();
    return h_bf16_at() + align64(static_cast<std::size_t>(m_p.n * m_p.h) * sizeof(uint16_t));
  }
  std::size_t dnnl_scratch_at() const {
    if (!m_p.bf16_input) return converted_at();
    return converted_at() + align64(static_cast<std::size_t>(m_p.t * m_p.n * m_p.c) * sizeof(uint16_t));
  }

  LstmParams m_p;
  LstmCellFn m_cell;
  GemmAccFn m_gemm;
  Buffer m_rt, m_bias;  // R^T as gemm_acc_fn's panel (rows m_rt_ld floats apart) or gemm_acc_bf16's, the gate bias
  int64_t m_rt_ld = 0;
  Int8Recurrent m_r_int8;  // R quantised when p.int8_recurrent (then m_rt goes unused)
  std::unique_ptr<RowBlockMatMul> m_proj;  // the input projection x W^T: oneDNN's,
  std::unique_ptr<AmxF32Gemm> m_amx;       // or the tile unit's
  int64_t m_block_steps = 1;
};

template <typename StepT, typename Params>
std::unique_ptr<Step> make_guarded(const Params& p, std::string* error) {
  try {
    return std::make_unique<StepT>(p);
  } catch (const dnnl::error& e) {
    if (error) *error = fmt::format("{} (status {})", e.what(), static_cast<int>(e.status));
  } catch (const std::exception& e) {
    if (error) *error = e.what();
  }
  return nullptr;
}

}  // namespace

bool conv_takes_bf16(const ConvParams& p) {
  return !p.transposed && p.ic * p.k > SmallConv::kMaxTaps;  // never SmallConv's: it takes ic * k <= kMaxTaps
}

// RowBlockMatMul's float32 products run on gemm_acc_fn instead of oneDNN below AVX-512, where
// oneDNN 2.6's matmul ran the CRF encoder's shapes ([64 x 96] x [96 x 1024], the LSTM's [Tb N x C]
// x [C x 4H]) at ~0.4-0.7x the FMA peak and the register-blocked kernel over a padded panel at
// ~0.85x (nn_simd_bench DenseProductFma; bench/results/cpu_kinds.md, Session 22). At AVX-512
// oneDNN's runs at the peak. (SSE4.1 keeps oneDNN's: not measured there.)
bool fma_gemm_products() { return simd_level() == SimdLevel::kAvx2; }

bool conv_writes_plain_cheaply(const ConvParams& p) { return SmallDeconv::handles(p); }

bool conv_writes_bf16(const ConvParams& p) { return SmallConv::handles(p) || p.bf16; }  // bf16: never transposed

std::unique_ptr<Step> make_dnnl_conv(const ConvParams& p, std::string* error) {
  if (SmallConv::handles(p)) return std::make_unique<SmallConv>(p);
  if (SmallDeconv::handles(p)) return std::make_unique<SmallDeconv>(p);
  if (FmaConv::handles(p)) return std::make_unique<FmaConv>(p);
  return p.amx_f32 ? make_guarded<AmxConv>(p, error) : make_guarded<DnnlConv>(p, error);
}
std::unique_ptr<Step> make_dnnl_matmul(const MatMulParams& p, std::string* error) {
  if (p.blank_pad) return make_guarded<DnnlMatMulBlankPad>(p, error);
  return p.amx_f32 ? make_guarded<AmxMatMul>(p, error) : make_guarded<DnnlMatMul>(p, error);
}
std::unique_ptr<Step> make_dnnl_lstm(const LstmParams& p, std::string* error) { return make_guarded<GemmLstm>(p, error); }

std::shared_ptr<void> make_dnnl_stream() {
  auto s = std::make_shared<dnnl::stream>(engine());
  return std::shared_ptr<void>(s, s->get());
}

void dnnl_wait(void* stream) { dnnl_stream_wait(static_cast<dnnl_stream_t>(stream)); }

Status dnnl_set_max_isa(Isa isa) {
  dnnl::cpu_isa want = dnnl::cpu_isa::all;
  if (isa == Isa::kAvx2) want = dnnl::cpu_isa::avx2;
  if (isa == Isa::kAvx512) want = dnnl::cpu_isa::avx512_core;
  try {
    dnnl::set_max_cpu_isa(want);
  } catch (const dnnl::error& e) {
    return Status::invalid_argument(fmt::format("cannot cap the instruction set now: {} (call before loading a model)", e.what()));
  }
  if (isa == Isa::kAvx512 && dnnl::get_effective_cpu_isa() < dnnl::cpu_isa::avx512_core) {
    return Status::invalid_argument("this CPU has no AVX-512");
  }
  return Status::ok();
}

std::string dnnl_version_text() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string dnnl_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace escpod::nn::detail
