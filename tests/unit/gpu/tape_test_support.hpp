// Test support for the prep tape: a tape described as plain data (TapeSpec), host memory images
// with canaries around every buffer, a random tape generator, and the eager reference: plain
// per-operation loops written from the specification (docs/prep_tape.md §3), independently of
// the descriptor encoding and of both interpreters. Shared by the CPU and GPU test binaries.
#pragma once

#include "escpod/gpu/prep_tape.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace escpod::gpu::test {

__extension__ typedef __int128 Int128;

inline constexpr std::int64_t kCanaryBytes = 64;

enum class Kind { kFill, kCopy, kGather, kCopy2d, kFillTail };

// A buffer of the spec: a fixed buffer or (pointer_slot >= 0) a per-step source read through a
// pointer register. `lead` elements of padding before the payload vary its 16-byte alignment.
struct BufSpec {
  std::string name;
  Width width = Width::k4;
  std::int64_t capacity = 0;
  std::int64_t lead = 0;
  int pointer_slot = -1;
};

struct OpSpec {
  Kind kind = Kind::kFill;
  int dst = -1;
  int src = -1;
  int idx = -1;
  Scalar n;      // fill/copy/gather count, copy_2d rows, fill_tail live
  Scalar m;      // copy_2d source columns, fill_tail total
  Scalar off;    // copy source offset
  Scalar value;  // fill/fill_tail value, gather oob, copy_2d pad
  std::int64_t pitch = 0;
};

struct Item {
  bool is_barrier = false;
  OpSpec op;
};

struct TapeSpec {
  std::vector<BufSpec> bufs;
  std::vector<Item> items;
};

using RegValues = std::array<std::int64_t, kNumRegisters>;

inline int wbytes(const BufSpec& b) { return width_bytes(b.width); }

inline std::size_t payload_offset(const BufSpec& b) {
  return static_cast<std::size_t>(kCanaryBytes + b.lead * wbytes(b));
}

inline std::size_t image_size(const BufSpec& b) {
  return payload_offset(b) + static_cast<std::size_t>(b.capacity * wbytes(b) + kCanaryBytes);
}

// Host bytes of every buffer of a spec: canary, payload, canary.
struct Image {
  std::vector<std::vector<std::uint8_t>> mem;

  std::uint8_t* payload(const TapeSpec& spec, int b) {
    return mem[static_cast<std::size_t>(b)].data() + payload_offset(spec.bufs[static_cast<std::size_t>(b)]);
  }
};

inline Image make_image(const TapeSpec& spec) {
  Image img;
  for (const BufSpec& b : spec.bufs) img.mem.emplace_back(image_size(b), std::uint8_t{0xA5});
  return img;
}

// Random stale contents everywhere (canaries included): mostly small integers, so that gather
// indices are often in range, sometimes arbitrary bits.
inline void randomize(Image& img, const TapeSpec& spec, std::mt19937_64& rng) {
  for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
    const int w = wbytes(spec.bufs[b]);
    auto& bytes = img.mem[b];
    const bool small = rng() % 4 != 0;
    for (std::size_t i = 0; i + static_cast<std::size_t>(w) <= bytes.size(); i += static_cast<std::size_t>(w)) {
      std::uint64_t v = rng();
      if (small) v = static_cast<std::uint64_t>(static_cast<std::int64_t>(rng() % 300) - 20);
      std::memcpy(bytes.data() + i, &v, static_cast<std::size_t>(w));
    }
  }
}

inline std::int64_t resolve(Scalar s, const RegValues& regs) {
  return s.is_register ? regs[static_cast<std::size_t>(s.value)] : s.value;
}

