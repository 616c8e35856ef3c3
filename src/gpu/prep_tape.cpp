// Prep tape recorder, record-time and run-time validation, stage-independence analysis, and the
// host interpreter. The encoding lives in tape_format.hpp, shared with the CUDA interpreter.
#include "escpod/gpu/prep_tape.hpp"

#include "gpu/tape_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

namespace escpod::gpu {

namespace {

__extension__ typedef __int128 Int128;

using detail::kOpCopy;
using detail::kOpCopy2d;
using detail::kOpFill;
using detail::kOpFillTail;
using detail::kOpGather;

const char* op_call_name(int opcode) {
  switch (opcode) {
    case kOpFill: return "fill";
    case kOpCopy: return "copy";
    case kOpGather: return "gather";
    case kOpCopy2d: return "copy_2d";
    case kOpFillTail: return "fill_tail";
    default: return "unknown";
  }
}

int log2_of(Width w) {
  switch (w) {
    case Width::k1: return 0;
    case Width::k2: return 1;
    case Width::k4: return 2;
    case Width::k8: return 3;
  }
  return 0;
}

bool valid_slot(std::int64_t s) { return s >= 0 && s < kNumRegisters; }

// True when the immediate `v` is representable at `bytes` as a signed or unsigned integer.
bool fits_width(std::int64_t v, int bytes) {
  if (bytes >= 8) return true;
  const Int128 lo = -(Int128{1} << (8 * bytes - 1));
  const Int128 hi = (Int128{1} << (8 * bytes));
  return Int128{v} >= lo && Int128{v} < hi;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Registers and buffer helpers

Status Registers::set(int slot_idx, std::int64_t value) {
  if (!valid_slot(slot_idx)) {
    return Status::invalid_argument(fmt::format(
        "register slot {} is outside the register file [0, {})", slot_idx, kNumRegisters));
  }
  m_values[static_cast<std::size_t>(slot_idx)] = value;
  return Status::ok();
}

Status Registers::set_pointer(int slot_idx, const void* p) {
  return set(slot_idx, static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)));
}

std::int64_t Registers::get(int slot_idx) const {
  return valid_slot(slot_idx) ? m_values[static_cast<std::size_t>(slot_idx)] : 0;
}

Buffer device_buffer(std::string name, const void* address, std::int64_t capacity, Width width,
                     std::shared_ptr<const void> owner) {
  Buffer b;
  b.name = std::move(name);
  b.address = reinterpret_cast<std::uintptr_t>(address);
  b.capacity = capacity;
  b.width = width;
  b.space = MemorySpace::kDevice;
  b.owner = std::move(owner);
  return b;
}

Buffer pointer_register(std::string name, int slot_idx, std::int64_t capacity, Width width,
                        MemorySpace space) {
  Buffer b;
  b.name = std::move(name);
  b.capacity = capacity;
  b.width = width;
  b.space = space;
  b.pointer_slot = slot_idx;
  return b;
}

// ------------------------------------------------------------------------------------------
// Recording

struct PrepTape::OpRecord {
  int opcode = kOpFill;
  Buffer dst;
  Buffer src;  // unused (capacity 0, no name) by fill and fill_tail
  Buffer idx;  // used by gather only
  bool has_src = false;
  bool has_idx = false;
  Scalar n, m, stride, scalar;
};

PrepTape::PrepTape(std::string name, MemorySpace space, PrepTapeOptions options)
    : m_name(std::move(name)), m_space(space), m_options(options), m_stage_begin{0} {}
PrepTape::~PrepTape() = default;
PrepTape::PrepTape(PrepTape&&) noexcept = default;
PrepTape& PrepTape::operator=(PrepTape&&) noexcept = default;

namespace {

// Errors of operation `op_idx` of tape `tape`.
class OpErrors {
 public:
  OpErrors(const std::string& tape, int op_idx, const char* call)
      : m_tape(tape), m_op_idx(op_idx), m_call(call) {}

  Status buffer(std::string_view role, const Buffer& b, std::string_view what) const {
    return Status::invalid_argument(fmt::format("prep tape '{}': op {} ({}): {} '{}': {}", m_tape,
                                                m_op_idx, m_call, role, b.name, what));
  }
  Status operand(std::string_view operand, std::string_view what) const {
    return Status::invalid_argument(fmt::format("prep tape '{}': op {} ({}): {}: {}", m_tape,
                                                m_op_idx, m_call, operand, what));
  }

