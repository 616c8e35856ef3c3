// The per-read balancing policy (docs/live_config.md §4-§5): channel assignment, WarpDemuX's
// decide-on-balance rules per balancer type, the too-late-to-reject guard and the per-channel
// repeated-unblock escalation. One caller thread; the clock is the caller's.
#include "escpod/pipeline/live/balancing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include "pipeline/live/channel_plan.hpp"

namespace escpod::pipeline::live {
namespace {

constexpr size_t kReasonCount = static_cast<size_t>(Reason::kInvalidBarcode) + 1;

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator with a fixed output sequence for a seed,
// so the channel assignment is the same on every platform and standard library (§4.2).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : m_state(seed) {}
  uint64_t next() {
    uint64_t z = (m_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (rejection of the short top range).
  uint64_t below(uint64_t bound) {
    uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
    uint64_t r = next();
    while (r >= limit) r = next();
    return r % bound;
  }

 private:
  uint64_t m_state;
};

// Fisher-Yates from the back: position i swaps with a uniform j in [0, i].
void shuffle_channels(std::vector<int>& channels, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = channels.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.below(i));
    std::swap(channels[i - 1], channels[j]);
  }
}

bool is_balancing(BalanceType t) {
  return t == BalanceType::kAdapterCount || t == BalanceType::kReadCount || t == BalanceType::kBaseNormalization;
}

// A per-barcode vector of a hand-built config: empty (nothing set) or one entry per barcode.
template <typename T>
Status check_per_barcode(const std::vector<T>& v, size_t n, const BalancerConfig& b, const char* what,
                         const std::string& where) {
  if (v.empty() || v.size() == n) return Status::ok();
  return Status::invalid_argument(fmt::format("{}: balancer '{}': {} has {} entries for {} barcodes", where, b.name,
                                              what, v.size(), n));
}

Status check_balancer(const BalancerConfig& b, size_t n, const std::string& where) {
  ESCPOD_RETURN_IF_ERROR(check_per_barcode(b.blacklist, n, b, "blacklist", where));
  ESCPOD_RETURN_IF_ERROR(check_per_barcode(b.ignorelist, n, b, "ignorelist", where));
  ESCPOD_RETURN_IF_ERROR(check_per_barcode(b.max_stats, n, b, "max_stats", where));
  if (b.channel_frac && b.channel_num) {
    return Status::invalid_argument(fmt::format("{}: balancer '{}': both channel_frac and channel_num", where, b.name));
  }
  if (b.reject_duration && !(*b.reject_duration > 0 && std::isfinite(*b.reject_duration))) {
    return Status::invalid_argument(fmt::format("{}: balancer '{}': reject_duration must be > 0", where, b.name));
  }
  for (size_t i = 0; i < b.blacklist.size() && i < b.ignorelist.size(); ++i) {
    if (b.blacklist[i] && b.ignorelist[i]) {
      return Status::invalid_argument(fmt::format("{}: balancer '{}': barcode {:02d} both blacklisted and ignored",
                                                  where, b.name, i));
    }
  }
  return Status::ok();
}

// What create() needs of a config that may have been built by hand rather than parsed.
Status check_config(const LiveConfig& c) {
  if (c.num_barcodes == 0) return Status::invalid_argument(fmt::format("{}: num_barcodes is 0", c.source));
  if (!(c.reject_duration > 0) || !(c.repeated_unblock_duration_2 > 0) || !(c.repeated_unblock_duration_3 > 0)) {
    return Status::invalid_argument(fmt::format("{}: reject and repeated-unblock durations must be > 0", c.source));
  }
  if (c.balancers.empty()) return Status::invalid_argument(fmt::format("{}: no balancer configured", c.source));
  for (const BalancerConfig& b : c.balancers) ESCPOD_RETURN_IF_ERROR(check_balancer(b, c.num_barcodes, c.source));
  return Status::ok();
}

// The run's channels, ascending: each >= 1, none twice.
Result<std::vector<int>> sorted_channels(std::span<const int> channels, const std::string& where) {
  std::vector<int> out(channels.begin(), channels.end());
  std::sort(out.begin(), out.end());
  if (out.empty()) return Status::invalid_argument(fmt::format("{}: the run has no channels", where));
  if (out.front() < 1) return Status::invalid_argument(fmt::format("{}: channel {} (channels start at 1)", where, out.front()));
  auto dup = std::adjacent_find(out.begin(), out.end());
  if (dup != out.end()) return Status::invalid_argument(fmt::format("{}: channel {} given twice", where, *dup));
  return out;
}

template <typename T>
std::vector<T> sized(const std::vector<T>& v, size_t n, T fill) {
  return v.empty() ? std::vector<T>(n, fill) : v;
}

}  // namespace

