// VBZ, the POD5 signal codec: int16 samples -> delta -> zigzag -> svb16 (16-bit StreamVByte,
// one key bit per sample) -> one zstd frame with its content size recorded.
// Spec: ../shared/docs/pod5-format.md section 7.
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

// One worker's codec: owns a zstd compression and decompression context and an svb16 scratch
// buffer, reused across calls so the hot path does not allocate after warm-up.
// Not thread-safe: use one instance per thread. Cheap to move.
class VbzCodec {
 public:
  VbzCodec();
  ~VbzCodec();
  VbzCodec(VbzCodec&&) noexcept;
  VbzCodec& operator=(VbzCodec&&) noexcept;

  // Compresses `samples` into `out` (resized to the compressed size) as one zstd frame at
  // `zstd_level` (the official writer uses 1) that records its content size.
  Status compress(std::span<const int16_t> samples, std::vector<uint8_t>& out, int zstd_level = 1);

  // Decodes a VBZ cell holding exactly out.size() samples into `out`. Errors (kCorrupt) when the
  // frame is not a single zstd frame with a content size, the svb16 stream is not exactly the
  // size the sample count implies, or bytes are left over. Never reads outside `compressed`.
  Status decompress(std::span<const uint8_t> compressed, std::span<int16_t> out);

  // Decodes only the first out.size() samples of a cell holding `n_samples` samples
  // (out.size() <= n_samples), decompressing no more of the zstd frame than those samples need.
  // Validation is limited to the bytes decoded.
  Status decompress_prefix(std::span<const uint8_t> compressed, size_t n_samples,
                           std::span<int16_t> out);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

namespace detail {
// The svb16 layer alone (no zstd), exposed for tests, benchmarks and fuzzing.
// encode: writes svb16 of delta-zigzag(samples) into out (capacity >= svb16_max_size) and returns
// the number of bytes written.
size_t svb16_encode(std::span<const int16_t> samples, uint8_t* out);
// decode: `in` must hold exactly the stream for out.size() samples (plus nothing); returns false
// if its size does not match. The SIMD path needs no slack beyond `in`: it handles the tail
// scalar. decode_scalar is the plain reference the SIMD paths are tested against.
bool svb16_decode(std::span<const uint8_t> in, std::span<int16_t> out);
bool svb16_decode_scalar(std::span<const uint8_t> in, std::span<int16_t> out);
// Which decoder svb16_decode dispatches to on this CPU: "avx2", "ssse3" or "scalar".
const char* svb16_decoder_name();
}  // namespace detail

}  // namespace escpod::pod5
