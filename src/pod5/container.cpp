#include "pod5/container.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "footer_generated.h"

namespace escpod::pod5::detail {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status pread_exact(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::io_error(path + ": read failed at offset " + std::to_string(offset) + ": " +
                              std::strerror(errno));
    }
    if (got == 0) return Status::corrupt(path + ": unexpected end of file");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return Status::ok();
}

int64_t read_le64(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Footer strings echoed in errors may be damaged bytes: keep messages printable.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

// The footer's identity: its required fields present, the file identifier a UUID, the POD5
// version one this reader understands.
Status read_footer_fields(const fb::Footer& fbf, const std::string& path, Footer* footer) {
  if (!fbf.file_identifier() || !fbf.software() || !fbf.pod5_version() || !fbf.contents()) {
    return Status::corrupt(path + ": footer lacks a required field (file_identifier, software, "
                           "pod5_version or contents)");
  }
  footer->file_identifier = fbf.file_identifier()->str();
  footer->software = printable(fbf.software()->str());
  footer->pod5_version = fbf.pod5_version()->str();
  if (!ReadId::parse(footer->file_identifier).is_ok()) {
    return Status::corrupt(path + ": footer file_identifier is not a UUID: '" +
                           printable(footer->file_identifier) + "'");
  }
  Version version;
  if (!parse_version(footer->pod5_version, &version)) {
    return Status::corrupt(path + ": footer pod5_version is not MAJOR.MINOR.REV: '" +
                           printable(footer->pod5_version) + "'");
  }
  if (version.major > 0) {
    return Status::unsupported(path + ": POD5 version " + footer->pod5_version +
                               " is newer than this escpod understands (0.x)");
  }
  return Status::ok();
}

// Where the footer's embedded tables lie (each inside the file body before `footer_start`,
// 8-byte aligned, of a known format and type); the reads and signal tables are required.
Status read_footer_tables(const fb::Footer& fbf, uint64_t footer_start, const std::string& path, Footer* footer) {
  for (const fb::EmbeddedFile* e : *fbf.contents()) {
    if (e->format() != fb::Format_FeatherV2) {
      return Status::unsupported(path + ": embedded table of unknown format " +
                                 std::to_string(static_cast<int>(e->format())));
    }
    EmbeddedTable table{e->offset(), e->length()};
    if (table.offset < 24 || table.length < 8 ||
        static_cast<uint64_t>(table.offset) + static_cast<uint64_t>(table.length) > footer_start) {
      return Status::corrupt(path + ": embedded table range [" + std::to_string(table.offset) +
                             ", +" + std::to_string(table.length) + ") outside the file body");
    }
    if (table.offset % 8 != 0) {
      return Status::corrupt(path + ": embedded table at offset " + std::to_string(table.offset) +
                             " is not 8-byte aligned");
    }
    switch (static_cast<int>(e->content_type())) {
      case 0: footer->reads = table; break;
      case 1: footer->signal = table; break;
      case 4: footer->run_info = table; break;
      default:
        return Status::unsupported(path + ": unknown embedded table type " +
                                   std::to_string(static_cast<int>(e->content_type())));
    }
  }
  if (!footer->reads.present() || !footer->signal.present()) {
    return Status::corrupt(path + ": footer lacks the " +
                           std::string(footer->reads.present() ? "signal" : "reads") + " table");
  }
  return Status::ok();
}

}  // namespace

bool parse_version(const std::string& text, Version* out) {
  int parts[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, parts[i]);
    if (ec != std::errc() || parts[i] < 0) return false;
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return false;
      ++p;
    }
  }
  if (p != end) return false;
  *out = Version{parts[0], parts[1], parts[2]};
  return true;
}

