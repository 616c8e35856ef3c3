// Parallel loops over an index range whose start and join ThreadSanitizer can see. Use these
// instead of tbb::parallel_for / parallel_invoke / a task_group wait whenever results are handed
// back across threads (that is, always).
//
// Why: Debian's libtbb is not built with TSan, so the hand-offs that happen inside it are
// invisible to TSan. Measured with TSan on this machine's oneTBB 2021.8:
//   * tbb::parallel_for copies and splits its body and range into task objects recycled through
//     libtbb's small-object pool, so its own inline code (parallel_for.h, blocked_range.h) is
//     reported racing with itself across loops, and every caller write the body reads is
//     reported as well;
//   * a task_group task's first read of anything the spawner wrote is reported (the spawn is
//     inside libtbb). The join at wait() happens to be visible (oneTBB's wait_context is inline
//     header code), but nothing documents that.
// Here:
//   * start: pool tasks are spawned with detail::spawn_pool_task (core/pool_task.hpp), which
//     releases a process-wide counter before the spawn and acquires it first thing in the task;
//   * join: each pool task ends with a release fetch_add on the loop's own `finished` counter,
//     and the caller acquire-loads it after the task group's wait(), so the join TSan sees does
//     not depend on how libtbb waits. The counter is only ever changed by read-modify-writes, so
//     that one load synchronises with every task's increment.
// The order is real either way (tbb orders it); these atomics only make it visible to TSan, at
// one atomic per task, not per index. No suppression beyond tests/tsan.supp's two is needed.
//
// Scheduling: the calling thread and up to width - 1 pool threads each claim the next `grain`
// indices from a shared counter until none are left (work stealing at chunk granularity, so
// uneven items balance). Nesting is fine: a loop called from a pool task of the same executor
// runs there; its caller works on the loop itself, and helper tasks nobody picked up are run
// (finding nothing left) by its wait, so a busy pool slows a loop down but never stalls it.
#pragma once

#include <tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>

#include "escpod/core/executor.hpp"
#include "escpod/core/pool_task.hpp"
#include "escpod/core/status.hpp"

namespace escpod {
namespace detail {

// One loop's shared state; lives on the caller's stack for the whole loop.
template <class Chunk>
class ParallelLoop {
 public:
  ParallelLoop(size_t n, size_t grain, Chunk& chunk) : m_n(n), m_grain(grain), m_chunk(chunk) {}

  // A pool task: claim chunks until none are left, then publish everything written (join).
  void run_pool_task() {
    claim_chunks();
    m_finished.fetch_add(1, std::memory_order_release);
  }

  // Claims and runs chunks on the calling thread until none are left or one has failed.
  void claim_chunks() {
    while (!m_failed.load(std::memory_order_acquire)) {
      const size_t begin = m_next.fetch_add(m_grain, std::memory_order_relaxed);
      if (begin >= m_n) return;
      const size_t end = std::min(m_n, begin + m_grain);
      if (Status s = m_chunk(begin, end); !s.is_ok()) record_failure(begin, std::move(s));
    }
  }

  // After the task group's wait(): makes every pool task's writes visible to the caller (TSan
  // included) and returns the error of the earliest failing chunk, or OK.
  Status join() {
    (void)m_finished.load(std::memory_order_acquire);
    std::lock_guard lock(m_mutex);
    return std::move(m_error);
  }

 private:
  // Keeps the error of the lowest chunk. Chunks are claimed in increasing order and a claimed
  // chunk always runs, so every chunk before the first failure in input order does run: the
  // error kept is the one a serial loop would return, for any thread count.
  void record_failure(size_t begin, Status s) {
    std::lock_guard lock(m_mutex);
    if (begin < m_error_begin) {
      m_error_begin = begin;
      m_error = std::move(s);
    }
    m_failed.store(true, std::memory_order_release);
  }

  const size_t m_n;
  const size_t m_grain;
  Chunk& m_chunk;
  std::atomic<size_t> m_next{0};
  std::atomic<bool> m_failed{false};
  std::atomic<uint64_t> m_finished{0};  // pool tasks done (only RMWs: see the header comment)
  std::mutex m_mutex;                   // guards the two fields below (failures are rare)
  size_t m_error_begin = SIZE_MAX;
  Status m_error;
};

}  // namespace detail

// Runs chunk(begin, end) over consecutive chunks of at most `grain` indices covering [0, n), on
// `executor`'s threads (the calling thread is one of them), and returns once every chunk claimed
// has finished.
//   chunk(size_t begin, size_t end) -> Status or void; called concurrently from several threads
//   for disjoint ranges, so it may write to per-index results without a lock.
//   Errors: once a chunk fails, chunks not yet claimed are skipped (those already running
//   finish); the error returned is that of the earliest failing chunk in index order, the same
//   for any thread count.
//   Memory order: everything the caller wrote before the call happens-before every chunk, and
//   everything every chunk wrote happens-before the return (also in ThreadSanitizer's eyes).
//   grain 0 is taken as 1. An exception thrown by `chunk` propagates once the other threads have
//   finished (they do not stop early for it: the library reports errors as Status).
template <class Chunk>
Status parallel_for_chunks(Executor& executor, size_t n, size_t grain, Chunk&& chunk) {
  grain = std::max<size_t>(1, grain);
  auto as_status = [&chunk](size_t begin, size_t end) -> Status {
    if constexpr (std::is_void_v<decltype(chunk(begin, end))>) {
      chunk(begin, end);
      return Status::ok();
    } else {
      return chunk(begin, end);
    }
  };
  detail::ParallelLoop<decltype(as_status)> loop(n, grain, as_status);
  const size_t n_chunks = n / grain + (n % grain != 0);
  const size_t n_helpers = std::min<size_t>(n_chunks, static_cast<size_t>(executor.width())) - (n_chunks > 0);
  if (n_helpers == 0) {  // one thread or one chunk: no hand-off at all
    loop.claim_chunks();
    return loop.join();
  }
  return executor.execute([&] {
    tbb::task_group helpers;  // declared after `loop`: on unwinding it waits before loop dies
    for (size_t k = 0; k < n_helpers; ++k) detail::spawn_pool_task(helpers, &loop);
    loop.claim_chunks();
    helpers.wait();
    return loop.join();
  });
}

// body(i) for every i in [0, n): parallel_for_chunks with chunks of one index (for items that
// each cost far more than claiming one: files, batches, reads). body returns Status or void.
template <class Body>
Status parallel_for(Executor& executor, size_t n, Body&& body) {
  return parallel_for_chunks(executor, n, 1, [&body](size_t begin, size_t) { return body(begin); });
}

}  // namespace escpod
