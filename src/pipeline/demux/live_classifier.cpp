#include "escpod/pipeline/demux/live_classifier.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "escpod/pipeline/demux/demux_stages.hpp"
#include "escpod/signal/calibration.hpp"
#include "pipeline/demux/classifications_csv.hpp"
#include "pipeline/demux/read_featurize.hpp"

namespace escpod::pipeline {

std::string_view live_state_name(LiveState state) {
  switch (state) {
    case LiveState::kNeedMore: return "need_more";
    case LiveState::kDecided: return "decided";
    case LiveState::kUndecidable: return "undecidable";
  }
  return "need_more";
}

live::ReadCall policy_read_call(const LiveDecision& d) {
  if (d.state == LiveState::kUndecidable) return live::ReadCall::kFailed;
  if (d.barcode >= 0) return live::ReadCall::kClassified;
  if (d.status == demux::CallStatus::kNoise) return live::ReadCall::kOutlier;
  return live::ReadCall::kUnclassified;
}

struct LiveClassifier::Scratch::Impl {
  std::vector<float> pa;
  detail::FeaturizeScratch featurize;
  std::vector<double> features;
  std::unique_ptr<demux::HeadScratch> head;
  demux::Classification call;
  Boundaries bounds;
  std::string reason;
};

LiveClassifier::Scratch::Scratch() : impl(std::make_unique<Impl>()) {}
LiveClassifier::Scratch::~Scratch() = default;
LiveClassifier::Scratch::Scratch(Scratch&&) noexcept = default;
LiveClassifier::Scratch& LiveClassifier::Scratch::operator=(Scratch&&) noexcept = default;

struct LiveClassifier::Impl {
  LiveOptions options;
  std::unique_ptr<demux::Head> head;
  demux::HeadInput input;
  BoundaryDetector detector;
  signal::FingerprintParams fingerprint;
  detail::ClassificationsCsv table;
  std::vector<std::string> barcode_names;
  std::map<std::string, int32_t> barcode_index;  // output name -> index in barcode_names
  uint64_t decisive = 0;  // samples after which the call cannot change (see the header)

