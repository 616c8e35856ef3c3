// The hand-off of work to a pool thread, visible to ThreadSanitizer. A tbb::task_group task is
// handed from the spawning thread to the worker inside libtbb, which is not built with TSan, so
// TSan sees neither the task object's bytes nor the data behind them as ordered. spawn_pool_task
// releases a process-wide counter before spawning and the task acquires it before it touches
// anything: all the spawner wrote before is then ordered before the task's reads in TSan's eyes.
// What remains unordered for TSan is only the task's own pointer, copied into the task object by
// libtbb and read first thing below: tests/tsan.supp names this file for that read alone, so
// keep nothing else here.
#pragma once

#include <tbb/task_group.h>

#include <atomic>
#include <cstdint>

namespace escpod::detail {

inline std::atomic<uint64_t> g_pool_spawns{0};

// Calls target->run_pool_task() on a pool thread.
template <class Target>
struct PoolTask {
  Target* target;
  void operator()() const {
    (void)g_pool_spawns.load(std::memory_order_acquire);
    Target* t = target;
    t->run_pool_task();
  }
};

template <class Target>
void spawn_pool_task(tbb::task_group& group, Target* target) {
  g_pool_spawns.fetch_add(1, std::memory_order_release);
  group.run(PoolTask<Target>{target});
}

}  // namespace escpod::detail
