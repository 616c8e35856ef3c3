// Logging to stderr with a process-wide verbosity. Data products never go through here: they go
// to stdout or files. Thread-safe: each message is written with one write call under a lock.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace escpod::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Messages above `level` are dropped. Default kInfo; the CLI maps -q to kError and -v to kDebug.
void set_level(Level level);
Level level();
bool enabled(Level level);

// Writes "escpod: <prefix><message>\n" to stderr.
void write(Level level, std::string_view message);

// For core/progress, which shares the one stderr with log lines. write_raw writes `text` as is
// under the log lock. draw_status_line draws `line` (no newline) in place ("\r", line, erase to
// the end of the line); with `then` empty the line stays the status line, which each log::write
// erases first and redraws after its message; otherwise `then` is written after it (e.g.
// "\n" plus a summary) and no status line remains.
void write_raw(std::string_view text);
void draw_status_line(const std::string& line, std::string_view then = {});

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace escpod::log
