#include "escpod/core/process_exit.hpp"

#include <atomic>

namespace escpod {
namespace {
std::atomic<bool> g_ends_after_command{false};
}  // namespace

void set_process_ends_after_command(bool on) { g_ends_after_command.store(on, std::memory_order_relaxed); }

bool process_ends_after_command() { return g_ends_after_command.load(std::memory_order_relaxed); }

}  // namespace escpod
