// The CUDA interpreter's per-block and per-thread work, written as plain host/device functions
// so that the same code runs in the kernel (tape_kernel in device_tape.cu) and, on the CPU, in a
// grid emulation the tests compare with the host interpreter (every block, every thread, in
// turn). One stage is one launch; operation k of the stage owns blocks
// [block_prefix[k], block_prefix[k+1]) and its threads grid-stride over the operation's range.
#pragma once

#include "gpu/tape_format.hpp"

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

namespace escpod::gpu::detail {

inline constexpr int kThreadsPerBlock = 256;
// Bytes one block is given per operation when sizing the grid, and the cap on blocks per
// operation (beyond it the blocks loop). 16 KiB per block: a 4 MiB signal window gets 256 blocks.
inline constexpr std::int64_t kBytesPerBlock = 16384;
inline constexpr std::int64_t kMaxBlocksPerOp = 1024;

// Blocks for an operation writing at most `max_elements` elements of `width_bytes` each.
inline std::int64_t blocks_for_op(std::int64_t max_elements, int width_bytes) {
  const std::int64_t bytes = max_elements * width_bytes;
  std::int64_t blocks = (bytes + kBytesPerBlock - 1) / kBytesPerBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocksPerOp) blocks = kMaxBlocksPerOp;
  return blocks;
}

// What one block does: its operation, resolved, and its place among the operation's blocks.
struct BlockWork {
  ResolvedOp op;
  std::int64_t block_in_op;
  std::int64_t blocks_in_op;
};

// The operation owning `block`: the largest k with prefix[k] <= block (prefix[0] = 0, strictly
// increasing, prefix[n_ops] = grid size).
ESCPOD_HD int find_op(const std::int32_t* prefix, int n_ops, std::int64_t block) {
  int lo = 0;
  int hi = n_ops - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

ESCPOD_HD void decode_block(const RawDescriptor* ops, const std::int32_t* prefix, int n_ops,
                            const RawRegisters& regs, std::int64_t block, BlockWork& out) {
  const int k = find_op(prefix, n_ops, block);
  resolve(ops[k].word, regs, out.op);
  out.block_in_op = block - prefix[k];
  out.blocks_in_op = prefix[k + 1] - prefix[k];
}

// Element access at byte address `base` + i * sizeof(T). The device uses plain typed accesses;
// the host emulation goes through memcpy so that it is valid C++ whatever the buffer holds.
template <typename T>
ESCPOD_HD T load_elem(std::int64_t base, std::int64_t i) {
#if defined(__CUDA_ARCH__)
  return reinterpret_cast<const T*>(base)[i];
#else
  T v;
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(base) + i * static_cast<std::int64_t>(sizeof(T)),
              sizeof(T));
  return v;
#endif
}

template <typename T>
ESCPOD_HD void store_elem(std::int64_t base, std::int64_t i, T v) {
#if defined(__CUDA_ARCH__)
  reinterpret_cast<T*>(base)[i] = v;
#else
  std::memcpy(reinterpret_cast<unsigned char*>(base) + i * static_cast<std::int64_t>(sizeof(T)), &v,
              sizeof(T));
#endif
}

struct alignas(16) Vec16 {
  std::uint64_t lo;
  std::uint64_t hi;
};

// One aligned 16-byte store.
ESCPOD_HD void store_vec16(std::int64_t address, Vec16 v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Vec16*>(address) = v;
#else
  std::memcpy(reinterpret_cast<void*>(address), &v, sizeof v);
#endif
}

// `value`'s low sizeof(T) bytes repeated over 8 bytes.
template <typename T>
ESCPOD_HD std::uint64_t replicate(std::uint64_t value) {
  if (sizeof(T) == 8) return value;
  const std::uint64_t v = value & ((std::uint64_t{1} << (8 * (sizeof(T) % 8))) - 1);
  if (sizeof(T) == 4) return v | (v << 32);
  if (sizeof(T) == 2) return v * 0x0001000100010001ull;
  return v * 0x0101010101010101ull;
}

