// Small CSV helpers shared by the pipeline's table readers and writers: a line reader for plain
// or gzip text, a cell splitter, and a cell writer that quotes when needed. Internal.
#pragma once

#include <zlib.h>

#include <charconv>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pipeline::detail {

// ---- text input (plain or gzip) -------------------------------------------------------------

class LineReader {
 public:
  static Result<LineReader> open(const std::filesystem::path& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) return Status::not_found(path.string() + ": cannot open");
    LineReader r;
    r.m_file.reset(f);
    r.m_buf.resize(1 << 16);
    return r;
  }
  // Next line without its terminator; false at the end. A read error is reported by error().
  bool next(std::string& line) {
    line.clear();
    while (true) {
      if (!gzgets(m_file.get(), m_buf.data(), static_cast<int>(m_buf.size()))) {
        int code = 0;
        const char* msg = gzerror(m_file.get(), &code);
        if (code != Z_OK && code != Z_STREAM_END) m_error = msg ? msg : "read error";
        if (!line.empty()) break;
        return false;
      }
      line += m_buf.data();
      if (!line.empty() && line.back() == '\n') {
        line.pop_back();
        break;
      }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++m_line_no;
    return true;
  }
  size_t line_no() const { return m_line_no; }
  const std::string& error() const { return m_error; }

 private:
  struct Closer {
    void operator()(gzFile f) const { gzclose(f); }
  };
  std::unique_ptr<gzFile_s, Closer> m_file;
  std::vector<char> m_buf;
  size_t m_line_no = 0;
  std::string m_error;
};

// Splits one CSV line into views of its cells (double-quoted cells unquoted in `storage` only
// when they contain doubled quotes; fields are trimmed of surrounding spaces).
// A whole cell as a double (from_chars: locale-free, exact round trip; a leading '+' allowed).
inline bool parse_double(std::string_view text, double& out) {
  if (text.empty()) return false;
  if (text.front() == '+') text.remove_prefix(1);
  const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

inline void split_csv(std::string_view line, std::vector<std::string_view>& cells, std::string& storage) {
  cells.clear();
  storage.clear();
  storage.reserve(line.size());
  size_t i = 0;
  while (true) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i < line.size() && line[i] == '"') {
      const size_t start = storage.size();
      ++i;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            storage += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        storage += line[i++];
      }
      cells.emplace_back(storage.data() + start, storage.size() - start);
      const size_t comma = line.find(',', i);
      if (comma == std::string_view::npos) break;
      i = comma + 1;
      continue;
    }
    const size_t comma = line.find(',', i);
    std::string_view cell =
        line.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i);
    while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
    cells.push_back(cell);
    if (comma == std::string_view::npos) break;
    i = comma + 1;
  }
}

inline void append_csv_cell(std::string& out, const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) {
    out += text;
    return;
  }
  out += '"';
  for (char c : text) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  out += '"';
}

}  // namespace escpod::pipeline::detail
