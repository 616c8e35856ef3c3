// A small CPU inference engine for the signal models we run: the boundary CNN/TCN (adapter
// detection) and the CTC-CRF encoder. It loads one ONNX graph, checks every operator against the
// short list it implements, and runs it through a plan computed once per input shape.
//
// Thread model: a Model holds the (one) copy of the weights and the per-shape plans and is safe
// to share between threads (`run` is const and re-entrant). Each worker owns one Workspace: its
// activation arena, kernel scratchpad and per-step bindings. A Workspace is used by one thread at
// a time. No call spawns threads; kernels run on the calling thread (plus the persistent OpenMP
// team of that thread when the Workspace was given more than one thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::nn {

class Model;
struct LoadOptions;

namespace detail {
struct ModelImpl;
struct WorkspaceState;
struct Graph;
// Makes a Model from a graph built in code (graph_builder.cpp); defined in model.cpp.
Result<Model> make_model(Graph graph, const LoadOptions& options);
}  // namespace detail

// Which kernels execute the plan.
enum class Backend {
  kOptimised,  // oneDNN primitives (convolution, deconvolution, LSTM, matmul) with fused
               // activations; the instruction set is oneDNN's best for this CPU, capped by
               // set_max_isa() or the ONEDNN_MAX_CPU_ISA environment variable
  kReference,  // plain scalar C++ loops written from the ONNX operator definitions
};

// Options for Model::load.
struct LoadOptions {
  Backend backend = Backend::kOptimised;
  // int8 recurrent weights in the LSTM steps (per-gate-row scales, h rounded to u8 each step;
  // src/nn/lstm_int8.hpp): ~4x fewer bytes per step than float32, but the outputs move (not
  // within float32 tolerance), so off by default. Taken only by the optimised backend on a CPU
  // with AVX-512 VNNI (and oneDNN's ISA cap at AVX-512); elsewhere float32 runs (the CLI's
  // `--encoder-precision int8`). `describe_plan` marks the LSTM steps that use it ("R int8").
  bool lstm_int8 = false;
  // bfloat16 operands with float32 accumulation in the dense products: the LSTM's input
  // projections and its recurrence (each step's h rounded as the next layer's input is) and the
  // MatMul steps (src/nn/gemm_bf16.hpp). oneDNN runs the projections and MatMuls on the tile unit
  // on a CPU with AMX, elsewhere with the AVX512_BF16 dot products; the recurrence runs on
  // escpod's dot-product kernel. Outputs move, so off by default. Taken only by the optimised
  // backend where oneDNN's ISA (within its cap) is avx512_core_bf16 or avx512_core_amx; elsewhere
  // float32 runs (the CLI's `--encoder-precision bf16`). `describe_plan` marks the steps that use
  // it ("bf16"; an LSTM "Wx bf16 R bf16").
  bool bf16_gemm = false;
  // bfloat16 input and weights with float32 accumulation in the convolutions with many inputs
  // per output (ic * k > 64: the boundary CNN's 64 -> 64 layers; the layers over the raw signal
  // and the transposed ones stay float32): ~2x float32 on a core with AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids). The
  // outputs move within bfloat16 rounding, so off by default. Taken only by the optimised backend
  // where oneDNN has AVX512_BF16 within its ISA cap; elsewhere float32 runs. `describe_plan` marks
  // the steps that use it ("bf16").
  bool bf16_conv = false;
  // float32 dense products (the LSTM's input projections, the MatMul steps without fused
  // activations) on the AMX tile unit, each operand split into three exact bfloat16 terms
  // (src/nn/gemm_amx.hpp): float32 accuracy - within (k + 2) * 2^-24 of the exact product, as an
  // FMA sgemm - at 1.4-1.9x its speed. On by default; taken only by the optimised backend on a CPU
  // with AMX (within oneDNN's ISA cap) for products with a multiple of 32 outputs and at least 64
  // inputs, and not when bf16_gemm is (the CLI's `--encoder-precision f32-fma` turns it off).
  // `describe_plan` marks the steps that use it ("amx-f32").
  bool amx_f32 = true;
};

// One graph input or output as declared in the file. `dims[i]` is -1 where the dimension is
// symbolic (its name in `dim_params[i]`, possibly empty) or absent.
struct ValueInfo {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_params;
};

// What `escpod model info` prints. Operator counts are those of the file, before any folding.
struct ModelInfo {
  std::string source;          // path (or label) the model was loaded from
  std::string producer;        // producer_name and producer_version from the file
  int64_t ir_version = 0;
  int64_t opset = 0;           // default-domain opset (13 to 17 are accepted)
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<std::pair<std::string, int>> op_counts;  // operator type -> nodes, sorted by name
  int64_t n_parameters = 0;    // elements of all float initializers
};

