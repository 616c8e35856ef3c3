#include "escpod/pipeline/demux/demux_stages.hpp"

#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "pipeline/demux/boundary_rows.hpp"
#include "pipeline/demux/classifications_csv.hpp"
#include "pipeline/demux/read_featurize.hpp"
#include "pipeline/ops/csv_text.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {

using detail::append_csv_cell;
using detail::for_each_read_ordered;
using detail::LineReader;
using detail::parse_double;
using detail::split_csv;
using detail::open_readers;
using detail::ReadBlock;
using detail::ReadTask;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- settings -------------------------------------------------------------------------------

// Positions: integers, or floats truncated toward zero.
bool parse_position(std::string_view text, int64_t& out) {
  const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
  if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return true;
  double d = 0;
  if (!parse_double(text, d) || !std::isfinite(d) || std::fabs(d) > 9e18) return false;
  out = static_cast<int64_t>(d);
  return true;
}

void append_id(std::string& out, const pod5::ReadId& id) {
  char text[36];
  id.format_to(text);
  out.append(text, 36);
}

// Failure reasons for the counts: a decode error's details (after "decoded: ") are dropped.
std::string reason_key(const std::string& reason) {
  static constexpr std::string_view kDecode = "signal could not be decoded";
  if (reason.rfind(kDecode, 0) == 0) return std::string(kDecode);
  return reason;
}

Status check_stream(const std::ostream& out) {
  if (!out) return Status::io_error("cannot write the output");
  return Status::ok();
}

}  // namespace

// ---- settings -------------------------------------------------------------------------------

StageSettings stage_settings_from(const demux::SignalProcessing& processing, const std::string& where,
                                  DetectorChoice choice) {
  StageSettings s;
  s.config = processing.boundaries;
  s.method = processing.uses_cnn() ? DetectMethod::kCnn : DetectMethod::kLlr;
  s.cnn_model_name = processing.cnn_model_name;
  s.fingerprint = processing.fingerprint;
  const bool model_cnn = s.method == DetectMethod::kCnn;
  if (choice == DetectorChoice::kCnn && !model_cnn) {
    // The configuration as the model's, with the CNN as the detector (SignalProcessing::set_detector):
    // the CNN path refuses a configuration whose cnn_detect is off.
    demux::SignalProcessing with_cnn = processing;
    with_cnn.set_detector(true);
    s.config = with_cnn.boundaries;
    s.method = DetectMethod::kCnn;
  }
  if (choice == DetectorChoice::kLlr) {
    if (model_cnn) {
      log::warn("{} was trained on CNN boundaries; --method llr overrides it, which typically "
                "costs recall", where);
    }
    s.method = DetectMethod::kLlr;
  }
  s.preload_samples = s.method == DetectMethod::kLlr ? std::numeric_limits<size_t>::max()
                                                     : static_cast<size_t>(s.config.sig_preload_size());
  s.fingerprint.max_window_end = s.preload_samples;
  return s;
}

namespace {

// The detector a CRF model folder implies (load_run_model's rules), into spec.detector and
// spec.cnn_model; the pinned file's sha256 into *sha256 when the run uses that file.
Status apply_detector_pin(const demux::LoadedHead& loaded, bool need_detector, ModelSpec& spec, std::string* sha256) {
  if (!loaded.detector_pin) {
    // A SeqTagger/bonito folder pins none: the CNN when a CNN file is given, else its LLR default.
    if (loaded.kind == "crf" && spec.detector == DetectorChoice::kModelDefault && !spec.cnn_model.empty()) {
      spec.detector = DetectorChoice::kCnn;
    }
    return Status::ok();
  }
  const demux::LoadedHead::DetectorPin& pin = *loaded.detector_pin;
  const std::string model = spec.path.string();
  if (pin.method.empty() && spec.detector == DetectorChoice::kModelDefault && need_detector) {
    return Status::usage(model + ": the bundle pins no boundary detector; pass --method cnn (with --cnn-model "
                         "ONNX) or --method llr (LLR boundaries cost barcode recall against encoders trained on "
                         "CNN boundaries)");
  }
  if (pin.method != "cnn") return Status::ok();
  if (spec.detector == DetectorChoice::kLlr) {
    return Status::invalid_argument(model + ": the bundle pins the cnn boundary detector (its encoder was trained "
                                    "on CNN boundaries); --method llr is refused");
  }
  if (spec.cnn_model.empty()) {
    spec.cnn_model = pin.onnx;
    *sha256 = pin.sha256;
  }
  return Status::ok();
}

}  // namespace

