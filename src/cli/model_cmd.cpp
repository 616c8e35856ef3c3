// `escpod model info|run|bench`: inspect, run and time an ONNX signal model on the nn engine, or
// the CTC-CRF encoder of a model folder (SeqTagger/bonito folder or escapepod CRF bundle).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <filesystem>
#include <memory>
#include <cstdio>
#include <ctime>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/demux/crf_model.hpp"
#include "escpod/nn/model.hpp"
#include "escpod/nn/npy.hpp"

namespace escpod::cli {
namespace {

struct ModelOptions {
  std::string model;
  std::string input;
  std::string output;
  std::string shape;     // info: plan for this input shape, "1,1,2000"
  int64_t batch = 1;
  int64_t length = 0;    // bench: value for a symbolic non-batch dimension
  double seconds = 3.0;
  std::string mode = "workers";  // bench: workers (one Workspace per thread) or intra (one, N threads)
  std::string isa = "default";
  bool reference = false;
  bool profile = false;
  std::string precision = "f32";  // demux::parse_encoder_precision
  WriterFlags writer;             // run: -f/--force, --fsync of the output .npy
};

std::string dims_str(const nn::ValueInfo& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (v.dims[i] >= 0) {
      parts.push_back(std::to_string(v.dims[i]));
    } else {
      parts.push_back(v.dim_params[i].empty() ? "?" : v.dim_params[i]);
    }
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Result<std::vector<int64_t>> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      shape.push_back(std::stoll(item));
    } catch (...) {
      return Status::usage(fmt::format("--shape '{}': not a comma-separated list of integers", text));
    }
  }
  if (shape.empty()) return Status::usage("--shape is empty");
  return shape;
}

// An ONNX file, or a CRF model folder whose encoder is loaded (or built) with every load check.
Result<std::shared_ptr<const nn::Model>> load(const ModelOptions& o) {
  if (o.isa != "default") {
    const nn::Isa isa = o.isa == "avx2" ? nn::Isa::kAvx2 : nn::Isa::kAvx512;
    ESCPOD_RETURN_IF_ERROR(nn::set_max_isa(isa));
  }
  nn::LoadOptions lo;
  lo.backend = o.reference ? nn::Backend::kReference : nn::Backend::kOptimised;
  // The same for an ONNX file (bf16: its convolutions as `demux --cnn-precision bfloat16` runs
  // the boundary CNN's) and a CRF folder's encoder.
  ESCPOD_RETURN_IF_ERROR(demux::parse_encoder_precision(o.precision, lo));
  std::error_code ec;
  if (std::filesystem::is_directory(o.model, ec)) {  // the encoder as `demux --encoder-precision` runs it
    demux::CrfLoadOptions co;
    co.encoder = lo;
    ESCPOD_ASSIGN_OR_RETURN(demux::CrfModel crf, demux::load_crf_model(o.model, co));
    return crf.encoder;
  }
  ESCPOD_ASSIGN_OR_RETURN(nn::Model model, nn::Model::load(o.model, lo));
  return std::shared_ptr<const nn::Model>(std::make_shared<nn::Model>(std::move(model)));
}

Status run_info(const ModelOptions& o) {
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<const nn::Model> model_ptr, load(o));
  const nn::Model& model = *model_ptr;
  const nn::ModelInfo& info = model.info();
  std::printf("model:      %s\n", info.source.c_str());
  std::printf("producer:   %s (IR %lld, opset %lld)\n", info.producer.c_str(),
              static_cast<long long>(info.ir_version), static_cast<long long>(info.opset));
  for (const auto& v : info.inputs) std::printf("input:      %s %s float32\n", v.name.c_str(), dims_str(v).c_str());
  for (const auto& v : info.outputs) std::printf("output:     %s %s float32\n", v.name.c_str(), dims_str(v).c_str());
  std::string ops;
  for (const auto& [op, n] : info.op_counts) ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, n);
  std::printf("operators:  %s\n", ops.c_str());
  std::printf("parameters: %lld\n", static_cast<long long>(info.n_parameters));
  if (!o.shape.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto shape, parse_shape(o.shape));
    ESCPOD_ASSIGN_OR_RETURN(auto out, model.output_shape(shape));
    ESCPOD_ASSIGN_OR_RETURN(auto lines, model.describe_plan(shape));
    std::printf("plan for %s -> [%s] (%s backend, ISA %s):\n", o.shape.c_str(), fmt::format("{}", fmt::join(out, ", ")).c_str(),
                o.reference ? "reference" : "optimised", o.reference ? "scalar" : nn::effective_isa_name().c_str());
    for (const auto& l : lines) std::printf("  %s\n", l.c_str());
  }
  return Status::ok();
}

