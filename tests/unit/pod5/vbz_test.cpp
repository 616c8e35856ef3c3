#include "escpod/pod5/vbz.hpp"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.hpp"
#include "pod5/svb16.hpp"

namespace escpod::pod5 {
namespace {

using Bytes = std::vector<uint8_t>;
using Samples = std::vector<int16_t>;

// docs/formats.md §1.5.
const Samples kExampleSamples = {500, 502, 498, 498, 1000, 990, -20, -21, -21, 300};
const Bytes kExampleSvb16 = {0x51, 0x02, 0xE8, 0x03, 0x04, 0x07, 0x00, 0xEC,
                             0x03, 0x13, 0xE3, 0x07, 0x01, 0x00, 0x82, 0x02};
const Bytes kExampleFrame = {0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x10, 0x81, 0x00, 0x00,
                             0x51, 0x02, 0xE8, 0x03, 0x04, 0x07, 0x00, 0xEC, 0x03,
                             0x13, 0xE3, 0x07, 0x01, 0x00, 0x82, 0x02};
const Bytes kEmptyFrame = {0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x00, 0x01, 0x00, 0x00};

Bytes svb16_encode(const Samples& samples) {
  Bytes out(svb16_max_size(samples.size()));
  out.resize(detail::svb16_encode(samples, out.data()));
  return out;
}

// Nanopore-like: a random walk over levels in 400..900 with noise and occasional large jumps.
Samples signal_like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 12.0);
  std::uniform_int_distribution<int> level_dist(400, 900);
  std::uniform_int_distribution<int> dwell(3, 20);
  std::uniform_int_distribution<int> percent(0, 99);
  Samples out(n);
  double level = level_dist(rng);
  int left = dwell(rng);
  for (size_t i = 0; i < n; ++i) {
    if (--left <= 0) {
      level = percent(rng) < 5 ? level_dist(rng) : level + noise(rng) * 4;
      left = dwell(rng);
    }
    out[i] = static_cast<int16_t>(std::lround(level + noise(rng)));
  }
  return out;
}

Samples uniform_random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-32768, 32767);
  Samples out(n);
  for (auto& x : out) x = static_cast<int16_t>(dist(rng));
  return out;
}

// A mixture where each sample is small or wide at random, so every key byte value shows up.
Samples mixed_widths(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-100, 100);
  std::uniform_int_distribution<int> wide(-32768, 32767);
  std::bernoulli_distribution is_wide(0.5);
  Samples out(n);
  int16_t prev = 0;
  for (auto& x : out) {
    x = is_wide(rng) ? static_cast<int16_t>(wide(rng)) : static_cast<int16_t>(prev + small(rng));
    prev = x;
  }
  return out;
}

void expect_round_trip(VbzCodec& codec, const Samples& samples) {
  Bytes frame;
  ASSERT_TRUE(codec.compress(samples, frame).is_ok());
  ASSERT_LE(frame.size(), vbz_max_compressed_size(samples.size()));
  Samples decoded(samples.size());
  const Status status = codec.decompress(frame, decoded);
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  ASSERT_EQ(decoded, samples);

  const Bytes svb16 = svb16_encode(samples);
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    SCOPED_TRACE(kernels->name);
    Samples via(samples.size(), 0x5A5A);
    ASSERT_TRUE(detail::svb16_decode_with(*kernels, svb16, via));
    ASSERT_EQ(via, samples);
  }
}

TEST(Svb16, WorkedExampleBytes) {
  EXPECT_EQ(svb16_encode(kExampleSamples), kExampleSvb16);
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    SCOPED_TRACE(kernels->name);
    Bytes encoded(svb16_max_size(kExampleSamples.size()));
    encoded.resize(kernels->encode(kExampleSamples, encoded.data()));
    EXPECT_EQ(encoded, kExampleSvb16);
    Samples out(kExampleSamples.size());
    ASSERT_TRUE(detail::svb16_decode_with(*kernels, kExampleSvb16, out));
    EXPECT_EQ(out, kExampleSamples);
  }
}

TEST(Vbz, WorkedExampleFrameAtLevel1) {
  VbzCodec codec;
  Bytes frame;
  ASSERT_TRUE(codec.compress(kExampleSamples, frame, 1).is_ok());
  EXPECT_EQ(frame, kExampleFrame);
  Samples out(kExampleSamples.size());
  ASSERT_TRUE(codec.decompress(kExampleFrame, out).is_ok());
  EXPECT_EQ(out, kExampleSamples);
}

