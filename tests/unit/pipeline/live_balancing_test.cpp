// Live barcode balancing: WarpDemuX's live TOML configs read natively (every test config of
// WarpDemuX with the values its keys say, and bad configs with errors naming file and key), and
// the balancing policy's decisions, hand-computed step by step (docs/live_config.md).
#include "escpod/pipeline/live/balancing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "test_data.hpp"

namespace escpod::pipeline::live {
namespace {

namespace fs = std::filesystem;

constexpr size_t kWdx12 = 12;  // WDX12: the model of WarpDemuX's test configs

// <shared>/reference/warpdemux-live/test_configs: the shared data folder's sibling.
fs::path reference_configs() {
  return fs::path(test::shared_data_dir()).parent_path() / "reference" / "warpdemux-live" / "test_configs";
}

LiveConfig read_reference(const std::string& name) {
  fs::path path = reference_configs() / name;
  EXPECT_TRUE(fs::is_regular_file(path)) << "WarpDemuX reference config missing: " << path;
  auto r = read_live_config(path, kWdx12);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : LiveConfig{};
}

LiveConfig parse_ok(const std::string& text, size_t num_barcodes = 3) {
  auto r = parse_live_config(text, "t.toml", num_barcodes);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string() << "\n" << text;
  return r.is_ok() ? *r : LiveConfig{};
}

// The error message of a config that must fail with kInvalidArgument.
std::string parse_error(const std::string& text, size_t num_barcodes = 3) {
  auto r = parse_live_config(text, "t.toml", num_barcodes);
  EXPECT_FALSE(r.is_ok()) << "parsed:\n" << text;
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  return r.status().message();
}

BalancingPolicy make_policy(const LiveConfig& config, uint64_t seed = 7) {
  auto r = BalancingPolicy::create(config, seed);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r).value();
}

// A flongle run on channels 1..4 with one balancer of everything (channel_frac 1).
std::string small_config(const std::string& balancer, const std::string& extra = "") {
  return "[flowcell]\nflowcell_type = \"flongle\"\nmin_channel = 1\nmax_channel = 4\n" + extra + "\n[[balancers]]\n" +
         balancer;
}

std::vector<bool> bools(std::initializer_list<int> bits) {
  std::vector<bool> out;
  for (int b : bits) out.push_back(b != 0);
  return out;
}

std::vector<size_t> channel_counts(const LiveConfig& c) {
  std::vector<size_t> out;
  for (const BalancerConfig& b : c.balancers) out.push_back(b.channel_count);
  return out;
}

// The channel counts the policy assigns, checking the channels are disjoint and cover the run.
std::vector<size_t> assigned_counts(const BalancingPolicy& policy, size_t run_channels) {
  std::vector<size_t> out;
  std::set<int> all;
  for (const auto& s : policy.state()) {
    out.push_back(s.channels.size());
    EXPECT_TRUE(std::is_sorted(s.channels.begin(), s.channels.end())) << s.name;
    all.insert(s.channels.begin(), s.channels.end());
  }
  EXPECT_EQ(all.size(), run_channels);
  EXPECT_EQ(std::accumulate(out.begin(), out.end(), size_t{0}), run_channels);
  return out;
}

// ---- every WarpDemuX test config ----

TEST(LiveConfigReference, EveryTestConfigOfWarpDemuXParses) {
  ASSERT_TRUE(fs::is_directory(reference_configs())) << "missing: " << reference_configs();
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(reference_configs())) {
    if (entry.path().extension() != ".toml") continue;
    ++n;
    auto r = read_live_config(entry.path(), kWdx12);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->warnings.empty()) << entry.path() << ": " << r->warnings.front();
    auto policy = BalancingPolicy::create(*r, 1);
    ASSERT_TRUE(policy.is_ok()) << policy.status().to_string();
    EXPECT_EQ(assigned_counts(*policy, r->channels().size()), channel_counts(*r)) << entry.path();
  }
  EXPECT_EQ(n, 7u);  // a new reference config should get its own value checks below
}