 private:
  const std::string& m_tape;
  int m_op_idx;
  const char* m_call;
};

Status check_buffer(const OpErrors& err, std::string_view role, const Buffer& b,
                    MemorySpace tape_space, bool is_destination) {
  const int w = width_bytes(b.width);
  if (w == 0) {
    return err.buffer(role, b, fmt::format("unsupported width code {} (expected 1, 2, 4 or 8 bytes)",
                                           static_cast<int>(b.width)));
  }
  if (b.inner_stride != 1) {
    return err.buffer(role, b,
                      fmt::format("non-unit innermost stride {} (elements); the tape needs "
                                  "contiguous buffers",
                                  b.inner_stride));
  }
  if (b.capacity < 0) {
    return err.buffer(role, b, fmt::format("negative capacity {}", b.capacity));
  }
  if (b.space != tape_space) {
    return err.buffer(role, b,
                      fmt::format("buffer is in {} memory but the tape runs on the {}",
                                  b.space == MemorySpace::kHost ? "host" : "device",
                                  tape_space == MemorySpace::kHost ? "host" : "device"));
  }
  if (b.pointer_slot >= 0) {
    if (is_destination) {
      return err.buffer(role, b,
                        "a destination must be a fixed buffer, not a pointer register (the "
                        "stage-independence proof needs every written address)");
    }
    if (!valid_slot(b.pointer_slot)) {
      return err.buffer(role, b,
                        fmt::format("pointer register slot {} is outside the register file [0, {})",
                                    b.pointer_slot, kNumRegisters));
    }
    return Status::ok();
  }
  if (b.address == 0) return err.buffer(role, b, "null address");
  if (b.address % static_cast<std::uintptr_t>(w) != 0) {
    return err.buffer(role, b,
                      fmt::format("address {:#x} is not aligned to its {}-byte width", b.address, w));
  }
  const Int128 end = Int128{b.address} + Int128{b.capacity} * w;
  if (end > Int128{std::numeric_limits<std::uintptr_t>::max()}) {
    return err.buffer(role, b, "address plus capacity overflows the address space");
  }
  return Status::ok();
}

Status check_scalar(const OpErrors& err, std::string_view operand, Scalar s) {
  if (s.is_register && !valid_slot(s.value)) {
    return err.operand(operand, fmt::format("register slot {} is outside the register file [0, {})",
                                            s.value, kNumRegisters));
  }
  return Status::ok();
}

Status check_value(const OpErrors& err, std::string_view operand, Scalar s, const Buffer& dst) {
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, operand, s));
  const int w = width_bytes(dst.width);
  if (!s.is_register && !fits_width(s.value, w)) {
    return err.operand(operand, fmt::format("immediate {} does not fit the {}-byte destination '{}'",
                                            s.value, w, dst.name));
  }
  return Status::ok();
}

Status check_same_width(const OpErrors& err, const Buffer& dst, const Buffer& src) {
  if (dst.width != src.width) {
    return err.buffer("src", src,
                      fmt::format("width {} bytes differs from destination '{}' width {} bytes "
                                  "(data moves as bit patterns of one width)",
                                  width_bytes(src.width), dst.name, width_bytes(dst.width)));
  }
  return Status::ok();
}

Status check_count_fits(const OpErrors& err, std::string_view role, const Buffer& b,
                        std::string_view what, Int128 count) {
  if (count > b.capacity) {
    return err.buffer(role, b,
                      fmt::format("{} {} exceeds the recorded capacity {}", what,
                                  static_cast<long long>(count), b.capacity));
  }
  return Status::ok();
}

}  // namespace

Status PrepTape::begin_op(std::string_view call) const {
  if (m_finalized) {
    return Status::invalid_argument(fmt::format(
        "prep tape '{}': {} after finalize: a finalized tape is immutable", m_name, call));
  }
  return Status::ok();
}

Status PrepTape::add_op(OpRecord op) {
  auto remember = [this](const Buffer& b) {
    if (b.pointer_slot >= 0 || b.address == 0) return;
    for (const Buffer& have : m_buffers) {
      if (have.address == b.address && have.width == b.width && have.capacity == b.capacity &&
          have.name == b.name) {
        return;
      }
    }
    m_buffers.push_back(b);
  };
  remember(op.dst);
  if (op.has_src) remember(op.src);
  if (op.has_idx) remember(op.idx);
  m_ops.push_back(std::move(op));
  m_op_stage.push_back(m_current_stage);
  return Status::ok();
}

Status PrepTape::fill(const Buffer& dst, Scalar n, Scalar value) {
  ESCPOD_RETURN_IF_ERROR(begin_op("fill"));
  const OpErrors err(m_name, n_ops(), "fill");
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "dst", dst, m_space, true));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "n", n));
  ESCPOD_RETURN_IF_ERROR(check_value(err, "value", value, dst));
  if (!n.is_register) ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "count", n.value));
  OpRecord op;
  op.opcode = kOpFill;
  op.dst = dst;
  op.n = n;
  op.scalar = value;
  return add_op(std::move(op));
}

