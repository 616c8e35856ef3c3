// Kernel-level timing of the nn engine on the test fixtures at realistic geometry: the CRF
// encoder at chunk 2000 (RNA004) and the boundary CNN at 1500, batch 1 and 64, optimised
// (oneDNN) and reference backends. Counters: windows/s and GFLOP/s. One thread per Workspace.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "escpod/nn/model.hpp"

namespace {

using escpod::nn::Backend;
using escpod::nn::Model;
using escpod::nn::Workspace;

void run_model(benchmark::State& state, const std::string& path, int64_t length, Backend backend) {
  auto model = Model::load(path, escpod::nn::LoadOptions{backend});
  if (!model.is_ok()) {
    state.SkipWithError(model.status().to_string().c_str());
    return;
  }
  const int64_t batch = state.range(0);
  const std::vector<int64_t> shape{batch, 1, length};
  auto out_shape = model->output_shape(shape);
  auto flops = model->flops(shape);
  if (!out_shape.is_ok() || !flops.is_ok()) {
    state.SkipWithError("plan failed");
    return;
  }
  int64_t n_out = 1;
  for (int64_t d : out_shape.value()) n_out *= d;
  std::vector<float> in(static_cast<size_t>(batch * length)), out(static_cast<size_t>(n_out));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (float& v : in) v = dist(rng);
  Workspace ws;
  for (auto _ : state) {
    if (!model->run(ws, in, shape, out).is_ok()) state.SkipWithError("run failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["windows/s"] = benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops.value() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

const std::string kData = ESCPOD_NN_TEST_DATA;
const std::string kShared = ESCPOD_SHARED_DATA_DIR;

void BM_CrfH96Chunk2000(benchmark::State& s) { run_model(s, kData + "/crf_h96_s10.onnx.gz", 2000, Backend::kOptimised); }
void BM_CrfH128Chunk3000(benchmark::State& s) { run_model(s, kData + "/crf_h128_s5.onnx.gz", 3000, Backend::kOptimised); }
void BM_BoundaryCnn1500(benchmark::State& s) {
  run_model(s, kShared + "/warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx", 1500, Backend::kOptimised);
}
void BM_Tcn1500(benchmark::State& s) { run_model(s, kData + "/tcn_boundary.onnx.gz", 1500, Backend::kOptimised); }
void BM_CrfH96Chunk2000Reference(benchmark::State& s) { run_model(s, kData + "/crf_h96_s10.onnx.gz", 2000, Backend::kReference); }
void BM_BoundaryCnn1500Reference(benchmark::State& s) {
  run_model(s, kShared + "/warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx", 1500, Backend::kReference);
}

BENCHMARK(BM_CrfH96Chunk2000)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CrfH128Chunk3000)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BoundaryCnn1500)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Tcn1500)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CrfH96Chunk2000Reference)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BoundaryCnn1500Reference)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
