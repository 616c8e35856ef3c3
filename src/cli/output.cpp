#include "cli/output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace escpod::cli {

Result<Output> Output::open(const std::string& path) {
  Output out;
  out.m_path = path.empty() || path == "-" ? "stdout" : path;
  if (!(path.empty() || path == "-")) {
    out.m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out.m_fd < 0) return Status::io_error("cannot write " + path + ": " + std::strerror(errno));
    out.m_owns = true;
  }
  out.m_buffer.reserve(kFlushAt * 2);
  return out;
}

Output::Output(Output&& o) noexcept
    : m_fd(o.m_fd), m_owns(o.m_owns), m_closed(o.m_closed), m_error(std::move(o.m_error)),
      m_path(std::move(o.m_path)), m_buffer(std::move(o.m_buffer)) {
  o.m_owns = false;
}

Output::~Output() {
  flush();
  if (m_owns) ::close(m_fd);
}

void Output::flush() {
  const char* p = m_buffer.data();
  size_t left = m_buffer.size();
  while (left > 0 && !m_closed) {
    ssize_t n = ::write(m_fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EPIPE && m_error.empty()) m_error = std::strerror(errno);
      m_closed = true;  // either the reader left or the output is broken: stop producing
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  m_buffer.clear();
}

Status Output::finish() {
  flush();
  if (!m_error.empty()) return Status::io_error("cannot write " + m_path + ": " + m_error);
  return Status::ok();
}

}  // namespace escpod::cli
