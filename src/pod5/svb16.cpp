// svb16: delta + zigzag + 16-bit StreamVByte with one key bit per sample (docs/formats.md §1.4).
// Scalar reference kernels, plus an SSSE3 encoder and SSSE3/AVX2 decoders picked at run time, so
// the library needs no -march flag. The SIMD decoders stop while fewer than 16 (or 32) data bytes
// remain and finish scalar: a cell's stream is a span with no slack, and a 16-byte load must not
// run past it. The SIMD encoder needs no slack either (see encode_ssse3).
#include "pod5/svb16.hpp"

#include <array>
#include <bit>
#include <cstring>

#include "escpod/pod5/vbz.hpp"

#if defined(__x86_64__) || defined(__i386__)
#define ESCPOD_SVB16_X86 1
#include <immintrin.h>
#else
#define ESCPOD_SVB16_X86 0
#endif

namespace escpod::pod5 {

size_t svb16_max_size(size_t n_samples) {
  return detail::svb16_key_bytes(n_samples) + 2 * n_samples;
}

namespace detail {
namespace {

inline uint16_t zigzag_encode(uint16_t delta) {
  return static_cast<uint16_t>((delta << 1) ^ (0u - (delta >> 15)));
}

inline uint16_t zigzag_decode(uint16_t z) {
  return static_cast<uint16_t>((z >> 1) ^ (0u - (z & 1u)));
}

// always_inline so that, inside a target("popcnt") caller, the builtin becomes one instruction
// rather than a libgcc call.
[[gnu::always_inline]] inline size_t count_data_bytes(const uint8_t* keys, size_t n_samples) {
  const size_t n_full = n_samples / 8;
  size_t set_bits = 0;
  size_t i = 0;
  for (; i + 8 <= n_full; i += 8) {
    uint64_t word;
    std::memcpy(&word, keys + i, sizeof(word));
    set_bits += static_cast<size_t>(__builtin_popcountll(word));
  }
  for (; i < n_full; ++i) set_bits += static_cast<size_t>(__builtin_popcount(keys[i]));
  if (n_samples % 8 != 0) {
    const unsigned used = (1u << (n_samples % 8)) - 1u;
    set_bits += static_cast<size_t>(__builtin_popcount(keys[n_full] & used));
  }
  return n_samples + set_bits;
}

// Decodes samples [first, n_samples), continuing from `data` and the previous sample `prev`.
[[gnu::always_inline]] inline void decode_scalar_range(const uint8_t* keys, const uint8_t* data,
                                                       int16_t* out, size_t first, size_t n_samples,
                                                       uint16_t prev) {
  for (size_t i = first; i < n_samples; ++i) {
    const unsigned is_wide = (keys[i / 8] >> (i % 8)) & 1u;
    unsigned z = data[0];
    if (is_wide) z |= static_cast<unsigned>(data[1]) << 8;
    data += 1 + is_wide;
    prev = static_cast<uint16_t>(prev + zigzag_decode(static_cast<uint16_t>(z)));
    out[i] = static_cast<int16_t>(prev);
  }
}

// Encodes samples [first, size) into keys from byte first / 8 on and data from `data` on,
// continuing from the previous sample `prev`; `first` is a multiple of 8. Returns the data end.
[[gnu::always_inline]] inline uint8_t* encode_scalar_range(std::span<const int16_t> samples,
                                                           size_t first, uint8_t* keys,
                                                           uint8_t* data, uint16_t prev) {
  const size_t n = samples.size();
  for (; first < n; first += 8) {
    const size_t block_end = first + 8 < n ? first + 8 : n;
    unsigned key = 0;
    for (size_t i = first; i < block_end; ++i) {
      const auto x = static_cast<uint16_t>(samples[i]);
      const uint16_t z = zigzag_encode(static_cast<uint16_t>(x - prev));
      prev = x;
      const unsigned is_wide = z > 0xFF ? 1u : 0u;
      // Both bytes are always stored and the cursor moves by 1 or 2: sample i starts at most at
      // 2i past the keys, so the spare byte stays inside the svb16_max_size() buffer.
      data[0] = static_cast<uint8_t>(z);
      data[1] = static_cast<uint8_t>(z >> 8);
      data += 1 + is_wide;
      key |= is_wide << (i - first);
    }
    keys[first / 8] = static_cast<uint8_t>(key);
  }
  return data;
}

size_t encode_scalar(std::span<const int16_t> samples, uint8_t* out) {
  const uint8_t* end =
      encode_scalar_range(samples, 0, out, out + svb16_key_bytes(samples.size()), 0);
  return static_cast<size_t>(end - out);
}

size_t data_bytes_scalar(const uint8_t* keys, size_t n_samples) {
  return count_data_bytes(keys, n_samples);
}

void decode_scalar(const uint8_t* keys, const uint8_t* data, size_t /*data_size*/, int16_t* out,
                   size_t n_samples) {
  decode_scalar_range(keys, data, out, 0, n_samples, 0);
}

constexpr Svb16Kernels kScalarKernels{"scalar", encode_scalar, data_bytes_scalar, decode_scalar};

#if ESCPOD_SVB16_X86

// For key byte k, the pshufb mask that spreads the 8 + popcount(k) data bytes of one block into
// eight little-endian uint16 lanes (0x80 zeroes the high byte of a one-byte value), and that
// byte count.
struct alignas(16) ShuffleMask {
  uint8_t bytes[16];
};

constexpr std::array<ShuffleMask, 256> make_shuffle_masks() {
  std::array<ShuffleMask, 256> masks{};
  for (unsigned key = 0; key < 256; ++key) {
    uint8_t offset = 0;
    for (unsigned lane = 0; lane < 8; ++lane) {
      masks[key].bytes[2 * lane] = offset++;
      masks[key].bytes[2 * lane + 1] = ((key >> lane) & 1u) ? offset++ : uint8_t{0x80};
    }
  }
  return masks;
}

// The inverse for the encoder: packs eight uint16 lanes into the block's 8 + popcount(k) bytes,
// keeping the high byte only of lanes whose key bit is set.
constexpr std::array<ShuffleMask, 256> make_pack_masks() {
  std::array<ShuffleMask, 256> masks{};
  for (unsigned key = 0; key < 256; ++key) {
    unsigned out = 0;
    for (unsigned lane = 0; lane < 8; ++lane) {
      masks[key].bytes[out++] = static_cast<uint8_t>(2 * lane);
      if ((key >> lane) & 1u) masks[key].bytes[out++] = static_cast<uint8_t>(2 * lane + 1);
    }
    while (out < 16) masks[key].bytes[out++] = 0x80;
  }
  return masks;
}

constexpr std::array<uint8_t, 256> make_block_bytes() {
  std::array<uint8_t, 256> bytes{};
  for (unsigned key = 0; key < 256; ++key)
    bytes[key] = static_cast<uint8_t>(8 + std::popcount(key));
  return bytes;
}

constexpr std::array<ShuffleMask, 256> kShuffleMasks = make_shuffle_masks();
constexpr std::array<ShuffleMask, 256> kPackMasks = make_pack_masks();
constexpr std::array<uint8_t, 256> kBlockBytes = make_block_bytes();

#define ESCPOD_TARGET_SSSE3 __attribute__((target("ssse3,popcnt")))
#define ESCPOD_TARGET_AVX2 __attribute__((target("avx2,popcnt")))

ESCPOD_TARGET_SSSE3 size_t data_bytes_popcnt(const uint8_t* keys, size_t n_samples) {
  return count_data_bytes(keys, n_samples);
}

[[gnu::always_inline]] ESCPOD_TARGET_SSSE3 inline __m128i load_mask(uint8_t key) {
  return _mm_load_si128(reinterpret_cast<const __m128i*>(kShuffleMasks[key].bytes));
}

// (z >> 1) ^ -(z & 1) per uint16 lane; the shift pair turns the low bit into an all-ones mask.
[[gnu::always_inline]] ESCPOD_TARGET_SSSE3 inline __m128i zigzag_decode_128(__m128i z) {
  return _mm_xor_si128(_mm_srli_epi16(z, 1), _mm_srai_epi16(_mm_slli_epi16(z, 15), 15));
}

// Decodes one block of 8 samples. `prev` holds the last decoded sample in every lane; it is
// advanced by the block's delta total computed off the stored values, so the loop-carried chain
// is one add per block rather than add + broadcast.
[[gnu::always_inline]] ESCPOD_TARGET_SSSE3 inline const uint8_t* decode_block_ssse3(
    uint8_t key, const uint8_t* data, int16_t* out, __m128i& prev) {
  const __m128i last_lane = _mm_set1_epi16(0x0F0E);
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data));
  __m128i d = zigzag_decode_128(_mm_shuffle_epi8(raw, load_mask(key)));
  d = _mm_add_epi16(d, _mm_slli_si128(d, 2));
  d = _mm_add_epi16(d, _mm_slli_si128(d, 4));
  d = _mm_add_epi16(d, _mm_slli_si128(d, 8));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_add_epi16(d, prev));
  prev = _mm_add_epi16(prev, _mm_shuffle_epi8(d, last_lane));
  return data + kBlockBytes[key];
}

