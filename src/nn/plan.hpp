// Execution plan for one input shape: an ordered list of steps over one activation arena.
// Built once per shape (build_plan in planner.cpp; its passes are listed in planner_ir.hpp),
// shared read-only by every worker; each worker binds it to its Workspace (arena, scratchpad,
// per-step state such as oneDNN memory objects).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nn/graph.hpp"

namespace escpod::nn::detail {

// Where a tensor lives during a run: an offset (in floats) into the worker's arena, or the
// caller's input or output buffer.
struct Loc {
  enum class Kind : uint8_t { kArena, kInput, kOutput };
  Kind kind = Kind::kArena;
  std::size_t offset = 0;
};

struct ExecContext {
  float* arena = nullptr;
  const float* input = nullptr;
  float* output = nullptr;
  void* scratchpad = nullptr;  // step scratch (bytes), max over steps
  void* dnnl_stream = nullptr; // dnnl_stream_t of the worker, optimised backend only
};

inline float* resolve(const ExecContext& c, Loc l) {
  switch (l.kind) {
    case Loc::Kind::kInput: return const_cast<float*>(c.input) + l.offset;  // read-only use
    case Loc::Kind::kOutput: return c.output + l.offset;
    case Loc::Kind::kArena: break;
  }
  return c.arena + l.offset;
}

// Activation functions fused after a producing kernel, applied in order.
struct PostOp {
  enum class Kind { kRelu, kSigmoid, kTanh, kSilu, kLinear };  // kLinear: alpha * x + beta
  Kind kind = Kind::kRelu;
  float alpha = 1.0f;
  float beta = 0.0f;
};
std::string describe_post_ops(const std::vector<PostOp>& ops);
float apply_post_ops(const std::vector<PostOp>& ops, float v);
// The ReLU of apply_post_ops, for kernels that run it over a whole buffer (a NaN becomes 0).
inline float relu(float v) { return v > 0.0f ? v : 0.0f; }

// Per-worker state of one step (oneDNN memory objects and argument lists).
class StepState {
 public:
  virtual ~StepState() = default;
};

class Step {
 public:
  virtual ~Step() = default;
  // Runs the step. Must not allocate, lock or log.
  virtual void run(const ExecContext& ctx, StepState* state) const = 0;
  // Creates this step's per-worker state, if it needs any.
  virtual std::unique_ptr<StepState> bind() const { return nullptr; }
  virtual std::size_t scratch_bytes() const { return 0; }

