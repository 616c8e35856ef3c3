// ExternalSorter against std::sort: every record comes back, in order, through spills and
// multi-pass merges, with nothing left in the scratch folder.
#include "escpod/core/external_sort.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "test_data.hpp"

namespace escpod {
namespace {

std::vector<uint64_t> drained(ExternalSorter<uint64_t>& sorter) {
  std::vector<uint64_t> out;
  Status s = sorter.drain([&](uint64_t v) {
    out.push_back(v);
    return Status::ok();
  });
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

TEST(ExternalSorter, MatchesStdSortAcrossSpillsAndPasses) {
  const auto dir = test::scratch_dir("sort");
  std::mt19937_64 rng(5);
  // (records, run_records, fan_in, read_records): in memory only; one merge; several passes.
  struct Case {
    size_t n, run, fan_in, read;
  };
  for (const Case c : {Case{100, 1000, 4, 8}, Case{1000, 64, 64, 7}, Case{5000, 10, 3, 4},
                       Case{777, 1, 2, 1}}) {
    ExternalSorter<uint64_t> sorter(dir, ExternalSortLimits{c.run, c.fan_in, c.read});
    std::vector<uint64_t> want;
    for (size_t i = 0; i < c.n; ++i) {
      const uint64_t v = rng() % (c.n / 2 + 1);  // many repeats
      want.push_back(v);
      ASSERT_TRUE(sorter.add(v).is_ok());
    }
    EXPECT_EQ(sorter.size(), c.n);
    EXPECT_EQ(sorter.spilled(), c.n > c.run) << c.n << " records, runs of " << c.run;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(drained(sorter), want) << c.n << " records, runs of " << c.run << ", fan-in " << c.fan_in;
    // Drained: empty, and reusable.
    EXPECT_EQ(sorter.size(), 0u);
    ASSERT_TRUE(sorter.add(3).is_ok());
    ASSERT_TRUE(sorter.add(1).is_ok());
    EXPECT_EQ(drained(sorter), (std::vector<uint64_t>{1, 3}));
  }
  // Spills go to unlinked files: the folder stays empty.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ExternalSorter, StopsAtTheCallbacksError) {
  const auto dir = test::scratch_dir("stop");
  ExternalSorter<uint64_t> sorter(dir, ExternalSortLimits{4, 2, 2});
  for (uint64_t v = 20; v > 0; --v) ASSERT_TRUE(sorter.add(v).is_ok());
  std::vector<uint64_t> seen;
  Status s = sorter.drain([&](uint64_t v) {
    seen.push_back(v);
    return v == 5 ? Status::invalid_argument("five") : Status::ok();
  });
  EXPECT_EQ(s.message(), "five");
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST(ExternalSorter, UnwritableFolderIsAClearError) {
  ExternalSorter<uint64_t> sorter("/nonexistent-escpod-dir", ExternalSortLimits{2, 2, 2});
  ASSERT_TRUE(sorter.add(1).is_ok());
  ASSERT_TRUE(sorter.add(2).is_ok());
  Status s = sorter.add(3);  // the first spill
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nonexistent-escpod-dir"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace escpod