ESCPOD_TARGET_SSSE3 void decode_ssse3(const uint8_t* keys, const uint8_t* data, size_t data_size,
                                      int16_t* out, size_t n_samples) {
  const uint8_t* const end = data + data_size;
  const size_t n_blocks = n_samples / 8;
  __m128i prev = _mm_setzero_si128();
  size_t block = 0;
  for (; block < n_blocks && end - data >= 16; ++block) {
    data = decode_block_ssse3(keys[block], data, out + 8 * block, prev);
  }
  const auto last = static_cast<uint16_t>(_mm_cvtsi128_si32(prev));
  decode_scalar_range(keys, data, out, 8 * block, n_samples, last);
}

// Eight samples per step: delta against the lanes shifted by one (alignr brings in the previous
// block's last sample), zigzag, key from the lanes whose high byte is non-zero, one pshufb to
// pack. The 16-byte store of block b ends at most 16(b + 1) bytes past the keys, inside the
// svb16_max_size() buffer for every full block; the partial last block is encoded scalar.
ESCPOD_TARGET_SSSE3 size_t encode_ssse3(std::span<const int16_t> samples, uint8_t* out) {
  const size_t n_blocks = samples.size() / 8;
  uint8_t* keys = out;
  uint8_t* data = out + svb16_key_bytes(samples.size());
  const __m128i zero = _mm_setzero_si128();
  __m128i prev = zero;
  for (size_t block = 0; block < n_blocks; ++block) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(samples.data() + 8 * block));
    const __m128i d = _mm_sub_epi16(x, _mm_alignr_epi8(x, prev, 14));
    prev = x;
    const __m128i z = _mm_xor_si128(_mm_slli_epi16(d, 1), _mm_srai_epi16(d, 15));
    const __m128i is_narrow = _mm_cmpeq_epi16(_mm_srli_epi16(z, 8), zero);
    const auto key =
        static_cast<uint8_t>(~_mm_movemask_epi8(_mm_packs_epi16(is_narrow, is_narrow)));
    const __m128i mask = _mm_load_si128(reinterpret_cast<const __m128i*>(kPackMasks[key].bytes));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(data), _mm_shuffle_epi8(z, mask));
    keys[block] = key;
    data += kBlockBytes[key];
  }
  const auto last = static_cast<uint16_t>(n_blocks > 0 ? samples[8 * n_blocks - 1] : 0);
  data = encode_scalar_range(samples, 8 * n_blocks, keys, data, last);
  return static_cast<size_t>(data - out);
}