  std::string text;    // "conv1d+relu [1,1,1500]->[1,64,500]"
  double flops = 0.0;  // per run
};

struct Plan {
  std::vector<int64_t> input_shape;
  std::vector<int64_t> output_shape;
  std::vector<std::unique_ptr<Step>> steps;
  std::size_t arena_floats = 0;
  std::size_t scratch_bytes = 0;
  double flops = 0.0;
  bool needs_dnnl = false;
  std::vector<std::unique_ptr<Tensor>> owned;  // constants made for this shape (steps point here)
};

// Geometry of a fused 1-D convolution or transposed convolution, [N, C, W] plain layout.
struct ConvParams {
  bool transposed = false;
  int64_t n = 0, ic = 0, oc = 0, iw = 0, ow = 0, k = 0;
  int64_t stride = 1, dilation = 1, pad_l = 0, pad_r = 0;
  const float* weights = nullptr;  // Conv [oc][ic][k]; ConvTranspose [ic][oc][k]
  const float* bias = nullptr;     // [oc] or null
  std::vector<PostOp> post_ops;
  Loc src, dst;
  // Channels-last storage ([N, W, C] in memory) of src / dst; optimised backend only, chosen by
  // the planner for activations that pass between convolutions.
  bool src_nwc = false, dst_nwc = false;
  // float32 on the AMX tile unit (LoadOptions::amx_f32): a product per batch element over the
  // channels-last input windows. The planner sets it for convolutions (not transposed,
  // dilation 1, channels-last in and out, no post-op or one SiLU or ReLU) whose product
  // (ic * k inputs, oc outputs) AmxF32Gemm::shape_ok, where amx_f32_available(); the reference
  // kernel ignores it.
  bool amx_f32 = false;
  // bfloat16 input and weights, float32 accumulation and output (LoadOptions::bf16_conv): set by
  // the planner where bf16_available() and conv_takes_bf16(); the reference kernel ignores
  // it.
  bool bf16 = false;
  // Activations stored in bfloat16 (the planner's choice, optimised backend only): an output of a
  // convolution that conv_writes_bf16 whose every reader is a bfloat16 convolution. The producer
  // rounds as the readers would on reading, so the values are the same and a pass is saved.
  bool src_bf16 = false, dst_bf16 = false;
};

// Whether the convolution takes bfloat16 under LoadOptions::bf16_conv: one with many inputs per
// output (ic * k > 64), where the FLOPs are; the first layers over the raw signal (few inputs per
// output) and the transposed convolutions that produce a network's scores stay float32.
bool conv_takes_bf16(const ConvParams& p);

// y[M, N] = post(x[M, K] * w[K, N] + bias[N]).
struct MatMulParams {
  // Bonito's blank column written by the MatMul itself (optimised backend only; the planner's
  // fuse_blank_pad_into_matmul): y is then [M, N / 4 * 5], each run of 4 outputs v becoming
  // {blank, alpha * tanh(v0) + beta, ...}. Rows are computed a block at a time into scratch
  // small enough for L2 and padded from there, so the unpadded [M, N] never reaches memory.
  struct BlankPad {
    float blank = 0.0f, alpha = 1.0f, beta = 0.0f;
  };
  int64_t m = 0, k = 0, n = 0;
  const float* weights = nullptr;  // [K][N] row-major
  const float* bias = nullptr;     // [N] or null
  std::vector<PostOp> post_ops;
  Loc src, dst;
  // x and w rounded to bfloat16, float32 accumulation (LoadOptions::bf16_gemm; the planner sets
  // it only where bf16_available()). The reference kernel ignores it.
  bool bf16 = false;
  // float32 on the AMX tile unit as split bfloat16 products (LoadOptions::amx_f32; the planner
  // sets it only where amx_f32_available(), not with bf16, and for post-op-free products that
  // AmxF32Gemm::shape_ok). The reference kernel ignores it.
  bool amx_f32 = false;
  std::optional<BlankPad> blank_pad;  // post_ops empty then
};

// ONNX LSTM, one direction, zero initial state, default activations.
// x [T, N, C] -> y [T, N, H] (ONNX's [T, 1, N, H]).
struct LstmParams {
  int64_t t = 0, n = 0, c = 0, h = 0;
  bool reverse = false;
  const float* w = nullptr;     // [4H][C], ONNX gate order i, o, f, c
  const float* r = nullptr;     // [4H][H]
  const float* bias = nullptr;  // [4H] = Wb + Rb
  Loc src, dst;
  // Run h x R^T with int8 R (LoadOptions::lstm_int8; the planner sets it only where
  // lstm_int8_available()). The reference kernel ignores it.
  bool int8_recurrent = false;
  // The input projection x W^T in bfloat16 (as MatMulParams::bf16); GemmLstm only.
  bool bf16_input = false;
  // h x R^T in bfloat16 (R and each step's h rounded, float32 accumulation: gemm_acc_bf16);
  // GemmLstm only, where bf16_available().
  bool bf16_recurrent = false;
  // The input projection in float32 on the AMX tile unit (as MatMulParams::amx_f32).
  bool amx_f32_input = false;
};

// Reference (scalar) kernels and the data-movement steps both backends share.
std::unique_ptr<Step> make_ref_conv(ConvParams p);
std::unique_ptr<Step> make_ref_matmul(MatMulParams p);
std::unique_ptr<Step> make_ref_lstm(LstmParams p);
// Unary post-ops over `n` floats (src may equal dst).
std::unique_ptr<Step> make_eltwise(int64_t n, std::vector<PostOp> ops, Loc src, Loc dst);
// Broadcasting binary op; shapes already expanded to `out_shape`'s rank. A constant operand is
// given by pointer with its Loc ignored.
struct BinaryParams {
  enum class Kind { kAdd, kMul } kind = BinaryParams::Kind::kAdd;
  std::vector<int64_t> out_shape, a_shape, b_shape;
  const float* a_const = nullptr;
  const float* b_const = nullptr;
  Loc a, b, dst;
  std::vector<PostOp> post_ops;
};
std::unique_ptr<Step> make_binary(BinaryParams p);
// dst = src viewed with `in_shape` and strided access: out[i...] = in[start + sum(i_d * step_d)]
// where steps are in elements of the flattened source. Covers Transpose, Slice and copies.
struct StridedCopyParams {
  std::vector<int64_t> out_shape;
  std::vector<int64_t> src_strides;  // per output axis, may be negative
  int64_t src_start = 0;
  Loc src, dst;
  const float* src_const = nullptr;  // when the source is a constant
};
std::unique_ptr<Step> make_strided_copy(StridedCopyParams p);
// Constant pad: dst[out_shape] with src [in_shape] placed at `pads_begin`, the rest `value`.
struct PadParams {
  std::vector<int64_t> in_shape, out_shape, pads_begin;
  float value = 0.0f;
  Loc src, dst;
  // Applied (apply_post_ops) to the copied values, not to `value`: the tanh and scale of the
  // producing MatMul, moved here by the planner for bonito's blank column on the reference
  // backend (fuse_post_ops_into_pad; the optimised backend fuses the pad into the MatMul).
  std::vector<PostOp> post_ops;
};
std::unique_ptr<Step> make_pad(PadParams p);
// Where a PadParams block lands in its output, shared by Pad and the planner's Concat parts:
// row-major strides of out_shape, the flat offset of pads_begin, and the block as `rows`
// contiguous runs of `run` elements (the innermost input axis). Rank at most 8 (the planner
// rejects larger tensors).
struct PadPlacement {
  explicit PadPlacement(const PadParams& p);
  // Copies the contiguous block `src` (shape p.in_shape, the PadParams this was built from) into
  // `dst` (shape p.out_shape) at its place. Cells outside the block are left as they are: Pad
  // fills them first, Concat parts tile the output between them.
  void copy_block(const PadParams& p, const float* src, float* dst) const;