Result<RunModel> load_run_model(ModelSpec spec, bool need_detector) {
  RunModel m;
  m.path = spec.path;
  if (spec.path.empty()) {
    m.settings = stage_settings_from(demux::SignalProcessing::rna004(true), "default settings", spec.detector);
    return m;
  }
  ESCPOD_ASSIGN_OR_RETURN(m.loaded, demux::load_head(spec.path, spec.head));
  if (!m.loaded.signal_processing) {
    return Status::corrupt(spec.path.string() +
                           ": model has no signal_processing block (which detector and "
                           "fingerprint settings it was trained with)");
  }
  ESCPOD_RETURN_IF_ERROR(apply_detector_pin(m.loaded, need_detector, spec, &m.cnn_sha256));
  m.detector = spec.detector;
  m.cnn_precision = spec.cnn_precision;
  const std::string where = m.loaded.default_settings ? "default settings" : spec.path.string();
  m.settings = stage_settings_from(*m.loaded.signal_processing, where, spec.detector);
  if (spec.cnn_precision != CnnPrecision::kFloat32 && m.settings.method != DetectMethod::kCnn) {
    return Status::usage("--cnn-precision: this run uses the LLR detector, which runs no CNN");
  }
  if (need_detector && m.settings.method == DetectMethod::kCnn) {
    ESCPOD_ASSIGN_OR_RETURN(m.cnn, find_cnn_model(spec.path, spec.cnn_model, m.settings.cnn_model_name));
  }
  return m;
}

Status require_head_input(const RunModel& model, demux::HeadInputKind kind, const std::string& stage) {
  if (!model.loaded.head) return Status::ok();  // default settings: no head to disagree
  const demux::HeadInputKind has = model.head().input().kind;
  if (has == kind) return Status::ok();
  const bool wants_window = has == demux::HeadInputKind::kSignalWindow;
  return Status::invalid_argument(fmt::format(
      "{}: a {} model, whose head reads {}; {} reads {}: its stages are demux detect, then {}",
      model.path.string(), model.head().name(), wants_window ? "the signal window" : "fingerprints", stage,
      wants_window ? "fingerprints" : "the signal window",
      wants_window ? "demux basecall" : "demux fingerprint and demux classify"));
}

// The ONNX file of the model's boundary CNN: --cnn-model, else beside the model.
Result<std::filesystem::path> find_cnn_model(const std::filesystem::path& model_path,
                                         const std::filesystem::path& explicit_path,
                                         const std::string& cnn_model_name) {
  if (!explicit_path.empty()) {
    if (!std::filesystem::exists(explicit_path)) {
      return Status::not_found("--cnn-model " + explicit_path.string() + ": no such file");
    }
    return explicit_path;
  }
  const std::string stem = std::filesystem::path(cnn_model_name).stem().string();
  const auto dir = model_path.parent_path();
  const std::filesystem::path a = dir / ("adapted_cnn_" + stem + ".onnx"), b = dir / (stem + ".onnx");
  if (std::filesystem::exists(a)) return a;
  if (std::filesystem::exists(b)) return b;
  return Status::not_found("the model uses the boundary CNN '" + cnn_model_name +
                           "' but its ONNX file is not beside the model (looked for " + a.string() +
                           " and " + b.string() + "); give it with --cnn-model, or use --method llr");
}


Result<BoundaryDetector> make_stage_detector(const RunModel& model) {
  return BoundaryDetector::create(model.settings.config, model.settings.method, model.cnn, model.cnn_sha256,
                                  model.cnn_precision);
}

// ---- detect ---------------------------------------------------------------------------------

