// VBZ kernels on nanopore-like chunks (102,400 samples, the official writer's chunk size):
// svb16 encode and decode on every kernel set this CPU runs (scalar reference included), zstd
// decompress alone, and the full codec both ways. Counters are samples/s.
#include <benchmark/benchmark.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "escpod/pod5/vbz.hpp"
#include "pod5/svb16.hpp"

namespace escpod::pod5 {
namespace {

constexpr size_t kChunkSamples = 102400;

// A random walk over event levels in 400..900 ADC with Gaussian noise, 3-20 sample dwell and a
// 5% chance per event of jumping to an unrelated level.
std::vector<int16_t> nanopore_like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 12.0);
  std::uniform_int_distribution<int> level_dist(400, 900);
  std::uniform_int_distribution<int> dwell(3, 20);
  std::uniform_int_distribution<int> percent(0, 99);
  std::vector<int16_t> out(n);
  double level = level_dist(rng);
  int left = dwell(rng);
  for (size_t i = 0; i < n; ++i) {
    if (--left <= 0) {
      level = percent(rng) < 5 ? level_dist(rng) : std::clamp(level + noise(rng) * 4, 380.0, 920.0);
      left = dwell(rng);
    }
    out[i] = static_cast<int16_t>(std::lround(level + noise(rng)));
  }
  return out;
}

struct Fixture {
  std::vector<int16_t> samples = nanopore_like(kChunkSamples, 1234);
  std::vector<uint8_t> svb16;
  std::vector<uint8_t> frame;

  Fixture() {
    svb16.resize(svb16_max_size(samples.size()));
    svb16.resize(detail::svb16_scalar_kernels().encode(samples, svb16.data()));
    svb16.shrink_to_fit();
    VbzCodec codec;
    if (!codec.compress(samples, frame).is_ok()) std::abort();
    std::fprintf(stderr,
                 "chunk: %zu samples, svb16 %zu bytes (%.3f B/sample), vbz %zu bytes "
                 "(%.3f B/sample), best svb16 kernels %s\n",
                 samples.size(), svb16.size(), double(svb16.size()) / double(samples.size()),
                 frame.size(), double(frame.size()) / double(samples.size()),
                 detail::svb16_decoder_name());
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

void set_samples_processed(benchmark::State& state, size_t per_iteration) {
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(per_iteration));
  state.counters["samples/s"] = benchmark::Counter(
      double(state.iterations()) * double(per_iteration), benchmark::Counter::kIsRate);
}

void BM_Svb16Encode(benchmark::State& state, const detail::Svb16Kernels* kernels) {
  const Fixture& f = fixture();
  std::vector<uint8_t> out(svb16_max_size(f.samples.size()));
  size_t size = 0;
  for (auto _ : state) {
    size = kernels->encode(f.samples, out.data());
    benchmark::DoNotOptimize(size);
    benchmark::ClobberMemory();
  }
  if (!std::equal(f.svb16.begin(), f.svb16.end(), out.begin()) || size != f.svb16.size()) {
    state.SkipWithError("encoded bytes differ from the scalar reference");
  }
  set_samples_processed(state, f.samples.size());
}

void BM_Svb16Decode(benchmark::State& state, const detail::Svb16Kernels* kernels) {
  const Fixture& f = fixture();
  std::vector<int16_t> out(f.samples.size());
  for (auto _ : state) {
    if (!detail::svb16_decode_with(*kernels, f.svb16, out)) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (out != f.samples) state.SkipWithError("decoded samples differ");
  set_samples_processed(state, f.samples.size());
}

void BM_ZstdDecompressOnly(benchmark::State& state) {
  const Fixture& f = fixture();
  std::vector<uint8_t> out(f.svb16.size());
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (auto _ : state) {
    const size_t n =
        ZSTD_decompressDCtx(dctx, out.data(), out.size(), f.frame.data(), f.frame.size());
    if (n != out.size()) state.SkipWithError("zstd failed");
    benchmark::ClobberMemory();
  }
  ZSTD_freeDCtx(dctx);
  set_samples_processed(state, f.samples.size());
}
BENCHMARK(BM_ZstdDecompressOnly);

void BM_VbzDecompress(benchmark::State& state) {
  const Fixture& f = fixture();
  VbzCodec codec;
  std::vector<int16_t> out(f.samples.size());
  for (auto _ : state) {
    if (!codec.decompress(f.frame, out).is_ok()) state.SkipWithError("decompress failed");
    benchmark::ClobberMemory();
  }
  if (out != f.samples) state.SkipWithError("decoded samples differ");
  set_samples_processed(state, f.samples.size());
}
BENCHMARK(BM_VbzDecompress);

// The first 10% of a chunk, as a window-sized peek would ask.
void BM_VbzDecompressPrefix(benchmark::State& state) {
  const Fixture& f = fixture();
  VbzCodec codec;
  std::vector<int16_t> out(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    if (!codec.decompress_prefix(f.frame, f.samples.size(), out).is_ok()) {
      state.SkipWithError("decompress_prefix failed");
    }
    benchmark::ClobberMemory();
  }
  set_samples_processed(state, out.size());
}
BENCHMARK(BM_VbzDecompressPrefix)->Arg(10240);

void BM_VbzCompress(benchmark::State& state) {
  const Fixture& f = fixture();
  VbzCodec codec;
  std::vector<uint8_t> out;
  const int level = static_cast<int>(state.range(0));
  for (auto _ : state) {
    if (!codec.compress(f.samples, out, level).is_ok()) state.SkipWithError("compress failed");
    benchmark::ClobberMemory();
  }
  state.counters["bytes/sample"] = double(out.size()) / double(f.samples.size());
  set_samples_processed(state, f.samples.size());
}
BENCHMARK(BM_VbzCompress)->Arg(1);

// One encode and one decode benchmark per kernel set this CPU runs (the SSSE3 encoder also
// serves AVX2, so encode is registered for scalar and ssse3 only).
[[maybe_unused]] const bool kRegistered = [] {
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    if (std::string(kernels->name) != "avx2") {
      benchmark::RegisterBenchmark((std::string("BM_Svb16Encode/") + kernels->name).c_str(),
                                   BM_Svb16Encode, kernels);
    }
    benchmark::RegisterBenchmark((std::string("BM_Svb16Decode/") + kernels->name).c_str(),
                                 BM_Svb16Decode, kernels);
  }
  return true;
}();

}  // namespace
}  // namespace escpod::pod5

BENCHMARK_MAIN();
