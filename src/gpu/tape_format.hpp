// The prep tape's descriptor encoding and register resolution, shared by the recorder and host
// interpreter (prep_tape.cpp), the CUDA interpreter (tape_kernel.cu) and the host emulation of
// the CUDA interpreter in the tests. Plain C++ that nvcc also compiles for the device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ESCPOD_HD __host__ __device__ __forceinline__
#else
#define ESCPOD_HD inline
#endif

namespace escpod::gpu::detail {

inline constexpr int kDescriptorWords = 8;
inline constexpr int kRegisterSlots = 32;

// Opcodes (word 0, bits 0-7). Plain ints: they travel inside a 64-bit word.
inline constexpr int kOpFill = 0;
inline constexpr int kOpCopy = 1;
inline constexpr int kOpGather = 2;
inline constexpr int kOpCopy2d = 3;
inline constexpr int kOpFillTail = 4;
inline constexpr int kOpCount = 5;

// Word indices. Per opcode:
//   FILL      dst, n = count, scalar = value
//   COPY      dst, src, n = count, stride = source offset
//   GATHER    dst, src, idx, n = count, m = source capacity, scalar = out-of-range value
//   COPY2D    dst, src, n = rows, m = source columns, stride = dst pitch (immediate), scalar = pad
//   FILLTAIL  dst, n = live, m = total, scalar = value
inline constexpr int kWordHeader = 0;
inline constexpr int kWordDst = 1;
inline constexpr int kWordSrc = 2;
inline constexpr int kWordIdx = 3;
inline constexpr int kWordN = 4;
inline constexpr int kWordM = 5;
inline constexpr int kWordStride = 6;
inline constexpr int kWordScalar = 7;

inline constexpr int kHeaderDstShift = 8;
inline constexpr int kHeaderSrcShift = 10;
inline constexpr int kHeaderIdxShift = 12;
inline constexpr int kHeaderMaskShift = 16;

struct RawRegisters {
  std::int64_t slot[kRegisterSlots];
};

struct RawDescriptor {
  std::int64_t word[kDescriptorWords];
};

// `reg_mask` bit k-1 set: word k names a register slot.
ESCPOD_HD std::int64_t make_header(int opcode, int dst_log2, int src_log2, int idx_log2,
                                   unsigned reg_mask) {
  return static_cast<std::int64_t>(
      static_cast<std::uint64_t>(opcode & 0xff) |
      (static_cast<std::uint64_t>(dst_log2 & 3) << kHeaderDstShift) |
      (static_cast<std::uint64_t>(src_log2 & 3) << kHeaderSrcShift) |
      (static_cast<std::uint64_t>(idx_log2 & 3) << kHeaderIdxShift) |
      (static_cast<std::uint64_t>(reg_mask & 0x7f) << kHeaderMaskShift));
}

ESCPOD_HD int header_opcode(std::int64_t h) { return static_cast<int>(h & 0xff); }
ESCPOD_HD int header_dst_log2(std::int64_t h) { return static_cast<int>((h >> kHeaderDstShift) & 3); }
ESCPOD_HD int header_src_log2(std::int64_t h) { return static_cast<int>((h >> kHeaderSrcShift) & 3); }
ESCPOD_HD int header_idx_log2(std::int64_t h) { return static_cast<int>((h >> kHeaderIdxShift) & 3); }
ESCPOD_HD unsigned header_mask(std::int64_t h) {
  return static_cast<unsigned>((h >> kHeaderMaskShift) & 0x7f);
}

// One operation with every word resolved through the register file.
struct ResolvedOp {
  int opcode;
  int dst_log2;
  int src_log2;
  int idx_log2;
  std::int64_t word[kDescriptorWords];  // word[0] is the header
};

// Slots were range-checked at record time; the mask keeps a corrupt slot inside the file anyway.
// `d` points at the kDescriptorWords words of one descriptor.
ESCPOD_HD void resolve(const std::int64_t* d, const RawRegisters& regs, ResolvedOp& out) {
  const std::int64_t h = d[kWordHeader];
  const unsigned mask = header_mask(h);
  out.opcode = header_opcode(h);
  out.dst_log2 = header_dst_log2(h);
  out.src_log2 = header_src_log2(h);
  out.idx_log2 = header_idx_log2(h);
  out.word[0] = h;
  for (int k = 1; k < kDescriptorWords; ++k) {
    const std::int64_t w = d[k];
    out.word[k] = ((mask >> (k - 1)) & 1u) ? regs.slot[w & (kRegisterSlots - 1)] : w;
  }
}

// Element range [begin, end) an operation writes, for a run that check_run admitted (so the
// products cannot overflow). Empty when end <= begin.
ESCPOD_HD void write_range(const ResolvedOp& op, std::int64_t& begin, std::int64_t& end) {
  begin = 0;
  switch (op.opcode) {
    case kOpCopy2d:
      end = op.word[kWordN] > 0 ? op.word[kWordN] * op.word[kWordStride] : 0;
      break;
    case kOpFillTail:
      begin = op.word[kWordN];
      end = op.word[kWordM];
      break;
    default:
      end = op.word[kWordN];
      break;
  }
}

}  // namespace escpod::gpu::detail
