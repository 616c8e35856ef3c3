#include "escpod/pipeline/demux/live_replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <queue>

#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"  // interrupted()
#include "escpod/pipeline/live/balancing.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/vbz.hpp"

namespace escpod::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

// One input read: where its signal is, and what the sequencer model needs.
struct ReplayRead {
  size_t file = 0, batch = 0, row = 0;
  pod5::ReadId id;
  int channel = 0;
  uint64_t start_sample = 0, num_samples = 0;
  float offset = 0.0f, scale = 1.0f;
  double sample_rate = 4000.0;
  // Sequenced length estimate: (MinKNOW events - 100) / 1000 as WarpDemuX computes it; a file
  // without event counts (simulated reads) gives the signal's duration at 130 bases/s (RNA004).
  double kbases = 0.0;
  double original_start() const { return static_cast<double>(start_sample) / sample_rate; }
  double duration() const { return static_cast<double>(num_samples) / sample_rate; }
};

struct Inputs {
  std::vector<std::unique_ptr<pod5::FileReader>> readers;
  std::vector<ReplayRead> reads;
};

double sample_rate_of(const pod5::FileReader& reader, const pod5::ReadBatch& b, size_t i) {
  const auto idx = b.run_info_idx.empty() ? -1 : b.run_info_idx[i];
  if (idx < 0 || static_cast<size_t>(idx) >= reader.run_info_ids().size()) return 4000.0;
  const pod5::RunInfo* info = reader.find_run_info(reader.run_info_ids()[static_cast<size_t>(idx)]);
  return info != nullptr && info->sample_rate > 0 ? info->sample_rate : 4000.0;
}

Status add_batch_reads(Inputs& in, size_t file, size_t batch_idx, const pod5::ReadBatch& b) {
  const pod5::FileReader& reader = *in.readers[file];
  for (size_t i = 0; i < b.size(); ++i) {
    ReplayRead r;
    r.file = file;
    r.batch = batch_idx;
    r.row = i;
    r.id = b.read_id[i];
    r.channel = static_cast<int>(b.channel[i]);
    r.start_sample = b.start_sample[i];
    r.num_samples = b.num_samples[i];
    r.offset = b.calibration_offset[i];
    r.scale = b.calibration_scale[i];
    r.sample_rate = sample_rate_of(reader, b, i);
    const double events = b.num_minknow_events.empty() ? 0.0 : static_cast<double>(b.num_minknow_events[i]);
    r.kbases = events > 0.0 ? std::max(0.0, (events - 100.0) / 1000.0)
                            : static_cast<double>(r.num_samples) / r.sample_rate * 130.0 / 1000.0;
    in.reads.push_back(r);
  }
  return Status::ok();
}

Result<Inputs> open_inputs(const std::vector<std::filesystem::path>& paths) {
  Inputs in;
  for (size_t f = 0; f < paths.size(); ++f) {
    ESCPOD_ASSIGN_OR_RETURN(auto reader, pod5::FileReader::open(paths[f]));
    in.readers.push_back(std::move(reader));
    for (size_t b = 0; b < in.readers[f]->n_read_batches(); ++b) {
      ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch batch, in.readers[f]->read_batch(b));
      ESCPOD_RETURN_IF_ERROR(add_batch_reads(in, f, b, batch));
    }
  }
  return in;
}

enum class EventKind : uint8_t { kChunk, kEnd };

