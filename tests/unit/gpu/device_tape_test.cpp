// Prep tape on a CUDA device (CUDA builds; every test skips, saying so, without a device):
// host interpreter = CUDA interpreter on fuzzed tapes, one launch per stage (counted as kernel
// nodes of a captured graph), no per-run allocation or descriptor upload, mixed widths, barrier
// ordering, register isolation with two or more runs in flight (plus the negative control
// that shows the test detects the race), a host that never waits, multi-block throughput
// against a driver memset, and the graph runner. Contract items refer to
// docs/prep_tape.md.
#include "escpod/gpu/device_tape.hpp"
#include "escpod/gpu/graph_runner.hpp"
#include "escpod/gpu/prep_tape.hpp"
#include "gpu/device_tape_access.hpp"
#include "gpu/tape_kernel.hpp"

#include "tape_test_support.hpp"
#include "test_kernels.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace escpod::gpu {
namespace {

using test::Image;
using test::RegValues;
using test::TapeSpec;

#define CUDA_OK(expr)                                                                   \
  do {                                                                                  \
    const cudaError_t cuda_ok_e_ = (expr);                                              \
    ASSERT_EQ(cuda_ok_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_ok_e_); \
  } while (false)

#define OK(expr)                                       \
  do {                                                 \
    const ::escpod::Status ok_s_ = (expr);             \
    ASSERT_TRUE(ok_s_.is_ok()) << ok_s_.to_string();   \
  } while (false)

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount: "
                   << (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e))
                   << "): GPU test skipped; run scripts/gpu-check.sh on a GPU machine";
    }
    CUDA_OK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (m_stream != nullptr) {
      (void)cudaStreamSynchronize(m_stream);
      (void)cudaStreamDestroy(m_stream);
    }
  }
  cudaStream_t m_stream = nullptr;
};

// Device copies of every buffer of a spec (canaries included), mirroring a host Image.
struct DeviceImage {
  std::vector<std::uint8_t*> mem;
  DeviceImage() = default;
  DeviceImage(const DeviceImage&) = delete;
  DeviceImage& operator=(const DeviceImage&) = delete;
  ~DeviceImage() {
    for (std::uint8_t* p : mem) (void)cudaFree(p);
  }
  cudaError_t allocate(const TapeSpec& spec) {
    for (const test::BufSpec& b : spec.bufs) {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, test::image_size(b));
      if (e != cudaSuccess) return e;
      mem.push_back(static_cast<std::uint8_t*>(p));
    }
    return cudaSuccess;
  }
  std::uintptr_t payload(const TapeSpec& spec, int b) const {
    return reinterpret_cast<std::uintptr_t>(mem[static_cast<std::size_t>(b)]) +
           test::payload_offset(spec.bufs[static_cast<std::size_t>(b)]);
  }
  cudaError_t upload(const Image& img) {
    for (std::size_t i = 0; i < mem.size(); ++i) {
      const cudaError_t e = cudaMemcpy(mem[i], img.mem[i].data(), img.mem[i].size(), cudaMemcpyHostToDevice);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  cudaError_t download(Image& img) const {
    for (std::size_t i = 0; i < mem.size(); ++i) {
      const cudaError_t e = cudaMemcpy(img.mem[i].data(), mem[i], img.mem[i].size(), cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
};

// A plain device allocation of `n` elements of T.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  std::int64_t n = 0;
  explicit DeviceArray(std::int64_t count) : n(count) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), static_cast<std::size_t>(count) * sizeof(T)) != cudaSuccess) {
      ptr = nullptr;
    }
  }
  ~DeviceArray() {
    if (ptr != nullptr) (void)cudaFree(ptr);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::size_t bytes() const { return static_cast<std::size_t>(n) * sizeof(T); }
  Buffer buffer(std::string name) const { return device_buffer(std::move(name), ptr, n, width_of<T>()); }
  std::vector<T> to_host() const {
    std::vector<T> h(static_cast<std::size_t>(n));
    if (cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost) != cudaSuccess) h.clear();
    return h;
  }
};

