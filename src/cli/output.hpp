// Buffered output for data products (stdout or -o FILE). A consumer that closes early
// (`| head`) ends the command quietly: write() then reports closed() and callers stop. A file is
// written as every escpod output is: staged beside its final name and renamed into place by
// finish() (synced per --fsync), never left partial, and an existing file is replaced only with
// --force.
#pragma once

#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <optional>
#include <string_view>

#include "cli/command.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"

namespace escpod::cli {

class Output {
 public:
  // "-" or empty: stdout. Otherwise the file, staged (overwrite: replace an existing one).
  static Result<Output> open(const std::string& path, bool overwrite = false, FsyncMode fsync = FsyncMode::kNone);
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
  std::optional<StagedFile> m_staged;  // a file output, renamed into place by finish()
  FsyncMode m_fsync = FsyncMode::kNone;
  bool m_closed = false;
  std::string m_error;
  std::string m_path;
  std::string m_buffer;
};

// -o/--output FILE (default: stdout) with -f/--force and --fsync, for commands whose product goes
// to stdout or a file.
struct OutputFlags {
  std::string path = "-";
  WriterFlags writer;
};
void add_output_flags(CLI::App* sub, OutputFlags& flags);
// The output the flags name; --force or --fsync with stdout is a usage error (they would be ignored).
Result<Output> open_output(const OutputFlags& flags);

// -o/--output FILE (default: stdout) with -f/--force and --fsync, for commands whose product a
// library call writes to a std::ostream as it goes (the demux stages' tables, the live replay's
// rows). `what` names the product in the help.
struct CsvOutputFlags {
  std::string output;  // empty or "-": stdout
  bool force = false;
  std::string fsync = "none";
};
void add_csv_output_flags(CLI::App* sub, CsvOutputFlags& flags, const std::string& what);
// Runs `body` on the output stream: a staged file renamed into place only when body succeeds, or
// stdout. --force or --fsync with stdout is a usage error (they would be ignored).
Status with_csv_output(const CsvOutputFlags& flags, const std::function<Status(std::ostream&)>& body);

}  // namespace escpod::cli
