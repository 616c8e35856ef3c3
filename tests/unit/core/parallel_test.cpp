// parallel_for / parallel_for_chunks: every index exactly once for any width and grain; what
// the caller wrote seen by the bodies and what the bodies wrote seen by the caller (plain memory:
// under ThreadSanitizer this also checks that the start and the join are visible to it); the
// earliest failing index's error for any width; later indices skipped after a failure; at most
// `width` threads; nested loops in one pool.
#include "escpod/core/parallel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace escpod {
namespace {

// Work whose duration varies with the index, so chunks finish out of order.
uint64_t uneven_square(uint64_t x) {
  uint64_t acc = 0;
  const uint64_t spins = (x * 7919) % 3000;
  for (uint64_t k = 0; k < spins; ++k) acc += (k ^ x) & 1;
  return x * x + acc * 0;
}

TEST(ParallelFor, EveryIndexExactlyOnceForAnyWidthAndGrain) {
  for (int width : {1, 2, 3, 8}) {
    for (size_t grain : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1001}}) {
        // Written by the caller before the loop and read by the bodies; written by the bodies and
        // read by the caller after it. Plain (non-atomic) memory on purpose.
        std::vector<uint64_t> input(n);
        for (size_t i = 0; i < n; ++i) input[i] = i + 1;
        std::vector<uint64_t> out(n, 0);
        std::vector<int> visits(n, 0);
        const Status s = parallel_for_chunks(Executor::for_threads(width), n, grain, [&](size_t begin, size_t end) {
          ASSERT_LT(begin, end);
          ASSERT_LE(end - begin, std::max<size_t>(1, grain));
          for (size_t i = begin; i < end; ++i) {
            ++visits[i];
            out[i] = uneven_square(input[i]);
          }
        });
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(visits[i], 1) << "width " << width << " grain " << grain << " n " << n << " index " << i;
          ASSERT_EQ(out[i], (i + 1) * (i + 1)) << "width " << width << " grain " << grain << " index " << i;
        }
      }
    }
  }
}

TEST(ParallelFor, PoolThreadsSeeTheCallersWritesAndTheCallerSeesTheirs) {
  // Items slow enough that pool threads take some: under ThreadSanitizer this fails without the
  // hand-off at the start or the join at the end (plain memory, no lock anywhere that could
  // order it instead), in every round, not only while the pool's threads are being created.
  Executor& pool = Executor::for_threads(4);
  for (uint64_t round = 0; round < 3; ++round) {
    std::vector<uint64_t> input(64), out(64, 0);
    std::vector<std::thread::id> ran_on(64);
    for (size_t i = 0; i < input.size(); ++i) input[i] = i * 7 + round;
    const Status s = parallel_for(pool, input.size(), [&](size_t i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      out[i] = input[i] * 2;
      ran_on[i] = std::this_thread::get_id();
    });
    ASSERT_TRUE(s.is_ok());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], (i * 7 + round) * 2) << "round " << round;
    EXPECT_LE(std::set<std::thread::id>(ran_on.begin(), ran_on.end()).size(), 4u);
  }
}

TEST(ParallelFor, ReturnsTheEarliestFailingIndexForAnyWidth) {
  // Index 300 fails slowly, 700 at once: a thread usually sees 700 fail first, but the error
  // returned is always 300's, as a serial loop would return.
  for (int width : {1, 2, 4, 8}) {
    const Status s = parallel_for(Executor::for_threads(width), 2000, [](size_t i) -> Status {
      if (i == 300) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return Status::corrupt("item 300");
      }
      if (i == 700) return Status::io_error("item 700");
      (void)uneven_square(i);
      return Status::ok();
    });
    ASSERT_FALSE(s.is_ok()) << "width " << width;
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << "width " << width;
    EXPECT_EQ(s.message(), "item 300") << "width " << width;
  }
}

TEST(ParallelFor, IndicesNotStartedAreSkippedAfterAFailure) {
  for (int width : {1, 4}) {
    std::atomic<size_t> ran{0};
    const Status s = parallel_for(Executor::for_threads(width), 100000, [&](size_t i) -> Status {
      ++ran;
      if (i == 10) return Status::invalid_argument("stop here");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      return Status::ok();
    });
    EXPECT_EQ(s.message(), "stop here");
    EXPECT_GE(ran.load(), 11u) << "every index up to the failure runs";
    EXPECT_LT(ran.load(), 1000u) << "width " << width << ": the rest is skipped";
  }
}

TEST(ParallelFor, RunsOnAtMostWidthThreads) {
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::atomic<int> running{0}, peak{0};
  const Status s = parallel_for(Executor::for_threads(3), 200, [&](size_t) {
    const int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    {
      std::lock_guard lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    --running;
  });
  ASSERT_TRUE(s.is_ok());
  EXPECT_LE(peak.load(), 3);
  EXPECT_GE(peak.load(), 1);
  EXPECT_LE(threads.size(), 3u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id())) << "the caller works on its own loop";
}

TEST(ParallelFor, NestedLoopsInOnePoolFinish) {
  // Every outer index runs an inner loop in the same 2-wide pool: the caller of each inner loop
  // works on it itself, so nothing waits on a busy thread.
  Executor& pool = Executor::for_threads(2);
  std::vector<uint64_t> sums(16, 0);
  const Status s = parallel_for(pool, sums.size(), [&](size_t outer) -> Status {
    std::vector<uint64_t> part(100, 0);
    ESCPOD_RETURN_IF_ERROR(parallel_for(pool, part.size(), [&](size_t i) { part[i] = outer * 1000 + i; }));
    for (uint64_t v : part) sums[outer] += v;
    return Status::ok();
  });
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (size_t outer = 0; outer < sums.size(); ++outer) EXPECT_EQ(sums[outer], outer * 100000 + 4950);
}

}  // namespace
}  // namespace escpod