struct Event {
  double time = 0.0;
  uint64_t seq = 0;  // ties in time: first scheduled first (deterministic)
  int channel = 0;
  EventKind kind = EventKind::kChunk;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

// The read a channel is playing.
struct Playing {
  size_t read = 0;
  double start = 0.0;   // replay time the read entered the pore
  uint64_t sent = 0;    // samples sent
  std::vector<int16_t> adc;
  LiveRead live;
  double decision_seconds = 0.0;
  bool acted = false;   // the client has answered (unblock or stop receiving)
  bool accepted = true;
  bool registered = false;  // the policy counted this accepted read (record_sequenced at its end)
  std::string action = "none", reason, balancer;
  std::string whole_label;
};

struct ChannelPlay {
  std::vector<size_t> reads;  // indices into Inputs::reads, by start sample
  size_t next = 0;
  std::optional<Playing> now;
};

class Replay {
 public:
  Replay(const ReplayOptions& o, Inputs&& in, LiveClassifier&& c, std::optional<live::BalancingPolicy>&& p,
         std::ostream* csv, ReplayReport& report)
      : m_options(o), m_in(std::move(in)), m_classifier(std::move(c)), m_policy(std::move(p)), m_csv(csv),
        m_report(report), m_scratch(m_classifier.make_scratch()) {}

  Status run();

 private:
  Status play_events();
  void schedule(double time, int channel, EventKind kind) { m_events.push({time, m_seq++, channel, kind}); }
  Status start_next_read(int channel, double free_at);
  Status on_chunk(int channel, double now);
  void on_decision(Playing& p, double now);
  void on_end(int channel);
  void write_row(const Playing& p);
  double capture_gap(const ChannelPlay& ch, size_t k) const;
  uint64_t chunk_samples(const ReplayRead& r) const {
    return std::max<uint64_t>(1, static_cast<uint64_t>(m_options.chunk_seconds * r.sample_rate));
  }
  void account_without_balancing();

  const ReplayOptions& m_options;
  Inputs m_in;
  LiveClassifier m_classifier;
  std::optional<live::BalancingPolicy> m_policy;
  std::ostream* m_csv;
  ReplayReport& m_report;
  LiveClassifier::Scratch m_scratch;
  pod5::VbzCodec m_codec;
  std::map<int, ChannelPlay> m_channels;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> m_events;
  uint64_t m_seq = 0;
};

Status Replay::run() {
  for (size_t i = 0; i < m_in.reads.size(); ++i) m_channels[m_in.reads[i].channel].reads.push_back(i);
  for (auto& [channel, ch] : m_channels) {
    std::stable_sort(ch.reads.begin(), ch.reads.end(), [&](size_t a, size_t b) {
      return m_in.reads[a].start_sample < m_in.reads[b].start_sample;
    });
  }
  account_without_balancing();
  for (auto& [channel, ch] : m_channels) {
    ESCPOD_RETURN_IF_ERROR(start_next_read(channel, 0.0));
  }
  return play_events();
}

// The event loop, in simulated time order; progress counts reads ended; Ctrl-C stops it.
Status Replay::play_events() {
  progress::Task task(m_in.reads.size(), 0, {"live replay", "reads"});
  while (!m_events.empty()) {
    if (interrupted()) return Status::cancelled("interrupted");
    const Event e = m_events.top();
    m_events.pop();
    if (e.kind == EventKind::kChunk) {
      ESCPOD_RETURN_IF_ERROR(on_chunk(e.channel, e.time));
    } else {
      on_end(e.channel);
      task.add(1);
      ESCPOD_RETURN_IF_ERROR(start_next_read(e.channel, e.time));
    }
  }
  task.finish();
  return Status::ok();
}

// The time between read k of a channel and the end of the read before it (read 0: its start,
// from the run's start): the capture time the replay keeps whatever happened to that read.
double Replay::capture_gap(const ChannelPlay& ch, size_t k) const {
  const ReplayRead& r = m_in.reads[ch.reads[k]];
  if (k == 0) return r.original_start();
  const ReplayRead& prev = m_in.reads[ch.reads[k - 1]];
  return std::max(0.0, r.original_start() - (prev.original_start() + prev.duration()));
}

// Without balancing every read sequences to its end; the run lasts until the last one does.
void Replay::account_without_balancing() {
  for (auto& [channel, ch] : m_channels) {
    double free_at = 0.0;
    for (size_t k = 0; k < ch.reads.size(); ++k) free_at += capture_gap(ch, k) + m_in.reads[ch.reads[k]].duration();
    m_report.run_seconds_without = std::max(m_report.run_seconds_without, free_at);
  }
}

Status Replay::start_next_read(int channel, double free_at) {
  ChannelPlay& ch = m_channels[channel];
  if (ch.next >= ch.reads.size()) {
    ch.now.reset();
    m_report.run_seconds_with = std::max(m_report.run_seconds_with, free_at);
    return Status::ok();
  }
  const size_t idx = ch.reads[ch.next];
  const ReplayRead& r = m_in.reads[idx];
  const double gap = capture_gap(ch, ch.next);
  ++ch.next;
  Playing& p = ch.now.emplace();
  p.read = idx;
  p.start = free_at + gap;
  p.adc.resize(r.num_samples);
  const pod5::FileReader& reader = *m_in.readers[r.file];
  ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch ref, reader.read_signal_ref(r.batch, r.row));
  ESCPOD_RETURN_IF_ERROR(reader.read_signal(ref.rows_of(0), p.adc, m_codec));
  p.live = m_classifier.new_read(r.offset, r.scale);
  LiveRead whole = m_classifier.new_read(r.offset, r.scale);
  const LiveDecision& w = m_classifier.feed(whole, p.adc, /*end=*/true, m_scratch);
  p.whole_label = w.state == LiveState::kDecided ? w.label : "unclassified";
  schedule(p.start + std::min(m_options.chunk_seconds, r.duration()), channel, EventKind::kChunk);
  return Status::ok();
}

