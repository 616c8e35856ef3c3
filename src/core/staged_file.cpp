#include "escpod/core/staged_file.hpp"

#include "escpod/core/cancel.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstring>
#include <random>

namespace escpod {
namespace {

// Registry of in-flight files, readable from a signal handler: fixed slots, each a path buffer
// guarded by an atomic state (0 free, 1 being written, 2 live).
constexpr int kSlots = 512;
constexpr size_t kPathMax = 4096;
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax]{};
};
// constinit: zero-filled at load time. With `path` left uninitialised GCC emitted a constructor
// that stored every slot's state at start-up, faulting in all 2 MiB of the table (~1 ms of every
// escpod run, measured with perf); now the pages stay untouched until a slot is used.
constinit std::array<Slot, kSlots> g_slots{};
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the first interrupting signal
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

int register_path(const std::filesystem::path& p) {
  const std::string s = p.string();
  if (s.size() + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, s.c_str(), s.size() + 1);
      g_slots[i].state.store(2);
      return i;
    }
  }
  return -1;  // registry full: the file is still cleaned up normally, just not on a signal
}

void unregister_path(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0);
}

// The first signal asks for a clean stop (see install_interrupt_cleanup); the second leaves at
// once, unlinking the registered files first: only lock-free atomics, unlink and _exit here,
// all async-signal-safe. Exit status 128 + signal number, as a shell reports a process killed
// by it (130 for SIGINT, 143 for SIGTERM).
void on_interrupt(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_interrupted.store(true);
    return;
  }
  for (auto& slot : g_slots) {
    if (slot.state.load() == 2) ::unlink(slot.path);
  }
  _exit(128 + sig);
}

std::string random_suffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s(12, 'x');
  for (char& c : s) c = kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

Status errno_status(const std::string& what, const std::filesystem::path& p) {
  return Status::io_error(what + " " + p.string() + ": " + std::strerror(errno));
}

Status fsync_path(const std::filesystem::path& p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open for fsync", p);
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) {
    errno = saved;
    return errno_status("fsync failed for", p);
  }
  return Status::ok();
}

// Creates an empty, exclusive file named `<dir>/.escpod-tmp-<random><suffix>`, registered for
// removal on a signal. The name is registered before the file exists: a signal arriving between
// creating and registering would otherwise leave the file behind (the handler unlinking a name
// that does not exist yet is harmless, and it exits at once, so nothing is created after it).
struct HiddenFile {
  std::filesystem::path path;
  int slot = -1;
};
Result<HiddenFile> create_hidden(const std::filesystem::path& dir, const std::string& suffix) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    if (g_interrupted.load()) return Status::cancelled("interrupted");
    HiddenFile h;
    h.path = dir / (".escpod-tmp-" + random_suffix() + suffix);
    h.slot = register_path(h.path);
    int fd = ::open(h.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int open_errno = errno;
    if (fd >= 0) {
      ::close(fd);
      return h;
    }
    unregister_path(h.slot);  // not ours: another file has this name, or creation failed
    errno = open_errno;
    if (open_errno != EEXIST) return errno_status("cannot create a file in", dir.empty() ? "." : dir);
  }
  return Status::io_error("cannot create a unique staging file in " + dir.string());
}

// An output never replaces a device, pipe or socket: the staged file renamed into place would
// (as root, `-o /dev/null -f` would replace the system's /dev/null with a file).
Status not_a_regular_file(const std::filesystem::path& p) {
  return Status::invalid_argument(p.string() +
                                  " is not a regular file (a device, pipe or socket); outputs are written to a "
                                  "staging file renamed into place, which would replace it");
}

}  // namespace

Result<FsyncMode> parse_fsync_mode(std::string_view text) {
  if (text == "none") return FsyncMode::kNone;
  if (text == "file") return FsyncMode::kFile;
  if (text == "full") return FsyncMode::kFull;
  return Status::usage("--fsync must be none, file or full, not '" + std::string(text) + "'");
}

Result<StagedFile> StagedFile::create(const std::filesystem::path& final_path, bool overwrite) {
  std::error_code ec;
  const std::filesystem::file_status existing = std::filesystem::status(final_path, ec);
  if (std::filesystem::exists(existing) && !overwrite) {
    return Status::already_exists(final_path.string() + " exists (use --force to overwrite)");
  }
  if (std::filesystem::is_directory(existing)) {
    return Status::invalid_argument(final_path.string() + " is a directory");
  }
  if (std::filesystem::exists(existing) && !std::filesystem::is_regular_file(existing)) {
    return not_a_regular_file(final_path);
  }
  auto dir = final_path.parent_path();
  if (dir.empty()) dir = ".";
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::not_found("output folder " + dir.string() + " does not exist");
  }
  StagedFile f;
  f.m_final = final_path;
  f.m_overwrite = overwrite;
  ESCPOD_ASSIGN_OR_RETURN(HiddenFile h, create_hidden(dir, ".partial"));
  f.m_staging = std::move(h.path);
  f.m_slot = h.slot;
  return f;
}

