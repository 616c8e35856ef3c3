// Damaged inputs made from real files: every one must give a clear error naming the file (or,
// where the damage is undetectable by design, still read without crashing). Run under ASan.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "escpod/pod5/file_reader.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::filesystem::path& p, const std::vector<char>& bytes, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(n));
}

// Opens the file and decodes every read's signal; returns the first error.
Status open_and_read_all(const std::filesystem::path& p) {
  ESCPOD_ASSIGN_OR_RETURN(auto file, FileReader::open(p));
  VbzCodec codec;
  for (size_t b = 0; b < file->n_read_batches(); ++b) {
    ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, file->read_batch(b));
    for (size_t i = 0; i < batch.size(); ++i) {
      ESCPOD_ASSIGN_OR_RETURN(uint64_t stored, file->count_samples(batch.rows_of(i)));
      std::vector<int16_t> s(stored);
      ESCPOD_RETURN_IF_ERROR(file->read_signal(batch.rows_of(i), s, codec));
    }
  }
  return Status::ok();
}

void expect_error_naming(const Status& s, const std::filesystem::path& p) {
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(p.filename().string()), std::string::npos) << s.message();
}

class Corruption : public ::testing::TestWithParam<std::string> {};

TEST_P(Corruption, TruncatedAtManyOffsets) {
  auto src = test::shared_data(GetParam());
  auto bytes = slurp(src);
  ASSERT_FALSE(bytes.empty());
  auto dst = test::scratch_dir("trunc") / "truncated.pod5";
  std::vector<size_t> cuts = {0, 1, 7, 8, 23, 24, 100, bytes.size() - 1, bytes.size() - 8,
                              bytes.size() - 32, bytes.size() - 33, bytes.size() - 200};
  for (size_t c = 997; c < bytes.size(); c += bytes.size() / 40) cuts.push_back(c);
  for (size_t cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    spit(dst, bytes, cut);
    Status s = open_and_read_all(dst);
    expect_error_naming(s, dst);
  }
}

// Flips bytes across the file. Everything must either read or fail with an error naming the
// file; nothing may crash (ASan checks out-of-bounds reads). Structural damage, the footer above
// all, must be detected; damage to sample values or to the redundant schema copy at the start of
// each Arrow file (Arrow reads the one in its footer) cannot be, by design.
TEST_P(Corruption, FlippedBytesNeverCrash) {
  auto src = test::shared_data(GetParam());
  auto bytes = slurp(src);
  ASSERT_GT(bytes.size(), 64u) << src;  // missing shared data: fail here, not index past the end
  auto dst = test::scratch_dir("flip") / "flipped.pod5";
  auto try_flip = [&](size_t pos, char mask) {
    auto copy = bytes;
    copy[pos] = static_cast<char>(copy[pos] ^ mask);
    spit(dst, copy, copy.size());
    Status s = open_and_read_all(dst);
    if (!s.is_ok()) {
      EXPECT_NE(s.message().find("flipped.pod5"), std::string::npos) << s.message();
    }
    return !s.is_ok();
  };
  // The footer flatbuffer (its length field is at end-32).
  int64_t footer_len = 0;
  std::memcpy(&footer_len, bytes.data() + bytes.size() - 32, 8);
  const size_t footer_start = bytes.size() - 32 - static_cast<size_t>(footer_len);
  size_t n_footer = 0, n_footer_errors = 0;
  for (size_t pos = footer_start; pos < bytes.size() - 24; pos += 3) {
    ++n_footer;
    n_footer_errors += try_flip(pos, char(0xff));
  }
  EXPECT_GT(n_footer_errors * 10, n_footer * 7) << n_footer_errors << " of " << n_footer;
  // The rest of the file: only "no crash, and errors name the file".
  for (size_t k = 0; k < 120; ++k) {
    const size_t pos = 8 + k * (footer_start - 8) / 120;
    for (char mask : {char(0x01), char(0xff)}) try_flip(pos, mask);
  }
}

INSTANTIATE_TEST_SUITE_P(RealFiles, Corruption,
                         ::testing::Values("pod5/multi_fast5_zip_v0.pod5",
                                           "pod5/multi_fast5_zip_v3.pod5",
                                           "escapepod/drna/yeast_trna_reads.pod5"));

TEST(Corruption, SpecificProblemsHaveSpecificMessages) {
  auto dir = test::scratch_dir("specific");
  auto bytes = slurp(test::shared_data("pod5/multi_fast5_zip_v3.pod5"));

  auto empty = dir / "empty.pod5";
  spit(empty, bytes, 0);
  EXPECT_NE(FileReader::open(empty).status().message().find("empty file"), std::string::npos);

  auto text = dir / "text.pod5";
  std::vector<char> hello = {'h', 'e', 'l', 'l', 'o', '\n'};
  spit(text, hello, hello.size());
  EXPECT_NE(FileReader::open(text).status().message().find("not a POD5 file"), std::string::npos);

  auto bad_sig = dir / "badsig.pod5";
  auto copy = bytes;
  copy[1] = 'X';
  spit(bad_sig, copy, copy.size());
  EXPECT_NE(FileReader::open(bad_sig).status().message().find("no POD5 signature"), std::string::npos);

  auto trunc = dir / "trunc.pod5";
  spit(trunc, bytes, bytes.size() / 2);
  auto s = FileReader::open(trunc).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  auto bad_len = dir / "badlen.pod5";
  copy = bytes;
  copy[bytes.size() - 32 + 6] = 0x7f;  // absurd footer length
  spit(bad_len, copy, copy.size());
  EXPECT_NE(FileReader::open(bad_len).status().message().find("bad footer length"), std::string::npos);

  auto missing = dir / "missing.pod5";
  EXPECT_EQ(FileReader::open(missing).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace escpod::pod5
