#include "escpod/nn/npy.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace escpod::nn {
namespace {

// Value of `key` in the header dict text, e.g. "'descr': '<f4'" -> "'<f4'".
std::string dict_value(const std::string& header, const std::string& key) {
  const std::string k = "'" + key + "'";
  size_t p = header.find(k);
  if (p == std::string::npos) return {};
  p = header.find(':', p + k.size());
  if (p == std::string::npos) return {};
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') {
    const size_t e = header.find(')', p);
    return e == std::string::npos ? std::string{} : header.substr(p, e - p + 1);
  }
  size_t e = p;
  if (p < header.size() && header[p] == '\'') {
    e = header.find('\'', p + 1);
    return e == std::string::npos ? std::string{} : header.substr(p, e - p + 1);
  }
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  return header.substr(p, e - p);
}

}  // namespace

Result<NpyArray> read_npy(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::not_found(fmt::format("{}: no such file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("{}: cannot open", path.string()));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    return Status::corrupt(fmt::format("{}: not a .npy file (bad magic)", path.string()));
  }
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) return Status::corrupt(fmt::format("{}: truncated header", path.string()));
    header_len = static_cast<uint32_t>(b[0] | (b[1] << 8));
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return Status::corrupt(fmt::format("{}: truncated header", path.string()));
    header_len = static_cast<uint32_t>(b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24));
  } else {
    return Status::unsupported(fmt::format("{}: .npy version {}", path.string(), major));
  }
  if (header_len > (1u << 20)) return Status::corrupt(fmt::format("{}: header of {} bytes", path.string(), header_len));
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return Status::corrupt(fmt::format("{}: truncated header", path.string()));
  const std::string descr = dict_value(header, "descr");
  if (descr != "'<f4'") {
    return Status::unsupported(fmt::format("{}: dtype {} (float32 '<f4' expected)", path.string(), descr.empty() ? "?" : descr));
  }
  if (dict_value(header, "fortran_order").find("False") == std::string::npos) {
    return Status::unsupported(fmt::format("{}: Fortran order (C order expected)", path.string()));
  }
  const std::string shape_text = dict_value(header, "shape");
  if (shape_text.size() < 2) return Status::corrupt(fmt::format("{}: no shape in header", path.string()));
  NpyArray arr;
  int64_t n = 1;
  std::string num;
  for (char c : shape_text.substr(1)) {
    if (c >= '0' && c <= '9') {
      num += c;
    } else if (!num.empty()) {
      arr.shape.push_back(std::stoll(num));
      n *= arr.shape.back();
      num.clear();
    }
  }
  arr.data.resize(static_cast<size_t>(n));
  if (!in.read(reinterpret_cast<char*>(arr.data.data()), static_cast<std::streamsize>(n * 4))) {
    return Status::corrupt(fmt::format("{}: data shorter than shape {} needs", path.string(), shape_text));
  }
  return arr;
}

Status write_npy(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != static_cast<int64_t>(data.size())) {
    return Status::invalid_argument(fmt::format("write_npy: {} values for a shape of {}", data.size(), n));
  }
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::io_error(fmt::format("{}: cannot create", path.string()));
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  const char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  if (!out) return Status::io_error(fmt::format("{}: write failed", path.string()));
  return Status::ok();
}

}  // namespace escpod::nn
