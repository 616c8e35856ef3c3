// Probe for a bfloat16 CRF encoder (issue 14, bench/results/crf_encoder.md): times, on one thread,
// the two parts of the bundle geometry's LSTM layers that a bf16 path would change, in float32 as
// the encoder runs them and in bf16:
//   1. the recurrent GEMV of every step: h [96] x R^T [96][384] accumulated into the gates, 300
//      steps per layer, five layers' weights (as the encoder runs them: a layer's steps in a row);
//      float32 with 24 zmm accumulators (the kernel's blocking) vs AVX512_BF16 vdpbf16ps on
//      weights packed as bf16 pairs (half the bytes streamed from L2 per step);
//   2. the input projection of a layer, [300, 96] x [96, 384], as oneDNN matmul in float32 vs bf16
//      inputs with float32 output (the f32 -> bf16 conversion of the inputs included).
// Times are thread CPU time (CLOCK_THREAD_CPUTIME_ID), medians of `--reps` repetitions, so a shared
// machine's time slicing does not count. Results also print a checksum and the largest relative
// difference of the bf16 gates from float32, to show the kernels compute the same product.
//
//   build/bench/kernels/nn/lstm_bf16_probe [--reps 31]
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace {

constexpr int kH = 96, kG = 4 * kH, kT = 300, kLayers = 5;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// g[384] += h[96] x rt[96][384] (float32, the encoder's blocking: 24 accumulators of 16 columns).
__attribute__((target("avx512f"))) void gemv_f32(const float* h, const float* rt, float* g) {
  __m512 acc[24];
  for (int j = 0; j < 24; ++j) acc[j] = _mm512_loadu_ps(g + 16 * j);
  for (int k = 0; k < kH; ++k) {
    const __m512 hk = _mm512_set1_ps(h[k]);
    const float* row = rt + k * kG;
    for (int j = 0; j < 24; ++j) acc[j] = _mm512_fmadd_ps(hk, _mm512_loadu_ps(row + 16 * j), acc[j]);
  }
  for (int j = 0; j < 24; ++j) _mm512_storeu_ps(g + 16 * j, acc[j]);
}

// The same product with R^T in bf16 pairs: w[k/2][col][2] (k even, k odd) as 32-bit lanes, and h
// rounded to bf16 once per step.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void gemv_bf16(const float* h, const uint32_t* w, float* g) {
  alignas(64) uint32_t hp[kH / 2];
  for (int k = 0; k < kH; k += 32) {
    const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(h + k + 16), _mm512_loadu_ps(h + k));
    _mm512_store_si512(reinterpret_cast<__m512i*>(hp + k / 2), reinterpret_cast<__m512i>(pair));
  }
  __m512 acc[24];
  for (int j = 0; j < 24; ++j) acc[j] = _mm512_loadu_ps(g + 16 * j);
  for (int kp = 0; kp < kH / 2; ++kp) {
    const __m512bh hk = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(hp[kp])));
    const uint32_t* row = w + kp * kG;
    for (int j = 0; j < 24; ++j) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + 16 * j));
      acc[j] = _mm512_dpbf16_ps(acc[j], hk, wv);
    }
  }
  for (int j = 0; j < 24; ++j) _mm512_storeu_ps(g + 16 * j, acc[j]);
}

uint16_t to_bf16(float x) {  // round to nearest even, as vcvtne2ps2bf16
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// One pass of five layers x 300 steps; the next h depends on the gates (a recurrence, as the
// LSTM's), so steps cannot overlap. Returns a checksum of the last gates.
template <typename Gemv, typename W>
double run_layers(Gemv gemv, const std::vector<W>& weights, std::vector<float>& gates) {
  std::vector<float> h(kH, 0.1f);
  double sum = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    const W* w = weights.data() + static_cast<size_t>(layer) * (weights.size() / kLayers);
    for (int t = 0; t < kT; ++t) {
      std::fill(gates.begin(), gates.end(), 0.0f);
      gemv(h.data(), w, gates.data());
      // A cheap dependence of h on the gates (a tanh here would cost more than the GEMV); h stays
      // near 0.5, away from denormals.
      for (int k = 0; k < kH; ++k) h[static_cast<size_t>(k)] = 0.5f + 1e-3f * gates[static_cast<size_t>(k)];
    }
    sum += gates[0];
  }
  return sum;
}