TEST(LiveConfigReference, OnlyNoneUsesEveryDefaultItDoesNotSet) {
  LiveConfig c = read_reference("config_only_none.toml");
  EXPECT_EQ(c.model_name, "WDX12_rna002_v0_4_4");
  EXPECT_EQ(c.flowcell_type, "flongle");
  EXPECT_EQ(c.flowcell_channels, 126);
  EXPECT_EQ(c.min_channel, 1);
  EXPECT_EQ(c.max_channel, 126);
  EXPECT_EQ(c.nproc_segmentation, 2);
  EXPECT_EQ(c.nproc_classification, 4);
  EXPECT_EQ(c.max_missed_start_offset, 400);
  EXPECT_EQ(c.max_chunk_size, 12000);
  EXPECT_EQ(c.min_chunk_size, 2500);      // default
  EXPECT_EQ(c.min_adapter_length, 2500);  // default: min_chunk_size
  EXPECT_DOUBLE_EQ(c.repeated_unblock_time_window, 1.5);
  EXPECT_DOUBLE_EQ(c.repeated_unblock_duration_2, 0.5);
  EXPECT_DOUBLE_EQ(c.repeated_unblock_duration_3, 2.0);
  EXPECT_DOUBLE_EQ(c.pred_conf_threshold, 0.2);
  EXPECT_DOUBLE_EQ(c.reject_duration, 0.1);
  EXPECT_EQ(c.max_signal_after_polya, 1500);
  EXPECT_EQ(c.save_path, "results");
  EXPECT_DOUBLE_EQ(c.save_every_sec, 5);
  ASSERT_EQ(c.balancers.size(), 1u);
  const BalancerConfig& b = c.balancers[0];
  EXPECT_EQ(b.name, "none");
  EXPECT_EQ(b.type, BalanceType::kNone);
  EXPECT_DOUBLE_EQ(b.balance_threshold, 0.05);
  EXPECT_DOUBLE_EQ(b.min_stat, 100);
  EXPECT_EQ(b.channel_frac, 1.0);
  EXPECT_FALSE(b.channel_num.has_value());
  EXPECT_FALSE(b.reject_duration.has_value());
  EXPECT_TRUE(b.watch_for_missing);
  EXPECT_DOUBLE_EQ(b.wait_to_see, 900);
  EXPECT_EQ(b.blacklist, std::vector<bool>(12, false));
  EXPECT_EQ(b.ignorelist, std::vector<bool>(12, false));
  EXPECT_TRUE(std::all_of(b.max_stats.begin(), b.max_stats.end(), [](double m) { return std::isinf(m); }));
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{126}));
}

TEST(LiveConfigReference, OnlyRejectAllIgnoresBarcode06) {
  LiveConfig c = read_reference("config_only_reject_all.toml");
  ASSERT_EQ(c.balancers.size(), 1u);
  EXPECT_EQ(c.balancers[0].type, BalanceType::kRejectAll);
  EXPECT_EQ(c.balancers[0].name, "reject_all");
  EXPECT_EQ(c.balancers[0].ignorelist, bools({0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(c.balancers[0].blacklist, std::vector<bool>(12, false));
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{126}));
}

TEST(LiveConfigReference, OnlyAdapterCountBlacklists08AndIgnores00) {
  LiveConfig c = read_reference("config_only_adapter_count.toml");
  ASSERT_EQ(c.balancers.size(), 1u);
  const BalancerConfig& b = c.balancers[0];
  EXPECT_EQ(b.type, BalanceType::kAdapterCount);
  EXPECT_EQ(b.name, "adapter_count");
  EXPECT_EQ(b.blacklist, bools({0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(b.ignorelist, bools({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(c.save_every_sec, 5);
}

TEST(LiveConfigReference, OnlyBaseNormalizationKeepsItsPod5Keys) {
  LiveConfig c = read_reference("config_only_base_normalization.toml");
  ASSERT_EQ(c.balancers.size(), 1u);
  const BalancerConfig& b = c.balancers[0];
  EXPECT_EQ(b.type, BalanceType::kBaseNormalization);
  EXPECT_DOUBLE_EQ(b.min_stat, 50);
  EXPECT_EQ(b.pod5_watch_dir, "warpdemux/../test_data/live_balancing");
  EXPECT_DOUBLE_EQ(b.pod5_check_interval, 0.5);
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{126}));
}

TEST(LiveConfigReference, OnlyReadCountLeavesSevenFlongleChannelsToAnAddedNoneBalancer) {
  LiveConfig c = read_reference("config_only_read_count.toml");
  ASSERT_EQ(c.balancers.size(), 2u);
  EXPECT_EQ(c.balancers[0].type, BalanceType::kReadCount);
  EXPECT_DOUBLE_EQ(c.balancers[0].balance_threshold, 0.4);
  EXPECT_DOUBLE_EQ(c.balancers[0].min_stat, 10);
  EXPECT_EQ(c.balancers[0].channel_frac, 0.95);
  EXPECT_FALSE(c.balancers[0].implicit);
  EXPECT_EQ(c.balancers[1].name, "unused_channels");
  EXPECT_EQ(c.balancers[1].type, BalanceType::kNone);
  EXPECT_TRUE(c.balancers[1].implicit);
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{119, 7}));  // floor(0.95 x 126) = 119
  EXPECT_DOUBLE_EQ(c.save_every_sec, 0.5);
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(assigned_counts(p, 126), (std::vector<size_t>{119, 7}));
}

TEST(LiveConfigReference, MultipleAdapterCountOnMinionGivesLeftoversToItsNoneBalancer) {
  LiveConfig c = read_reference("config_multiple_adapter_count.toml");
  EXPECT_EQ(c.flowcell_type, "minion");
  EXPECT_EQ(c.max_channel, 512);
  ASSERT_EQ(c.balancers.size(), 3u);  // no added balancer: the `none` one takes the rest
  EXPECT_EQ(c.balancers[0].name, "adapter_count1");
  EXPECT_EQ(c.balancers[0].blacklist[8], true);
  EXPECT_EQ(c.balancers[0].ignorelist[0], true);
  EXPECT_TRUE(c.balancers[0].watch_for_missing);
  EXPECT_EQ(c.balancers[1].name, "adapter_count2");
  EXPECT_DOUBLE_EQ(c.balancers[1].min_stat, 30);
  EXPECT_EQ(c.balancers[1].blacklist[3], true);
  EXPECT_FALSE(c.balancers[1].watch_for_missing);
  EXPECT_DOUBLE_EQ(c.balancers[1].max_stats[1], 40);
  EXPECT_TRUE(std::isinf(c.balancers[1].max_stats[0]));
  EXPECT_EQ(c.balancers[2].name, "none");
  EXPECT_EQ(c.balancers[2].type, BalanceType::kNone);
  EXPECT_EQ(c.balancers[2].blacklist[3], true);
  EXPECT_FALSE(c.balancers[2].implicit);
  // floor(0.4 x 512) = 204 twice, floor(0.1 x 512) = 51 plus the 53 left over.
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{204, 204, 104}));
  EXPECT_DOUBLE_EQ(c.save_every_sec, 3);
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(assigned_counts(p, 512), (std::vector<size_t>{204, 204, 104}));
}

TEST(LiveConfigReference, MultipleWithRejectDurationsOnFlongle) {
  LiveConfig c = read_reference("config_multiple_adapter_count_reject_duration.toml");
  EXPECT_EQ(c.model_name, "WDX12_rna002_v0_4_2");
  EXPECT_DOUBLE_EQ(c.pred_conf_threshold, 0.27);
  ASSERT_EQ(c.balancers.size(), 3u);
  EXPECT_EQ(c.balancers[0].reject_duration, 0.1);
  EXPECT_EQ(c.balancers[1].reject_duration, 0.2);
  EXPECT_EQ(c.balancers[2].reject_duration, 0.3);
  // floor(0.4 x 126) = 50 twice, floor(0.1 x 126) = 12 plus the 14 left over.
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{50, 50, 26}));
  BalancingPolicy p = make_policy(c);
  auto s = p.state();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0].reject_duration, 0.1);
  EXPECT_DOUBLE_EQ(s[1].reject_duration, 0.2);
  EXPECT_DOUBLE_EQ(s[2].reject_duration, 0.3);
  // A blacklisted barcode on the adapter_count2 channels is rejected with that balancer's duration.
  PolicyAction a = p.decide(s[1].channels.front(), ReadCall::kClassified, 3, 0.9, 10, 0);
  EXPECT_TRUE(a.unblock);
  EXPECT_EQ(a.reason, "blacklisted");
  EXPECT_EQ(a.balancer, "adapter_count2");
  EXPECT_DOUBLE_EQ(a.unblock_seconds, 0.2);
}

