#include "cli/output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

namespace escpod::cli {

Result<Output> Output::open(const std::string& path, bool overwrite, FsyncMode fsync) {
  Output out;
  out.m_path = path.empty() || path == "-" ? "stdout" : path;
  if (!(path.empty() || path == "-")) {
    ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(path, overwrite));
    const std::string staging = staged.staging_path().string();
    out.m_fd = ::open(staging.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (out.m_fd < 0) return Status::io_error("cannot write " + staging + ": " + std::strerror(errno));
    out.m_owns = true;
    out.m_staged.emplace(std::move(staged));
    out.m_fsync = fsync;
  }
  out.m_buffer.reserve(kFlushAt * 2);
  return out;
}

Output::Output(Output&& o) noexcept
    : m_fd(o.m_fd), m_owns(o.m_owns), m_staged(std::move(o.m_staged)), m_fsync(o.m_fsync), m_closed(o.m_closed),
      m_error(std::move(o.m_error)), m_path(std::move(o.m_path)), m_buffer(std::move(o.m_buffer)) {
  o.m_owns = false;
  o.m_staged.reset();
}

// A file output not finished (an error on the way) leaves nothing: its staging file is removed.
Output::~Output() {
  if (!m_staged) flush();
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
  if (!m_staged) return Status::ok();
  const bool closed = ::close(m_fd) == 0;
  m_owns = false;
  if (!closed) return Status::io_error("cannot write " + m_path + ": " + std::strerror(errno));
  Status s = m_staged->commit(m_fsync);
  m_staged.reset();
  return s;
}

void add_output_flags(CLI::App* sub, OutputFlags& flags) {
  sub->add_option("-o,--output", flags.path, "Write to this file instead of stdout");
  add_staging_flags(sub, flags.writer);
}

Result<Output> open_output(const OutputFlags& flags) {
  const bool to_stdout = flags.path.empty() || flags.path == "-";
  if (to_stdout && (flags.writer.force || flags.writer.fsync != "none")) {
    return Status::usage(std::string(flags.writer.force ? "--force" : "--fsync") +
                         " would be ignored: the output is stdout (give -o FILE)");
  }
  ESCPOD_ASSIGN_OR_RETURN(const FsyncMode fsync, parse_fsync_mode(flags.writer.fsync));
  return Output::open(flags.path, flags.writer.force, fsync);
}

void add_csv_output_flags(CLI::App* sub, CsvOutputFlags& flags, const std::string& what) {
  sub->add_option("-o,--output", flags.output, what + " (default: standard output)");
  add_force_flag(sub, flags.force);
  add_fsync_flag(sub, flags.fsync);
}

Status with_csv_output(const CsvOutputFlags& flags, const std::function<Status(std::ostream&)>& body) {
  const bool to_stdout = flags.output.empty() || flags.output == "-";
  if (to_stdout && (flags.force || flags.fsync != "none")) {
    return Status::usage(std::string(flags.force ? "--force" : "--fsync") +
                         " would be ignored: the output is stdout (give -o FILE)");
  }
  ESCPOD_ASSIGN_OR_RETURN(const FsyncMode fsync, parse_fsync_mode(flags.fsync));
  if (to_stdout) {
    ESCPOD_RETURN_IF_ERROR(body(std::cout));
    std::cout.flush();
    return Status::ok();
  }
  ESCPOD_ASSIGN_OR_RETURN(StagedFile file, StagedFile::create(flags.output, flags.force));
  {
    std::ofstream out(file.staging_path(), std::ios::binary | std::ios::trunc);
    if (!out) return Status::io_error("cannot write " + file.staging_path().string());
    ESCPOD_RETURN_IF_ERROR(body(out));
    out.close();
    if (!out) return Status::io_error("cannot write " + file.staging_path().string());
  }
  return file.commit(fsync);
}

}  // namespace escpod::cli
