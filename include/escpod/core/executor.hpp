// The process's thread pool. Every parallel loop and stream of the library runs inside an
// Executor instead of starting threads of its own: the CLI installs one with the `-t` width once
// per process (Executor::install), and components asked for n threads run in it
// (Executor::for_threads), so a command never runs more than -t workers however its layers nest.
#pragma once

#include <tbb/task_arena.h>

#include <memory>
#include <utility>

namespace escpod {

class Executor {
 public:
  // A pool of `n_threads` (0 or less: every core). The calling thread counts as one of them
  // while it is inside execute(): n_threads - 1 workers join it.
  explicit Executor(int n_threads);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Threads that run work inside execute() (the calling thread included).
  int width() const { return m_width; }

  // Runs `f` on the calling thread inside the pool: tbb::parallel_for, task groups and the
  // ordered stream called from `f` use this pool's threads only. Nesting is fine: execute()
  // from inside the same pool just runs `f`.
  template <class F>
  decltype(auto) execute(F&& f) {
    return m_arena->execute(std::forward<F>(f));
  }

  // Makes the process's pool `n_threads` wide (the CLI, once from -t, before any work).
  static void install(int n_threads);
  // The pool for a component asked for `n_threads`: the installed pool when n_threads is 0 or
  // less or equals its width; otherwise a pool of that width created on first use and kept for
  // the rest of the process (library callers and tests that ask for a given width). Never a
  // pool per call. Thread-safe.
  static Executor& for_threads(int n_threads);

 private:
  int m_width;
  std::unique_ptr<tbb::task_arena> m_arena;
};

}  // namespace escpod