namespace {

// The detect stage's detectors: the model's, and with emit_llr_delta the LLR detector run over the
// whole read beside it.
struct DetectStageDetectors {
  BoundaryDetector main;
  std::optional<BoundaryDetector> llr;
};

Result<DetectStageDetectors> make_detect_stage_detectors(const RunModel& model, bool llr_delta) {
  if (llr_delta && model.settings.method != DetectMethod::kCnn) {
    return Status::invalid_argument(
        "--emit-llr-delta compares the CNN's adapter end with the LLR detector's; it needs the CNN "
        "detector (--method cnn or a model that pins it)");
  }
  ESCPOD_ASSIGN_OR_RETURN(BoundaryDetector main, make_stage_detector(model));
  DetectStageDetectors d{std::move(main), std::nullopt};
  if (llr_delta) {
    ESCPOD_ASSIGN_OR_RETURN(BoundaryDetector llr,
                            BoundaryDetector::create(model.settings.config, DetectMethod::kLlr, {}));
    d.llr.emplace(std::move(llr));
  }
  return d;
}

struct DetectOut {
  Boundaries bounds;
  Boundaries llr;  // emit_llr_delta only
  std::string reason;
};

struct DetectScratch {
  detail::DecodeScratch decode;
  std::vector<std::vector<float>> pa;  // one per read of a block: detect_batch reads them together
  BoundaryDetector::Scratch detector;
  BoundaryDetector::Scratch llr;
  std::vector<std::span<const float>> pas;
  std::vector<uint64_t> lengths;
  std::vector<size_t> which;
  std::vector<Boundaries> found;
};

// The fused run's decode and detect steps (read_featurize.hpp) on a block's reads, the detector
// run on the block in one batch (the CNN evaluates up to 32 reads per call; detect_batch gives
// detect()'s answers read by read). The LLR detector, with emit_llr_delta, reads `preload`
// samples (the whole read); the main detector its own prefix, as in the fused run.
void detect_block(const DetectStageDetectors& d, size_t preload, ReadBlock<DetectOut>& block, DetectScratch& w) {
  const size_t n = block.reads.size();
  const size_t main_preload = d.main.preload_samples();
  if (w.pa.size() < n) w.pa.resize(n);
  w.pas.clear();
  w.lengths.clear();
  w.which.clear();
  for (size_t i = 0; i < n; ++i) {
    ReadTask<DetectOut>& t = block.reads[i];
    if (!detail::decode_read_prefix(*t.file, *t.batch, t.row, preload, w.decode, w.pa[i], t.out.reason)) {
      continue;
    }
    const std::span<const float> pa(w.pa[i]);
    w.pas.push_back(pa.first(std::min(pa.size(), main_preload)));
    if (d.llr) t.out.llr = d.llr->detect(pa, t.batch->num_samples[t.row], w.llr);
    w.lengths.push_back(t.batch->num_samples[t.row]);
    w.which.push_back(i);
  }
  w.found.resize(w.which.size());
  if (!w.which.empty()) d.main.detect_batch(w.pas, w.lengths, w.detector, w.found);
  for (size_t k = 0; k < w.which.size(); ++k) {
    ReadTask<DetectOut>& t = block.reads[w.which[k]];
    t.out.bounds = std::move(w.found[k]);
    detail::boundaries_found(t.out.bounds, t.out.reason);  // a failed read's reason
  }
}

// One boundaries row of `t` (kBoundariesHeader's columns, then kLlrDeltaColumns' with
// `llr_delta`) into `line`, counted into `rep`.
void append_boundaries_row(std::string& line, const ReadTask<DetectOut>& t, bool llr_delta, DetectStageReport& rep) {
  const pod5::ReadBatch& b = *t.batch;
  const Boundaries& bd = t.out.bounds;
  const bool ok = t.out.reason.empty();
  const std::string method = bd.method.empty() ? std::string("none") : bd.method;
  ++rep.n_reads;
  ++rep.detector_used[method];
  if (ok) ++rep.n_detected;
  else ++rep.failures[reason_key(t.out.reason)];
  line.clear();
  append_id(line, b.read_id[t.row]);
  fmt::format_to(std::back_inserter(line), ",{},{},{},{},{},", b.num_samples[t.row], ok ? bd.adapter_start : 0,
                 ok ? bd.adapter_end : 0, ok ? bd.polya_end : 0, method);
  append_csv_cell(line, t.out.reason);
  if (llr_delta) {
    const Boundaries& l = t.out.llr;
    const int64_t llr_end = l.success ? l.adapter_end : 0;
    const int64_t main_end = ok ? bd.adapter_end : 0;
    fmt::format_to(std::back_inserter(line), ",{},{},", l.success ? l.adapter_start : 0, llr_end);
    if (main_end > 0 && llr_end > 0) {
      fmt::format_to(std::back_inserter(line), "{}", main_end - llr_end);
      ++rep.n_llr_delta;
      rep.end_deltas.push_back(main_end - llr_end);
    }
  }
  line += '\n';
}

}  // namespace

