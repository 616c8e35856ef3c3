// The CTC-CRF barcode head (crf_head.hpp): window -> encoder -> decode -> match -> gates.
#include "escpod/demux/crf_head.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "escpod/demux/crf_lattice.hpp"
#include "escpod/demux/crf_match.hpp"
#include "escpod/demux/crf_model.hpp"

namespace escpod::demux {

const char* crf_decoder_name(CrfDecoderChoice choice) {
  switch (choice) {
    case CrfDecoderChoice::kPosterior: return "posterior";
    case CrfDecoderChoice::kBeam: return "beam";
    case CrfDecoderChoice::kModelDefault: break;
  }
  return "default";
}

Result<CrfDecoderChoice> parse_crf_decoder(const std::string& text) {
  if (text == "posterior") return CrfDecoderChoice::kPosterior;
  if (text == "beam") return CrfDecoderChoice::kBeam;
  return Status::invalid_argument("--decoder: '" + text + "' is not a decoder (posterior or beam)");
}

const char* crf_window_placement_name(CrfWindowPlacement placement) {
  switch (placement) {
    case CrfWindowPlacement::kBeforeBoundary: return "before-boundary";
    case CrfWindowPlacement::kRollingStart: return "rolling-start";
    case CrfWindowPlacement::kModelDefault: break;
  }
  return "default";
}

Result<CrfWindowPlacement> parse_crf_window_placement(const std::string& text) {
  if (text == "before-boundary") return CrfWindowPlacement::kBeforeBoundary;
  if (text == "rolling-start") return CrfWindowPlacement::kRollingStart;
  return Status::invalid_argument("--crf-window: '" + text +
                                  "' is not a window placement (before-boundary or rolling-start)");
}

namespace {

// Gate codes of the `gate` column (0..4 follow CrfGateResult; 5 is this head's own gate).
constexpr double kGateMeanPost = 5.0;

// The reason of a gated read: which gate rejected it, by its option (static text, see
// Classification::detail). The "below threshold: " prefix keeps the run summary grouping them.
std::string_view gate_reason(CrfGateResult gate, bool mean_post_failed) {
  switch (gate) {
    case CrfGateResult::kPass: break;
    case CrfGateResult::kEditMargin: return "below threshold: gate --min-margin";
    case CrfGateResult::kCrfMargin: return "below threshold: gate --min-crf-margin";
    case CrfGateResult::kCrfProb: return "below threshold: gate --min-crf-prob";
    case CrfGateResult::kBaseq: return "below threshold: gate --min-baseq";
  }
  return mean_post_failed ? "below threshold: gate --min-mean-post" : "";
}

// What a loaded head runs with: every option resolved against the model.
struct CrfSettings {
  bool beam = false;
  CrfWindowPlacement placement = CrfWindowPlacement::kBeforeBoundary;
  CrfNormSpan norm_span = CrfNormSpan::kWindow;
  CrfGates gates;
  std::string min_baseq_source;  // "model min_baseQ", "--min-baseq", "default"
  double min_mean_post = kDefaultMinMeanPost;
  bool ref_scores = false;
  int64_t margin = 200;  // bundles
  int64_t clamp = 0;     // bundles
  // Windows per encoder call: a v2 read's rolling windows, or one window each of up to this many
  // reads per classify() call (the one-window placements).
  int64_t window_batch = 1;
};

// One decoded window: its scores and both decodes (kept while a better window may come).
struct WindowCall {
  std::vector<float> scores;  // [T, n_scores]: the one-window placements' encoder output
  CrfScoresView view;         // the scores decoded: into `scores` or into CrfScratch::batch_scores
  PosteriorCall posterior;
  BeamCall beam;
  int64_t start = 0;
  double rank = 0.0;  // baseq with beam search, mean log-posterior otherwise
};

class CrfScratch final : public HeadScratch {
 public:
  CrfScratch(const CrfModel& model, CrfPosteriorDecoder posterior_decoder,
             std::optional<CrfBeamSearch> beam_search, std::optional<CrfRefScorer> ref_scorer, size_t n_refs,
             size_t window_batch)
      : encoder(model, 1),
        posterior(std::move(posterior_decoder)),
        beam(std::move(beam_search)),
        scorer(std::move(ref_scorer)),
        batch(window_batch) {
    const auto chunk = static_cast<size_t>(model.config.chunk);
    window.resize(chunk * batch);
    starts.resize(batch);
    batch_reads.resize(batch);
    sorted.reserve(chunk);
    const auto n_scores = static_cast<size_t>(encoder.steps(chunk) * encoder.n_scores());
    current.scores.resize(n_scores);
    best.scores.resize(n_scores);
    if (batch > 1) batch_scores.resize(n_scores * batch);
    logp.resize(n_refs);
  }
  CrfEncoder encoder;
  CrfPosteriorDecoder posterior;
  std::optional<CrfBeamSearch> beam;
  std::optional<CrfRefScorer> scorer;
  size_t batch;                     // windows per encoder call (CrfSettings::window_batch)
  std::vector<float> window;        // `batch` normalised windows of `chunk` samples, one after another
  std::vector<int64_t> starts;      // their first samples in the read
  std::vector<size_t> batch_reads;  // one-window placements: the read (in the call) of each window
  std::vector<float> batch_scores;  // [T, batch, n_scores], the encoder's output for them
  std::vector<float> sorted;  // median/MAD work space
  WindowCall current, best;
  std::vector<float> logp;
  const BarcodePanel* panel = nullptr;  // the head's, for crf_calls
  // Per read of the last classify(), for crf_calls: the decoded call, the chosen reference (-1:
  // no window) and the most probable one (-1 without lattice scores). Strings keep their capacity.
  struct ReadCall {
    std::string sequence;
    int32_t ref = -1, crf_best = -1;
  };
  std::vector<ReadCall> calls;
  size_t n_calls = 0;  // reads in the last classify()
};

// Median of `v` (reordered in place); v non-empty.
float median_of(std::vector<float>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  float m = v[mid];
  if (v.size() % 2 == 0) {
    const float lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    m = 0.5f * (m + lower);
  }
  return m;
}

// bonito's med/MAD convention: (x - median) / (1.4826 * MAD) with median and MAD of `span`.
// False when the MAD is zero (a flat signal has no usable window).
bool med_mad(std::span<const float> span, std::vector<float>& work, float& shift, float& scale) {
  if (span.empty()) return false;
  work.assign(span.begin(), span.end());
  const float med = median_of(work);
  for (float& x : work) x = std::fabs(x - med);
  const float mad = median_of(work);
  if (!(mad > 0.0f)) return false;
  shift = med;
  scale = 1.0f / (1.4826f * mad);
  return true;
}

class CrfHead final : public Head {
 public:
  CrfHead(CrfModel model, BarcodePanel panel, CrfSettings settings)
      : m_model(std::move(model)), m_panel(std::move(panel)), m_settings(std::move(settings)) {
    m_geometry.n_base = m_model.config.n_base;
    m_geometry.state_len = m_model.config.state_len;
    m_geometry.alphabet = m_model.config.alphabet;
    for (size_t i = 0; i < m_panel.size(); ++i) {
      m_labels.push_back(static_cast<int32_t>(i + 1));
      m_label_names.push_back(m_panel.ref(i).name);
    }
    m_columns = {"window_start", "edit_dist", "second_dist", "call_len", "mean_post", "gate"};
    if (m_settings.beam) m_columns.emplace_back("baseq");
    if (m_settings.ref_scores) {
      for (const char* c : {"crf_logp", "crf_margin", "crf_best"}) m_columns.emplace_back(c);
    }
    // crf_best holds a class index: the engine writes it as the reference's name.
    m_column_kinds.assign(m_columns.size(), ColumnKind::kNumber);
    if (m_settings.ref_scores) m_column_kinds.back() = ColumnKind::kClassName;
  }

