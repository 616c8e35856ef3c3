// The one streaming engine: items come from a serial source in input order, their work runs in
// parallel on an Executor's threads (each item claimed by whichever thread is free), and a
// serial sink consumes them in input order, so results never depend on the thread count.
//
//   * Memory in flight is bounded in bytes: the source states each item's cost (say, its signal
//     bytes) and an item is admitted only while the costs of the items produced and not yet
//     consumed stay within StreamLimits::max_bytes (an item larger than the whole budget is
//     admitted alone, so a huge read still passes).
//   * Records are reused: the stream owns a ring of Items, handed back to the source once the
//     sink is done with them (no allocation per item; the source overwrites what it reuses), and
//     each thread gets one Scratch for all the items it works on.
//   * Errors are reported in input order, so the error returned is the same for any thread
//     count: an item whose work fails is marked, the source stops, workers skip every later
//     item, the items before it still reach the sink, and then the stream stops with that
//     item's error (prefixed with its context, file and read, when the caller gives one). A
//     source error ends the input the same way. A sink error stops at once. An interrupt
//     (interrupted(): SIGINT/SIGTERM or set_cancel_requested) stops every stage at once with a
//     kCancelled status. The error is kept atomically (FirstError).
//
// Threads: the thread calling run() is the coordinator: it runs the source and the sink, and
// works on items itself whenever it has nothing else to do (so a 1-wide executor runs
// everything on the calling thread); width - 1 pool workers take the other items.
#pragma once

#include <tbb/enumerable_thread_specific.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "escpod/core/executor.hpp"
#include "escpod/core/pool_task.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"

namespace escpod {

// The first error of many threads. set() keeps the first status offered and drops the rest;
// failed() is safe to poll from any thread. status() is read after the threads are joined (or
// by a thread that saw failed() true through stored(), which waits for the write).
class FirstError {
 public:
  // True when `s` is the error kept (the first); OK statuses are ignored.
  bool set(Status s) {
    if (s.is_ok()) return false;
    int expected = kNone;
    if (!m_state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) return false;
    m_status = std::move(s);
    m_state.store(kStored, std::memory_order_release);
    return true;
  }
  bool failed() const { return m_state.load(std::memory_order_acquire) != kNone; }
  // The error kept, or OK. Call once no thread can still be inside set() (after joining).
  Status status() const {
    return m_state.load(std::memory_order_acquire) == kStored ? m_status : Status::ok();
  }

 private:
  static constexpr int kNone = 0, kWriting = 1, kStored = 2;
  std::atomic<int> m_state{kNone};
  Status m_status;
};

struct StreamLimits {
  // Sum of the costs of items produced and not yet consumed (see above).
  uint64_t max_bytes = uint64_t{256} << 20;
  // Records in the ring (items in flight at most); 0: 4 x the executor's width. Bounds the
  // records kept for reuse when items are cheap; the byte budget is the real limit.
  size_t max_items = 0;
};

// What a finished run did (tests and benchmarks check the budget with it).
struct StreamStats {
  uint64_t n_items = 0;
  uint64_t peak_bytes = 0;  // highest sum of costs in flight
  size_t peak_items = 0;
};

// Item: a reusable record (default-constructible). Scratch: per-thread state.
template <class Item, class Scratch>
class OrderedStream {
  // What a pool task helps with (it lives on the coordinator's stack for the whole run).
  template <class Scratches, class Work>
  struct Helper {
    OrderedStream* stream;
    Scratches* scratch;
    Work* work;
    void run_pool_task() {
      stream->help(*scratch, *work);
      // The join as TSan sees it (see core/parallel.hpp): acquired after workers.wait().
      stream->m_tasks_done.fetch_add(1, std::memory_order_release);
    }
  };

 public:
  OrderedStream(Executor& executor, StreamLimits limits)
      : m_executor(executor),
        m_limits(limits),
        m_capacity(limits.max_items > 0 ? limits.max_items : 4 * static_cast<size_t>(executor.width())),
        m_slots(std::make_unique<Slot[]>(m_capacity)) {}

