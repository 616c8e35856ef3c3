// Crash-safe outputs: every output is written to a hidden staging file in its destination folder
// and renamed into place only when complete, so the final path holds either the previous file or
// the complete new one, never a partial file. Staging files are registered process-wide so that
// an interrupted run removes them (install_interrupt_cleanup): the first SIGINT/SIGTERM stops
// the work cleanly (staging files discarded as their owners unwind, nothing committed after
// it), a second one removes what is registered and exits at once.
#pragma once

#include <filesystem>
#include <string>

#include "escpod/core/status.hpp"

namespace escpod {

// How hard to push a finished output to stable storage before renaming it into place.
enum class FsyncMode { kNone, kFile, kFull };  // kFull: the file, then its directory
Result<FsyncMode> parse_fsync_mode(std::string_view text);

class StagedFile {
 public:
  // Reserves `final_path`: refuses (kAlreadyExists) when it exists and `overwrite` is false,
  // and (kInvalidArgument) when it is a directory, device, pipe or socket, which the rename into
  // place would replace; then creates an empty staging file `.escpod-tmp-<random>.partial` beside it. kIoError names
  // the folder when it cannot be written (missing, read-only, full).
  static Result<StagedFile> create(const std::filesystem::path& final_path, bool overwrite);

  StagedFile(StagedFile&& other) noexcept;
  StagedFile& operator=(StagedFile&& other) noexcept;
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  ~StagedFile();  // removes the staging file unless committed

  const std::filesystem::path& staging_path() const { return m_staging; }
  const std::filesystem::path& final_path() const { return m_final; }

  // Syncs per `mode`, gives the file the mode of the file it replaces (else 0644) and renames it
  // over final_path. After a failed commit the staging file is removed.
  Status commit(FsyncMode mode);
  // Removes the staging file now.
  void discard();

 private:
  StagedFile() = default;
  std::filesystem::path m_final;
  std::filesystem::path m_staging;
  int m_slot = -1;  // registry slot for interrupt cleanup
  bool m_overwrite = false;
};

// A scratch path beside `final_path` registered for interrupt cleanup, for helper files an output
// needs while it is written (e.g. a POD5 writer's reads table). Removed by the returned guard.
class ScratchPath {
 public:
  static Result<ScratchPath> create(const std::filesystem::path& near, const std::string& suffix);
  ScratchPath(ScratchPath&& other) noexcept;
  ScratchPath& operator=(ScratchPath&& other) noexcept;
  ScratchPath(const ScratchPath&) = delete;
  ScratchPath& operator=(const ScratchPath&) = delete;
  ~ScratchPath();
  const std::filesystem::path& path() const { return m_path; }

 private:
  ScratchPath() = default;
  std::filesystem::path m_path;
  int m_slot = -1;
};

// Installs SIGINT/SIGTERM handlers. The first signal only sets a flag: interrupted() turns
// true, the streaming engine and the loops polling it stop with kCancelled, no new staging file
// can be created and none can be committed (StagedFile::commit fails), so the command unwinds,
// its staging files are removed by their owners, and main() exits 128 + the signal (130 for
// SIGINT, 143 for SIGTERM: interrupt_exit_code). A second signal unlinks every registered
// staging and scratch file (async-signal-safe calls only) and exits 128 + its number at once.
// Call once from main().
void install_interrupt_cleanup();
// True once an interrupt was received (long loops poll it to stop early).
bool interrupted();
// The first interrupting signal received (SIGINT or SIGTERM), 0 when none.
int interrupt_signal();
// The exit status of an interrupted run: 128 + interrupt_signal() (130 when the stop came from
// set_cancel_requested rather than a signal).
int interrupt_exit_code();

}  // namespace escpod