// ---- bad configs ----

void expect_contains(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

TEST(LiveConfigErrors, UnknownBalanceTypeNamesFileLineAndKey) {
  std::string m = parse_error(small_config("balance_type = \"adapter_cnt\"\n"));
  expect_contains(m, {"t.toml:7:", "[[balancers]] #1 balance_type", "unknown balance type 'adapter_cnt'", "adapter_count"});
  expect_contains(parse_error(small_config("balance_type = \"block_safety\"\n")), {"does not implement"});
}

TEST(LiveConfigErrors, ChannelFracAndChannelNumTogether) {
  std::string m = parse_error(small_config("channel_frac = 0.5\nchannel_num = 2\n"));
  expect_contains(m, {"t.toml:8:", "[[balancers]] #1 channel_num", "not both"});
}

TEST(LiveConfigErrors, FractionsSummingPastOne) {
  std::string m = parse_error(small_config("channel_frac = 0.6\n[[balancers]]\nname = \"b\"\nchannel_frac = 0.5\n"));
  expect_contains(m, {"t.toml", "channel_frac values sum to 1.1"});
  // A second balancer without a fraction takes all channels, and the message says so.
  m = parse_error(small_config("channel_frac = 0.5\n[[balancers]]\nname = \"b\"\n"));
  expect_contains(m, {"sum to 1.5", "without channel_frac or channel_num takes them all"});
  m = parse_error(small_config("channel_num = 3\n[[balancers]]\nname = \"b\"\nchannel_num = 2\n"));
  expect_contains(m, {"ask for 5 channels (adapter_count 3, b 2) but the run has 4"});
}

TEST(LiveConfigErrors, BarcodeKeysOutOfRangeOrMisspelled) {
  expect_contains(parse_error(small_config("watch_barcode03 = false\n")),
                  {"t.toml:7:", "watch_barcode03", "out of range", "3 barcodes", "00..02"});
  expect_contains(parse_error(small_config("max_barcode12 = 5\n"), 12), {"max_barcode12", "out of range"});
  expect_contains(parse_error(small_config("blacklist_barcode1 = true\n")), {"blacklist_barcode01"});
  expect_contains(parse_error(small_config("max_barcodeXY = 5\n")), {"two-digit barcode index"});
  expect_contains(parse_error(small_config("blacklist_barcode01 = true\nwatch_barcode01 = false\n")),
                  {"blacklist_barcode01", "both blacklisted and not watched"});
}

TEST(LiveConfigErrors, WrongValueTypes) {
  expect_contains(parse_error(small_config("min_stat = \"100\"\n")),
                  {"t.toml:7:", "[[balancers]] #1 min_stat", "expected a number, got a string"});
  expect_contains(parse_error(small_config("watch_for_missing = 1\n")), {"expected true or false, got an integer"});
  expect_contains(parse_error(small_config("channel_num = 2.0\n")), {"channel_num", "expected an integer"});
  expect_contains(parse_error(small_config("name = \"x\"\n", "[acquisition]\nmax_chunk_size = 12000.5\n")),
                  {"t.toml:6:", "[acquisition] max_chunk_size", "expected an integer, got a floating-point number"});
  expect_contains(parse_error(small_config("", "[balancing]\nreject_duration = 0\n")),
                  {"[balancing] reject_duration", "must be a finite number > 0, got 0"});
  expect_contains(parse_error(small_config("", "[balancing]\npred_conf_threshold = 1.5\n")),
                  {"pred_conf_threshold", ">= 0 and <= 1"});
  expect_contains(parse_error("model = \"WDX12\"\n" + small_config("")), {"expected a [model] table"});
  expect_contains(parse_error(small_config("", "[acquisition]\nmin_chunk_size = 5000\nmax_chunk_size = 4000\n")),
                  {"min_chunk_size", "above max_chunk_size 4000"});
}

TEST(LiveConfigErrors, UnknownKeysAndSectionsAreErrorsWithAHint) {
  expect_contains(parse_error(small_config("balance_treshold = 0.1\n")),
                  {"t.toml:7:", "[[balancers]] #1 balance_treshold: unknown key (did you mean 'balance_threshold'?)"});
  expect_contains(parse_error(small_config("", "[acquisition]\nmax_chunk_sise = 10\n")),
                  {"[acquisition] max_chunk_sise: unknown key (did you mean 'max_chunk_size'?)"});
  expect_contains(parse_error(small_config("", "[acquisition]\nmax_signal_after_polya = 10\n")),
                  {"[acquisition] max_signal_after_polya: unknown key (it belongs in [balancing])"});
  expect_contains(parse_error(small_config("", "[balancer]\nx = 1\n")), {"[balancer]: unknown section (did you mean 'balancers'?)"});
  expect_contains(parse_error(small_config("channels = [1, 2]\n")), {"channels: unknown key"});
  expect_contains(parse_error(small_config("", "[reporting]\nruntime = 3\n")), {"[reporting] runtime: unknown key"});
}

TEST(LiveConfigErrors, FlowcellSectionAndChannelRange) {
  expect_contains(parse_error("[[balancers]]\n"), {"t.toml: [flowcell]: section missing"});
  expect_contains(parse_error("[flowcell]\nflowcell_type = \"gridion\"\n[[balancers]]\n"),
                  {"t.toml:2:", "[flowcell] flowcell_type", "unknown flowcell type 'gridion'"});
  expect_contains(parse_error("[flowcell]\nmin_channel = 3\n[[balancers]]\n"), {"flowcell_type is required"});
  expect_contains(parse_error("[flowcell]\nflowcell_type = \"flongle\"\nmax_channel = 200\n[[balancers]]\n"),
                  {"t.toml:3:", "[flowcell] max_channel", "<= 126, got 200"});
  expect_contains(parse_error("[flowcell]\nflowcell_type = \"flongle\"\nmin_channel = 9\nmax_channel = 8\n[[balancers]]\n"),
                  {"max_channel", "below min_channel 9"});
  expect_contains(parse_error("[flowcell]\nflowcell_type = \"flongle\"\nchannel_num = 512\n[[balancers]]\n"),
                  {"a flongle flowcell has 126 channels"});
  EXPECT_EQ(parse_ok("[flowcell]\nflowcell_type = \"flongle\"\nchannel_num = 126\n[[balancers]]\n").max_channel, 126);
}

TEST(LiveConfigErrors, BalancerListNamesAndSyntax) {
  expect_contains(parse_error("[flowcell]\nflowcell_type = \"minion\"\n"), {"no balancer configured"});
  expect_contains(parse_error(small_config("channel_frac = 0.5\n[[balancers]]\nchannel_frac = 0.5\n")),
                  {"[[balancers]] #2 name: 'adapter_count' is already used by [[balancers]] #1"});
  expect_contains(parse_error(small_config("name = \"unused_channels\"\nbalance_type = \"reject_all\"\nchannel_frac = 0.5\n")),
                  {"[[balancers]] #1 name: 'unused_channels' is the name of the `none` balancer added"});
  expect_contains(parse_error("balancers = 3\n[flowcell]\nflowcell_type = \"minion\"\n"), {"expected [[balancers]] entries"});
  auto r = parse_live_config("[flowcell\nflowcell_type = 1\n", "t.toml", 3);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  expect_contains(r.status().message(), {"t.toml:1:", "not valid TOML"});
  auto zero = parse_live_config(small_config(""), "t.toml", 0);
  EXPECT_FALSE(zero.is_ok());
}

TEST(LiveConfigErrors, MissingFileIsNotFoundNamingThePath) {
  auto r = read_live_config("/nonexistent/live.toml", 12);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  expect_contains(r.status().message(), {"/nonexistent/live.toml"});
}

TEST(LiveConfigWarnings, KeysWithoutEffectForTheirTypeAreReported) {
  LiveConfig c = parse_ok(small_config("balance_type = \"none\"\nmax_barcode01 = 5\npred_conf_threshold = 0.5\n"
                                       "pod5_watch_dir = \"x\"\n"));
  ASSERT_EQ(c.warnings.size(), 3u);
  expect_contains(c.warnings[0], {"t.toml:9:", "pred_conf_threshold", "not used"});
  expect_contains(c.warnings[1], {"t.toml:10:", "pod5_watch_dir", "no effect for balance_type none"});
  expect_contains(c.warnings[2], {"t.toml:8:", "max_barcode01", "no effect for balance_type none"});
}

// ---- the policy ----

// One classified read on channel 1 at run time 10 s, just at the adapter end.
PolicyAction classify(BalancingPolicy& p, int barcode, double now = 10, uint64_t after = 0) {
  return p.decide(1, ReadCall::kClassified, barcode, 0.9, now, after);
}

struct Step {
  int barcode;
  bool unblock;
  const char* reason;
};

void run_steps(BalancingPolicy& p, const std::vector<Step>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    PolicyAction a = classify(p, steps[i].barcode);
    EXPECT_EQ(a.unblock, steps[i].unblock) << "step " << i + 1;
    EXPECT_EQ(a.reason, steps[i].reason) << "step " << i + 1;
    EXPECT_DOUBLE_EQ(a.unblock_seconds, steps[i].unblock ? 0.1 : 0.0) << "step " << i + 1;
  }
}

