// Internal svb16 pieces below the public detail:: functions of escpod/pod5/vbz.hpp: the key/data
// split, the size rule, and each instruction-set decoder, so vbz.cpp can report what size it
// expected and tests can hold every decoder this CPU runs against the scalar reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace escpod::pod5::detail {

// ceil(n / 8), written so that it cannot overflow for any n.
constexpr size_t svb16_key_bytes(size_t n_samples) {
  return n_samples / 8 + (n_samples % 8 != 0 ? 1 : 0);
}

// The svb16 kernels of one instruction set. All functions are pure and reentrant.
struct Svb16Kernels {
  const char* name;  // "scalar", "ssse3" or "avx2"
  // As detail::svb16_encode: `out` holds svb16_max_size(samples.size()) bytes; returns the
  // stream size. Writes only inside that capacity (the SIMD path's 16-byte stores included).
  size_t (*encode)(std::span<const int16_t> samples, uint8_t* out);
  // Data bytes the first n_samples samples occupy: n_samples + the number of set key bits among
  // them. `keys` holds at least svb16_key_bytes(n_samples) bytes. Key bits past n_samples in the
  // last key byte are ignored: the writer leaves them 0, and they carry no data either way.
  size_t (*data_bytes)(const uint8_t* keys, size_t n_samples);
  // Decodes n_samples samples into `out`. Precondition: `keys` holds svb16_key_bytes(n_samples)
  // bytes and data_size >= data_bytes(keys, n_samples). Reads nothing outside
  // [keys, keys + key bytes) and [data, data + data_size); needs no slack after either.
  void (*decode)(const uint8_t* keys, const uint8_t* data, size_t data_size, int16_t* out,
                 size_t n_samples);
};

// The plain reference, always available.
const Svb16Kernels& svb16_scalar_kernels();
// The fastest kernels this CPU runs, chosen once at first use (thread-safe).
const Svb16Kernels& svb16_best_kernels();
// Every kernel set this CPU runs, scalar first, fastest last.
std::span<const Svb16Kernels* const> svb16_available_kernels();

// Checks that `in` is exactly the stream of out.size() samples, then decodes it with `kernels`.
// Returns false, with `out` untouched, when the size does not match.
bool svb16_decode_with(const Svb16Kernels& kernels, std::span<const uint8_t> in,
                       std::span<int16_t> out);

}  // namespace escpod::pod5::detail
