// Stopping long library calls without a signal, for programs that embed the library.
#pragma once

namespace escpod {

// Asks the loops that poll interrupted() (core/staged_file.hpp) to stop (true) or lets them run
// again (false), without a signal: for embedders such as the Python module, which turn Ctrl-C
// into an exception and carry on. Unlike a signal it removes no files and does not block new
// staging files. Thread-safe.
void set_cancel_requested(bool on);

}  // namespace escpod