TEST(BalancingPolicy, AdapterCountHandComputed) {
  LiveConfig c = parse_ok(small_config("min_stat = 2\nbalance_threshold = 0.6\nmax_barcode02 = 3\nwatch_for_missing = false\n"));
  BalancingPolicy p = make_policy(c);
  // stat after each step in the comments; mean over non-listed barcodes; reject when
  // stat - mean > 0.6 x mean.
  run_steps(p, {
                   {0, false, "min_stat"},    // [1,0,0]
                   {0, false, "min_stat"},    // [2,0,0]
                   {0, true, "unbalanced"},   // 2 - 2/3 > 0.4
                   {1, false, "min_stat"},    // [2,1,0]
                   {1, false, "min_stat"},    // [2,2,0]
                   {0, false, "balanced"},    // 2 - 4/3 < 0.8 -> [3,2,0]
                   {0, true, "unbalanced"},   // 3 - 5/3 > 1.0
                   {2, false, "min_stat"},    // [3,2,1]
                   {2, false, "min_stat"},    // [3,2,2]
                   {2, false, "balanced"},    // 2 - 7/3 < 1.4 -> [3,2,3]
                   {2, false, "balanced"},    // 3 is not above max 3 -> [3,2,4]
                   {2, true, "max_stat"},     // 4 > max 3: blacklisted
                   {2, true, "blacklisted"},  //
                   {1, false, "balanced"},    // mean of [3,2] = 2.5 -> [3,3,4]
                   {0, false, "balanced"},    // 3 - 3 = 0 -> [4,3,4]
                   {0, false, "balanced"},    // 4 - 3.5 < 2.1 -> [5,3,4]
               });
  auto s = p.state();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].stat, (std::vector<double>{5, 3, 4}));
  EXPECT_EQ(s[0].blacklist, bools({0, 0, 1}));
  EXPECT_EQ(s[0].accepted, (std::vector<uint64_t>{5, 3, 4}));
  EXPECT_EQ(s[0].rejected, (std::vector<uint64_t>{2, 0, 2}));
  EXPECT_EQ(s[0].decisions_by_reason, (std::map<std::string, uint64_t>{
                                          {"min_stat", 6}, {"unbalanced", 2}, {"balanced", 6}, {"max_stat", 1}, {"blacklisted", 1}}));
  EXPECT_EQ(s[0].channels, (std::vector<int>{1, 2, 3, 4}));
}

