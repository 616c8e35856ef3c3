// A run allocates nothing on the host: check_run and the host interpreter are on every step's
// dispatch path. Counts calls of the global operator new (tests/support/alloc_counter.hpp).
#include "escpod/gpu/prep_tape.hpp"

#include <gtest/gtest.h>

#include "alloc_counter.hpp"

#include <cstdint>
#include <cstdlib>
#include <vector>

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
  const std::int64_t before = static_cast<std::int64_t>(escpod::test::allocation_count());
  ASSERT_GT(before, 0) << "the counting operator new is not in use";
  for (int i = 0; i < 1000; ++i) {
    if (!regs.set(1, i).is_ok() || !tape.check_run(regs).is_ok() || !run_on_host(tape, regs).is_ok()) {
      FAIL() << "run " << i << " failed";
    }
  }
  EXPECT_EQ(static_cast<std::int64_t>(escpod::test::allocation_count()) - before, 0);
}

}  // namespace
}  // namespace escpod::gpu
