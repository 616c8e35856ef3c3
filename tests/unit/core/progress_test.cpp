#include "escpod/core/progress.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace escpod::progress {
namespace {

Snapshot half_done() {
  Snapshot s;
  s.label = "merge";
  s.items_done = 1234;
  s.items_total = 2468;
  s.bytes_done = 1'200'000'000;
  s.bytes_total = 2'400'000'000;
  s.elapsed_s = 12;
  return s;
}

TEST(ProgressFormat, Durations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1:00");
  EXPECT_EQ(format_duration(187), "3:07");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-5), "0s");
}

TEST(ProgressFormat, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1000), "1.00 kB");
  EXPECT_EQ(format_bytes(12'345), "12.3 kB");
  EXPECT_EQ(format_bytes(123'456), "123 kB");
  EXPECT_EQ(format_bytes(999'960), "1.00 MB");
  EXPECT_EQ(format_bytes(2'400'000'000), "2.40 GB");
}

TEST(ProgressFormat, Counts) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(1234567), "1,234,567");
}

TEST(ProgressFormat, FractionAndTimeLeft) {
  Snapshot s = half_done();
  EXPECT_DOUBLE_EQ(fraction_done(s), 0.5);
  EXPECT_DOUBLE_EQ(seconds_left(s), 12);
  s.bytes_total = 0;  // items decide then
  s.items_done = 617;
  EXPECT_DOUBLE_EQ(fraction_done(s), 0.25);
  EXPECT_DOUBLE_EQ(seconds_left(s), 36);
  s.items_total = 0;
  EXPECT_EQ(fraction_done(s), -1);
  EXPECT_EQ(seconds_left(s), -1);
  Snapshot none = half_done();
  none.items_done = none.bytes_done = 0;
  EXPECT_EQ(seconds_left(none), -1);  // nothing done: no estimate
  Snapshot all = half_done();
  all.bytes_done = all.bytes_total;
  EXPECT_EQ(seconds_left(all), -1);  // done: nothing left to estimate
  EXPECT_EQ(format_bar(all, 160).find("left"), std::string::npos);
}

TEST(ProgressFormat, BarHasEveryFieldWhenWide) {
  const std::string bar = format_bar(half_done(), 160);
  EXPECT_EQ(bar,
            "merge [###############>              ]  50% 1,234/2,468 reads 1.20 GB/2.40 GB 103 reads/s 12s ~12s left");
}

TEST(ProgressFormat, BarFitsNarrowTerminals) {
  const Snapshot s = half_done();
  for (int width : {100, 80, 60, 40, 30, 20, 10}) {
    const std::string bar = format_bar(s, width);
    EXPECT_LE(static_cast<int>(bar.size()), width) << bar;
    EXPECT_EQ(bar.find('\r'), std::string::npos);
    EXPECT_EQ(bar.find('\n'), std::string::npos);
  }
  // The bar and the percentage survive at 80 columns; the rate and bytes go first.
  const std::string at80 = format_bar(s, 80);
  EXPECT_NE(at80.find("] "), std::string::npos) << at80;
  EXPECT_NE(at80.find("50%"), std::string::npos) << at80;
  EXPECT_NE(at80.find("~12s left"), std::string::npos) << at80;
}

TEST(ProgressFormat, LineAndSummary) {
  Snapshot s = half_done();
  EXPECT_EQ(format_line(s),
            "merge: 1,234/2,468 reads (50.0%), 1.20 GB/2.40 GB, 103 reads/s, 12s elapsed, ~12s left");
  s.items_done = s.items_total;
  s.bytes_done = s.bytes_total;
  s.elapsed_s = 24;
  EXPECT_EQ(format_summary(s), "merge: done, 2,468 reads, 2.40 GB in 24s (103 reads/s)");
  s.bytes_done = s.bytes_total / 4;
  EXPECT_EQ(format_summary(s).substr(0, 26), "merge: stopped at 25.0%, 2");
  Snapshot unknown;
  unknown.label = "simulate";
  unknown.items_done = 10;
  unknown.elapsed_s = 4;
  EXPECT_EQ(format_line(unknown), "simulate: 10 reads, 2.5 reads/s, 4s elapsed");
}

// Counters from many threads at once add up exactly; a nested task joins the running one.
TEST(ProgressTask, CountsFromThreadsAndJoins) {
  set_mode(Mode::kOff);
  Task outer(0, 8000, {"outer", "reads"});
  EXPECT_FALSE(outer.is_joined());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) outer.add(1, 1);
    });
  }
  for (auto& t : threads) t.join();
  {
    Task inner(500, 999, {"inner", "reads"});
    EXPECT_TRUE(inner.is_joined());
    inner.add(500, 0);
  }
  const Snapshot s = outer.snapshot();
  EXPECT_EQ(s.label, "outer");
  EXPECT_EQ(s.items_done, 8500u);
  EXPECT_EQ(s.bytes_done, 8000u);
  EXPECT_EQ(s.items_total, 500u);   // unknown at start: the joined task filled it
  EXPECT_EQ(s.bytes_total, 8000u);  // declared: the joined task left it alone
  outer.finish();
  Task next(3, 0);
  EXPECT_FALSE(next.is_joined());  // the finished one is no longer shown
}

}  // namespace
}  // namespace escpod::progress