std::string_view reason_name(Reason reason) {
  static constexpr std::array<std::string_view, kReasonCount> kNames{
      "untracked_channel", "blacklisted",      "ignored",         "min_stat",      "max_stat",
      "valid_sum_seen_zero", "unbalanced",     "balanced",        "no_balancing",  "reject_all",
      "outlier_detected",  "below_conf_pred",  "failed_read",     "not_real_read", "too_late_to_reject",
      "invalid_barcode",
  };
  return kNames[static_cast<size_t>(reason)];
}

namespace detail {

// The balancer's view of one read: accept or reject, why, and whether the balancer counted it.
struct Verdict {
  bool accept = true;
  Reason why = Reason::kNoBalancing;
  bool registered = false;
};

// One balancer at run time: its config and the state WarpDemuX keeps per balancer. The state a
// report shows is the BalancerState base (BalancingPolicy::state() copies it); decisions are
// counted in `reasons` and named only in that copy.
struct Balancer : BalancingPolicy::BalancerState {
  const BalancerConfig* config = nullptr;  // into Impl::config.balancers, fixed after create
  std::vector<double> max_stats;
  std::vector<uint64_t> pending;  // accepted reads not yet reported sequenced
  std::array<uint64_t, kReasonCount> reasons{};

  Balancer(const BalancerConfig& c, size_t n, double default_reject_duration)
      : config(&c),
        max_stats(sized(c.max_stats, n, std::numeric_limits<double>::infinity())),
        pending(n, 0) {
    name = c.name;
    type = c.type;
    reject_duration = c.reject_duration.value_or(default_reject_duration);
    stat.assign(n, 0.0);
    sequenced_kbases.assign(n, 0.0);
    accepted.assign(n, 0);
    rejected.assign(n, 0);
    sequenced_reads.assign(n, 0);
    blacklist = sized(c.blacklist, n, false);
    ignorelist = sized(c.ignorelist, n, false);
    missing_check_pending = c.watch_for_missing && is_balancing(c.type);
  }

  // watch_for_missing: once run time passes wait_to_see, barcodes still under min_stat go on the
  // ignore list so the balance does not stall on a barcode that is not in the library. Blacklisted
  // barcodes stay blacklisted (§5.4).
  void check_missing(double now_seconds) {
    if (!missing_check_pending || !(now_seconds > config->wait_to_see)) return;
    for (size_t i = 0; i < stat.size(); ++i) {
      if (stat[i] < config->min_stat && !blacklist[i]) ignorelist[i] = true;
    }
    missing_check_pending = false;
  }

  // WarpDemuX's decide-on-balance, in its order (§5.1).
  Verdict balance(size_t bc) {
    if (blacklist[bc]) return {false, Reason::kBlacklisted};
    if (ignorelist[bc]) return {true, Reason::kIgnored};
    if (stat[bc] < config->min_stat) return {true, Reason::kMinStat};
    if (stat[bc] > max_stats[bc]) {
      blacklist[bc] = true;
      return {false, Reason::kMaxStat};
    }
    double sum = 0;
    size_t valid = 0;
    for (size_t i = 0; i < stat.size(); ++i) {
      if (blacklist[i] || ignorelist[i]) continue;
      sum += stat[i];
      ++valid;
    }
    if (sum <= 0) return {true, Reason::kValidSumSeenZero};
    double mean = sum / static_cast<double>(valid);
    if (stat[bc] - mean > config->balance_threshold * mean) return {false, Reason::kUnbalanced};
    return {true, Reason::kBalanced};
  }