Status PrepTape::copy(const Buffer& dst, const Buffer& src, Scalar n, Scalar src_offset) {
  ESCPOD_RETURN_IF_ERROR(begin_op("copy"));
  const OpErrors err(m_name, n_ops(), "copy");
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "dst", dst, m_space, true));
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "src", src, m_space, false));
  ESCPOD_RETURN_IF_ERROR(check_same_width(err, dst, src));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "n", n));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "src_offset", src_offset));
  if (!src_offset.is_register && src_offset.value < 0) {
    return err.operand("src_offset", fmt::format("negative source offset {}", src_offset.value));
  }
  if (!n.is_register) {
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "count", n.value));
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "src", src, "count", n.value));
    if (!src_offset.is_register && n.value > 0) {
      ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "src", src, "source offset plus count",
                                              Int128{src_offset.value} + n.value));
    }
  }
  OpRecord op;
  op.opcode = kOpCopy;
  op.dst = dst;
  op.src = src;
  op.has_src = true;
  op.n = n;
  op.stride = src_offset;
  return add_op(std::move(op));
}

Status PrepTape::gather(const Buffer& dst, const Buffer& src, const Buffer& idx, Scalar n,
                        Scalar oob) {
  ESCPOD_RETURN_IF_ERROR(begin_op("gather"));
  const OpErrors err(m_name, n_ops(), "gather");
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "dst", dst, m_space, true));
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "src", src, m_space, false));
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "idx", idx, m_space, false));
  ESCPOD_RETURN_IF_ERROR(check_same_width(err, dst, src));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "n", n));
  ESCPOD_RETURN_IF_ERROR(check_value(err, "oob", oob, dst));
  if (!n.is_register) {
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "count", n.value));
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "idx", idx, "count", n.value));
  }
  OpRecord op;
  op.opcode = kOpGather;
  op.dst = dst;
  op.src = src;
  op.idx = idx;
  op.has_src = true;
  op.has_idx = true;
  op.n = n;
  op.m = Scalar::imm(src.capacity);
  op.scalar = oob;
  return add_op(std::move(op));
}

Status PrepTape::copy_2d(const Buffer& dst, const Buffer& src, Scalar rows, Scalar src_cols,
                         std::int64_t dst_pitch, Scalar pad) {
  ESCPOD_RETURN_IF_ERROR(begin_op("copy_2d"));
  const OpErrors err(m_name, n_ops(), "copy_2d");
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "dst", dst, m_space, true));
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "src", src, m_space, false));
  ESCPOD_RETURN_IF_ERROR(check_same_width(err, dst, src));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "rows", rows));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "src_cols", src_cols));
  ESCPOD_RETURN_IF_ERROR(check_value(err, "pad", pad, dst));
  if (dst_pitch <= 0) {
    return err.operand("dst_pitch", fmt::format("pitch {} must be positive", dst_pitch));
  }
  ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "pitch", dst_pitch));
  if (!rows.is_register && rows.value > 0) {
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "rows times pitch",
                                            Int128{rows.value} * dst_pitch));
    if (!src_cols.is_register && src_cols.value > 0) {
      const Int128 extent = Int128{rows.value - 1} * src_cols.value +
                            std::min<std::int64_t>(src_cols.value, dst_pitch);
      ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "src", src, "source extent", extent));
    }
  }
  OpRecord op;
  op.opcode = kOpCopy2d;
  op.dst = dst;
  op.src = src;
  op.has_src = true;
  op.n = rows;
  op.m = src_cols;
  op.stride = Scalar::imm(dst_pitch);
  op.scalar = pad;
  return add_op(std::move(op));
}

Status PrepTape::fill_tail(const Buffer& dst, Scalar live, Scalar total, Scalar value) {
  ESCPOD_RETURN_IF_ERROR(begin_op("fill_tail"));
  const OpErrors err(m_name, n_ops(), "fill_tail");
  ESCPOD_RETURN_IF_ERROR(check_buffer(err, "dst", dst, m_space, true));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "live", live));
  ESCPOD_RETURN_IF_ERROR(check_scalar(err, "total", total));
  ESCPOD_RETURN_IF_ERROR(check_value(err, "value", value, dst));
  if (!live.is_register && live.value < 0) {
    return err.operand("live", fmt::format("negative live count {}", live.value));
  }
  if (!total.is_register) {
    ESCPOD_RETURN_IF_ERROR(check_count_fits(err, "dst", dst, "total", total.value));
  }
  OpRecord op;
  op.opcode = kOpFillTail;
  op.dst = dst;
  op.n = live;
  op.m = total;
  op.scalar = value;
  return add_op(std::move(op));
}

Status PrepTape::barrier() {
  ESCPOD_RETURN_IF_ERROR(begin_op("barrier"));
  ++m_current_stage;
  return Status::ok();
}

// ------------------------------------------------------------------------------------------
// Stage-independence analysis

namespace {

// An element index expression: scale * R[slot] + offset (slot < 0: the constant offset), or
// unknown. Register-dependent bounds of a non-empty range lie in [0, capacity] in every run that
// check_run admits, which bounds unknown and affine expressions numerically.
struct Expr {
  bool known = true;
  int slot = -1;
  Int128 scale = 0;
  Int128 offset = 0;