  std::string_view name() const override { return "CRF"; }
  HeadInput input() const override {
    HeadInput in;
    in.kind = HeadInputKind::kSignalWindow;
    // The window before the adapter end; the head reads PreparedRead::pa for the rolling and
    // clamped windows, which reach past it.
    in.window_begin = -m_model.config.chunk;
    in.window_end = 0;
    in.batch_size = one_window() ? static_cast<size_t>(m_settings.window_batch) : 1;
    return in;
  }
  std::span<const std::string> extra_columns() const override { return m_columns; }
  std::span<const ColumnKind> extra_column_kinds() const override { return m_column_kinds; }
  std::span<const int32_t> labels() const override { return m_labels; }
  std::span<const std::string> label_names() const override { return m_label_names; }
  std::string describe() const override;

  std::unique_ptr<HeadScratch> make_scratch() const override {
    // The decoders were validated at load (load_crf_head), so create() cannot fail here.
    auto posterior = CrfPosteriorDecoder::create(m_geometry).value();
    std::optional<CrfBeamSearch> beam;
    if (m_settings.beam) beam = CrfBeamSearch::create(m_geometry, beam_options()).value();
    std::optional<CrfRefScorer> scorer;
    if (m_settings.ref_scores) scorer = CrfRefScorer::create(m_geometry, m_panel.refs()).value();
    auto s = std::make_unique<CrfScratch>(m_model, std::move(posterior), std::move(beam), std::move(scorer),
                                          m_panel.size(), static_cast<size_t>(m_settings.window_batch));
    s->panel = &m_panel;
    return s;
  }

  void classify(std::span<const PreparedRead> reads, HeadScratch& scratch,
                std::span<Classification> calls) const override {
    auto& s = static_cast<CrfScratch&>(scratch);
    if (s.calls.size() < reads.size()) s.calls.resize(reads.size());
    s.n_calls = reads.size();
    if (one_window() && s.batch > 1) {
      for (size_t first = 0; first < reads.size(); first += s.batch) {
        const size_t n = std::min(s.batch, reads.size() - first);
        classify_windows_of_reads(reads.subspan(first, n), first, s, calls.subspan(first, n));
      }
      return;
    }
    for (size_t i = 0; i < reads.size(); ++i) classify_one(reads[i], i, s, calls[i]);
  }

