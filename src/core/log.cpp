#include "escpod/core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

namespace escpod::log {
namespace {
// The one mutable global of the project: verbosity is process-wide by nature (one stderr).
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::mutex g_write_mutex;
std::string g_status_line;  // guarded by g_write_mutex

void write_all(std::string_view text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) return;  // stderr gone: nothing better to do with a log line
    p += n;
    left -= static_cast<size_t>(n);
  }
}
}  // namespace

void set_level(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
bool enabled(Level l) { return static_cast<int>(l) <= g_level.load(std::memory_order_relaxed); }

void write(Level l, std::string_view message) {
  if (!enabled(l)) return;
  std::string line = "escpod: ";
  if (l == Level::kError) line += "error: ";
  if (l == Level::kWarn) line += "warning: ";
  line += message;
  line += '\n';
  std::lock_guard lock(g_write_mutex);
  if (!g_status_line.empty()) line = "\r\x1b[K" + line + g_status_line;
  write_all(line);
}

void write_raw(std::string_view text) {
  std::lock_guard lock(g_write_mutex);
  write_all(text);
}

void draw_status_line(const std::string& line, std::string_view then) {
  std::string text = "\r" + line + "\x1b[K";
  text += then;
  std::lock_guard lock(g_write_mutex);
  g_status_line = then.empty() ? line : std::string();
  write_all(text);
}

}  // namespace escpod::log