  static Expr constant(Int128 v) { return {true, -1, 0, v}; }
  static Expr reg(int s, Int128 scale_v, Int128 offset_v) { return {true, s, scale_v, offset_v}; }
  static Expr unknown() { return {false, -1, 0, 0}; }
  static Expr of(Scalar s) {
    return s.is_register ? reg(static_cast<int>(s.value), 1, 0) : constant(s.value);
  }
  bool is_constant() const { return known && slot < 0; }
};

struct Access {
  bool is_write = false;
  const char* role = "";
  const Buffer* buf = nullptr;
  Expr begin, end;  // elements of buf
};

struct ByteExpr {
  Expr e;
  Int128 base;   // buffer address
  Int128 width;  // bytes per element
  Int128 lo, hi; // numeric bounds of the byte address for a non-empty range
};

ByteExpr to_bytes(const Expr& e, const Buffer& b) {
  const Int128 base = b.address;
  const Int128 w = width_bytes(b.width);
  ByteExpr out{e, base, w, base, base + Int128{b.capacity} * w};
  if (e.is_constant()) {
    out.lo = out.hi = base + e.offset * w;
  }
  return out;
}

// True when x <= y holds for every admitted run.
bool provably_le(const ByteExpr& x, const ByteExpr& y) {
  if (x.e.known && y.e.known && x.e.slot == y.e.slot &&
      x.e.scale * x.width == y.e.scale * y.width) {
    return x.base + x.e.offset * x.width <= y.base + y.e.offset * y.width;
  }
  return x.hi <= y.lo;
}

bool provably_empty(const Access& a) {
  if (a.begin.is_constant() && a.end.is_constant()) return a.end.offset <= a.begin.offset;
  if (a.begin.known && a.end.known && a.begin.slot == a.end.slot &&
      a.begin.scale == a.end.scale) {
    return a.end.offset <= a.begin.offset;
  }
  return false;
}

bool provably_disjoint(const Access& a, const Access& b) {
  const ByteExpr ab = to_bytes(a.begin, *a.buf), ae = to_bytes(a.end, *a.buf);
  const ByteExpr bb = to_bytes(b.begin, *b.buf), be = to_bytes(b.end, *b.buf);
  return provably_le(ae, bb) || provably_le(be, ab);
}

}  // namespace