TEST(Vbz, EmptyChunk) {
  VbzCodec codec;
  Bytes frame;
  ASSERT_TRUE(codec.compress({}, frame).is_ok());
  EXPECT_EQ(frame, kEmptyFrame);
  Samples none;
  EXPECT_TRUE(codec.decompress(kEmptyFrame, none).is_ok());
  EXPECT_TRUE(codec.decompress_prefix(kEmptyFrame, 0, none).is_ok());
  EXPECT_TRUE(detail::svb16_decode(Bytes{}, none));
  EXPECT_FALSE(detail::svb16_decode(Bytes{0}, none));
  Samples one(1);
  EXPECT_EQ(codec.decompress(kEmptyFrame, one).code(), StatusCode::kCorrupt);
}

TEST(Svb16, MaxSizes) {
  EXPECT_EQ(svb16_max_size(0), 0u);
  EXPECT_EQ(svb16_max_size(1), 3u);
  EXPECT_EQ(svb16_max_size(8), 17u);
  EXPECT_EQ(svb16_max_size(9), 20u);
  EXPECT_EQ(vbz_max_compressed_size(102400), ZSTD_compressBound(12800 + 204800));
}

TEST(Svb16, DecoderDispatch) {
  const std::string name = detail::svb16_decoder_name();
  EXPECT_TRUE(name == "avx2" || name == "ssse3" || name == "scalar") << name;
  EXPECT_EQ(name, detail::svb16_available_kernels().back()->name);
  EXPECT_STREQ(detail::svb16_available_kernels().front()->name, "scalar");
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_EQ(name, "avx2");
  }
#endif
  std::printf("svb16 kernels on this CPU:");
  for (const auto* d : detail::svb16_available_kernels()) std::printf(" %s", d->name);
  std::printf("\n");
}

TEST(Vbz, RoundTripAllShortLengths) {
  VbzCodec codec;
  for (size_t n = 0; n <= 300; ++n) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
      expect_round_trip(codec, signal_like(n, seed));
      expect_round_trip(codec, uniform_random(n, seed));
      expect_round_trip(codec, mixed_widths(n, seed));
    }
  }
}

TEST(Vbz, RoundTripRandomLargeLengths) {
  VbzCodec codec;
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<size_t> length(1000, 250000);
  for (int trial = 0; trial < 40; ++trial) {
    size_t n = length(rng);
    if (n % 8 == 0) n += 1 + static_cast<size_t>(trial % 7);  // never a multiple of 8/16/32
    const auto seed = static_cast<uint32_t>(rng());
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    expect_round_trip(codec, signal_like(n, seed));
    expect_round_trip(codec, mixed_widths(n, seed));
  }
  for (size_t n : {102400u, 102401u, 102407u, 102415u, 102431u, 102433u}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    expect_round_trip(codec, signal_like(n, 7));
  }
}

TEST(Vbz, ExtremeValuesWrapAround) {
  VbzCodec codec;
  for (size_t n : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 1001u}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Samples alternating(n), lows(n, -32768), highs(n, 32767), saw(n);
    for (size_t i = 0; i < n; ++i) {
      alternating[i] = i % 2 ? int16_t{32767} : int16_t{-32768};
      saw[i] = static_cast<int16_t>(i % 3 == 0 ? -32768 : i % 3 == 1 ? 0 : 32767);
    }
    expect_round_trip(codec, alternating);
    expect_round_trip(codec, lows);
    expect_round_trip(codec, highs);
    expect_round_trip(codec, saw);
  }
  // Delta 32767 - (-32768) wraps to -1: zigzag 1, a single byte.
  EXPECT_EQ(svb16_encode(Samples{-32768, 32767}), (Bytes{0x01, 0xFF, 0xFF, 0x01}));
}

