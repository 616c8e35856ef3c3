// Demultiplexer kernels: DTW distance (one pair, a model's whole training bank), WarpDemuX
// fingerprint extraction, DTW-SVM classification of a whole read, GBM prediction.
// Realistic shapes: 25-value fingerprints, window 15, penalty 0.1; banks of 851 (WDX4) and 2601
// (WDX10) training fingerprints; adapter windows of 2000-6000 samples. Fixed seeds.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "escpod/demux/dtw.hpp"
#include "escpod/demux/gbm_model.hpp"
#include "escpod/demux/warpdemux_model.hpp"
#include "escpod/signal/fingerprint.hpp"

namespace {

using namespace escpod;

std::string data_path(const std::string& rel) { return std::string(ESCPOD_SHARED_DATA_DIR) + "/" + rel; }

std::vector<std::vector<double>> golden_queries(const std::string& stem) {
  std::ifstream in(data_path("warpdemux/golden_" + stem + ".json"));
  if (!in) {
    std::fprintf(stderr, "missing %s\n", data_path("warpdemux/golden_" + stem + ".json").c_str());
    std::exit(1);
  }
  const auto g = nlohmann::json::parse(in);
  std::vector<std::vector<double>> out;
  for (const auto& q : g["queries"]) out.push_back(q["fingerprint"].get<std::vector<double>>());
  return out;
}

const demux::WarpDemuxModel& model(const std::string& stem) {
  static std::vector<std::pair<std::string, demux::WarpDemuxModel>> cache;
  for (auto& [name, m] : cache)
    if (name == stem) return m;
  auto r = demux::WarpDemuxModel::load(data_path("warpdemux/" + stem + ".json"));
  if (!r.is_ok()) {
    std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
    std::exit(1);
  }
  cache.emplace_back(stem, std::move(r).value());
  return cache.back().second;
}

std::vector<double> random_series(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = g(rng);
  return v;
}

// Plain full-matrix DTW from the definition (the reference the tests compare against).
double reference_dtw(const std::vector<double>& a, const std::vector<double>& b, long window,
                     double penalty) {
  const size_t n = a.size(), m = b.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> D(n * m, inf);
  const double p2 = penalty * penalty;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j) {
      if (std::labs(static_cast<long>(i) - static_cast<long>(j)) > window - 1) continue;
      const double diag = (i == 0 && j == 0) ? 0.0 : (i > 0 && j > 0 ? D[(i - 1) * m + j - 1] : inf);
      const double up = i > 0 ? D[(i - 1) * m + j] + p2 : inf;
      const double left = j > 0 ? D[i * m + j - 1] + p2 : inf;
      const double d = a[i] - b[j];
      D[i * m + j] = d * d + std::min(diag, std::min(up, left));
    }
  return std::sqrt(D[n * m - 1]);
}

void BM_DtwPair(benchmark::State& state) {
  const auto a = random_series(25, 1), b = random_series(25, 2);
  std::vector<double> scratch(demux::dtw_scratch_size(25));
  const demux::DtwParams p{15, 0.1};
  for (auto _ : state) benchmark::DoNotOptimize(demux::dtw_distance(a, b, p, scratch));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DtwPair);