namespace {

// The memory an operation may touch, with symbolic bounds. Pointer-register operands are
// listed too (the caller skips them at finalize; check_run covers them).
std::vector<Access> accesses_of(const PrepTape::OpRecord& op) {
  std::vector<Access> out;
  const Expr zero = Expr::constant(0);
  switch (op.opcode) {
    case kOpFill:
      out.push_back({true, "dst", &op.dst, zero, Expr::of(op.n)});
      break;
    case kOpCopy: {
      out.push_back({true, "dst", &op.dst, zero, Expr::of(op.n)});
      Expr end = Expr::unknown();
      if (!op.stride.is_register && !op.n.is_register) {
        end = Expr::constant(Int128{op.stride.value} + op.n.value);
      } else if (!op.stride.is_register) {
        end = Expr::reg(static_cast<int>(op.n.value), 1, op.stride.value);
      } else if (!op.n.is_register) {
        end = Expr::reg(static_cast<int>(op.stride.value), 1, op.n.value);
      }
      // An empty copy reads nothing; a constant non-positive count makes the read empty too.
      Expr begin = Expr::of(op.stride);
      if (!op.n.is_register && op.n.value <= 0) end = begin;
      out.push_back({false, "src", &op.src, begin, end});
      break;
    }
    case kOpGather:
      out.push_back({true, "dst", &op.dst, zero, Expr::of(op.n)});
      out.push_back({false, "idx", &op.idx, zero, Expr::of(op.n)});
      out.push_back({false, "src", &op.src, zero,
                     (!op.n.is_register && op.n.value <= 0) ? zero : Expr::constant(op.src.capacity)});
      break;
    case kOpCopy2d: {
      const std::int64_t pitch = op.stride.value;
      Expr dst_end = op.n.is_register ? Expr::reg(static_cast<int>(op.n.value), pitch, 0)
                                      : Expr::constant(std::max<std::int64_t>(op.n.value, 0) *
                                                       Int128{pitch});
      out.push_back({true, "dst", &op.dst, zero, dst_end});
      Expr src_end = Expr::unknown();
      if (!op.m.is_register && op.m.value <= 0) {
        src_end = zero;
      } else if (!op.n.is_register && op.n.value <= 0) {
        src_end = zero;
      } else if (!op.m.is_register && !op.n.is_register) {
        src_end = Expr::constant(Int128{op.n.value - 1} * op.m.value +
                                 std::min(op.m.value, pitch));
      } else if (!op.m.is_register) {
        const std::int64_t c = op.m.value;
        src_end = Expr::reg(static_cast<int>(op.n.value), c, Int128{std::min(c, pitch)} - c);
      }
      out.push_back({false, "src", &op.src, zero, src_end});
      break;
    }
    case kOpFillTail:
      out.push_back({true, "dst", &op.dst, Expr::of(op.n), Expr::of(op.m)});
      break;
    default:
      break;
  }
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Finalize

namespace {

std::int64_t max_elements_written(const PrepTape::OpRecord& op) {
  const std::int64_t cap = op.dst.capacity;
  auto clamp_count = [cap](Scalar s) {
    return s.is_register ? cap : std::clamp<std::int64_t>(s.value, 0, cap);
  };
  switch (op.opcode) {
    case kOpFillTail: {
      const std::int64_t total = clamp_count(op.m);
      const std::int64_t live = op.n.is_register ? 0 : std::clamp<std::int64_t>(op.n.value, 0, cap);
      return std::max<std::int64_t>(total - live, 0);
    }
    case kOpCopy2d:
      if (op.n.is_register) return cap;
      return static_cast<std::int64_t>(
          std::min<Int128>(Int128{std::max<std::int64_t>(op.n.value, 0)} * op.stride.value, cap));
    default:
      return clamp_count(op.n);
  }
}

unsigned register_mask(const PrepTape::OpRecord& op) {
  unsigned mask = 0;
  auto flag = [&mask](int word, bool is_reg) {
    if (is_reg) mask |= 1u << (word - 1);
  };
  flag(detail::kWordSrc, op.has_src && op.src.pointer_slot >= 0);
  flag(detail::kWordIdx, op.has_idx && op.idx.pointer_slot >= 0);
  flag(detail::kWordN, op.n.is_register);
  flag(detail::kWordM, op.m.is_register);
  flag(detail::kWordStride, op.stride.is_register);
  flag(detail::kWordScalar, op.scalar.is_register);
  return mask;
}

std::int64_t address_word(const Buffer& b) {
  return b.pointer_slot >= 0 ? b.pointer_slot : static_cast<std::int64_t>(b.address);
}

Descriptor encode(const PrepTape::OpRecord& op) {
  Descriptor d;
  d.words[detail::kWordHeader] = detail::make_header(
      op.opcode, log2_of(op.dst.width), op.has_src ? log2_of(op.src.width) : 0,
      op.has_idx ? log2_of(op.idx.width) : 0, register_mask(op));
  d.words[detail::kWordDst] = address_word(op.dst);
  d.words[detail::kWordSrc] = op.has_src ? address_word(op.src) : 0;
  d.words[detail::kWordIdx] = op.has_idx ? address_word(op.idx) : 0;
  d.words[detail::kWordN] = op.n.value;
  d.words[detail::kWordM] = op.m.value;
  d.words[detail::kWordStride] = op.stride.value;
  d.words[detail::kWordScalar] = op.scalar.value;
  return d;
}

}  // namespace

Status PrepTape::finalize() {
  if (m_finalized) {
    return Status::invalid_argument(
        fmt::format("prep tape '{}': finalize after finalize: the tape is already finalized", m_name));
  }
  // Group ops by recorded stage, dropping empty stages.
  std::vector<std::vector<int>> stages;
  int last_stage = -1;
  for (int i = 0; i < n_ops(); ++i) {
    const int s = m_op_stage[static_cast<std::size_t>(i)];
    if (s != last_stage) {
      stages.emplace_back();
      last_stage = s;
    }
    stages.back().push_back(i);
  }

  if (m_options.check_stage_independence) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
      std::vector<std::pair<int, Access>> all;
      for (int i : stages[s]) {
        for (const Access& a : accesses_of(m_ops[static_cast<std::size_t>(i)])) {
          if (a.buf->pointer_slot >= 0 || provably_empty(a)) continue;
          all.emplace_back(i, a);
        }
      }
      for (std::size_t x = 0; x < all.size(); ++x) {
        for (std::size_t y = x + 1; y < all.size(); ++y) {
          const auto& [i, a] = all[x];
          const auto& [j, b] = all[y];
          if (!a.is_write && !b.is_write) continue;
          if (provably_disjoint(a, b)) continue;
          const char* ci = op_call_name(m_ops[static_cast<std::size_t>(i)].opcode);
          const char* cj = op_call_name(m_ops[static_cast<std::size_t>(j)].opcode);
          if (i == j) {
            return Status::invalid_argument(fmt::format(
                "prep tape '{}': stage {}: op {} ({}) {} '{}' may overlap its own {} '{}'; a copy "
                "or gather must not read its destination",
                m_name, s, i, ci, b.role, b.buf->name, a.role, a.buf->name));
          }
          return Status::invalid_argument(fmt::format(
              "prep tape '{}': stage {}: op {} ({}) {} {} '{}' and op {} ({}) {} {} '{}' may "
              "overlap for some register values ({}); record a barrier between them",
              m_name, s, i, ci, a.is_write ? "writes" : "reads", a.role, a.buf->name, j, cj,
              b.is_write ? "writes" : "reads", b.role, b.buf->name,
              // a comes first in recorded order
              a.is_write && b.is_write ? "write-after-write"
              : a.is_write             ? "read-after-write"
                                       : "write-after-read"));
        }
      }
    }
  }

