// The CRF encoder's element-wise kernels (src/nn/simd.hpp) at each ISA level this CPU runs, on the
// bundle geometry's shapes (batch 4, chunk 3000): the LSTM cell of one layer (300 steps of 4 rows
// x 96 units) and the blank-pad tanh of the linear layer's output (1200 rows x 256 runs of 4)
// (Arg: 0 SSE2, 1 AVX2, 2 AVX-512); then the direct small convolutions: the encoders' first two
// (1 -> 4 and 4 -> 16 channels, k 5, SiLU) and the boundary CNN's first and last layers at batch
// 64. bench/results/crf_encoder.md (Session 14) and cpu_kinds.md (Sessions 21-22) have the numbers.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/gemm_bf16.hpp"
#include "nn/simd.hpp"

namespace {

using escpod::nn::detail::SimdLevel;

bool runnable(benchmark::State& s, SimdLevel* level) {
  *level = static_cast<SimdLevel>(s.range(0));
  if (static_cast<int>(*level) > static_cast<int>(escpod::nn::detail::simd_level())) {
    s.SkipWithError("ISA not available here");
    return false;
  }
  return true;
}

std::vector<float> wave(size_t n, float scale, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * static_cast<float>(i)) * scale;
  return v;
}

// One layer's cells: 300 steps of n = 4 rows, h = 96 (gates as an LSTM sees them).
void BM_LstmCellLayer(benchmark::State& s) {
  SimdLevel level;
  if (!runnable(s, &level)) return;
  constexpr int64_t kSteps = 300, kRows = 4, kHidden = 96;
  const auto cell = escpod::nn::detail::lstm_cell_fn(level);
  const std::vector<float> gates = wave(static_cast<size_t>(kSteps * kRows * 4 * kHidden), 3.0f, 0.37f);
  const std::vector<float> bias = wave(4 * kHidden, 0.5f, 0.11f);
  std::vector<float> c(kRows * kHidden, 0.0f), h(static_cast<size_t>(kSteps * kRows * kHidden));
  for (auto _ : s) {
    for (int64_t t = 0; t < kSteps; ++t) {
      cell(gates.data() + t * kRows * 4 * kHidden, bias.data(), c.data(), h.data() + t * kRows * kHidden, kRows,
           kHidden, kHidden);
    }
    benchmark::DoNotOptimize(h.data());
  }
  s.counters["cells/s"] = benchmark::Counter(static_cast<double>(kSteps * kRows * kHidden) * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LstmCellLayer)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// The LSTM step's recurrent product C[m][384] += h[m][96] x R^T[96][384] (gemm_acc_fn) for the
// 300 steps of one bundle-geometry layer, at the CRF head's batch (m 4) and at batch 1.
// Args: ISA (0 SSE2, 1 AVX2, 2 AVX-512), m. Against the FMA peak: nn_bench's PeakFma.
void BM_RecurrentProduct(benchmark::State& s) {
  SimdLevel level;
  if (!runnable(s, &level)) return;
  constexpr int64_t kSteps = 300, kHidden = 96, kGates = 4 * kHidden;
  const int64_t m = s.range(1);
  const auto gemm = escpod::nn::detail::gemm_acc_fn(level);
  const std::vector<float> h = wave(static_cast<size_t>(m * kHidden), 0.9f, 0.31f);
  const int64_t ldb = 400;  // R^T's rows as shared_gemm_panel pads them: 25 cache lines apart
  const std::vector<float> rt = wave(static_cast<size_t>(kHidden * ldb), 0.2f, 0.13f);
  std::vector<float> gates(static_cast<size_t>(kSteps * m * kGates), 0.0f);
  for (auto _ : s) {
    for (int64_t t = 0; t < kSteps; ++t) {
      gemm(h.data(), kHidden, rt.data(), ldb, gates.data() + t * m * kGates, kGates, m, kGates, kHidden);
    }
    benchmark::DoNotOptimize(gates.data());
  }
  const double gflop = 2e-9 * static_cast<double>(kSteps * m * kHidden * kGates);
  s.counters["GFLOP/s"] = benchmark::Counter(gflop * static_cast<double>(s.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RecurrentProduct)->ArgsProduct({{0, 1, 2}, {1, 4}})->Unit(benchmark::kMicrosecond);

// The same product in bfloat16 (gemm_acc_bf16, the recurrence of `--encoder-precision bf16`):
// h rounded each step, R^T packed in pairs. Arg: m. Runs where bf16_available(); against the
// float32 rows above (BM_RecurrentProduct/2/m) and the dot products' rate (2x the FMA peak on
// Zen 4).
void BM_RecurrentProductBf16(benchmark::State& s) {
  if (!escpod::nn::detail::bf16_available()) {
    s.SkipWithError("no AVX512_BF16 within oneDNN's ISA cap");
    return;
  }
  constexpr int64_t kSteps = 300, kHidden = 96, kGates = 4 * kHidden, kLd = 400;
  const int64_t m = s.range(0);
  const std::vector<float> h = wave(static_cast<size_t>(m * kHidden), 0.9f, 0.31f);
  const std::vector<float> r = wave(static_cast<size_t>(kGates * kHidden), 0.2f, 0.13f);
  std::vector<uint32_t> rt(static_cast<size_t>(escpod::nn::detail::bf16_pairs_rows(kHidden) * kLd));
  escpod::nn::detail::pack_bf16_pairs(r.data(), 1, kHidden, kHidden, kGates, rt.data(), kLd);
  std::vector<uint16_t> h16(h.size());
  std::vector<float> gates(static_cast<size_t>(kSteps * m * kGates), 0.0f);
  for (auto _ : s) {
    for (int64_t t = 0; t < kSteps; ++t) {
      escpod::nn::detail::convert_to_bf16(h.data(), h16.data(), h.size());
      escpod::nn::detail::gemm_acc_bf16(h16.data(), kHidden, rt.data(), kLd, gates.data() + t * m * kGates, kGates, m,
                                        kGates, kHidden);
    }
    benchmark::DoNotOptimize(gates.data());
  }
  const double gflop = 2e-9 * static_cast<double>(kSteps * m * kHidden * kGates);
  s.counters["GFLOP/s"] = benchmark::Counter(gflop * static_cast<double>(s.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RecurrentProductBf16)->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);

// The CRF linear layer's product at B 4 (bundle geometry): [1200 x 96] x [96 x 1024] in blocks of 64
// rows (gemm_acc_fn over rows initialised to the bias), as the matmul steps run it below AVX-512.
// Args: ISA (0 SSE2, 1 AVX2, 2 AVX-512); the weights' row padding in floats (0: rows 4 KB apart;
// 16: 65 cache lines apart, as shared_gemm_panel lays them out). oneDNN's product at the same
// shape: `escpod model bench --profile` of a CRF folder (its matmul+blank_pad row, less the pad).
void BM_DenseProductFma(benchmark::State& s) {
  SimdLevel level;
  if (!runnable(s, &level)) return;
  constexpr int64_t kRows = 1200, kBlock = 64, kIn = 96, kOut = 1024;
  const auto gemm = escpod::nn::detail::gemm_acc_fn(level);
  const std::vector<float> x = wave(static_cast<size_t>(kRows * kIn), 0.9f, 0.31f);
  const int64_t ldb = kOut + s.range(1);
  const std::vector<float> w = wave(static_cast<size_t>(kIn * ldb), 0.2f, 0.13f), bias = wave(kOut, 0.1f, 0.7f);
  std::vector<float> y(static_cast<size_t>(kBlock * kOut));
  for (auto _ : s) {
    for (int64_t first = 0; first < kRows; first += kBlock) {
      for (int64_t r = 0; r < kBlock; ++r) std::copy(bias.begin(), bias.end(), y.begin() + r * kOut);
      gemm(x.data() + first * kIn, kIn, w.data(), ldb, y.data(), kOut, kBlock, kOut, kIn);
      benchmark::DoNotOptimize(y.data());
    }
  }
  const double gflop = 2e-9 * static_cast<double>(kRows * kIn * kOut);
  s.counters["GFLOP/s"] = benchmark::Counter(gflop * static_cast<double>(s.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DenseProductFma)->ArgsProduct({{0, 1, 2}, {0, 16}})->Unit(benchmark::kMicrosecond);

// The linear layer's output of batch 4 in its 64-row blocks: 1200 rows of 1024 scores.
void BM_BlankPadTanh(benchmark::State& s) {
  SimdLevel level;
  if (!runnable(s, &level)) return;
  constexpr int64_t kRows = 1200, kBlock = 64, kRuns = 256;
  const auto pad = escpod::nn::detail::blank_pad_tanh_fn(level);
  const std::vector<float> x = wave(static_cast<size_t>(kBlock * kRuns * 4), 2.0f, 0.29f);
  std::vector<float> y(static_cast<size_t>(kRows * kRuns * 5));
  for (auto _ : s) {
    for (int64_t first = 0; first < kRows; first += kBlock) {
      const int64_t rows = std::min(kBlock, kRows - first);
      pad(x.data(), y.data() + first * kRuns * 5, rows * kRuns, 2.0f, 5.0f, 0.0f);
    }
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_BlankPadTanh)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

// The encoders' first two convolutions at batch 4 (AVX-512 only; oneDNN runs them below it).
// Arg: output channels (4: 1 -> 4 from the signal; 16: 4 -> 16, channels-last input).
void BM_SmallConv(benchmark::State& s) {
  const auto fn = escpod::nn::detail::small_conv_fn(escpod::nn::detail::simd_level());
  if (fn == nullptr) {
    s.SkipWithError("the direct kernel needs AVX-512");
    return;
  }
  const int64_t oc = s.range(0), ic = oc == 4 ? 1 : 4, n = 4, w = 3000, k = 5;
  const std::vector<float> x = wave(static_cast<size_t>(n * ic * w), 1.5f, 0.21f);
  const std::vector<float> weights = wave(static_cast<size_t>(k * ic * 16), 0.4f, 0.7f), bias(16, 0.1f);
  std::vector<float> y(static_cast<size_t>(n * w * oc));
  const escpod::nn::detail::SmallConvGeometry g{n, ic, oc, w, w, k, 1, 2, ic > 1};
  for (auto _ : s) {
    fn(g, x.data(), weights.data(), bias.data(), y.data(), escpod::nn::detail::SmallConvPost::kSilu);
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_SmallConv)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond);

// The boundary CNN's first layer at batch 64 (1 -> 64 channels, k 7, stride 3, ReLU), written in
// float32 (Arg 0) or in bfloat16 for its bfloat16 reader (Arg 1, where the CPU has AVX512_BF16).
// oneDNN's float32 convolution it replaced: `escpod model bench --profile` of the CNN.
void BM_SmallConvCnnFirstLayer(benchmark::State& s) {
  namespace nn = escpod::nn::detail;
  const auto fn = nn::small_conv_fn(nn::simd_level());
  const bool bf16_out = s.range(0) == 1;
  if (fn == nullptr || (bf16_out && !nn::bf16_available())) {
    s.SkipWithError("needs AVX-512 (and AVX512_BF16 for the bfloat16 output)");
    return;
  }
  const int64_t n = 64, ic = 1, oc = 64, w = 1500, k = 7, stride = 3, pad = 3, ow = (w + 2 * pad - k) / stride + 1;
  const std::vector<float> x = wave(static_cast<size_t>(n * w), 1.5f, 0.21f);
  const std::vector<float> weights = wave(static_cast<size_t>(k * ic * oc), 0.4f, 0.7f), bias(static_cast<size_t>(oc), 0.1f);
  std::vector<float> y(static_cast<size_t>(n * ow * oc));
  nn::SmallConvGeometry g{n, ic, oc, w, ow, k, stride, pad, true};
  g.dst_bf16 = bf16_out;
  for (auto _ : s) {
    fn(g, x.data(), weights.data(), bias.data(), y.data(), nn::SmallConvPost::kRelu);
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_SmallConvCnnFirstLayer)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The boundary CNN's last layer at batch 64 (transposed, 64 -> 2 channels, k 7, stride 3, 500 ->
// 1498 positions), its input channels-first (Arg 0) or channels-last (Arg 1, as the CNN's plan
// stores it), its output [n][oc][ow]. oneDNN's transposed convolution it replaced: `escpod model
// bench --profile` of the CNN. The float32 FMA peak to hold it against: nn_bench's PeakFma.
void BM_SmallDeconvCnnLastLayer(benchmark::State& s) {
  namespace nn = escpod::nn::detail;
  const auto fn = nn::small_deconv_fn(nn::simd_level());
  if (fn == nullptr) {
    s.SkipWithError("needs AVX2");
    return;
  }
  const int64_t n = 64, ic = 64, oc = 2, iw = 500, k = 7, stride = 3, pad = 3, ow = (iw - 1) * stride - 2 * pad + k;
  const std::vector<float> x = wave(static_cast<size_t>(n * ic * iw), 1.5f, 0.21f);
  const std::vector<float> weights = wave(static_cast<size_t>(ic * 16), 0.4f, 0.7f), bias(static_cast<size_t>(oc), 0.1f);
  std::vector<float> y(static_cast<size_t>(n * oc * ow)), taps(static_cast<size_t>(iw * 16));
  const nn::SmallConvGeometry g{n, ic, oc, iw, ow, k, stride, pad, s.range(0) == 1};
  for (auto _ : s) {
    fn(g, x.data(), weights.data(), bias.data(), y.data(), false, taps.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double gflop = 2e-9 * static_cast<double>(n * iw * ic * oc * k);  // the products that are used
  s.counters["GFLOP/s"] = benchmark::Counter(gflop * static_cast<double>(s.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SmallDeconvCnnLastLayer)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