// Records `spec` into `tape`; `address_of(b)` gives buffer b's payload address in `space`.
inline Status record(const TapeSpec& spec, PrepTape& tape,
                     const std::function<std::uintptr_t(int)>& address_of, MemorySpace space) {
  std::vector<Buffer> bufs;
  for (std::size_t b = 0; b < spec.bufs.size(); ++b) {
    const BufSpec& s = spec.bufs[b];
    if (s.pointer_slot >= 0) {
      bufs.push_back(pointer_register(s.name, s.pointer_slot, s.capacity, s.width, space));
    } else {
      Buffer x;
      x.name = s.name;
      x.address = address_of(static_cast<int>(b));
      x.capacity = s.capacity;
      x.width = s.width;
      x.space = space;
      bufs.push_back(x);
    }
  }
  auto at = [&bufs](int i) -> const Buffer& { return bufs[static_cast<std::size_t>(i)]; };
  for (const Item& it : spec.items) {
    if (it.is_barrier) {
      ESCPOD_RETURN_IF_ERROR(tape.barrier());
      continue;
    }
    const OpSpec& op = it.op;
    switch (op.kind) {
      case Kind::kFill: ESCPOD_RETURN_IF_ERROR(tape.fill(at(op.dst), op.n, op.value)); break;
      case Kind::kCopy: ESCPOD_RETURN_IF_ERROR(tape.copy(at(op.dst), at(op.src), op.n, op.off)); break;
      case Kind::kGather:
        ESCPOD_RETURN_IF_ERROR(tape.gather(at(op.dst), at(op.src), at(op.idx), op.n, op.value));
        break;
      case Kind::kCopy2d:
        ESCPOD_RETURN_IF_ERROR(tape.copy_2d(at(op.dst), at(op.src), op.n, op.m, op.pitch, op.value));
        break;
      case Kind::kFillTail:
        ESCPOD_RETURN_IF_ERROR(tape.fill_tail(at(op.dst), op.n, op.m, op.value));
        break;
    }
  }
  return Status::ok();
}

// --- The eager reference -----------------------------------------------------------------

inline bool in_bounds(Int128 lo, Int128 hi, std::int64_t capacity) { return lo >= 0 && hi <= capacity; }

// Whether a run with `regs` is admitted: every non-empty range inside its buffer, every pointer
// register that is read non-null. (Alignment of pointer registers is the caller's business.)
inline bool reference_valid(const TapeSpec& spec, const RegValues& regs) {
  auto buf = [&spec](int i) -> const BufSpec& { return spec.bufs[static_cast<std::size_t>(i)]; };
  auto ptr_ok = [&](int i) {
    return buf(i).pointer_slot < 0 || regs[static_cast<std::size_t>(buf(i).pointer_slot)] != 0;
  };
  for (const Item& it : spec.items) {
    if (it.is_barrier) continue;
    const OpSpec& op = it.op;
    const Int128 n = resolve(op.n, regs);
    switch (op.kind) {
      case Kind::kFill:
        if (n > 0 && !in_bounds(0, n, buf(op.dst).capacity)) return false;
        break;
      case Kind::kCopy: {
        const Int128 off = resolve(op.off, regs);
        if (n > 0 && (!in_bounds(0, n, buf(op.dst).capacity) ||
                      !in_bounds(off, off + n, buf(op.src).capacity) || !ptr_ok(op.src))) {
          return false;
        }
        break;
      }
      case Kind::kGather:
        if (n > 0 && (!in_bounds(0, n, buf(op.dst).capacity) ||
                      !in_bounds(0, n, buf(op.idx).capacity) || !ptr_ok(op.idx) || !ptr_ok(op.src))) {
          return false;
        }
        break;
      case Kind::kCopy2d: {
        const Int128 cols = resolve(op.m, regs);
        if (n > 0) {
          if (!in_bounds(0, n * op.pitch, buf(op.dst).capacity)) return false;
          if (cols > 0) {
            const Int128 extent = (n - 1) * cols + std::min<Int128>(cols, op.pitch);
            if (!in_bounds(0, extent, buf(op.src).capacity) || !ptr_ok(op.src)) return false;
          }
        }
        break;
      }
      case Kind::kFillTail: {
        const Int128 total = resolve(op.m, regs);
        if (n < total && !in_bounds(n, total, buf(op.dst).capacity)) return false;
        break;
      }
    }
  }
  return true;
}

// Element access on host memory at a given width, as unsigned bit patterns.
inline std::uint64_t get_elem(const std::uint8_t* base, std::int64_t i, int w) {
  std::uint64_t v = 0;
  std::memcpy(&v, base + i * w, static_cast<std::size_t>(w));
  return v;
}
inline void set_elem(std::uint8_t* base, std::int64_t i, int w, std::uint64_t v) {
  std::memcpy(base + i * w, &v, static_cast<std::size_t>(w));
}
inline std::int64_t get_signed(const std::uint8_t* base, std::int64_t i, int w) {
  switch (w) {
    case 1: { std::int8_t v; std::memcpy(&v, base + i, 1); return v; }
    case 2: { std::int16_t v; std::memcpy(&v, base + i * 2, 2); return v; }
    case 4: { std::int32_t v; std::memcpy(&v, base + i * 4, 4); return v; }
    default: { std::int64_t v; std::memcpy(&v, base + i * 8, 8); return v; }
  }
}

