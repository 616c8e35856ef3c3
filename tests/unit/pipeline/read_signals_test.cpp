// Decoding a list of reads: all at once and as a chunk stream, against a plain read-by-read
// decode; the stream's order, chunk bounds, memory bound, errors and early stop.
#include "escpod/pipeline/ops/read_signals.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "escpod/pod5/file_reader.hpp"
#include "test_data.hpp"

namespace escpod::pipeline {
namespace {

// Every read of two real files (different layouts and read lengths) as one list; with bad_at, a
// read whose signal row is past its file's end is put at that position.
ReadSignalList all_reads(size_t bad_at = SIZE_MAX) {
  std::vector<std::shared_ptr<const pod5::FileReader>> files;
  for (const char* rel : {"escapepod/drna/yeast_trna_reads.pod5", "pod5/multi_fast5_zip_v3.pod5"}) {
    auto r = pod5::FileReader::open(test::shared_data(rel));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    files.push_back(std::move(r).value());
  }
  ReadSignalList list(files);
  for (uint32_t f = 0; f < files.size(); ++f) {
    for (size_t b = 0; b < files[f]->n_read_batches(); ++b) {
      auto batch = files[f]->read_batch(b);
      EXPECT_TRUE(batch.is_ok());
      for (size_t r = 0; r < batch->size(); ++r) {
        if (list.size() == bad_at) {
          const uint64_t bad_row = uint64_t{1} << 30;
          list.add(0, std::span(&bad_row, 1), 100, {});
        }
        list.add_row(f, *batch, r);
      }
    }
  }
  return list;
}

// The plain version: each read on its own, one after the other, picoamps by the formula.
std::vector<float> plain_picoamps(const std::vector<std::shared_ptr<const pod5::FileReader>>& files) {
  std::vector<float> out;
  pod5::VbzCodec codec;
  for (const auto& f : files) {
    for (size_t b = 0; b < f->n_read_batches(); ++b) {
      auto batch = f->read_batch(b);
      EXPECT_TRUE(batch.is_ok());
      for (size_t r = 0; r < batch->size(); ++r) {
        std::vector<int16_t> adc(batch->num_samples[r]);
        EXPECT_TRUE(f->read_signal(batch->rows_of(r), adc, codec).is_ok());
        for (int16_t a : adc) {
          out.push_back((static_cast<float>(a) + batch->calibration_offset[r]) * batch->calibration_scale[r]);
        }
      }
    }
  }
  return out;
}

template <typename T>
std::vector<T> decode_all(const ReadSignalList& list, SampleKind kind, int threads) {
  std::vector<T> out(list.sample_offsets().back());
  Status s = decode_reads(list, 0, list.size(), kind, out.data(), Executor::for_threads(threads));
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// The chunks of a stream, back to back, after checking they cover the list in order.
template <typename T>
std::vector<T> stream_all(std::shared_ptr<const ReadSignalList> list, SampleKind kind, int threads,
                          uint64_t chunk_samples) {
  SignalChunkStream stream(list, kind, threads, chunk_samples);
  std::vector<T> out;
  size_t next_read = 0;
  const auto& off = list->sample_offsets();
  for (;;) {
    auto c = stream.next();
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok() || !c->has_value()) break;
    const SignalChunk& chunk = **c;
    EXPECT_EQ(chunk.first_read, next_read);
    EXPECT_GT(chunk.end_read, chunk.first_read);
    // At most chunk_samples unless the chunk is one outsized read.
    const uint64_t n = off[chunk.end_read] - off[chunk.first_read];
    EXPECT_TRUE(n <= chunk_samples || chunk.end_read == chunk.first_read + 1) << n;
    const T* data = reinterpret_cast<const T*>(chunk.buffer.data());
    out.insert(out.end(), data, data + n);
    next_read = chunk.end_read;
  }
  EXPECT_EQ(next_read, list->size());
  auto after = stream.next();  // the end stays the end
  EXPECT_TRUE(after.is_ok() && !after->has_value());
  return out;
}

TEST(ReadSignals, DecodeAllAndEveryChunkingEqualThePlainDecode) {
  auto list = std::make_shared<const ReadSignalList>(all_reads());
  ASSERT_GE(list->size(), 190u);
  const std::vector<float> truth = plain_picoamps(list->files());
  ASSERT_EQ(truth.size(), list->sample_offsets().back());
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    const auto pa = decode_all<float>(*list, SampleKind::kPicoamps, threads);
    ASSERT_EQ(0, std::memcmp(pa.data(), truth.data(), truth.size() * sizeof(float)));
    const auto adc = decode_all<int16_t>(*list, SampleKind::kAdc, threads);
    for (uint64_t chunk : {uint64_t{1}, uint64_t{7'000}, uint64_t{50'000}, uint64_t{1} << 20, uint64_t{1} << 40}) {
      SCOPED_TRACE(chunk);
      const auto streamed_pa = stream_all<float>(list, SampleKind::kPicoamps, threads, chunk);
      ASSERT_EQ(streamed_pa.size(), truth.size());
      EXPECT_EQ(0, std::memcmp(streamed_pa.data(), truth.data(), truth.size() * sizeof(float)));
      EXPECT_EQ(stream_all<int16_t>(list, SampleKind::kAdc, threads, chunk), adc);
    }
  }
}

// A consumer that drops each chunk before the next reuses a few buffers for the whole list
// (the consumer's, one finished, one being decoded), whatever its length.
TEST(ReadSignals, ChunkStreamRecyclesAFewBuffers) {
  auto list = std::make_shared<const ReadSignalList>(all_reads());
  uint64_t longest = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    longest = std::max(longest, list->sample_offsets()[i + 1] - list->sample_offsets()[i]);
  }
  SignalChunkStream stream(list, SampleKind::kPicoamps, 2, longest);  // every chunk fits a buffer
  std::set<const std::byte*> buffers;
  size_t n_chunks = 0;
  for (;;) {
    auto c = stream.next();
    ASSERT_TRUE(c.is_ok());
    if (!c->has_value()) break;
    buffers.insert((**c).buffer.data());
    ++n_chunks;
  }
  EXPECT_GE(n_chunks, 6u);
  EXPECT_LE(buffers.size(), 3u);
}