  // The verdict for a confidently classified read of barcode `bc`; counts it when accepted
  // (WarpDemuX updates a balancer only on accept).
  Verdict classified(size_t bc) {
    Verdict v;
    switch (config->type) {
      case BalanceType::kNone: v = blacklist[bc] ? Verdict{false, Reason::kBlacklisted} : Verdict{true, Reason::kNoBalancing}; break;
      case BalanceType::kRejectAll: v = ignorelist[bc] ? Verdict{true, Reason::kIgnored} : Verdict{false, Reason::kRejectAll}; break;
      default: v = balance(bc); break;
    }
    if (!v.accept) return v;
    v.registered = true;
    ++pending[bc];
    if (config->type == BalanceType::kAdapterCount || config->type == BalanceType::kRejectAll) stat[bc] += 1;
    return v;
  }

  // Counts a decision for reports: by reason, and per barcode for classified reads (bc >= 0).
  void count(int bc, bool unblocked, Reason why) {
    ++reasons[static_cast<size_t>(why)];
    if (bc < 0) return;
    ++(unblocked ? rejected : accepted)[static_cast<size_t>(bc)];
  }

  void sequenced(size_t bc, double kbases) {
    if (!(kbases >= defaults::kMinSequencedKbases)) {
      ++sequenced_too_short;
      return;
    }
    if (pending[bc] == 0) {
      ++sequenced_unmatched;
      return;
    }
    --pending[bc];
    ++sequenced_reads[bc];
    sequenced_kbases[bc] += kbases;
    if (config->type == BalanceType::kReadCount) stat[bc] += 1;
    if (config->type == BalanceType::kBaseNormalization) stat[bc] += kbases;
  }
};

// WarpDemuX's per-channel repeated-unblock escalation, on the caller's clock.
struct ChannelUnblocks {
  double last = -std::numeric_limits<double>::infinity();  // no unblock yet (§5.5)
  int count = 0;
};

}  // namespace detail

using detail::Balancer;
using detail::ChannelUnblocks;
using detail::Verdict;

struct BalancingPolicy::Impl {
  LiveConfig config;
  std::vector<Balancer> balancers;
  std::unordered_map<int, size_t> balancer_of;
  std::unordered_map<int, ChannelUnblocks> unblocks;
  uint64_t untracked_decisions = 0, untracked_sequenced = 0;

  Verdict verdict(Balancer& b, ReadCall call, int barcode) const;
  double escalated_duration(int channel, double now_seconds);
};

Verdict BalancingPolicy::Impl::verdict(Balancer& b, ReadCall call, int barcode) const {
  bool reject_all = b.config->type == BalanceType::kRejectAll;
  switch (call) {
    case ReadCall::kClassified:
      if (barcode < 0 || static_cast<size_t>(barcode) >= config.num_barcodes) return {true, Reason::kInvalidBarcode};
      return b.classified(static_cast<size_t>(barcode));
    case ReadCall::kUnclassified: return {!reject_all, Reason::kBelowConfidence};
    case ReadCall::kOutlier: return {!reject_all, Reason::kOutlier};
    case ReadCall::kFailed: return {!reject_all, Reason::kFailedRead};
    case ReadCall::kNotRealRead: return {false, Reason::kNotRealRead};
  }
  return {true, Reason::kFailedRead};
}

// The first unblock in a while gets [balancing] reject_duration; the next within the window of
// the previous one repeated_unblock_duration_2, any further one repeated_unblock_duration_3.
double BalancingPolicy::Impl::escalated_duration(int channel, double now_seconds) {
  ChannelUnblocks& u = unblocks[channel];
  bool repeated = now_seconds - u.last < config.repeated_unblock_time_window;
  u.last = now_seconds;
  u.count = repeated ? u.count + 1 : 1;
  if (u.count == 1) return config.reject_duration;
  return u.count == 2 ? config.repeated_unblock_duration_2 : config.repeated_unblock_duration_3;
}

