// How many channels each balancer gets (docs/live_config.md §4): shared by the config parser
// (over the config's own channel range) and BalancingPolicy::create (over the run's channels).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/live/balancing.hpp"

namespace escpod::pipeline::live::detail {

// The channels `b` asks for out of `n_channels`: channel_num, or floor(channel_frac x n) (frac 1
// when unset); 0 for the added `unused_channels` balancer, which only takes what is left over.
size_t requested_channels(const BalancerConfig& b, size_t n_channels);

// Sets every balancer's channel_count for a run of `n_channels`: each its request, in order, and
// what is left to the first `none` balancer, appending an `unused_channels` one when there is no
// `none` balancer and something is left. Fails (kInvalidArgument, naming `where`) when the
// channel_frac values sum past 1 or the requests exceed n_channels.
Status plan_channels(std::vector<BalancerConfig>& balancers, size_t n_channels, const std::string& where);

// Fails when a name is empty or used twice (WarpDemuX refuses duplicate balancer names too).
Status check_balancer_names(const std::vector<BalancerConfig>& balancers, const std::string& where);

}  // namespace escpod::pipeline::live::detail
