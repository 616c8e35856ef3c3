#include "escpod/core/external_sort.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace escpod::detail {

AnonymousScratchFile::AnonymousScratchFile(AnonymousScratchFile&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)), m_size(other.m_size), m_folder(std::move(other.m_folder)) {}

AnonymousScratchFile& AnonymousScratchFile::operator=(AnonymousScratchFile&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
    m_size = other.m_size;
    m_folder = std::move(other.m_folder);
  }
  return *this;
}

AnonymousScratchFile::~AnonymousScratchFile() {
  if (m_fd >= 0) ::close(m_fd);
}

Result<AnonymousScratchFile> AnonymousScratchFile::create(const std::filesystem::path& folder) {
  const std::filesystem::path dir = folder.empty() ? std::filesystem::path(".") : folder;
  std::string name = (dir / ".escpod-sort-XXXXXX").string();
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    return Status::io_error("cannot create a scratch file in " + dir.string() + ": " + std::strerror(errno));
  }
  ::unlink(name.c_str());  // anonymous from now on: the space goes back when fd closes
  AnonymousScratchFile f;
  f.m_fd = fd;
  f.m_folder = dir;
  return f;
}

Result<uint64_t> AnonymousScratchFile::append(std::span<const uint8_t> bytes) {
  const uint64_t start = m_size;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(m_fd, bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(m_size + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::io_error("cannot write a scratch file in " + m_folder.string() + ": " +
                              (n < 0 ? std::strerror(errno) : "no space written"));
    }
    done += static_cast<size_t>(n);
  }
  m_size += bytes.size();
  return start;
}

Status AnonymousScratchFile::read_at(uint64_t offset, std::span<uint8_t> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(m_fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::io_error("cannot read back a scratch file in " + m_folder.string() + ": " +
                              (n < 0 ? std::strerror(errno) : "unexpected end"));
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Status AnonymousScratchFile::truncate() {
  if (::ftruncate(m_fd, 0) != 0) {
    return Status::io_error("cannot empty a scratch file in " + m_folder.string() + ": " + std::strerror(errno));
  }
  m_size = 0;
  return Status::ok();
}

}  // namespace escpod::detail
