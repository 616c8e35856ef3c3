// Live (read-until) barcode balancing: WarpDemuX's live TOML config read natively, and the per-read
// accept/reject policy built on it. While a direct-RNA read is still in the pore, the streaming
// classifier calls its barcode; BalancingPolicy then says whether to unblock it (reject: reverse the
// pore voltage so the molecule leaves) or to let it sequence, so that barcodes end up balanced.
//
// docs/live_config.md is the reference of every key, its default, the balancer types that use it,
// and every decision taken where WarpDemuX's own behaviour is unclear (cited below as §N).
//
// Layer: pipeline/live depends on escpod core only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pipeline::live {

// How a balancer decides (docs/live_config.md §3).
enum class BalanceType { kNone, kRejectAll, kAdapterCount, kReadCount, kBaseNormalization };

// The config spelling: "none", "reject_all", "adapter_count", "read_count", "base_normalization".
std::string_view balance_type_name(BalanceType type);
std::optional<BalanceType> parse_balance_type(std::string_view text);

// WarpDemuX's defaults (its _defaults.py; where its README says otherwise, the code wins: §2.4).
namespace defaults {
inline constexpr const char* kModelName = "WDX12";
inline constexpr int kMinChannel = 1;
inline constexpr int kNprocSegmentation = 2;
inline constexpr int kNprocClassification = 4;
inline constexpr int64_t kMaxMissedStartOffset = 400;
inline constexpr int64_t kMaxChunkSize = 15000;
inline constexpr int64_t kMinChunkSize = 2500;
inline constexpr double kRepeatedUnblockTimeWindow = 1.5;
inline constexpr double kRepeatedUnblockDuration2 = 0.5;
inline constexpr double kRepeatedUnblockDuration3 = 2.0;
inline constexpr double kPredConfThreshold = 0.2;
inline constexpr double kRejectDuration = 0.1;
inline constexpr int64_t kMaxSignalAfterPolyA = 1500;
inline constexpr const char* kSavePath = "results";
inline constexpr double kSaveEverySec = 30;
inline constexpr double kBalanceThreshold = 0.05;
inline constexpr double kMinStat = 100;
inline constexpr double kChannelFrac = 1.0;
inline constexpr bool kWatchForMissing = true;
inline constexpr double kWaitToSee = 900;
inline constexpr double kPod5CheckInterval = 1;
// Name of the `none` balancer added for channels no [[balancers]] entry claims (§4.3).
inline constexpr const char* kUnusedChannelsName = "unused_channels";
// Sequenced reads shorter than this (20 bases) are not counted by record_sequenced (§5.6).
inline constexpr double kMinSequencedKbases = 0.02;
}  // namespace defaults

// One [[balancers]] entry. Per-barcode vectors are indexed by barcode index (0-based, as the
// config's two-digit key suffixes); an empty vector means "nothing set" (all false / no bound), so
// a hand-built config need not size them; a parsed one always has num_barcodes entries.
struct BalancerConfig {
  std::string name;  // unique in the config; defaults to the balance_type text
  BalanceType type = BalanceType::kAdapterCount;
  double balance_threshold = defaults::kBalanceThreshold;
  double min_stat = defaults::kMinStat;  // reads, or kbases for base_normalization
  std::optional<double> reject_duration;  // seconds; unset: [balancing] reject_duration
  // At most one of the two is set. A parsed entry that names neither gets channel_frac = 1 (all
  // channels), as in WarpDemuX; the added `unused_channels` balancer has neither (§4).
  std::optional<double> channel_frac;
  std::optional<int> channel_num;
  bool watch_for_missing = defaults::kWatchForMissing;  // balancing types only (§5.4)
  double wait_to_see = defaults::kWaitToSee;            // seconds of run time
  std::vector<bool> blacklist, ignorelist;  // may not both be true for one barcode
  std::vector<double> max_stats;            // +inf: no bound
  // Parsed and kept for reports; our policy is told of sequenced reads by record_sequenced
  // instead of watching POD5 files (§3.4).
  std::optional<std::string> pod5_watch_dir;
  double pod5_check_interval = defaults::kPod5CheckInterval;
  // True for the `unused_channels` balancer the parser adds for channels left over (§4.3).
  bool implicit = false;
  // Channels this balancer gets out of LiveConfig::channels() (after the leftover rule). Set by
  // the parser, for reports and checks; BalancingPolicy::create recomputes it for its channels.
  size_t channel_count = 0;
};