// Applies an admitted run to host memory, op by op in recorded order. Pointer-register sources
// are read at the address in their register (which must point into host memory).
inline void reference_apply(const TapeSpec& spec, const RegValues& regs, Image& img) {
  auto base = [&](int i) -> std::uint8_t* {
    const BufSpec& b = spec.bufs[static_cast<std::size_t>(i)];
    if (b.pointer_slot >= 0) {
      return reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(regs[static_cast<std::size_t>(b.pointer_slot)]));
    }
    return img.payload(spec, i);
  };
  for (const Item& it : spec.items) {
    if (it.is_barrier) continue;
    const OpSpec& op = it.op;
    const int w = wbytes(spec.bufs[static_cast<std::size_t>(op.dst)]);
    std::uint8_t* dst = base(op.dst);
    const std::int64_t n = resolve(op.n, regs);
    const auto value = static_cast<std::uint64_t>(resolve(op.value, regs));
    switch (op.kind) {
      case Kind::kFill:
        for (std::int64_t i = 0; i < n; ++i) set_elem(dst, i, w, value);
        break;
      case Kind::kFillTail: {
        const std::int64_t total = resolve(op.m, regs);
        for (std::int64_t i = n; i < total; ++i) set_elem(dst, i, w, value);
        break;
      }
      case Kind::kCopy: {
        const std::uint8_t* src = base(op.src);
        const std::int64_t off = resolve(op.off, regs);
        for (std::int64_t i = 0; i < n; ++i) set_elem(dst, i, w, get_elem(src, off + i, w));
        break;
      }
      case Kind::kGather: {
        const std::uint8_t* src = base(op.src);
        const std::uint8_t* idx = base(op.idx);
        const int iw = wbytes(spec.bufs[static_cast<std::size_t>(op.idx)]);
        const std::int64_t src_cap = spec.bufs[static_cast<std::size_t>(op.src)].capacity;
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t j = get_signed(idx, i, iw);
          set_elem(dst, i, w, (j >= 0 && j < src_cap) ? get_elem(src, j, w) : value);
        }
        break;
      }
      case Kind::kCopy2d: {
        const std::uint8_t* src = base(op.src);
        const std::int64_t cols = resolve(op.m, regs);
        for (std::int64_t r = 0; r < n; ++r) {
          for (std::int64_t c = 0; c < op.pitch; ++c) {
            set_elem(dst, r * op.pitch + c, w, c < cols ? get_elem(src, r * cols + c, w) : value);
          }
        }
        break;
      }
    }
  }
}

// --- Random tapes ------------------------------------------------------------------------

inline std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

inline Width random_width(std::mt19937_64& rng) {
  static constexpr Width kWidths[] = {Width::k4, Width::k8, Width::k4, Width::k8, Width::k1, Width::k2};
  return kWidths[rng() % 6];
}

// An immediate that fits width w (as signed or unsigned).
inline std::int64_t random_value(std::mt19937_64& rng, int w) {
  const std::uint64_t bits = rng();
  if (rng() % 3 == 0) return uniform(rng, -3, 3);
  if (w == 8) return static_cast<std::int64_t>(bits);
  return uniform(rng, -(std::int64_t{1} << (8 * w - 1)), (std::int64_t{1} << (8 * w)) - 1);
}

// Registers 0..7 are counts/offsets/values, 16..19 pointer sources.
inline constexpr int kCountRegs = 8;
inline constexpr int kPointerReg0 = 16;

