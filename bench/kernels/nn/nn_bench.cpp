// Kernel-level timing of the nn engine on the test fixtures at realistic geometry: the CRF
// encoder at chunk 2000 (RNA004) and the boundary CNN at 1500, batch 1 and 64, optimised
// (oneDNN) and reference backends. Counters: windows/s and GFLOP/s. One thread per Workspace.
#include <benchmark/benchmark.h>

#include <random>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
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

// The physical limit: float32 FMA throughput of one core. Twelve independent accumulators (more
// than FMA latency x pipes) in hand-written assembly, so neither the compiler nor a dependency
// chain decides the number; FLOPs = 2 per lane per FMA.
#if defined(__x86_64__)
#define ESCPOD_OP12(OP, R)                                                                 \
  OP " %%" R "12,%%" R "13,%%" R "0\n\t " OP " %%" R "12,%%" R "13,%%" R "1\n\t"   \
  OP " %%" R "12,%%" R "13,%%" R "2\n\t " OP " %%" R "12,%%" R "13,%%" R "3\n\t"   \
  OP " %%" R "12,%%" R "13,%%" R "4\n\t " OP " %%" R "12,%%" R "13,%%" R "5\n\t"   \
  OP " %%" R "12,%%" R "13,%%" R "6\n\t " OP " %%" R "12,%%" R "13,%%" R "7\n\t"   \
  OP " %%" R "12,%%" R "13,%%" R "8\n\t " OP " %%" R "12,%%" R "13,%%" R "9\n\t"   \
  OP " %%" R "12,%%" R "13,%%" R "10\n\t " OP " %%" R "12,%%" R "13,%%" R "11\n\t"
#define ESCPOD_FMA12(R) ESCPOD_OP12("vfmadd231ps", R)
#define ESCPOD_FMA_CLOBBERS                                                                  \
  "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
      "xmm10", "xmm11", "xmm12", "xmm13"

__attribute__((target("avx2,fma"))) void fma_loop_ymm(int64_t n) {
  asm volatile("vxorps %%xmm12,%%xmm12,%%xmm12\n\t vxorps %%xmm13,%%xmm13,%%xmm13\n\t"
               "1:\n\t" ESCPOD_FMA12("ymm") "dec %0\n\t jnz 1b\n\t vzeroupper"
               : "+r"(n)
               :
               : ESCPOD_FMA_CLOBBERS);
}
__attribute__((target("avx512f"))) void fma_loop_zmm(int64_t n) {
  asm volatile("vxorps %%xmm12,%%xmm12,%%xmm12\n\t vxorps %%xmm13,%%xmm13,%%xmm13\n\t"
               "1:\n\t" ESCPOD_FMA12("zmm") "dec %0\n\t jnz 1b\n\t vzeroupper"
               : "+r"(n)
               :
               : ESCPOD_FMA_CLOBBERS);
}

// Argument: vector width in floats (8 = AVX2, 16 = AVX-512).
void BM_PeakFma(benchmark::State& s) {
  const bool wide = s.range(0) == 16;
  if (wide ? !__builtin_cpu_supports("avx512f") : !__builtin_cpu_supports("fma")) {
    s.SkipWithError("ISA not supported by this CPU");
    return;
  }
  constexpr int64_t kIters = 1 << 22;
  for (auto _ : s) wide ? fma_loop_zmm(kIters) : fma_loop_ymm(kIters);
  const double flops = 2.0 * static_cast<double>(s.range(0)) * 12 * static_cast<double>(kIters);
  s.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(s.iterations()) / 1e9,
                                             benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PeakFma)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

// The bfloat16 limit: AVX512_BF16 dot products (vdpbf16ps, zmm), each 32 products = 64 FLOPs,
// twelve independent accumulators: what the bfloat16 paths (oneDNN's products and convolutions,
// gemm_acc_bf16) are held against on CPUs without AMX.
__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_loop_zmm(int64_t n) {
  asm volatile("vxorps %%xmm12,%%xmm12,%%xmm12\n\t vxorps %%xmm13,%%xmm13,%%xmm13\n\t"
               "1:\n\t" ESCPOD_OP12("vdpbf16ps", "zmm") "dec %0\n\t jnz 1b\n\t vzeroupper"
               : "+r"(n)
               :
               : ESCPOD_FMA_CLOBBERS);
}
void BM_PeakBf16Dot(benchmark::State& s) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    s.SkipWithError("no AVX512_BF16 on this CPU");
    return;
  }
  constexpr int64_t kIters = 1 << 22;
  for (auto _ : s) bf16_dot_loop_zmm(kIters);
  const double flops = 64.0 * 12 * static_cast<double>(kIters);
  s.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(s.iterations()) / 1e9,
                                             benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PeakBf16Dot)->Unit(benchmark::kMillisecond);
#undef ESCPOD_FMA12
#undef ESCPOD_OP12
#undef ESCPOD_FMA_CLOBBERS
#endif

BENCHMARK_MAIN();