  BeamOptions beam_options() const {
    BeamOptions b;
    b.blank_score = m_model.config.blank_score;
    return b;  // width 32, cut 100, q scale 1 / shift 0: as SeqTagger runs bonito
  }
  // Samples from the read start this head reads (crf_samples_needed).
  int64_t samples_needed(int64_t adapter_end) const {
    const CrfConfig& c = m_model.config;
    if (!seqtagger()) return std::max(adapter_end, c.chunk);
    if (m_settings.placement == CrfWindowPlacement::kRollingStart) return c.max_chunk.value_or(c.chunk);
    return std::max<int64_t>(adapter_end, 0);
  }

 private:
  int64_t chunk() const { return m_model.config.chunk; }
  bool seqtagger() const { return m_model.kind == CrfModelKind::kSeqTagger; }
  // One window per read (bundles, SeqTagger v1): reads can share an encoder call.
  bool one_window() const { return !seqtagger() || m_settings.placement != CrfWindowPlacement::kRollingStart; }

  // `index`: the read's position in the classify() call (its CrfScratch::calls entry).
  void classify_one(const PreparedRead& r, size_t index, CrfScratch& s, Classification& out) const;
  void classify_windows_of_reads(std::span<const PreparedRead> reads, size_t first_index, CrfScratch& s,
                                 std::span<Classification> calls) const;
  void start_call(CrfScratch& s, size_t index, Classification& out) const;
  void finish_call(CrfScratch& s, size_t index, Classification& out) const;
  bool best_window(const PreparedRead& r, CrfScratch& s) const;
  // The one-window placements' window, normalised into `dst` (`chunk` floats) with its first
  // sample in *start; false when the read has no usable window.
  bool place_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const;
  bool bundle_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const;
  bool boundary_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const;
  bool rolling_windows(const PreparedRead& r, CrfScratch& s) const;
  bool normalise(std::span<const float> samples, std::span<const float> norm_span, size_t pad,
                 CrfScratch& s, float* dst) const;
  bool decode_current(CrfScratch& s) const;
  bool decode_view(const CrfScoresView& view, CrfScratch& s) const;
  size_t fill_batch(const PreparedRead& r, int64_t step, int64_t limit, int64_t& begin, CrfScratch& s) const;
  void rank_batch(const float* out, size_t n, CrfScratch& s, bool& found) const;
  void keep_best_scores(CrfScratch& s) const;
  void fill_call(const BarcodeMatch& m, CrfGateResult gate, bool mean_post_failed,
                 const std::optional<CrfRefReport>& lattice, CrfScratch& s, Classification& out) const;