  // source(Item& item, uint64_t* cost, bool* end) -> Status: fills the next item (a reused
  //   record: overwrite every field the later stages read) and its cost, or sets *end.
  // make_scratch() -> Scratch: one per thread.
  // work(Item&, Scratch&) -> Status: the parallel part.
  // sink(Item&, bool* stop) -> Status: in input order; *stop = true ends the stream early (OK).
  // context(const Item&) -> std::string: what an error of this item is about (file, read);
  //   empty adds nothing.
  template <class Source, class MakeScratch, class Work, class Sink, class Context>
  Status run(Source&& source, MakeScratch&& make_scratch, Work&& work, Sink&& sink, Context&& context) {
    m_executor.execute([&] {
      tbb::enumerable_thread_specific<Scratch> scratch(make_scratch);
      tbb::task_group workers;
      Helper<decltype(scratch), std::remove_reference_t<Work>> helper{this, &scratch, &work};
      Coordinator c;
      while (!m_stop.load(std::memory_order_acquire)) {
        const uint32_t completions_seen = m_completions.load(std::memory_order_acquire);
        if (interrupted()) stop_with(Status::cancelled("interrupted"));
        bool progressed = drain(c, sink, context);
        progressed |= produce(c, source, workers, helper);
        if (m_stop.load(std::memory_order_acquire)) break;  // nothing more will complete for us
        if (c.source_done && !c.pending && c.tail == c.head) {
          stop_with(std::move(c.source_error));
          break;
        }
        if (progressed || help(scratch, work)) continue;
        // Every published item not yet consumed is being worked on by another thread: sleep
        // until one finishes (a completion since completions_seen returns at once).
        m_completions.wait(completions_seen, std::memory_order_acquire);
      }
      workers.wait();  // items claimed before a stop finish (or are skipped) before we return
      (void)m_tasks_done.load(std::memory_order_acquire);  // every task's writes (scratch), for TSan
      m_stats.n_items = c.tail;
    });
    return m_error.status();
  }

  template <class Source, class MakeScratch, class Work, class Sink>
  Status run(Source&& source, MakeScratch&& make_scratch, Work&& work, Sink&& sink) {
    return run(source, make_scratch, work, sink, [](const Item&) { return std::string(); });
  }

  const StreamStats& stats() const { return m_stats; }

 private:
  struct Slot {
    std::atomic<bool> done{false};  // work finished (or skipped): the sink may take it
    uint64_t cost = 0;
    Status status;  // the work's error (written before `done`)
    Item item;
  };
  // State only the coordinator touches.
  struct Coordinator {
    uint64_t head = 0;       // items published (their work may start)
    uint64_t tail = 0;       // items consumed by the sink
    bool pending = false;    // slot(head) holds an item produced but not yet admitted
    bool source_done = false;
    Status source_error;     // reported once the items before it are consumed
    uint64_t in_flight = 0;  // bytes of items [tail, head), plus the pending one once admitted
  };

  Slot& slot(uint64_t seq) { return m_slots[seq % m_capacity]; }

  void stop_with(Status s) {
    m_error.set(std::move(s));
    m_stop.store(true, std::memory_order_release);
  }

  template <class Context>
  void fail(const Item& item, Status s, Context& context) {
    const std::string where = context(item);
    stop_with(where.empty() ? std::move(s) : s.with_context(where));
  }

  // Hands finished items to the sink in input order and frees their records and bytes.
  template <class Sink, class Context>
  bool drain(Coordinator& c, Sink& sink, Context& context) {
    bool progressed = false;
    while (c.tail < c.head && !m_stop.load(std::memory_order_acquire)) {
      Slot& s = slot(c.tail);
      if (!s.done.load(std::memory_order_acquire)) break;
      if (!s.status.is_ok()) {
        fail(s.item, std::move(s.status), context);
        s.status = Status::ok();
        return true;
      }
      // An interrupt stops the sink too, at once: an item worked after it is not delivered
      // (the coordinator's own check runs only between drains).
      if (interrupted()) {
        stop_with(Status::cancelled("interrupted"));
        break;
      }
      bool stop = false;
      if (Status st = sink(s.item, &stop); !st.is_ok()) fail(s.item, std::move(st), context);
      if (stop) m_stop.store(true, std::memory_order_release);
      c.in_flight -= s.cost;
      s.done.store(false, std::memory_order_relaxed);
      ++c.tail;
      progressed = true;
    }
    return progressed;
  }