// Mapped host memory: the host writes, a device kernel polls.
struct MappedInt {
  int* host = nullptr;
  int* device = nullptr;
  MappedInt() {
    if (cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(int), cudaHostAllocMapped) == cudaSuccess) {
      *host = 0;
      if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0) != cudaSuccess) device = nullptr;
    }
  }
  ~MappedInt() {
    if (host != nullptr) (void)cudaFreeHost(host);
  }
  MappedInt(const MappedInt&) = delete;
  MappedInt& operator=(const MappedInt&) = delete;
  void store(int v) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *static_cast<volatile int*>(host) = v;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  int load() const { return *static_cast<volatile int*>(host); }
};

// Captures one tape run on a fresh stream into a graph and counts its nodes by type.
struct CapturedRun {
  int nodes = 0;
  int interpreter_kernels = 0;
  int other = 0;
};

CapturedRun capture_run(DeviceTape& tape, const Registers& regs, ::testing::AssertionResult& ok) {
  CapturedRun out;
  cudaStream_t s = nullptr;
  cudaGraph_t graph = nullptr;
  ok = ::testing::AssertionSuccess();
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    ok = ::testing::AssertionFailure() << "could not begin capture";
    return out;
  }
  const Status st = tape.run(regs, s);
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess || !st.is_ok()) {
    ok = ::testing::AssertionFailure() << "capture failed: " << st.to_string();
  } else {
    std::size_t n = 0;
    (void)cudaGraphGetNodes(graph, nullptr, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    (void)cudaGraphGetNodes(graph, nodes.data(), &n);
    out.nodes = static_cast<int>(n);
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      (void)cudaGraphNodeGetType(node, &type);
      cudaKernelNodeParams p{};
      if (type == cudaGraphNodeTypeKernel && cudaGraphKernelNodeGetParams(node, &p) == cudaSuccess &&
          p.func == detail::stage_kernel_address()) {
        ++out.interpreter_kernels;
      } else {
        ++out.other;
      }
    }
  }
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(s);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Fuzzed parity: host interpreter = CUDA interpreter (contract item 5, device half)

class DeviceParity : public DeviceTest {};

TEST_F(DeviceParity, FuzzedTapesMatchTheHostInterpreter) {
  constexpr std::uint64_t kBaseSeed = 0xdec0de;
  constexpr int kTapes = 1000;
  int admitted = 0;
  for (int t = 0; t < kTapes; ++t) {
    const std::uint64_t seed = kBaseSeed + static_cast<std::uint64_t>(t);
    std::mt19937_64 rng(seed);
    // Every fourth tape has large buffers, so operations span many blocks.
    const TapeSpec spec = test::random_spec(rng, t % 4 == 3 ? 40000 : 200);
    std::ostringstream trace;
    trace << "seed " << seed << "\n" << test::describe(spec);
    SCOPED_TRACE(trace.str());
    const RegisterDelivery delivery = t % 3 == 1 ? RegisterDelivery::kFencedStaging : RegisterDelivery::kKernelArgument;

    Image host = test::make_image(spec);
    test::randomize(host, spec, rng);
    DeviceImage dev;
    CUDA_OK(dev.allocate(spec));
    CUDA_OK(dev.upload(host));

    PrepTape host_tape("parity-host", MemorySpace::kHost);
    PrepTape dev_tape("parity-device", MemorySpace::kDevice);
    OK(test::record(spec, host_tape, [&](int b) { return reinterpret_cast<std::uintptr_t>(host.payload(spec, b)); },
                    MemorySpace::kHost));
    OK(test::record(spec, dev_tape, [&](int b) { return dev.payload(spec, b); }, MemorySpace::kDevice));
    OK(host_tape.finalize());
    OK(dev_tape.finalize());
    auto created = DeviceTape::create(std::move(dev_tape), {delivery});
    OK(created.status());
    DeviceTape& dt = **created;

    for (int step = 0; step < 3; ++step) {
      RegValues counts{};
      test::random_count_registers(rng, spec, counts);
      Registers host_regs, dev_regs;
      for (int s = 0; s < test::kCountRegs; ++s) {
        OK(host_regs.set(s, counts[static_cast<std::size_t>(s)]));
        OK(dev_regs.set(s, counts[static_cast<std::size_t>(s)]));
      }
      for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
        const int slot_idx = spec.bufs[b].pointer_slot;
        if (slot_idx < 0) continue;
        OK(host_regs.set_pointer(slot_idx, host.payload(spec, static_cast<int>(b))));
        OK(dev_regs.set(slot_idx, static_cast<std::int64_t>(dev.payload(spec, static_cast<int>(b)))));
      }
      const Status hs = run_on_host(host_tape, host_regs);
      const Status ds = dt.run(dev_regs, m_stream);
      ASSERT_EQ(hs.is_ok(), ds.is_ok()) << "step " << step << ": host " << hs.to_string() << " device "
                                        << ds.to_string();
      admitted += hs.is_ok() ? 1 : 0;
      CUDA_OK(cudaStreamSynchronize(m_stream));
      Image back = test::make_image(spec);
      CUDA_OK(dev.download(back));
      for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
        ASSERT_TRUE(back.mem[b] == host.mem[b]) << "step " << step << " buffer " << spec.bufs[b].name;
      }
      test::randomize(host, spec, rng);
      CUDA_OK(dev.upload(host));
    }
  }
  std::printf("device parity: %d tapes, %d admitted runs compared\n", kTapes, admitted);
}