Result<Footer> read_footer(const std::filesystem::path& path_fs, uint64_t* file_size) {
  const std::string path = path_fs.string();
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    if (errno == ENOENT) return Status::not_found(path + ": no such file");
    return Status::io_error(path + ": cannot open: " + std::strerror(errno));
  }
  off_t end = ::lseek(f.fd, 0, SEEK_END);
  if (end < 0) return Status::io_error(path + ": cannot seek: " + std::strerror(errno));
  const auto size = static_cast<uint64_t>(end);
  if (file_size) *file_size = size;
  // Smallest possible file: signature, marker, footer magic, length, marker, signature.
  constexpr uint64_t kMinSize = 8 + 16 + 8 + 8 + 16 + 8;
  if (size == 0) return Status::corrupt(path + ": not a POD5 file (empty file)");
  uint8_t head[24];
  ESCPOD_RETURN_IF_ERROR(pread_exact(f.fd, head, std::min<uint64_t>(24, size), 0, path));
  if (size < 8 || std::memcmp(head, kSignature, 8) != 0) {
    return Status::corrupt(path + ": not a POD5 file (no POD5 signature at the start)");
  }
  if (size < kMinSize) {
    return Status::corrupt(path + ": truncated POD5 file (" + std::to_string(size) + " bytes)");
  }
  uint8_t tail[32];
  ESCPOD_RETURN_IF_ERROR(pread_exact(f.fd, tail, 32, size - 32, path));
  if (std::memcmp(tail + 24, kSignature, 8) != 0) {
    return Status::corrupt(path + ": truncated or damaged POD5 file (no signature at the end)");
  }
  const int64_t footer_len = read_le64(tail);
  if (footer_len <= 0 || static_cast<uint64_t>(footer_len) > size - 32 - 24 - 8) {
    return Status::corrupt(path + ": bad footer length " + std::to_string(footer_len) +
                           " for a file of " + std::to_string(size) + " bytes");
  }
  const uint64_t footer_start = size - 32 - static_cast<uint64_t>(footer_len);
  std::vector<uint8_t> buf(static_cast<size_t>(footer_len) + 8);
  ESCPOD_RETURN_IF_ERROR(pread_exact(f.fd, buf.data(), buf.size(), footer_start - 8, path));
  Footer footer;
  if (std::memcmp(buf.data(), kFooterMagic, 8) != 0) {
    footer.warnings.push_back("FOOTER magic missing before the footer");
  }
  if (std::memcmp(head + 8, tail + 8, 16) != 0) {
    footer.warnings.push_back("section marker at the end differs from the one at the start");
  }
  const uint8_t* fb_data = buf.data() + 8;
  flatbuffers::Verifier verifier(fb_data, static_cast<size_t>(footer_len));
  if (!verifier.VerifyBuffer<fb::Footer>(nullptr)) {
    return Status::corrupt(path + ": footer flatbuffer fails verification");
  }
  const fb::Footer* fbf = flatbuffers::GetRoot<fb::Footer>(fb_data);
  ESCPOD_RETURN_IF_ERROR(read_footer_fields(*fbf, path, &footer));
  ESCPOD_RETURN_IF_ERROR(read_footer_tables(*fbf, footer_start, path, &footer));
  return footer;
}

std::vector<uint8_t> build_footer(const std::string& file_identifier, const std::string& software,
                                  const std::string& pod5_version, const EmbeddedTable& signal,
                                  const EmbeddedTable& run_info, const EmbeddedTable& reads) {
  flatbuffers::FlatBufferBuilder b(512);
  auto id = b.CreateString(file_identifier);
  auto sw = b.CreateString(software);
  auto ver = b.CreateString(pod5_version);
  std::vector<flatbuffers::Offset<fb::EmbeddedFile>> files = {
      fb::CreateEmbeddedFile(b, signal.offset, signal.length, fb::Format_FeatherV2,
                             fb::ContentType_SignalTable),
      fb::CreateEmbeddedFile(b, run_info.offset, run_info.length, fb::Format_FeatherV2,
                             fb::ContentType_RunInfoTable),
      fb::CreateEmbeddedFile(b, reads.offset, reads.length, fb::Format_FeatherV2,
                             fb::ContentType_ReadsTable)};
  auto contents = b.CreateVector(files);
  b.Finish(fb::CreateFooter(b, id, sw, ver, contents));
  std::vector<uint8_t> out(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  // The footer length must be a multiple of 8 (readers locate the flatbuffer from the end).
  // A flatbuffer holding int64 fields is built 8-aligned already; pad defensively anyway.
  // Padding goes at the front would move the root; flatbuffers allows trailing bytes.
  while (out.size() % 8 != 0) out.push_back(0);
  return out;
}

}  // namespace escpod::pod5::detail
