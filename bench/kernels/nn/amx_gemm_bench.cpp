// The encoder's dense float32 products on the AMX tile unit (src/nn/gemm_amx.hpp: exact bfloat16
// splits, six tile products) against oneDNN's float32 matmul with prepacked weights - the kernel
// those steps ran before, measured in the same run - on the bundle geometry's shapes at batch 4:
//   0  LSTM input projection   1200 x 96  x 96 x 384   (x W^T, W [384][96])
//   1  linear layer            1200 x 96  x 96 x 1024  (in the blank pad's 64-row blocks)
//   2  third convolution       300 x 496  x 496 x 96   (per batch element: windows of 31 taps x 16
//                                                      channels at a stride of 160 floats)
// Arg 2: 0 ours (AMX), 1 oneDNN float32. One thread (oneDNN's OpenMP pool is set to 1, as the
// engine runs it). Skipped (with a message) where the CPU has no AMX.
// bench/results/crf_encoder.md (Session 15) has the numbers.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "nn/gemm_amx.hpp"

namespace {

struct Shape {
  int64_t rows, k, n, block_rows, ldx;
};
constexpr Shape kShapes[] = {{1200, 96, 384, 1200, 96}, {1200, 96, 1024, 64, 96}, {300, 496, 96, 300, 160}};

std::vector<float> wave(size_t n, float scale, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * static_cast<float>(i)) * scale;
  return v;
}

struct Aligned {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<float, Aligned> aligned_floats(size_t n) {
  return std::unique_ptr<float, Aligned>(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64)));
}

void BM_DenseProduct(benchmark::State& s) {
  if (!escpod::nn::detail::amx_f32_available()) {
    s.SkipWithError("no AMX on this CPU (or oneDNN's ISA cap excludes it)");
    return;
  }
  const Shape sh = kShapes[s.range(0)];
  const bool ours = s.range(1) == 0;
  // x holds `rows` rows at stride ldx (overlapping windows for the convolution).
  const std::vector<float> x = wave(static_cast<size_t>((sh.rows - 1) * sh.ldx + sh.k), 1.5f, 0.31f);
  const std::vector<float> w = wave(static_cast<size_t>(sh.k * sh.n), 0.2f, 0.17f);
  auto y = aligned_floats(static_cast<size_t>(sh.block_rows * sh.n));
  if (ours) {
    const escpod::nn::detail::AmxF32Gemm gemm(sh.k, sh.n, w.data(), escpod::nn::detail::AmxF32Gemm::Layout::kKN, nullptr);
    auto scratch = aligned_floats(gemm.scratch_bytes() / sizeof(float) + 16);
    for (auto _ : s) {
      for (int64_t first = 0; first < sh.rows; first += sh.block_rows) {
        gemm.run(std::min(sh.block_rows, sh.rows - first), x.data() + first * sh.ldx, sh.ldx, y.get(), sh.n, scratch.get());
      }
      benchmark::DoNotOptimize(y.get());
    }
  } else {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    // oneDNN takes no overlapping rows: the convolution's windows are copied out first (an
    // im2col, counted in its time), as a GEMM-based convolution would.
    const dnnl::memory::desc src({sh.block_rows, sh.k}, dt::f32, tag::ab), dst({sh.block_rows, sh.n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, dnnl::memory::desc({sh.k, sh.n}, dt::f32, tag::any), dst), eng);
    dnnl::memory user({{sh.k, sh.n}, dt::f32, tag::ab}, eng, const_cast<float*>(w.data()));
    dnnl::memory packed(pd.weights_desc(), eng);
    dnnl::reorder(user, packed).execute(strm, user, packed);
    const dnnl::matmul mm(pd);
    std::vector<float> windows(static_cast<size_t>(sh.block_rows * sh.k));
    dnnl::memory src_m(src, eng), dst_m(dst, eng, y.get());
    for (auto _ : s) {
      for (int64_t first = 0; first < sh.rows; first += sh.block_rows) {
        const float* xb = x.data() + first * sh.ldx;
        if (sh.ldx != sh.k) {
          for (int64_t r = 0; r < sh.block_rows; ++r) std::copy(xb + r * sh.ldx, xb + r * sh.ldx + sh.k, windows.begin() + r * sh.k);
          src_m.set_data_handle(windows.data());
        } else {
          src_m.set_data_handle(const_cast<float*>(xb));
        }
        mm.execute(strm, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst_m}});
      }
      strm.wait();
      benchmark::DoNotOptimize(y.get());
    }
  }
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(sh.rows * sh.k * sh.n) * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DenseProduct)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
