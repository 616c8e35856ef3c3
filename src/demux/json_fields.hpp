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
#include "escpod/demux/model_file.hpp"

namespace escpod::demux::detail {

// Ordered: a block copied from one model into another keeps its key order.
using Json = nlohmann::ordered_json;

// Reads and parses a whole JSON file: io_error if it cannot be read, corrupt on a syntax error
// (with nlohmann's position message). Counted by model_json_parse_count().
Result<Json> parse_json_file(const std::filesystem::path& path);
// The same for text; `where` names its source in messages.
Result<Json> parse_json_text(const std::string& text, const std::string& where);

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

// The one parser of a `signal_processing` object (signal_processing.cpp); `where` names the file.
Result<SignalProcessing> signal_processing_from_json(const Json& block, const std::string& where);
// ... and its writer (serialize_signal_processing is this, dumped).
Json signal_processing_json(const SignalProcessing& s);

// Builders of the parsed classifiers from a model file's top-level object (the bodies of
// WarpDemuxModel::load and GbmModel::load, which are friends of this struct).
struct ModelBuilder {
  static Result<WarpDemuxModel> dtw_svm(const Json& j, const std::filesystem::path& path);
  static Result<GbmModel> gbm(const Json& j, const std::filesystem::path& path);
};

}  // namespace escpod::demux::detail