// A random valid tape: 2..6 fixed buffers and 0..2 pointer sources, 1..10 operations, with a
// barrier wherever an operation touches a buffer the current stage writes, or writes one it
// reads; sometimes a prefix write and a tail fill of one buffer sharing a register (independent
// by construction, so they share a stage); sometimes extra (consecutive, trailing) barriers.
inline TapeSpec random_spec(std::mt19937_64& rng, std::int64_t max_capacity = 200) {
  TapeSpec spec;
  const int n_fixed = static_cast<int>(uniform(rng, 2, 6));
  const int n_ptr = static_cast<int>(uniform(rng, 0, 2));
  for (int i = 0; i < n_fixed + n_ptr; ++i) {
    BufSpec b;
    b.width = random_width(rng);
    b.capacity = uniform(rng, 1, max_capacity);
    b.lead = uniform(rng, 0, 3);
    if (i >= n_fixed) {
      b.pointer_slot = kPointerReg0 + (i - n_fixed);
      b.name = "ptr" + std::to_string(i - n_fixed);
    } else {
      b.name = "buf" + std::to_string(i);
    }
    spec.bufs.push_back(b);
  }
  auto cap = [&spec](int i) { return spec.bufs[static_cast<std::size_t>(i)].capacity; };
  auto width_of_buf = [&spec](int i) { return spec.bufs[static_cast<std::size_t>(i)].width; };
  auto count_arg = [&rng](std::int64_t limit) {
    if (rng() % 2 == 0) return Scalar::reg(static_cast<int>(rng() % kCountRegs));
    return Scalar::imm(uniform(rng, -1, limit));
  };
  auto value_arg = [&rng](int w) {
    if (rng() % 4 == 0) return Scalar::reg(static_cast<int>(rng() % kCountRegs));
    return Scalar::imm(random_value(rng, w));
  };
  // Buffers (same width as `w`, other than `not_this`) usable as a source.
  auto pick_src = [&](Width w, int not_this, bool allow_ptr) {
    std::vector<int> c;
    for (int i = 0; i < n_fixed + n_ptr; ++i) {
      if (i == not_this || width_of_buf(i) != w) continue;
      if (i >= n_fixed && !allow_ptr) continue;
      c.push_back(i);
    }
    return c.empty() ? -1 : c[rng() % c.size()];
  };

  std::vector<bool> stage_reads(static_cast<std::size_t>(n_fixed + n_ptr), false);
  std::vector<bool> stage_writes(static_cast<std::size_t>(n_fixed + n_ptr), false);
  auto barrier = [&]() {
    spec.items.push_back(Item{true, {}});
    std::fill(stage_reads.begin(), stage_reads.end(), false);
    std::fill(stage_writes.begin(), stage_writes.end(), false);
  };
  auto add = [&](const OpSpec& op) {
    std::vector<int> reads;
    if (op.src >= 0) reads.push_back(op.src);
    if (op.idx >= 0) reads.push_back(op.idx);
    bool conflict = stage_reads[static_cast<std::size_t>(op.dst)] || stage_writes[static_cast<std::size_t>(op.dst)];
    for (int r : reads) conflict = conflict || stage_writes[static_cast<std::size_t>(r)];
    if (conflict) barrier();
    stage_writes[static_cast<std::size_t>(op.dst)] = true;
    for (int r : reads) stage_reads[static_cast<std::size_t>(r)] = true;
    spec.items.push_back(Item{false, op});
  };

  const int n_ops = static_cast<int>(uniform(rng, 1, 10));
  for (int k = 0; k < n_ops; ++k) {
    if (rng() % 10 == 0) spec.items.push_back(Item{true, {}});  // a spare barrier
    OpSpec op;
    op.dst = static_cast<int>(uniform(rng, 0, n_fixed - 1));
    const Width w = width_of_buf(op.dst);
    const int wb = width_bytes(w);
    const std::int64_t dcap = cap(op.dst);
    switch (rng() % 6) {
      case 0:
        op.kind = Kind::kFill;
        op.n = count_arg(dcap);
        op.value = value_arg(wb);
        break;
      case 1: {
        op.src = pick_src(w, op.dst, true);
        if (op.src < 0) { op.kind = Kind::kFill; op.n = count_arg(dcap); op.value = value_arg(wb); break; }
        op.kind = Kind::kCopy;
        const std::int64_t scap = cap(op.src);
        op.n = count_arg(std::min(dcap, scap));
        if (!op.n.is_register && op.n.value > 0 && rng() % 2 == 0) {
          op.off = Scalar::imm(uniform(rng, 0, scap - op.n.value));
        } else if (!op.n.is_register && op.n.value > 0) {
          op.off = Scalar::reg(static_cast<int>(rng() % kCountRegs));
        } else {
          op.off = rng() % 2 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(uniform(rng, 0, scap));
        }
        break;
      }
      case 2: {
        op.src = pick_src(w, op.dst, true);
        std::vector<int> idx_choices;
        for (int i = 0; i < n_fixed + n_ptr; ++i) if (i != op.dst) idx_choices.push_back(i);
        if (op.src < 0 || idx_choices.empty()) { op.kind = Kind::kFill; op.n = count_arg(dcap); op.value = value_arg(wb); op.src = -1; break; }
        op.kind = Kind::kGather;
        op.idx = idx_choices[rng() % idx_choices.size()];
        op.n = count_arg(std::min(dcap, cap(op.idx)));
        op.value = rng() % 4 == 0 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(random_value(rng, wb));
        break;
      }
      case 3: {
        op.src = pick_src(w, op.dst, true);
        if (op.src < 0) {
          op.kind = Kind::kFillTail;
          op.n = Scalar::imm(uniform(rng, 0, dcap));
          op.m = Scalar::reg(static_cast<int>(rng() % kCountRegs));
          op.value = value_arg(wb);
          break;
        }
        op.kind = Kind::kCopy2d;
        op.pitch = uniform(rng, 1, std::min<std::int64_t>(dcap, 12));
        const std::int64_t max_rows = dcap / op.pitch;
        op.n = rng() % 2 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(uniform(rng, -1, max_rows));
        op.m = rng() % 2 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(uniform(rng, -1, op.pitch + 3));
        if (!op.n.is_register && !op.m.is_register && op.n.value > 0 && op.m.value > 0) {
          const Int128 extent = Int128{op.n.value - 1} * op.m.value + std::min(op.m.value, op.pitch);
          if (extent > cap(op.src)) op.m = Scalar::reg(static_cast<int>(rng() % kCountRegs));
        }
        op.value = value_arg(wb);
        break;
      }
      case 4: {
        op.kind = Kind::kFillTail;
        op.n = rng() % 2 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(uniform(rng, 0, dcap + 2));
        op.m = rng() % 3 ? Scalar::reg(static_cast<int>(rng() % kCountRegs)) : Scalar::imm(uniform(rng, 0, dcap));
        op.value = value_arg(wb);
        break;
      }
      default: {
        // Prefix write [0, R) and tail fill [R, total) of one buffer, sharing register R.
        const int r = static_cast<int>(rng() % kCountRegs);
        op.kind = Kind::kFill;
        op.n = Scalar::reg(r);
        op.value = value_arg(wb);
        const int src = pick_src(w, op.dst, true);
        if (src >= 0 && rng() % 2 == 0) {
          op.kind = Kind::kCopy;
          op.src = src;
          op.off = Scalar::imm(0);
        }
        OpSpec tail;
        tail.kind = Kind::kFillTail;
        tail.dst = op.dst;
        tail.n = Scalar::reg(r);
        tail.m = rng() % 2 ? Scalar::imm(uniform(rng, 0, dcap)) : Scalar::reg(static_cast<int>(rng() % kCountRegs));
        tail.value = value_arg(wb);
        add(op);
        spec.items.push_back(Item{false, tail});  // same stage as its prefix on purpose
        continue;
      }
    }
    add(op);
  }
  if (rng() % 5 == 0) spec.items.push_back(Item{true, {}});  // trailing barrier
  return spec;
}

