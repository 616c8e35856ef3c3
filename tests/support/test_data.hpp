// Where tests find the shared real data and their scratch folder.
#pragma once

#include <gtest/gtest.h>

#include "test_paths.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace escpod::test {

// Path of `relative` inside the shared data folder (CMake variable ESCPOD_SHARED_DATA).
// Fails the calling test, naming where it looked, when the file is missing: tests that need real
// data must not pass silently without it.
inline std::filesystem::path shared_data(const std::string& relative) {
  std::filesystem::path path = std::filesystem::path(shared_data_dir()) / relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "shared test data missing: " << path
                  << " (set -DESCPOD_SHARED_DATA=<folder> to where ../shared/data lives)";
  }
  return path;
}

// A fresh, empty scratch folder for one test, under the build tree.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // The nn suite also runs with oneDNN's ISA capped (avx2:, sse41: in ctest), possibly at the
  // same time as the uncapped run: each cap gets its own folder.
  const char* isa_cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  std::filesystem::path dir = std::filesystem::path(test_tmp_dir()) /
                              (std::string(info ? info->test_suite_name() : "t") + "." +
                               (info ? info->name() : "x") + "." + name + (isa_cap ? std::string(".") + isa_cap : ""));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The bytes of a file (empty when it cannot be read), and a file made of `bytes`: for tests that
// damage a file in place.
inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
inline void write_file_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace escpod::test
