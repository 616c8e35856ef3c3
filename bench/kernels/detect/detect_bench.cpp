// Boundary detection throughput (reads/s): BoundaryDetector::detect() read by read and
// detect_batch() (CNN on up to 32 reads per call), on the real RNA004 tRNA reads
// (escapepod/drna/yeast_trna_reads.pod5; most fail validation and take the LLR fallbacks) and on
// synthetic mRNA-like reads (pass on the CNN answer, the cheapest path); plus the LLR-only
// detector on whole reads. Single thread.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/signal/calibration.hpp"
#include "escpod/signal/robust_stats.hpp"

namespace {

using namespace escpod;

std::string data_path(const std::string& rel) {
  return std::string(ESCPOD_SHARED_DATA_DIR) + "/" + rel;
}

struct Reads {
  std::vector<std::vector<float>> pa;  // whole reads
  std::vector<uint64_t> n;
};

const Reads& real_reads() {
  static Reads r = [] {
    Reads out;
    auto reader = pod5::FileReader::open(data_path("escapepod/drna/yeast_trna_reads.pod5"));
    if (!reader.is_ok()) {
      std::fprintf(stderr, "%s\n", reader.status().to_string().c_str());
      std::exit(1);
    }
    pod5::VbzCodec codec;
    for (size_t b = 0; b < (*reader)->n_read_batches(); ++b) {
      auto batch = (*reader)->read_batch(b);
      if (!batch.is_ok()) std::exit(1);
      for (size_t i = 0; i < batch->size(); ++i) {
        std::vector<int16_t> adc(batch->num_samples[i]);
        if (!(*reader)->read_signal(batch->rows_of(i), adc, codec).is_ok()) std::exit(1);
        std::vector<float> pa(adc.size());
        signal::calibrate_to_pa(adc, {batch->calibration_offset[i], batch->calibration_scale[i]},
                                pa);
        out.pa.push_back(std::move(pa));
        out.n.push_back(batch->num_samples[i]);
      }
    }
    return out;
  }();
  return r;
}

const Reads& synthetic_reads() {
  static Reads r = [] {
    Reads out;
    std::mt19937 rng(5);
    std::normal_distribution<double> g(0.0, 1.0);
    for (int k = 0; k < 128; ++k) {
      const size_t a = 2500 + static_cast<size_t>(k % 8) * 300, c = a + 1500, n = 20000;
      std::vector<float> s;
      for (size_t i = 0; i < n; ++i) {
        const double v = i < a ? 80.0 + 5.0 * g(rng) : i < c ? 110.0 + 1.5 * g(rng)
                                                             : 85.0 + 8.0 * g(rng);
        s.push_back(static_cast<float>(v));
      }
      out.pa.push_back(std::move(s));
      out.n.push_back(n);
    }
    return out;
  }();
  return r;
}

const pipeline::BoundaryDetector& detector(pipeline::DetectMethod m) {
  static auto make = [](pipeline::DetectMethod mm) {
    auto d = pipeline::BoundaryDetector::create(
        pipeline::DetectorConfig{}, mm,
        data_path("warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx"));
    if (!d.is_ok()) {
      std::fprintf(stderr, "%s\n", d.status().to_string().c_str());
      std::exit(1);
    }
    return std::move(d).value();
  };
  static pipeline::BoundaryDetector cnn = make(pipeline::DetectMethod::kCnn);
  static pipeline::BoundaryDetector llr = make(pipeline::DetectMethod::kLlr);
  return m == pipeline::DetectMethod::kCnn ? cnn : llr;
}

// The median as std::nth_element gives it (the reference the library's selection must equal).
float nth_element_median(std::vector<float>& v) {
  const size_t hi = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(hi), v.end());
  const float upper = v[hi];
  if (v.size() % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(hi)) + upper) / 2.0f;
}