TEST(Svb16, SimdMatchesScalarOnRandomStreams) {
  // Arbitrary key and data bytes (not produced by our encoder): every well-sized stream must
  // decode identically on every path.
  std::mt19937 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = trial < 600 ? static_cast<size_t>(trial) : rng() % 20000;
    SCOPED_TRACE("trial=" + std::to_string(trial) + " n=" + std::to_string(n));
    const size_t n_keys = detail::svb16_key_bytes(n);
    const unsigned wide_percent = static_cast<unsigned>(rng() % 101);
    Bytes stream(n_keys);
    for (size_t i = 0; i < n; ++i) {
      if (rng() % 100 < wide_percent)
        stream[i / 8] = static_cast<uint8_t>(stream[i / 8] | (1u << (i % 8)));
    }
    if (n % 8 != 0 && trial % 2)
      stream[n / 8] = static_cast<uint8_t>(stream[n / 8] | 0x80);  // ignored
    const size_t n_data = detail::svb16_scalar_kernels().data_bytes(stream.data(), n);
    for (size_t i = 0; i < n_data; ++i) stream.push_back(static_cast<uint8_t>(rng()));
    stream.shrink_to_fit();  // so ASan sees any read past the end

    Samples expected(n);
    ASSERT_TRUE(detail::svb16_decode_scalar(stream, expected));
    for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
      SCOPED_TRACE(kernels->name);
      EXPECT_EQ(kernels->data_bytes(stream.data(), n), n_data);
      Samples out(n, 0x1234);
      ASSERT_TRUE(detail::svb16_decode_with(*kernels, stream, out));
      ASSERT_EQ(out, expected);
    }
  }
}

TEST(Svb16, SimdEncoderMatchesScalar) {
  // The encoder writes into a buffer of exactly svb16_max_size() bytes, so ASan catches a store
  // past it; the bytes after the stream are not compared (the encoder may leave spare bytes).
  for (uint32_t seed = 0; seed < 400; ++seed) {
    const size_t n = seed < 200 ? seed : 1000 + seed * 97;
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    const Samples samples = seed % 3 == 0   ? uniform_random(n, seed)
                            : seed % 3 == 1 ? mixed_widths(n, seed)
                                            : signal_like(n, seed);
    Bytes expected(svb16_max_size(n));
    expected.resize(detail::svb16_scalar_kernels().encode(samples, expected.data()));
    for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
      SCOPED_TRACE(kernels->name);
      auto out = std::make_unique<uint8_t[]>(svb16_max_size(n));
      const size_t size = kernels->encode(samples, out.get());
      ASSERT_EQ(Bytes(out.get(), out.get() + size), expected);
    }
  }
}

TEST(Svb16, RejectsWrongStreamSizes) {
  const Bytes svb16 = svb16_encode(mixed_widths(1001, 5));
  for (const detail::Svb16Kernels* kernels : detail::svb16_available_kernels()) {
    SCOPED_TRACE(kernels->name);
    Samples out(1001);
    EXPECT_TRUE(detail::svb16_decode_with(*kernels, svb16, out));
    Bytes longer = svb16;
    longer.push_back(0);
    EXPECT_FALSE(detail::svb16_decode_with(*kernels, longer, out));
    EXPECT_FALSE(
        detail::svb16_decode_with(*kernels, std::span(svb16).first(svb16.size() - 1), out));
    EXPECT_FALSE(detail::svb16_decode_with(*kernels, std::span(svb16).first(100), out));
    Samples fewer(1000), more(1002);
    EXPECT_FALSE(detail::svb16_decode_with(*kernels, svb16, fewer));
    EXPECT_FALSE(detail::svb16_decode_with(*kernels, svb16, more));
  }
}

TEST(Vbz, PrefixEqualsStartOfFullDecode) {
  VbzCodec codec;
  for (size_t n : {1u, 9u, 100u, 1000u, 102400u, 300001u}) {
    const Samples samples = n % 2 ? mixed_widths(n, 11) : signal_like(n, 11);
    Bytes frame;
    ASSERT_TRUE(codec.compress(samples, frame).is_ok());
    std::vector<size_t> prefixes = {0, 1, 7, 8, 9, 15, 16, 17, 33, n / 3, n / 2, n - 1, n};
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (int i = 0; i < 20; ++i) prefixes.push_back(rng() % (n + 1));
    for (size_t m : prefixes) {
      if (m > n) continue;
      SCOPED_TRACE("n=" + std::to_string(n) + " m=" + std::to_string(m));
      Samples out(m, 0x7777);
      const Status status = codec.decompress_prefix(frame, n, out);
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      ASSERT_TRUE(std::equal(out.begin(), out.end(), samples.begin()));
    }
  }
}

