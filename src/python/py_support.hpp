// Helpers shared by the binding files of escpod._core.
#pragma once

#include <atomic>
#include <functional>

#include "escpod/core/status.hpp"

namespace escpod::python {

// Raises the Python exception matching `s` (FileNotFoundError, FileExistsError, ValueError,
// KeyboardInterrupt for kCancelled, RuntimeError otherwise) with its message. GIL held.
[[noreturn]] void raise_status(const Status& s);

// Runs `work` with the GIL released on a helper thread while the caller polls for signals every
// 50 ms; on Ctrl-C sets the flag `work` is given, waits for it and returns kCancelled. GIL held
// on entry and exit.
Status run_interruptible(const std::function<Status(const std::atomic<bool>&)>& work);

// n_threads <= 0: every core.
int resolve_threads(int n_threads);

}  // namespace escpod::python