void probe_gemv(int reps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> rt(static_cast<size_t>(kLayers) * kH * kG);
  for (float& x : rt) x = u(rng);
  std::vector<uint32_t> packed(rt.size() / 2);
  for (int l = 0; l < kLayers; ++l)
    for (int kp = 0; kp < kH / 2; ++kp)
      for (int c = 0; c < kG; ++c) {
        const float* r = rt.data() + static_cast<size_t>(l) * kH * kG;
        const uint32_t lo = to_bf16(r[(2 * kp) * kG + c]), hi = to_bf16(r[(2 * kp + 1) * kG + c]);
        const size_t at = (static_cast<size_t>(l) * (kH / 2) + static_cast<size_t>(kp)) * kG + static_cast<size_t>(c);
        packed[at] = lo | (hi << 16);
      }
  // Agreement of one product (same h, same weights).
  std::vector<float> h(kH), g32(kG, 0.0f), g16(kG, 0.0f);
  for (float& x : h) x = u(rng) * 3.0f;
  gemv_f32(h.data(), rt.data(), g32.data());
  gemv_bf16(h.data(), packed.data(), g16.data());
  double max_abs = 0, scale = 0;
  for (int c = 0; c < kG; ++c) {
    const auto i = static_cast<size_t>(c);
    max_abs = std::max(max_abs, static_cast<double>(std::abs(g32[i] - g16[i])));
    scale = std::max(scale, static_cast<double>(std::abs(g32[i])));
  }
  std::vector<double> t32, t16;
  std::vector<float> gates(kG);
  double c32 = 0, c16 = 0;
  for (int r = 0; r < reps; ++r) {
    double t0 = thread_seconds();
    c32 = run_layers(gemv_f32, rt, gates);
    t32.push_back(thread_seconds() - t0);
    t0 = thread_seconds();
    c16 = run_layers(gemv_bf16, packed, gates);
    t16.push_back(thread_seconds() - t0);
  }
  const double steps = kLayers * kT;
  std::printf("recurrent GEMV (96 x 384, 5 layers x 300 steps):\n");
  std::printf("  float32: %.3f us/step, %.3f ms per encoder  (R^T %d KB per layer)\n", 1e6 * median(t32) / steps,
              1e3 * median(t32), kH * kG * 4 / 1024);
  std::printf("  bf16   : %.3f us/step, %.3f ms per encoder  (R^T %d KB per layer)\n", 1e6 * median(t16) / steps,
              1e3 * median(t16), kH * kG * 2 / 1024);
  std::printf("  ratio bf16/f32 %.2f; one product: max |diff| %.2e of max |gate| %.2e; checksums %.4f %.4f\n",
              median(t16) / median(t32), max_abs, scale, c32, c16);
}

void probe_projection(int reps) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::dims src_d{kT, kH}, w_d{kH, kG}, dst_d{kT, kG};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kT) * kH), w(static_cast<size_t>(kH) * kG), y(static_cast<size_t>(kT) * kG);
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  auto f32 = memory::data_type::f32, bf16 = memory::data_type::bf16;
  auto ab = memory::format_tag::ab;
  memory x32({src_d, f32, ab}, eng, x.data()), w32({w_d, f32, ab}, eng, w.data()), y32({dst_d, f32, ab}, eng, y.data());
  matmul mm32(matmul::primitive_desc(matmul::desc({src_d, f32, ab}, {w_d, f32, ab}, {dst_d, f32, ab}), eng));
  // bf16: weights converted once (at load), inputs converted per call (timed).
  memory x16({src_d, bf16, ab}, eng), w16({w_d, bf16, ab}, eng);
  reorder(w32, w16).execute(s, w32, w16);
  reorder to16(x32, x16);
  const matmul::primitive_desc pd16(
      matmul::desc({src_d, bf16, ab}, {w_d, bf16, memory::format_tag::any}, {dst_d, f32, ab}), eng);
  matmul mm16(pd16);
  std::vector<float> y16(y.size());
  memory y16m({dst_d, f32, ab}, eng, y16.data());
  // The bf16 matmul may want its weights in a blocked layout: reorder them once, as a load would.
  memory w16p(pd16.weights_desc(), eng);
  reorder(w16, w16p).execute(s, w16, w16p);
  std::vector<double> t32, t16;
  for (int r = 0; r < reps; ++r) {
    double t0 = thread_seconds();
    for (int l = 0; l < kLayers; ++l) {
      mm32.execute(s, {{DNNL_ARG_SRC, x32}, {DNNL_ARG_WEIGHTS, w32}, {DNNL_ARG_DST, y32}});
    }
    s.wait();
    t32.push_back(thread_seconds() - t0);
    t0 = thread_seconds();
    for (int l = 0; l < kLayers; ++l) {
      to16.execute(s, x32, x16);
      mm16.execute(s, {{DNNL_ARG_SRC, x16}, {DNNL_ARG_WEIGHTS, w16p}, {DNNL_ARG_DST, y16m}});
    }
    s.wait();
    t16.push_back(thread_seconds() - t0);
  }
  double max_rel = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    max_rel = std::max(max_rel, static_cast<double>(std::abs(y[i] - y16[i])) / 10.0);
  }
  std::printf("input projections (5 x [300,96] x [96,384], oneDNN matmul, %s):\n", "1 thread");
  std::printf("  float32: %.3f ms per encoder\n", 1e3 * median(t32));
  std::printf("  bf16   : %.3f ms per encoder (incl. the f32 -> bf16 input conversion)\n", 1e3 * median(t16));
  std::printf("  ratio bf16/f32 %.2f; max |diff| / 10 (|y| ~ 10): %.2e\n", median(t16) / median(t32), max_rel);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 31;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::fprintf(stderr, "lstm_bf16_probe: this CPU has no AVX512_BF16\n");
    return 1;
  }
  probe_gemv(reps);
  probe_projection(reps);
  return 0;
}
