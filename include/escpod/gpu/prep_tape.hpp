// The prep tape: a small recorded program of metadata operations (fill, copy, gather, 2-D copy
// with column padding, tail fill) that refreshes the persistent input buffers of captured graphs
// before every replay. Operations are recorded once against buffers whose addresses never change;
// each step supplies only a handful of 64-bit *registers* (live row count, live token count, the
// address of a per-step source). The same finalized tape runs on the host (run_on_host, below:
// the CPU path and the reference for tests) or on a CUDA device (DeviceTape in device_tape.hpp:
// one kernel launch per stage). Specification: docs/prep_tape.md.
//
// Semantics (identical in both interpreters; x[i] is element i at the operand's width; ranges
// are half-open; a count that resolves to zero or less writes nothing):
//   fill(dst, n, value)                  dst[i] = value                       for 0 <= i < n
//   copy(dst, src, n, offset)            dst[i] = src[offset + i]             for 0 <= i < n
//   gather(dst, src, idx, n, oob)        j = idx[i] (signed, sign-extended to 64 bits);
//                                        dst[i] = 0 <= j < capacity(src) ? src[j] : oob
//   copy_2d(dst, src, rows, cols, P, pad) dst[r*P + c] = c < cols ? src[r*cols + c] : pad
//                                        for 0 <= r < rows, 0 <= c < P (the full pitch P is
//                                        written; source columns at or past P are dropped)
//   fill_tail(dst, live, total, value)   dst[i] = value                       for live <= i < total
// Values are moved as bit patterns: a store of width w writes the low w bytes of the 64-bit value
// (float32: pass float_bits(f)). Gather also treats an index at or past the source capacity as
// out of range (TokenSpeed only caught negative ones), so no run can read outside a buffer.
//
// Stages. Operations of one stage run concurrently, in no defined order (on the device they are
// one launch). barrier() closes the current stage; every write of stage k is visible to stage
// k+1. Within a stage no operation may read or write memory another operation writes, and no
// operation may read its own destination. With PrepTapeOptions::check_stage_independence (on by
// default in debug builds) finalize() proves this for every register value the run-time check
// admits, and rejects the tape otherwise, naming both operations.
//
// Thread safety: a PrepTape is not synchronised. Recording is single-threaded; once finalized
// the tape is immutable and its const members may be called from any thread.
#pragma once

#include "escpod/core/status.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace escpod::gpu {

// Element width of an operand in bytes. Escapepod uses k4 (int32, float32) and k8 (int64); the
// interpreters support all four.
enum class Width : std::uint8_t { k1 = 1, k2 = 2, k4 = 4, k8 = 8 };

// Bytes of one element; 0 for a value outside the enum.
constexpr int width_bytes(Width w) {
  switch (w) {
    case Width::k1: return 1;
    case Width::k2: return 2;
    case Width::k4: return 4;
    case Width::k8: return 8;
  }
  return 0;
}

template <typename T>
constexpr Width width_of() {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "prep tape operands are 1, 2, 4 or 8 bytes wide");
  return static_cast<Width>(sizeof(T));
}

// The 64-bit value whose low 32 bits are the IEEE pattern of `f` (zero-extended), for fill,
// out-of-range and padding values of float32 operands. float_bits(-0.0f) != float_bits(0.0f).
inline std::int64_t float_bits(float f) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<std::int64_t>(bits);
}

// Where a tape's buffers live. A host tape runs only through run_on_host, a device tape only
// through DeviceTape; every buffer recorded on a tape must be in the tape's space.
enum class MemorySpace { kHost, kDevice };

// The register file: kNumRegisters signed 64-bit slots supplied per run. A pointer register holds
// an address (see pointer_register). Conventional slots (from TokenSpeed, not enforced):
inline constexpr int kNumRegisters = 32;
namespace slot {
inline constexpr int kBucketRows = 0;   // padded batch size (the bucket)
inline constexpr int kLiveRows = 1;     // real batch size
inline constexpr int kLiveTokens = 2;   // live token count
inline constexpr int kUser0 = 8;        // user scalars 8..15
inline constexpr int kPointer0 = 16;    // pointer slots 16..31
}  // namespace slot

