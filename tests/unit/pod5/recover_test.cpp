// Recovery scanner (pod5/recover.hpp) on files of our writer cut at thousands of offsets: never
// crashes (ASan), recovers a growing prefix of the reads as the cut moves on, and what it
// recovers is exactly what was written.
#include "escpod/pod5/recover.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "escpod/pod5/file_writer.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Written {
  std::vector<ReadId> ids;
  std::vector<uint64_t> hashes;  // signal_hash of each read's samples
};

Written write_file(const std::filesystem::path& path, bool vbz) {
  WriterOptions opts;
  opts.vbz = vbz;
  opts.max_chunk_samples = 400;
  opts.signal_batch_rows = 3;
  opts.read_batch_rows = 4;
  auto writer = FileWriter::create(path, opts);
  EXPECT_TRUE(writer.is_ok()) << writer.status().message();
  RunInfo ri;
  ri.acquisition_id = "acq";
  ri.sample_rate = 4000;
  ri.adc_max = 2047;
  ri.adc_min = -2048;
  EXPECT_TRUE((*writer)->add_run_info(ri).is_ok());
  std::mt19937 rng(7);
  Written w;
  for (int k = 0; k < 30; ++k) {
    ReadRecord r;
    r.read_id = ReadId::random();
    r.read_number = static_cast<uint32_t>(k);
    r.channel = static_cast<uint32_t>(1 + k);
    r.well = 1;
    r.pore_type = "pore_" + std::to_string(k / 9);  // dictionary deltas in later batches
    r.calibration_scale = 0.2f;
    r.run_info = "acq";
    std::vector<int16_t> s(k == 5 ? 0 : 1 + rng() % 1200);
    for (auto& x : s) x = static_cast<int16_t>(static_cast<int>(rng() % 2001) - 1000);
    EXPECT_TRUE((*writer)->add_read(r, s).is_ok());
    w.ids.push_back(r.read_id);
    w.hashes.push_back(signal_hash(s));
  }
  EXPECT_TRUE((*writer)->close().is_ok());
  return w;
}

// The complete reads open_damaged finds, in file order, with their samples' hashes.
Written recover_complete(const std::filesystem::path& path, Status* status) {
  Written got;
  auto damaged = open_damaged(path);
  *status = damaged.status();
  if (!damaged.is_ok()) return got;
  const FileReader& file = *damaged->reader;
  VbzCodec codec;
  std::vector<int16_t> scratch, samples;
  for (size_t b = 0; b < file.n_read_batches(); ++b) {
    auto batch = file.read_batch(b);
    EXPECT_TRUE(batch.is_ok());
    if (!batch.is_ok()) continue;
    for (size_t i = 0; i < batch->size(); ++i) {
      if (check_read_signal(file, *batch, i, codec, scratch) != ReadSignalState::kComplete) continue;
      samples.resize(batch->num_samples[i]);
      EXPECT_TRUE(file.read_signal(batch->rows_of(i), samples, codec).is_ok());
      got.ids.push_back(batch->read_id[i]);
      got.hashes.push_back(signal_hash(samples));
    }
  }
  return got;
}

class Recover : public ::testing::TestWithParam<bool> {};

TEST_P(Recover, CutAnywhereRecoversAGrowingPrefixOfExactReads) {
  const auto dir = test::scratch_dir(GetParam() ? "vbz" : "raw");
  const Written all = write_file(dir / "full.pod5", GetParam());
  const auto bytes = slurp(dir / "full.pod5");
  ASSERT_GT(bytes.size(), 2000u);
  // The cuts live in memory (a memfd reached by path): thousands of them cost no disk writes.
  const int fd = memfd_create("cut.pod5", 0);
  ASSERT_GE(fd, 0);
  const std::filesystem::path cut_path = "/proc/self/fd/" + std::to_string(fd);
  auto spit_cut = [&](size_t n) {
    ASSERT_EQ(ftruncate(fd, 0), 0);
    ASSERT_EQ(pwrite(fd, bytes.data(), n, 0), static_cast<ssize_t>(n));
  };
  size_t last = 0, n_cuts = 0;
  // Every 13th byte (and every 2nd of the last 600, where the reads table and footer lie).
  for (size_t cut = 0; cut <= bytes.size(); cut += cut + 600 >= bytes.size() ? 2 : 13) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    spit_cut(cut);
    Status s;
    const Written got = recover_complete(cut_path, &s);
    if (!s.is_ok()) {
      // Only a file cut before its signal table's schema is beyond recovery.
      EXPECT_LT(cut, 1024u) << s.message();
      EXPECT_NE(s.message().find(cut_path.string()), std::string::npos) << s.message();
      continue;
    }
    ++n_cuts;
    ASSERT_LE(got.ids.size(), all.ids.size());
    for (size_t k = 0; k < got.ids.size(); ++k) {
      ASSERT_EQ(got.ids[k], all.ids[k]) << "read " << k;
      ASSERT_EQ(got.hashes[k], all.hashes[k]) << "read " << k;
    }
    EXPECT_GE(got.ids.size(), last);
    last = got.ids.size();
  }
  EXPECT_GT(n_cuts, 400u);
  EXPECT_EQ(last, all.ids.size());  // the whole file (it opens normally too)
  // Without its footer, every read is still there.
  spit_cut(bytes.size() - 40);
  Status s;
  EXPECT_EQ(recover_complete(cut_path, &s).ids.size(), all.ids.size());
  EXPECT_TRUE(s.is_ok()) << s.message();
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Compression, Recover, ::testing::Values(true, false));

TEST(RecoverScan, NotAPod5IsCorruptNamingTheFile) {
  const auto dir = test::scratch_dir("junk");
  std::ofstream(dir / "junk.pod5") << "definitely not a pod5 file";
  auto r = open_damaged(dir / "junk.pod5");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("junk.pod5"), std::string::npos);
  EXPECT_EQ(open_damaged(dir / "missing.pod5").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace escpod::pod5
