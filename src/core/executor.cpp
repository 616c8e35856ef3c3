#include "escpod/core/executor.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace escpod {
namespace {

int resolve_width(int n_threads) {
  return n_threads > 0 ? n_threads : std::max(1, tbb::this_task_arena::max_concurrency());
}

struct Pools {
  std::mutex mutex;
  Executor* installed = nullptr;                  // owned by `by_width`
  std::map<int, std::unique_ptr<Executor>> by_width;  // never shrinks: pools live as long as the process
};

Pools& pools() {
  static Pools p;
  return p;
}

Executor& pool_of_width(Pools& p, int width) {
  auto& slot = p.by_width[width];
  if (!slot) slot = std::make_unique<Executor>(width);
  return *slot;
}

}  // namespace

Executor::Executor(int n_threads)
    : m_width(resolve_width(n_threads)),
      // One slot reserved for the thread calling execute(): it is one of the `width` threads.
      m_arena(std::make_unique<tbb::task_arena>(m_width, 1)) {}

void Executor::install(int n_threads) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  p.installed = &pool_of_width(p, resolve_width(n_threads));
}

Executor& Executor::for_threads(int n_threads) {
  Pools& p = pools();
  std::lock_guard lock(p.mutex);
  if (!p.installed) p.installed = &pool_of_width(p, resolve_width(0));
  if (n_threads <= 0 || n_threads == p.installed->width()) return *p.installed;
  return pool_of_width(p, n_threads);
}

}  // namespace escpod
