// The streaming (live) classifier: a read's raw signal is fed chunk by chunk while the read is
// still in the pore (MinKNOW's read-until sends ~0.1-1 s at a time), and each feed answers
// `need more`, `decided(label, confidence)` or `undecidable(reason)` (docs/live.md §2).
//
// Contract:
// - Given the whole read (every chunk, then `end`), the decision is the fused run's call
//   (pipeline::run_demux) for that read: the same per-read steps (detect, fingerprint or window,
//   head) on the same samples. Given a prefix, it decides early only when the boundaries validate
//   on the samples seen, the head's input lies wholly inside them, the call is classified, its
//   confidence reaches LiveOptions::min_confidence, and the previous attempt found the same
//   adapter end and the same call (a boundary found on a prefix can still move).
// - It stops looking at `decisive_samples()`: from there on the fused run's call depends on
//   nothing the read has not sent (with the boundary CNN: the detector's 11,500-sample prefix and
//   whether the read is shorter than the short-read rule's 13,000 samples), so the decision there
//   is the whole-read call. With the LLR-only detector, which reads the whole read, it decides at
//   LiveOptions::decide_by (--decide-by) on what it has (documented as a difference).
// - Per-read state (LiveRead) holds the raw samples until the decision, 2 bytes each, at most
//   decisive_samples() with the CNN (26 KB for RNA004) and decisive_samples() plus one chunk with
//   the LLR-only detector (a whole read fed at once is kept whole, so it is called whole), and a
//   few counters; the samples are released once the decision is final.
// - A LiveClassifier is immutable and shared by threads; each thread feeds with its own Scratch.
//   A LiveRead is fed by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/demux/demux.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/pipeline/live/balancing.hpp"

namespace escpod::pipeline {

struct LiveOptions {
  // An early decision needs the head's confidence (top-1 minus top-2 probability) to reach this
  // as well as the head's own rule; 0: the head's rule alone. The decision at decisive_samples()
  // is the whole-read call whatever this is.
  double min_confidence = 0.0;
  // Samples a read must have before the first attempt, and new samples between attempts (each
  // attempt runs the detector and the head on everything seen).
  uint64_t first_attempt = 2000;
  // An early decision needs an adapter at least this long (samples): a short "adapter" found on
  // a prefix is most often a boundary that moves once more signal comes (WarpDemuX's live
  // min_adapter_length plays the same part).
  uint64_t min_adapter_samples = 1000;
  uint64_t attempt_every = 1000;
  // LLR-only detector: decide on the first decide_by samples (it would otherwise read the whole
  // read); unset: kDefaultDecideBy. With the CNN, whose calls are final by decisive_samples(), a
  // value is a usage error (it would be ignored).
  std::optional<uint64_t> decide_by;
  static constexpr uint64_t kDefaultDecideBy = 20000;
};

enum class LiveState : uint8_t {
  kNeedMore,     // feed more signal
  kDecided,      // a call: a barcode, or unclassified by the head (below threshold, noise)
  kUndecidable,  // no call will come: no adapter found, no fingerprint, no signal
};

std::string_view live_state_name(LiveState state);  // "need_more", "decided", "undecidable"

struct LiveDecision {
  LiveState state = LiveState::kNeedMore;
  // Decided: the output name (docs/demux.md §8.1, e.g. "BC04"), or "unclassified". Else empty.
  std::string label;
  // Index of `label` in LiveClassifier::barcode_names(); -1 when unclassified or not decided.
  int32_t barcode = -1;
  double confidence = 0.0;
  // Why not a barcode (the fused run's reason: "below threshold", "boundary detection failed:
  // ..."); empty for a barcode.
  std::string reason;
  demux::CallStatus status = demux::CallStatus::kNoFingerprint;
  uint64_t samples_seen = 0;   // samples fed when the decision was made
  int64_t adapter_end = 0;     // detected adapter end (0: none)
  std::string detector;        // the attempt that found the boundaries ("cnn", "llr", ...)
  bool early = false;          // decided before decisive_samples() and before the read's end
  bool final() const { return state != LiveState::kNeedMore; }
};

// What a balancing policy is told of a final decision (docs/live.md §2.3): a barcode is
// classified; the head's noise class an outlier; another unclassified call unclassified; an
// undecidable read failed.
live::ReadCall policy_read_call(const LiveDecision& decision);

// One read's state between chunks.
class LiveRead {
 public:
  LiveRead() = default;
  LiveRead(float offset, float scale) : m_offset(offset), m_scale(scale) {}
  uint64_t samples_seen() const { return m_seen; }
  const LiveDecision& decision() const { return m_decision; }
  size_t state_bytes() const { return sizeof(*this) + m_adc.capacity() * sizeof(int16_t); }

 private:
  friend class LiveClassifier;
  float m_offset = 0.0f, m_scale = 1.0f;
  uint64_t m_seen = 0;          // samples fed (may exceed what is kept)
  uint64_t m_next_attempt = 0;  // samples at which the next attempt runs (0: not set)
  int64_t m_last_adapter_end = -1;  // the previous attempt's confident call: its adapter end
  int32_t m_last_label = -1;        // and label (an early decision needs two that agree)
  std::vector<int16_t> m_adc;   // the first min(m_seen, decisive_samples()) samples
  LiveDecision m_decision;
};

class LiveClassifier {
 public:
  // Per-thread buffers (calibrated samples, detector and head scratch).
  struct Scratch {
    Scratch();
    ~Scratch();
    Scratch(Scratch&&) noexcept;
    Scratch& operator=(Scratch&&) noexcept;
    struct Impl;
    std::unique_ptr<Impl> impl;
  };

  // Loads the model as every entry point does (load_run_model); any head the fused run takes.
  static Result<LiveClassifier> create(const ModelSpec& spec, const LiveOptions& options);

  LiveClassifier(LiveClassifier&&) noexcept;
  LiveClassifier& operator=(LiveClassifier&&) noexcept;
  ~LiveClassifier();

  Scratch make_scratch() const;
  // A new read with its calibration (pA = (adc + offset) * scale).
  LiveRead new_read(float offset, float scale) const { return LiveRead(offset, scale); }

  // Feeds the next chunk (new samples only) of `read`; `end`: the read has ended (no more
  // chunks). Returns the read's decision; once final, later feeds return it unchanged.
  const LiveDecision& feed(LiveRead& read, std::span<const int16_t> chunk, bool end,
                           Scratch& scratch) const;

  // The output names of the barcodes (the head's labels other than noise), the index space of
  // LiveDecision::barcode.
  std::span<const std::string> barcode_names() const;
  uint64_t decisive_samples() const;
  const LiveOptions& options() const;
  std::string describe() const;  // the head, the detector, the attempt schedule

 private:
  struct Impl;
  explicit LiveClassifier(std::unique_ptr<Impl> impl);
  void keep_samples(LiveRead& read, std::span<const int16_t> chunk) const;
  void attempt(LiveRead& read, bool decisive, bool end, Scratch& scratch) const;
  bool input_complete(const Boundaries& bounds, size_t n_seen) const;
  void set_decided(LiveDecision& d, const demux::Classification& call, bool early) const;
  static void set_undecidable(LiveDecision& d, const std::string& reason);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::pipeline