// The values of all registers for one run: a plain copyable value. Registers are sticky by
// construction: keep one Registers object per tape and set only what changed between steps; a
// run copies the whole file, so the object may be changed (or scribbled) the moment run returns.
class Registers {
 public:
  Registers() = default;

  // Sets `slot` to `value`. Fails (invalid_argument, naming the slot) outside [0, kNumRegisters).
  Status set(int slot_idx, std::int64_t value);
  // Sets `slot` to the address `p` (nullptr is allowed here; a run that reads through a null
  // pointer register is rejected).
  Status set_pointer(int slot_idx, const void* p);

  // Value of `slot`; 0 outside the file.
  std::int64_t get(int slot_idx) const;
  const std::array<std::int64_t, kNumRegisters>& values() const { return m_values; }

 private:
  std::array<std::int64_t, kNumRegisters> m_values{};
};

// One buffer a tape operation names: a fixed allocation (address given at record time) or a
// pointer register (address supplied per run in register `pointer_slot`; sources and index
// arrays only). `capacity` is in elements: for a fixed buffer the allocated length, for a
// pointer register the most elements any run's pointer may expose (run-time reads are checked
// against it). `owner` (optional) is kept alive by the tape, so a recorded allocation cannot be
// freed while the tape exists (shared ownership is the point here: the graph runner and the tape
// both pin the same persistent buffers).
struct Buffer {
  std::string name;
  std::uintptr_t address = 0;
  std::int64_t capacity = 0;
  Width width = Width::k4;
  std::int64_t inner_stride = 1;  // elements between consecutive elements; must be 1
  MemorySpace space = MemorySpace::kHost;
  int pointer_slot = -1;  // >= 0: the address comes from this register at run time
  std::shared_ptr<const void> owner;
};

// A fixed host buffer over `data` (capacity data.size()).
template <typename T>
Buffer host_buffer(std::string name, std::span<T> data, std::shared_ptr<const void> owner = {}) {
  static_assert(std::is_trivially_copyable_v<T>);
  Buffer b;
  b.name = std::move(name);
  b.address = reinterpret_cast<std::uintptr_t>(data.data());
  b.capacity = static_cast<std::int64_t>(data.size());
  b.width = width_of<T>();
  b.space = MemorySpace::kHost;
  b.owner = std::move(owner);
  return b;
}

// A fixed device buffer of `capacity` elements at the device address `address`.
Buffer device_buffer(std::string name, const void* address, std::int64_t capacity, Width width,
                     std::shared_ptr<const void> owner = {});

// A source or index array whose address is register `slot_idx`, holding at most `capacity`
// elements of `width` in `space`.
Buffer pointer_register(std::string name, int slot_idx, std::int64_t capacity, Width width,
                        MemorySpace space);

// A count, offset or value: an immediate baked into the tape, or a register read per run.
struct Scalar {
  bool is_register = false;
  std::int64_t value = 0;  // the immediate, or the register slot

  static Scalar imm(std::int64_t v) { return {false, v}; }
  static Scalar reg(int slot_idx) { return {true, slot_idx}; }
};

struct PrepTapeOptions {
#ifdef NDEBUG
  static constexpr bool kDebugBuild = false;
#else
  static constexpr bool kDebugBuild = true;
#endif
  // finalize() rejects a stage whose operations may conflict (section "Stages" above). Costs
  // O(ops^2) once at finalize; in a run it adds a check of pointer-register reads against the
  // stage's writes, which the record-time analysis cannot see.
  bool check_stage_independence = kDebugBuild;
};

// One encoded operation: eight signed 64-bit words, identical for both interpreters.
//   word 0: opcode (bits 0-7), log2 widths of dst (8-9), src (10-11), idx (12-13), and in bits
//           16-22 a mask saying which of words 1..7 name a register slot (bit k-1 for word k).
//   words 1..7: dst, src, idx addresses; n, m counts; stride; scalar (see docs/prep_tape.md §2.2).
// Immediates are full 64-bit values: register references are flagged out of band.
struct Descriptor {
  std::array<std::int64_t, 8> words{};
};