  std::vector<int64_t> out_strides;
  int64_t base = 0, rows = 0, run = 1;
};

// oneDNN implementations (kernels_dnnl.cpp). They return null when oneDNN cannot build the
// primitive, in which case the planner reports an error.
std::unique_ptr<Step> make_dnnl_conv(const ConvParams& p, std::string* error);
// Whether make_dnnl_conv's kernel for `p` writes a plain [N, C, W] output as cheaply as a
// channels-last one (the direct transposed kernel does; oneDNN's are several times slower).
bool conv_writes_plain_cheaply(const ConvParams& p);
// Whether the float32 dense products (LSTM input projections, MatMul steps with a blank pad, and
// the channels-last convolutions oneDNN would run as an im2col GEMM) run on escpod's
// register-blocked FMA kernel (gemm_acc_fn over a padded panel of the weights) rather than
// oneDNN's: below AVX-512 (kernels_dnnl.cpp says why).
bool fma_gemm_products();

// Whether make_dnnl_conv's kernel for `p` (its bf16 and amx_f32 chosen) can write a bfloat16
// output (ConvParams::dst_bf16): the direct kernel, and oneDNN's bfloat16 convolutions.
bool conv_writes_bf16(const ConvParams& p);
std::unique_ptr<Step> make_dnnl_matmul(const MatMulParams& p, std::string* error);
std::unique_ptr<Step> make_dnnl_lstm(const LstmParams& p, std::string* error);
// The per-worker oneDNN stream (opaque), its handle for ExecContext, and the engine-wide ISA cap.
std::shared_ptr<void> make_dnnl_stream();
void dnnl_wait(void* stream);
Status dnnl_set_max_isa(Isa isa);
std::string dnnl_isa_name();
std::string dnnl_version_text();  // "3.0.0"

// Folds a node whose inputs are all constant (`in[i]` null for omitted inputs). Returns false
// when the operator cannot be folded here (it then stays a runtime node).
Result<bool> fold_node(const Node& node, const std::vector<const Tensor*>& in,
                       std::vector<Tensor>& out);

// Builds the plan for `input_shape`.
// `options`: the backend, and the reduced-precision paths asked for (lstm_int8, bf16_gemm; each
// taken only by the optimised backend where this CPU runs it).
Result<std::unique_ptr<Plan>> build_plan(const Graph& graph, std::span<const int64_t> input_shape,
                                         const LoadOptions& options);

}  // namespace escpod::nn::detail
