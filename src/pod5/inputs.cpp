#include "escpod/pod5/inputs.hpp"

#include <algorithm>
#include <set>

namespace escpod::pod5 {

Result<std::vector<std::filesystem::path>> collect_inputs(const std::vector<std::string>& inputs,
                                                          std::string_view extension, std::string_view kind) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::set<fs::path> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(p, ec);
    if (ec) canonical = p;
    if (seen.insert(canonical).second) out.push_back(p);
  };
  for (const auto& input : inputs) {
    std::error_code ec;
    fs::path p(input);
    auto status = fs::status(p, ec);
    if (ec || !fs::exists(status)) return Status::not_found(input + ": no such file or directory");
    if (fs::is_directory(status)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file() && it->path().extension() == extension &&
            it->path().filename().string().rfind(".escpod-tmp-", 0) != 0) {
          found.push_back(it->path());
        }
      }
      if (ec) return Status::io_error(input + ": cannot list: " + ec.message());
      std::sort(found.begin(), found.end());
      for (const auto& f : found) add(f);
    } else {
      add(p);
    }
  }
  if (out.empty()) return Status::invalid_argument("no " + std::string(kind) + " files found in the inputs given");
  return out;
}

Result<std::vector<std::filesystem::path>> collect_pod5_inputs(const std::vector<std::string>& inputs) {
  return collect_inputs(inputs, ".pod5", "POD5");
}

}  // namespace escpod::pod5

#include <fstream>
#include <iostream>

namespace escpod::pod5 {

Result<std::vector<ReadId>> read_id_list(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  const bool is_stdin = path == "-" || path == "stdin";
  if (!is_stdin) {
    file.open(path);
    if (!file) return Status::not_found(path + ": cannot open the read id list");
    in = &file;
  }
  std::vector<ReadId> ids;
  std::string line;
  size_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (auto sep = line.find_first_of(",\t"); sep != std::string::npos) line.resize(sep);
    auto first = line.find_first_not_of(" \r\n");
    if (first == std::string::npos) continue;
    auto last = line.find_last_not_of(" \r\n");
    std::string_view text(line.data() + first, last - first + 1);
    if (text == "read_id") continue;
    auto id = ReadId::parse(text);
    if (!id.is_ok()) {
      return Status::invalid_argument((is_stdin ? std::string("stdin") : path) + " line " +
                                      std::to_string(line_no) + ": '" + std::string(text) +
                                      "' is not a read id");
    }
    ids.push_back(*id);
  }
  return ids;
}

std::vector<uint64_t> file_sizes(const std::vector<std::filesystem::path>& paths, uint64_t* total) {
  std::vector<uint64_t> sizes;
  sizes.reserve(paths.size());
  for (const auto& p : paths) {
    std::error_code ec;
    sizes.push_back(std::filesystem::file_size(p, ec));
    if (ec) sizes.back() = 0;
    *total += sizes.back();
  }
  return sizes;
}

}  // namespace escpod::pod5