TEST(Vbz, PrefixOfTruncatedFrameStillDecodesWhatIsThere) {
  // Only the bytes a prefix needs are decompressed, so a prefix from the front of a damaged
  // frame still comes back, while the full decode reports the damage.
  VbzCodec codec;
  const Samples samples = signal_like(400000, 3);  // several zstd blocks
  Bytes frame;
  ASSERT_TRUE(codec.compress(samples, frame).is_ok());
  const Bytes truncated(frame.begin(), frame.begin() + static_cast<long>(frame.size() * 3 / 4));
  Samples full(samples.size());
  EXPECT_EQ(codec.decompress(truncated, full).code(), StatusCode::kCorrupt);
  Samples head(2000);
  ASSERT_TRUE(codec.decompress_prefix(truncated, samples.size(), head).is_ok());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), samples.begin()));
  Samples most(samples.size() - 1);
  EXPECT_EQ(codec.decompress_prefix(truncated, samples.size(), most).code(), StatusCode::kCorrupt);
}

TEST(Vbz, PrefixLongerThanCellIsInvalidArgument) {
  VbzCodec codec;
  Samples out(11);
  EXPECT_EQ(codec.decompress_prefix(kExampleFrame, 10, out).code(), StatusCode::kInvalidArgument);
}

// Frame without a content size: streaming compression without a pledged size.
Bytes frame_without_content_size(const Bytes& svb16) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  EXPECT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
  Bytes out(ZSTD_compressBound(svb16.size()) + 64);
  ZSTD_inBuffer input{svb16.data(), svb16.size(), 0};
  ZSTD_outBuffer output{out.data(), out.size(), 0};
  const size_t left = ZSTD_compressStream2(cctx, &output, &input, ZSTD_e_end);
  EXPECT_EQ(left, 0u);
  ZSTD_freeCCtx(cctx);
  out.resize(output.pos);
  return out;
}

void expect_corrupt(VbzCodec& codec, const Bytes& frame, size_t n,
                    const std::string& expect_in_message) {
  Samples out(n);
  const Status status = codec.decompress(frame, out);
  EXPECT_EQ(status.code(), StatusCode::kCorrupt) << status.to_string();
  EXPECT_NE(status.message().find(expect_in_message), std::string::npos) << status.message();
}

TEST(Vbz, CorruptInputs) {
  VbzCodec codec;
  const Samples samples = signal_like(5000, 17);
  Bytes frame;
  ASSERT_TRUE(codec.compress(samples, frame).is_ok());

  expect_corrupt(codec, {}, 10, "not a zstd frame");
  expect_corrupt(codec, Bytes(kExampleFrame.begin(), kExampleFrame.begin() + 3), 10,
                 "not a zstd frame");
  expect_corrupt(codec, Bytes(kExampleFrame.begin(), kExampleFrame.begin() + 5), 10,
                 "malformed or truncated");
  for (size_t keep : {9u, 10u, 24u}) {
    expect_corrupt(codec,
                   Bytes(kExampleFrame.begin(), kExampleFrame.begin() + static_cast<long>(keep)),
                   10, "truncated");
  }
  Bytes truncated(frame.begin(), frame.end() - 1);
  expect_corrupt(codec, truncated, samples.size(), "truncated");

  Bytes trailing = kExampleFrame;
  trailing.push_back(0);
  expect_corrupt(codec, trailing, 10, "trailing bytes");
  Bytes two_frames = kExampleFrame;
  two_frames.insert(two_frames.end(), kEmptyFrame.begin(), kEmptyFrame.end());
  expect_corrupt(codec, two_frames, 10, "trailing bytes");

  expect_corrupt(codec, frame_without_content_size(kExampleSvb16), 10, "content size");
  expect_corrupt(codec, frame_without_content_size(svb16_encode(samples)), samples.size(),
                 "content size");

  // Skippable frame (magic 0x184D2A50): zstd calls it 0 bytes of content.
  const Bytes skippable = {0x50, 0x2A, 0x4D, 0x18, 0x00, 0x00, 0x00, 0x00};
  expect_corrupt(codec, skippable, 0, "not a zstd frame");

  // Wrong sample counts: outside the content-size range, or inside it but not matching keys.
  expect_corrupt(codec, kExampleFrame, 20, "content size is 16");
  expect_corrupt(codec, kExampleFrame, 5, "content size is 16");
  expect_corrupt(codec, kExampleFrame, 9, "keys of its 9 samples call for");
  expect_corrupt(codec, kExampleFrame, 11, "keys of its 11 samples call for");
  expect_corrupt(codec, kExampleFrame, 0, "");

  // A raw block lets us change the svb16 keys without zstd noticing: set a key bit so the
  // stream is one byte short.
  Bytes bad_key = kExampleFrame;
  bad_key[9] = 0x53;
  expect_corrupt(codec, bad_key, 10, "call for 17");
  Samples out(10);
  EXPECT_TRUE(codec.decompress(kExampleFrame, out).is_ok()) << "codec usable after errors";
  EXPECT_EQ(out, kExampleSamples);
}