  CrfModel m_model;
  BarcodePanel m_panel;
  CrfSettings m_settings;
  CrfGeometry m_geometry;
  std::vector<int32_t> m_labels;
  std::vector<std::string> m_label_names;  // the references' names (output files, `barcode` column)
  std::vector<std::string> m_columns;
  std::vector<ColumnKind> m_column_kinds;
};

// Copies `samples` into `dst` (`chunk` floats of the scratch's windows) after `pad` zeros,
// normalised: standardised with the model's constants, or med/MAD over `norm_span` (SeqTagger
// v1). False: no usable normalisation.
bool CrfHead::normalise(std::span<const float> samples, std::span<const float> norm_span, size_t pad,
                        CrfScratch& s, float* dst) const {
  float shift = 0.0f, scale = 1.0f;
  const CrfConfig& c = m_model.config;
  if (c.standardise) {
    shift = static_cast<float>(c.mean);
    scale = static_cast<float>(1.0 / c.stdev);
  } else if (!med_mad(norm_span, s.sorted, shift, scale)) {
    return false;
  }
  std::fill(dst, dst + pad, 0.0f);
  for (size_t i = 0; i < samples.size(); ++i) dst[pad + i] = (samples[i] - shift) * scale;
  return true;
}

// Encodes and decodes the scratch's first window into s.current; false if a kernel failed.
bool CrfHead::decode_current(CrfScratch& s) const {
  WindowCall& w = s.current;
  const auto n = static_cast<size_t>(chunk());
  if (!s.encoder.run(s.window.data(), n, w.scores.data()).is_ok()) return false;
  return decode_view(CrfScoresView{w.scores.data(), s.encoder.steps(n), s.encoder.n_scores()}, s);
}

// Decodes `view` into s.current (which then refers to it); false if a decoder failed.
bool CrfHead::decode_view(const CrfScoresView& view, CrfScratch& s) const {
  WindowCall& w = s.current;
  w.view = view;
  // With the beam decoder the posterior decode's first pass also fills the beam's guides.
  if (!s.posterior.decode(view, w.posterior, s.beam ? &*s.beam : nullptr).is_ok()) return false;
  w.rank = w.posterior.mean_logpost;
  if (s.beam) {
    if (!s.beam->decode(view, w.beam).is_ok()) return false;
    w.rank = w.beam.baseq;
  }
  return true;
}

// docs/demux.md §7.2 window rules (margin, clamping), on the decoded prefix.
bool CrfHead::bundle_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const {
  const int64_t ae = r.adapter_end, len = static_cast<int64_t>(r.num_samples), c = chunk();
  int64_t begin = 0;
  if (ae > len || ae <= 0) return false;
  if (ae >= c + m_settings.margin) {
    begin = ae - c;
  } else if (ae >= c || len < c || c - ae > m_settings.clamp) {
    return false;
  }
  if (begin + c > static_cast<int64_t>(r.pa.size())) return false;  // beyond the decoded prefix
  const auto samples = r.pa.subspan(static_cast<size_t>(begin), static_cast<size_t>(c));
  if (!normalise(samples, samples, 0, s, dst)) return false;
  *start = begin;
  return true;
}

// SeqTagger v1 convention: the last `chunk` samples before the boundary, left-padded with zeros.
bool CrfHead::boundary_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const {
  const int64_t ae = r.adapter_end, c = chunk();
  if (ae <= 0 || ae > static_cast<int64_t>(r.pa.size())) return false;
  const int64_t begin = std::max<int64_t>(0, ae - c);
  const auto samples = r.pa.subspan(static_cast<size_t>(begin), static_cast<size_t>(ae - begin));
  const auto span = m_settings.norm_span == CrfNormSpan::kPrefix
                        ? r.pa.subspan(0, static_cast<size_t>(ae)) : samples;
  if (!normalise(samples, span, static_cast<size_t>(c - (ae - begin)), s, dst)) return false;
  *start = ae - c;
  return true;
}

bool CrfHead::place_window(const PreparedRead& r, CrfScratch& s, float* dst, int64_t* start) const {
  return seqtagger() ? boundary_window(r, s, dst, start) : bundle_window(r, s, dst, start);
}

// SeqTagger v2 convention (our reading): `chunk`-sample windows at 0, step, 2 step, ... that end
// within max_chunksize samples (and the decoded prefix); the best-ranked call wins, ties to the
// earlier window. The windows go through the encoder s.batch at a time (one call for a read's
// nine windows at b13's geometry) and are decoded in order, so the winner is the same as with
// one window per call.
bool CrfHead::rolling_windows(const PreparedRead& r, CrfScratch& s) const {
  const CrfConfig& cfg = m_model.config;
  const int64_t c = chunk(), step = std::max<int64_t>(1, cfg.step.value_or(c));
  const int64_t limit = std::min<int64_t>(cfg.max_chunk.value_or(c), static_cast<int64_t>(r.pa.size()));
  bool found = false;
  for (int64_t begin = 0; begin + c <= limit;) {
    const size_t n = fill_batch(r, step, limit, begin, s);
    if (n == 0) break;
    if (found) keep_best_scores(s);  // the batch output is about to be overwritten
    float* out = s.batch > 1 ? s.batch_scores.data() : s.current.scores.data();
    if (!s.encoder.run_batch(s.window.data(), n, static_cast<size_t>(c), out).is_ok()) continue;
    rank_batch(out, n, s, found);
  }
  if (found) std::swap(s.current, s.best);
  return found;
}

// Normalises the next windows from `begin` (advanced past them) into the scratch's batch, up to
// s.batch of them (a window with no usable normalisation is skipped); returns how many.
size_t CrfHead::fill_batch(const PreparedRead& r, int64_t step, int64_t limit, int64_t& begin,
                           CrfScratch& s) const {
  const auto len = static_cast<size_t>(chunk());
  size_t n = 0;
  for (; n < s.batch && begin + chunk() <= limit; begin += step) {
    const auto samples = r.pa.subspan(static_cast<size_t>(begin), len);
    if (!normalise(samples, samples, 0, s, s.window.data() + n * len)) continue;
    s.starts[n++] = begin;
  }
  return n;
}

// Decodes the `n` windows of one encoder output `out` ([T, n, n_scores]: window i's step t at
// (t * n + i) * n_scores) in window order, keeping the best-ranked in s.best (ties to the earlier).
void CrfHead::rank_batch(const float* out, size_t n, CrfScratch& s, bool& found) const {
  const int64_t n_scores = s.encoder.n_scores(), steps = s.encoder.steps(static_cast<size_t>(chunk()));
  for (size_t i = 0; i < n; ++i) {
    const CrfScoresView view{out + static_cast<int64_t>(i) * n_scores, steps, static_cast<int64_t>(n) * n_scores};
    s.current.start = s.starts[i];
    if (!decode_view(view, s)) continue;
    if (!found || s.current.rank > s.best.rank) {
      std::swap(s.current, s.best);
      found = true;
    }
  }
}

// When s.best's scores lie in the batch output (or, at batch 1, in the buffer the next window
// is encoded into), copies them into s.best.scores so the next encoder call cannot overwrite them.
void CrfHead::keep_best_scores(CrfScratch& s) const {
  WindowCall& b = s.best;
  if (b.view.data == b.scores.data()) return;
  const auto row = static_cast<size_t>(s.encoder.n_scores());
  for (int64_t t = 0; t < b.view.n_steps; ++t) {
    std::copy_n(b.view.data + t * b.view.step_stride, row, b.scores.data() + static_cast<size_t>(t) * row);
  }
  b.view = CrfScoresView{b.scores.data(), b.view.n_steps, static_cast<int64_t>(row)};
}

bool CrfHead::best_window(const PreparedRead& r, CrfScratch& s) const {
  if (!one_window()) return rolling_windows(r, s);
  return place_window(r, s, s.window.data(), &s.current.start) && decode_current(s);
}

void CrfHead::classify_one(const PreparedRead& r, size_t index, CrfScratch& s, Classification& out) const {
  start_call(s, index, out);
  if (!best_window(r, s)) {
    out.status = CallStatus::kNoWindow;
    return;
  }
  finish_call(s, index, out);
}

// The one-window placements, several reads per encoder call: each read's window goes into the
// batch (a read without one is kNoWindow at once), one encoder call runs them all, then each is
// decoded and called in read order. The scores are bitwise those of one call per window.
void CrfHead::classify_windows_of_reads(std::span<const PreparedRead> reads, size_t first_index, CrfScratch& s,
                                        std::span<Classification> calls) const {
  const auto len = static_cast<size_t>(chunk());
  size_t n = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    start_call(s, first_index + i, calls[i]);
    if (place_window(reads[i], s, s.window.data() + n * len, &s.starts[n])) {
      s.batch_reads[n++] = i;
    } else {
      calls[i].status = CallStatus::kNoWindow;
    }
  }
  if (n == 0) return;
  const bool encoded = s.encoder.run_batch(s.window.data(), n, len, s.batch_scores.data()).is_ok();
  const int64_t n_scores = s.encoder.n_scores(), steps = s.encoder.steps(len);
  for (size_t k = 0; k < n; ++k) {
    Classification& out = calls[s.batch_reads[k]];
    const CrfScoresView view{s.batch_scores.data() + static_cast<int64_t>(k) * n_scores, steps,
                             static_cast<int64_t>(n) * n_scores};
    s.current.start = s.starts[k];
    if (!encoded || !decode_view(view, s)) {
      out.status = CallStatus::kNoWindow;
      continue;
    }
    finish_call(s, first_index + s.batch_reads[k], out);
  }
}

void CrfHead::start_call(CrfScratch& s, size_t index, Classification& out) const {
  out.label = kUnclassifiedLabel;
  out.best_label = kUnclassifiedLabel;
  out.class_index = -1;
  out.confidence = 0.0;
  out.threshold = 0.0;
  out.probabilities.clear();
  out.detail = {};
  s.calls[index].sequence.clear();
  s.calls[index].ref = s.calls[index].crf_best = -1;
}

// The call of the window decoded into s.current: matching, lattice scores, gates.
void CrfHead::finish_call(CrfScratch& s, size_t index, Classification& out) const {
  const WindowCall& w = s.current;
  const std::string& seq = s.beam ? w.beam.sequence : w.posterior.sequence;
  const BarcodeMatch m = m_panel.match(seq);
  std::optional<CrfRefReport> lattice;
  if (s.scorer) {
    const float log_z = s.beam ? w.beam.log_partition : w.posterior.log_partition;
    if (s.scorer->score(w.view, log_z, s.logp).is_ok()) lattice = crf_ref_report(s.logp, m.best_idx);
  }
  const std::optional<float> baseq = s.beam ? std::optional<float>(w.beam.baseq) : std::nullopt;
  CrfScratch::ReadCall& call = s.calls[index];
  call.sequence.assign(seq);
  call.ref = m.best_idx;
  if (lattice) call.crf_best = lattice->crf_best;
  const CrfGateResult gate = apply_crf_gates(m_settings.gates, m, lattice, baseq);
  const bool mean_post_failed = std::exp(static_cast<double>(w.posterior.mean_logpost)) < m_settings.min_mean_post;
  fill_call(m, gate, mean_post_failed, lattice, s, out);
}

void CrfHead::fill_call(const BarcodeMatch& m, CrfGateResult gate, bool mean_post_failed,
                        const std::optional<CrfRefReport>& lattice, CrfScratch& s,
                        Classification& out) const {
  const WindowCall& w = s.current;
  const bool pass = gate == CrfGateResult::kPass && !mean_post_failed;
  out.class_index = m.best_idx;
  out.best_label = m.best_idx + 1;
  out.status = pass ? CallStatus::kClassified : CallStatus::kBelowThreshold;
  if (pass) out.label = out.best_label;
  out.detail = gate_reason(gate, mean_post_failed);
  // Fused confidence = edit margin (0 when absent); without lattice scoring a margin-gated read
  // reports 0 (docs/demux.md §7.7, as escapepod).
  const bool margin_gated = gate == CrfGateResult::kEditMargin && !m_settings.ref_scores;
  out.confidence = m.has_second() && !margin_gated ? m.margin() : 0.0;
  const double gate_code = gate != CrfGateResult::kPass ? static_cast<double>(gate)
                                                         : (mean_post_failed ? kGateMeanPost : 0.0);
  auto& p = out.probabilities;
  const std::string& seq = s.beam ? w.beam.sequence : w.posterior.sequence;
  p.push_back(static_cast<double>(w.start));
  p.push_back(m.best_dist);
  p.push_back(m.second_dist);
  p.push_back(static_cast<double>(seq.size()));
  p.push_back(std::exp(static_cast<double>(w.posterior.mean_logpost)));
  p.push_back(gate_code);
  if (s.beam) p.push_back(w.beam.baseq);
  if (lattice) {
    p.push_back(lattice->crf_logp);
    p.push_back(lattice->has_margin ? lattice->crf_margin : std::nan(""));
    p.push_back(lattice->crf_best);  // class index (kClassName column)
  }
}

std::string CrfHead::describe() const {
  const CrfConfig& c = m_model.config;
  std::string out = fmt::format("model: CTC-CRF {} ({})\n", seqtagger() ? "SeqTagger/bonito folder" : "escapepod bundle",
                                m_model.format);
  out += fmt::format("folder: {}\nencoder: {}\n", m_model.path.string(), m_model.encoder_file.string());
  out += fmt::format("geometry: chunk {} samples, stride {}, state_len {}, alphabet {}\n", c.chunk, c.stride,
                     c.state_len, c.alphabet);
  if (c.standardise) {
    out += fmt::format("normalisation: standardised, mean {} stdev {}\n", c.mean, c.stdev);
  } else {
    out += fmt::format("normalisation: median/MAD over the {}\n",
                       m_settings.norm_span == CrfNormSpan::kWindow ? "window" : "decoded prefix up to the adapter end");
  }
  if (seqtagger()) {
    out += fmt::format("window: {} ({} samples", crf_window_placement_name(m_settings.placement), c.chunk);
    if (m_settings.placement == CrfWindowPlacement::kRollingStart) {
      out += fmt::format(", step {}, up to {} samples from the read start, best call kept; {} per encoder call",
                         c.step.value_or(c.chunk), c.max_chunk.value_or(c.chunk), m_settings.window_batch);
    } else {
      out += fmt::format("; windows of up to {} reads per encoder call", m_settings.window_batch);
    }
    out += ")\n";
  } else {
    out += fmt::format("window: {} samples ending at the adapter end, margin {}, clamp {}; windows of up to {} "
                       "reads per encoder call\n", c.chunk, m_settings.margin, m_settings.clamp, m_settings.window_batch);
  }
  out += fmt::format("decoder: {}\n", m_settings.beam ? "beam (width 32, cut 100)" : "posterior (two-pass)");
  out += fmt::format("panel: {} references matched in {} form, min pairwise distance {}\n", m_panel.size(),
                     panel_form_name(m_panel.form()), m_panel.min_pairwise_distance());
  for (size_t i = 0; i < m_panel.size(); ++i) {
    out += fmt::format("  BC{:02d} = {} {}\n", i + 1, m_panel.ref(i).name, m_panel.ref(i).sequence);
  }
  const CrfGates& g = m_settings.gates;
  out += fmt::format("gates: min margin {}", g.min_margin);
  if (g.min_crf_margin) out += fmt::format(", min crf margin {}", *g.min_crf_margin);
  if (g.min_crf_prob) out += fmt::format(", min crf prob {}", *g.min_crf_prob);
  if (m_settings.beam && g.min_baseq) out += fmt::format(", min baseq {} ({})", *g.min_baseq, m_settings.min_baseq_source);
  // The engine's `--info` lists the outputs, named by label_names() (the references').
  out += fmt::format(", min mean posterior {}\n", m_settings.min_mean_post);
  if (seqtagger()) {
    out += "licence: SeqTagger models are CC BY-NC-ND 4.0 (non-commercial, no modified copies); the authors "
           "have filed patent applications EP24382340 and EP24383144 on the method\n";
  } else {
    const CrfBoundaryPin& pin = m_model.boundary;
    if (pin.method.empty()) {
      out += "boundary detector: not pinned (give --method)\n";
    } else {
      out += fmt::format("boundary detector: pinned to {}", pin.method);
      if (!pin.onnx.empty()) out += fmt::format(", CNN {} (id {}, sha256 {})", pin.onnx.string(), pin.model_id, pin.sha256);
      out += "\n";
    }
    if (m_model.info_json != "{}") out += "model info: " + m_model.info_json + "\n";
  }
  return out;
}

// Resolves the options against the model (decoder, window, gates).
CrfSettings resolve_settings(const CrfModel& model, const CrfHeadOptions& o) {
  CrfSettings s;
  const bool st = model.kind == CrfModelKind::kSeqTagger;
  s.beam = o.decoder == CrfDecoderChoice::kModelDefault ? st : o.decoder == CrfDecoderChoice::kBeam;
  s.placement = o.placement;
  if (s.placement == CrfWindowPlacement::kModelDefault) {
    s.placement = model.config.standardise && model.config.max_chunk ? CrfWindowPlacement::kRollingStart
                                                                      : CrfWindowPlacement::kBeforeBoundary;
  }
  s.norm_span = o.norm_span;
  s.gates.min_margin = o.min_margin;
  s.gates.min_crf_margin = o.min_crf_margin;
  s.gates.min_crf_prob = o.min_crf_prob;
  if (o.min_baseq) {
    s.gates.min_baseq = *o.min_baseq;
    s.min_baseq_source = "--min-baseq";
  } else if (model.config.min_baseq) {
    s.gates.min_baseq = *model.config.min_baseq;
    s.min_baseq_source = "the model's min_baseQ";
  } else {
    s.gates.min_baseq = kDefaultMinBaseq;
    s.min_baseq_source = "escapepod default";
  }
  s.min_mean_post = o.min_mean_post.value_or(kDefaultMinMeanPost);
  s.ref_scores = o.ref_scores || s.gates.needs_ref_scores();
  s.margin = o.boundary_margin.value_or(model.boundary.margin);
  s.clamp = o.clamp_max_shift.value_or(model.boundary.clamp_max_shift);
  if (st && s.placement == CrfWindowPlacement::kRollingStart) {
    // No more than the read can have: windows at 0, step, ... ending within max_chunksize.
    const CrfConfig& c = model.config;
    const int64_t step = std::max<int64_t>(1, c.step.value_or(c.chunk));
    const int64_t most = std::max<int64_t>(1, (c.max_chunk.value_or(c.chunk) - c.chunk) / step + 1);
    s.window_batch = std::min<int64_t>(o.max_window_batch.value_or(kDefaultRollingWindowBatch), most);
  } else {
    s.window_batch = o.max_window_batch.value_or(kDefaultReadWindowBatch);  // one window each of this many reads
  }
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Reference names become output file names (barcode_<name>.pod5): refuse what is not one plain
// file-name part, naming the reference and where it came from.
Status check_output_names(const BarcodePanel& panel, const std::string& source) {
  for (size_t i = 0; i < panel.size(); ++i) {
    const std::string& n = panel.ref(i).name;
    const bool unsafe = n.empty() || n == "." || n == ".." ||
                        std::any_of(n.begin(), n.end(), [](char c) {
                          return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
                        });
    if (unsafe) {
      return Status::invalid_argument(fmt::format("{}: reference {} has the name '{}', which cannot name an output "
                                                  "file (empty, '.', '..', or a '/', '\\' or control character)",
                                                  source, i + 1, n));
    }
  }
  return Status::ok();
}

// The references the head matches against, in the form its calls take: --barcodes as given,
// else the model's (SeqTagger's transformed to their emitted form).
Result<BarcodePanel> make_panel(const CrfModel& model, const CrfHeadOptions& options) {
  if (!options.barcodes_csv.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(std::vector<BarcodeRef> refs, read_barcode_csv(options.barcodes_csv));
    auto panel = BarcodePanel::create(std::move(refs), PanelForm::kAsGiven);
    if (!panel.is_ok()) return Status::invalid_argument(options.barcodes_csv.string() + ": " + panel.status().message());
    return panel;
  }
  std::vector<BarcodeRef> refs;
  for (const CrfReference& r : model.references) refs.push_back({r.name, r.sequence});
  if (refs.empty()) {
    return Status::invalid_argument(model.path.string() + ": the model holds no barcode references");
  }
  if (model.kind == CrfModelKind::kSeqTagger) {
    ESCPOD_ASSIGN_OR_RETURN(auto emitted, seqtagger_emitted_form(refs, model.config.state_len));
    return BarcodePanel::create(std::move(emitted), PanelForm::kSeqTaggerEmitted);
  }
  return BarcodePanel::create(std::move(refs), PanelForm::kAsGiven);
}

}  // namespace

Result<std::vector<BarcodeRef>> read_barcode_csv(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path.string() + ": cannot open the barcode CSV");
  std::string line;
  size_t line_no = 0;
  int name_col = -1, seq_col = -1;
  std::vector<BarcodeRef> refs;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    const std::vector<std::string_view> f = split_fields(line);
    if (name_col < 0) {  // the header
      for (size_t i = 0; i < f.size(); ++i) {
        if (lower(f[i]) == "name") name_col = static_cast<int>(i);
        if (lower(f[i]) == "sequence") seq_col = static_cast<int>(i);
      }
      if (name_col < 0 || seq_col < 0) {
        return Status::invalid_argument(fmt::format("{}: line {}: the header needs `name` and `sequence` columns",
                                                    path.string(), line_no));
      }
      continue;
    }
    const auto need = static_cast<size_t>(std::max(name_col, seq_col));
    if (f.size() <= need) {
      return Status::invalid_argument(fmt::format("{}: line {}: {} fields, the header names {}", path.string(),
                                                  line_no, f.size(), need + 1));
    }
    BarcodeRef r{std::string(f[static_cast<size_t>(name_col)]), std::string(f[static_cast<size_t>(seq_col)])};
    for (char& c : r.sequence) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    refs.push_back(std::move(r));
  }
  if (name_col < 0) return Status::invalid_argument(path.string() + ": the barcode CSV is empty");
  if (refs.empty()) return Status::invalid_argument(path.string() + ": the barcode CSV holds no reference");
  return refs;
}