constexpr Svb16Kernels kSsse3Kernels{"ssse3", encode_ssse3, data_bytes_popcnt, decode_ssse3};

// Two blocks (16 samples) per step: one pshufb, zigzag and in-lane prefix sum over both, then the
// low block's total is carried into the high lane.
ESCPOD_TARGET_AVX2 void decode_avx2(const uint8_t* keys, const uint8_t* data, size_t data_size,
                                    int16_t* out, size_t n_samples) {
  const uint8_t* const end = data + data_size;
  const size_t n_blocks = n_samples / 8;
  const __m256i last_lane = _mm256_set1_epi16(0x0F0E);
  __m256i prev = _mm256_setzero_si256();
  size_t block = 0;
  // The high block starts at most 16 bytes in and loads 16: 32 bytes bound both loads.
  for (; block + 2 <= n_blocks && end - data >= 32; block += 2) {
    const uint8_t key_lo = keys[block];
    const uint8_t key_hi = keys[block + 1];
    const uint8_t* data_hi = data + kBlockBytes[key_lo];
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(data_hi)), 1);
    const __m256i mask =
        _mm256_inserti128_si256(_mm256_castsi128_si256(load_mask(key_lo)), load_mask(key_hi), 1);
    const __m256i z = _mm256_shuffle_epi8(raw, mask);
    __m256i d =
        _mm256_xor_si256(_mm256_srli_epi16(z, 1), _mm256_srai_epi16(_mm256_slli_epi16(z, 15), 15));
    d = _mm256_add_epi16(d, _mm256_slli_si256(d, 2));
    d = _mm256_add_epi16(d, _mm256_slli_si256(d, 4));
    d = _mm256_add_epi16(d, _mm256_slli_si256(d, 8));
    const __m256i lane_totals = _mm256_shuffle_epi8(d, last_lane);
    // [0 | low total]: the high block continues from the low one.
    d = _mm256_add_epi16(d, _mm256_permute2x128_si256(lane_totals, lane_totals, 0x08));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * block), _mm256_add_epi16(d, prev));
    const __m256i totals = _mm256_shuffle_epi8(d, last_lane);
    prev = _mm256_add_epi16(prev, _mm256_permute2x128_si256(totals, totals, 0x11));
    data = data_hi + kBlockBytes[key_hi];
  }
  __m128i prev_128 = _mm256_castsi256_si128(prev);
  // The tail runs SSSE3 and scalar code, which pays for dirty upper halves on every instruction
  // (GCC 12 does not clear them here on its own).
  _mm256_zeroupper();
  for (; block < n_blocks && end - data >= 16; ++block) {
    data = decode_block_ssse3(keys[block], data, out + 8 * block, prev_128);
  }
  const auto last = static_cast<uint16_t>(_mm_cvtsi128_si32(prev_128));
  decode_scalar_range(keys, data, out, 8 * block, n_samples, last);
}

