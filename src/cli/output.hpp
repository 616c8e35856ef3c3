// Buffered output for data products (stdout or -o FILE). A consumer that closes early
// (`| head`) ends the command quietly: write() then reports closed() and callers stop.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "escpod/core/status.hpp"

namespace escpod::cli {

class Output {
 public:
  // "-" or empty: stdout. Otherwise the file is created (truncated).
  static Result<Output> open(const std::string& path);
  Output(Output&&) noexcept;
  Output& operator=(Output&&) = delete;
  ~Output();

  void write(std::string_view s) {
    m_buffer.append(s);
    if (m_buffer.size() >= kFlushAt) flush();
  }
  std::string& buffer() { return m_buffer; }  // append directly, then call maybe_flush()
  void maybe_flush() {
    if (m_buffer.size() >= kFlushAt) flush();
  }
  void flush();
  // True once the reader went away (EPIPE): stop producing, exit 0.
  bool closed() const { return m_closed; }
  // Flushes and reports a write error other than a closed pipe.
  Status finish();

 private:
  Output() = default;
  static constexpr size_t kFlushAt = 1 << 16;
  int m_fd = 1;
  bool m_owns = false;
  bool m_closed = false;
  std::string m_error;
  std::string m_path;
  std::string m_buffer;
};

}  // namespace escpod::cli