StagedFile::StagedFile(StagedFile&& o) noexcept
    : m_final(std::move(o.m_final)), m_staging(std::move(o.m_staging)), m_slot(o.m_slot),
      m_overwrite(o.m_overwrite) {
  o.m_staging.clear();
  o.m_slot = -1;
}

StagedFile& StagedFile::operator=(StagedFile&& o) noexcept {
  if (this != &o) {
    discard();
    m_final = std::move(o.m_final);
    m_staging = std::move(o.m_staging);
    m_slot = o.m_slot;
    m_overwrite = o.m_overwrite;
    o.m_staging.clear();
    o.m_slot = -1;
  }
  return *this;
}

StagedFile::~StagedFile() { discard(); }

void StagedFile::discard() {
  if (!m_staging.empty()) {
    ::unlink(m_staging.c_str());
    m_staging.clear();
  }
  unregister_path(m_slot);
  m_slot = -1;
}

Status StagedFile::commit(FsyncMode mode) {
  if (m_staging.empty()) return Status::internal("commit of a discarded staging file");
  if (g_interrupted.load()) {
    // A run stopped by a signal leaves no output, not even one that completed meanwhile.
    discard();
    return Status::cancelled("interrupted: " + m_final.string() + " not written");
  }
  Status s;
  if (mode != FsyncMode::kNone) s = fsync_path(m_staging, false);
  if (s.is_ok()) {
    struct stat st;
    mode_t perms = 0644;
    if (::stat(m_final.c_str(), &st) == 0) {
      perms = st.st_mode & 07777;
      if (!m_overwrite) s = Status::already_exists(m_final.string() + " appeared while writing");
      if (s.is_ok() && !S_ISREG(st.st_mode)) s = not_a_regular_file(m_final);
    }
    if (s.is_ok() && ::chmod(m_staging.c_str(), perms) != 0) s = errno_status("cannot chmod", m_staging);
  }
  if (s.is_ok() && ::rename(m_staging.c_str(), m_final.c_str()) != 0) {
    s = errno_status("cannot rename into place:", m_final);
  }
  if (!s.is_ok()) {
    discard();
    return s;
  }
  m_staging.clear();
  unregister_path(m_slot);
  m_slot = -1;
  if (mode == FsyncMode::kFull) {
    auto dir = m_final.parent_path();
    ESCPOD_RETURN_IF_ERROR(fsync_path(dir.empty() ? "." : dir, true));
  }
  return Status::ok();
}

Result<ScratchPath> ScratchPath::create(const std::filesystem::path& near, const std::string& suffix) {
  auto dir = near.parent_path();
  if (dir.empty()) dir = ".";
  ScratchPath p;
  ESCPOD_ASSIGN_OR_RETURN(HiddenFile h, create_hidden(dir, suffix));
  p.m_path = std::move(h.path);
  p.m_slot = h.slot;
  return p;
}

ScratchPath::ScratchPath(ScratchPath&& o) noexcept : m_path(std::move(o.m_path)), m_slot(o.m_slot) {
  o.m_path.clear();
  o.m_slot = -1;
}

ScratchPath& ScratchPath::operator=(ScratchPath&& o) noexcept {
  if (this != &o) {
    if (!m_path.empty()) ::unlink(m_path.c_str());
    unregister_path(m_slot);
    m_path = std::move(o.m_path);
    m_slot = o.m_slot;
    o.m_path.clear();
    o.m_slot = -1;
  }
  return *this;
}

ScratchPath::~ScratchPath() {
  if (!m_path.empty()) ::unlink(m_path.c_str());
  unregister_path(m_slot);
}

void install_interrupt_cleanup() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

namespace {
std::atomic<bool> g_cancel_requested{false};
}  // namespace

bool interrupted() {
  return g_interrupted.load(std::memory_order_relaxed) ||
         g_cancel_requested.load(std::memory_order_relaxed);
}

void set_cancel_requested(bool on) { g_cancel_requested.store(on); }

int interrupt_signal() { return g_signal.load(); }

int interrupt_exit_code() {
  const int sig = g_signal.load();
  return 128 + (sig != 0 ? sig : SIGINT);
}

}  // namespace escpod
