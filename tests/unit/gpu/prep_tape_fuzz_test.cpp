// Fuzzed parity (contract item 5, CPU half): for random tapes, random stale contents and random
// register values, the eager reference, the host interpreter and the CUDA interpreter's code run
// in a CPU grid emulation produce byte-identical memory, canaries included, and the host
// interpreter rejects exactly the runs the reference finds out of bounds (writing nothing).
// Every failure prints its seed; ESCPOD_TAPE_FUZZ_SEED=<seed> replays one tape.
#include "escpod/gpu/prep_tape.hpp"

#include "device_emulation.hpp"
#include "tape_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>

namespace escpod::gpu::test {
namespace {

constexpr std::uint64_t kBaseSeed = 0x7a9e5eed;
constexpr int kTapes = 10000;
constexpr int kStepsPerTape = 3;

// First differing byte of two images, as text; empty when equal.
std::string first_difference(const TapeSpec& spec, const Image& a, const Image& b) {
  for (std::size_t i = 0; i < a.mem.size(); ++i) {
    if (a.mem[i] == b.mem[i]) continue;
    for (std::size_t k = 0; k < a.mem[i].size(); ++k) {
      if (a.mem[i][k] != b.mem[i][k]) {
        const auto off = static_cast<std::int64_t>(k) - static_cast<std::int64_t>(payload_offset(spec.bufs[i]));
        std::ostringstream os;
        os << spec.bufs[i].name << " byte " << off << " (element "
           << (off >= 0 ? off / wbytes(spec.bufs[i]) : -1) << "): " << int{a.mem[i][k]} << " vs "
           << int{b.mem[i][k]};
        return os.str();
      }
    }
  }
  return {};
}

// What the fuzz exercised, printed at the end so a weakened generator shows up in the log.
struct Coverage {
  std::int64_t admitted = 0, rejected = 0, stages = 0, ops[5] = {0, 0, 0, 0, 0}, pointer_ops = 0;
};
Coverage g_coverage;

void copy_contents(const Image& from, Image& to) {
  for (std::size_t i = 0; i < from.mem.size(); ++i) {
    std::copy(from.mem[i].begin(), from.mem[i].end(), to.mem[i].begin());
  }
}

// Registers for one image: the shared count values, pointer slots at that image's sources.
Registers registers_for(const TapeSpec& spec, Image& img, const RegValues& counts,
                        const std::vector<bool>& null_ptr, RegValues& out_values) {
  Registers regs;
  out_values = counts;
  for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
    const int slot = spec.bufs[b].pointer_slot;
    if (slot < 0) continue;
    const auto addr = null_ptr[b] ? std::int64_t{0}
                                  : static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(
                                        img.payload(spec, static_cast<int>(b))));
    out_values[static_cast<std::size_t>(slot)] = addr;
  }
  for (int s = 0; s < kNumRegisters; ++s) {
    EXPECT_TRUE(regs.set(s, out_values[static_cast<std::size_t>(s)]).is_ok());
  }
  return regs;
}

