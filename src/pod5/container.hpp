// The POD5 outer container: signature, section markers, embedded Arrow files and the flatbuffer
// footer that locates them. Internal to the pod5 layer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5::detail {

inline constexpr uint8_t kSignature[8] = {0x8b, 'P', 'O', 'D', '\r', '\n', 0x1a, '\n'};
inline constexpr uint8_t kFooterMagic[8] = {'F', 'O', 'O', 'T', 'E', 'R', 0, 0};

enum class ContentType : int16_t { kReads = 0, kSignal = 1, kRunInfo = 4 };

struct EmbeddedTable {
  int64_t offset = -1;  // absolute, in the .pod5
  int64_t length = 0;   // exact Arrow file size, padding excluded
  bool present() const { return offset >= 0; }
};

struct Footer {
  std::string file_identifier;
  std::string software;
  std::string pod5_version;
  EmbeddedTable reads;
  EmbeddedTable signal;
  EmbeddedTable run_info;
  std::vector<std::string> warnings;  // non-fatal oddities (bad footer magic, marker mismatch)
};

// Reads the header and footer of `path` with ordinary reads (no mmap, so a truncated or
// offloaded file errors instead of faulting) and validates them: signatures at both ends, the
// footer length, the flatbuffer (verified), required fields, UUID and version text, content
// types and table ranges. Errors are kCorrupt/kUnsupported with the file name and the problem.
Result<Footer> read_footer(const std::filesystem::path& path, uint64_t* file_size);

// Serialises a footer flatbuffer padded to a multiple of 8 bytes.
std::vector<uint8_t> build_footer(const std::string& file_identifier, const std::string& software,
                                  const std::string& pod5_version, const EmbeddedTable& signal,
                                  const EmbeddedTable& run_info, const EmbeddedTable& reads);

// "MAJOR.MINOR.REV" -> comparable triple; false if the text is not three integers.
struct Version {
  int major = 0, minor = 0, rev = 0;
  friend auto operator<=>(const Version&, const Version&) = default;
};
bool parse_version(const std::string& text, Version* out);

}  // namespace escpod::pod5::detail