// dst[i] = value for begin <= i < end, by global thread `g` of `n_global` for this operation:
// scalar stores up to the first 16-byte boundary and after the last, 16-byte stores between.
// Addresses are aligned to sizeof(T) (checked at record time), so the head is whole elements.
template <typename T>
ESCPOD_HD void fill_range(std::int64_t dst, std::int64_t begin, std::int64_t end,
                          std::uint64_t value, std::int64_t g, std::int64_t n_global) {
  if (end <= begin) return;
  constexpr std::int64_t w = static_cast<std::int64_t>(sizeof(T));
  const T v = static_cast<T>(value);
  const std::int64_t first_byte = dst + begin * w;
  std::int64_t head = ((16 - (first_byte & 15)) & 15) / w;
  if (head > end - begin) head = end - begin;
  const std::int64_t n_vec = ((end - begin - head) * w) / 16;
  const std::int64_t tail_begin = begin + head + n_vec * (16 / w);
  for (std::int64_t k = g; k < head; k += n_global) store_elem<T>(dst, begin + k, v);
  for (std::int64_t k = g; k < end - tail_begin; k += n_global) store_elem<T>(dst, tail_begin + k, v);
  const std::uint64_t pattern = replicate<T>(value);
  const Vec16 vec{pattern, pattern};
  const std::int64_t vec_base = first_byte + head * w;
  for (std::int64_t k = g; k < n_vec; k += n_global) store_vec16(vec_base + k * 16, vec);
}

ESCPOD_HD std::int64_t load_index(std::int64_t base, std::int64_t i, int log2) {
  switch (log2) {
    case 0: return load_elem<std::int8_t>(base, i);
    case 1: return load_elem<std::int16_t>(base, i);
    case 2: return load_elem<std::int32_t>(base, i);
    default: return load_elem<std::int64_t>(base, i);
  }
}

template <typename T>
ESCPOD_HD void run_op_thread(const ResolvedOp& op, std::int64_t g, std::int64_t n_global) {
  const std::int64_t dst = op.word[kWordDst];
  const std::int64_t src = op.word[kWordSrc];
  const std::int64_t n = op.word[kWordN];
  const std::uint64_t value = static_cast<std::uint64_t>(op.word[kWordScalar]);
  switch (op.opcode) {
    case kOpFill:
      fill_range<T>(dst, 0, n, value, g, n_global);
      break;
    case kOpFillTail:
      fill_range<T>(dst, n, op.word[kWordM], value, g, n_global);
      break;
    case kOpCopy: {
      const std::int64_t offset = op.word[kWordStride];
      for (std::int64_t i = g; i < n; i += n_global) {
        store_elem<T>(dst, i, load_elem<T>(src, offset + i));
      }
      break;
    }
    case kOpGather: {
      const std::int64_t idx = op.word[kWordIdx];
      const std::int64_t src_capacity = op.word[kWordM];
      const T oob = static_cast<T>(value);
      for (std::int64_t i = g; i < n; i += n_global) {
        const std::int64_t j = load_index(idx, i, op.idx_log2);
        store_elem<T>(dst, i, (j >= 0 && j < src_capacity) ? load_elem<T>(src, j) : oob);
      }
      break;
    }
    case kOpCopy2d: {
      const std::int64_t pitch = op.word[kWordStride];
      const std::int64_t cols = op.word[kWordM];
      const std::int64_t total = n > 0 ? n * pitch : 0;
      const T pad = static_cast<T>(value);
      for (std::int64_t e = g; e < total; e += n_global) {
        const std::int64_t r = e / pitch;
        const std::int64_t c = e - r * pitch;
        store_elem<T>(dst, e, c < cols ? load_elem<T>(src, r * cols + c) : pad);
      }
      break;
    }
    default:
      break;
  }
}

// Thread `tid` of `n_threads` in the block described by `work`.
ESCPOD_HD void run_block_thread(const BlockWork& work, std::int64_t tid, std::int64_t n_threads) {
  const std::int64_t g = work.block_in_op * n_threads + tid;
  const std::int64_t n_global = work.blocks_in_op * n_threads;
  switch (work.op.dst_log2) {
    case 0: run_op_thread<std::uint8_t>(work.op, g, n_global); break;
    case 1: run_op_thread<std::uint16_t>(work.op, g, n_global); break;
    case 2: run_op_thread<std::uint32_t>(work.op, g, n_global); break;
    default: run_op_thread<std::uint64_t>(work.op, g, n_global); break;
  }
}

}  // namespace escpod::gpu::detail
