#include "json_fields.hpp"

#include "escpod/demux/model_file.hpp"

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace escpod::demux::detail {

namespace {
std::atomic<uint64_t> g_parse_count{0};
}  // namespace

Result<Json> parse_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path.string() + ": cannot open model file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::io_error(path.string() + ": read failed");
  return parse_json_text(text.str(), path.string());
}

Result<Json> parse_json_text(const std::string& text, const std::string& where) {
  g_parse_count.fetch_add(1, std::memory_order_relaxed);
  // nlohmann reports syntax errors by exception only with a position; contain it here.
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return Status::corrupt(where + ": not valid JSON: " + e.what());
  }
  return j;
}

uint64_t model_json_parse_count() { return g_parse_count.load(std::memory_order_relaxed); }

Status JsonFields::error(std::string_view what) const {
  return Status::corrupt(m_file + ": " + std::string(what));
}

Result<const Json*> JsonFields::member(const Json& obj, std::string_view key) const {
  if (!obj.is_object()) return error("expected a JSON object holding '" + std::string(key) + "'");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return error("missing field '" + std::string(key) + "'");
  return &*it;
}

const Json* JsonFields::optional_member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<double> JsonFields::number(const Json& v, std::string_view what) const {
  if (!v.is_number()) return error(std::string(what) + " must be a number, found " + v.type_name());
  const double d = v.get<double>();
  if (!std::isfinite(d)) return error(std::string(what) + " must be finite");
  return d;
}

Result<int64_t> JsonFields::integer(const Json& v, std::string_view what) const {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return error(std::string(what) + " is out of range");
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  return error(std::string(what) + " must be an integer, found " +
               (v.is_number() ? std::string("a non-integral number") : std::string(v.type_name())));
}

Result<bool> JsonFields::boolean(const Json& v, std::string_view what) const {
  if (!v.is_boolean()) return error(std::string(what) + " must be true or false");
  return v.get<bool>();
}

Result<std::string> JsonFields::string(const Json& v, std::string_view what) const {
  if (!v.is_string()) return error(std::string(what) + " must be a string");
  return v.get<std::string>();
}

Status JsonFields::doubles(const Json& v, std::string_view what, size_t expected,
                           std::vector<double>& out) const {
  if (!v.is_array()) return error(std::string(what) + " must be an array");
  if (expected != std::numeric_limits<size_t>::max() && v.size() != expected) {
    return error(std::string(what) + " has " + std::to_string(v.size()) + " values, expected " +
                 std::to_string(expected));
  }
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (!e.is_number()) {
      return error(std::string(what) + "[" + std::to_string(i) + "] must be a number, found " +
                   e.type_name());
    }
    const double d = e.get<double>();
    if (!std::isfinite(d)) return error(std::string(what) + "[" + std::to_string(i) + "] is not finite");
    out.push_back(d);
  }
  return Status::ok();
}

Status JsonFields::integers(const Json& v, std::string_view what, size_t expected,
                            std::vector<int64_t>& out) const {
  if (!v.is_array()) return error(std::string(what) + " must be an array");
  if (expected != std::numeric_limits<size_t>::max() && v.size() != expected) {
    return error(std::string(what) + " has " + std::to_string(v.size()) + " values, expected " +
                 std::to_string(expected));
  }
  out.clear();
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ESCPOD_ASSIGN_OR_RETURN(int64_t x, integer(v[i], std::string(what) + "[" + std::to_string(i) + "]"));
    out.push_back(x);
  }
  return Status::ok();
}

}  // namespace escpod::demux::detail
