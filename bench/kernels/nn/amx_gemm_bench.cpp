// The encoders' dense float32 products on the AMX tile unit (src/nn/gemm_amx.hpp: exact bfloat16
// splits, six tile products) against the oneDNN float32 primitives those steps ran before,
// measured in the same run, on the shapes at batch 4:
//   0  LSTM input projection     1200 x 96 x 384 (x W^T)                 vs oneDNN matmul, prepacked
//   1  CRF linear layer          1200 x 96 x 1024, in 64-row blocks      vs oneDNN matmul, prepacked
//   2  CRF third convolution     16 -> 96 channels, k 31, stride 10, 3000 samples, per batch
//                                element: the input split once into planes, then the windows
//                                                                         vs oneDNN convolution (nwc)
//   3  boundary CNN convolution  64 -> 64 channels, k 7, stride 1, 1334 positions, likewise
// Arg 2: 0 ours (AMX), 1 oneDNN float32. One thread (oneDNN's OpenMP pool is set to 1, as the
// engine runs it). Skipped (with a message) where the CPU has no AMX.
// bench/results/crf_encoder.md (Session 15) has the numbers.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "nn/gemm_amx.hpp"

namespace {

using escpod::nn::detail::AmxF32Gemm;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Product {
  int64_t rows, k, n, block_rows;
};
struct Conv {
  int64_t ic, oc, k, stride, pad, iw;
  int64_t ow() const { return (iw + 2 * pad - k) / stride + 1; }
};
constexpr Product kProducts[] = {{1200, 96, 384, 1200}, {1200, 96, 1024, 64}};
constexpr Conv kConvs[] = {{16, 96, 31, 10, 15, 3000}, {64, 64, 7, 1, 3, 1334}};
constexpr int64_t kBatch = 4;

std::vector<float> wave(size_t n, float scale, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * static_cast<float>(i)) * scale;
  return v;
}

struct Aligned {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
std::unique_ptr<T, Aligned> aligned(size_t n) {
  return std::unique_ptr<T, Aligned>(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)));
}

bool amx_or_skip(benchmark::State& s) {
  if (escpod::nn::detail::amx_f32_available()) return true;
  s.SkipWithError("no AMX on this CPU (or oneDNN's ISA cap excludes it)");
  return false;
}

void BM_DenseProduct(benchmark::State& s) {
  if (!amx_or_skip(s)) return;
  const Product sh = kProducts[s.range(0)];
  const std::vector<float> x = wave(static_cast<size_t>(sh.rows * sh.k), 1.5f, 0.31f);
  const std::vector<float> w = wave(static_cast<size_t>(sh.k * sh.n), 0.2f, 0.17f);
  auto y = aligned<float>(static_cast<size_t>(sh.block_rows * sh.n));
  if (s.range(1) == 0) {
    const AmxF32Gemm gemm(sh.k, sh.n, w.data(), AmxF32Gemm::Layout::kKN, nullptr);
    auto scratch = aligned<char>(gemm.scratch_bytes());
    for (auto _ : s) {
      for (int64_t first = 0; first < sh.rows; first += sh.block_rows) {
        gemm.run(std::min(sh.block_rows, sh.rows - first), x.data() + first * sh.k, y.get(), scratch.get());
      }
      benchmark::DoNotOptimize(y.get());
    }
  } else {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const dnnl::memory::desc src({sh.block_rows, sh.k}, dt::f32, tag::ab), dst({sh.block_rows, sh.n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, dnnl::memory::desc({sh.k, sh.n}, dt::f32, tag::any), dst), eng);
    dnnl::memory user({{sh.k, sh.n}, dt::f32, tag::ab}, eng, const_cast<float*>(w.data()));
    dnnl::memory packed(pd.weights_desc(), eng);
    dnnl::reorder(user, packed).execute(strm, user, packed);
    const dnnl::matmul mm(pd);
    dnnl::memory src_m(src, eng), dst_m(dst, eng, y.get());
    for (auto _ : s) {
      for (int64_t first = 0; first < sh.rows; first += sh.block_rows) {
        src_m.set_data_handle(const_cast<float*>(x.data() + first * sh.k));
        mm.execute(strm, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst_m}});
      }
      strm.wait();
      benchmark::DoNotOptimize(y.get());
    }
  }
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(sh.rows * sh.k * sh.n) * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DenseProduct)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

// A batch of kBatch elements, channels-last in and out, as the engine's AmxConv and DnnlConv run it.
void BM_Convolution(benchmark::State& s) {
  if (!amx_or_skip(s)) return;
  const Conv cv = kConvs[s.range(0)];
  const int64_t ow = cv.ow(), body = cv.iw * cv.ic;
  const std::vector<float> x = wave(static_cast<size_t>(kBatch * body), 1.5f, 0.31f);
  const std::vector<float> w = wave(static_cast<size_t>(cv.oc * cv.ic * cv.k), 0.2f, 0.17f);
  auto y = aligned<float>(static_cast<size_t>(kBatch * ow * cv.oc));
  if (s.range(1) == 0) {
    const AmxF32Gemm gemm(cv.ic * cv.k, cv.oc, w.data(), AmxF32Gemm::Layout::kConvOIW, nullptr, cv.ic);
    const int64_t ld = cv.stride * cv.ic, lead = cv.pad * cv.ic;
    const int64_t plane = (std::max(gemm.plane_elems(ow, ld), lead + body + 16) + 31) / 32 * 32;
    auto planes = aligned<uint16_t>(static_cast<size_t>(3 * plane));
    std::fill(planes.get(), planes.get() + 3 * plane, uint16_t{0});
    auto scratch = aligned<char>(gemm.scratch_bytes());
    for (auto _ : s) {
      for (int64_t n = 0; n < kBatch; ++n) {
        AmxF32Gemm::split_to_planes(x.data() + n * body, body, planes.get() + lead, plane);
        gemm.run_planes(ow, planes.get(), plane, ld, y.get() + n * ow * cv.oc, cv.oc, scratch.get());
      }
      benchmark::DoNotOptimize(y.get());
    }
  } else {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const dnnl::memory::desc src({kBatch, cv.ic, cv.iw}, dt::f32, tag::nwc), dst({kBatch, cv.oc, ow}, dt::f32, tag::nwc);
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                            dnnl::memory::desc({cv.oc, cv.ic, cv.k}, dt::f32, tag::any), dst,
                                            {cv.stride}, {0}, {cv.pad}, {cv.pad});
    const dnnl::convolution_forward::primitive_desc pd(d, eng);
    dnnl::memory user({{cv.oc, cv.ic, cv.k}, dt::f32, tag::oiw}, eng, const_cast<float*>(w.data()));
    dnnl::memory packed(pd.weights_desc(), eng);
    dnnl::reorder(user, packed).execute(strm, user, packed);
    const dnnl::convolution_forward conv(pd);
    dnnl::memory src_m(src, eng, const_cast<float*>(x.data())), dst_m(dst, eng, y.get());
    for (auto _ : s) {
      conv.execute(strm, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, dst_m}});
      strm.wait();
      benchmark::DoNotOptimize(y.get());
    }
  }
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(kBatch * ow * cv.oc * cv.ic * cv.k) * static_cast<double>(s.iterations()),
                                             benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Convolution)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