std::optional<CrfReadCall> crf_read_call(const HeadScratch& scratch, size_t index) {
  const auto* s = dynamic_cast<const CrfScratch*>(&scratch);
  if (s == nullptr || index >= s->n_calls || s->calls[index].ref < 0) return std::nullopt;
  const CrfScratch::ReadCall& r = s->calls[index];
  CrfReadCall c;
  c.sequence = r.sequence;
  c.reference = s->panel->ref(static_cast<size_t>(r.ref)).name;
  if (r.crf_best >= 0) c.crf_best = s->panel->ref(static_cast<size_t>(r.crf_best)).name;
  return c;
}

int64_t crf_samples_needed(const Head& head, int64_t adapter_end) {
  const auto* h = dynamic_cast<const CrfHead*>(&head);
  return h == nullptr ? 0 : h->samples_needed(adapter_end);
}

Result<LoadedHead> load_crf_head(const std::filesystem::path& folder, const CrfHeadOptions& options) {
  if (auto probed = probe_crf_model_dir(folder)) return load_crf_head(*probed, options);
  return load_crf_model(folder, options.load).status();  // says what the folder lacks
}

Result<LoadedHead> load_crf_head(const CrfModelFolder& probed, const CrfHeadOptions& options) {
  const std::filesystem::path& folder = probed.dir;
  if (options.max_window_batch && (*options.max_window_batch < 1 || *options.max_window_batch > 16)) {
    return Status::invalid_argument(fmt::format("CRF head: windows per encoder call must be 1..16, got {}",
                                                *options.max_window_batch));
  }
  ESCPOD_ASSIGN_OR_RETURN(CrfModel model, load_crf_model(probed, options.load));
  if (model.config.chunk <= 0) {
    return Status::invalid_argument(folder.string() + ": the model's chunk length must be positive");
  }
  ESCPOD_ASSIGN_OR_RETURN(BarcodePanel panel, make_panel(model, options));
  ESCPOD_RETURN_IF_ERROR(check_output_names(
      panel, options.barcodes_csv.empty() ? folder.string() : options.barcodes_csv.string()));
  CrfSettings settings = resolve_settings(model, options);
  CrfGeometry g;
  g.n_base = model.config.n_base;
  g.state_len = model.config.state_len;
  g.alphabet = model.config.alphabet;
  // Check everything make_scratch() builds, so that it cannot fail later.
  ESCPOD_RETURN_IF_ERROR(CrfPosteriorDecoder::create(g));
  if (settings.beam) {
    BeamOptions b;
    b.blank_score = model.config.blank_score;
    ESCPOD_RETURN_IF_ERROR(CrfBeamSearch::create(g, b));
  }
  if (settings.ref_scores) ESCPOD_RETURN_IF_ERROR(CrfRefScorer::create(g, panel.refs()));
  LoadedHead out;
  // The detector, from what the folder is: a bundle's pin (an unpinned bundle needs the caller's
  // choice; the CNN here is only a placeholder); a SeqTagger/bonito folder pins none and was not
  // trained on CNN boundaries, so it takes the LLR detector (docs/crf_head.md: why), which needs
  // no file beside the model.
  const bool cnn = model.kind == CrfModelKind::kBundle && model.boundary.method != "llr";
  out.signal_processing = SignalProcessing::rna004(cnn);
  out.default_settings = true;
  out.kind = "crf";
  if (model.kind == CrfModelKind::kBundle) {
    out.detector_pin = LoadedHead::DetectorPin{model.boundary.method, model.boundary.onnx, model.boundary.sha256};
  }
  out.head = std::make_unique<CrfHead>(std::move(model), std::move(panel), std::move(settings));
  return out;
}