// AVX2 brings nothing to the encoder (its pack is one pshufb per block either way).
constexpr Svb16Kernels kAvx2Kernels{"avx2", encode_ssse3, data_bytes_popcnt, decode_avx2};

#endif  // ESCPOD_SVB16_X86

struct KernelSet {
  std::array<const Svb16Kernels*, 3> kernels{};
  size_t count = 0;
};

KernelSet detect_kernels() {
  KernelSet set;
  set.kernels[set.count++] = &kScalarKernels;
#if ESCPOD_SVB16_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("ssse3") && __builtin_cpu_supports("popcnt")) {
    set.kernels[set.count++] = &kSsse3Kernels;
    if (__builtin_cpu_supports("avx2")) set.kernels[set.count++] = &kAvx2Kernels;
  }
#endif
  return set;
}

const KernelSet& kernel_set() {
  static const KernelSet set = detect_kernels();
  return set;
}

}  // namespace

const Svb16Kernels& svb16_scalar_kernels() { return kScalarKernels; }

const Svb16Kernels& svb16_best_kernels() {
  const KernelSet& set = kernel_set();
  return *set.kernels[set.count - 1];
}

std::span<const Svb16Kernels* const> svb16_available_kernels() {
  const KernelSet& set = kernel_set();
  return {set.kernels.data(), set.count};
}

bool svb16_decode_with(const Svb16Kernels& kernels, std::span<const uint8_t> in,
                       std::span<int16_t> out) {
  const size_t n_keys = svb16_key_bytes(out.size());
  if (in.size() < n_keys) return false;
  const size_t n_data = kernels.data_bytes(in.data(), out.size());
  if (in.size() - n_keys != n_data) return false;
  kernels.decode(in.data(), in.data() + n_keys, n_data, out.data(), out.size());
  return true;
}

size_t svb16_encode(std::span<const int16_t> samples, uint8_t* out) {
  return svb16_best_kernels().encode(samples, out);
}

bool svb16_decode(std::span<const uint8_t> in, std::span<int16_t> out) {
  return svb16_decode_with(svb16_best_kernels(), in, out);
}

bool svb16_decode_scalar(std::span<const uint8_t> in, std::span<int16_t> out) {
  return svb16_decode_with(kScalarKernels, in, out);
}

const char* svb16_decoder_name() { return svb16_best_kernels().name; }

}  // namespace detail
}  // namespace escpod::pod5