Status run_model(const ModelOptions& o, int n_threads) {
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<const nn::Model> model_ptr, load(o));
  const nn::Model& model = *model_ptr;
  ESCPOD_ASSIGN_OR_RETURN(nn::NpyArray in, nn::read_npy(o.input));
  ESCPOD_ASSIGN_OR_RETURN(auto out_shape, model.output_shape(in.shape));
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  nn::Workspace ws(n_threads);
  ESCPOD_ASSIGN_OR_RETURN(const FsyncMode fsync, parse_fsync_mode(o.writer.fsync));
  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(o.output, o.writer.force));
  ESCPOD_RETURN_IF_ERROR(model.run(ws, in.data, in.shape, out).with_context(o.input));
  ESCPOD_RETURN_IF_ERROR(nn::write_npy(staged.staging_path(), out_shape, out));
  return staged.commit(fsync);
}

// What `model bench` runs on: --input's real windows [N, ...] from a .npy, taken `batch` at a time
// in turn (cycling), so a comparison with another engine can run on the same data; otherwise one
// random N(0, 1) batch.
struct BenchInput {
  std::vector<int64_t> shape;  // one call's input shape
  std::vector<float> data;
  size_t n_in = 0;             // values per call

  // The batch of call k: windows [k*batch, (k+1)*batch) of the data, wrapping to the start.
  std::span<const float> batch(long call) const {
    const size_t b = static_cast<size_t>(call) % (data.size() / n_in);
    return std::span<const float>(data).subspan(b * n_in, n_in);
  }
};

Result<BenchInput> bench_input(const nn::Model& model, const ModelOptions& o) {
  const nn::ValueInfo& in = model.info().inputs[0];
  BenchInput b;
  b.shape = in.dims;
  if (b.shape.empty()) return Status::invalid_argument("the model's input has no declared shape");
  b.shape[0] = o.batch;
  for (size_t d = 1; d < b.shape.size(); ++d) {
    if (b.shape[d] >= 0) continue;
    if (o.length <= 0 && o.input.empty()) {
      return Status::usage(fmt::format("input dimension {} ('{}') is symbolic: give --length", d, in.dim_params[d]));
    }
    b.shape[d] = o.length;
  }
  if (!o.input.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(nn::NpyArray given, nn::read_npy(o.input));
    if (given.shape.size() != b.shape.size() || given.shape[0] < o.batch) {
      return Status::invalid_argument(
          fmt::format("{}: expected [N >= {}, ...] with {} dimensions", o.input, o.batch, b.shape.size()));
    }
    for (size_t d = 1; d < b.shape.size(); ++d) b.shape[d] = given.shape[d];
    b.data = std::move(given.data);
  }
  int64_t n_in = 1;
  for (int64_t d : b.shape) n_in *= d;
  b.n_in = static_cast<size_t>(n_in);
  if (o.input.empty()) {
    b.data.resize(b.n_in);
    std::mt19937 rng(12345);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : b.data) v = dist(rng);
  }
  return b;
}

// --profile: the time of each plan step over 20 calls.
Status print_profile(const nn::Model& model, const std::vector<int64_t>& shape, int ws_threads) {
  nn::Workspace ws(ws_threads);
  ESCPOD_ASSIGN_OR_RETURN(auto times, model.profile(ws, shape, 20));
  double total = 0;
  for (const auto& t : times) total += t.second;
  for (const auto& [text, secs] : times) {
    std::printf("  %8.3f ms %5.1f%%  %s\n", secs * 1e3, total > 0 ? 100.0 * secs / total : 0.0, text.c_str());
  }
  std::printf("  %8.3f ms total per call\n", total * 1e3);
  return Status::ok();
}