TEST(BalancingPolicy, AdapterCountIgnoredBarcodesAndAnEmptyValidSum) {
  LiveConfig c = parse_ok(small_config("min_stat = 0\nwatch_barcode01 = false\nblacklist_barcode02 = true\n"
                                       "watch_for_missing = false\n"));
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(classify(p, 1).reason, "ignored");              // counted, but outside the balance
  EXPECT_EQ(classify(p, 0).reason, "valid_sum_seen_zero");  // only barcode 0 is valid, and it has 0
  EXPECT_EQ(classify(p, 0).reason, "balanced");             // 1 - 1 = 0
  EXPECT_EQ(classify(p, 2).reason, "blacklisted");
  EXPECT_EQ(p.state()[0].stat, (std::vector<double>{2, 1, 0}));
}

TEST(BalancingPolicy, ClassifierConfidenceBelowThresholdIsUnclassified) {
  LiveConfig c = parse_ok(small_config("balance_type = \"reject_all\"\n", "[balancing]\npred_conf_threshold = 0.3\n"));
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(p.decide(1, ReadCall::kClassified, 0, 0.29, 1, 0).reason, "below_conf_pred");
  EXPECT_EQ(p.decide(1, ReadCall::kClassified, 0, std::nan(""), 1, 0).reason, "below_conf_pred");
  EXPECT_EQ(p.decide(1, ReadCall::kClassified, 0, 0.3, 1, 0).reason, "reject_all");
  EXPECT_EQ(p.state()[0].rejected, (std::vector<uint64_t>{1, 0, 0}));  // only the classified one
}