// ---------------------------------------------------------------------------------------------
// One launch per stage (contract item 7) and no per-run allocation or upload (item 1)

class DeviceLaunches : public DeviceTest {};

TEST_F(DeviceLaunches, ExactlyOneLaunchPerNonEmptyStage) {
  DeviceArray<std::int64_t> mem(64 * 128);
  ASSERT_NE(mem.ptr, nullptr);
  struct Shape {
    int ops;
    std::vector<int> barriers_after;  // op indices followed by a barrier (repeats = consecutive)
    int stages;
  };
  const std::vector<Shape> shapes = {{1, {}, 1}, {6, {}, 1}, {64, {}, 1}, {6, {1, 1, 3, 5, 5}, 3}};
  for (const Shape& shape : shapes) {
    PrepTape tape("launches", MemorySpace::kDevice);
    for (int i = 0; i < shape.ops; ++i) {
      std::string name = "b";
      name += std::to_string(i);
      const Buffer b = device_buffer(name, mem.ptr + i * 128, 128, Width::k8);
      OK(tape.fill_tail(b, Scalar::reg(1), Scalar::imm(128), Scalar::imm(i)));
      for (int after : shape.barriers_after) {
        if (after == i) OK(tape.barrier());
      }
    }
    OK(tape.finalize());
    ASSERT_EQ(tape.n_stages(), shape.stages);
    auto dt = DeviceTape::create(std::move(tape));
    OK(dt.status());
    Registers regs;
    OK(regs.set(1, 3));
    ::testing::AssertionResult ok = ::testing::AssertionSuccess();
    const CapturedRun run = capture_run(**dt, regs, ok);
    ASSERT_TRUE(ok);
    EXPECT_EQ(run.interpreter_kernels, shape.stages) << shape.ops << " ops";
    EXPECT_EQ(run.other, 0) << "a kKernelArgument run must add no copy or other node";
    // The instrumented counter agrees, eagerly too.
    const std::int64_t before = (*dt)->stats().kernel_launches;
    OK((*dt)->run(regs, m_stream));
    EXPECT_EQ((*dt)->stats().kernel_launches - before, shape.stages);
    EXPECT_EQ((*dt)->stats().register_uploads, 0);
    CUDA_OK(cudaStreamSynchronize(m_stream));
  }
}

TEST_F(DeviceLaunches, FencedStagingAddsExactlyOneUpload) {
  DeviceArray<std::int32_t> mem(256);
  PrepTape tape("fenced", MemorySpace::kDevice);
  OK(tape.fill_tail(mem.buffer("m"), Scalar::reg(1), Scalar::imm(256), Scalar::imm(0)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape), {RegisterDelivery::kFencedStaging});
  OK(dt.status());
  Registers regs;
  OK(regs.set(1, 5));
  OK((*dt)->run(regs, m_stream));
  EXPECT_EQ((*dt)->stats().register_uploads, 1);
  EXPECT_EQ((*dt)->stats().kernel_launches, 1);
  // Under capture a staged run is refused (its upload would read the block at replay time).
  ::testing::AssertionResult ok = ::testing::AssertionSuccess();
  (void)capture_run(**dt, regs, ok);
  EXPECT_FALSE(ok);
  CUDA_OK(cudaStreamSynchronize(m_stream));
}

