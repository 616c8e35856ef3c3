#include "escpod/core/staged_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace escpod {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("escpod_staged_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(StagedFile, CommitReplacesARegularFileWhole) {
  const fs::path d = fresh_dir("regular");
  const fs::path out = d / "out.csv";
  std::ofstream(out) << "old";
  EXPECT_EQ(StagedFile::create(out, false).status().code(), StatusCode::kAlreadyExists);
  auto f = StagedFile::create(out, true);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  std::ofstream(f->staging_path()) << "new";
  EXPECT_EQ(slurp(out), "old");  // nothing visible before the commit
  ASSERT_TRUE(f->commit(FsyncMode::kNone).is_ok());
  EXPECT_EQ(slurp(out), "new");
  fs::remove_all(d);
}

// A device, pipe or socket is never replaced, even with overwrite: the rename into place would
// put a regular file where it was (as root, `-o /dev/null -f` would replace /dev/null).
TEST(StagedFile, RefusesToReplaceAPipe) {
  const fs::path d = fresh_dir("fifo");
  const fs::path fifo = d / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = StagedFile::create(fifo, true);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("not a regular file"), std::string::npos) << f.status().to_string();
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a staging file was left";
  fs::remove_all(d);
}

// The check is repeated at the commit: a pipe made at the final path while the output was written
// is not replaced either, and the staging file is removed.
TEST(StagedFile, CommitRefusesAPipeThatAppearedMeanwhile) {
  const fs::path d = fresh_dir("late_fifo");
  const fs::path out = d / "out.csv";
  auto f = StagedFile::create(out, true);
  ASSERT_TRUE(f.is_ok());
  ASSERT_EQ(::mkfifo(out.c_str(), 0600), 0);
  EXPECT_EQ(f->commit(FsyncMode::kNone).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_fifo(out));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1) << "a staging file was left";
  fs::remove_all(d);
}

}  // namespace
}  // namespace escpod