struct LiveConfig {
  std::string source;       // the file (or `where`) it was read from, for messages
  size_t num_barcodes = 0;  // the classifier's barcode count, given to the parser
  // [model]: the classifier model name; the caller resolves it (this layer loads no model).
  std::string model_name = defaults::kModelName;
  // [flowcell]
  std::string flowcell_type;  // "flongle" (126 channels), "minion" (512) or "promethion" (2675)
  int flowcell_channels = 0;  // the channel count of flowcell_type
  int min_channel = defaults::kMinChannel;
  int max_channel = 0;  // default: flowcell_channels
  // [processing]: parsed and accepted, not used: our engine sizes its own threads (§2.3).
  int nproc_segmentation = defaults::kNprocSegmentation;
  int nproc_classification = defaults::kNprocClassification;
  // [acquisition]: for the streaming reader (samples); repeated-unblock escalation (§5.5).
  int64_t max_missed_start_offset = defaults::kMaxMissedStartOffset;
  int64_t max_chunk_size = defaults::kMaxChunkSize;
  int64_t min_chunk_size = defaults::kMinChunkSize;
  int64_t min_adapter_length = defaults::kMinChunkSize;  // default: min_chunk_size
  double repeated_unblock_time_window = defaults::kRepeatedUnblockTimeWindow;
  double repeated_unblock_duration_2 = defaults::kRepeatedUnblockDuration2;
  double repeated_unblock_duration_3 = defaults::kRepeatedUnblockDuration3;
  // [balancing]
  double pred_conf_threshold = defaults::kPredConfThreshold;
  double reject_duration = defaults::kRejectDuration;
  int64_t max_signal_after_polya = defaults::kMaxSignalAfterPolyA;  // samples (§5.3)
  // [reporting]: parsed and kept as written; nothing is created or resolved here (§2.6).
  std::string save_path = defaults::kSavePath;
  double save_every_sec = defaults::kSaveEverySec;
  // [[balancers]], in file order, after the leftover-channels rule (§4.3).
  std::vector<BalancerConfig> balancers;
  // Keys that parse but have no effect for their balancer, each "file:line:col: ..." (§2.2).
  std::vector<std::string> warnings;

  // min_channel..max_channel, the channels a run on this config uses by default.
  std::vector<int> channels() const;
};

// Reads a WarpDemuX live config. `num_barcodes` is the classifier's barcode count: per-barcode keys
// (watch_barcodeNN, blacklist_barcodeNN, max_barcodeNN) use WarpDemuX's 0-based two-digit index,
// so with barcodes named barcode01..barcode12, watch_barcode00 is barcode01. Every error names the
// file (and line:column where the value has one), the section and key, and what is wrong: syntax,
// wrong value types, values out of range, unknown sections and keys (with a close known key as a
// hint), unknown balance_type, both channel_frac and channel_num, channels over-subscribed,
// a barcode key index >= num_barcodes, duplicate balancer names. Errors are kInvalidArgument;
// TOML syntax errors kCorrupt; an unreadable file kNotFound / kIoError.
Result<LiveConfig> read_live_config(const std::filesystem::path& toml_file, size_t num_barcodes);
// The same from text; `where` stands for the file name in messages.
Result<LiveConfig> parse_live_config(std::string_view toml_text, const std::string& where,
                                     size_t num_barcodes);

// What the classifier said of a read, as the policy needs it (§5.2).
enum class ReadCall {
  kClassified,    // a barcode (subject to pred_conf_threshold in decide)
  kUnclassified,  // below the confidence threshold (the caller applied it)
  kOutlier,       // outside the training distribution
  kFailed,        // no usable adapter (none found, start missed, too long): accepted unless reject_all
  kNotRealRead,   // failed the real-signal check (junk, clogged pore): rejected on every balancer,
                  // with the channel's escalating unblock duration (WarpDemuX's not_real_read)
};

// Why decide() decided; the text (reason_name) is WarpDemuX's reason string where it has one.
enum class Reason {
  kUntrackedChannel,   // accept: the channel belongs to no balancer
  kBlacklisted,        // reject
  kIgnored,            // accept: barcode on the ignore list
  kMinStat,            // accept: barcode below min_stat
  kMaxStat,            // reject: barcode passed its max; it is now blacklisted
  kValidSumSeenZero,   // accept: nothing counted yet on non-listed barcodes
  kUnbalanced,         // reject
  kBalanced,           // accept
  kNoBalancing,        // accept: `none` balancer
  kRejectAll,          // reject: `reject_all` balancer
  kOutlier,            // "outlier_detected": accept, or reject on reject_all
  kBelowConfidence,    // "below_conf_pred": accept, or reject on reject_all
  kFailedRead,         // accept, or reject on reject_all
  kNotRealRead,        // reject (escalating duration)
  kTooLateToReject,    // accept: a reject came too far past the adapter (§5.3)
  kInvalidBarcode,     // accept: kClassified with a barcode index out of range (a caller bug)
};
std::string_view reason_name(Reason reason);

