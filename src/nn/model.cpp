// Model and Workspace: loading, the per-shape plan cache and execution.
#include "escpod/nn/model.hpp"

#include <omp.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstring>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

#include "escpod/core/log.hpp"

#include "nn/gemm_amx.hpp"
#include "nn/gemm_bf16.hpp"
#include "nn/graph.hpp"
#include "nn/simd.hpp"
#include "nn/plan.hpp"
#include "nn/shape_ops.hpp"

namespace escpod::nn {
namespace detail {

struct ModelImpl {
  Graph graph;
  LoadOptions options;  // as the caller gave them: no process-wide switch changes a model's arithmetic
  mutable std::mutex mu;
  mutable std::vector<std::shared_ptr<const Plan>> plans;  // guarded by mu

  Result<std::shared_ptr<const Plan>> plan_for(std::span<const int64_t> shape) const {
    const ValueInfo& in = graph.info.inputs[0];
    if (!in.dims.empty()) {
      if (shape.size() != in.dims.size()) {
        return Status::invalid_argument(fmt::format("{}: input '{}' has rank {}, got shape {}", graph.info.source,
                                                    in.name, in.dims.size(), shape_str(Shape(shape.begin(), shape.end()))));
      }
      for (size_t d = 0; d < shape.size(); ++d) {
        if (in.dims[d] > 0 && in.dims[d] != shape[d]) {
          return Status::invalid_argument(fmt::format("{}: input '{}' dimension {} is fixed at {}, got {}",
                                                      graph.info.source, in.name, d, in.dims[d], shape[d]));
        }
      }
    }
    for (int64_t d : shape) {
      if (d <= 0) return Status::invalid_argument(fmt::format("{}: input dimensions must be positive", graph.info.source));
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& p : plans) {
      if (std::equal(p->input_shape.begin(), p->input_shape.end(), shape.begin(), shape.end())) return p;
    }
    // Weight reorders during the build run on this thread only: a full-width OpenMP team made
    // here would linger (spinning) beside the workers.
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    auto built = build_plan(graph, shape, options);
    omp_set_num_threads(saved_threads);
    ESCPOD_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, std::move(built));
    plans.push_back(std::shared_ptr<const Plan>(std::move(plan)));
    return plans.back();
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// One plan bound to a workspace: the per-step states (oneDNN primitives and their memories).
struct Binding {
  std::shared_ptr<const Plan> plan;
  std::vector<std::unique_ptr<StepState>> states;
};

struct WorkspaceState {
  // Bindings kept per workspace: a worker that alternates between a few input shapes (the CRF
  // head's batches of one read's windows, 1..max) binds each once and then allocates nothing;
  // beyond this many shapes the oldest binding is replaced.
  static constexpr size_t kMaxBindings = 16;

  int n_threads = 1;
  const ModelImpl* owner = nullptr;
  std::vector<Binding> bindings;  // in binding order; all of `owner`'s plans
  size_t current = 0;             // index into bindings of the plan in use
  size_t next_evict = 0;
  std::unique_ptr<float, FreeDeleter> arena;  // shared: sized for the largest plan bound
  std::size_t arena_floats = 0;
  std::unique_ptr<void, FreeDeleter> scratch;
  std::size_t scratch_bytes = 0;
  std::shared_ptr<void> stream;

  const Plan* plan() const { return bindings.empty() ? nullptr : bindings[current].plan.get(); }
  std::vector<std::unique_ptr<StepState>>& states() { return bindings[current].states; }

  // Makes the binding of `shape` current; false when none is held (bind() then adds it).
  bool select(const ModelImpl* model, std::span<const int64_t> shape) {
    if (owner != model) return false;
    for (size_t i = 0; i < bindings.size(); ++i) {
      const Shape& in = bindings[i].plan->input_shape;
      if (std::equal(in.begin(), in.end(), shape.begin(), shape.end())) {
        current = i;
        return true;
      }
    }
    return false;
  }

