// The decode step every demux path shares (pipeline/demux/read_featurize.hpp): the samples it
// gives, and the reasons a read's row then carries in every table (the fused run's, the stages').
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "escpod/pod5/file_reader.hpp"
#include "escpod/signal/calibration.hpp"
#include "pipeline/demux/read_featurize.hpp"
#include "test_data.hpp"

namespace escpod::pipeline {
namespace {

struct FirstBatch {
  std::unique_ptr<pod5::FileReader> file;
  pod5::ReadBatch batch;
};

FirstBatch first_batch() {
  auto file = pod5::FileReader::open(test::shared_data("escapepod/drna/yeast_trna_reads.pod5"));
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  auto batch = (*file)->read_batch(0);
  EXPECT_TRUE(batch.is_ok()) << batch.status().to_string();
  return {std::move(*file), std::move(*batch)};
}

// Row 0 decoded whole and calibrated without the step under test.
std::vector<float> whole_read_pa(const FirstBatch& f) {
  std::vector<int16_t> adc(f.batch.num_samples[0]);
  pod5::VbzCodec codec;
  EXPECT_TRUE(f.file->read_signal(f.batch.rows_of(0), adc, codec).is_ok());
  std::vector<float> pa(adc.size());
  signal::calibrate_to_pa(adc, {f.batch.calibration_offset[0], f.batch.calibration_scale[0]}, pa);
  return pa;
}

TEST(DecodeReadPrefix, GivesTheReadsFirstSamplesInPicoamps) {
  const FirstBatch f = first_batch();
  const std::vector<float> whole = whole_read_pa(f);
  ASSERT_GT(whole.size(), 100u);
  detail::DecodeScratch scratch;
  std::vector<float> pa;
  std::string reason = "untouched";
  ASSERT_TRUE(detail::decode_read_prefix(*f.file, f.batch, 0, 100, scratch, pa, reason));
  EXPECT_EQ(reason, "untouched");
  EXPECT_EQ(pa, std::vector<float>(whole.begin(), whole.begin() + 100));
  // A limit past the read's length gives the whole read.
  ASSERT_TRUE(detail::decode_read_prefix(*f.file, f.batch, 0, std::numeric_limits<size_t>::max(), scratch,
                                         pa, reason));
  EXPECT_EQ(pa, whole);
  // Once warm, the same read again reuses the buffers.
  const float* pa_data = pa.data();
  const int16_t* adc_data = scratch.adc.data();
  ASSERT_TRUE(detail::decode_read_prefix(*f.file, f.batch, 0, whole.size(), scratch, pa, reason));
  EXPECT_EQ(pa.data(), pa_data);
  EXPECT_EQ(scratch.adc.data(), adc_data);
}

TEST(DecodeReadPrefix, AReadWithoutSamplesOrSignalRowsHasNoSignal) {
  const FirstBatch f = first_batch();
  detail::DecodeScratch scratch;
  std::vector<float> pa;
  std::string reason;
  pod5::ReadBatch no_samples = f.batch;
  no_samples.num_samples[0] = 0;
  EXPECT_FALSE(detail::decode_read_prefix(*f.file, no_samples, 0, 100, scratch, pa, reason));
  EXPECT_EQ(reason, "read has no signal");
  pod5::ReadBatch no_rows = f.batch;
  no_rows.signal_offsets[1] = no_rows.signal_offsets[0];
  reason.clear();
  EXPECT_FALSE(detail::decode_read_prefix(*f.file, no_rows, 0, 100, scratch, pa, reason));
  EXPECT_EQ(reason, "read has no signal");
}

TEST(DecodeReadPrefix, ASignalThatCannotBeDecodedSaysWhy) {
  const FirstBatch f = first_batch();
  pod5::ReadBatch bad_row = f.batch;
  bad_row.signal_rows[bad_row.signal_offsets[0]] = uint64_t{1} << 40;  // past the signal table
  detail::DecodeScratch scratch;
  std::vector<float> pa;
  std::string reason;
  EXPECT_FALSE(detail::decode_read_prefix(*f.file, bad_row, 0, 100, scratch, pa, reason));
  EXPECT_EQ(reason.rfind("signal could not be decoded: ", 0), 0u) << reason;
  EXPECT_NE(reason.find("out of range"), std::string::npos) << reason;
}

}  // namespace
}  // namespace escpod::pipeline