Result<BalancingPolicy> BalancingPolicy::create(const LiveConfig& config, std::span<const int> channels, uint64_t seed) {
  ESCPOD_RETURN_IF_ERROR(check_config(config));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<int> order, sorted_channels(channels, config.source));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  std::vector<BalancerConfig>& configs = impl->config.balancers;
  ESCPOD_RETURN_IF_ERROR(detail::plan_channels(configs, order.size(), config.source));
  ESCPOD_RETURN_IF_ERROR(detail::check_balancer_names(configs, config.source));
  shuffle_channels(order, seed);
  // Each balancer, in config order, takes the next channel_count channels of the shuffled list.
  size_t next = 0;
  impl->balancers.reserve(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    Balancer& b = impl->balancers.emplace_back(configs[i], config.num_barcodes, config.reject_duration);
    b.channels.assign(order.begin() + static_cast<std::ptrdiff_t>(next),
                      order.begin() + static_cast<std::ptrdiff_t>(next + configs[i].channel_count));
    next += configs[i].channel_count;
    std::sort(b.channels.begin(), b.channels.end());
    for (int ch : b.channels) impl->balancer_of.emplace(ch, i);
  }
  for (int ch : order) impl->unblocks.emplace(ch, ChannelUnblocks{});
  return BalancingPolicy(std::move(impl));
}

Result<BalancingPolicy> BalancingPolicy::create(const LiveConfig& config, uint64_t seed) {
  std::vector<int> channels = config.channels();
  return create(config, channels, seed);
}

BalancingPolicy::BalancingPolicy(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
BalancingPolicy::BalancingPolicy(BalancingPolicy&&) noexcept = default;
BalancingPolicy& BalancingPolicy::operator=(BalancingPolicy&&) noexcept = default;
BalancingPolicy::~BalancingPolicy() = default;

PolicyAction BalancingPolicy::decide(int channel, ReadCall call, int barcode, double confidence, double now_seconds,
                                     uint64_t samples_after_adapter) {
  Impl& m = *m_impl;
  PolicyAction action;
  auto found = m.balancer_of.find(channel);
  if (found == m.balancer_of.end()) {
    ++m.untracked_decisions;
    action.why = Reason::kUntrackedChannel;
    action.reason = reason_name(action.why);
    return action;
  }
  Balancer& b = m.balancers[found->second];
  b.check_missing(now_seconds);
  // The threshold is applied here, so every caller gets WarpDemuX's rule (NaN counts as below).
  if (call == ReadCall::kClassified && !(confidence >= m.config.pred_conf_threshold)) call = ReadCall::kUnclassified;
  Verdict v = m.verdict(b, call, barcode);
  if (!v.accept && samples_after_adapter > static_cast<uint64_t>(m.config.max_signal_after_polya)) {
    v = {true, Reason::kTooLateToReject, false};
  }
  if (!v.accept) {
    action.unblock = true;
    action.unblock_seconds = call == ReadCall::kNotRealRead ? m.escalated_duration(channel, now_seconds) : b.reject_duration;
  }
  b.count(call == ReadCall::kClassified && v.why != Reason::kInvalidBarcode ? barcode : -1, action.unblock, v.why);
  action.why = v.why;
  action.reason = reason_name(v.why);
  action.balancer = b.config->name;
  action.registered = v.registered;
  return action;
}

void BalancingPolicy::record_sequenced(int channel, int barcode, double kbases) {
  Impl& m = *m_impl;
  auto found = m.balancer_of.find(channel);
  if (found == m.balancer_of.end()) {
    ++m.untracked_sequenced;
    return;
  }
  Balancer& b = m.balancers[found->second];
  if (barcode < 0 || static_cast<size_t>(barcode) >= m.config.num_barcodes) {
    ++b.sequenced_unmatched;
    return;
  }
  b.sequenced(static_cast<size_t>(barcode), kbases);
}

std::vector<BalancingPolicy::BalancerState> BalancingPolicy::state() const {
  std::vector<BalancerState> out;
  for (const Balancer& b : m_impl->balancers) {
    BalancerState s = b;  // the report's part of the balancer
    for (size_t r = 0; r < kReasonCount; ++r) {
      if (b.reasons[r] > 0) s.decisions_by_reason.emplace(reason_name(static_cast<Reason>(r)), b.reasons[r]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

uint64_t BalancingPolicy::untracked_decisions() const { return m_impl->untracked_decisions; }
uint64_t BalancingPolicy::untracked_sequenced() const { return m_impl->untracked_sequenced; }
const LiveConfig& BalancingPolicy::config() const { return m_impl->config; }

std::optional<size_t> BalancingPolicy::balancer_index(int channel) const {
  auto found = m_impl->balancer_of.find(channel);
  if (found == m_impl->balancer_of.end()) return std::nullopt;
  return found->second;
}

}  // namespace escpod::pipeline::live
