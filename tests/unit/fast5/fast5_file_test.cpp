// FAST5 reading: fields of the official test files (values from shared/data/pod5/README.md),
// signal decoding, time parsing and damaged stored signal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "escpod/fast5/fast5_file.hpp"
#include "test_data.hpp"

namespace escpod::fast5 {
namespace {

TEST(Iso8601, ParsesTheFormsFast5Uses) {
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T11:11:43Z"), 1557745903000);
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T11:11:43"), 1557745903000);  // naive: UTC
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T13:11:43+02:00"), 1557745903000);
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T10:11:43-0100"), 1557745903000);
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T11:11:43.250Z"), 1557745903250);
  EXPECT_EQ(parse_iso8601_ms("1970-01-01"), 0);
  EXPECT_EQ(parse_iso8601_ms("2000-02-29"), 951782400000);
  EXPECT_EQ(parse_iso8601_ms(""), 0);
  EXPECT_EQ(parse_iso8601_ms("yesterday"), 0);
  EXPECT_EQ(parse_iso8601_ms("2019-13-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_iso8601_ms("2019-05-13T11:11:43Zjunk"), 0);
}

TEST(Fast5File, MultiReadFieldsMatchTheOfficialTestFile) {
  auto f = Fast5File::open(test::shared_data("pod5/fast5/multi_fast5_zip.fast5"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  Fast5File& file = *f.value();
  EXPECT_TRUE(file.is_multi_read());
  ASSERT_EQ(file.n_reads(), 10u);
  Fast5Read read;
  ASSERT_TRUE(file.read(0, read).is_ok());
  const pod5::ReadRecord& r = read.record;
  EXPECT_EQ(r.read_id.to_string(), "0000173c-bf67-44e7-9a9c-1ad0bc728e74");
  EXPECT_EQ(r.read_number, 1093u);
  EXPECT_EQ(r.start_sample, 4534321u);
  EXPECT_EQ(r.channel, 109u);
  EXPECT_EQ(r.well, 4);
  EXPECT_FLOAT_EQ(r.median_before, 183.1077423095703f);
  EXPECT_EQ(r.calibration_offset, 21.0f);
  EXPECT_EQ(r.calibration_scale, static_cast<float>(1437.6976318359375 / 8192));
  EXPECT_EQ(r.end_reason, "unknown");
  EXPECT_FALSE(r.end_reason_forced);
  EXPECT_EQ(r.pore_type, "not_set");
  EXPECT_TRUE(std::isnan(r.tracked_scaling_scale));
  EXPECT_EQ(r.num_minknow_events, 0u);
  ASSERT_TRUE(read.run_info);
  const pod5::RunInfo& ri = *read.run_info;
  EXPECT_EQ(ri.acquisition_id, "a08e850aaa44c8b56765eee10b386fc3e516a62b");
  EXPECT_EQ(ri.acquisition_start_time_ms, 1557745903000);
  EXPECT_EQ(ri.adc_min, -4096);
  EXPECT_EQ(ri.adc_max, 4095);
  EXPECT_EQ(ri.sample_rate, 4000);
  EXPECT_EQ(ri.protocol_name, "c449127e3461a521e0865fe6a88716f6f6b0b30c");
  EXPECT_EQ(ri.sequencer_position, "MS00000");
  EXPECT_EQ(ri.sequencer_position_type, "minion");
  EXPECT_EQ(ri.sequencing_kit, "sqk-lsk108");
  EXPECT_EQ(ri.software, "python-pod5-converter");
  EXPECT_EQ(ri.context_tags.size(), 7u);
  ASSERT_EQ(ri.tracking_id.size(), 28u);
  EXPECT_EQ(ri.tracking_id.front().first, "asic_id");
  EXPECT_EQ(ri.tracking_id.back().second, "3.4.0-rc3");
  EXPECT_EQ(read.signal.coding, SignalCoding::kDeflate);

  std::vector<int16_t> samples;
  ASSERT_TRUE(decode_signal(read.signal, samples, "read 0").is_ok());
  ASSERT_EQ(samples.size(), 123627u);
  EXPECT_EQ(std::vector<int16_t>(samples.begin(), samples.begin() + 5),
            (std::vector<int16_t>{371, 370, 373, 333, 370}));
  EXPECT_EQ(std::accumulate(samples.begin(), samples.end(), int64_t{0}), 41634316);

  // Read 7 has NaN median_before in the official files.
  ASSERT_TRUE(file.read(7, read).is_ok());
  EXPECT_EQ(read.record.read_id.to_string(), "00919556-e519-4960-8aa5-c2dfa020980c");
  EXPECT_TRUE(std::isnan(read.record.median_before));
}

TEST(Fast5File, SingleReadLayout) {
  auto f = Fast5File::open(test::shared_data("pod5/fast5/fe85b517-62ee-4a33-8767-41cab5d5ab39.fast5"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_FALSE(f.value()->is_multi_read());
  ASSERT_EQ(f.value()->n_reads(), 1u);
  Fast5Read read;
  ASSERT_TRUE(f.value()->read(0, read).is_ok());
  EXPECT_EQ(read.record.read_id.to_string(), "fe85b517-62ee-4a33-8767-41cab5d5ab39");
  EXPECT_EQ(read.record.read_number, 4295u);
  EXPECT_EQ(read.record.channel, 28u);
  EXPECT_EQ(read.record.end_reason, "signal_positive");
  EXPECT_EQ(read.run_info->flow_cell_id, "FAL62557");
  EXPECT_EQ(read.run_info->sequencer_position_type, "gridion");
  std::vector<int16_t> samples;
  ASSERT_TRUE(decode_signal(read.signal, samples, "single").is_ok());
  EXPECT_EQ(samples.size(), 20u);
}

TEST(Fast5File, DamagedStoredSignalIsAnErrorNamingTheRead) {
  auto f = Fast5File::open(test::shared_data("pod5/fast5/multi_fast5_zip.fast5"));
  ASSERT_TRUE(f.is_ok());
  Fast5Read read;
  ASSERT_TRUE(f.value()->read(1, read).is_ok());
  std::vector<int16_t> samples;
  StoredSignal cut = read.signal;
  cut.bytes.resize(cut.bytes.size() / 2);
  Status s = decode_signal(cut, samples, "x.fast5: read 002fde30");
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("x.fast5: read 002fde30"), std::string::npos) << s.message();
  StoredSignal vbz = read.signal;
  vbz.coding = SignalCoding::kVbz;
  vbz.filter_params = {0, 2, 1, 1};
  EXPECT_EQ(decode_signal(vbz, samples, "v").code(), StatusCode::kCorrupt);
  StoredSignal tiny = read.signal;
  tiny.coding = SignalCoding::kRaw;
  tiny.bytes.resize(3);
  EXPECT_EQ(decode_signal(tiny, samples, "r").code(), StatusCode::kCorrupt);
}

TEST(Fast5File, NotHdf5) {
  const auto dir = test::scratch_dir("nothdf5");
  const auto p = dir / "x.fast5";
  { std::FILE* f = std::fopen(p.c_str(), "wb"); std::fputs("plain text", f); std::fclose(f); }
  auto f = Fast5File::open(p);
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(f.status().message().find("x.fast5"), std::string::npos);
}

}  // namespace
}  // namespace escpod::fast5
