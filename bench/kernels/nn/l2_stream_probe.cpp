// The physical floor of the CRF encoder's float32 recurrent product on this CPU (issue 14,
// bench/results/crf_encoder.md "Session 8b"). One LSTM step of the bundle geometry multiplies
// h [96] by R^T [96][384]: 147,456 bytes of weights, more than the 48 KB L1d, so every step reads
// them from L2. This probe times, on one thread, per "step" of 147,456 bytes:
//   read     the bare read of the same bytes (AVX-512 loads into 8 independent OR accumulators:
//            no arithmetic on the critical path), the L2 read-bandwidth floor;
//   gemv     the engine's own kernel (nn::detail::gemm_acc_fn, m = 1, k = 96, n = 384: what the
//            LSTM step runs), for the same bytes;
//   l1-read  the bare read of a 24 KB buffer (fits L1d), to show the loads themselves are not the
//            limit.
// Times are thread CPU time (CLOCK_THREAD_CPUTIME_ID), medians of --reps repetitions of 300 steps
// (one layer at chunk 3000); bytes per cycle against the TSC rate and against the core clock
// measured with a dependent add chain (this VM has no cycle counter for perf stat).
//
//   build/bench/kernels/nn/l2_stream_probe [--reps 41]
#include <immintrin.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "nn/simd.hpp"

namespace {

constexpr int kH = 96, kG = 4 * kH, kSteps = 300;
constexpr size_t kWeightFloats = static_cast<size_t>(kH) * kG;  // 36,864 floats, 147,456 bytes

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads `n` floats (a multiple of 128) with 8 independent accumulators; returns a value that
// depends on every load so the compiler keeps them (noipa: calls with the same arguments are not
// merged or hoisted as a pure function's would be).
__attribute__((target("avx512f"), noipa)) uint32_t read_all(const float* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const auto* q = reinterpret_cast<const __m512i*>(p);
  for (size_t i = 0; i < n / 16; i += 8) {
    a0 = _mm512_or_si512(a0, _mm512_load_si512(q + i));
    a1 = _mm512_or_si512(a1, _mm512_load_si512(q + i + 1));
    a2 = _mm512_or_si512(a2, _mm512_load_si512(q + i + 2));
    a3 = _mm512_or_si512(a3, _mm512_load_si512(q + i + 3));
    a4 = _mm512_or_si512(a4, _mm512_load_si512(q + i + 4));
    a5 = _mm512_or_si512(a5, _mm512_load_si512(q + i + 5));
    a6 = _mm512_or_si512(a6, _mm512_load_si512(q + i + 6));
    a7 = _mm512_or_si512(a7, _mm512_load_si512(q + i + 7));
  }
  a0 = _mm512_or_si512(_mm512_or_si512(_mm512_or_si512(a0, a1), _mm512_or_si512(a2, a3)),
                       _mm512_or_si512(_mm512_or_si512(a4, a5), _mm512_or_si512(a6, a7)));
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(reinterpret_cast<__m512i*>(lanes), a0);
  uint32_t x = 0;
  for (uint32_t v : lanes) x |= v;
  return x;
}

// Median seconds per step of `step` run kSteps times, over `reps` repetitions (one warm-up).
template <typename F>
double per_step(int reps, F&& step) {
  std::vector<double> t;
  for (int r = 0; r <= reps; ++r) {
    const double t0 = thread_seconds();
    for (int s = 0; s < kSteps; ++s) step();
    if (r > 0) t.push_back((thread_seconds() - t0) / kSteps);
  }
  return median(t);
}

// Core cycles per second while this thread runs: a chain of dependent integer adds (one cycle
// each on every x86 core since the P6), in thread CPU time. The VM exposes no cycle counter.
__attribute__((noipa)) uint64_t add_chain(uint64_t x, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) asm volatile("add $1, %0" : "+r"(x));
  return x;
}
double core_hz(int reps) {
  constexpr uint64_t kAdds = 20'000'000;
  std::vector<double> t;
  for (int r = 0; r < std::max(3, reps / 4); ++r) {
    const double t0 = thread_seconds();
    add_chain(static_cast<uint64_t>(r), kAdds);
    t.push_back(thread_seconds() - t0);
  }
  return static_cast<double>(kAdds) / median(t);
}

// TSC ticks per second, against the monotonic clock over ~50 ms.
double tsc_hz() {
  const double w0 = wall_seconds();
  const uint64_t c0 = __rdtsc();
  while (wall_seconds() - w0 < 0.05) {
  }
  return static_cast<double>(__rdtsc() - c0) / (wall_seconds() - w0);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 41;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("no AVX-512: this probe measures the AVX-512 floor only\n");
    return 0;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  auto* w = static_cast<float*>(std::aligned_alloc(64, kWeightFloats * sizeof(float)));
  for (size_t i = 0; i < kWeightFloats; ++i) w[i] = u(rng);
  alignas(64) float h[kH];
  alignas(64) float gates[kG];
  for (float& x : h) x = u(rng);
  std::memset(gates, 0, sizeof(gates));
  constexpr size_t kL1Floats = 6144;  // 24 KB
  volatile uint32_t sink = 0;

  const double read_s = per_step(reps, [&] { sink = sink + read_all(w, kWeightFloats); });
  const double l1_s = per_step(reps, [&] {
    uint32_t x = 0;
    for (size_t k = 0; k < kWeightFloats / kL1Floats; ++k) x |= read_all(w, kL1Floats);
    sink = sink + x;
  });
  const auto gemm = escpod::nn::detail::gemm_acc_fn(escpod::nn::detail::SimdLevel::kAvx512);
  const double gemv_s = per_step(reps, [&] { gemm(h, kH, w, kG, gates, kG, 1, kG, kH); });
  const double hz = tsc_hz(), core = core_hz(reps);
  const double bytes = static_cast<double>(kWeightFloats * sizeof(float));
  auto line = [&](const char* name, double s) {
    std::printf("%-8s %7.3f us/step  %6.1f GB/s  %5.1f bytes/TSC-cycle  %5.1f bytes/core-cycle\n", name, s * 1e6,
                bytes / s / 1e9, bytes / (s * hz), bytes / (s * core));
  };
  std::printf("step = %.0f bytes (R^T 96 x 384 float32), %d steps x %d reps, TSC %.2f GHz, core ~%.2f GHz\n", bytes,
              kSteps, reps, hz / 1e9, core / 1e9);
  line("read", read_s);
  line("gemv", gemv_s);
  line("l1-read", l1_s);
  std::printf("checksum %u %g\n", static_cast<unsigned>(sink), static_cast<double>(gates[0]));
  std::free(w);
  return 0;
}