  // Fills free records from the source and publishes them while the byte budget allows.
  template <class Source, class Scratches, class Work>
  bool produce(Coordinator& c, Source& source, tbb::task_group& workers, Helper<Scratches, Work>& helper) {
    bool progressed = false;
    while (!c.source_done && !m_stop.load(std::memory_order_acquire)) {
      if (m_fail_seq.load(std::memory_order_acquire) != kNoFailure) {
        c.source_done = true;  // an item failed: nothing after it is needed
        c.pending = false;
        return true;
      }
      if (!c.pending) {
        if (c.head - c.tail == m_capacity) break;  // every record is in use
        Slot& s = slot(c.head);
        bool end = false;
        s.cost = 0;
        if (Status st = source(s.item, &s.cost, &end); !st.is_ok()) {
          c.source_error = std::move(st);
          c.source_done = true;
          return true;
        }
        if (end) {
          c.source_done = true;
          return true;
        }
        c.pending = true;
        progressed = true;
      }
      const uint64_t cost = slot(c.head).cost;
      if (c.in_flight > 0 && c.in_flight + cost > m_limits.max_bytes) break;  // wait for the sink
      c.in_flight += cost;
      m_stats.peak_bytes = std::max(m_stats.peak_bytes, c.in_flight);
      m_stats.peak_items = std::max(m_stats.peak_items, static_cast<size_t>(c.head + 1 - c.tail));
      c.pending = false;
      m_published.store(++c.head, std::memory_order_release);
      if (m_executor.width() > 1) detail::spawn_pool_task(workers, &helper);
      progressed = true;
    }
    return progressed;
  }

  // Claims the oldest published item nobody works on and runs its work on this thread; false
  // when there is none.
  template <class Scratches, class Work>
  bool help(Scratches& scratch, Work& work) {
    uint64_t seq = m_next_claim.load(std::memory_order_relaxed);
    do {
      if (seq >= m_published.load(std::memory_order_acquire)) return false;
    } while (!m_next_claim.compare_exchange_weak(seq, seq + 1, std::memory_order_acq_rel));
    Slot& s = slot(seq);
    if (!m_stop.load(std::memory_order_acquire) && seq < m_fail_seq.load(std::memory_order_acquire)) {
      if (interrupted()) {
        stop_with(Status::cancelled("interrupted"));
      } else if (Status st = work(s.item, scratch.local()); !st.is_ok()) {
        s.status = std::move(st);
        lower_fail_seq(seq);
      }
    }
    s.done.store(true, std::memory_order_release);
    m_completions.fetch_add(1, std::memory_order_release);
    m_completions.notify_one();
    return true;
  }

  // Marks item `seq` failed unless an earlier one already is (workers skip items after it).
  void lower_fail_seq(uint64_t seq) {
    uint64_t cur = m_fail_seq.load(std::memory_order_acquire);
    while (seq < cur && !m_fail_seq.compare_exchange_weak(cur, seq, std::memory_order_acq_rel)) {
    }
  }

  static constexpr uint64_t kNoFailure = UINT64_MAX;
  Executor& m_executor;
  StreamLimits m_limits;
  size_t m_capacity;
  std::unique_ptr<Slot[]> m_slots;
  std::atomic<uint64_t> m_published{0};   // items whose work may start (coordinator writes)
  std::atomic<uint64_t> m_next_claim{0};  // next item to claim for work
  std::atomic<uint32_t> m_completions{0}; // works finished (wraps): the coordinator sleeps on it
  std::atomic<bool> m_stop{false};        // an error, an interrupt or the sink asked to stop
  std::atomic<uint64_t> m_fail_seq{kNoFailure};  // the earliest item whose work failed
  std::atomic<uint64_t> m_tasks_done{0};  // pool tasks finished (only RMWs, so one acquire sees all)
  FirstError m_error;
  StreamStats m_stats;
};

}  // namespace escpod