std::vector<std::span<const float>> prefixes(const Reads& r, size_t preload) {
  std::vector<std::span<const float>> s;
  for (const auto& v : r.pa) s.emplace_back(v.data(), std::min(v.size(), preload));
  return s;
}

void run_single(benchmark::State& state, const Reads& reads, pipeline::DetectMethod m) {
  const auto& d = detector(m);
  auto spans = prefixes(reads, d.preload_samples());
  auto scratch = d.make_scratch();
  int ok = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < spans.size(); ++i) {
      auto b = d.detect(spans[i], reads.n[i], scratch);
      ok += b.success ? 1 : 0;
      benchmark::DoNotOptimize(b);
    }
  }
  state.counters["reads/s"] =
      benchmark::Counter(static_cast<double>(spans.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["success"] = static_cast<double>(ok) / static_cast<double>(state.iterations()) /
                              static_cast<double>(spans.size());
}

void run_batch(benchmark::State& state, const Reads& reads) {
  const auto& d = detector(pipeline::DetectMethod::kCnn);
  auto spans = prefixes(reads, d.preload_samples());
  auto scratch = d.make_scratch();
  std::vector<pipeline::Boundaries> out(spans.size());
  for (auto _ : state) {
    d.detect_batch(spans, reads.n, scratch, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["reads/s"] =
      benchmark::Counter(static_cast<double>(spans.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_DetectCnn_RealReads(benchmark::State& s) {
  run_single(s, real_reads(), pipeline::DetectMethod::kCnn);
}
void BM_DetectBatchCnn_RealReads(benchmark::State& s) { run_batch(s, real_reads()); }
void BM_DetectCnn_Synthetic(benchmark::State& s) {
  run_single(s, synthetic_reads(), pipeline::DetectMethod::kCnn);
}
void BM_DetectBatchCnn_Synthetic(benchmark::State& s) { run_batch(s, synthetic_reads()); }
void BM_DetectLlrOnly_RealReads(benchmark::State& s) {
  run_single(s, real_reads(), pipeline::DetectMethod::kLlr);
}

// Order statistics of the boundary checks (median + MAD of each real read's `length`-sample
// prefix: 11,500 as the adapter checks and LLR retries see, 1,000 as the poly(A) checks' windows):
// the library's bucketed selection against the std::nth_element reference it replaced.
void run_median_mad(benchmark::State& state, bool reference, size_t length) {
  const auto spans = prefixes(real_reads(), length);
  std::vector<float> work;
  for (auto _ : state) {
    for (const auto& x : spans) {
      signal::MedianMad mm;
      if (reference) {
        work.assign(x.begin(), x.end());
        mm.median = nth_element_median(work);
        for (size_t i = 0; i < x.size(); ++i) work[i] = std::fabs(x[i] - mm.median);
        mm.mad = nth_element_median(work);
      } else {
        mm = signal::median_mad_f32(x, work);
      }
      benchmark::DoNotOptimize(mm);
    }
  }
  state.counters["reads/s"] =
      benchmark::Counter(static_cast<double>(spans.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
void BM_OrderStats_MedianMad(benchmark::State& s) { run_median_mad(s, false, 11500); }
void BM_OrderStats_MedianMad_NthElement(benchmark::State& s) { run_median_mad(s, true, 11500); }
void BM_OrderStats_MedianMad1000(benchmark::State& s) { run_median_mad(s, false, 1000); }
void BM_OrderStats_MedianMad1000_NthElement(benchmark::State& s) { run_median_mad(s, true, 1000); }

BENCHMARK(BM_OrderStats_MedianMad);
BENCHMARK(BM_OrderStats_MedianMad_NthElement);
BENCHMARK(BM_OrderStats_MedianMad1000);
BENCHMARK(BM_OrderStats_MedianMad1000_NthElement);
BENCHMARK(BM_DetectCnn_RealReads)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectBatchCnn_RealReads)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectCnn_Synthetic)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectBatchCnn_Synthetic)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetectLlrOnly_RealReads)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