TEST(Vbz, FlippedBytesNeverCrash) {
  VbzCodec codec;
  const Samples samples = signal_like(3000, 23);
  Bytes frame;
  ASSERT_TRUE(codec.compress(samples, frame).is_ok());
  std::mt19937 rng(4242);
  size_t n_ok = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Bytes damaged = frame;
    const int flips = 1 + trial % 3;
    for (int f = 0; f < flips; ++f) {
      damaged[rng() % damaged.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    if (trial % 5 == 0) damaged.resize(rng() % (damaged.size() + 1));
    damaged.shrink_to_fit();
    SCOPED_TRACE("trial=" + std::to_string(trial));
    Samples out(samples.size());
    const Status status = codec.decompress(damaged, out);
    if (status.is_ok()) {
      ++n_ok;  // a flip inside a literal can still yield a well-formed stream
    } else {
      EXPECT_EQ(status.code(), StatusCode::kCorrupt) << status.to_string();
    }
    Samples head(1 + rng() % samples.size());
    const Status prefix_status = codec.decompress_prefix(damaged, samples.size(), head);
    if (!prefix_status.is_ok()) {
      EXPECT_EQ(prefix_status.code(), StatusCode::kCorrupt);
    }
  }
  RecordProperty("decoded_ok", static_cast<int>(n_ok));
  Samples out(samples.size());
  ASSERT_TRUE(codec.decompress(frame, out).is_ok());
  EXPECT_EQ(out, samples);
}

TEST(Vbz, HigherLevelsRoundTripAndMoveKeepsWorking) {
  VbzCodec codec;
  const Samples samples = signal_like(20000, 31);
  for (int level : {-5, 1, 3, 9, 19}) {
    SCOPED_TRACE("level=" + std::to_string(level));
    Bytes frame;
    ASSERT_TRUE(codec.compress(samples, frame, level).is_ok());
    Samples out(samples.size());
    ASSERT_TRUE(codec.decompress(frame, out).is_ok());
    EXPECT_EQ(out, samples);
  }
  VbzCodec moved = std::move(codec);
  Bytes frame;
  ASSERT_TRUE(moved.compress(samples, frame).is_ok());
  codec = VbzCodec();
  Samples out(samples.size());
  ASSERT_TRUE(codec.decompress(frame, out).is_ok());
  EXPECT_EQ(out, samples);
}

TEST(Vbz, NoHeapAllocationAfterWarmUp) {
  VbzCodec codec;
  const Samples samples = signal_like(102400, 41);
  Bytes frame;
  frame.reserve(vbz_max_compressed_size(samples.size()));
  Samples out(samples.size());
  Samples head(5000);
  ASSERT_TRUE(codec.compress(samples, frame).is_ok());
  ASSERT_TRUE(codec.decompress(frame, out).is_ok());
  ASSERT_TRUE(codec.decompress_prefix(frame, samples.size(), head).is_ok());

  const size_t before = escpod::test::allocation_count();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(codec.compress(samples, frame).is_ok());
    ASSERT_TRUE(codec.decompress(frame, out).is_ok());
    ASSERT_TRUE(codec.decompress_prefix(frame, samples.size(), head).is_ok());
  }
  EXPECT_EQ(escpod::test::allocation_count() - before, 0u);
  EXPECT_EQ(out, samples);
}

}  // namespace
}  // namespace escpod::pod5