  void bind(const ModelImpl* model, std::shared_ptr<const Plan> p) {
    if (owner != model) bindings.clear();
    Binding b;
    for (const auto& step : p->steps) b.states.push_back(step->bind());
    if (p->arena_floats > arena_floats) {
      arena.reset(static_cast<float*>(std::aligned_alloc(64, p->arena_floats * sizeof(float))));
      arena_floats = p->arena_floats;
    }
    if (p->scratch_bytes > scratch_bytes) {
      scratch.reset(std::aligned_alloc(64, (p->scratch_bytes + 63) / 64 * 64));
      scratch_bytes = p->scratch_bytes;
    }
    if (p->needs_dnnl && !stream) stream = make_dnnl_stream();
    owner = model;
    b.plan = std::move(p);
    if (bindings.size() < kMaxBindings) {
      bindings.push_back(std::move(b));
      current = bindings.size() - 1;
    } else {
      current = next_evict;
      next_evict = (next_evict + 1) % kMaxBindings;
      bindings[current] = std::move(b);
    }
  }
};

std::atomic<bool> g_any_model_loaded{false};

Result<std::string> read_maybe_gz(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::not_found(fmt::format("{}: no such file", path.string()));
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::io_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      return Status::corrupt(fmt::format("{}: read failed: {}", path.string(), msg));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return data;
}

}  // namespace detail

// ---- Workspace -------------------------------------------------------------------------------
Workspace::Workspace(int n_threads) : m_state(std::make_unique<detail::WorkspaceState>()) {
  m_state->n_threads = std::max(1, n_threads);
}
Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&&) noexcept = default;
Workspace& Workspace::operator=(Workspace&&) noexcept = default;
int Workspace::n_threads() const { return m_state->n_threads; }
std::size_t Workspace::bytes() const { return m_state->arena_floats * sizeof(float) + m_state->scratch_bytes; }

// ---- Model -----------------------------------------------------------------------------------
Model::Model(std::unique_ptr<detail::ModelImpl> impl) : m_impl(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::load(const std::filesystem::path& path, const LoadOptions& options) {
  ESCPOD_ASSIGN_OR_RETURN(std::string bytes, detail::read_maybe_gz(path));
  return load_from_bytes(bytes, path.string(), options);
}

Result<Model> Model::load_from_bytes(std::string_view bytes, std::string_view label, const LoadOptions& options) {
  ESCPOD_ASSIGN_OR_RETURN(detail::Graph graph, detail::parse_onnx(bytes, label));
  return detail::make_model(std::move(graph), options);
}

namespace detail {

Result<Model> make_model(Graph graph, const LoadOptions& options) {
  g_any_model_loaded = true;
  auto impl = std::make_unique<ModelImpl>();
  impl->graph = std::move(graph);
  ESCPOD_RETURN_IF_ERROR(prepare_graph(impl->graph));
  impl->options = options;
  // The float32 fallback gives float32's results, but a user who asked for the speed is told.
  if ((impl->options.bf16_conv || impl->options.bf16_gemm) && !bf16_available()) {
    log::warn("{}: bfloat16 products were asked for, but this CPU (within its ISA cap) has no AVX512_BF16: "
              "they run in float32", impl->graph.info.source);
  }
  // When only the batch dimension is free, build the batch-1 plan now: unsupported attributes
  // are then reported at load, not at the first run.
  const ValueInfo& in = impl->graph.info.inputs[0];
  bool fixed = !in.dims.empty();
  for (size_t d = 1; d < in.dims.size(); ++d) fixed = fixed && in.dims[d] > 0;
  if (fixed) {
    std::vector<int64_t> shape = in.dims;
    shape[0] = 1;
    auto plan = impl->plan_for(shape);  // kept: the macro must not bind into a temporary
    ESCPOD_RETURN_IF_ERROR(plan);
  }
  return Model(std::move(impl));
}

}  // namespace detail

const ModelInfo& Model::info() const { return m_impl->graph.info; }
Backend Model::backend() const { return m_impl->options.backend; }

Result<std::vector<int64_t>> Model::output_shape(std::span<const int64_t> input_shape) const {
  ESCPOD_ASSIGN_OR_RETURN(auto plan, m_impl->plan_for(input_shape));
  return plan->output_shape;
}

Result<double> Model::flops(std::span<const int64_t> input_shape) const {
  ESCPOD_ASSIGN_OR_RETURN(auto plan, m_impl->plan_for(input_shape));
  return plan->flops;
}

Result<std::vector<std::string>> Model::describe_plan(std::span<const int64_t> input_shape) const {
  ESCPOD_ASSIGN_OR_RETURN(auto plan, m_impl->plan_for(input_shape));
  std::vector<std::string> lines;
  for (const auto& s : plan->steps) lines.push_back(s->text);
  lines.push_back(fmt::format("arena {} KiB, scratchpad {} KiB, {:.1f} MFLOP", plan->arena_floats * 4 / 1024,
                              plan->scratch_bytes / 1024, plan->flops / 1e6));
  return lines;
}

Result<std::vector<std::pair<std::string, double>>> Model::profile(Workspace& workspace,
                                                                   std::span<const int64_t> input_shape,
                                                                   int n_runs) const {
  ESCPOD_ASSIGN_OR_RETURN(auto out_shape, output_shape(input_shape));
  int64_t n_in = 1, n_out = 1;
  for (int64_t d : input_shape) n_in *= d;
  for (int64_t d : out_shape) n_out *= d;
  std::vector<float> in(static_cast<size_t>(n_in), 0.0f), out(static_cast<size_t>(n_out));
  ESCPOD_RETURN_IF_ERROR(run(workspace, in, input_shape, out));  // binds the plan
  detail::WorkspaceState& ws = *workspace.m_state;
  const detail::Plan& plan = *ws.plan();
  detail::ExecContext ctx;
  ctx.arena = ws.arena.get();
  ctx.input = in.data();
  ctx.output = out.data();
  ctx.scratchpad = ws.scratch.get();
  ctx.dnnl_stream = ws.stream.get();
  std::vector<std::pair<std::string, double>> times;
  for (const auto& step : plan.steps) times.emplace_back(step->text, 0.0);
  if (plan.needs_dnnl) omp_set_num_threads(ws.n_threads);
  const bool cpu_time = ws.n_threads == 1;
  const auto now = [cpu_time] {
    if (!cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (int r = 0; r < n_runs; ++r) {
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const double t0 = now();
      plan.steps[i]->run(ctx, ws.states()[i].get());
      if (plan.needs_dnnl) detail::dnnl_wait(ctx.dnnl_stream);
      times[i].second += now() - t0;
    }
  }
  for (auto& t : times) t.second /= std::max(1, n_runs);
  return times;
}

Status Model::run(Workspace& workspace, std::span<const float> input, std::span<const int64_t> input_shape,
                  std::span<float> output) const {
  detail::WorkspaceState& ws = *workspace.m_state;
  omp_set_num_threads(ws.n_threads);
  if (!ws.select(m_impl.get(), input_shape)) {
    ESCPOD_ASSIGN_OR_RETURN(auto plan, m_impl->plan_for(input_shape));
    ws.bind(m_impl.get(), std::move(plan));
  }
  const detail::Plan& plan = *ws.plan();
  int64_t n_in = 1, n_out = 1;
  for (int64_t d : plan.input_shape) n_in *= d;
  for (int64_t d : plan.output_shape) n_out *= d;
  if (static_cast<int64_t>(input.size()) != n_in || static_cast<int64_t>(output.size()) != n_out) {
    return Status::invalid_argument(fmt::format("{}: buffers hold {} input and {} output values; the shapes need {} and {}",
                                                m_impl->graph.info.source, input.size(), output.size(), n_in, n_out));
  }
  detail::ExecContext ctx;
  ctx.arena = ws.arena.get();
  ctx.input = input.data();
  ctx.output = output.data();
  ctx.scratchpad = ws.scratch.get();
  ctx.dnnl_stream = ws.stream.get();
  for (size_t i = 0; i < plan.steps.size(); ++i) plan.steps[i]->run(ctx, ws.states()[i].get());
  if (plan.needs_dnnl) detail::dnnl_wait(ctx.dnnl_stream);
  return Status::ok();
}

Status set_max_isa(Isa isa) {
  if (detail::g_any_model_loaded) {
    return Status::invalid_argument("set_max_isa must be called before the first model is loaded");
  }
  return detail::dnnl_set_max_isa(isa);
}

std::string effective_isa_name() { return detail::dnnl_isa_name(); }

namespace {

// Who runs the float32 dense products here (kernel_report).
std::string dense_products_kernel(const char* level) {
  if (detail::amx_f32_available()) return "AMX tile unit, exact bfloat16 splits (f32-fma keeps FMA)";
  if (detail::fma_gemm_products()) {
    return fmt::format("FMA ({}; LSTM projections, linear and convolutions oneDNN would run as an im2col GEMM on "
                       "escpod's kernel, other convolutions on oneDNN's)", level);
  }
  return fmt::format("FMA ({}, oneDNN's; no AMX tile unit here)", level);
}

}  // namespace

std::string kernel_report() {
  const char* level = detail::simd_level_name(detail::simd_level());
  return fmt::format(
      "nn: oneDNN {} ISA {}; LSTM recurrence and cell, CRF blank pad, small convolutions: {}\n"
      "nn: float32 dense products (LSTM projections, linear, channels-last convolutions): {}\n"
      "nn: opt-in bfloat16 (--cnn-precision bfloat16, --encoder-precision bf16): "
      "convolutions {}, dense products {}, LSTM recurrence {}\n",
      detail::dnnl_version_text(), detail::dnnl_isa_name(), level, dense_products_kernel(level),
      detail::bf16_available() ? "AVX512_BF16" : "float32 (no AVX512_BF16 within the ISA cap)",
      detail::bf16_available() ? (detail::amx_f32_available() ? "AMX" : "AVX512_BF16")
                               : "float32 (no AVX512_BF16 within the ISA cap)",
      detail::bf16_available() ? "AVX512_BF16 (escpod's kernel)" : "float32");
}

}  // namespace escpod::nn