TEST_F(DeviceLaunches, RunsAllocateNothingAndDescriptorsAreUploadedOnce) {
  DeviceArray<std::int32_t> a(4096);
  DeviceArray<std::int64_t> b(4096);
  PrepTape tape("counters", MemorySpace::kDevice);
  OK(tape.fill_tail(a.buffer("a"), Scalar::reg(1), Scalar::reg(0), Scalar::imm(1)));
  OK(tape.fill_tail(b.buffer("b"), Scalar::reg(1), Scalar::reg(0), Scalar::imm(-1)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  OK(dt.status());
  const DeviceTapeStats at_create = (*dt)->stats();
  EXPECT_EQ(at_create.descriptor_uploads, 1);
  EXPECT_EQ(at_create.device_allocations, 1);
  Registers regs;
  OK(regs.set(0, 4096));
  OK(regs.set(1, 1));
  OK((*dt)->run(regs, m_stream));
  CUDA_OK(cudaStreamSynchronize(m_stream));
  std::size_t free_before = 0, total = 0;
  CUDA_OK(cudaMemGetInfo(&free_before, &total));
  for (int i = 0; i < 1000; ++i) {
    OK(regs.set(1, i % 4096));
    OK((*dt)->run(regs, m_stream));
  }
  CUDA_OK(cudaStreamSynchronize(m_stream));
  std::size_t free_after = 0;
  CUDA_OK(cudaMemGetInfo(&free_after, &total));
  const DeviceTapeStats after = (*dt)->stats();
  EXPECT_EQ(after.descriptor_uploads, 1);
  EXPECT_EQ(after.device_allocations, 1);
  EXPECT_EQ(after.register_uploads, 0);
  EXPECT_EQ(after.kernel_launches, 1001);
  EXPECT_EQ(free_after, free_before) << "device memory changed over 1000 runs";
}

// ---------------------------------------------------------------------------------------------
// Mixed widths (item 8) and barrier ordering (item 9) on the device

class DeviceSemantics : public DeviceTest {};

TEST_F(DeviceSemantics, MixedWidthsInOneLaunch) {
  DeviceArray<std::uint8_t> mem(16 + 16 + 24 + 12 + 16);
  ASSERT_NE(mem.ptr, nullptr);
  CUDA_OK(cudaMemset(mem.ptr, 0xCC, mem.bytes()));
  std::uint8_t* p = mem.ptr + 16;
  PrepTape tape("mixed", MemorySpace::kDevice);
  const Buffer f32 = device_buffer("f32", p, 4, Width::k4);
  const Buffer i64 = device_buffer("i64", p + 16, 3, Width::k8);
  const Buffer i32 = device_buffer("i32", p + 40, 3, Width::k4);
  OK(tape.fill_tail(f32, Scalar::imm(0), Scalar::imm(2), Scalar::imm(float_bits(-0.0f))));
  OK(tape.fill_tail(f32, Scalar::imm(2), Scalar::imm(4), Scalar::imm(float_bits(3.25f))));
  OK(tape.fill(i64, Scalar::imm(1), Scalar::imm((std::int64_t{1} << 40) + 3)));
  OK(tape.fill_tail(i64, Scalar::imm(1), Scalar::imm(2), Scalar::reg(9)));
  OK(tape.fill_tail(i64, Scalar::imm(2), Scalar::imm(3), Scalar::imm(-1)));
  OK(tape.fill_tail(i32, Scalar::imm(0), Scalar::imm(3), Scalar::imm(-7)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  OK(dt.status());
  Registers regs;
  OK(regs.set(9, -(std::int64_t{1} << 35)));
  OK((*dt)->run(regs, m_stream));
  EXPECT_EQ((*dt)->stats().kernel_launches, 1);
  CUDA_OK(cudaStreamSynchronize(m_stream));
  const std::vector<std::uint8_t> h = mem.to_host();
  ASSERT_EQ(h.size(), mem.bytes());
  const float want_f[4] = {-0.0f, -0.0f, 3.25f, 3.25f};
  const std::int64_t want_q[3] = {(std::int64_t{1} << 40) + 3, -(std::int64_t{1} << 35), -1};
  const std::int32_t want_d[3] = {-7, -7, -7};
  EXPECT_EQ(std::memcmp(h.data() + 16, want_f, 16), 0);
  EXPECT_EQ(std::memcmp(h.data() + 32, want_q, 24), 0);
  EXPECT_EQ(std::memcmp(h.data() + 56, want_d, 12), 0);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(h[static_cast<std::size_t>(i)], 0xCC);
    EXPECT_EQ(h[h.size() - 16 + static_cast<std::size_t>(i)], 0xCC);
  }
}

TEST_F(DeviceSemantics, LaterStageSeesEveryWriteOfTheEarlierOne) {
  constexpr std::int64_t kN = std::int64_t{1} << 18;
  DeviceArray<std::int32_t> big(kN), out(1);
  DeviceArray<std::int64_t> idx(1);
  const std::int64_t last = kN - 1;
  CUDA_OK(cudaMemcpy(idx.ptr, &last, sizeof last, cudaMemcpyHostToDevice));
  PrepTape tape("barrier", MemorySpace::kDevice);
  OK(tape.fill(big.buffer("big"), Scalar::imm(kN), Scalar::reg(8)));
  OK(tape.barrier());
  OK(tape.gather(out.buffer("out"), big.buffer("big"), idx.buffer("idx"), Scalar::imm(1), Scalar::imm(-1)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  OK(dt.status());
  for (int rep = 0; rep < 100; ++rep) {
    Registers regs;
    OK(regs.set(8, 1000 + rep));
    OK((*dt)->run(regs, m_stream));
    CUDA_OK(cudaStreamSynchronize(m_stream));
    ASSERT_EQ(out.to_host().at(0), 1000 + rep) << "rep " << rep;
  }
}

TEST_F(DeviceSemantics, CreateRejectsPageableHostBuffers) {
  std::vector<std::int32_t> pageable(16);
  PrepTape tape("pageable", MemorySpace::kDevice);
  OK(tape.fill(device_buffer("oops", pageable.data(), 16, Width::k4), Scalar::imm(16), Scalar::imm(0)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  ASSERT_FALSE(dt.is_ok());
  EXPECT_NE(dt.status().message().find("'oops'"), std::string::npos) << dt.status().to_string();
}

// ---------------------------------------------------------------------------------------------
// Register isolation with runs in flight (contract item 11)

struct IsolationResult {
  int mismatches = 0;
  int gate_timeouts = 0;
  std::string first;
};

// `iterations` rounds: gate the stream, enqueue depth + 1 runs, each with its own live count
// and fill value and each followed by a device-to-device snapshot of the buffer, scribbling the
// host registers with garbage after every run; then open the gate and check that every
// snapshot shows its own run's scrub.
void run_isolation(DeviceTape& tape, const DeviceArray<std::int32_t>& buf, cudaStream_t stream, int depth,
                   int iterations, std::mt19937_64& rng, IsolationResult& result) {
  const std::int64_t cap = buf.n;
  const int runs = depth + 1;
  DeviceArray<std::int32_t> snaps(cap * runs);
  MappedInt flag, timed_out;
  ASSERT_NE(snaps.ptr, nullptr);
  ASSERT_NE(flag.device, nullptr);
  Registers regs;
  for (int it = 0; it < iterations; ++it) {
    flag.store(0);
    timed_out.store(0);
    CUDA_OK(test::launch_gate(flag.device, 5'000'000'000ull, timed_out.device, stream));
    std::vector<std::int64_t> live(static_cast<std::size_t>(runs));
    std::vector<std::int32_t> value(static_cast<std::size_t>(runs));
    for (int k = 0; k < runs; ++k) {
      live[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(cap));
      value[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(1 + it * runs + k);
      OK(regs.set(1, live[static_cast<std::size_t>(k)]));
      OK(regs.set(8, value[static_cast<std::size_t>(k)]));
      OK(tape.run(regs, stream));
      CUDA_OK(cudaMemcpyAsync(snaps.ptr + k * cap, buf.ptr, buf.bytes(), cudaMemcpyDeviceToDevice, stream));
      for (int s = 0; s < kNumRegisters; ++s) OK(regs.set(s, static_cast<std::int64_t>(rng())));  // garbage
    }
    flag.store(1);
    CUDA_OK(cudaStreamSynchronize(stream));
    if (timed_out.load() != 0) {
      ++result.gate_timeouts;
      continue;
    }
    const std::vector<std::int32_t> h = snaps.to_host();
    for (int k = 0; k < runs; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      for (std::int64_t e = live[kk]; e < cap; ++e) {
        if (h[static_cast<std::size_t>(k * cap + e)] != value[kk]) {
          if (result.mismatches == 0) {
            std::ostringstream os;
            os << "depth " << depth << " iteration " << it << " run " << k << " element " << e << ": got "
               << h[static_cast<std::size_t>(k * cap + e)] << ", want " << value[kk] << " (live " << live[kk] << ")";
            result.first = os.str();
          }
          ++result.mismatches;
          break;
        }
      }
    }
  }
}

Result<std::unique_ptr<DeviceTape>> isolation_tape(const DeviceArray<std::int32_t>& buf, RegisterDelivery delivery) {
  PrepTape tape("isolation", MemorySpace::kDevice);
  ESCPOD_RETURN_IF_ERROR(tape.fill_tail(buf.buffer("buf"), Scalar::reg(1), Scalar::imm(buf.n), Scalar::reg(8)));
  ESCPOD_RETURN_IF_ERROR(tape.finalize());
  return DeviceTape::create(std::move(tape), {delivery});
}

class DeviceIsolation : public DeviceTest {};

TEST_F(DeviceIsolation, LaterRegistersNeverReachEarlierRuns) {
  for (RegisterDelivery delivery : {RegisterDelivery::kKernelArgument, RegisterDelivery::kFencedStaging}) {
    DeviceArray<std::int32_t> buf(2048);
    auto dt = isolation_tape(buf, delivery);
    OK(dt.status());
    std::mt19937_64 rng(77);
    IsolationResult r;
    for (int depth : {1, 2, 4}) {
      run_isolation(**dt, buf, m_stream, depth, 334, rng, r);
      if (HasFatalFailure()) return;
    }
    EXPECT_EQ(r.gate_timeouts, 0);
    EXPECT_EQ(r.mismatches, 0) << (delivery == RegisterDelivery::kKernelArgument ? "kernel argument" : "fenced staging")
                               << ": " << r.first;
  }
}

// Negative control: the persistent pinned staging array of TokenSpeed before #1218 must make the
// same test fail, or the test could not detect the race it is meant to catch.
TEST_F(DeviceIsolation, NegativeControlRacyStagingIsDetected) {
  DeviceArray<std::int32_t> buf(2048);
  auto dt = isolation_tape(buf, RegisterDelivery::kKernelArgument);
  OK(dt.status());
  OK(detail::DeviceTapeAccess::use_racy_persistent_staging(**dt));
  std::mt19937_64 rng(78);
  IsolationResult r;
  for (int depth : {1, 2, 4}) {
    run_isolation(**dt, buf, m_stream, depth, 50, rng, r);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(r.gate_timeouts, 0);
  EXPECT_GT(r.mismatches, 0) << "the racy staging mode passed the isolation test: the test cannot detect the race";
  std::printf("negative control: %d racy snapshots detected (first: %s)\n", r.mismatches, r.first.c_str());
}

// ---------------------------------------------------------------------------------------------
// The host never waits (contract item 12)

TEST_F(DeviceIsolation, GatedRunsReturnWithoutWaitingAndTheStagingPoolStaysBounded) {
  for (RegisterDelivery delivery : {RegisterDelivery::kKernelArgument, RegisterDelivery::kFencedStaging}) {
    DeviceArray<std::int32_t> buf(1024);
    auto dt = isolation_tape(buf, delivery);
    OK(dt.status());
    MappedInt flag, timed_out;
    CUDA_OK(test::launch_gate(flag.device, 10'000'000'000ull, timed_out.device, m_stream));
    Registers regs;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 256; ++i) {
      OK(regs.set(1, i));
      OK(regs.set(8, i));
      OK((*dt)->run(regs, m_stream));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(cudaStreamQuery(m_stream), cudaErrorNotReady) << "the gate opened early: the runs may have waited";
    flag.store(1);
    CUDA_OK(cudaStreamSynchronize(m_stream));
    EXPECT_EQ(timed_out.load(), 0);
    EXPECT_LT(seconds, 1.0) << "256 gated runs took " << seconds << " s";
    if (delivery == RegisterDelivery::kFencedStaging) {
      // Steady state at depth 2: the pool stops growing and nothing leaks.
      auto fresh = isolation_tape(buf, delivery);
      OK(fresh.status());
      for (int i = 0; i < 100000; ++i) {
        OK(regs.set(1, i % 1024));
        OK((*fresh)->run(regs, m_stream));
        if (i % 2 == 1) CUDA_OK(cudaStreamSynchronize(m_stream));
      }
      CUDA_OK(cudaStreamSynchronize(m_stream));
      EXPECT_LE(detail::DeviceTapeAccess::staging_blocks(**fresh), 4);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Throughput of a large operation (contract item 16)

class DeviceThroughput : public DeviceTest {};

TEST_F(DeviceThroughput, LargeTailFillWithinTwiceADriverMemset) {
  constexpr std::int64_t kElems = 4 * 1024 * 1024;  // 16 MiB of int32
  DeviceArray<std::int32_t> buf(kElems);
  PrepTape tape("throughput", MemorySpace::kDevice);
  OK(tape.fill_tail(buf.buffer("signal"), Scalar::reg(1), Scalar::imm(kElems), Scalar::imm(0)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  OK(dt.status());
  Registers regs;
  OK(regs.set(1, 0));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  auto median_ms = [&](auto&& enqueue) {
    std::vector<float> t;
    for (int i = 0; i < 53; ++i) {
      (void)cudaEventRecord(a, m_stream);
      enqueue();
      (void)cudaEventRecord(b, m_stream);
      (void)cudaEventSynchronize(b);
      float ms = 0;
      (void)cudaEventElapsedTime(&ms, a, b);
      if (i >= 3) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const float tape_ms = median_ms([&] { (void)(*dt)->run(regs, m_stream); });
  const float memset_ms = median_ms([&] { (void)cudaMemsetAsync(buf.ptr, 0, buf.bytes(), m_stream); });
  std::printf("16 MiB tail fill: tape %.2f us, cudaMemsetAsync %.2f us\n", tape_ms * 1000.0, memset_ms * 1000.0);
  EXPECT_LE(tape_ms, 2.0f * memset_ms);
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
}

// ---------------------------------------------------------------------------------------------
// Graph runner (contract items 13 and 14)

class DeviceGraphRunner : public DeviceTest {};

void stream_order_with_replay(cudaStream_t stream, PrepPlacement placement) {
  const std::vector<std::int64_t> buckets = {4, 16, 64};
  auto created = GraphRunner::create({"runner", buckets, {{"in", Width::k4, 1}, {"out", Width::k4, 1}}});
  OK(created.status());
  GraphRunner& runner = **created;
  const Buffer in = runner.buffer(0);
  const Buffer out = runner.buffer(1);
  const std::int64_t cap = runner.capacity_rows();

  PrepTape tape("runner-prep", MemorySpace::kDevice);
  OK(tape.copy(in, pointer_register("staging", 16, cap, Width::k4, MemorySpace::kDevice), Scalar::reg(slot::kLiveRows)));
  OK(tape.fill_tail(in, Scalar::reg(slot::kLiveRows), Scalar::reg(slot::kBucketRows), Scalar::imm(-1)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape));
  OK(dt.status());
  OK(runner.set_prep(std::move(*dt), placement));
  for (std::int64_t bucket : buckets) {
    OK(runner.capture(bucket, [&](CUstream_st* s, std::int64_t rows) -> Status {
      const cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(out.address), reinterpret_cast<void*>(in.address),
                                            static_cast<std::size_t>(rows) * 4, cudaMemcpyDeviceToDevice, s);
      return e == cudaSuccess ? Status::ok() : Status::internal(cudaGetErrorString(e));
    }));
  }
  const Result<GraphNodeCounts> counts = runner.node_counts(16);
  OK(counts.status());
  if (placement == PrepPlacement::kInsideGraph) {
    EXPECT_EQ(counts->prep_kernels, 1);
    EXPECT_EQ(counts->total, 2);  // the tape's stage kernel and the body as a child graph
  } else {
    EXPECT_EQ(counts->prep_kernels, 0);
  }

  constexpr int kSteps = 60;
  std::mt19937_64 rng(13);
  DeviceArray<std::int32_t> staging(cap * kSteps), snaps(cap * kSteps);
  std::vector<std::int32_t> staging_host(static_cast<std::size_t>(cap * kSteps));
  for (std::size_t i = 0; i < staging_host.size(); ++i) staging_host[i] = static_cast<std::int32_t>(i);
  CUDA_OK(cudaMemcpy(staging.ptr, staging_host.data(), staging.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(snaps.ptr, 0x7f, snaps.bytes()));
  std::vector<std::int64_t> live(kSteps), bucket_of(kSteps);
  Registers regs;
  for (int n = 0; n < kSteps; ++n) {  // no host synchronisation between steps
    const std::int64_t bucket = buckets[rng() % buckets.size()];
    live[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(bucket + 1));
    bucket_of[static_cast<std::size_t>(n)] = bucket;
    OK(regs.set(slot::kBucketRows, bucket));
    OK(regs.set(slot::kLiveRows, live[static_cast<std::size_t>(n)]));
    OK(regs.set_pointer(16, staging.ptr + n * cap));
    OK(runner.replay(bucket, regs, stream));
    CUDA_OK(cudaMemcpyAsync(snaps.ptr + n * cap, reinterpret_cast<void*>(out.address),
                            static_cast<std::size_t>(bucket) * 4, cudaMemcpyDeviceToDevice, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<std::int32_t> h = snaps.to_host();
  for (int n = 0; n < kSteps; ++n) {
    const auto nn = static_cast<std::size_t>(n);
    for (std::int64_t e = 0; e < bucket_of[nn]; ++e) {
      const std::int32_t want = e < live[nn] ? static_cast<std::int32_t>(n * cap + e) : -1;
      ASSERT_EQ(h[static_cast<std::size_t>(n * cap + e)], want)
          << "step " << n << " element " << e << " (bucket " << bucket_of[nn] << ", live " << live[nn] << ")";
    }
  }
  // Persistent addresses (item 14): the buffers did not move, and their owners outlive the runner.
  EXPECT_EQ(runner.buffer(0).address, in.address);
  EXPECT_EQ(runner.buffer(1).address, out.address);
}

TEST_F(DeviceGraphRunner, StreamOrderWithTapeBeforeTheGraph) {
  stream_order_with_replay(m_stream, PrepPlacement::kBeforeGraph);
}

TEST_F(DeviceGraphRunner, StreamOrderWithTapeInsideTheGraph) {
  stream_order_with_replay(m_stream, PrepPlacement::kInsideGraph);
}

TEST_F(DeviceGraphRunner, BuffersOutliveTheRunnerThroughTheirOwners) {
  Buffer kept;
  {
    auto created = GraphRunner::create({"owners", {8, 32}, {{"rows", Width::k8, 1}}});
    OK(created.status());
    kept = (*created)->buffer(0);
    EXPECT_EQ(kept.capacity, 32);
  }
  cudaPointerAttributes attr{};
  CUDA_OK(cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(kept.address)));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  CUDA_OK(cudaMemset(reinterpret_cast<void*>(kept.address), 0, 32 * 8));
}

TEST_F(DeviceGraphRunner, RejectsMisuse) {
  auto created = GraphRunner::create({"misuse", {8}, {{"a", Width::k4, 1}}});
  OK(created.status());
  Registers regs;
  EXPECT_FALSE((*created)->replay(8, regs, m_stream).is_ok());  // never captured
  EXPECT_FALSE((*created)->capture(9, [](CUstream_st*, std::int64_t) { return Status::ok(); }).is_ok());
  EXPECT_FALSE(GraphRunner::create({"dup", {8, 8}, {}}).is_ok());
  PrepTape tape("staged", MemorySpace::kDevice);
  OK(tape.fill((*created)->buffer(0), Scalar::imm(1), Scalar::imm(0)));
  OK(tape.finalize());
  auto dt = DeviceTape::create(std::move(tape), {RegisterDelivery::kFencedStaging});
  OK(dt.status());
  EXPECT_FALSE((*created)->set_prep(std::move(*dt), PrepPlacement::kInsideGraph).is_ok());
}

}  // namespace
}  // namespace escpod::gpu