  Impl(RunModel&& m, BoundaryDetector&& d, const LiveOptions& o)
      : options(o), head(std::move(m.loaded.head)), detector(std::move(d)),
        fingerprint(m.settings.fingerprint), table(*head) {}
};

namespace {

// Samples from which the fused run's call depends on nothing more (live_classifier.hpp).
uint64_t decisive_samples_of(const BoundaryDetector& detector, const LiveOptions& options) {
  if (detector.method() != DetectMethod::kCnn) {
    return std::max<uint64_t>(options.decide_by.value_or(LiveOptions::kDefaultDecideBy), 1);
  }
  const auto short_read_rule = static_cast<uint64_t>(2 * detector.config().max_obs_adapter);
  return std::max<uint64_t>(detector.preload_samples(), short_read_rule);
}

// Samples the head's input needs past the adapter end to be whole (an early decision waits for
// them; the whole-read call clips instead).
int64_t samples_needed_past_adapter(const demux::HeadInput& input,
                                    const signal::FingerprintParams& fingerprint) {
  if (input.kind == demux::HeadInputKind::kFingerprint) {
    return static_cast<int64_t>(fingerprint.padding_samples);
  }
  return std::max<int64_t>(input.window_end, 0);
}

}  // namespace

Result<LiveClassifier> LiveClassifier::create(const ModelSpec& spec, const LiveOptions& options) {
  if (spec.path.empty()) return Status::usage("live classification needs a model (--model)");
  if (options.attempt_every == 0) return Status::usage("--attempt-every must be at least 1 sample");
  if (options.min_confidence < 0.0 || options.min_confidence > 1.0) {
    return Status::usage(fmt::format("--min-confidence must lie in [0, 1], not {}", options.min_confidence));
  }
  ESCPOD_ASSIGN_OR_RETURN(RunModel model, load_run_model(spec));
  ESCPOD_ASSIGN_OR_RETURN(BoundaryDetector detector, make_stage_detector(model));
  if (options.decide_by && detector.method() == DetectMethod::kCnn) {
    return Status::usage(fmt::format(
        "--decide-by would be ignored: it sets when the LLR-only detector decides, and {} runs the "
        "boundary CNN, whose calls are final by {} samples",
        spec.path.filename().string(), decisive_samples_of(detector, options)));
  }
  auto impl = std::make_unique<Impl>(std::move(model), std::move(detector), options);
  impl->input = impl->head->input();
  impl->decisive = decisive_samples_of(impl->detector, options);
  for (int32_t label : impl->head->labels()) {
    if (label == demux::kUnclassifiedLabel) continue;
    std::string name = impl->table.label_output(label);
    if (name == "unclassified" || impl->barcode_index.count(name) != 0) continue;
    impl->barcode_index.emplace(name, static_cast<int32_t>(impl->barcode_names.size()));
    impl->barcode_names.push_back(std::move(name));
  }
  return LiveClassifier(std::move(impl));
}

LiveClassifier::LiveClassifier(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
LiveClassifier::LiveClassifier(LiveClassifier&&) noexcept = default;
LiveClassifier& LiveClassifier::operator=(LiveClassifier&&) noexcept = default;
LiveClassifier::~LiveClassifier() = default;

LiveClassifier::Scratch LiveClassifier::make_scratch() const {
  Scratch s;
  s.impl->featurize.detector = m_impl->detector.make_scratch();
  s.impl->head = m_impl->head->make_scratch();
  return s;
}

std::span<const std::string> LiveClassifier::barcode_names() const { return m_impl->barcode_names; }
uint64_t LiveClassifier::decisive_samples() const { return m_impl->decisive; }
const LiveOptions& LiveClassifier::options() const { return m_impl->options; }

std::string LiveClassifier::describe() const {
  const Impl& m = *m_impl;
  return fmt::format(
      "head: {}\ndetector: {}\nattempts: first at {} samples, then every {}; decisive at {} samples\n"
      "early decisions need: a classified call{}\n",
      m.head->name(), m.detector.method() == DetectMethod::kCnn ? "boundary CNN" : "LLR-only",
      m.options.first_attempt, m.options.attempt_every, m.decisive,
      m.options.min_confidence > 0.0 ? fmt::format(" with confidence >= {}", m.options.min_confidence)
                                     : std::string());
}

// One attempt on everything kept: calibrate, run the fused run's per-read steps, and decide
// when the call is final (decisive) or good enough early.
void LiveClassifier::attempt(LiveRead& read, bool decisive, bool end, Scratch& scratch) const {
  const Impl& m = *m_impl;
  Scratch::Impl& s = *scratch.impl;
  LiveDecision& d = read.m_decision;
  d.samples_seen = read.m_seen;
  if (read.m_adc.empty()) {
    if (end) set_undecidable(d, "read has no signal");
    return;
  }
  s.pa.resize(read.m_adc.size());
  signal::calibrate_to_pa(read.m_adc, {read.m_offset, read.m_scale}, s.pa);
  // Before the end the read's length is unknown but at least what was seen; a length at the
  // decisive point keeps the short-read rule off until the read is known to be short.
  const uint64_t num_samples = end ? read.m_seen : std::max(read.m_seen, m.decisive);
  const bool want_fingerprint = m.input.kind == demux::HeadInputKind::kFingerprint;
  s.reason.clear();
  // Early attempts on a prefix skip the CNN path's LLR retries (whole-read retries that would
  // cost more than the CNN on every failed validation); the decisive attempt is the fused run's.
  const DetectRetries retries = decisive ? DetectRetries::kAsConfigured : DetectRetries::kPrimaryOnly;
  bool ready = detail::featurize_signal(m.detector, m.fingerprint, want_fingerprint, s.pa, num_samples,
                                        s.featurize, s.bounds, s.features, s.reason, retries);
  if (ready && want_fingerprint) {
    s.reason = detail::fingerprint_mismatch(*m.head, s.features.size());
    ready = s.reason.empty();
  }
  d.adapter_end = s.bounds.success ? s.bounds.adapter_end : 0;
  d.detector = s.bounds.method;
  if (!ready) {
    if (decisive) set_undecidable(d, s.reason);
    return;
  }
  if (!decisive && !input_complete(s.bounds, s.pa.size())) return;
  const demux::PreparedRead prepared =
      detail::prepare_for_head(m.input, s.pa, num_samples, s.bounds, s.features);
  m.head->classify(std::span<const demux::PreparedRead>(&prepared, 1), *s.head,
                   std::span<demux::Classification>(&s.call, 1));
  const bool confident = s.call.is_classified() && s.call.confidence >= m.options.min_confidence;
  if (!decisive) {
    // Early: the boundary and the call must hold over two attempts (a boundary found on a prefix
    // can move once more signal shows the real adapter end).
    const bool long_enough = s.bounds.adapter_end - s.bounds.adapter_start >=
                             static_cast<int64_t>(m.options.min_adapter_samples);
    const bool stable = confident && long_enough && read.m_last_adapter_end == s.bounds.adapter_end &&
                        read.m_last_label == s.call.label;
    read.m_last_adapter_end = confident ? s.bounds.adapter_end : -1;
    read.m_last_label = s.call.label;
    if (!stable) return;
  }
  set_decided(d, s.call, !decisive);
}

bool LiveClassifier::input_complete(const Boundaries& bounds, size_t n_seen) const {
  const Impl& m = *m_impl;
  const int64_t need = bounds.adapter_end + samples_needed_past_adapter(m.input, m.fingerprint);
  return need <= static_cast<int64_t>(n_seen);
}

void LiveClassifier::set_decided(LiveDecision& d, const demux::Classification& call, bool early) const {
  const Impl& m = *m_impl;
  d.state = LiveState::kDecided;
  d.status = call.status;
  d.confidence = call.confidence;
  d.early = early;
  if (call.is_classified()) {
    d.label = m.table.label_output(call.label);
    const auto it = m.barcode_index.find(d.label);
    d.barcode = it == m.barcode_index.end() ? -1 : it->second;
    d.reason.clear();
    if (d.barcode < 0) d.label = "unclassified";  // a head name that routes to unclassified
  } else {
    d.label = "unclassified";
    d.barcode = -1;
    d.reason.assign(call.reason());
  }
}

void LiveClassifier::set_undecidable(LiveDecision& d, const std::string& reason) {
  d.state = LiveState::kUndecidable;
  d.label.clear();
  d.barcode = -1;
  d.confidence = 0.0;
  d.reason = reason;
  d.status = demux::CallStatus::kNoFingerprint;
  d.early = false;
}

const LiveDecision& LiveClassifier::feed(LiveRead& read, std::span<const int16_t> chunk, bool end,
                                         Scratch& scratch) const {
  const Impl& m = *m_impl;
  if (read.m_decision.final()) return read.m_decision;
  keep_samples(read, chunk);
  read.m_seen += chunk.size();
  if (read.m_next_attempt == 0) read.m_next_attempt = std::max<uint64_t>(m.options.first_attempt, 1);
  const bool decisive = end || read.m_seen >= m.decisive;
  if (!decisive && read.m_seen < read.m_next_attempt) {
    read.m_decision.samples_seen = read.m_seen;
    return read.m_decision;
  }
  while (read.m_next_attempt <= read.m_seen) read.m_next_attempt += m.options.attempt_every;
  attempt(read, decisive, end, scratch);
  if (read.m_decision.final()) std::vector<int16_t>().swap(read.m_adc);  // nothing more to keep
  return read.m_decision;
}

// Appends what the read's state keeps of `chunk`: with the CNN, samples up to the decisive
// point (the call never looks further); with the LLR-only detector, everything until the
// decision (at most decide_by plus one chunk), so a whole read fed at once is called whole.
void LiveClassifier::keep_samples(LiveRead& read, std::span<const int16_t> chunk) const {
  const bool capped = m_impl->detector.method() == DetectMethod::kCnn;
  const uint64_t keep = m_impl->decisive;
  if (capped && read.m_adc.size() >= keep) return;
  size_t take = chunk.size();
  if (capped) take = static_cast<size_t>(std::min<uint64_t>(keep - read.m_adc.size(), take));
  const uint64_t expected = std::min<uint64_t>(keep, uint64_t{1} << 16);  // grows past it if needed
  if (read.m_adc.capacity() == 0) read.m_adc.reserve(static_cast<size_t>(std::max<uint64_t>(expected, take)));
  read.m_adc.insert(read.m_adc.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(take));
}

}  // namespace escpod::pipeline