  m_descriptors.clear();
  m_max_elements.clear();
  m_desc_op.clear();
  m_stage_begin.assign(1, 0);
  for (const auto& stage : stages) {
    for (int i : stage) {
      const OpRecord& op = m_ops[static_cast<std::size_t>(i)];
      m_descriptors.push_back(encode(op));
      m_max_elements.push_back(max_elements_written(op));
      m_desc_op.push_back(i);
    }
    m_stage_begin.push_back(static_cast<int>(m_descriptors.size()));
  }
  m_finalized = true;
  return Status::ok();
}

std::span<const Descriptor> PrepTape::stage_descriptors(int stage_idx) const {
  if (stage_idx < 0 || stage_idx >= n_stages()) return {};
  const auto b = static_cast<std::size_t>(m_stage_begin[static_cast<std::size_t>(stage_idx)]);
  const auto e = static_cast<std::size_t>(m_stage_begin[static_cast<std::size_t>(stage_idx) + 1]);
  return std::span<const Descriptor>(m_descriptors).subspan(b, e - b);
}

std::span<const std::int64_t> PrepTape::stage_max_elements(int stage_idx) const {
  if (stage_idx < 0 || stage_idx >= n_stages()) return {};
  const auto b = static_cast<std::size_t>(m_stage_begin[static_cast<std::size_t>(stage_idx)]);
  const auto e = static_cast<std::size_t>(m_stage_begin[static_cast<std::size_t>(stage_idx) + 1]);
  return std::span<const std::int64_t>(m_max_elements).subspan(b, e - b);
}

// ------------------------------------------------------------------------------------------
// Run-time bounds

namespace {

detail::RawRegisters raw_registers(const Registers& regs) {
  detail::RawRegisters raw;
  std::memcpy(raw.slot, regs.values().data(), sizeof raw.slot);
  return raw;
}

struct ByteRange {
  Int128 begin, end;
};

// A source read through a pointer register, as bytes (the stage-independence check at run time).
struct PointerRead {
  int op_idx;
  const Buffer* buf;
  ByteRange range;
};

// The run-time bound checks of one operation (`err` names it), and, with check_aliasing, the
// bytes it writes (to `dst`) and reads through pointer registers, for the stage's overlap check.
class RunBounds {
 public:
  RunBounds(const OpErrors& err, int op_idx, const Buffer& dst, bool check_aliasing,
            std::vector<ByteRange>& stage_writes, std::vector<PointerRead>& pointer_reads)
      : m_err(err), m_op_idx(op_idx), m_dst(dst), m_check_aliasing(check_aliasing),
        m_stage_writes(stage_writes), m_pointer_reads(pointer_reads) {}

  // Elements [lo, hi) of `b` inside its recorded capacity.
  Status fits(std::string_view role, const Buffer& b, std::string_view what, Int128 lo, Int128 hi) const {
    if (lo < 0 || hi > b.capacity) {
      return m_err.buffer(role, b,
                          fmt::format("{} [{}, {}) is outside the recorded capacity {}", what,
                                      static_cast<long long>(lo), static_cast<long long>(hi), b.capacity));
    }
    return Status::ok();
  }
  // A source read through a pointer register: non-null and aligned (only when it is read).
  Status pointer_ok(std::string_view role, const Buffer& b, std::int64_t address, Int128 lo, Int128 hi) {
    if (b.pointer_slot < 0) return Status::ok();
    const auto a = static_cast<std::uint64_t>(address);
    if (a == 0) {
      return m_err.buffer(role, b, fmt::format("pointer register {} is null", b.pointer_slot));
    }
    if (a % static_cast<std::uint64_t>(width_bytes(b.width)) != 0) {
      return m_err.buffer(role, b,
                          fmt::format("pointer register {} holds {:#x}, not aligned to {} bytes",
                                      b.pointer_slot, a, width_bytes(b.width)));
    }
    if (m_check_aliasing) {
      const Int128 w = width_bytes(b.width);
      m_pointer_reads.push_back({m_op_idx, &b, {Int128{a} + lo * w, Int128{a} + hi * w}});
    }
    return Status::ok();
  }
  // Elements [lo, hi) of the destination are written.
  void record_write(Int128 lo, Int128 hi) {
    if (m_check_aliasing && lo < hi) {
      const Int128 w = width_bytes(m_dst.width);
      m_stage_writes.push_back({Int128{m_dst.address} + lo * w, Int128{m_dst.address} + hi * w});
    }
  }

