// Prep tape on the CPU: lifecycle, record-time validation (one test per rejection), run-time
// bounds, operation semantics on hand-written edge cases against the eager reference, mixed
// widths, barriers, the stage-independence check, the multi-step stale-tail scrub of the
// TokenSpeed and escapepod layouts, and the CUDA interpreter's code on large operations in a
// CPU grid emulation. Contract items refer to docs/prep_tape.md.
#include "escpod/gpu/device_tape.hpp"
#include "escpod/gpu/graph_runner.hpp"
#include "escpod/gpu/prep_tape.hpp"

#include "device_emulation.hpp"
#include "tape_test_support.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace escpod::gpu {
namespace {

using test::Image;
using test::Item;
using test::Kind;
using test::OpSpec;
using test::RegValues;
using test::TapeSpec;

::testing::AssertionResult fails_with(const Status& s, std::initializer_list<std::string> parts) {
  if (s.is_ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  for (const std::string& p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message '" << s.message() << "' lacks '" << p << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

PrepTapeOptions checked() {
  PrepTapeOptions o;
  o.check_stage_independence = true;
  return o;
}

Registers regs_of(std::initializer_list<std::pair<int, std::int64_t>> values) {
  Registers r;
  for (auto [slot_idx, v] : values) EXPECT_TRUE(r.set(slot_idx, v).is_ok());
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lifecycle (contract item 1, host half)

TEST(PrepTapeLifecycle, RecordingAfterFinalizeFailsNamingTapeAndCall) {
  std::vector<std::int32_t> a(8), b(8);
  std::vector<std::int64_t> idx(8);
  const Buffer ba = host_buffer("a", std::span(a));
  const Buffer bb = host_buffer("b", std::span(b));
  const Buffer bi = host_buffer("idx", std::span(idx));
  PrepTape tape("scrub", MemorySpace::kHost);
  ASSERT_TRUE(tape.fill(ba, Scalar::imm(8), Scalar::imm(0)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  EXPECT_TRUE(fails_with(tape.fill(ba, Scalar::imm(1), Scalar::imm(0)), {"'scrub'", "fill after finalize"}));
  EXPECT_TRUE(fails_with(tape.copy(ba, bb, Scalar::imm(1)), {"'scrub'", "copy after finalize"}));
  EXPECT_TRUE(fails_with(tape.gather(ba, bb, bi, Scalar::imm(1), Scalar::imm(0)),
                         {"'scrub'", "gather after finalize"}));
  EXPECT_TRUE(fails_with(tape.copy_2d(ba, bb, Scalar::imm(1), Scalar::imm(1), 2, Scalar::imm(0)),
                         {"'scrub'", "copy_2d after finalize"}));
  EXPECT_TRUE(fails_with(tape.fill_tail(ba, Scalar::imm(0), Scalar::imm(8), Scalar::imm(0)),
                         {"'scrub'", "fill_tail after finalize"}));
  EXPECT_TRUE(fails_with(tape.barrier(), {"'scrub'", "barrier after finalize"}));
  EXPECT_TRUE(fails_with(tape.finalize(), {"'scrub'", "finalize after finalize"}));
  EXPECT_EQ(tape.n_ops(), 1);
}

TEST(PrepTapeLifecycle, RunBeforeFinalizeFailsAndWritesNothing) {
  std::vector<std::int32_t> a(4, 7);
  PrepTape tape("early", MemorySpace::kHost);
  ASSERT_TRUE(tape.fill(host_buffer("a", std::span(a)), Scalar::imm(4), Scalar::imm(0)).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, Registers{}), {"'early'", "run before finalize"}));
  EXPECT_TRUE(fails_with(tape.check_run(Registers{}), {"'early'", "run before finalize"}));
  EXPECT_EQ(a, std::vector<std::int32_t>(4, 7));
}

TEST(PrepTapeLifecycle, EmptyStagesAreDropped) {
  std::vector<std::int32_t> a(4), b(4);
  const Buffer ba = host_buffer("a", std::span(a));
  const Buffer bb = host_buffer("b", std::span(b));
  PrepTape tape("stages", MemorySpace::kHost);
  ASSERT_TRUE(tape.barrier().is_ok());  // leading
  ASSERT_TRUE(tape.fill(ba, Scalar::imm(4), Scalar::imm(1)).is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());  // consecutive
  ASSERT_TRUE(tape.copy(bb, ba, Scalar::imm(4)).is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());  // trailing
  ASSERT_TRUE(tape.finalize().is_ok());
  EXPECT_EQ(tape.n_stages(), 2);
  EXPECT_EQ(tape.stage_descriptors(0).size(), 1u);
  EXPECT_EQ(tape.stage_descriptors(1).size(), 1u);
  ASSERT_TRUE(run_on_host(tape, Registers{}).is_ok());
  EXPECT_EQ(b, std::vector<std::int32_t>(4, 1));
}

TEST(PrepTapeLifecycle, EmptyTapeRunsAsNothing) {
  PrepTape tape("empty", MemorySpace::kHost);
  ASSERT_TRUE(tape.barrier().is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  EXPECT_EQ(tape.n_stages(), 0);
  EXPECT_TRUE(run_on_host(tape, Registers{}).is_ok());
}

TEST(PrepTapeLifecycle, OneStagePerBarrierGroupWhateverTheOpCount) {
  for (int n_ops : {1, 6, 64}) {
    std::vector<std::vector<std::int64_t>> bufs(static_cast<std::size_t>(n_ops), std::vector<std::int64_t>(16, 3));
    PrepTape tape("many", MemorySpace::kHost);
    for (int i = 0; i < n_ops; ++i) {
      std::string name = "b";
      name += std::to_string(i);
      ASSERT_TRUE(tape.fill_tail(host_buffer(name, std::span(bufs[static_cast<std::size_t>(i)])),
                                 Scalar::reg(1), Scalar::imm(16), Scalar::imm(-1))
                      .is_ok());
    }
    ASSERT_TRUE(tape.finalize().is_ok());
    EXPECT_EQ(tape.n_stages(), 1);
    EXPECT_EQ(tape.stage_descriptors(0).size(), static_cast<std::size_t>(n_ops));
  }
}

TEST(PrepTapeLifecycle, TapeKeepsRecordedOwnersAlive) {
  auto storage = std::make_shared<std::vector<std::int32_t>>(8, 5);
  std::weak_ptr<std::vector<std::int32_t>> watch = storage;
  PrepTape tape("owner", MemorySpace::kHost);
  ASSERT_TRUE(tape.fill(host_buffer("a", std::span(*storage), storage), Scalar::imm(8), Scalar::imm(2)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  storage.reset();
  EXPECT_FALSE(watch.expired());
  ASSERT_TRUE(run_on_host(tape, Registers{}).is_ok());
  EXPECT_EQ(watch.lock()->at(7), 2);
}

TEST(Registers, SlotsOutsideTheFileAreRejected) {
  Registers r;
  EXPECT_TRUE(fails_with(r.set(32, 1), {"slot 32"}));
  EXPECT_TRUE(fails_with(r.set(-1, 1), {"slot -1"}));
  EXPECT_TRUE(r.set(31, 9).is_ok());
  EXPECT_EQ(r.get(31), 9);
  EXPECT_EQ(r.get(40), 0);
}

// ---------------------------------------------------------------------------------------------
// Record-time validation (contract item 2): one test per rejection; each names op and buffer,
// and a rejected call records nothing.

class PrepTapeValidation : public ::testing::Test {
 protected:
  std::vector<std::int32_t> m_i32 = std::vector<std::int32_t>(16);
  std::vector<std::int64_t> m_i64 = std::vector<std::int64_t>(16);
  Buffer m_a = host_buffer("alpha", std::span(m_i32));
  Buffer m_b = host_buffer("beta", std::span(m_i64));
  PrepTape m_tape{"validate", MemorySpace::kHost};

  void SetUp() override {
    // One good op first, so the failing one is op 1.
    ASSERT_TRUE(m_tape.fill(m_a, Scalar::imm(1), Scalar::imm(0)).is_ok());
  }
  void TearDown() override { EXPECT_EQ(m_tape.n_ops(), 1) << "a rejected call recorded an op"; }
};

TEST_F(PrepTapeValidation, UnsupportedWidth) {
  Buffer bad = m_a;
  bad.width = static_cast<Width>(3);
  EXPECT_TRUE(fails_with(m_tape.fill(bad, Scalar::imm(1), Scalar::imm(0)),
                         {"'validate'", "op 1 (fill)", "dst 'alpha'", "unsupported width"}));
}

TEST_F(PrepTapeValidation, NonUnitInnermostStride) {
  Buffer bad = m_b;
  bad.inner_stride = 2;
  EXPECT_TRUE(fails_with(m_tape.copy(m_b, bad, Scalar::imm(1)),
                         {"op 1 (copy)", "src 'beta'", "non-unit innermost stride 2"}));
}

TEST_F(PrepTapeValidation, MisalignedAddress) {
  Buffer bad = m_b;
  bad.address += 4;
  bad.capacity -= 1;
  EXPECT_TRUE(fails_with(m_tape.fill_tail(bad, Scalar::imm(0), Scalar::imm(1), Scalar::imm(0)),
                         {"op 1 (fill_tail)", "dst 'beta'", "not aligned to its 8-byte width"}));
}

TEST_F(PrepTapeValidation, MismatchedSourceAndDestinationWidths) {
  EXPECT_TRUE(fails_with(m_tape.copy(m_a, m_b, Scalar::imm(1)),
                         {"op 1 (copy)", "src 'beta'", "differs from destination 'alpha'"}));
  EXPECT_TRUE(fails_with(m_tape.gather(m_a, m_b, m_b, Scalar::imm(1), Scalar::imm(0)),
                         {"op 1 (gather)", "src 'beta'"}));
  EXPECT_TRUE(fails_with(m_tape.copy_2d(m_b, m_a, Scalar::imm(1), Scalar::imm(1), 2, Scalar::imm(0)),
                         {"op 1 (copy_2d)", "src 'alpha'"}));
}

TEST_F(PrepTapeValidation, RegisterSlotOutsideTheFile) {
  EXPECT_TRUE(fails_with(m_tape.fill(m_a, Scalar::reg(32), Scalar::imm(0)),
                         {"op 1 (fill)", "n", "register slot 32"}));
  EXPECT_TRUE(fails_with(m_tape.fill(m_a, Scalar::imm(1), Scalar::reg(-1)),
                         {"op 1 (fill)", "value", "register slot -1"}));
  EXPECT_TRUE(fails_with(m_tape.copy(m_a, m_a, Scalar::imm(1), Scalar::reg(99)),
                         {"op 1 (copy)", "src_offset", "register slot 99"}));
  const Buffer ptr = pointer_register("staging", 40, 16, Width::k4, MemorySpace::kHost);
  EXPECT_TRUE(fails_with(m_tape.copy(m_a, ptr, Scalar::imm(1)),
                         {"op 1 (copy)", "src 'staging'", "pointer register slot 40"}));
}

TEST_F(PrepTapeValidation, ImmediateRangesBeyondCapacity) {
  EXPECT_TRUE(fails_with(m_tape.fill(m_a, Scalar::imm(17), Scalar::imm(0)),
                         {"op 1 (fill)", "dst 'alpha'", "count 17 exceeds the recorded capacity 16"}));
  std::vector<std::int32_t> small(4);
  const Buffer s = host_buffer("small", std::span(small));
  EXPECT_TRUE(fails_with(m_tape.copy(m_a, s, Scalar::imm(3), Scalar::imm(2)),
                         {"op 1 (copy)", "src 'small'", "source offset plus count 5"}));
  EXPECT_TRUE(fails_with(m_tape.fill_tail(m_a, Scalar::reg(1), Scalar::imm(17), Scalar::imm(0)),
                         {"op 1 (fill_tail)", "dst 'alpha'", "total 17"}));
  EXPECT_TRUE(fails_with(m_tape.copy_2d(m_a, m_a, Scalar::imm(3), Scalar::reg(2), 6, Scalar::imm(0)),
                         {"op 1 (copy_2d)", "dst 'alpha'", "rows times pitch 18"}));
  EXPECT_TRUE(fails_with(m_tape.copy_2d(m_a, s, Scalar::imm(2), Scalar::imm(3), 4, Scalar::imm(0)),
                         {"op 1 (copy_2d)", "src 'small'", "source extent 6"}));
  std::vector<std::int32_t> idx(2);
  EXPECT_TRUE(fails_with(m_tape.gather(m_a, m_a, host_buffer("idx", std::span(idx)), Scalar::imm(3), Scalar::imm(0)),
                         {"op 1 (gather)", "idx 'idx'", "count 3"}));
}

TEST_F(PrepTapeValidation, ImmediateValueMustFitTheDestinationWidth) {
  EXPECT_TRUE(fails_with(m_tape.fill(m_a, Scalar::imm(1), Scalar::imm(std::int64_t{1} << 32)),
                         {"op 1 (fill)", "value", "does not fit the 4-byte destination 'alpha'"}));
  EXPECT_TRUE(m_tape.n_ops() == 1);
}

TEST_F(PrepTapeValidation, BufferInTheWrongMemorySpace) {
  Buffer dev = m_a;
  dev.space = MemorySpace::kDevice;
  EXPECT_TRUE(fails_with(m_tape.fill(dev, Scalar::imm(1), Scalar::imm(0)),
                         {"op 1 (fill)", "dst 'alpha'", "device memory but the tape runs on the host"}));
}

TEST_F(PrepTapeValidation, DestinationMustBeAFixedBuffer) {
  const Buffer ptr = pointer_register("staging", 16, 16, Width::k4, MemorySpace::kHost);
  EXPECT_TRUE(fails_with(m_tape.fill(ptr, Scalar::imm(1), Scalar::imm(0)),
                         {"op 1 (fill)", "dst 'staging'", "must be a fixed buffer"}));
}

TEST_F(PrepTapeValidation, NullAddressAndBadPitchAndNegativeImmediates) {
  Buffer null_buf = m_a;
  null_buf.address = 0;
  EXPECT_TRUE(fails_with(m_tape.fill(null_buf, Scalar::imm(1), Scalar::imm(0)), {"op 1 (fill)", "null address"}));
  EXPECT_TRUE(fails_with(m_tape.copy_2d(m_a, m_a, Scalar::imm(1), Scalar::imm(1), 0, Scalar::imm(0)),
                         {"op 1 (copy_2d)", "pitch 0 must be positive"}));
  EXPECT_TRUE(fails_with(m_tape.copy(m_a, m_a, Scalar::imm(1), Scalar::imm(-1)),
                         {"op 1 (copy)", "negative source offset"}));
  EXPECT_TRUE(fails_with(m_tape.fill_tail(m_a, Scalar::imm(-2), Scalar::imm(4), Scalar::imm(0)),
                         {"op 1 (fill_tail)", "negative live count"}));
}

// ---------------------------------------------------------------------------------------------
// Run-time bounds (contract item 3)

TEST(PrepTapeRunBounds, LiveCountPastCapacityIsRejectedAndNothingIsWritten) {
  std::vector<std::int32_t> a(8, 7), b(8, 7);
  PrepTape tape("bounds", MemorySpace::kHost);
  ASSERT_TRUE(tape.fill(host_buffer("a", std::span(a)), Scalar::imm(8), Scalar::imm(1)).is_ok());
  ASSERT_TRUE(tape.fill_tail(host_buffer("b", std::span(b)), Scalar::imm(0), Scalar::reg(1), Scalar::imm(0)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, regs_of({{1, 9}})),
                         {"'bounds'", "op 1 (fill_tail)", "dst 'b'", "[0, 9)", "capacity 8"}));
  EXPECT_EQ(a, std::vector<std::int32_t>(8, 7)) << "op 0 ran although the run was rejected";
  EXPECT_EQ(b, std::vector<std::int32_t>(8, 7));
  EXPECT_TRUE(run_on_host(tape, regs_of({{1, 8}})).is_ok());
  EXPECT_EQ(b, std::vector<std::int32_t>(8, 0));
}

TEST(PrepTapeRunBounds, NegativeStartsOverflowAndNullPointersAreRejected) {
  std::vector<std::int64_t> a(8, 7), src(8, 1);
  const Buffer ba = host_buffer("a", std::span(a));
  const Buffer ptr = pointer_register("staging", 16, 8, Width::k8, MemorySpace::kHost);
  PrepTape tape("bounds", MemorySpace::kHost);
  ASSERT_TRUE(tape.copy(ba, ptr, Scalar::reg(1), Scalar::reg(2)).is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());
  ASSERT_TRUE(tape.fill_tail(ba, Scalar::reg(3), Scalar::imm(8), Scalar::imm(0)).is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());
  ASSERT_TRUE(tape.copy_2d(ba, ba, Scalar::reg(4), Scalar::imm(0), 2, Scalar::imm(5)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  Registers r = regs_of({{1, 4}, {2, 0}, {3, 8}, {4, 0}});
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 0 (copy)", "src 'staging'", "pointer register 16 is null"}));
  ASSERT_TRUE(r.set_pointer(16, src.data()).is_ok());
  ASSERT_TRUE(r.set(2, 5).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 0 (copy)", "read [5, 9)"}));
  ASSERT_TRUE(r.set(2, -1).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 0 (copy)", "read [-1, 3)"}));
  ASSERT_TRUE(r.set(2, 4).is_ok());
  ASSERT_TRUE(r.set(3, -1).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 1 (fill_tail)", "tail [-1, 8)"}));
  ASSERT_TRUE(r.set(3, 8).is_ok());
  ASSERT_TRUE(r.set(4, std::int64_t{1} << 62).is_ok());  // rows * pitch overflows int64
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 2 (copy_2d)", "outside the recorded capacity"}));
  ASSERT_TRUE(r.set(4, 1).is_ok());
  ASSERT_TRUE(r.set(2, 1).is_ok());
  EXPECT_EQ(a, std::vector<std::int64_t>(8, 7));
  ASSERT_TRUE(run_on_host(tape, r).is_ok());
  EXPECT_EQ(a, (std::vector<std::int64_t>{5, 5, 1, 1, 7, 7, 7, 7}));
}

TEST(PrepTapeRunBounds, MisalignedPointerRegisterIsRejected) {
  std::vector<std::int32_t> a(4);
  std::vector<std::int32_t> src(8, 3);
  PrepTape tape("align", MemorySpace::kHost);
  ASSERT_TRUE(tape.copy(host_buffer("a", std::span(a)), pointer_register("s", 17, 4, Width::k4, MemorySpace::kHost),
                        Scalar::imm(4))
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  Registers r;
  ASSERT_TRUE(r.set_pointer(17, reinterpret_cast<const char*>(src.data()) + 2).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(tape, r), {"op 0 (copy)", "not aligned to 4 bytes"}));
}

// ---------------------------------------------------------------------------------------------
// Operation semantics on edge cases (contract item 4): host interpreter = eager reference.

// Runs `spec` with register values `regs` through the host interpreter and the reference, on the
// same random stale contents, and compares every byte (canaries included).
void expect_parity(const TapeSpec& spec, const RegValues& values, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Image ref = test::make_image(spec);
  test::randomize(ref, spec, rng);
  Image host = ref;
  PrepTape tape("edge", MemorySpace::kHost, checked());
  ASSERT_TRUE(test::record(spec, tape,
                           [&](int b) { return reinterpret_cast<std::uintptr_t>(host.payload(spec, b)); },
                           MemorySpace::kHost)
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  Registers regs;
  for (int s = 0; s < kNumRegisters; ++s) ASSERT_TRUE(regs.set(s, values[static_cast<std::size_t>(s)]).is_ok());
  ASSERT_TRUE(test::reference_valid(spec, values));
  const Status st = run_on_host(tape, regs);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  test::reference_apply(spec, values, ref);
  for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
    EXPECT_EQ(ref.mem[b], host.mem[b]) << "buffer " << spec.bufs[b].name << "\n" << test::describe(spec);
  }
}

TapeSpec one_op(OpSpec op, std::vector<test::BufSpec> bufs) {
  TapeSpec spec;
  spec.bufs = std::move(bufs);
  spec.items.push_back(Item{false, op});
  return spec;
}

test::BufSpec buf(std::string name, Width w, std::int64_t cap) {
  test::BufSpec b;
  b.name = std::move(name);
  b.width = w;
  b.capacity = cap;
  return b;
}

TEST(PrepTapeSemantics, FillCounts) {
  for (std::int64_t n : {-3, 0, 1, 15, 16}) {
    OpSpec op;
    op.kind = Kind::kFill;
    op.dst = 0;
    op.n = Scalar::reg(1);
    op.value = Scalar::imm(-2);
    RegValues v{};
    v[1] = n;
    expect_parity(one_op(op, {buf("d", Width::k4, 16)}), v, 1);
  }
}

TEST(PrepTapeSemantics, FillTailEdges) {
  struct Case { std::int64_t live, total; };
  // live = 0, live = total, live > total, total = capacity, single element
  for (Case c : {Case{0, 16}, Case{5, 5}, Case{9, 4}, Case{3, 16}, Case{15, 16}, Case{0, 0}}) {
    OpSpec op;
    op.kind = Kind::kFillTail;
    op.dst = 0;
    op.n = Scalar::reg(1);
    op.m = Scalar::reg(2);
    op.value = Scalar::imm(-1);
    RegValues v{};
    v[1] = c.live;
    v[2] = c.total;
    expect_parity(one_op(op, {buf("d", Width::k8, 16)}), v, 2);
  }
}

TEST(PrepTapeSemantics, CopyWithImmediateAndRegisterOffsets) {
  for (bool reg_offset : {false, true}) {
    for (std::int64_t n : {0, 1, 5}) {
      OpSpec op;
      op.kind = Kind::kCopy;
      op.dst = 0;
      op.src = 1;
      op.n = Scalar::reg(1);
      op.off = reg_offset ? Scalar::reg(2) : Scalar::imm(3);
      RegValues v{};
      v[1] = n;
      v[2] = 7;
      expect_parity(one_op(op, {buf("d", Width::k2, 8), buf("s", Width::k2, 12)}), v, 3);
    }
  }
}

TEST(PrepTapeSemantics, GatherNegativeAndPastTheEndIndicesGiveTheOutOfRangeValue) {
  std::vector<float> src = {1.5f, 2.5f, 3.5f, 4.5f};
  std::vector<std::int64_t> idx = {3, -1, 0, 4, -7, 2, 1000, 1};
  std::vector<float> dst(8, 9.f);
  PrepTape tape("gather", MemorySpace::kHost);
  ASSERT_TRUE(tape.gather(host_buffer("dst", std::span(dst)), host_buffer("src", std::span(src)),
                          host_buffer("idx", std::span(idx)), Scalar::reg(1), Scalar::imm(float_bits(-0.0f)))
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  ASSERT_TRUE(run_on_host(tape, regs_of({{1, 8}})).is_ok());
  const std::vector<float> want = {4.5f, -0.0f, 1.5f, -0.0f, -0.0f, 3.5f, -0.0f, 2.5f};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::memcmp(&dst[i], &want[i], 4), 0) << "element " << i;
  }
  EXPECT_TRUE(std::signbit(dst[1]));
  // The same through the reference, with 1-byte indices and random contents.
  for (std::int64_t n : {0, 1, 6}) {
    OpSpec op;
    op.kind = Kind::kGather;
    op.dst = 0;
    op.src = 1;
    op.idx = 2;
    op.n = Scalar::reg(1);
    op.value = Scalar::imm(77);
    RegValues v{};
    v[1] = n;
    expect_parity(one_op(op, {buf("d", Width::k4, 6), buf("s", Width::k4, 5), buf("i", Width::k1, 6)}), v, 4);
  }
}

TEST(PrepTapeSemantics, Copy2dPadsColumnsAtAndPastTheSourceWidthAndWritesTheFullPitch) {
  std::vector<std::int32_t> src = {1, 2, 3, 4, 5, 6};  // 3 rows x 2 columns
  std::vector<std::int32_t> dst(12, 99);               // pitch 4
  PrepTape tape("2d", MemorySpace::kHost);
  ASSERT_TRUE(tape.copy_2d(host_buffer("dst", std::span(dst)), host_buffer("src", std::span(src)), Scalar::reg(1),
                           Scalar::reg(2), 4, Scalar::imm(-5))
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  ASSERT_TRUE(run_on_host(tape, regs_of({{1, 3}, {2, 2}})).is_ok());
  EXPECT_EQ(dst, (std::vector<std::int32_t>{1, 2, -5, -5, 3, 4, -5, -5, 5, 6, -5, -5}));
  // Source wider than the pitch: columns at or past the pitch are dropped.
  std::fill(dst.begin(), dst.end(), 99);
  ASSERT_TRUE(run_on_host(tape, regs_of({{1, 1}, {2, 6}})).is_ok());
  EXPECT_EQ(dst, (std::vector<std::int32_t>{1, 2, 3, 4, 99, 99, 99, 99, 99, 99, 99, 99}));
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {1, 0}, {2, -1}, {1, 1}, {3, 3}}) {
    OpSpec op;
    op.kind = Kind::kCopy2d;
    op.dst = 0;
    op.src = 1;
    op.n = Scalar::reg(1);
    op.m = Scalar::reg(2);
    op.pitch = 3;
    op.value = Scalar::imm(-9);
    RegValues v{};
    v[1] = rows;
    v[2] = cols;
    expect_parity(one_op(op, {buf("d", Width::k8, 9), buf("s", Width::k8, 9)}), v, 5);
  }
}

TEST(PrepTapeSemantics, RegistersAreSticky) {
  std::vector<std::int32_t> a(8, 0);
  PrepTape tape("sticky", MemorySpace::kHost);
  ASSERT_TRUE(tape.fill_tail(host_buffer("a", std::span(a)), Scalar::reg(1), Scalar::reg(0), Scalar::reg(8)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  Registers regs = regs_of({{0, 8}, {1, 2}, {8, 4}});
  ASSERT_TRUE(run_on_host(tape, regs).is_ok());
  EXPECT_EQ(a, (std::vector<std::int32_t>{0, 0, 4, 4, 4, 4, 4, 4}));
  ASSERT_TRUE(regs.set(1, 6).is_ok());  // only the live count changes; bucket and value stick
  std::fill(a.begin(), a.end(), 0);
  ASSERT_TRUE(run_on_host(tape, regs).is_ok());
  EXPECT_EQ(a, (std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 4, 4}));
}

// ---------------------------------------------------------------------------------------------
// Mixed widths in one stage (contract item 8, host half)

TEST(PrepTapeMixedWidths, OneStageStoresEachRowAtItsOwnWidth) {
  // One allocation holding three adjacent ranges of different widths, plus canaries.
  alignas(16) std::array<std::uint8_t, 16 + 4 * 4 + 8 * 3 + 4 * 3 + 16> mem;
  mem.fill(0xCC);
  std::uint8_t* p = mem.data() + 16;
  Buffer f32 = device_buffer("f32", nullptr, 4, Width::k4);
  f32.space = MemorySpace::kHost;
  f32.address = reinterpret_cast<std::uintptr_t>(p);
  Buffer i64 = f32;
  i64.name = "i64";
  i64.width = Width::k8;
  i64.capacity = 3;
  i64.address = reinterpret_cast<std::uintptr_t>(p + 16);
  Buffer i32 = f32;
  i32.name = "i32";
  i32.capacity = 3;
  i32.address = reinterpret_cast<std::uintptr_t>(p + 16 + 24);

  PrepTape tape("mixed", MemorySpace::kHost, checked());
  ASSERT_TRUE(tape.fill_tail(f32, Scalar::imm(0), Scalar::imm(2), Scalar::imm(float_bits(-0.0f))).is_ok());
  ASSERT_TRUE(tape.fill_tail(f32, Scalar::imm(2), Scalar::imm(4), Scalar::imm(float_bits(3.25f))).is_ok());
  ASSERT_TRUE(tape.fill(i64, Scalar::imm(1), Scalar::imm((std::int64_t{1} << 40) + 3)).is_ok());
  ASSERT_TRUE(tape.fill_tail(i64, Scalar::imm(1), Scalar::imm(2), Scalar::reg(9)).is_ok());
  ASSERT_TRUE(tape.fill_tail(i64, Scalar::imm(2), Scalar::imm(3), Scalar::imm(-1)).is_ok());
  ASSERT_TRUE(tape.fill_tail(i32, Scalar::imm(0), Scalar::imm(3), Scalar::imm(-7)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  EXPECT_EQ(tape.n_stages(), 1);
  ASSERT_TRUE(run_on_host(tape, regs_of({{9, -(std::int64_t{1} << 35)}})).is_ok());

  float f[4];
  std::memcpy(f, p, 16);
  std::int64_t q[3];
  std::memcpy(q, p + 16, 24);
  std::int32_t d[3];
  std::memcpy(d, p + 40, 12);
  EXPECT_TRUE(std::signbit(f[0]) && f[0] == 0.0f);
  EXPECT_TRUE(std::signbit(f[1]));
  EXPECT_EQ(f[2], 3.25f);
  EXPECT_EQ(f[3], 3.25f);
  EXPECT_EQ(q[0], (std::int64_t{1} << 40) + 3);
  EXPECT_EQ(q[1], -(std::int64_t{1} << 35));
  EXPECT_EQ(q[2], -1);
  EXPECT_EQ(d[0], -7);
  EXPECT_EQ(d[2], -7);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(mem[static_cast<std::size_t>(i)], 0xCC) << "leading canary byte " << i;
    EXPECT_EQ(mem[mem.size() - 16 + static_cast<std::size_t>(i)], 0xCC) << "trailing canary byte " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Barrier ordering (contract item 9) and the stage-independence check (contract item 10)

TEST(PrepTapeBarrier, LaterStageSeesEveryWriteOfTheEarlierOne) {
  constexpr std::int64_t kN = std::int64_t{1} << 18;
  std::vector<std::int32_t> big(kN, 0);
  std::vector<std::int64_t> idx = {kN - 1};
  std::vector<std::int32_t> out(1, 0);
  PrepTape tape("barrier", MemorySpace::kHost, checked());
  const Buffer bbig = host_buffer("big", std::span(big));
  ASSERT_TRUE(tape.fill(bbig, Scalar::imm(kN), Scalar::reg(8)).is_ok());
  ASSERT_TRUE(tape.barrier().is_ok());
  ASSERT_TRUE(tape.gather(host_buffer("out", std::span(out)), bbig, host_buffer("idx", std::span(idx)),
                          Scalar::imm(1), Scalar::imm(-1))
                  .is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  ASSERT_EQ(tape.n_stages(), 2);
  std::mt19937_64 rng(9);
  for (int rep = 0; rep < 100; ++rep) {
    const auto v = static_cast<std::int32_t>(rng() % 1000000);
    Registers r = regs_of({{8, v}});
    ASSERT_TRUE(run_on_host(tape, r).is_ok());
    ASSERT_EQ(out[0], v) << "rep " << rep;
    // The device interpreter's code, emulated with its real grid (2^18 x 4 bytes = 64 blocks).
    if (rep < 3) {
      out[0] = 0;
      test::emulate_device(tape, r, {}, rng);
      ASSERT_EQ(out[0], v);
    }
  }
}

TEST(PrepTapeIndependence, ConflictsInOneStageAreRejectedNamingBothOps) {
  std::vector<std::int32_t> a(16), b(16);
  const Buffer ba = host_buffer("a", std::span(a));
  const Buffer bb = host_buffer("b", std::span(b));
  {  // read-after-write
    PrepTape t("raw", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.fill(ba, Scalar::reg(1), Scalar::imm(1)).is_ok());
    ASSERT_TRUE(t.copy(bb, ba, Scalar::reg(1)).is_ok());
    EXPECT_TRUE(fails_with(t.finalize(), {"'raw'", "stage 0", "op 0 (fill) writes dst 'a'", "op 1 (copy) reads src 'a'",
                                          "read-after-write"}));
  }
  {  // write-after-read
    PrepTape t("war", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.copy(bb, ba, Scalar::imm(16)).is_ok());
    ASSERT_TRUE(t.fill_tail(ba, Scalar::reg(1), Scalar::imm(16), Scalar::imm(0)).is_ok());
    EXPECT_TRUE(fails_with(t.finalize(), {"op 0 (copy) reads src 'a'", "op 1 (fill_tail) writes dst 'a'",
                                          "write-after-read"}));
  }
  {  // write-after-write with unrelated registers
    PrepTape t("waw", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.fill(ba, Scalar::reg(1), Scalar::imm(1)).is_ok());
    ASSERT_TRUE(t.fill_tail(ba, Scalar::reg(2), Scalar::imm(16), Scalar::imm(0)).is_ok());
    EXPECT_TRUE(fails_with(t.finalize(), {"op 0 (fill) writes dst 'a'", "op 1 (fill_tail) writes dst 'a'",
                                          "write-after-write"}));
  }
  {  // a copy reading its own destination
    PrepTape t("self", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.copy(ba, ba, Scalar::imm(4), Scalar::reg(1)).is_ok());
    EXPECT_TRUE(fails_with(t.finalize(), {"op 0 (copy)", "may overlap its own dst 'a'"}));
  }
  {  // two views of one allocation
    Buffer tail_view = ba;
    tail_view.name = "a-tail";
    tail_view.address += 8 * sizeof(std::int32_t);
    tail_view.capacity = 8;
    PrepTape t("alias", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.fill(ba, Scalar::reg(1), Scalar::imm(1)).is_ok());
    ASSERT_TRUE(t.fill(tail_view, Scalar::imm(2), Scalar::imm(2)).is_ok());
    EXPECT_TRUE(fails_with(t.finalize(), {"op 0 (fill) writes dst 'a'", "op 1 (fill) writes dst 'a-tail'"}));
  }
  {  // the same tape with a barrier is fine
    PrepTape t("raw-fixed", MemorySpace::kHost, checked());
    ASSERT_TRUE(t.fill(ba, Scalar::reg(1), Scalar::imm(1)).is_ok());
    ASSERT_TRUE(t.barrier().is_ok());
    ASSERT_TRUE(t.copy(bb, ba, Scalar::reg(1)).is_ok());
    EXPECT_TRUE(t.finalize().is_ok());
  }
  {  // with the check off (the release default) finalize does not analyse
    PrepTapeOptions off;
    off.check_stage_independence = false;
    PrepTape t("unchecked", MemorySpace::kHost, off);
    ASSERT_TRUE(t.fill(ba, Scalar::reg(1), Scalar::imm(1)).is_ok());
    ASSERT_TRUE(t.copy(bb, ba, Scalar::reg(1)).is_ok());
    EXPECT_TRUE(t.finalize().is_ok());
  }
}

TEST(PrepTapeIndependence, DisjointRangesOfOneBufferShareAStage) {
  std::vector<std::int64_t> a(32), src(32), b(32), idx(32);
  const Buffer ba = host_buffer("a", std::span(a));
  const Buffer bs = host_buffer("src", std::span(src));
  PrepTape t("disjoint", MemorySpace::kHost, checked());
  ASSERT_TRUE(t.copy(ba, bs, Scalar::reg(1)).is_ok());                                   // [0, live)
  ASSERT_TRUE(t.fill_tail(ba, Scalar::reg(1), Scalar::reg(0), Scalar::imm(-1)).is_ok());  // [live, total)
  // Immediate halves of one buffer, and a copy within one buffer between disjoint halves.
  const Buffer bb = host_buffer("b", std::span(b));
  ASSERT_TRUE(t.fill(bb, Scalar::imm(8), Scalar::imm(3)).is_ok());
  ASSERT_TRUE(t.fill_tail(bb, Scalar::imm(8), Scalar::imm(16), Scalar::imm(4)).is_ok());
  ASSERT_TRUE(t.copy(host_buffer("idx", std::span(idx)), bs, Scalar::imm(4), Scalar::imm(28)).is_ok());
  ASSERT_TRUE(t.finalize().is_ok());
  EXPECT_EQ(t.n_stages(), 1);
}

TEST(PrepTapeIndependence, PointerRegisterReadOfAStageWriteIsRejectedAtRunTime) {
  std::vector<std::int32_t> a(8, 1), b(8, 2);
  const Buffer ba = host_buffer("a", std::span(a));
  PrepTape t("ptr-alias", MemorySpace::kHost, checked());
  ASSERT_TRUE(t.fill(ba, Scalar::imm(8), Scalar::imm(5)).is_ok());
  ASSERT_TRUE(t.copy(host_buffer("b", std::span(b)), pointer_register("staging", 16, 8, Width::k4, MemorySpace::kHost),
                     Scalar::imm(4))
                  .is_ok());
  ASSERT_TRUE(t.finalize().is_ok());  // addresses unknown at record time
  Registers r;
  ASSERT_TRUE(r.set_pointer(16, a.data() + 2).is_ok());
  EXPECT_TRUE(fails_with(run_on_host(t, r), {"'ptr-alias'", "op 1 reads 'staging' through pointer register 16"}));
  EXPECT_EQ(a, std::vector<std::int32_t>(8, 1));
  std::vector<std::int32_t> elsewhere(8, 9);
  ASSERT_TRUE(r.set_pointer(16, elsewhere.data()).is_ok());
  EXPECT_TRUE(run_on_host(t, r).is_ok());
  EXPECT_EQ(b, (std::vector<std::int32_t>{9, 9, 9, 9, 2, 2, 2, 2}));
}

// ---------------------------------------------------------------------------------------------
// Stale-tail scrub across steps (contract item 6)

struct ScrubBuffer {
  std::string name;
  Width width;
  std::int64_t capacity;
  bool token_indexed;
  std::int64_t pad;
};

// Records one fill_tail per buffer (live from register 1 or 2, total = the bucket in register 0
// or 3), runs a growing and shrinking step sequence with random stale tails written between
// steps, and checks tails and live prefixes after every step.
void run_scrub_layout(const std::vector<ScrubBuffer>& layout, std::int64_t rows_capacity,
                      std::int64_t tokens_capacity) {
  std::vector<std::vector<std::uint8_t>> mem;
  PrepTape tape("scrub", MemorySpace::kHost, checked());
  for (const ScrubBuffer& b : layout) {
    mem.emplace_back(static_cast<std::size_t>(b.capacity * width_bytes(b.width)));
    Buffer buf;
    buf.name = b.name;
    buf.address = reinterpret_cast<std::uintptr_t>(mem.back().data());
    buf.capacity = b.capacity;
    buf.width = b.width;
    ASSERT_TRUE(tape.fill_tail(buf, Scalar::reg(b.token_indexed ? slot::kLiveTokens : slot::kLiveRows),
                               Scalar::reg(b.token_indexed ? 3 : slot::kBucketRows), Scalar::imm(b.pad))
                    .is_ok());
  }
  ASSERT_TRUE(tape.finalize().is_ok());
  ASSERT_EQ(tape.n_stages(), 1);
  std::mt19937_64 rng(17);
  const std::int64_t kSteps[] = {rows_capacity, 5, rows_capacity, 0, 1, rows_capacity - 1};
  Registers regs;
  ASSERT_TRUE(regs.set(slot::kBucketRows, rows_capacity).is_ok());
  ASSERT_TRUE(regs.set(3, tokens_capacity).is_ok());
  for (std::int64_t live_rows : kSteps) {
    const std::int64_t live_tokens = live_rows * (tokens_capacity / rows_capacity);
    ASSERT_TRUE(regs.set(slot::kLiveRows, live_rows).is_ok());
    ASSERT_TRUE(regs.set(slot::kLiveTokens, live_tokens).is_ok());
    // Stale contents everywhere, then this step's live prefixes.
    std::vector<std::vector<std::uint8_t>> live_copy;
    for (std::size_t i = 0; i < layout.size(); ++i) {
      for (auto& byte : mem[i]) byte = static_cast<std::uint8_t>(rng());
      live_copy.push_back(mem[i]);
    }
    ASSERT_TRUE(run_on_host(tape, regs).is_ok());
    for (std::size_t i = 0; i < layout.size(); ++i) {
      const ScrubBuffer& b = layout[i];
      const int w = width_bytes(b.width);
      const std::int64_t live = b.token_indexed ? live_tokens : live_rows;
      ASSERT_TRUE(std::equal(mem[i].begin(), mem[i].begin() + live * w, live_copy[i].begin()))
          << b.name << ": live prefix changed at live " << live;
      for (std::int64_t e = live; e < b.capacity; ++e) {
        std::int64_t v = 0;
        std::memcpy(&v, mem[i].data() + e * w, static_cast<std::size_t>(w));
        if (w == 4) v = static_cast<std::int32_t>(v);
        ASSERT_EQ(v, b.pad) << b.name << " element " << e << " at live " << live;
      }
    }
  }
}

TEST(PrepTapeScrub, TokenSpeedSixBufferLayout) {
  constexpr std::int64_t kRows = 256, kTokens = 8192;
  run_scrub_layout({{"token_ids", Width::k4, kTokens, true, 1},
                    {"kv_write_loc", Width::k4, kTokens, true, 0},
                    {"positions", Width::k8, kTokens, true, 0},
                    {"req_pool_idx", Width::k8, kRows, false, 0},
                    {"state_req_pool_idx", Width::k8, kRows, false, 255},
                    {"seq_lens", Width::k4, kRows, false, 1}},
                   kRows, kTokens);
}

TEST(PrepTapeScrub, EscapepodLayout) {
  // signal [R, W] float32 (scrubbed as a flat tail from r*W, registers 2 and 3 hold r*W and
  // B*W), row length int32 [R], read slot int64 [R] padded with -1.
  constexpr std::int64_t kRows = 64, kWindow = 2000;
  run_scrub_layout({{"signal", Width::k4, kRows * kWindow, true, 0},
                    {"row_len", Width::k4, kRows, false, 0},
                    {"read_slot", Width::k8, kRows, false, -1}},
                   kRows, kRows * kWindow);
}

// ---------------------------------------------------------------------------------------------
// The CUDA interpreter's code on large operations and unaligned starts (grid emulation)

TEST(PrepTapeDeviceEmulation, LargeOperationsSpanManyBlocks) {
  std::mt19937_64 rng(5);
  for (Width w : {Width::k1, Width::k2, Width::k4, Width::k8}) {
    for (std::int64_t lead : {0, 1, 3}) {
      TapeSpec spec;
      test::BufSpec big = buf("big", w, 300000);
      big.lead = lead;
      test::BufSpec src = buf("src", w, 300000);
      src.lead = (lead + 1) % 3;
      spec.bufs = {big, src, buf("dst", w, 300000)};
      OpSpec tail;
      tail.kind = Kind::kFillTail;
      tail.dst = 0;
      tail.n = Scalar::reg(1);
      tail.m = Scalar::reg(2);
      tail.value = Scalar::imm(0x5a);
      OpSpec cp;
      cp.kind = Kind::kCopy;
      cp.dst = 2;
      cp.src = 1;
      cp.n = Scalar::reg(3);
      cp.off = Scalar::reg(4);
      spec.items = {Item{false, tail}, Item{false, cp}};
      RegValues v{};
      v[1] = 7;
      v[2] = 299999;
      v[3] = 250001;
      v[4] = 13;
      Image ref = test::make_image(spec);
      test::randomize(ref, spec, rng);
      Image emu = ref;
      PrepTape tape("big", MemorySpace::kHost, checked());
      ASSERT_TRUE(test::record(spec, tape,
                               [&](int b) { return reinterpret_cast<std::uintptr_t>(emu.payload(spec, b)); },
                               MemorySpace::kHost)
                      .is_ok());
      ASSERT_TRUE(tape.finalize().is_ok());
      Registers regs;
      for (int s = 1; s <= 4; ++s) ASSERT_TRUE(regs.set(s, v[static_cast<std::size_t>(s)]).is_ok());
      ASSERT_TRUE(tape.check_run(regs).is_ok());
      test::emulate_device(tape, regs, {}, rng);
      test::reference_apply(spec, v, ref);
      for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
        ASSERT_TRUE(ref.mem[b] == emu.mem[b]) << "width " << width_bytes(w) << " lead " << lead << " buffer " << b;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Builds without CUDA: the device entry points answer "unsupported" instead of failing to link.

TEST(PrepTapeCudaEntryPoints, ReportAvailability) {
  if (cuda_enabled_in_build()) {
    GTEST_SKIP() << "CUDA build: the device path is covered by gpu_cuda_test";
  }
  EXPECT_EQ(cuda_device_count(), 0);
  std::vector<std::int32_t> a(4);
  PrepTape tape("dev", MemorySpace::kDevice);
  ASSERT_TRUE(tape.fill(device_buffer("a", a.data(), 4, Width::k4), Scalar::imm(4), Scalar::imm(0)).is_ok());
  ASSERT_TRUE(tape.finalize().is_ok());
  auto dt = DeviceTape::create(std::move(tape));
  ASSERT_FALSE(dt.is_ok());
  EXPECT_EQ(dt.status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(GraphRunner::create({}).is_ok());
}

}  // namespace
}  // namespace escpod::gpu
