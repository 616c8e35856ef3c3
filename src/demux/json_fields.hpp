// Internal: reading model JSON with errors as values. Every message starts with the file path and
// names the field and what was expected, e.g. "WDX4.json: dual_coef[2] has 850 values, expected
// 851 (n_sv)". nlohmann exceptions never escape this layer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::demux::detail {

using Json = nlohmann::json;

// Reads and parses a whole JSON file: io_error if it cannot be read, corrupt on a syntax error
// (with nlohmann's position message).
Result<Json> parse_json_file(const std::filesystem::path& path);

class JsonFields {
 public:
  explicit JsonFields(std::string file) : m_file(std::move(file)) {}

  const std::string& file() const { return m_file; }
  Status error(std::string_view what) const;

  // The member `key` of `obj`; corrupt if obj is not an object or the key is missing.
  Result<const Json*> member(const Json& obj, std::string_view key) const;
  // nullptr when missing or null.
  static const Json* optional_member(const Json& obj, std::string_view key);

  Result<double> number(const Json& v, std::string_view what) const;       // finite double
  Result<int64_t> integer(const Json& v, std::string_view what) const;     // integral number
  Result<bool> boolean(const Json& v, std::string_view what) const;
  Result<std::string> string(const Json& v, std::string_view what) const;

  // Arrays. `expected` == SIZE_MAX accepts any length. Values must be finite numbers (doubles) or
  // integral numbers (ints).
  Status doubles(const Json& v, std::string_view what, size_t expected,
                 std::vector<double>& out) const;
  Status integers(const Json& v, std::string_view what, size_t expected,
                  std::vector<int64_t>& out) const;

 private:
  std::string m_file;
};

}  // namespace escpod::demux::detail