 private:
  const OpErrors& m_err;
  int m_op_idx;
  const Buffer& m_dst;
  bool m_check_aliasing;
  std::vector<ByteRange>& m_stage_writes;
  std::vector<PointerRead>& m_pointer_reads;
};

// The bounds of operation op_idx of tape `tape` (`op`, its registers resolved in `r`), by opcode.
Status check_op_bounds(const PrepTape::OpRecord& op, const detail::ResolvedOp& r, RunBounds& bounds,
                       const std::string& tape, int op_idx) {
  const std::int64_t n = r.word[detail::kWordN];
  switch (op.opcode) {
    case kOpFill:
      if (n > 0) {
        ESCPOD_RETURN_IF_ERROR(bounds.fits("dst", op.dst, "write", 0, n));
        bounds.record_write(0, n);
      }
      break;
    case kOpCopy:
      if (n > 0) {
        const Int128 off = r.word[detail::kWordStride];
        ESCPOD_RETURN_IF_ERROR(bounds.fits("dst", op.dst, "write", 0, n));
        ESCPOD_RETURN_IF_ERROR(bounds.fits("src", op.src, "read", off, off + n));
        ESCPOD_RETURN_IF_ERROR(bounds.pointer_ok("src", op.src, r.word[detail::kWordSrc], off, off + n));
        bounds.record_write(0, n);
      }
      break;
    case kOpGather:
      if (n > 0) {
        ESCPOD_RETURN_IF_ERROR(bounds.fits("dst", op.dst, "write", 0, n));
        ESCPOD_RETURN_IF_ERROR(bounds.fits("idx", op.idx, "read", 0, n));
        ESCPOD_RETURN_IF_ERROR(bounds.pointer_ok("idx", op.idx, r.word[detail::kWordIdx], 0, n));
        ESCPOD_RETURN_IF_ERROR(bounds.pointer_ok("src", op.src, r.word[detail::kWordSrc], 0, op.src.capacity));
        bounds.record_write(0, n);
      }
      break;
    case kOpCopy2d:
      if (n > 0) {
        const Int128 pitch = r.word[detail::kWordStride];
        const Int128 cols = r.word[detail::kWordM];
        ESCPOD_RETURN_IF_ERROR(bounds.fits("dst", op.dst, "write", 0, Int128{n} * pitch));
        if (cols > 0) {
          const Int128 extent = Int128{n - 1} * cols + std::min(cols, pitch);
          ESCPOD_RETURN_IF_ERROR(bounds.fits("src", op.src, "read", 0, extent));
          ESCPOD_RETURN_IF_ERROR(bounds.pointer_ok("src", op.src, r.word[detail::kWordSrc], 0, extent));
        }
        bounds.record_write(0, Int128{n} * pitch);
      }
      break;
    case kOpFillTail: {
      const std::int64_t total = r.word[detail::kWordM];
      if (n < total) {
        ESCPOD_RETURN_IF_ERROR(bounds.fits("dst", op.dst, "tail", n, total));
        bounds.record_write(n, total);
      }
      break;
    }
    default:
      return Status::internal(fmt::format("prep tape '{}': op {}: unknown opcode {}", tape, op_idx, op.opcode));
  }
  return Status::ok();
}

// kInvalidArgument when stage s of tape `tape` reads, through a pointer register, memory the
// same stage writes (its ops run concurrently).
Status check_stage_overlap(const std::string& tape, int s, const std::vector<PointerRead>& pointer_reads,
                           const std::vector<ByteRange>& stage_writes) {
  for (const PointerRead& pr : pointer_reads) {
    for (const ByteRange& w : stage_writes) {
      if (pr.range.begin < w.end && w.begin < pr.range.end) {
        return Status::invalid_argument(fmt::format(
            "prep tape '{}': stage {}: op {} reads '{}' through pointer register {}, which "
            "overlaps memory written in the same stage",
            tape, s, pr.op_idx, pr.buf->name, pr.buf->pointer_slot));
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status PrepTape::check_run(const Registers& regs) const {
  if (!m_finalized) {
    return Status::invalid_argument(
        fmt::format("prep tape '{}': run before finalize: finalize the tape first", m_name));
  }
  const detail::RawRegisters raw = raw_registers(regs);
  std::vector<ByteRange> stage_writes;
  std::vector<PointerRead> pointer_reads;
  const bool check_aliasing = m_options.check_stage_independence;

  for (int s = 0; s < n_stages(); ++s) {
    stage_writes.clear();
    pointer_reads.clear();
    for (int d = m_stage_begin[static_cast<std::size_t>(s)];
         d < m_stage_begin[static_cast<std::size_t>(s) + 1]; ++d) {
      const int op_idx = m_desc_op[static_cast<std::size_t>(d)];
      const OpRecord& op = m_ops[static_cast<std::size_t>(op_idx)];
      detail::ResolvedOp r;
      detail::resolve(m_descriptors[static_cast<std::size_t>(d)].words.data(), raw, r);
      const OpErrors err(m_name, op_idx, op_call_name(op.opcode));
      RunBounds bounds(err, op_idx, op.dst, check_aliasing, stage_writes, pointer_reads);
      ESCPOD_RETURN_IF_ERROR(check_op_bounds(op, r, bounds, m_name, op_idx));
    }
    ESCPOD_RETURN_IF_ERROR(check_stage_overlap(m_name, s, pointer_reads, stage_writes));
  }
  return Status::ok();
}

// ------------------------------------------------------------------------------------------
// Host interpreter: plain loops over host memory. Element access goes through memcpy, so the
// loops are valid whatever type the caller's buffer holds (int32, float, ...).

namespace {

template <typename T>
T load_at(std::int64_t base, std::int64_t i) {
  T v;
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(base) + i * static_cast<std::int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

template <typename T>
void store_at(std::int64_t base, std::int64_t i, T v) {
  std::memcpy(reinterpret_cast<unsigned char*>(base) + i * static_cast<std::int64_t>(sizeof(T)), &v,
              sizeof(T));
}

// dst[begin, end) = value: memset when every byte of the value is the same (0, -1: the usual
// padding values), otherwise 64-byte chunks of the repeated pattern; both run at memory speed,
// which a per-element memcpy loop did not (it measured about 2x slower than std::fill).
template <typename T>
void host_fill(std::int64_t dst, std::int64_t begin, std::int64_t end, std::int64_t value) {
  if (end <= begin) return;
  const T v = static_cast<T>(value);
  auto* p = reinterpret_cast<unsigned char*>(dst) + begin * static_cast<std::int64_t>(sizeof(T));
  auto bytes = static_cast<std::size_t>(end - begin) * sizeof(T);
  unsigned char pattern[64];
  for (std::size_t k = 0; k < sizeof pattern; k += sizeof(T)) std::memcpy(pattern + k, &v, sizeof(T));
  if (std::all_of(pattern, pattern + sizeof(T), [&](unsigned char c) { return c == pattern[0]; })) {
    std::memset(p, pattern[0], bytes);
    return;
  }
  for (; bytes >= sizeof pattern; bytes -= sizeof pattern, p += sizeof pattern) {
    std::memcpy(p, pattern, sizeof pattern);
  }
  std::memcpy(p, pattern, bytes);
}

std::int64_t load_index(std::int64_t base, std::int64_t i, int log2) {
  switch (log2) {
    case 0: return load_at<std::int8_t>(base, i);
    case 1: return load_at<std::int16_t>(base, i);
    case 2: return load_at<std::int32_t>(base, i);
    default: return load_at<std::int64_t>(base, i);
  }
}

template <typename T>
void host_execute(const detail::ResolvedOp& r) {
  constexpr auto w = static_cast<std::int64_t>(sizeof(T));
  const std::int64_t dst = r.word[detail::kWordDst];
  const std::int64_t src = r.word[detail::kWordSrc];
  const std::int64_t n = r.word[detail::kWordN];
  const std::int64_t value = r.word[detail::kWordScalar];
  switch (r.opcode) {
    case kOpFill:
      host_fill<T>(dst, 0, n, value);
      break;
    case kOpFillTail:
      host_fill<T>(dst, n, r.word[detail::kWordM], value);
      break;
    case kOpCopy:
      if (n > 0) {
        std::memmove(reinterpret_cast<void*>(dst),
                     reinterpret_cast<const unsigned char*>(src) + r.word[detail::kWordStride] * w,
                     static_cast<std::size_t>(n * w));
      }
      break;
    case kOpGather: {
      const std::int64_t idx = r.word[detail::kWordIdx];
      const std::int64_t src_capacity = r.word[detail::kWordM];
      const T oob = static_cast<T>(value);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t j = load_index(idx, i, r.idx_log2);
        store_at<T>(dst, i, (j >= 0 && j < src_capacity) ? load_at<T>(src, j) : oob);
      }
      break;
    }
    case kOpCopy2d: {
      const std::int64_t pitch = r.word[detail::kWordStride];
      const std::int64_t cols = r.word[detail::kWordM];
      const std::int64_t copied = std::clamp<std::int64_t>(cols, 0, pitch);
      for (std::int64_t row = 0; row < n; ++row) {
        if (copied > 0) {
          std::memcpy(reinterpret_cast<unsigned char*>(dst) + row * pitch * w,
                      reinterpret_cast<const unsigned char*>(src) + row * cols * w,
                      static_cast<std::size_t>(copied * w));
        }
        host_fill<T>(dst, row * pitch + copied, (row + 1) * pitch, value);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace

Status run_on_host(const PrepTape& tape, const Registers& regs) {
  if (tape.space() != MemorySpace::kHost) {
    return Status::invalid_argument(fmt::format(
        "prep tape '{}': run_on_host on a device tape (use DeviceTape)", tape.name()));
  }
  ESCPOD_RETURN_IF_ERROR(tape.check_run(regs));
  const detail::RawRegisters raw = raw_registers(regs);
  for (int s = 0; s < tape.n_stages(); ++s) {
    for (const Descriptor& d : tape.stage_descriptors(s)) {
      detail::ResolvedOp r;
      detail::resolve(d.words.data(), raw, r);
      switch (r.dst_log2) {
        case 0: host_execute<std::uint8_t>(r); break;
        case 1: host_execute<std::uint16_t>(r); break;
        case 2: host_execute<std::uint32_t>(r); break;
        default: host_execute<std::uint64_t>(r); break;
      }
    }
  }
  return Status::ok();
}

}  // namespace escpod::gpu
