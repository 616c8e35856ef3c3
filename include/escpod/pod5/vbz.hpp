// VBZ, the POD5 signal codec: int16 samples -> delta -> zigzag -> svb16 (16-bit StreamVByte,
// one key bit per sample) -> one zstd frame with its content size recorded.
// Spec: docs/formats.md §1.4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pod5 {

// Largest svb16 stream for n samples: ceil(n/8) key bytes + 2n data bytes.
size_t svb16_max_size(size_t n_samples);

// Largest VBZ (zstd frame) size for n samples; size the output of VbzCodec::compress with it.
size_t vbz_max_compressed_size(size_t n_samples);

// One worker's codec: owns a zstd compression and decompression context (created at first use)
// and an svb16 scratch buffer grown to the largest chunk seen, all reused across calls, so the hot
// path does not allocate after warm-up. Not thread-safe: use one instance per thread. Cheap to
// move; a moved-from codec is still usable (it recreates its state). Failing calls leave the
// codec usable. Out of memory for a zstd context is reported as kInternal.
class VbzCodec {
 public:
  VbzCodec();
  ~VbzCodec();
  VbzCodec(VbzCodec&&) noexcept;
  VbzCodec& operator=(VbzCodec&&) noexcept;

  // Compresses `samples` into `out` (resized to the compressed size, at most
  // vbz_max_compressed_size(samples.size()); keep its capacity to avoid reallocating) as one zstd
  // frame at `zstd_level` (the official writer uses 1; zstd clamps out-of-range levels) that
  // records its content size and no checksum.
  Status compress(std::span<const int16_t> samples, std::vector<uint8_t>& out, int zstd_level = 1);

  // Decodes a VBZ cell holding exactly out.size() samples into `out`. Errors (kCorrupt, message
  // saying what was expected and found) when the cell is not exactly one zstd frame (bad magic,
  // skippable frame, truncated, trailing bytes), the frame records no content size or one that
  // out.size() samples cannot have, or the svb16 stream is not exactly the size its keys imply.
  // Never reads outside `compressed`; grows the scratch buffer to at most
  // svb16_max_size(out.size()) bytes whatever the frame claims.
  // `out` is unspecified after an error.
  Status decompress(std::span<const uint8_t> compressed, std::span<int16_t> out);

  // Decodes only the first out.size() samples of a cell holding `n_samples` samples, streaming
  // the zstd frame only as far as those samples need: all ceil(n_samples/8) key bytes (data
  // starts after them) plus the prefix's data bytes. zstd decodes whole blocks (up to 128 KiB of
  // svb16, about 115k samples of typical signal), so this saves zstd work only on larger cells;
  // it always saves the svb16 decode of the rest. Validation is limited to what is decompressed:
  // a frame damaged past that point still yields the prefix. out.size() == n_samples is a full
  // decompress(). Errors: kInvalidArgument when out.size() > n_samples; kCorrupt as above.
  Status decompress_prefix(std::span<const uint8_t> compressed, size_t n_samples,
                           std::span<int16_t> out);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

namespace detail {
// The svb16 layer alone (no zstd), exposed for tests, benchmarks and fuzzing.
// encode: writes svb16 of delta-zigzag(samples) into out (capacity >= svb16_max_size) and returns
// the number of bytes written. Bytes of `out` past that may be overwritten too. Uses the fastest
// encoder for this CPU; the bytes are identical to the scalar reference's.
size_t svb16_encode(std::span<const int16_t> samples, uint8_t* out);
// decode: `in` must hold exactly the stream for out.size() samples (plus nothing); returns false
// if its size does not match (`out` is then untouched). Key bits past the last sample are
// ignored. The SIMD path needs no slack beyond `in`: it handles the tail scalar.
// decode_scalar is the plain reference the SIMD paths are tested against. Thread-safe.
bool svb16_decode(std::span<const uint8_t> in, std::span<int16_t> out);
bool svb16_decode_scalar(std::span<const uint8_t> in, std::span<int16_t> out);
// Which decoder svb16_decode dispatches to on this CPU: "avx2", "ssse3" or "scalar" (chosen once,
// at first use, from the CPU's features).
const char* svb16_decoder_name();
}  // namespace detail

}  // namespace escpod::pod5