class Model;

// Per-worker scratch: activation arena (one allocation, activations ping-pong inside it), kernel
// scratchpad and the bindings of the plans used (up to 16 input shapes, so a worker alternating
// between a few batch sizes binds each once). Built empty; sized on first use of a shape and
// reused afterwards, so steady-state runs allocate nothing. Not thread-safe: one worker each.
class Workspace {
 public:
  // `n_threads` OpenMP threads are used by the kernels of each call (1 = the calling thread only,
  // the usual choice when each worker thread owns its own Workspace). Must be >= 1.
  explicit Workspace(int n_threads = 1);
  ~Workspace();
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) noexcept;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  int n_threads() const;
  // Bytes currently held (arena plus scratchpad).
  std::size_t bytes() const;

 private:
  friend class Model;
  std::unique_ptr<detail::WorkspaceState> m_state;
};

class Model {
 public:
  // Loads and checks an ONNX file (a `.gz` of one is accepted too). Fails with kNotFound /
  // kIoError when the file cannot be read, kCorrupt when it is not an ONNX ModelProto, and
  // kUnsupported naming the operator and node for anything outside the supported set (also:
  // opsets outside 13..17, more than one input or output, non-float32 graph I/O, attributes we
  // do not implement such as Conv groups > 1 or LSTM peepholes). BatchNormalization following a
  // convolution is folded into its weights here.
  static Result<Model> load(const std::filesystem::path& path, const LoadOptions& options = {});
  // Same, from the serialised bytes (uncompressed). `label` names the model in messages.
  static Result<Model> load_from_bytes(std::string_view bytes, std::string_view label,
                                       const LoadOptions& options = {});

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelInfo& info() const;
  Backend backend() const;

  // Shape of the output for an input of `input_shape` (which must match the declared rank and
  // every fixed dimension). Builds (and caches) the plan for that shape: the first call for a
  // shape costs primitive creation and weight reordering; later calls are a lookup.
  // Thread-safe.
  Result<std::vector<int64_t>> output_shape(std::span<const int64_t> input_shape) const;

  // Floating-point operations of one run at `input_shape` (multiply and add counted as 2), from
  // the plan's convolutions, matmuls and LSTMs; element-wise work is not counted.
  Result<double> flops(std::span<const int64_t> input_shape) const;

  // Runs the model. `input` holds the float32 C-order tensor of `input_shape`; `output` receives
  // the C-order output and must hold exactly the product of output_shape(input_shape) elements.
  // Thread-safe across distinct Workspaces; `workspace` must not be used concurrently. After the
  // first call for a shape, no heap allocation happens in our code. Fails with
  // kInvalidArgument on a shape or size mismatch.
  Status run(Workspace& workspace, std::span<const float> input,
             std::span<const int64_t> input_shape, std::span<float> output) const;

  // Mean time of each plan step over `n_runs` runs on zero input at `input_shape`, in the order
  // of describe_plan(), as (description, seconds) pairs. Uses `workspace`. With a one-thread
  // workspace the time is the calling thread's CPU time (every kernel then runs on it, and a
  // shared machine's time slicing does not count); with more threads, wall time.
  Result<std::vector<std::pair<std::string, double>>> profile(Workspace& workspace,
                                                             std::span<const int64_t> input_shape,
                                                             int n_runs) const;

  // The operator sequence of the plan for `input_shape` after folding and fusion, one line per
  // step ("conv1d+silu [1,4,2000] -> ..."), for `model info --plan` and debugging.
  Result<std::vector<std::string>> describe_plan(std::span<const int64_t> input_shape) const;

 private:
  friend Result<Model> detail::make_model(detail::Graph graph, const LoadOptions& options);
  explicit Model(std::unique_ptr<detail::ModelImpl> impl);
  std::unique_ptr<detail::ModelImpl> m_impl;
};

// Instruction sets the optimised backend may be limited to.
enum class Isa { kDefault, kAvx2, kAvx512 };

// Caps the instruction set used by the optimised backend, for the whole process. Must be called
// before the first model is loaded; fails with kInvalidArgument afterwards or when the CPU lacks
// the requested set. The ONEDNN_MAX_CPU_ISA environment variable has the same effect.
Status set_max_isa(Isa isa);

// Name of the instruction set the optimised backend uses now ("avx512_core", "avx2", ...).
std::string effective_isa_name();

// The kernels this CPU (within the ISA caps and environment switches) runs, one line each, for
// `escpod --version` and bug reports: oneDNN's ISA, the level of our vector kernels (LSTM cell,
// blank pad, small convolutions), and where float32 dense products run (AMX tiles or FMA).
std::string kernel_report();

}  // namespace escpod::nn
