// Live replay (`escpod live replay`): plays the reads of POD5 files as a sequencer would send
// them to a read-until client, runs the streaming classifier and a balancing policy on them, and
// reports what live balancing would have done (docs/live.md §4).
//
// The sequencer model: each read is played on its channel, in the order of its start sample; the
// gap between a read and the previous read's end on the channel (the capture time) is kept from
// the file. A read sends a chunk every `chunk_seconds` of signal. When the classifier answers
// and the policy says `unblock`, the read stops sending and leaves the pore after the unblock
// duration: the channel's later reads start that much earlier (the pore time saved). A read the
// policy accepts (`stop_receiving`) sequences to its natural end. Time is simulated: the decisions
// are deterministic for a seed, whatever the machine's speed; the wall time spent deciding is
// measured separately.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/demux/live_classifier.hpp"

namespace escpod::pipeline {

struct ReplayOptions {
  ModelSpec model;
  LiveOptions live;
  // WarpDemuX live TOML config (docs/live_config.md); empty: no policy (every read is accepted,
  // the decisions are still made and reported).
  std::filesystem::path config;
  double chunk_seconds = 0.4;  // MinKNOW's read-until default break_reads_after_seconds
  uint64_t seed = 0;           // the policy's channel assignment
};

// Per barcode output name (and "unclassified"): reads and sequenced samples.
struct ReplayShare {
  uint64_t reads = 0;
  uint64_t samples = 0;
};

struct ReplayReport {
  uint64_t n_reads = 0;
  uint64_t n_early = 0;        // decided before the decisive point and before the read's end
  uint64_t n_decisive = 0;     // decided at the decisive point or at the read's end
  uint64_t n_undecidable = 0;
  uint64_t n_unblocked = 0;
  uint64_t n_agree = 0;        // decided reads whose live label is the whole-read call's
  uint64_t n_decided = 0;
  std::vector<uint64_t> samples_at_decision;  // per read that got a final decision
  std::vector<double> feed_seconds;           // wall time of every feed call (chunk)
  size_t max_state_bytes = 0;
  // By the whole-read call: all reads (what a run without balancing sequences), and the reads
  // sequenced to their end under the policy.
  std::map<std::string, ReplayShare> without_balancing, with_balancing;
  double run_seconds_without = 0.0;  // simulated: the last read's end without / with unblocks
  double run_seconds_with = 0.0;
  double pore_seconds_saved = 0.0;   // over all channels
  std::map<std::string, uint64_t> actions_by_reason;  // "unblock: unbalanced", ...
  double wall_seconds = 0.0;
};

// The per-read CSV (one row per read, in replay order):
inline constexpr const char* kReplayHeader =
    "read_id,channel,start_s,action,reason,balancer,label,confidence,samples_seen,early,"
    "decision_us,whole_read_label\n";

// Replays `inputs`, writing a row per read to `reads_csv` (may be null) and the totals to
// `report`. Errors: the model's, the config's, an unreadable input (naming file and read).
Status run_live_replay(const std::vector<std::filesystem::path>& inputs, const ReplayOptions& options,
                       std::ostream* reads_csv, ReplayReport* report);

}  // namespace escpod::pipeline