void BM_DtwPairReference(benchmark::State& state) {
  const auto a = random_series(25, 1), b = random_series(25, 2);
  for (auto _ : state) benchmark::DoNotOptimize(reference_dtw(a, b, 15, 0.1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DtwPairReference);

// One query against a model's training bank (distances/s = items/s).
// Arguments: rows, ISA (0 sse2, 1 avx2, 2 avx512; skipped where the CPU lacks it), and whether
// the float32 bank (DtwPrecision::kFloat32; with ISA 0 its portable loop) runs instead.
void BM_DtwBank(benchmark::State& state) {
  const auto n_rows = static_cast<size_t>(state.range(0));
  const auto isa = static_cast<demux::DtwIsa>(state.range(1));
  const bool f32 = state.range(2) != 0;
  if (!demux::dtw_isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const auto rows = random_series(n_rows * 25, 3);
  const auto q = random_series(25, 4);
  const demux::DtwBank bank(rows, n_rows, 25, isa);
  state.SetLabel(!f32                   ? demux::dtw_isa_name(isa)
                 : bank.f32_uses_simd() ? "f32 avx2+fma"
                                        : "f32 portable");
  std::vector<double> scratch(bank.scratch_size()), out(n_rows);
  std::vector<float> scratch_f32(bank.scratch_size_f32());
  for (auto _ : state) {
    if (f32) {
      bank.distances_to_f32(q, {15, 0.1}, scratch_f32, out);
    } else {
      bank.distances_to(q, {15, 0.1}, scratch, out);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n_rows));
}
BENCHMARK(BM_DtwBank)->ArgsProduct({{851, 2601}, {0, 1, 2}, {0}});
BENCHMARK(BM_DtwBank)->ArgsProduct({{851, 2601}, {0, 1}, {1}});

// The same bank distances one pair at a time with the scalar kernel (the pre-batching baseline).
void BM_DtwBankScalar(benchmark::State& state) {
  const auto n_rows = static_cast<size_t>(state.range(0));
  const auto rows = random_series(n_rows * 25, 3);
  const auto q = random_series(25, 4);
  std::vector<double> scratch(demux::dtw_scratch_size(25));
  for (auto _ : state) {
    for (size_t r = 0; r < n_rows; ++r) {
      benchmark::DoNotOptimize(demux::dtw_distance(
          q, std::span<const double>(rows.data() + r * 25, 25), {15, 0.1}, scratch));
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n_rows));
}
BENCHMARK(BM_DtwBankScalar)->Arg(851)->Arg(2601);

// Whole-read classification from a fingerprint (reads/s = items/s), cycling over the 200 golden
// queries of the model.
// Argument: 0 = float64 DTW (exact), 1 = float32 DTW (the default).
void classify_bench(benchmark::State& state, const std::string& stem) {
  const auto dtw = state.range(0) ? demux::DtwPrecision::kFloat32 : demux::DtwPrecision::kFloat64;
  state.SetLabel(std::string("dtw ") + demux::dtw_precision_name(dtw));
  const auto& m = model(stem);
  const auto queries = golden_queries(stem);
  auto scratch = m.make_scratch();
  demux::Classification c;
  size_t i = 0;
  for (auto _ : state) {
    m.classify(queries[i], scratch, c, demux::KernelPrecision::kModelDefault, dtw);
    benchmark::DoNotOptimize(c.label);
    if (++i == queries.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_ClassifyWDX4(benchmark::State& state) { classify_bench(state, "WDX4_rna004_v1_0"); }
void BM_ClassifyWDX10(benchmark::State& state) { classify_bench(state, "WDX10_rna004_v1_0"); }
BENCHMARK(BM_ClassifyWDX4)->Arg(0)->Arg(1);
BENCHMARK(BM_ClassifyWDX10)->Arg(0)->Arg(1);

// Synthetic adapter window: 111+ events of 20-45 samples around 100 pA, 1.5 pA noise, then
// truncated/extended to the requested length.
std::vector<float> synthetic_window(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> dwell(static_cast<size_t>(n / 160), static_cast<size_t>(n / 90));
  std::uniform_real_distribution<double> level(80.0, 120.0);
  std::normal_distribution<double> noise(0.0, 1.5);
  std::vector<float> x;
  while (x.size() < n) {
    const double l = level(rng);
    const size_t len = dwell(rng);
    for (size_t i = 0; i < len && x.size() < n; ++i) x.push_back(static_cast<float>(l + noise(rng)));
  }
  return x;
}

void BM_Fingerprint(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const auto x = synthetic_window(n, 5);
  signal::FingerprintParams p;
  signal::FingerprintScratch s;
  std::vector<double> fp(25);
  for (auto _ : state) {
    const auto err = signal::barcode_fingerprint(x, p, s, fp);
    if (err != signal::FingerprintError::kNone) state.SkipWithError("fingerprint failed");
    benchmark::DoNotOptimize(fp.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(float)));
}
BENCHMARK(BM_Fingerprint)->Arg(2000)->Arg(4000)->Arg(6600);

// Fingerprint + WDX10 classification of one 4000-sample adapter window (reads/s).
void BM_ReadFingerprintAndClassifyWDX10(benchmark::State& state) {
  const auto& m = model("WDX10_rna004_v1_0");
  std::vector<std::vector<float>> windows;
  for (uint32_t seed = 0; seed < 16; ++seed) windows.push_back(synthetic_window(4000, seed + 100));
  signal::FingerprintParams p;
  signal::FingerprintScratch fs;
  auto cs = m.make_scratch();
  demux::Classification c;
  std::vector<double> fp(25);
  size_t i = 0;
  for (auto _ : state) {
    if (signal::barcode_fingerprint(windows[i], p, fs, fp) == signal::FingerprintError::kNone)
      m.classify(fp, cs, c);
    benchmark::DoNotOptimize(c.label);
    if (++i == windows.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReadFingerprintAndClassifyWDX10);

void BM_GbmPredict(benchmark::State& state) {
  auto r = demux::GbmModel::load(data_path("escapepod/gbm/model.json"));
  if (!r.is_ok()) {
    state.SkipWithError(r.status().to_string().c_str());
    return;
  }
  const auto& m = r.value();
  const auto x = random_series(6, 9);
  std::vector<double> p(m.n_classes());
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.predict_proba(x, p).is_ok());
    benchmark::DoNotOptimize(p.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GbmPredict);

}  // namespace

BENCHMARK_MAIN();