Status detect_boundaries(const std::vector<std::filesystem::path>& inputs, const RunModel& model,
                         const DetectStageOptions& options, std::ostream& csv, DetectStageReport* report) {
  const auto t0 = Clock::now();
  const bool llr_delta = options.emit_llr_delta;
  ESCPOD_ASSIGN_OR_RETURN(const DetectStageDetectors detectors, make_detect_stage_detectors(model, llr_delta));
  ESCPOD_ASSIGN_OR_RETURN(auto readers, open_readers(inputs, options.n_threads));
  DetectStageReport local;
  DetectStageReport& rep = report ? *report : local;
  csv << kBoundariesHeader << (llr_delta ? std::string(",") + kLlrDeltaColumns : "") << '\n';
  std::string line;
  // The LLR detector reads the whole read; the CNN still sees only its own prefix.
  const size_t preload = llr_delta ? detectors.llr->preload_samples() : detectors.main.preload_samples();
  const size_t block_size = model.settings.method == DetectMethod::kCnn ? 16 : 4;
  Status s = for_each_read_ordered<DetectOut, DetectScratch>(
      readers, options.n_threads, block_size, [](const pod5::ReadBatch&, size_t, size_t*) { return true; },
      [&detectors] {
        DetectScratch w;
        w.detector = detectors.main.make_scratch();
        if (detectors.llr) w.llr = detectors.llr->make_scratch();
        return w;
      },
      [&](ReadBlock<DetectOut>& block, DetectScratch& w) { detect_block(detectors, preload, block, w); },
      [&](ReadTask<DetectOut>& t) -> Status {
        append_boundaries_row(line, t, llr_delta, rep);
        csv.write(line.data(), static_cast<std::streamsize>(line.size()));
        return check_stream(csv);
      });
  ESCPOD_RETURN_IF_ERROR(s);
  csv.flush();
  ESCPOD_RETURN_IF_ERROR(check_stream(csv));
  rep.seconds = seconds_since(t0);
  return Status::ok();
}

// ---- fingerprint ----------------------------------------------------------------------------

