// Reading the real POD5 files of every table version in the shared data.
#include "escpod/pod5/file_reader.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "escpod/signal/calibration.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

// The four official test files hold the same 10 reads, written by successive library versions.
class OfficialTestFiles : public ::testing::TestWithParam<int> {};

TEST_P(OfficialTestFiles, SameReadsInEveryVersion) {
  const int version = GetParam();
  auto path = test::shared_data("pod5/multi_fast5_zip_v" + std::to_string(version) + ".pod5");
  auto opened = FileReader::open(path);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const FileReader& file = **opened;
  const FileInfo& info = file.info();
  EXPECT_EQ(static_cast<int>(info.read_table_version), version);
  EXPECT_EQ(info.software, "Python API");
  EXPECT_EQ(info.n_reads, 10u);
  EXPECT_TRUE(info.is_vbz);
  auto signal = file.signal_table_info();
  ASSERT_TRUE(signal.is_ok()) << signal.status().to_string();
  EXPECT_EQ(signal->n_rows, 22u);
  EXPECT_EQ(signal->n_samples, 1548931u);
  EXPECT_EQ(signal->n_batches, 1u);
  EXPECT_TRUE(signal->uniform);

  ASSERT_EQ(file.run_infos().size(), 1u);
  const RunInfo& ri = file.run_infos()[0];
  EXPECT_EQ(ri.acquisition_id, "a08e850aaa44c8b56765eee10b386fc3e516a62b");
  EXPECT_EQ(ri.adc_min, -4096);
  EXPECT_EQ(ri.adc_max, 4095);
  EXPECT_EQ(ri.sample_rate, 4000);
  EXPECT_EQ(ri.protocol_run_id, "df049455-3552-438c-8176-d4a5b1dd9fc5");
  EXPECT_EQ(ri.software, "python-pod5-converter");
  ASSERT_EQ(ri.tracking_id.size(), 28u);
  EXPECT_EQ(ri.tracking_id[0], (std::pair<std::string, std::string>{"asic_id", "131070"}));
  EXPECT_EQ(ri.tracking_id[2], (std::pair<std::string, std::string>{"asic_temp", "35.043102"}));
  EXPECT_EQ(ri.context_tags.size(), 7u);
  EXPECT_EQ(ri.acquisition_start_time_ms, 1557745903000);  // 2019-05-13T11:11:43Z

  ASSERT_EQ(file.n_read_batches(), 1u);
  auto batch = file.read_batch(0);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  ASSERT_EQ(batch->size(), 10u);
  ReadRecord first = file.record(*batch, 0);
  EXPECT_EQ(first.read_id.to_string(), "0000173c-bf67-44e7-9a9c-1ad0bc728e74");
  EXPECT_EQ(first.read_number, 1093u);
  EXPECT_EQ(first.channel, 109u);
  EXPECT_EQ(first.well, 4u);
  EXPECT_EQ(first.calibration_offset, 21.0f);
  EXPECT_FLOAT_EQ(first.calibration_scale, 0.17550019919872284f);
  EXPECT_EQ(first.num_samples, 123627u);
  EXPECT_FLOAT_EQ(first.median_before, 183.1077423095703f);
  EXPECT_EQ(first.end_reason, "unknown");
  EXPECT_EQ(first.pore_type, "not_set");
  EXPECT_EQ(first.run_info, ri.acquisition_id);
  EXPECT_TRUE(std::isnan(first.open_pore_level));

  // Read 006d1319 has chunks 3..6: 3 x 102400 + 30676 samples.
  ReadRecord third = file.record(*batch, 2);
  EXPECT_EQ(third.read_id.to_string(), "006d1319-2877-4b34-85df-34de7250a47b");
  EXPECT_EQ(third.signal_rows, (std::vector<uint64_t>{3, 4, 5, 6}));
  EXPECT_EQ(third.num_samples, 337876u);

  VbzCodec codec;
  std::vector<int16_t> samples(first.num_samples);
  ASSERT_TRUE(file.read_signal(first.signal_rows, samples, codec).is_ok());
  EXPECT_EQ(samples[0], 371);
  EXPECT_EQ(samples[1], 370);
  EXPECT_EQ(samples[2], 373);
  const float pa = signal::adc_to_pa(samples[0], {first.calibration_offset, first.calibration_scale});
  EXPECT_NEAR(pa, 68.796f, 1e-3f);

  // A prefix decodes to the same first samples.
  std::vector<int16_t> prefix(1000);
  ASSERT_TRUE(file.read_signal(first.signal_rows, prefix, codec).is_ok());
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), samples.begin()));

  // Read 002fde30 reaches exactly the ADC range.
  ReadRecord second = file.record(*batch, 1);
  std::vector<int16_t> s2(second.num_samples);
  ASSERT_TRUE(file.read_signal(second.signal_rows, s2, codec).is_ok());
  EXPECT_EQ(*std::min_element(s2.begin(), s2.end()), -4096);
  EXPECT_EQ(*std::max_element(s2.begin(), s2.end()), 4095);
}

INSTANTIATE_TEST_SUITE_P(V0toV3, OfficialTestFiles, ::testing::Values(0, 1, 2, 3));

