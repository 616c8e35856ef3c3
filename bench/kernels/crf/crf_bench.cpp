// CTC-CRF head kernels on the real geometry (n_base 4, state_len 4, 1280 scores per step; T = 200
// and 300 steps: the 2000/10 test bundle and the shipped 16-plex): posterior decode and beam search
// per read for every backend, lattice scoring of a 16-plex, and barcode matching of one call
// against 96 (and 16) references with our bit-parallel kernels, edlib and WFA2 (both capped at
// the running runner-up like ours). Encoder-like scores: stays 2.0, moves uniform in [-5, 5];
// fixed seeds. Results: bench/results/crf_decode.md.
#include <benchmark/benchmark.h>
#include <edlib.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include <wavefront/wavefront_align.h>
}

#include "escpod/demux/crf_decode.hpp"
#include "escpod/demux/crf_lattice.hpp"
#include "escpod/demux/crf_match.hpp"

namespace {

using namespace escpod;
using demux::CrfBackend;

const CrfBackend kBackends[] = {CrfBackend::kScalar, CrfBackend::kAvx2, CrfBackend::kAvx512};

std::vector<float> encoder_like(int64_t T, uint32_t seed) {
  const demux::CrfGeometry g;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  std::vector<float> s(static_cast<size_t>(T * g.n_scores()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = i % 5 == 0 ? 2.0f : u(rng);
  return s;
}

void BM_PosteriorDecode(benchmark::State& state) {
  const CrfBackend backend = kBackends[state.range(0)];
  const int64_t T = state.range(1);
  const demux::CrfGeometry g;
  if (!demux::crf_backend_available(backend, g)) {
    state.SkipWithError("backend not available on this CPU");
    return;
  }
  auto dec = demux::CrfPosteriorDecoder::create(g, backend);
  const std::vector<float> s = encoder_like(T, 1);
  demux::PosteriorCall call;
  for (auto _ : state) {
    if (!dec->decode({s.data(), T, g.n_scores()}, call).is_ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(call.path_score);
  }
  state.SetLabel(demux::crf_backend_name(backend));
  state.counters["reads/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PosteriorDecode)->ArgsProduct({{0, 1, 2}, {200, 300}})->Unit(benchmark::kMicrosecond);

void BM_BeamSearch(benchmark::State& state) {
  const CrfBackend backend = kBackends[state.range(0)];
  const int64_t T = state.range(1);
  const demux::CrfGeometry g;
  if (!demux::crf_backend_available(backend, g)) {
    state.SkipWithError("backend not available on this CPU");
    return;
  }
  auto beam = demux::CrfBeamSearch::create(g, {}, backend);
  const std::vector<float> s = encoder_like(T, 2);
  demux::BeamCall call;
  for (auto _ : state) {
    if (!beam->decode({s.data(), T, g.n_scores()}, call).is_ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(call.baseq);
  }
  state.SetLabel(demux::crf_backend_name(backend));
  state.counters["reads/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BeamSearch)->ArgsProduct({{0, 1, 2}, {200, 300}})->Unit(benchmark::kMicrosecond);

std::string random_seq(std::mt19937& rng, size_t len) {
  std::string s(len, 'A');
  for (char& c : s) c = "ACGT"[rng() % 4];
  return s;
}

std::string mutate(std::mt19937& rng, const std::string& s, double rate) {
  std::uniform_real_distribution<double> u(0, 1);
  std::string out;
  for (char c : s) {
    const double r = u(rng);
    if (r < rate / 3) continue;
    out += r < 2 * rate / 3 ? "ACGT"[rng() % 4] : c;
    if (r > 1 - rate / 3) out += "ACGT"[rng() % 4];
  }
  return out;
}

void BM_LatticeScore(benchmark::State& state) {
  const int64_t T = state.range(0);
  const demux::CrfGeometry g;
  std::mt19937 rng(3);
  std::vector<demux::BarcodeRef> refs;
  for (int r = 0; r < 16; ++r) refs.push_back({std::to_string(r), random_seq(rng, 26)});
  auto scorer = demux::CrfRefScorer::create(g, refs);
  const std::vector<float> s = encoder_like(T, 4);
  std::vector<float> logp(refs.size());
  for (auto _ : state) {
    if (!scorer->score({s.data(), T, g.n_scores()}, 0.0f, logp).is_ok()) state.SkipWithError("score failed");
    benchmark::DoNotOptimize(logp.data());
  }
  state.SetLabel(std::to_string(scorer->n_cells()) + " cells");
  state.counters["reads/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LatticeScore)->Arg(200)->Arg(300)->Unit(benchmark::kMicrosecond);

// One panel and 256 calls (each a 10%-noisy copy of some reference).
struct MatchCase {
  std::vector<demux::BarcodeRef> refs;
  std::vector<std::string> calls;
};
const MatchCase& match_case(size_t n_refs) {
  static std::vector<std::pair<size_t, MatchCase>> cache;
  for (const auto& [n, c] : cache)
    if (n == n_refs) return c;
  MatchCase c;
  std::mt19937 rng(static_cast<uint32_t>(n_refs));
  for (size_t r = 0; r < n_refs; ++r) c.refs.push_back({std::to_string(r), random_seq(rng, 30)});
  for (size_t i = 0; i < 256; ++i) c.calls.push_back(mutate(rng, c.refs[(i * 37) % n_refs].sequence, 0.1));
  cache.emplace_back(n_refs, std::move(c));
  return cache.back().second;
}

// Runner-up-capped selection around any capped distance function (returns > cap when beyond).
template <class Dist>
demux::BarcodeMatch capped_select(const MatchCase& c, const std::string& call, Dist&& dist) {
  int32_t best = std::numeric_limits<int32_t>::max(), second = best, idx = -1;
  for (size_t r = 0; r < c.refs.size(); ++r) {
    if (second == 0) break;  // nothing can beat a runner-up at distance 0
    const int32_t cap = second == std::numeric_limits<int32_t>::max() ? 1 << 20 : second - 1;
    const int32_t d = dist(c.refs[r].sequence, call, cap);
    if (d > cap) continue;
    if (d < best) {
      second = best;
      best = d;
      idx = static_cast<int32_t>(r);
    } else if (d < second) {
      second = d;
    }
  }
  demux::BarcodeMatch m;
  m.best_idx = idx;
  m.best_dist = best;
  m.second_dist = c.refs.size() > 1 ? second : -1;
  return m;
}

int32_t edlib_distance(const std::string& ref, const std::string& call, int32_t cap) {
  const EdlibAlignResult r = edlibAlign(call.data(), static_cast<int>(call.size()), ref.data(),
                                        static_cast<int>(ref.size()),
                                        edlibNewAlignConfig(cap, EDLIB_MODE_NW, EDLIB_TASK_DISTANCE, nullptr, 0));
  const int d = r.editDistance;
  edlibFreeAlignResult(r);
  return d < 0 ? cap + 1 : d;
}

struct Wfa {
  wavefront_aligner_t* wf;
  Wfa() {
    wavefront_aligner_attr_t attr = wavefront_aligner_attr_default;
    attr.distance_metric = edit;
    attr.alignment_scope = compute_score;
    attr.alignment_form.span = alignment_end2end;
    attr.heuristic.strategy = wf_heuristic_none;
    wf = wavefront_aligner_new(&attr);
  }
  ~Wfa() { wavefront_aligner_delete(wf); }
  int32_t operator()(const std::string& ref, const std::string& call, int32_t cap) const {
    // WFA gives up once its score reaches the limit, so allow one more than the cap.
    wavefront_aligner_set_max_alignment_score(wf, cap + 1);
    const int status = wavefront_align(wf, ref.data(), static_cast<int>(ref.size()), call.data(),
                                       static_cast<int>(call.size()));
    if (status != WF_STATUS_SUCCESSFUL) return cap + 1;
    const int score = wf->cigar->score;  // edit metric: minus the distance
    return score < 0 ? -score : score;
  }
};

// Every method must agree with the panel (checked once before timing).
template <class Match>
bool agrees(const MatchCase& c, const demux::BarcodePanel& panel, Match&& m) {
  for (const std::string& call : c.calls) {
    const demux::BarcodeMatch a = panel.match(call), b = m(call);
    if (a.best_idx != b.best_idx || a.best_dist != b.best_dist || a.second_dist != b.second_dist) {
      std::fprintf(stderr, "mismatch on '%s': %d/%d/%d vs %d/%d/%d\n", call.c_str(), a.best_idx, a.best_dist,
                   a.second_dist, b.best_idx, b.best_dist, b.second_dist);
      return false;
    }
  }
  return true;
}

void BM_MatchPanel(benchmark::State& state) {
  const CrfBackend backend = kBackends[state.range(0)];
  const MatchCase& c = match_case(static_cast<size_t>(state.range(1)));
  auto panel = demux::BarcodePanel::create(c.refs, demux::PanelForm::kAsGiven, backend);
  if (!panel.is_ok()) {
    state.SkipWithError("kernel not available");
    return;
  }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(panel->match(c.calls[i++ & 255]));
  state.SetLabel(std::string("myers-") + demux::crf_backend_name(backend));
  state.counters["reads/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatchPanel)->ArgsProduct({{0, 1, 2}, {16, 96}})->Unit(benchmark::kMicrosecond);

// Times a baseline distance under the runner-up cap, after checking it picks what the panel picks.
template <typename Distance>
void time_capped_baseline(benchmark::State& state, const MatchCase& c, const Distance& distance,
                          const char* label) {
  auto panel = demux::BarcodePanel::create(c.refs);
  const auto run = [&](const std::string& call) { return capped_select(c, call, distance); };
  if (!agrees(c, *panel, run)) {
    state.SkipWithError((std::string(label) + " disagrees with the panel").c_str());
    return;
  }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(run(c.calls[i++ & 255]));
  state.SetLabel(label);
  state.counters["reads/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_MatchEdlib(benchmark::State& state) {
  const MatchCase& c = match_case(static_cast<size_t>(state.range(0)));
  time_capped_baseline(state, c, edlib_distance, "edlib (capped)");
}
BENCHMARK(BM_MatchEdlib)->Arg(16)->Arg(96)->Unit(benchmark::kMicrosecond);

void BM_MatchWfa(benchmark::State& state) {
  const MatchCase& c = match_case(static_cast<size_t>(state.range(0)));
  time_capped_baseline(state, c, Wfa{}, "wfa2 (capped, baseline)");
}
BENCHMARK(BM_MatchWfa)->Arg(16)->Arg(96)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