Status Replay::on_chunk(int channel, double now) {
  ChannelPlay& ch = m_channels[channel];
  Playing& p = *ch.now;
  const ReplayRead& r = m_in.reads[p.read];
  const uint64_t n = std::min<uint64_t>(chunk_samples(r), r.num_samples - p.sent);
  const bool end = p.sent + n == r.num_samples;
  const auto t0 = Clock::now();
  const LiveDecision& d = m_classifier.feed(
      p.live, std::span<const int16_t>(p.adc).subspan(static_cast<size_t>(p.sent), static_cast<size_t>(n)), end,
      m_scratch);
  const double spent = std::chrono::duration<double>(Clock::now() - t0).count();
  m_report.feed_seconds.push_back(spent);
  p.decision_seconds += spent;
  p.sent += n;
  m_report.max_state_bytes = std::max(m_report.max_state_bytes, p.live.state_bytes());
  if (d.final() && !end) {
    on_decision(p, now);
    return Status::ok();
  }
  if (end) {
    if (d.final() && !p.acted) p.reason = "read ended before a decision";
    schedule(now, channel, EventKind::kEnd);
    return Status::ok();
  }
  schedule(now + std::min(m_options.chunk_seconds, static_cast<double>(r.num_samples - p.sent) / r.sample_rate),
           channel, EventKind::kChunk);
  return Status::ok();
}

// The client's answer to a final decision: the policy's unblock, or stop receiving.
void Replay::on_decision(Playing& p, double now) {
  const ReplayRead& r = m_in.reads[p.read];
  const LiveDecision& d = p.live.decision();
  p.acted = true;
  double leaves_at = p.start + r.duration();
  p.action = "stop_receiving";
  if (m_policy) {
    const uint64_t past_adapter = d.adapter_end > 0 ? d.samples_seen - std::min<uint64_t>(d.samples_seen, static_cast<uint64_t>(d.adapter_end)) : 0;
    const live::PolicyAction a = m_policy->decide(r.channel, policy_read_call(d), d.barcode, d.confidence, now, past_adapter);
    p.reason = a.reason;
    p.balancer = a.balancer;
    p.registered = a.registered;
    if (a.unblock) {
      p.action = "unblock";
      p.accepted = false;
      leaves_at = now + a.unblock_seconds;
      m_report.pore_seconds_saved += std::max(0.0, p.start + r.duration() - leaves_at);
      ++m_report.n_unblocked;
    }
  }
  ++m_report.actions_by_reason[p.action + ": " + (p.reason.empty() ? "no policy" : p.reason)];
  schedule(std::max(leaves_at, now), r.channel, EventKind::kEnd);
}

