// ReadIdGuard against a plain std::unordered_set / map: random ids with repeats near and far,
// small limits so the window turns over and the sorted runs spill and merge in several passes.
#include "escpod/pod5/read_id_guard.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <unordered_set>
#include <vector>

#include "escpod/pod5/file_writer.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

ReadId random_id(std::mt19937_64& rng) {
  ReadId id;
  const uint64_t a = rng(), b = rng();
  std::memcpy(id.bytes.data(), &a, 8);
  std::memcpy(id.bytes.data() + 8, &b, 8);
  return id;
}

ReadIdGuardLimits small_limits() {
  ReadIdGuardLimits l;
  l.window = 5;
  l.sort = ExternalSortLimits{16, 2, 3};
  return l;
}

// Property: insert says "repeat" only for true repeats; find_duplicate reports exactly the
// smallest id recorded twice (insert's rejections are not recorded), with the two smallest
// sources it came from; nothing when every recorded id is distinct.
TEST(ReadIdGuard, AgreesWithUnorderedSet) {
  const auto dir = test::scratch_dir("guard");
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 60; ++trial) {
    ReadIdGuard guard(dir, small_limits());
    std::unordered_set<ReadId, ReadIdHash> seen;
    std::map<ReadId, std::vector<uint32_t>> recorded;  // id -> sources, as the guard keeps them
    std::vector<ReadId> pool;
    const int n = 50 + static_cast<int>(rng() % 400);
    const int repeats = trial % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % 3);  // a third: none
    for (int i = 0; i < n; ++i) {
      ReadId id = random_id(rng);
      if (repeats > 0 && !pool.empty() && static_cast<int>(rng() % n) < repeats) {
        // A repeat: of a recent id (caught at once) or of any earlier one (caught at the end).
        id = rng() % 2 ? pool.back() : pool[rng() % pool.size()];
      }
      const uint32_t source = static_cast<uint32_t>(rng() % 4);
      const bool fresh = seen.insert(id).second;
      auto r = guard.insert(id, source);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      if (!*r) {
        ASSERT_FALSE(fresh) << "insert " << i << " called a new id a repeat";
        continue;
      }
      recorded[id].push_back(source);
      pool.push_back(id);
    }
    const ReadId* want = nullptr;
    for (auto& [id, sources] : recorded) {
      if (sources.size() >= 2) {
        std::sort(sources.begin(), sources.end());
        want = &id;
        break;
      }
    }
    auto dup = guard.find_duplicate();
    ASSERT_TRUE(dup.is_ok()) << dup.status().to_string();
    ASSERT_EQ(dup->has_value(), want != nullptr) << "trial " << trial;
    if (want) {
      EXPECT_EQ((*dup)->id, *want);
      EXPECT_EQ((*dup)->first_source, recorded[*want][0]);
      EXPECT_EQ((*dup)->second_source, recorded[*want][1]);
    }
    EXPECT_EQ(guard.size(), 0u);  // consumed
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // spills were unlinked files
}

TEST(ReadIdGuard, ManyDistinctIdsSpillAndPass) {
  const auto dir = test::scratch_dir("many");
  std::mt19937_64 rng(3);
  ReadIdGuard guard(dir, small_limits());
  for (int i = 0; i < 20000; ++i) {
    auto r = guard.insert(random_id(rng), 0);
    ASSERT_TRUE(r.is_ok() && *r);
  }
  auto dup = guard.find_duplicate();
  ASSERT_TRUE(dup.is_ok());
  EXPECT_FALSE(dup->has_value());
}

// A repeat too far apart for add_read's window fails finish(), and nothing is left behind.
TEST(FileWriter, DuplicateBeyondTheWindowFailsFinish) {
  const auto dir = test::scratch_dir("far");
  const auto path = dir / "far.pod5";
  auto writer = FileWriter::create(path);
  ASSERT_TRUE(writer.is_ok());
  RunInfo ri;
  ri.acquisition_id = "acq";
  ASSERT_TRUE((*writer)->add_run_info(ri).is_ok());
  ReadRecord r;
  r.run_info = "acq";
  r.end_reason = "signal_positive";
  std::mt19937_64 rng(11);
  ReadId first;
  const int n = 40000;  // past the window (8192) and one sorted run (32768): a spill
  for (int i = 0; i < n; ++i) {
    r.read_id = random_id(rng);
    if (i == 0) first = r.read_id;
    ASSERT_TRUE((*writer)->add_read(r, {}).is_ok()) << i;
  }
  r.read_id = first;
  ASSERT_TRUE((*writer)->add_read(r, {}).is_ok());  // too far back to see now
  Status s = (*writer)->close();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate read id " + first.to_string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path.string()), std::string::npos) << s.message();
  writer->reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

}  // namespace
}  // namespace escpod::pod5
