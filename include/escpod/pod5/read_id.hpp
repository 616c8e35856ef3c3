// Read ids: 16-byte UUIDs stored in canonical (RFC 4122, big-endian) byte order.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include "escpod/core/status.hpp"

namespace escpod::pod5 {

struct ReadId {
  std::array<uint8_t, 16> bytes{};

  // Parses 32 hex digits, any case, hyphens anywhere ignored, optional surrounding braces
  // (what the official tools accept). kInvalidArgument names the text on failure.
  static Result<ReadId> parse(std::string_view text);
  // Random version-4 UUID (for file identifiers and fresh read ids).
  static ReadId random();

  // Lowercase 8-4-4-4-12 text.
  std::string to_string() const;
  // Writes the 36 characters of to_string() to out (no terminator).
  void format_to(char* out) const;

  bool is_nil() const;
  friend bool operator==(const ReadId&, const ReadId&) = default;
  friend auto operator<=>(const ReadId&, const ReadId&) = default;
};

struct ReadIdHash {
  size_t operator()(const ReadId& id) const noexcept {
    // UUIDs are random: any 8 bytes are a good hash.
    uint64_t h;
    std::memcpy(&h, id.bytes.data() + 8, sizeof h);
    return static_cast<size_t>(h);
  }
};

}  // namespace escpod::pod5
