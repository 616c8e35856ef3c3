#include "escpod/pod5/read_id.hpp"

#include <random>

namespace escpod::pod5 {
namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Result<ReadId> ReadId::parse(std::string_view text) {
  std::string_view body = text;
  if (body.size() >= 2 && body.front() == '{' && body.back() == '}') {
    body = body.substr(1, body.size() - 2);
  }
  ReadId id;
  size_t n_digits = 0;
  for (char c : body) {
    if (c == '-') continue;
    int v = hex_value(c);
    if (v < 0 || n_digits >= 32) {
      return Status::invalid_argument("not a read id (UUID): '" + std::string(text) + "'");
    }
    id.bytes[n_digits / 2] = static_cast<uint8_t>((id.bytes[n_digits / 2] << 4) | v);
    ++n_digits;
  }
  if (n_digits != 32) {
    return Status::invalid_argument("not a read id (UUID): '" + std::string(text) + "'");
  }
  return id;
}

ReadId ReadId::random() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  ReadId id;
  for (size_t i = 0; i < 16; i += 8) {
    uint64_t v = rng();
    std::memcpy(id.bytes.data() + i, &v, 8);
  }
  id.bytes[6] = static_cast<uint8_t>((id.bytes[6] & 0x0f) | 0x40);  // version 4
  id.bytes[8] = static_cast<uint8_t>((id.bytes[8] & 0x3f) | 0x80);  // variant 10
  return id;
}

void ReadId::format_to(char* out) const {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t pos = 0;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[pos++] = '-';
    out[pos++] = kHex[bytes[i] >> 4];
    out[pos++] = kHex[bytes[i] & 0xf];
  }
}

std::string ReadId::to_string() const {
  std::string s(36, '\0');
  format_to(s.data());
  return s;
}

bool ReadId::is_nil() const {
  for (uint8_t b : bytes)
    if (b != 0) return false;
  return true;
}

}  // namespace escpod::pod5