Result<BoundariesTable> read_boundaries_csv(const std::filesystem::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(LineReader in, LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  if (!in.next(line)) {
    if (!in.error().empty()) return Status::io_error(path.string() + ": " + in.error());
    return Status::invalid_argument(path.string() + ": empty boundaries CSV (needs a header)");
  }
  if (!line.empty() && line[0] == '#') line.erase(0, 1);
  split_csv(line, cells, storage);
  auto column = [&](std::string_view name) -> long {
    auto it = std::find(cells.begin(), cells.end(), name);
    return it == cells.end() ? -1 : static_cast<long>(it - cells.begin());
  };
  const long id_col = column("read_id");
  long n_col = column("num_samples");
  if (n_col < 0) n_col = column("signal_len");
  if (n_col < 0) n_col = 1;
  const long start_col = column("adapter_start"), end_col = column("adapter_end");
  if (id_col < 0 || start_col < 0 || end_col < 0) {
    return Status::invalid_argument(path.string() +
                                    ": header must name the columns read_id, adapter_start and adapter_end");
  }
  const size_t need = static_cast<size_t>(std::max({id_col, n_col, start_col, end_col}));
  BoundariesTable table;
  while (in.next(line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path.string() + " line " + std::to_string(in.line_no());
    split_csv(line, cells, storage);
    if (cells.size() <= need) return Status::invalid_argument(where + ": too few columns");
    BoundaryRow r;
    auto id = pod5::ReadId::parse(cells[static_cast<size_t>(id_col)]);
    if (!id.is_ok()) return id.status().with_context(where);
    r.read_id = *id;
    int64_t n = 0;
    if (!parse_position(cells[static_cast<size_t>(n_col)], n) || n < 0) {
      return Status::invalid_argument(where + ": bad num_samples '" +
                                      std::string(cells[static_cast<size_t>(n_col)]) + "'");
    }
    r.num_samples = static_cast<uint64_t>(n);
    if (!parse_position(cells[static_cast<size_t>(start_col)], r.adapter_start) ||
        !parse_position(cells[static_cast<size_t>(end_col)], r.adapter_end)) {
      return Status::invalid_argument(where + ": bad adapter position");
    }
    if (r.adapter_end <= r.adapter_start || r.adapter_start < 0) {
      ++table.n_dropped;
      continue;
    }
    table.rows.push_back(r);
  }
  if (!in.error().empty()) return Status::io_error(path.string() + ": " + in.error());
  return table;
}

size_t fingerprint_length(const RunModel& model) { return model.settings.fingerprint.barcode_num_events; }

Status fingerprint_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                   const BoundariesTable& boundaries, const RunModel& model,
                                   const FingerprintStageOptions& options,
                                   FingerprintTableWriter& table, FingerprintStageReport* report) {
  const auto t0 = Clock::now();
  ESCPOD_RETURN_IF_ERROR(require_head_input(model, demux::HeadInputKind::kFingerprint, "demux fingerprint"));
  const StageSettings& settings = model.settings;
  ESCPOD_ASSIGN_OR_RETURN(auto readers, open_readers(inputs, options.n_threads));
  FingerprintStageReport local;
  FingerprintStageReport& rep = report ? *report : local;
  rep.n_boundaries = boundaries.rows.size();
  rep.n_dropped = boundaries.n_dropped;

  detail::BoundaryRowIndex wanted(boundaries);

  const signal::FingerprintParams& params = settings.fingerprint;
  const size_t n_fp = params.barcode_num_events;
  struct Out {
    std::vector<double> features;
    std::vector<double> dwells;  // with emit_dwell: the samples in each fingerprint event
    std::string reason;
  };
  struct Scratch {
    detail::DecodeScratch decode;
    std::vector<float> pa;
    signal::FingerprintScratch fingerprint;
  };
  // The fused run's decode and fingerprint steps, the boundaries the table's.
  auto fingerprint_one = [&](ReadTask<Out>& t, Scratch& w) {
    if (!detail::decode_read_prefix(*t.file, *t.batch, t.row, settings.preload_samples, w.decode, w.pa,
                                    t.out.reason)) {
      return;
    }
    const Boundaries bounds = detail::row_boundaries(boundaries.rows[t.tag]);
    if (!detail::fingerprint_signal(params, w.pa, bounds, w.fingerprint, t.out.features, t.out.reason)) return;
    if (options.emit_dwell) {
      // The fingerprint is the last n_fp events; their lengths are the last n_fp dwells.
      const auto& dw = w.fingerprint.dwells;
      t.out.dwells.assign(dw.end() - static_cast<std::ptrdiff_t>(n_fp), dw.end());
    }
  };
  Status s = for_each_read_ordered<Out, Scratch>(
      readers, options.n_threads, /*block_size=*/4,
      [&](const pod5::ReadBatch& b, size_t row, size_t* tag) { return wanted.select(b.read_id[row], tag); },
      [] { return Scratch(); },
      [&](ReadBlock<Out>& block, Scratch& w) {
        for (ReadTask<Out>& t : block.reads) fingerprint_one(t, w);
      },
      [&](ReadTask<Out>& t) -> Status {
        if (!t.out.reason.empty()) {
          ++rep.failures[reason_key(t.out.reason)];
          return Status::ok();
        }
        ++rep.n_fingerprinted;
        return table.add(t.batch->read_id[t.row], t.out.features, t.out.dwells);
      });
  ESCPOD_RETURN_IF_ERROR(s);
  ESCPOD_RETURN_IF_ERROR(table.finish());
  rep.n_not_in_inputs = wanted.n_unseen();
  rep.seconds = seconds_since(t0);
  return Status::ok();
}

// ---- classify -------------------------------------------------------------------------------

namespace {

struct ClassifyWorker {
  std::unique_ptr<demux::HeadScratch> scratch;
  std::vector<demux::PreparedRead> prepared;
};

// Calls rows [0, n) of a chunk (row i's features at x[i * d, (i + 1) * d)) with the head, in its
// batches, in parallel: calls[i] for row i.
void classify_chunk(const demux::Head& head, std::span<const double> x, size_t d, size_t n, Executor& arena,
                    tbb::enumerable_thread_specific<ClassifyWorker>& workers,
                    std::vector<demux::Classification>& calls) {
  const size_t batch = std::max<size_t>(1, head.input().batch_size);
  calls.resize(n);
  (void)parallel_for(arena, (n + batch - 1) / batch, [&](size_t b) {
    ClassifyWorker& w = workers.local();
    const size_t begin = b * batch, end = std::min(n, begin + batch);
    w.prepared.resize(end - begin);
    for (size_t i = begin; i < end; ++i) {
      w.prepared[i - begin] = demux::PreparedRead{};
      w.prepared[i - begin].fingerprint = x.subspan(i * d, d);
    }
    head.classify(w.prepared, *w.scratch, std::span<demux::Classification>(calls).subspan(begin, end - begin));
  });
}

}  // namespace

Status classify_fingerprints(const std::filesystem::path& fingerprints, const RunModel& model,
                             const ClassifyStageOptions& options, std::ostream& csv,
                             ClassifyStageReport* report) {
  const auto t0 = Clock::now();
  ESCPOD_RETURN_IF_ERROR(require_head_input(model, demux::HeadInputKind::kFingerprint, "demux classify"));
  const demux::Head& head = model.head();
  const size_t d = fingerprint_length(model);
  // A head that cannot take the model's fingerprints calls every read unclassified with the
  // fused run's reason.
  const std::string mismatch = detail::fingerprint_mismatch(head, d);
  ESCPOD_ASSIGN_OR_RETURN(std::unique_ptr<FingerprintTableReader> in,
                          FingerprintTableReader::open(fingerprints, d, model.path.filename().string()));
  ClassifyStageReport local;
  ClassifyStageReport& rep = report ? *report : local;
  const detail::ClassificationsCsv table(head);
  csv << table.header();
  tbb::enumerable_thread_specific<ClassifyWorker> workers([&head] { return ClassifyWorker{head.make_scratch(), {}}; });
  Executor& arena = Executor::for_threads(std::max(1, options.n_threads));
  const size_t chunk = std::max<size_t>(1, options.chunk_rows);
  std::vector<pod5::ReadId> ids;
  std::vector<double> x;
  std::vector<demux::Classification> calls;
  std::string out, reason;
  for (bool more = true; more;) {
    ESCPOD_ASSIGN_OR_RETURN(const size_t got, in->next(chunk, ids, x));
    more = got == chunk;
    if (interrupted()) return Status::cancelled("interrupted");
    if (mismatch.empty()) {
      classify_chunk(head, x, d, ids.size(), arena, workers, calls);
    } else {
      calls.assign(ids.size(), demux::Classification{});
    }
    out.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!mismatch.empty()) reason = mismatch;
      else reason.assign(calls[i].is_classified() ? std::string_view() : calls[i].reason());
      const std::string label = table.row_label(calls[i], reason);
      ++rep.n_reads;
      ++rep.calls[label];
      if (!reason.empty()) ++rep.unclassified_reasons[reason];
      table.append_row(out, ids[i], label, calls[i], std::nullopt, reason);
    }
    csv.write(out.data(), static_cast<std::streamsize>(out.size()));
    ESCPOD_RETURN_IF_ERROR(check_stream(csv));
  }
  csv.flush();
  ESCPOD_RETURN_IF_ERROR(check_stream(csv));
  rep.seconds = seconds_since(t0);
  return Status::ok();
}

}  // namespace escpod::pipeline
