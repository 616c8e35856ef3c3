// The six-buffer scrub of the prep-tape background (three int32 and three int64 persistent
// buffers, token capacity 8192 and row capacity 256 by default) and the escapepod three-buffer
// scrub (signal float32 [R, 2000], row length int32 [R], read slot int64 [R]), on the CPU: the
// host interpreter running one recorded tape against the same scrub as plain per-buffer loops.
// Each iteration is one step with a random live count below the bucket (a fixed sequence).
// Args: {token capacity, row capacity} and {rows, window}.
#include "escpod/gpu/prep_tape.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace escpod::gpu {
namespace {

constexpr std::size_t kSteps = 1024;

struct Step {
  std::int64_t live_rows;
  std::int64_t live_tokens;
};

std::vector<Step> random_steps(std::int64_t rows, std::int64_t tokens) {
  std::mt19937_64 rng(42);
  std::vector<Step> s(kSteps);
  for (Step& x : s) {
    x.live_rows = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(rows));
    x.live_tokens = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(tokens));
  }
  return s;
}

struct SixBuffers {
  std::vector<std::int32_t> token_ids, kv_loc, seq_lens;
  std::vector<std::int64_t> positions, req_pool, state_pool;
  SixBuffers(std::int64_t tokens, std::int64_t rows)
      : token_ids(static_cast<std::size_t>(tokens), 3), kv_loc(static_cast<std::size_t>(tokens), 3),
        seq_lens(static_cast<std::size_t>(rows), 3), positions(static_cast<std::size_t>(tokens), 3),
        req_pool(static_cast<std::size_t>(rows), 3), state_pool(static_cast<std::size_t>(rows), 3) {}
};

void BM_SixBufferScrub_PlainLoops(benchmark::State& state) {
  const std::int64_t tokens = state.range(0), rows = state.range(1);
  SixBuffers b(tokens, rows);
  const std::vector<Step> steps = random_steps(rows, tokens);
  std::size_t i = 0;
  for (auto _ : state) {
    const Step& s = steps[i++ % kSteps];
    std::fill(b.token_ids.begin() + s.live_tokens, b.token_ids.end(), 1);
    std::fill(b.kv_loc.begin() + s.live_tokens, b.kv_loc.end(), 0);
    std::fill(b.positions.begin() + s.live_tokens, b.positions.end(), 0);
    std::fill(b.req_pool.begin() + s.live_rows, b.req_pool.end(), 0);
    std::fill(b.state_pool.begin() + s.live_rows, b.state_pool.end(), 255);
    std::fill(b.seq_lens.begin() + s.live_rows, b.seq_lens.end(), 1);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_SixBufferScrub_HostTape(benchmark::State& state) {
  const std::int64_t tokens = state.range(0), rows = state.range(1);
  SixBuffers b(tokens, rows);
  const std::vector<Step> steps = random_steps(rows, tokens);
  PrepTape tape("six", MemorySpace::kHost);
  const Scalar live_t = Scalar::reg(slot::kLiveTokens), live_r = Scalar::reg(slot::kLiveRows);
  bool ok = tape.fill_tail(host_buffer("token_ids", std::span(b.token_ids)), live_t, Scalar::imm(tokens), Scalar::imm(1)).is_ok() &&
            tape.fill_tail(host_buffer("kv_loc", std::span(b.kv_loc)), live_t, Scalar::imm(tokens), Scalar::imm(0)).is_ok() &&
            tape.fill_tail(host_buffer("positions", std::span(b.positions)), live_t, Scalar::imm(tokens), Scalar::imm(0)).is_ok() &&
            tape.fill_tail(host_buffer("req_pool", std::span(b.req_pool)), live_r, Scalar::imm(rows), Scalar::imm(0)).is_ok() &&
            tape.fill_tail(host_buffer("state_pool", std::span(b.state_pool)), live_r, Scalar::imm(rows), Scalar::imm(255)).is_ok() &&
            tape.fill_tail(host_buffer("seq_lens", std::span(b.seq_lens)), live_r, Scalar::imm(rows), Scalar::imm(1)).is_ok() &&
            tape.finalize().is_ok();
  if (!ok) {
    state.SkipWithError("recording failed");
    return;
  }
  Registers regs;
  std::size_t i = 0;
  for (auto _ : state) {
    const Step& s = steps[i++ % kSteps];
    (void)regs.set(slot::kLiveRows, s.live_rows);
    (void)regs.set(slot::kLiveTokens, s.live_tokens);
    if (!run_on_host(tape, regs).is_ok()) {
      state.SkipWithError("run failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

struct EscapepodBuffers {
  std::vector<float> signal;
  std::vector<std::int32_t> row_len;
  std::vector<std::int64_t> read_slot;
  EscapepodBuffers(std::int64_t rows, std::int64_t window)
      : signal(static_cast<std::size_t>(rows * window), 1.f), row_len(static_cast<std::size_t>(rows), 3),
        read_slot(static_cast<std::size_t>(rows), 3) {}
};

void BM_EscapepodScrub_PlainLoops(benchmark::State& state) {
  const std::int64_t rows = state.range(0), window = state.range(1);
  EscapepodBuffers b(rows, window);
  const std::vector<Step> steps = random_steps(rows, rows);
  std::size_t i = 0;
  for (auto _ : state) {
    const std::int64_t r = steps[i++ % kSteps].live_rows;
    std::fill(b.signal.begin() + r * window, b.signal.end(), 0.0f);
    std::fill(b.row_len.begin() + r, b.row_len.end(), 0);
    std::fill(b.read_slot.begin() + r, b.read_slot.end(), -1);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_EscapepodScrub_HostTape(benchmark::State& state) {
  const std::int64_t rows = state.range(0), window = state.range(1);
  EscapepodBuffers b(rows, window);
  const std::vector<Step> steps = random_steps(rows, rows);
  PrepTape tape("escapepod", MemorySpace::kHost);
  const bool ok =
      tape.fill_tail(host_buffer("signal", std::span(b.signal)), Scalar::reg(2), Scalar::reg(3), Scalar::imm(float_bits(0.0f))).is_ok() &&
      tape.fill_tail(host_buffer("row_len", std::span(b.row_len)), Scalar::reg(1), Scalar::reg(0), Scalar::imm(0)).is_ok() &&
      tape.fill_tail(host_buffer("read_slot", std::span(b.read_slot)), Scalar::reg(1), Scalar::reg(0), Scalar::imm(-1)).is_ok() &&
      tape.finalize().is_ok();
  if (!ok) {
    state.SkipWithError("recording failed");
    return;
  }
  Registers regs;
  (void)regs.set(0, rows);
  (void)regs.set(3, rows * window);
  std::size_t i = 0;
  for (auto _ : state) {
    const std::int64_t r = steps[i++ % kSteps].live_rows;
    (void)regs.set(1, r);
    (void)regs.set(2, r * window);
    if (!run_on_host(tape, regs).is_ok()) {
      state.SkipWithError("run failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_SixBufferScrub_PlainLoops)->Args({8192, 256})->Args({512, 64});
BENCHMARK(BM_SixBufferScrub_HostTape)->Args({8192, 256})->Args({512, 64});
BENCHMARK(BM_EscapepodScrub_PlainLoops)->Args({64, 2000})->Args({512, 2000});
BENCHMARK(BM_EscapepodScrub_HostTape)->Args({64, 2000})->Args({512, 2000});

}  // namespace
}  // namespace escpod::gpu

BENCHMARK_MAIN();