void run_one_tape(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const TapeSpec spec = random_spec(rng);
  std::ostringstream trace;
  trace << "seed " << seed << " (replay: ESCPOD_TAPE_FUZZ_SEED=" << seed << ")\n" << describe(spec);
  SCOPED_TRACE(trace.str());

  Image ref = make_image(spec);
  randomize(ref, spec, rng);
  Image host = ref;
  Image emu = ref;

  PrepTapeOptions checked;
  checked.check_stage_independence = true;
  PrepTape host_tape("fuzz-host", MemorySpace::kHost, checked);
  PrepTape emu_tape("fuzz-emu", MemorySpace::kHost, checked);
  auto addr = [&spec](Image& img) {
    return [&spec, &img](int b) { return reinterpret_cast<std::uintptr_t>(img.payload(spec, b)); };
  };
  ASSERT_TRUE(record(spec, host_tape, addr(host), MemorySpace::kHost).is_ok());
  ASSERT_TRUE(record(spec, emu_tape, addr(emu), MemorySpace::kHost).is_ok());
  const Status fin = host_tape.finalize();
  ASSERT_TRUE(fin.is_ok()) << fin.to_string();
  ASSERT_TRUE(emu_tape.finalize().is_ok());
  g_coverage.stages += host_tape.n_stages();
  for (const Item& it : spec.items) {
    if (it.is_barrier) continue;
    ++g_coverage.ops[static_cast<int>(it.op.kind)];
    for (int b : {it.op.src, it.op.idx}) {
      if (b >= 0 && spec.bufs[static_cast<std::size_t>(b)].pointer_slot >= 0) ++g_coverage.pointer_ops;
    }
  }

  for (int step = 0; step < kStepsPerTape; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    RegValues counts{};
    std::vector<bool> null_ptr(spec.bufs.size(), false);
    RegValues ref_values{}, host_values{}, emu_values{};
    Registers host_regs, emu_regs;
    bool valid = false;
    // Mostly admitted runs (so that memory is exercised), some rejected ones.
    const bool want_valid = rng() % 5 != 0;
    for (int attempt = 0; attempt < 20; ++attempt) {
      random_count_registers(rng, spec, counts);
      for (std::size_t b = 0; b < spec.bufs.size(); ++b) null_ptr[b] = rng() % 50 == 0;
      registers_for(spec, ref, counts, null_ptr, ref_values);
      valid = reference_valid(spec, ref_values);
      if (valid == want_valid) break;
    }
    host_regs = registers_for(spec, host, counts, null_ptr, host_values);
    emu_regs = registers_for(spec, emu, counts, null_ptr, emu_values);

    ++(valid ? g_coverage.admitted : g_coverage.rejected);
    const Status st = run_on_host(host_tape, host_regs);
    ASSERT_EQ(st.is_ok(), valid) << "host interpreter: " << st.to_string();
    if (valid) {
      reference_apply(spec, ref_values, ref);
      ASSERT_TRUE(emu_tape.check_run(emu_regs).is_ok());
      EmulatedGrid grid;
      const auto shape = rng() % 4;
      if (shape == 1) grid = {1, 3};
      if (shape == 2) grid = {5, 4};
      if (shape == 3) grid = {32, 2};
      emulate_device(emu_tape, emu_regs, grid, rng);
    } else {
      EXPECT_FALSE(emu_tape.check_run(emu_regs).is_ok());
    }
    std::string diff = first_difference(spec, ref, host);
    ASSERT_TRUE(diff.empty()) << "reference vs host interpreter: " << diff;
    diff = first_difference(spec, ref, emu);
    ASSERT_TRUE(diff.empty()) << "reference vs emulated device interpreter: " << diff;

    randomize(ref, spec, rng);  // new stale contents before the next step (in place: the
    copy_contents(ref, host);   // tapes hold these addresses)
    copy_contents(ref, emu);
  }
}

TEST(PrepTapeFuzz, ReferenceEqualsHostAndEmulatedDeviceInterpreters) {
  if (const char* one = std::getenv("ESCPOD_TAPE_FUZZ_SEED")) {
    run_one_tape(std::strtoull(one, nullptr, 0));
    return;
  }
  for (int t = 0; t < kTapes; ++t) {
    run_one_tape(kBaseSeed + static_cast<std::uint64_t>(t));
    if (::testing::Test::HasFatalFailure()) return;
  }
  const Coverage& c = g_coverage;
  std::printf("fuzz: %d tapes, %lld stages, runs admitted %lld / rejected %lld; ops fill %lld copy "
              "%lld gather %lld copy_2d %lld fill_tail %lld; pointer-register operands %lld\n",
              kTapes, static_cast<long long>(c.stages), static_cast<long long>(c.admitted),
              static_cast<long long>(c.rejected), static_cast<long long>(c.ops[0]),
              static_cast<long long>(c.ops[1]), static_cast<long long>(c.ops[2]),
              static_cast<long long>(c.ops[3]), static_cast<long long>(c.ops[4]),
              static_cast<long long>(c.pointer_ops));
  EXPECT_GT(c.admitted, kTapes);  // most runs must execute, not just be rejected
}

}  // namespace
}  // namespace escpod::gpu::test