Result<CrfHeadOptions> crf_head_options(const CrfHeadRequest& o) {
  auto set_or_none = [](double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); };
  auto set_or_none_i = [](int64_t v) { return v < 0 ? std::nullopt : std::optional<int64_t>(v); };
  CrfHeadOptions c;
  if (!o.decoder.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(c.decoder, parse_crf_decoder(o.decoder));
  }
  if (!o.window.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(c.placement, parse_crf_window_placement(o.window));
  }
  if (o.norm == "prefix") {
    c.norm_span = CrfNormSpan::kPrefix;
  } else if (o.norm != "window") {
    return Status::invalid_argument("--crf-norm must be window or prefix");
  }
  if (o.min_margin < 0) return Status::invalid_argument("--min-margin must be >= 0");
  c.min_margin = o.min_margin;
  c.min_baseq = set_or_none(o.min_baseq);
  c.min_mean_post = set_or_none(o.min_mean_post);
  c.min_crf_margin = set_or_none(o.min_crf_margin);
  c.min_crf_prob = set_or_none(o.min_crf_prob);
  c.ref_scores = o.ref_scores;
  c.barcodes_csv = o.barcodes;
  c.boundary_margin = set_or_none_i(o.boundary_margin);
  c.clamp_max_shift = set_or_none_i(o.clamp_max_shift);
  if (o.window_batch != -1) {
    if (o.window_batch < 1 || o.window_batch > 16) return Status::invalid_argument("--crf-batch must be 1..16");
    c.max_window_batch = o.window_batch;
  }
  if (Status s = parse_encoder_precision(o.precision, c.load.encoder); !s.is_ok()) {
    return Status::invalid_argument("--encoder-precision: " + s.message());
  }
  return c;
}


}  // namespace escpod::demux