TEST(FileReader, AllVersionsDecodeToIdenticalSignal) {
  VbzCodec codec;
  std::vector<uint64_t> hashes;
  for (int v = 0; v < 4; ++v) {
    auto file = FileReader::open(test::shared_data("pod5/multi_fast5_zip_v" + std::to_string(v) + ".pod5"));
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    auto batch = (*file)->read_batch(0);
    ASSERT_TRUE(batch.is_ok());
    uint64_t combined = 0;
    for (size_t i = 0; i < batch->size(); ++i) {
      std::vector<int16_t> s(batch->num_samples[i]);
      ASSERT_TRUE((*file)->read_signal(batch->rows_of(i), s, codec).is_ok());
      combined = combined * 31 + signal_hash(s);
    }
    hashes.push_back(combined);
  }
  for (int v = 1; v < 4; ++v) EXPECT_EQ(hashes[v], hashes[0]) << "version " << v;
}

TEST(FileReader, FindReadByIdWithOrWithoutDashes) {
  auto file = FileReader::open(test::shared_data("pod5/multi_fast5_zip_v3.pod5"));
  ASSERT_TRUE(file.is_ok());
  auto id = ReadId::parse("006D13192877-4b34-85df-34de7250a47b");
  ASSERT_TRUE(id.is_ok());
  auto rec = (*file)->find_read(*id);
  ASSERT_TRUE(rec.is_ok()) << rec.status().to_string();
  EXPECT_EQ(rec->num_samples, 337876u);
  auto missing = (*file)->find_read(*ReadId::parse("00000000-0000-0000-0000-000000000001"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(FileReader, RealRna004Files) {
  auto file = FileReader::open(test::shared_data("escapepod/drna/yeast_trna_reads.pod5"));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->info().n_reads, 180u);
  EXPECT_EQ((*file)->info().read_table_version, ReadTableVersion::kV4);
  EXPECT_EQ((*file)->signal_table_info()->n_batches, 2u);
  // Every read decodes and its samples match num_samples; run in parallel batches.
  std::atomic<uint64_t> n{0};
  Status s = (*file)->for_each_batch(2, [&](const ReadBatch& b) -> Status {
    VbzCodec codec;
    for (size_t i = 0; i < b.size(); ++i) {
      std::vector<int16_t> samples(b.num_samples[i]);
      ESCPOD_RETURN_IF_ERROR((*file)->read_signal(b.rows_of(i), samples, codec));
      if (samples.size() < 6471 || samples.size() > 30462) return Status::internal("odd length");
      ++n;
    }
    return Status::ok();
  });
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(n.load(), 180u);
}

// The footer's table spans: each names an Arrow IPC file ("ARROW1" at both ends) inside the
// .pod5, in the order the format stores them (signal, run info, reads); a V0 file has no run-info
// table.
TEST(FileReader, TableSpansNameTheEmbeddedArrowFiles) {
  const auto path = test::shared_data("escapepod/drna/yeast_trna_reads.pod5");
  auto file = FileReader::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const FileInfo& info = (*file)->info();
  std::ifstream in(path, std::ios::binary);
  auto bytes_at = [&](int64_t offset, size_t n) {
    std::string s(n, '\0');
    in.seekg(offset);
    in.read(s.data(), static_cast<std::streamsize>(n));
    return s;
  };
  for (const FileInfo::TableSpan* t : {&info.signal_table, &info.run_info_table, &info.reads_table}) {
    ASSERT_GT(t->offset, 0);
    ASSERT_GT(t->length, 12);
    ASSERT_LE(static_cast<uint64_t>(t->offset + t->length), info.file_size);
    EXPECT_EQ(bytes_at(t->offset, 6), "ARROW1");
    EXPECT_EQ(bytes_at(t->offset + t->length - 6, 6), "ARROW1");
  }
  EXPECT_LT(info.signal_table.offset, info.run_info_table.offset);
  EXPECT_LT(info.run_info_table.offset, info.reads_table.offset);
  auto v0 = FileReader::open(test::shared_data("pod5/multi_fast5_zip_v0.pod5"));
  ASSERT_TRUE(v0.is_ok());
  EXPECT_EQ((*v0)->info().run_info_table.offset, -1);
  EXPECT_GT((*v0)->info().reads_table.offset, 0);
}

TEST(ReadId, ParseAndFormat) {
  auto id = ReadId::parse("{0000173C-BF67-44E7-9A9C-1AD0BC728E74}");
  ASSERT_TRUE(id.is_ok());
  EXPECT_EQ(id->to_string(), "0000173c-bf67-44e7-9a9c-1ad0bc728e74");
  EXPECT_EQ(id->bytes[2], 0x17);
  EXPECT_FALSE(ReadId::parse("0000173c-bf67-44e7-9a9c-1ad0bc728e7").is_ok());
  EXPECT_FALSE(ReadId::parse("0000173c-bf67-44e7-9a9c-1ad0bc728e74a").is_ok());
  EXPECT_FALSE(ReadId::parse("g000173c-bf67-44e7-9a9c-1ad0bc728e74").is_ok());
  ReadId r = ReadId::random();
  EXPECT_EQ(r.bytes[6] >> 4, 4);
  EXPECT_EQ(r.bytes[8] >> 6, 2);
  EXPECT_EQ(ReadId::parse(r.to_string())->bytes, r.bytes);
}

TEST(SignalHash, MatchesDefinition) {
  std::vector<int16_t> s = {0, -1, 5};
  const uint64_t p = 0x100000001b3ull;
  const uint64_t expected = 1 + 65536ull * p + 6ull * p * p;
  EXPECT_EQ(signal_hash(s), expected);
  EXPECT_EQ(signal_hash({}), 0u);
}

}  // namespace
}  // namespace escpod::pod5