void Replay::on_end(int channel) {
  ChannelPlay& ch = m_channels[channel];
  Playing& p = *ch.now;
  const ReplayRead& r = m_in.reads[p.read];
  const LiveDecision& d = p.live.decision();
  ++m_report.n_reads;
  if (d.state == LiveState::kUndecidable) ++m_report.n_undecidable;
  if (d.early) ++m_report.n_early; else ++m_report.n_decisive;
  if (d.final()) m_report.samples_at_decision.push_back(d.samples_seen);
  if (d.state == LiveState::kDecided) {
    ++m_report.n_decided;
    if (d.label == p.whole_label) ++m_report.n_agree;
  }
  if (p.accepted) {
    auto& share = m_report.with_balancing[p.whole_label];
    ++share.reads;
    share.samples += r.num_samples;
    if (m_policy && p.registered) m_policy->record_sequenced(r.channel, d.barcode, r.kbases);
  }
  auto& all = m_report.without_balancing[p.whole_label];
  ++all.reads;
  all.samples += r.num_samples;
  write_row(p);
}

void Replay::write_row(const Playing& p) {
  if (m_csv == nullptr) return;
  const ReplayRead& r = m_in.reads[p.read];
  const LiveDecision& d = p.live.decision();
  const std::string label = d.state == LiveState::kDecided ? d.label : std::string("unclassified");
  const std::string reason = !p.reason.empty() ? p.reason : d.reason;
  *m_csv << fmt::format("{},{},{:.3f},{},\"{}\",{},{},{:.6f},{},{},{:.1f},{}\n", r.id.to_string(), r.channel,
                        p.start, p.action, reason, p.balancer, label, d.confidence, d.samples_seen,
                        d.early ? "true" : "false", p.decision_seconds * 1e6, p.whole_label);
}

}  // namespace

Status run_live_replay(const std::vector<std::filesystem::path>& inputs, const ReplayOptions& options,
                       std::ostream* reads_csv, ReplayReport* report) {
  if (inputs.empty()) return Status::usage("live replay needs at least one POD5 input");
  if (!(options.chunk_seconds > 0.0)) return Status::usage("--chunk-seconds must be positive");
  const auto t0 = Clock::now();
  ESCPOD_ASSIGN_OR_RETURN(LiveClassifier classifier, LiveClassifier::create(options.model, options.live));
  std::optional<live::BalancingPolicy> policy;
  ESCPOD_ASSIGN_OR_RETURN(Inputs in, open_inputs(inputs));
  if (!options.config.empty()) {
    const auto names = classifier.barcode_names();
    ESCPOD_ASSIGN_OR_RETURN(live::LiveConfig config, live::read_live_config(options.config, names.size()));
    std::vector<int> channels;
    for (const ReplayRead& r : in.reads) channels.push_back(r.channel);
    std::sort(channels.begin(), channels.end());
    channels.erase(std::unique(channels.begin(), channels.end()), channels.end());
    ESCPOD_ASSIGN_OR_RETURN(live::BalancingPolicy p, live::BalancingPolicy::create(config, channels, options.seed));
    policy.emplace(std::move(p));
  }
  ReplayReport local;
  ReplayReport& rep = report != nullptr ? *report : local;
  rep = ReplayReport{};
  if (reads_csv != nullptr) *reads_csv << kReplayHeader;
  Replay replay(options, std::move(in), std::move(classifier), std::move(policy), reads_csv, rep);
  ESCPOD_RETURN_IF_ERROR(replay.run());
  rep.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return Status::ok();
}

}  // namespace escpod::pipeline
