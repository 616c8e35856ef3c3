// The POD5 streams on the engine: every read once, in input order, for any thread count
// (stream_reads, for_each_read_ordered, write_read_table), and an error of the consumer stops
// the stream naming its file and read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pipeline/ops/read_fields.hpp"
#include "pipeline/ops/read_stream.hpp"
#include "test_data.hpp"

namespace escpod::pipeline {
namespace {

// The same real file three times: several batches and files, reads in a known order.
std::vector<std::filesystem::path> inputs() {
  const auto f = test::shared_data("escapepod/drna/yeast_trna_reads.pod5");
  return {f, f, f};
}

std::vector<std::unique_ptr<pod5::FileReader>> open_all() {
  auto r = detail::open_readers(inputs(), 1);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

// Read ids of every input, in input order, straight from the reads tables.
std::vector<std::string> ids_in_input_order(const std::vector<std::unique_ptr<pod5::FileReader>>& readers) {
  std::vector<std::string> ids;
  for (const auto& r : readers) {
    for (size_t b = 0; b < r->n_read_batches(); ++b) {
      auto batch = r->read_batch(b);
      EXPECT_TRUE(batch.is_ok());
      for (size_t i = 0; i < batch->size(); ++i) ids.push_back(batch->read_id[i].to_string());
    }
  }
  return ids;
}

TEST(ReadStream, StreamReadsSeesEveryReadInInputOrderForAnyThreadCount) {
  const auto readers = open_all();
  const auto expected = ids_in_input_order(readers);
  ASSERT_GT(expected.size(), 100u);
  for (int threads : {1, 2, 4}) {
    std::vector<std::string> seen;
    uint64_t samples = 0, n_seen = 0;
    const Status s = stream_reads(
        readers, threads, nullptr,
        [&](size_t, const pod5::FileReader&, const pod5::ReadBatch&, const PreparedRead& r) {
          seen.push_back(r.record.read_id.to_string());
          samples += r.record.num_samples;
          return Status::ok();
        },
        &n_seen);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(seen, expected) << threads << " threads";
    EXPECT_EQ(n_seen, expected.size());
    EXPECT_GT(samples, 0u);
  }
}

TEST(ReadStream, ConsumerErrorStopsTheStreamNamingFileAndRead) {
  const auto readers = open_all();
  const auto expected = ids_in_input_order(readers);
  const size_t fail_at = expected.size() / 2;
  for (int threads : {1, 4}) {
    size_t seen = 0;
    const Status s = stream_reads(
        readers, threads, nullptr,
        [&](size_t, const pod5::FileReader&, const pod5::ReadBatch&, const PreparedRead&) {
          if (seen == fail_at) return Status::corrupt("rejected");
          ++seen;
          return Status::ok();
        });
    ASSERT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_EQ(seen, fail_at);
    EXPECT_EQ(s.message(), inputs()[1].string() + ": read " + expected[fail_at] + ": rejected")
        << threads << " threads";
  }
}

TEST(ReadStream, ForEachReadOrderedEmitsInInputOrderWithTheSelectedReads) {
  const auto readers = open_all();
  const auto all = ids_in_input_order(readers);
  struct Out {
    uint64_t n_samples = 0;
  };
  struct Scratch {
    size_t blocks = 0;
  };
  for (int threads : {1, 3}) {
    std::vector<std::string> seen;
    std::vector<uint64_t> samples;
    size_t k = 0;
    const Status s = detail::for_each_read_ordered<Out, Scratch>(
        readers, threads, /*block_size=*/5,
        [&](const pod5::ReadBatch&, size_t, size_t* tag) {
          *tag = k;
          return k++ % 3 != 1;  // every read but one in three
        },
        [] { return Scratch{}; },
        [](detail::ReadBlock<Out>& block, Scratch& w) {
          ++w.blocks;
          for (auto& t : block.reads) t.out.n_samples += t.batch->num_samples[t.row];
        },
        [&](detail::ReadTask<Out>& t) {
          seen.push_back(t.batch->read_id[t.row].to_string());
          samples.push_back(t.out.n_samples);
          EXPECT_EQ(t.out.n_samples, t.batch->num_samples[t.row]) << "payload not reset between reads";
          return Status::ok();
        });
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    std::vector<std::string> expected;
    for (size_t i = 0; i < all.size(); ++i)
      if (i % 3 != 1) expected.push_back(all[i]);
    EXPECT_EQ(seen, expected) << threads << " threads";
  }
}

TEST(ReadStream, ReadTableIsIdenticalForAnyThreadCount) {
  std::vector<const ReadField*> fields;
  for (const char* name : {"read_id", "num_samples", "signal_hash"}) fields.push_back(find_read_field(name));
  std::string one, four;
  ASSERT_TRUE(write_read_table(inputs(), fields, "\t", nullptr, 1, [&](std::string_view t) {
                one += t;
                return true;
              }).is_ok());
  ASSERT_TRUE(write_read_table(inputs(), fields, "\t", nullptr, 4, [&](std::string_view t) {
                four += t;
                return true;
              }).is_ok());
  EXPECT_EQ(one, four);
  const auto readers = open_all();
  EXPECT_EQ(static_cast<size_t>(std::count(one.begin(), one.end(), '\n')), ids_in_input_order(readers).size());
  // A consumer that is done (a closed pipe) stops the stream without an error.
  size_t writes = 0;
  const Status s = write_read_table(inputs(), fields, "\t", nullptr, 4, [&](std::string_view) {
    ++writes;
    return false;
  });
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(writes, 1u);
}

}  // namespace
}  // namespace escpod::pipeline