TEST(BalancingPolicy, RejectAllRejectsEverythingButItsIgnoreList) {
  LiveConfig c = parse_ok(small_config("balance_type = \"reject_all\"\nwatch_barcode01 = false\n"));
  BalancingPolicy p = make_policy(c);
  PolicyAction a = classify(p, 0);
  EXPECT_TRUE(a.unblock);
  EXPECT_EQ(a.reason, "reject_all");
  EXPECT_EQ(a.balancer, "reject_all");
  EXPECT_DOUBLE_EQ(a.unblock_seconds, 0.1);
  a = classify(p, 1);
  EXPECT_FALSE(a.unblock);
  EXPECT_EQ(a.reason, "ignored");
  EXPECT_TRUE(a.registered);
  EXPECT_EQ(p.decide(1, ReadCall::kUnclassified, -1, 0, 10, 0).reason, "below_conf_pred");
  EXPECT_TRUE(p.decide(1, ReadCall::kUnclassified, -1, 0, 10, 0).unblock);
  EXPECT_TRUE(p.decide(1, ReadCall::kOutlier, -1, 0, 10, 0).unblock);
  EXPECT_TRUE(p.decide(1, ReadCall::kFailed, -1, 0, 10, 0).unblock);
  EXPECT_EQ(p.state()[0].stat, (std::vector<double>{0, 1, 0}));  // counted only on accept
}

TEST(BalancingPolicy, NoneAcceptsAllButItsBlacklist) {
  LiveConfig c = parse_ok(small_config("balance_type = \"none\"\nblacklist_barcode02 = true\n"));
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(classify(p, 0).reason, "no_balancing");
  PolicyAction a = classify(p, 2);
  EXPECT_TRUE(a.unblock);
  EXPECT_EQ(a.reason, "blacklisted");
  for (ReadCall call : {ReadCall::kUnclassified, ReadCall::kOutlier, ReadCall::kFailed}) {
    EXPECT_FALSE(p.decide(2, call, -1, 0, 10, 0).unblock);
  }
  EXPECT_EQ(p.decide(2, ReadCall::kOutlier, -1, 0, 10, 0).reason, "outlier_detected");
  EXPECT_EQ(p.decide(2, ReadCall::kFailed, -1, 0, 10, 0).reason, "failed_read");
  PolicyAction junk = p.decide(2, ReadCall::kNotRealRead, -1, 0, 10, 0);
  EXPECT_TRUE(junk.unblock);
  EXPECT_EQ(junk.reason, "not_real_read");
  // Long after wait_to_see, the blacklist still holds: watch_for_missing is for balancing types.
  EXPECT_EQ(classify(p, 2, 5000).reason, "blacklisted");
  auto s = p.state();
  EXPECT_EQ(s[0].stat, (std::vector<double>{0, 0, 0}));  // a none balancer keeps no statistic
  EXPECT_EQ(s[0].ignorelist, bools({0, 0, 0}));
  EXPECT_FALSE(s[0].missing_check_pending);
}

