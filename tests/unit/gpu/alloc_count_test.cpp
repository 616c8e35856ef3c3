// A run allocates nothing on the host: check_run and the host interpreter are on every step's
// dispatch path. Counts calls of the replaceable global operator new in this test binary.
// The replacement operators below pair malloc with free by design; GCC 12 with ASan at -O2
// cannot see that and warns about a mismatch.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include "escpod/gpu/prep_tape.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

namespace {
std::atomic<std::int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace escpod::gpu {
namespace {

TEST(PrepTapeAllocations, RunsAllocateNothing) {
  std::vector<std::int32_t> a(4096), src(4096);
  std::vector<std::int64_t> b(4096), table(64, 5), idx(4096, -1);
  PrepTapeOptions checked;
  checked.check_stage_independence = false;  // the release default on the dispatch path
  PrepTape tape("alloc", MemorySpace::kHost, checked);
  ASSERT_TRUE(tape.copy(host_buffer("a", std::span(a)), host_buffer("src", std::span(src)), Scalar::reg(1)).is_ok());
  ASSERT_TRUE(tape.fill_tail(host_buffer("a", std::span(a)), Scalar::reg(1), Scalar::reg(0), Scalar::imm(0)).is_ok());
  ASSERT_TRUE(tape.gather(host_buffer("b", std::span(b)), host_buffer("table", std::span(table)), host_buffer("idx", std::span(idx)),
                          Scalar::imm(16), Scalar::imm(-1))
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  Registers regs;
  ASSERT_TRUE(regs.set(0, 4096).is_ok());
  const std::int64_t before = g_allocations.load();
  ASSERT_GT(before, 0) << "the counting operator new is not in use";
  for (int i = 0; i < 1000; ++i) {
    if (!regs.set(1, i).is_ok() || !tape.check_run(regs).is_ok() || !run_on_host(tape, regs).is_ok()) {
      FAIL() << "run " << i << " failed";
    }
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace escpod::gpu