// A recorded tape. Construct, record operations and barriers, finalize, then run any number of
// times. Every recording call validates its arguments and returns an error naming the tape, the
// operation index and call, and the offending buffer; a failed call records nothing.
class PrepTape {
 public:
  // `name` appears in every error message.
  PrepTape(std::string name, MemorySpace space, PrepTapeOptions options = {});
  ~PrepTape();
  PrepTape(PrepTape&&) noexcept;
  PrepTape& operator=(PrepTape&&) noexcept;
  PrepTape(const PrepTape&) = delete;
  PrepTape& operator=(const PrepTape&) = delete;

  // Recording. Widths of dst and src must be equal (copy, gather, copy_2d); the index array of
  // gather may have any width. Immediate counts are checked against the recorded capacities
  // here; register counts at run time (check_run). An immediate value must fit the destination
  // width as a signed or unsigned integer.
  Status fill(const Buffer& dst, Scalar n, Scalar value);
  Status copy(const Buffer& dst, const Buffer& src, Scalar n, Scalar src_offset = Scalar::imm(0));
  Status gather(const Buffer& dst, const Buffer& src, const Buffer& idx, Scalar n, Scalar oob);
  // `dst_pitch` (elements per destination row, > 0) is an immediate: it is the geometry of dst.
  Status copy_2d(const Buffer& dst, const Buffer& src, Scalar rows, Scalar src_cols,
                 std::int64_t dst_pitch, Scalar pad);
  Status fill_tail(const Buffer& dst, Scalar live, Scalar total, Scalar value);

  // Closes the current stage. Empty stages (consecutive or trailing barriers) are dropped at
  // finalize.
  Status barrier();

  // Encodes the stages and, with check_stage_independence, proves stage independence. After it
  // the tape is immutable: recording or a second finalize fails.
  Status finalize();

  // Run-time bounds for the register file `regs`: resolves every operation and fails (naming
  // the tape, operation and buffer) if a non-empty range would start below 0 or end past a
  // recorded capacity, if a count multiplication overflows, or if a pointer register an
  // operation reads is null or misaligned. Both interpreters call it before touching memory,
  // so a rejected run writes nothing. Fails on an unfinalized tape.
  Status check_run(const Registers& regs) const;

  const std::string& name() const { return m_name; }
  MemorySpace space() const { return m_space; }
  bool is_finalized() const { return m_finalized; }
  // Operations recorded so far, and non-empty stages (valid once finalized).
  int n_ops() const { return static_cast<int>(m_op_stage.size()); }
  int n_stages() const { return static_cast<int>(m_stage_begin.size()) - 1; }

  // The encoded operations of stage `stage_idx` in recorded order, and for each the most
  // elements it can write in any admitted run (bounds the device grid). Valid once finalized.
  std::span<const Descriptor> stage_descriptors(int stage_idx) const;
  std::span<const std::int64_t> stage_max_elements(int stage_idx) const;

  // Every distinct fixed buffer the tape records (for address-space checks by executors).
  std::span<const Buffer> buffers() const { return m_buffers; }

  // Internal per-operation record (public so the .cpp's helpers can use it; not an API).
  struct OpRecord;

 private:
  Status begin_op(std::string_view call) const;
  Status add_op(OpRecord op);

  std::string m_name;
  MemorySpace m_space;
  PrepTapeOptions m_options;
  bool m_finalized = false;
  std::vector<OpRecord> m_ops;                // recorded order
  std::vector<int> m_op_stage;                // stage of each op while recording
  int m_current_stage = 0;
  std::vector<Buffer> m_buffers;              // distinct fixed buffers (keep owners alive)
  std::vector<Descriptor> m_descriptors;      // finalized, stage-major
  std::vector<std::int64_t> m_max_elements;   // per descriptor
  std::vector<int> m_desc_op;                 // recorded op index of each descriptor
  std::vector<int> m_stage_begin;             // descriptor index of each stage, plus the end
};

// Runs a finalized host tape on host memory: check_run, then every stage in order with plain
// loops. Fails without writing anything if the tape is unfinalized, is a device tape, or
// check_run rejects `regs`. Not thread-safe with respect to the tape's buffers.
Status run_on_host(const PrepTape& tape, const Registers& regs);

}  // namespace escpod::gpu
