// Channel counts per balancer and the leftover rule (docs/live_config.md §4).
#include "pipeline/live/channel_plan.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string_view>

namespace escpod::pipeline::live::detail {
namespace {

// floor(frac x n) would turn 0.29 x 100 = 28.999999999999996 into 28: a fraction written in
// decimal means its decimal product, so the product is nudged by this much first (§4.1).
constexpr double kProductSlack = 1e-9;

std::string requests_text(const std::vector<BalancerConfig>& balancers) {
  std::string text;
  for (const BalancerConfig& b : balancers) {
    if (b.implicit) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", b.name, b.channel_count);
  }
  return text;
}

BalancerConfig unused_channels_balancer() {
  BalancerConfig b;
  b.name = defaults::kUnusedChannelsName;
  b.type = BalanceType::kNone;
  b.implicit = true;
  return b;
}

}  // namespace

size_t requested_channels(const BalancerConfig& b, size_t n_channels) {
  if (b.implicit) return 0;
  if (b.channel_num) return static_cast<size_t>(std::max(*b.channel_num, 0));
  double frac = b.channel_frac.value_or(defaults::kChannelFrac);
  double product = frac * static_cast<double>(n_channels) + kProductSlack;
  return product <= 0 ? 0 : static_cast<size_t>(std::floor(product));
}

Status plan_channels(std::vector<BalancerConfig>& balancers, size_t n_channels, const std::string& where) {
  double frac_sum = 0;
  size_t requested = 0;
  for (BalancerConfig& b : balancers) {
    if (!b.implicit && !b.channel_num) frac_sum += b.channel_frac.value_or(defaults::kChannelFrac);
    b.channel_count = requested_channels(b, n_channels);
    requested += b.channel_count;
  }
  const char* hint = balancers.size() > 1 ? " (an entry without channel_frac or channel_num takes them all)" : "";
  if (frac_sum > 1 + kProductSlack) {
    return Status::invalid_argument(fmt::format("{}: [[balancers]] channel_frac values sum to {:g}, more than 1{}",
                                                where, frac_sum, hint));
  }
  if (requested > n_channels) {
    return Status::invalid_argument(fmt::format("{}: [[balancers]] ask for {} channels ({}) but the run has {}{}",
                                                where, requested, requests_text(balancers), n_channels, hint));
  }
  size_t left = n_channels - requested;
  for (BalancerConfig& b : balancers) {
    if (b.type != BalanceType::kNone) continue;
    b.channel_count += left;
    return Status::ok();
  }
  if (left > 0) {
    balancers.push_back(unused_channels_balancer());
    balancers.back().channel_count = left;
  }
  return Status::ok();
}

Status check_balancer_names(const std::vector<BalancerConfig>& balancers, const std::string& where) {
  std::map<std::string_view, size_t> first_use;
  for (size_t i = 0; i < balancers.size(); ++i) {
    const BalancerConfig& b = balancers[i];
    if (b.name.empty()) {
      return Status::invalid_argument(fmt::format("{}: [[balancers]] #{} name: must not be empty", where, i + 1));
    }
    auto [it, fresh] = first_use.emplace(b.name, i);
    if (fresh) continue;
    if (b.implicit) {
      return Status::invalid_argument(fmt::format(
          "{}: [[balancers]] #{} name: '{}' is the name of the `none` balancer added for the channels no balancer "
          "takes; choose another name", where, it->second + 1, b.name));
    }
    return Status::invalid_argument(fmt::format("{}: [[balancers]] #{} name: '{}' is already used by [[balancers]] #{} "
                                                "(a name defaults to its balance_type); give each balancer a unique name",
                                                where, i + 1, b.name, it->second + 1));
  }
  return Status::ok();
}

}  // namespace escpod::pipeline::live::detail
