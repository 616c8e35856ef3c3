// The fused demultiplexer's per-read record (pipeline/demux_read.hpp): reset() gives the state of
// a new record while keeping its buffers, and the streaming engine reuses records, so filling one
// allocates only while the engine's ring warms up, whatever the read count.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "pipeline/demux/demux_read.hpp"
#include "pipeline/ops/read_stream.hpp"
#include "test_data.hpp"

namespace escpod::pipeline {
namespace {

using detail::DemuxRead;

constexpr size_t kClasses = 5;
constexpr size_t kFeatures = 25;
const std::string kLongReason = "boundary detection failed: No adapter detected (primary)";

// What a worker writes into a record: every buffer used, every scalar away from its default.
void fill(DemuxRead& r) {
  r.bounds.adapter_start = 10;
  r.bounds.adapter_end = 20;
  r.bounds.polya_end = 30;
  r.bounds.polya_candidates.assign(3, 42);
  r.bounds.success = true;
  r.bounds.method = "llr_short";
  r.bounds.fail_reason = kLongReason;
  r.call.label = 3;
  r.call.best_label = 3;
  r.call.class_index = 2;
  r.call.confidence = 0.5;
  r.call.threshold = 0.25;
  r.call.status = demux::CallStatus::kClassified;
  r.call.probabilities.assign(kClasses, 0.2);
  r.call.detail = "gate";
  r.reason = kLongReason;
  r.n_decoded = 9;
  r.features.assign(kFeatures, 1.5);
}

void expect_new_state(const DemuxRead& r) {
  const DemuxRead fresh;
  EXPECT_EQ(r.bounds.adapter_start, fresh.bounds.adapter_start);
  EXPECT_EQ(r.bounds.adapter_end, fresh.bounds.adapter_end);
  EXPECT_EQ(r.bounds.polya_end, fresh.bounds.polya_end);
  EXPECT_TRUE(r.bounds.polya_candidates.empty());
  EXPECT_EQ(r.bounds.success, fresh.bounds.success);
  EXPECT_TRUE(r.bounds.method.empty());
  EXPECT_TRUE(r.bounds.fail_reason.empty());
  EXPECT_EQ(r.call.label, fresh.call.label);
  EXPECT_EQ(r.call.best_label, fresh.call.best_label);
  EXPECT_EQ(r.call.class_index, fresh.call.class_index);
  EXPECT_EQ(r.call.confidence, fresh.call.confidence);
  EXPECT_EQ(r.call.threshold, fresh.call.threshold);
  EXPECT_EQ(r.call.status, fresh.call.status);
  EXPECT_TRUE(r.call.probabilities.empty());
  EXPECT_TRUE(r.call.detail.empty());
  EXPECT_TRUE(r.reason.empty());
  EXPECT_EQ(r.n_decoded, fresh.n_decoded);
  EXPECT_TRUE(r.features.empty());
}

TEST(DemuxRead, ResetGivesTheNewStateAndKeepsEveryBuffer) {
  DemuxRead r;
  fill(r);
  const int64_t* candidates = r.bounds.polya_candidates.data();
  const char* fail_reason = r.bounds.fail_reason.data();
  const double* probabilities = r.call.probabilities.data();
  const char* reason = r.reason.data();
  const double* features = r.features.data();
  r.reset();
  expect_new_state(r);
  // Same storage: refilling to the same sizes cannot allocate.
  EXPECT_EQ(r.bounds.polya_candidates.data(), candidates);
  EXPECT_EQ(r.bounds.fail_reason.data(), fail_reason);
  EXPECT_EQ(r.call.probabilities.data(), probabilities);
  EXPECT_EQ(r.reason.data(), reason);
  EXPECT_EQ(r.features.data(), features);
  EXPECT_GE(r.reason.capacity(), kLongReason.size());
  EXPECT_GE(r.call.probabilities.capacity(), kClasses);
}

bool has_room(const DemuxRead& r) {
  return r.bounds.polya_candidates.capacity() >= 3 && r.bounds.fail_reason.capacity() >= kLongReason.size() &&
         r.call.probabilities.capacity() >= kClasses && r.reason.capacity() >= kLongReason.size() &&
         r.features.capacity() >= kFeatures;
}

// Through for_each_read_ordered as run_demux drives it: every record arrives reset, and records
// that must grow to be filled are at most the ring's (blocks in flight x reads a block).
TEST(DemuxRead, EngineReusesRecordsSoFillingStopsAllocatingOnceWarm) {
  const auto f = test::shared_data("escapepod/drna/yeast_trna_reads.pod5");
  auto readers = detail::open_readers({f, f, f}, 1);
  ASSERT_TRUE(readers.is_ok()) << readers.status().to_string();
  struct Scratch {};
  for (int threads : {1, 3}) {
    for (size_t block_size : {size_t{1}, size_t{4}}) {
      std::atomic<size_t> grown{0}, filled{0}, not_reset{0};
      const Status s = detail::for_each_read_ordered<DemuxRead, Scratch>(
          *readers, threads, block_size, [](const pod5::ReadBatch&, size_t, size_t*) { return true; },
          [] { return Scratch{}; },
          [&](detail::ReadBlock<DemuxRead>& block, Scratch&) {
            for (auto& t : block.reads) {
              if (!t.out.reason.empty() || !t.out.call.probabilities.empty() || t.out.n_decoded != 0) ++not_reset;
              if (!has_room(t.out)) ++grown;
              fill(t.out);
              ++filled;
            }
          },
          [](const detail::ReadTask<DemuxRead>&) { return Status::ok(); });
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      const size_t ring_records =
          detail::read_stream_limits(Executor::for_threads(threads)).max_items * block_size;
      EXPECT_EQ(not_reset.load(), 0u) << threads << " threads, blocks of " << block_size;
      EXPECT_GT(filled.load(), 4 * ring_records) << "too few reads to tell reuse from growth";
      EXPECT_LE(grown.load(), ring_records) << threads << " threads, blocks of " << block_size;
      EXPECT_GT(grown.load(), 0u);  // the first reads did allocate: the count is not vacuous
    }
  }
}

}  // namespace
}  // namespace escpod::pipeline