// Random register values for the count slots: mostly inside [0, largest capacity], sometimes
// just outside, sometimes extreme.
inline void random_count_registers(std::mt19937_64& rng, const TapeSpec& spec, RegValues& regs) {
  std::int64_t max_cap = 1;
  for (const BufSpec& b : spec.bufs) max_cap = std::max(max_cap, b.capacity);
  for (int s = 0; s < kCountRegs; ++s) {
    const auto pick = rng() % 20;
    std::int64_t v;
    if (pick == 0) {
      v = static_cast<std::int64_t>(rng());
    } else if (pick == 1) {
      v = uniform(rng, -3, -1);
    } else if (pick < 8) {
      v = uniform(rng, 0, 8);
    } else {
      v = uniform(rng, 0, max_cap + 1);
    }
    regs[static_cast<std::size_t>(s)] = v;
  }
}

inline std::string describe(const TapeSpec& spec) {
  std::ostringstream os;
  for (const BufSpec& b : spec.bufs) {
    os << b.name << "(w" << wbytes(b) << " cap " << b.capacity << " lead " << b.lead;
    if (b.pointer_slot >= 0) os << " ptr r" << b.pointer_slot;
    os << ") ";
  }
  os << "\n";
  static const char* kNames[] = {"fill", "copy", "gather", "copy_2d", "fill_tail"};
  auto arg = [](Scalar s) {
    std::ostringstream a;
    if (s.is_register) a << 'r';
    a << s.value;
    return a.str();
  };
  for (const Item& it : spec.items) {
    if (it.is_barrier) { os << "  barrier\n"; continue; }
    const OpSpec& op = it.op;
    os << "  " << kNames[static_cast<int>(op.kind)] << " dst=" << op.dst << " src=" << op.src << " idx=" << op.idx
       << " n=" << arg(op.n) << " m=" << arg(op.m) << " off=" << arg(op.off) << " value=" << arg(op.value)
       << " pitch=" << op.pitch << "\n";
  }
  return os.str();
}

}  // namespace escpod::gpu::test