struct PolicyAction {
  bool unblock = false;        // true: unblock (reject); false: stop receiving (accept)
  double unblock_seconds = 0;  // > 0 exactly when unblock
  std::string reason;          // reason_name(why)
  std::string balancer;        // the channel's balancer; empty for an untracked channel
  Reason why = Reason::kUntrackedChannel;
  // True when this accepted kClassified read was counted as accepted by its balancer. Only such
  // reads should be passed to record_sequenced once sequenced (read_count, base_normalization).
  bool registered = false;
};

// The per-read decisions of one run. Not thread-safe: one caller thread (the live loop's
// decision step) owns it. Time is the caller's run clock (seconds since the run, or the replay,
// began), never wall time, so a replay gives the same decisions.
class BalancingPolicy {
 public:
  // `channels`: the channel numbers of the run (each >= 1, no duplicates, in any order). Each
  // balancer takes its count (channel_num, or floor(channel_frac x channels)) in config order out
  // of the channels shuffled with `seed` (SplitMix64 + Fisher-Yates: the same seed and channel
  // set give the same assignment on every platform, §4.2); what is left goes to the first `none`
  // balancer, or to an added `unused_channels` one. Fails (kInvalidArgument) when the balancers
  // ask for more channels than given or the config is inconsistent.
  static Result<BalancingPolicy> create(const LiveConfig& config, std::span<const int> channels,
                                        uint64_t seed);
  // The same over config.channels().
  static Result<BalancingPolicy> create(const LiveConfig& config, uint64_t seed);

  BalancingPolicy(BalancingPolicy&&) noexcept;
  BalancingPolicy& operator=(BalancingPolicy&&) noexcept;
  ~BalancingPolicy();

  // The decision for one read whose call is known.
  //   barcode: index, read only for kClassified.
  //   confidence: the classifier's confidence (WarpDemuX: the margin between the two highest
  //     probabilities), read only for kClassified. This call applies [balancing]
  //     pred_conf_threshold: below it (or NaN), the read is handled as kUnclassified. A caller
  //     that thresholded already passes kUnclassified itself, or 1.0 here.
  //   now_seconds: run time, for wait_to_see and the per-channel repeated-unblock escalation.
  //   samples_after_adapter: signal already past the adapter end (poly(A) start) when deciding;
  //     a reject is turned into an accept above max_signal_after_polya (too_late_to_reject).
  PolicyAction decide(int channel, ReadCall call, int barcode, double confidence,
                      double now_seconds, uint64_t samples_after_adapter);

  // A read that decide() accepted with `registered` finished sequencing with `kbases`. It is
  // matched against the reads of `barcode` its channel's balancer registered and not yet seen
  // sequenced; unmatched, too short (< 20 bases) or untracked ones are only counted (§5.6). For
  // read_count the matched reads, for base_normalization their kbases, are the balanced stat.
  void record_sequenced(int channel, int barcode, double kbases);

  struct BalancerState {
    std::string name;
    BalanceType type = BalanceType::kNone;
    std::vector<int> channels;  // ascending
    double reject_duration = 0;  // effective seconds (own, or [balancing])
    // Per barcode index.
    std::vector<double> stat;  // the balanced statistic (WarpDemuX's stats_per_bc; zero for none)
    // kClassified reads (at or above the threshold, valid barcode) by the final action: a
    // too-late accept counts as accepted.
    std::vector<uint64_t> accepted, rejected;
    std::vector<uint64_t> sequenced_reads;     // matched by record_sequenced
    std::vector<double> sequenced_kbases;
    std::vector<bool> blacklist, ignorelist;  // now (max_stat and watch_for_missing move them)
    bool missing_check_pending = false;       // watch_for_missing has not fired yet
    uint64_t sequenced_unmatched = 0, sequenced_too_short = 0;
    std::map<std::string, uint64_t> decisions_by_reason;  // reason_name -> count
  };
  std::vector<BalancerState> state() const;
  // Reads decided on, and sequenced reads reported, on channels of no balancer.
  uint64_t untracked_decisions() const;
  uint64_t untracked_sequenced() const;
  // The config as used: balancers (and their channel_count) as assigned for this run.
  const LiveConfig& config() const;
  // The balancer of `channel` (index into state() and config().balancers), if any.
  std::optional<size_t> balancer_index(int channel) const;

 private:
  struct Impl;
  explicit BalancingPolicy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::pipeline::live
