// libFuzzer target for the VBZ decoder. Input: 2 bytes sample count (LE), 1 byte prefix
// fraction, then the cell. Checks, beyond "no crash, no sanitizer report":
// - every svb16 decoder agrees with the scalar reference, on success and on failure, and so
//   does every encoder;
// - a prefix that decodes equals the start of the full decode;
// - the same bytes, read as samples, survive compress -> decompress.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "escpod/pod5/vbz.hpp"
#include "pod5/svb16.hpp"

namespace {

using escpod::pod5::VbzCodec;
namespace detail = escpod::pod5::detail;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const size_t n_samples = static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8;
  const size_t n_prefix = n_samples * data[2] / 255;
  // The cell runs to the end of libFuzzer's exactly-sized buffer, so ASan sees any overread.
  const std::span<const uint8_t> cell(data + 3, size - 3);

  static VbzCodec codec;  // reused like a worker's, so state left by failed calls is exercised
  std::vector<int16_t> full(n_samples);
  const bool full_ok = codec.decompress(cell, full).is_ok();
  std::vector<int16_t> prefix(n_prefix);
  if (codec.decompress_prefix(cell, n_samples, prefix).is_ok() && full_ok) {
    check(std::equal(prefix.begin(), prefix.end(), full.begin()));
  }

  std::vector<int16_t> reference(n_samples);
  const bool reference_ok = detail::svb16_decode_scalar(cell, reference);
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    std::vector<int16_t> out(n_samples);
    check(detail::svb16_decode_with(*kernels, cell, out) == reference_ok);
    if (reference_ok) check(out == reference);
  }

  std::vector<int16_t> samples(cell.size() / 2);
  if (!samples.empty()) std::memcpy(samples.data(), cell.data(), samples.size() * 2);
  std::vector<uint8_t> expected(escpod::pod5::svb16_max_size(samples.size()));
  const size_t expected_size = detail::svb16_scalar_kernels().encode(samples, expected.data());
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    std::vector<uint8_t> encoded(escpod::pod5::svb16_max_size(samples.size()));
    check(kernels->encode(samples, encoded.data()) == expected_size);
    check(std::equal(encoded.begin(), encoded.begin() + static_cast<long>(expected_size),
                     expected.begin()));
  }
  std::vector<uint8_t> frame;
  check(codec.compress(samples, frame).is_ok());
  std::vector<int16_t> round_trip(samples.size());
  check(codec.decompress(frame, round_trip).is_ok());
  check(round_trip == samples);
  return 0;
}