// A read that cannot be decoded: the chunks before it come out, then its error, every time.
TEST(ReadSignals, ChunkStreamGivesTheChunksBeforeAFailingReadThenItsError) {
  auto list = std::make_shared<const ReadSignalList>(all_reads(/*bad_at=*/30));
  SignalChunkStream stream(list, SampleKind::kAdc, 2, 1);  // chunks of one read
  size_t delivered = 0;
  Status error;
  for (;;) {
    auto c = stream.next();
    if (!c.is_ok()) {
      error = c.status();
      break;
    }
    ASSERT_TRUE(c->has_value()) << "the stream ended without the error";
    delivered += (**c).end_read - (**c).first_read;
  }
  EXPECT_EQ(delivered, 30u);
  EXPECT_NE(error.message().find("yeast_trna_reads.pod5"), std::string::npos) << error.to_string();
  EXPECT_FALSE(stream.next().is_ok());
  std::vector<int16_t> out(list->sample_offsets().back());
  const Status all = decode_reads(*list, 0, list->size(), SampleKind::kAdc, out.data(), Executor::for_threads(2));
  EXPECT_EQ(all.message(), error.message());
}

// Dropping a stream mid-way (chunks decoded ahead, the producer waiting) returns at once.
TEST(ReadSignals, ChunkStreamDroppedMidwayStops) {
  auto list = std::make_shared<const ReadSignalList>(all_reads());
  for (int taken : {0, 1, 5}) {
    SignalChunkStream stream(list, SampleKind::kPicoamps, 2, 10'000);
    for (int k = 0; k < taken; ++k) ASSERT_TRUE(stream.next().is_ok());
  }
  SignalChunkStream empty(std::make_shared<const ReadSignalList>(), SampleKind::kAdc, 2, 10);
  auto c = empty.next();
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c->has_value());
}

}  // namespace
}  // namespace escpod::pipeline
