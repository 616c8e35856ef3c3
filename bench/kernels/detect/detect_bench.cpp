// Boundary detection throughput (reads/s): BoundaryDetector::detect() read by read and
// detect_batch() (CNN on up to 32 reads per call), on the real RNA004 tRNA reads
// (escapepod/drna/yeast_trna_reads.pod5; most fail validation and take the LLR fallbacks) and on
// synthetic mRNA-like reads (pass on the CNN answer, the cheapest path); plus the LLR-only
// detector on whole reads; the order statistics of the boundary checks, and find_peaks on the
// traces it searches (t-statistic, LLR gain). Single thread.
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
#include "escpod/signal/boundaries.hpp"
#include "escpod/signal/calibration.hpp"
#include "escpod/signal/fingerprint.hpp"
#include "escpod/signal/peaks.hpp"
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

// find_peaks on the traces it searches in a fused run, one per real read: the windowed
// t-statistic of the first 6,000 samples (stat width 12, distance 6: the fingerprint's change
// points; ~1,200 candidates, half removed by the distance filter) and the LLR gain trace of the
// normalised read (3.4: ~800 values; prominence >= its std and width >= 100 at relative height 1,
// as the adapter end is picked; distance 10, prominence 1 and width 10 at half height, as the
// poly(A) end is). The CNN's outputs (distance 5) need the network and are not here.
struct PeakTraces {
  std::vector<std::vector<double>> tstat, llr;
};

const PeakTraces& peak_traces() {
  static PeakTraces t = [] {
    PeakTraces out;
    signal::BoundaryWork work;
    std::vector<float> u, blocks;
    for (const auto& pa : real_reads().pa) {
      const auto head = std::span<const float>(pa).first(std::min<size_t>(pa.size(), 6000));
      if (head.size() > 24) {
        out.tstat.emplace_back(head.size() - 24);
        signal::windowed_t_statistic(head, 12, out.tstat.back());
      }
      const auto prefix = std::span<const float>(pa).first(std::min<size_t>(pa.size(), 10000));
      if (!signal::winsor_mad_normalise(prefix, 5.0, u, work)) continue;
      signal::block_means_f32(u, 10, /*pad_partial=*/true, blocks);
      if (blocks.size() < 200) continue;
      const std::vector<double> s(blocks.begin(), blocks.end());
      std::vector<double> c1, c2, g;
      signal::llr_prefix_sums(s, c1, c2);
      signal::llr_trace(c1, c2, 0, static_cast<int64_t>(s.size()) - 1, 101, 1, g);
      for (double& v : g) {
        if (!std::isfinite(v)) v = 0.0;
      }
      out.llr.push_back(std::move(g));
    }
    return out;
  }();
  return t;
}

// Population standard deviation (the adapter picker's prominence scale).
double stddev(const std::vector<double>& v) {
  double m = 0.0, ss = 0.0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size()));
}

void run_find_peaks(benchmark::State& state, const std::vector<std::vector<double>>& traces,
                    const std::vector<signal::PeakOptions>& options) {
  signal::PeakScratch scratch;
  std::vector<size_t> peaks;
  size_t found = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < traces.size(); ++i) {
      signal::find_peaks(traces[i], options[i], scratch, peaks);
      found += peaks.size();
    }
  }
  benchmark::DoNotOptimize(found);
  state.counters["traces/s"] = benchmark::Counter(
      static_cast<double>(traces.size()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_FindPeaks_TStat(benchmark::State& s) {
  const auto& traces = peak_traces().tstat;
  signal::PeakOptions o;
  o.min_distance = 6.0;
  run_find_peaks(s, traces, std::vector<signal::PeakOptions>(traces.size(), o));
}
void BM_FindPeaks_LlrAdapter(benchmark::State& s) {
  const auto& traces = peak_traces().llr;
  std::vector<signal::PeakOptions> options;
  for (const auto& g : traces) {
    signal::PeakOptions o;
    o.min_prominence = stddev(g);
    o.min_width = 100.0;
    o.rel_height = 1.0;
    options.push_back(o);
  }
  run_find_peaks(s, traces, options);
}
void BM_FindPeaks_LlrPolyA(benchmark::State& s) {
  const auto& traces = peak_traces().llr;
  signal::PeakOptions o;
  o.min_distance = 10.0;
  o.min_prominence = 1.0;
  o.min_width = 10.0;
  o.rel_height = 0.5;
  run_find_peaks(s, traces, std::vector<signal::PeakOptions>(traces.size(), o));
}

BENCHMARK(BM_FindPeaks_TStat);
BENCHMARK(BM_FindPeaks_LlrAdapter);
BENCHMARK(BM_FindPeaks_LlrPolyA);
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
