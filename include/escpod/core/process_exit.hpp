// Teardown a command-line process can leave to the kernel.
//
// A command that pulls 100 reads out of 10 files spends ~10% of its ~25 ms tearing down what it
// is done with: unmapping each input (a page-table walk and a TLB flush per file), freeing Arrow's
// readers, then the process's static destructors (bench/results/index.md, Session 10). When the
// process ends right after the command, the kernel releases all of it at exit in one pass. The
// CLI says so once, before running a command; every other caller (the Python module, tests,
// programs embedding the library) keeps the default, and objects are destroyed as usual.
#pragma once

#include <type_traits>
#include <utility>

namespace escpod {

// Declares that the process exits as soon as the current command returns (the CLI's main only).
void set_process_ends_after_command(bool on);
bool process_ends_after_command();

// Hands an object its owner is done with to process exit when process_ends_after_command()
// (never destroyed: the kernel reclaims its memory, mappings and descriptors); otherwise leaves
// it to be destroyed as usual when the caller's variable goes out of scope. Only for objects
// whose destructors release resources and do nothing else (no output is written or removed).
template <class T>
void leave_to_process_exit(T& object) {
  if (process_ends_after_command()) (void)new std::decay_t<T>(std::move(object));
}

}  // namespace escpod
