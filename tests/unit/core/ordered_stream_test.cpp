// The streaming engine: input order at the sink for any width, the byte budget never exceeded,
// the first error kept with its item's context and every stage stopped, early stop by the sink,
// cancellation, and records reused instead of allocated per item.
#include "escpod/core/ordered_stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "escpod/core/cancel.hpp"

namespace escpod {
namespace {

struct Item {
  uint64_t seq = 0;
  uint64_t value = 0;
  std::vector<uint64_t> buffer;  // reused: its capacity survives between items
  const uint64_t* buffer_data = nullptr;
};
struct Scratch {
  uint64_t items_worked = 0;
};

// Work whose duration varies with the item, so later items often finish first.
uint64_t slow_square(uint64_t x) {
  uint64_t acc = 0;
  const uint64_t spins = (x * 7919) % 2000;
  for (uint64_t k = 0; k < spins; ++k) acc += (k ^ x) & 1;
  return x * x + acc * 0;
}

struct StreamRun {
  std::vector<uint64_t> consumed;
  StreamStats stats;
  Status status;
};

// Streams items 0..n-1 (item k costs cost(k) bytes) and collects value = k^2 in sink order.
template <class Cost>
StreamRun stream_squares(int width, uint64_t n, StreamLimits limits, Cost cost, uint64_t fail_at = UINT64_MAX,
                   uint64_t stop_after = UINT64_MAX) {
  StreamRun r;
  OrderedStream<Item, Scratch> stream(Executor::for_threads(width), limits);
  uint64_t next = 0;
  r.status = stream.run(
      [&](Item& item, uint64_t* bytes, bool* end) {
        if (next == n) {
          *end = true;
          return Status::ok();
        }
        item.seq = next++;
        *bytes = cost(item.seq);
        return Status::ok();
      },
      [] { return Scratch{}; },
      [&](Item& item, Scratch& s) {
        ++s.items_worked;
        if (item.seq == fail_at) return Status::corrupt("bad signal");
        item.value = slow_square(item.seq);
        return Status::ok();
      },
      [&](Item& item, bool* stop) {
        r.consumed.push_back(item.value);
        if (r.consumed.size() == stop_after) *stop = true;
        return Status::ok();
      },
      [](const Item& item) { return "reads.pod5: read " + std::to_string(item.seq); });
  r.stats = stream.stats();
  return r;
}

TEST(OrderedStream, SinkSeesInputOrderForAnyWidth) {
  for (int width : {1, 2, 3, 8}) {
    const StreamRun r = stream_squares(width, 5000, {.max_bytes = 1 << 20, .max_items = 0}, [](uint64_t) { return 100; });
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    ASSERT_EQ(r.consumed.size(), 5000u) << "width " << width;
    for (uint64_t k = 0; k < 5000; ++k) ASSERT_EQ(r.consumed[k], k * k) << "width " << width;
    EXPECT_EQ(r.stats.n_items, 5000u);
  }
}

TEST(OrderedStream, BytesInFlightNeverExceedTheBudget) {
  // Costs 1..1000 bytes, budget 4000: at most a handful of items fit at once, never more.
  const auto cost = [](uint64_t k) { return 1 + (k * 37) % 1000; };
  for (int width : {1, 4}) {
    const StreamRun r = stream_squares(width, 3000, {.max_bytes = 4000, .max_items = 64}, cost);
    ASSERT_TRUE(r.status.is_ok());
    EXPECT_LE(r.stats.peak_bytes, 4000u) << "width " << width;
    EXPECT_GT(r.stats.peak_bytes, 1000u) << "the budget, not the ring, limits";
    EXPECT_LT(r.stats.peak_items, 64u);
  }
}

TEST(OrderedStream, AnItemLargerThanTheBudgetPassesAlone) {
  const auto cost = [](uint64_t k) { return k == 10 ? uint64_t{50000} : uint64_t{10}; };
  const StreamRun r = stream_squares(4, 100, {.max_bytes = 1000, .max_items = 16}, cost);
  ASSERT_TRUE(r.status.is_ok());
  EXPECT_EQ(r.consumed.size(), 100u);
  EXPECT_EQ(r.stats.peak_bytes, 50000u);  // admitted with nothing else in flight
}

TEST(OrderedStream, FirstErrorNamesItsItemAndStopsTheSink) {
  for (int width : {1, 4}) {
    const StreamRun r = stream_squares(width, 100000, {}, [](uint64_t) { return 8; }, /*fail_at=*/700);
    ASSERT_FALSE(r.status.is_ok());
    EXPECT_EQ(r.status.code(), StatusCode::kCorrupt);
    EXPECT_EQ(r.status.message(), "reads.pod5: read 700: bad signal");
    // The sink never sees the failed item or anything after it, and the source stopped promptly.
    ASSERT_EQ(r.consumed.size(), 700u) << "width " << width;
    EXPECT_EQ(r.consumed.back(), 699u * 699u);
    EXPECT_LT(r.stats.n_items, 100000u);
  }
}

TEST(OrderedStream, TheEarliestFailingItemIsReportedForAnyWidth) {
  // Items 300 and 310 both fail; whichever fails first in time, 300 is the one reported.
  for (int width : {1, 2, 4}) {
    OrderedStream<Item, Scratch> stream(Executor::for_threads(width), {});
    uint64_t next = 0, sunk = 0;
    const Status s = stream.run(
        [&](Item& item, uint64_t* bytes, bool*) {
          item.seq = next++;
          *bytes = 1;
          return Status::ok();
        },
        [] { return Scratch{}; },
        [](Item& item, Scratch&) {
          if (item.seq == 300) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return item.seq == 300 || item.seq == 310 ? Status::corrupt("bad " + std::to_string(item.seq))
                                                    : Status::ok();
        },
        [&](Item&, bool*) {
          ++sunk;
          return Status::ok();
        },
        [](const Item& item) { return "f.pod5: read " + std::to_string(item.seq); });
    EXPECT_EQ(s.message(), "f.pod5: read 300: bad 300") << "width " << width;
    EXPECT_EQ(sunk, 300u);
  }
}

TEST(OrderedStream, SourceErrorIsReturnedAsIs) {
  OrderedStream<Item, Scratch> stream(Executor::for_threads(2), {});
  uint64_t next = 0, sunk = 0;
  const Status s = stream.run(
      [&](Item& item, uint64_t* bytes, bool*) {
        if (next == 50) return Status::io_error("reads.pod5: cannot read batch 3");
        item.seq = next++;
        *bytes = 1;
        return Status::ok();
      },
      [] { return Scratch{}; }, [](Item&, Scratch&) { return Status::ok(); },
      [&](Item&, bool*) {
        ++sunk;
        return Status::ok();
      });
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "reads.pod5: cannot read batch 3");
  EXPECT_EQ(sunk, 50u);  // the items before the failure still reach the sink
}

TEST(OrderedStream, SinkCanStopEarlyWithoutError) {
  const StreamRun r = stream_squares(4, 100000, {}, [](uint64_t) { return 8; }, UINT64_MAX, /*stop_after=*/123);
  EXPECT_TRUE(r.status.is_ok());
  EXPECT_EQ(r.consumed.size(), 123u);
  EXPECT_LT(r.stats.n_items, 100000u);
}

TEST(OrderedStream, CancellationStopsWithCancelled) {
  std::atomic<uint64_t> worked{0};
  OrderedStream<Item, Scratch> stream(Executor::for_threads(3), {});
  uint64_t sunk = 0;
  const Status s = stream.run(
      [&](Item& item, uint64_t* bytes, bool*) {
        item.seq = 0;
        *bytes = 1;
        return Status::ok();  // endless
      },
      [] { return Scratch{}; },
      [&](Item&, Scratch&) {
        if (worked.fetch_add(1) == 1000) set_cancel_requested(true);
        return Status::ok();
      },
      [&](Item&, bool*) {
        ++sunk;
        return Status::ok();
      });
  set_cancel_requested(false);
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  EXPECT_GE(worked.load(), 1001u);
  EXPECT_LT(worked.load(), 1001u + 64u);  // stopped within a ring's worth of items
  EXPECT_LT(sunk, worked.load());
}

TEST(OrderedStream, CancellationWithNothingInFlightDoesNotHang) {
  // The interrupt is seen by the coordinator itself, between items (no work left to finish).
  for (int width : {1, 2}) {
    OrderedStream<Item, Scratch> stream(Executor::for_threads(width), {});
    uint64_t sunk = 0;
    const Status s = stream.run(
        [&](Item& item, uint64_t* bytes, bool*) {
          item.seq = 0;
          *bytes = 1;
          return Status::ok();
        },
        [] { return Scratch{}; }, [](Item&, Scratch&) { return Status::ok(); },
        [&](Item&, bool*) {
          if (++sunk == 100) set_cancel_requested(true);
          return Status::ok();
        });
    set_cancel_requested(false);
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << "width " << width;
  }
}

TEST(OrderedStream, RecordsAreReusedNotAllocatedPerItem) {
  OrderedStream<Item, Scratch> stream(Executor::for_threads(2), {.max_bytes = 1 << 20, .max_items = 8});
  uint64_t next = 0;
  std::vector<const uint64_t*> buffers;
  const Status s = stream.run(
      [&](Item& item, uint64_t* bytes, bool* end) {
        if (next == 1000) {
          *end = true;
          return Status::ok();
        }
        item.seq = next++;
        item.buffer.resize(256);  // allocates only the first time a record is used
        item.buffer_data = item.buffer.data();
        *bytes = 1;
        return Status::ok();
      },
      [] { return Scratch{}; }, [](Item&, Scratch&) { return Status::ok(); },
      [&](Item& item, bool*) {
        if (std::find(buffers.begin(), buffers.end(), item.buffer_data) == buffers.end()) {
          buffers.push_back(item.buffer_data);
        }
        return Status::ok();
      });
  ASSERT_TRUE(s.is_ok());
  EXPECT_LE(buffers.size(), 8u);  // one buffer per record of the ring, whatever the item count
}

TEST(FirstError, KeepsTheFirstOfManyThreads) {
  FirstError e;
  EXPECT_FALSE(e.failed());
  EXPECT_TRUE(e.status().is_ok());
  std::vector<std::thread> threads;
  std::atomic<int> kept{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (e.set(Status::corrupt("thread " + std::to_string(t)))) ++kept;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(kept.load(), 1);
  EXPECT_TRUE(e.failed());
  EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(e.set(Status::io_error("later")));
}

TEST(Executor, ForThreadsReturnsOnePoolPerWidth) {
  Executor& a = Executor::for_threads(3);
  Executor& b = Executor::for_threads(3);
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.width(), 3);
  EXPECT_EQ(Executor::for_threads(5).width(), 5);
  // At most `width` threads run inside a pool: items of a stream of width 3 work concurrently on
  // at most 3 threads.
  std::atomic<int> running{0}, peak{0};
  OrderedStream<Item, Scratch> stream(a, {});
  uint64_t next = 0;
  const Status s = stream.run(
      [&](Item& item, uint64_t* bytes, bool* end) {
        *end = next == 64;
        item.seq = next++;
        *bytes = 1;
        return Status::ok();
      },
      [] { return Scratch{}; },
      [&](Item&, Scratch&) {
        const int now = ++running;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        --running;
        return Status::ok();
      },
      [](Item&, bool*) { return Status::ok(); });
  ASSERT_TRUE(s.is_ok());
  EXPECT_LE(peak.load(), 3);
  EXPECT_GE(peak.load(), 1);
}

}  // namespace
}  // namespace escpod