TEST(BalancingPolicy, ReadCountLearnsFromSequencedReads) {
  LiveConfig c = parse_ok(small_config("balance_type = \"read_count\"\nmin_stat = 1\nbalance_threshold = 0\n"
                                       "watch_for_missing = false\n"), 2);
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(classify(p, 0).reason, "min_stat");
  EXPECT_TRUE(classify(p, 0).registered);   // still min_stat: nothing sequenced yet
  p.record_sequenced(1, 0, 1.5);            // stat [1,0]
  EXPECT_EQ(classify(p, 0).reason, "unbalanced");  // 1 - 0.5 > 0
  EXPECT_EQ(classify(p, 1).reason, "min_stat");
  p.record_sequenced(1, 1, 0.01);  // under 20 bases: not counted
  EXPECT_EQ(classify(p, 0).reason, "unbalanced");
  p.record_sequenced(1, 1, 0.5);   // stat [1,1]
  p.record_sequenced(1, 1, 0.5);   // no accepted barcode-1 read left to match
  p.record_sequenced(99, 1, 0.5);  // no balancer
  EXPECT_EQ(classify(p, 0).reason, "balanced");  // 1 - 1 = 0
  auto s = p.state();
  EXPECT_EQ(s[0].stat, (std::vector<double>{1, 1}));
  EXPECT_EQ(s[0].sequenced_reads, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(s[0].sequenced_kbases, (std::vector<double>{1.5, 0.5}));
  EXPECT_EQ(s[0].sequenced_too_short, 1u);
  EXPECT_EQ(s[0].sequenced_unmatched, 1u);
  EXPECT_EQ(p.untracked_sequenced(), 1u);
}

TEST(BalancingPolicy, BaseNormalizationBalancesKbases) {
  LiveConfig c = parse_ok(small_config("balance_type = \"base_normalization\"\nmin_stat = 2\nbalance_threshold = 0.05\n"
                                       "watch_for_missing = false\n"), 2);
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(classify(p, 0).reason, "min_stat");
  EXPECT_EQ(classify(p, 1).reason, "min_stat");
  p.record_sequenced(1, 0, 3.0);
  p.record_sequenced(1, 1, 1.0);                   // stat [3,1]
  EXPECT_EQ(classify(p, 0).reason, "unbalanced");  // 3 - 2 > 0.1
  EXPECT_EQ(classify(p, 1).reason, "min_stat");    // 1 kbase < 2
  p.record_sequenced(1, 1, 2.5);                   // stat [3,3.5]
  EXPECT_EQ(classify(p, 0).reason, "balanced");    // 3 - 3.25 < 0
  EXPECT_EQ(classify(p, 1).reason, "unbalanced");  // 3.5 - 3.25 > 0.1625
  EXPECT_EQ(p.state()[0].stat, (std::vector<double>{3, 3.5}));
}

TEST(BalancingPolicy, WatchForMissingIgnoresBarcodesUnderMinStatAfterWaitToSee) {
  LiveConfig c = parse_ok(small_config("min_stat = 2\nwait_to_see = 100\nblacklist_barcode02 = true\n"));
  BalancingPolicy p = make_policy(c);
  EXPECT_EQ(classify(p, 0, 10).reason, "min_stat");
  EXPECT_EQ(classify(p, 0, 10).reason, "min_stat");     // [2,0,0]
  EXPECT_EQ(classify(p, 0, 50).reason, "unbalanced");   // 2 - 1 > 0.05
  EXPECT_EQ(classify(p, 0, 100).reason, "unbalanced");  // not yet: only after wait_to_see
  EXPECT_TRUE(p.state()[0].missing_check_pending);
  EXPECT_EQ(classify(p, 0, 100.5).reason, "balanced");  // barcode 1 now ignored: 2 - 2 = 0
  EXPECT_EQ(classify(p, 1, 101).reason, "ignored");
  EXPECT_EQ(classify(p, 2, 101).reason, "blacklisted");  // a blacklist outlives the check
  auto s = p.state();
  EXPECT_EQ(s[0].ignorelist, bools({0, 1, 0}));
  EXPECT_EQ(s[0].blacklist, bools({0, 0, 1}));
  EXPECT_FALSE(s[0].missing_check_pending);
}

TEST(BalancingPolicy, RepeatedUnblocksOnAChannelEscalate) {
  LiveConfig c = parse_ok(small_config("balance_type = \"reject_all\"\nreject_duration = 0.3\n"));
  BalancingPolicy p = make_policy(c);
  auto junk = [&](int channel, double t) { return p.decide(channel, ReadCall::kNotRealRead, -1, 0, t, 0).unblock_seconds; };
  EXPECT_DOUBLE_EQ(junk(1, 10.0), 0.1);  // first: [balancing] reject_duration
  EXPECT_DOUBLE_EQ(junk(1, 10.5), 0.5);  // within 1.5 s of the last
  EXPECT_DOUBLE_EQ(classify(p, 0, 10.7).unblock_seconds, 0.3);  // balancing rejects do not escalate
  EXPECT_DOUBLE_EQ(junk(1, 11.0), 2.0);
  EXPECT_DOUBLE_EQ(junk(1, 12.0), 2.0);  // and stays there while they keep coming
  EXPECT_DOUBLE_EQ(junk(2, 12.1), 0.1);  // per channel
  EXPECT_DOUBLE_EQ(junk(1, 14.0), 0.1);  // 2 s since the last: reset
  EXPECT_DOUBLE_EQ(junk(1, 15.4), 0.5);
  // At run start (t < window) the first unblock is still the first.
  BalancingPolicy q = make_policy(parse_ok(small_config(
      "", "[acquisition]\nrepeated_unblock_time_window = 1.0\nrepeated_unblock_duration_2 = 0.7\n"
          "repeated_unblock_duration_3 = 3.0\n[balancing]\nreject_duration = 0.2\n")));
  auto junk_q = [&](double t) { return q.decide(3, ReadCall::kNotRealRead, -1, 0, t, 0).unblock_seconds; };
  EXPECT_DOUBLE_EQ(junk_q(0.0), 0.2);
  EXPECT_DOUBLE_EQ(junk_q(0.5), 0.7);
  EXPECT_DOUBLE_EQ(junk_q(1.0), 3.0);
  EXPECT_DOUBLE_EQ(junk_q(2.0), 0.2);  // exactly the window since the last: not within it
}

TEST(BalancingPolicy, TooLateToRejectAcceptsWithoutCounting) {
  LiveConfig c = parse_ok(small_config("blacklist_barcode00 = true\nmin_stat = 0\n", "[balancing]\nmax_signal_after_polya = 1500\n"));
  BalancingPolicy p = make_policy(c);
  EXPECT_TRUE(classify(p, 0, 10, 1500).unblock);  // at the limit: still rejected
  PolicyAction a = classify(p, 0, 10, 1501);
  EXPECT_FALSE(a.unblock);
  EXPECT_EQ(a.reason, "too_late_to_reject");
  EXPECT_FALSE(a.registered);
  EXPECT_DOUBLE_EQ(a.unblock_seconds, 0);
  EXPECT_EQ(p.decide(1, ReadCall::kNotRealRead, -1, 0, 10, 99999).reason, "too_late_to_reject");
  auto s = p.state();
  EXPECT_EQ(s[0].stat, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(s[0].accepted, (std::vector<uint64_t>{1, 0, 0}));
  EXPECT_EQ(s[0].rejected, (std::vector<uint64_t>{1, 0, 0}));
  EXPECT_EQ(s[0].decisions_by_reason.at("too_late_to_reject"), 2u);
}

std::string multi_config() {
  return "[flowcell]\nflowcell_type = \"flongle\"\nmax_channel = 10\n"
         "[[balancers]]\nname = \"ac\"\nchannel_num = 4\n"
         "[[balancers]]\nbalance_type = \"reject_all\"\nchannel_frac = 0.3\n";
}

TEST(BalancingPolicy, MultiBalancerRoutesByChannelAndAcceptsUntrackedOnes) {
  LiveConfig c = parse_ok(multi_config());
  ASSERT_EQ(c.balancers.size(), 3u);
  EXPECT_EQ(channel_counts(c), (std::vector<size_t>{4, 3, 3}));
  BalancingPolicy p = make_policy(c);
  auto s = p.state();
  EXPECT_EQ(s[2].name, "unused_channels");
  EXPECT_EQ(p.decide(s[1].channels[0], ReadCall::kClassified, 0, 1, 1, 0).reason, "reject_all");
  EXPECT_EQ(p.decide(s[2].channels[0], ReadCall::kClassified, 0, 1, 1, 0).reason, "no_balancing");
  EXPECT_EQ(p.decide(s[0].channels[0], ReadCall::kClassified, 0, 1, 1, 0).balancer, "ac");
  EXPECT_EQ(p.balancer_index(s[1].channels[2]), 1u);
  for (int channel : {0, 11, 126}) {
    PolicyAction a = p.decide(channel, ReadCall::kNotRealRead, 0, 1, 1, 0);
    EXPECT_FALSE(a.unblock);
    EXPECT_EQ(a.reason, "untracked_channel");
    EXPECT_EQ(a.balancer, "");
    EXPECT_FALSE(p.balancer_index(channel).has_value());
  }
  EXPECT_EQ(p.untracked_decisions(), 3u);
  PolicyAction bad = p.decide(s[0].channels[0], ReadCall::kClassified, 7, 1, 1, 0);
  EXPECT_EQ(bad.reason, "invalid_barcode");
  EXPECT_FALSE(bad.unblock);
}

TEST(BalancingPolicy, ChannelAssignmentIsDeterministicForASeed) {
  LiveConfig c = parse_ok(multi_config());
  auto channels_of = [&](std::vector<int> run, uint64_t seed) {
    auto p = BalancingPolicy::create(c, run, seed);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    std::vector<std::vector<int>> out;
    for (const auto& s : p->state()) out.push_back(s.channels);
    return out;
  };
  std::vector<int> run{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int> reversed(run.rbegin(), run.rend());
  auto a = channels_of(run, 42);
  EXPECT_EQ(a, channels_of(run, 42));
  EXPECT_EQ(a, channels_of(reversed, 42));  // the order channels are given in does not matter
  EXPECT_NE(a, channels_of(run, 43));
  // Pinned: SplitMix64 + Fisher-Yates give this on every platform (docs/live_config.md §4.2).
  // (Cross-checked against an independent Python model of the same algorithm.)
  EXPECT_EQ(a, (std::vector<std::vector<int>>{{1, 6, 9, 10}, {5, 7, 8}, {2, 3, 4}}));
  // A channel list of the caller's: the counts follow its size (floor(0.3 x 20) = 6).
  std::vector<int> twenty(20);
  std::iota(twenty.begin(), twenty.end(), 101);
  auto b = channels_of(twenty, 42);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].size(), 4u);
  EXPECT_EQ(b[1].size(), 6u);
  EXPECT_EQ(b[2].size(), 10u);
  EXPECT_GE(b[0].front(), 101);
}

TEST(BalancingPolicy, CreateRejectsBadChannelLists) {
  LiveConfig c = parse_ok(multi_config());
  std::vector<int> dup{1, 2, 2, 3, 4, 5, 6, 7, 8, 9};
  auto r = BalancingPolicy::create(c, dup, 1);
  ASSERT_FALSE(r.is_ok());
  expect_contains(r.status().message(), {"t.toml", "channel 2 given twice"});
  std::vector<int> few{1, 2, 3};  // channel_num 4 does not fit
  r = BalancingPolicy::create(c, few, 1);
  ASSERT_FALSE(r.is_ok());
  expect_contains(r.status().message(), {"ask for 4 channels", "the run has 3"});
  EXPECT_FALSE(BalancingPolicy::create(c, std::vector<int>{}, 1).is_ok());
  EXPECT_FALSE(BalancingPolicy::create(c, std::vector<int>{0, 1, 2, 3, 4}, 1).is_ok());
}

}  // namespace
}  // namespace escpod::pipeline::live