// One timing worker's count.
struct Tally {
  // Read by the main thread while the worker counts (the fewest-calls wait in time_calls).
  std::atomic<long> calls{0};
  double seconds = 0;
  double cpu_seconds = 0;  // the worker thread's CPU time over its timed calls
  Status status;
};

// CPU time of the calling thread: on a loaded machine wall time also counts the time the worker
// waited for a core; this does not (for calls whose kernels run on that thread).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs `tally.size()` workers (each a Workspace of ws_threads): every worker warms up, then they
// time whole calls from a common start to the end of each one's last call, for `seconds` and
// until each finished at least two (cap 120 s): slow configurations (a call of ~1 s) are measured
// exactly, not rounded to the calls that happened to finish inside a fixed window.
void time_calls(const nn::Model& model, const BenchInput& input, const std::vector<int64_t>& out_shape,
                int ws_threads, double seconds, std::vector<Tally>& tally) {
  const int workers = static_cast<int>(tally.size());
  int64_t n_out = 1;
  for (int64_t d : out_shape) n_out *= d;
  std::atomic<int> warmed{0};
  std::atomic<bool> start{false}, stop{false};
  auto worker = [&](Tally& t) {
    nn::Workspace ws(ws_threads);
    std::vector<float> out(static_cast<size_t>(n_out));
    t.status = model.run(ws, input.batch(0), input.shape, out);  // warm-up: plan binding, arena
    warmed.fetch_add(1);
    if (!t.status.is_ok()) {
      stop = true;
      return;
    }
    while (!start.load() && !stop.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    while (!stop.load(std::memory_order_relaxed)) {
      t.status = model.run(ws, input.batch(t.calls.load(std::memory_order_relaxed)), input.shape, out);
      if (!t.status.is_ok()) {
        stop = true;
        return;
      }
      t.calls.fetch_add(1, std::memory_order_relaxed);
      t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      t.cpu_seconds = thread_cpu_seconds() - cpu0;
    }
  };
  std::vector<std::thread> threads;
  for (Tally& t : tally) threads.emplace_back(worker, std::ref(t));
  while (warmed.load() < workers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  start = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto fewest_calls = [&] {
    long m = LONG_MAX;
    for (const Tally& t : tally) m = std::min(m, t.calls.load(std::memory_order_relaxed));
    return m;
  };
  while (fewest_calls() < 2 && !stop.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (auto& t : threads) t.join();
}

Status run_bench(const ModelOptions& o, int n_threads) {
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<const nn::Model> model_ptr, load(o));
  const nn::Model& model = *model_ptr;
  ESCPOD_ASSIGN_OR_RETURN(const BenchInput input, bench_input(model, o));
  ESCPOD_ASSIGN_OR_RETURN(auto out_shape, model.output_shape(input.shape));
  ESCPOD_ASSIGN_OR_RETURN(double flops, model.flops(input.shape));
  const bool intra = o.mode == "intra";
  const int workers = intra ? 1 : n_threads;
  if (o.profile) ESCPOD_RETURN_IF_ERROR(print_profile(model, input.shape, intra ? n_threads : 1));
  std::vector<Tally> tally(static_cast<size_t>(workers));
  time_calls(model, input, out_shape, intra ? n_threads : 1, o.seconds, tally);
  double n_calls = 0, rate = 0, secs = 0;  // rate: calls per second, all workers together
  double cpu_per_call = 0;                  // mean over workers of CPU seconds per call
  for (const Tally& t : tally) {
    ESCPOD_RETURN_IF_ERROR(t.status);
    if (t.calls > 0) cpu_per_call += t.cpu_seconds / static_cast<double>(t.calls) / workers;
    n_calls += static_cast<double>(t.calls);
    if (t.seconds > 0) rate += static_cast<double>(t.calls) / t.seconds;
    secs = std::max(secs, t.seconds);
  }
  const double windows = rate * static_cast<double>(o.batch);
  std::printf("model=%s batch=%lld length=%lld threads=%d mode=%s backend=%s isa=%s calls=%.0f seconds=%.3f "
              "windows_per_s=%.2f ms_per_call=%.3f gflops=%.2f cpu_ms_per_call=%.3f\n",
              o.model.c_str(), static_cast<long long>(o.batch), static_cast<long long>(input.shape.back()), n_threads,
              o.mode.c_str(), o.reference ? "reference" : "optimised", o.reference ? "scalar" : nn::effective_isa_name().c_str(),
              n_calls, secs, windows, rate > 0 ? 1e3 * workers / rate : 0.0, rate * flops / 1e9, cpu_per_call * 1e3);
  return Status::ok();
}

void add_model_flags(CLI::App* sub, ModelOptions& o) {
  sub->add_option("--isa", o.isa, "Cap the instruction set: default, avx2, avx512")
      ->check(CLI::IsMember({"default", "avx2", "avx512"}));
  auto* reference = sub->add_flag("--reference-kernels", o.reference, "Use the scalar reference kernels");
  add_deprecated_flag_alias(sub, "--reference", reference, o.reference);  // --reference is a FASTA elsewhere
  sub->add_option("--precision", o.precision,
                  "f32 (default; on CPUs with AMX the dense products run on the tile unit as exact bfloat16 "
                  "splits, within float32 rounding: marked amx-f32), f32-fma (float32 on the vector units "
                  "only), bf16 (the LSTM products, linear layers and convolutions with many inputs per output in "
                  "bfloat16, on CPUs with AVX512_BF16 or AMX) or "
                  "int8 (LSTM recurrent weights, on CPUs with AVX-512 VNNI); elsewhere f32 runs. "
                  "`info --shape` marks the steps that take it")
      ->check(CLI::IsMember({"f32", "f32-fma", "bf16", "int8"}));
}

}  // namespace

void register_model(CLI::App& app, GlobalOptions& global) {
  auto* cmd = app.add_subcommand("model", "Inspect, run and time ONNX signal models (or CRF model folders) on the built-in engine");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<ModelOptions>();

  auto* info = cmd->add_subcommand("info", "Inputs, outputs, operators and parameter count of a model");
  info->add_option("MODEL", opts->model, "ONNX file (.onnx or .onnx.gz) or CRF model folder")->required()->check(CLI::ExistingPath);
  info->add_option("--shape", opts->shape, "Also print the execution plan for this input shape, e.g. 1,1,2000");
  add_model_flags(info, *opts);
  add_verbosity_flags(info, global);
  set_body(info, [opts] { return run_info(*opts); });

  auto* run = cmd->add_subcommand("run", "Run a model on a float32 .npy tensor");
  run->add_option("MODEL", opts->model, "ONNX file or CRF model folder")->required()->check(CLI::ExistingPath);
  run->add_option("INPUT", opts->input, "Input .npy (float32, C order, the model's input shape)")
      ->required()->check(CLI::ExistingFile);
  run->add_option("-o,--output", opts->output, "Output .npy")->required();
  add_staging_flags(run, opts->writer);
  add_model_flags(run, *opts);
  add_common_flags(run, global);
  set_body(run, [opts, &global] { return run_model(*opts, resolve_threads(global)); });

  auto* bench = cmd->add_subcommand("bench", "Windows per second on random input");
  bench->add_option("MODEL", opts->model, "ONNX file or CRF model folder")->required()->check(CLI::ExistingPath);
  bench->add_option("--batch", opts->batch, "Windows per call")->check(CLI::PositiveNumber);
  bench->add_option("--length", opts->length, "Value of a symbolic input length (e.g. 2000)")
      ->check(CLI::PositiveNumber);
  bench->add_option("--input", opts->input,
                    "Time on these windows (.npy [N, ...], float32): each call takes the next --batch of them")
      ->check(CLI::ExistingFile);
  bench->add_option("--seconds", opts->seconds, "Measured interval (default 3)")->check(CLI::PositiveNumber);
  bench->add_option("--mode", opts->mode,
                    "workers: one Workspace per thread (throughput); intra: one call at a time "
                    "using all threads")
      ->check(CLI::IsMember({"workers", "intra"}));
  bench->add_flag("--profile", opts->profile, "Also print the mean time of each plan step (thread CPU time with one thread per call)");
  add_model_flags(bench, *opts);
  add_common_flags(bench, global);
  set_body(bench, [opts, &global] { return run_bench(*opts, resolve_threads(global)); });
}

}  // namespace escpod::cli
