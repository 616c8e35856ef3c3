#include "escpod/pipeline/demux/demux.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/demux/crf_head.hpp"  // CrfHeadOptions (resolve_model_spec)
#include "escpod/demux/head.hpp"
#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/pipeline/demux/demux_stages.hpp"
#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/sidecar.hpp"
#include "escpod/signal/fingerprint.hpp"
#include "escpod/pipeline/tables/report.hpp"
#include "pipeline/demux/classifications_csv.hpp"
#include "pipeline/ops/csv_text.hpp"
#include "pipeline/demux/demux_read.hpp"
#include "pipeline/demux/read_featurize.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {

namespace {

// The run's head (demux::Head: DTW-SVM, GBM, CRF, or a registered kind) with the detector and
// fingerprint settings its model describes, and the classifications table it writes.
struct Engine {
  std::unique_ptr<demux::Head> head;
  demux::HeadInput input;
  BoundaryDetector detector;
  signal::FingerprintParams fingerprint;
  detail::ClassificationsCsv table;
};

Result<Engine> make_engine(const DemuxOptions& o) {
  if (o.model.path.empty()) return Status::usage("demux needs --model MODEL");
  ESCPOD_ASSIGN_OR_RETURN(RunModel m, load_run_model(o.model));
  ESCPOD_ASSIGN_OR_RETURN(BoundaryDetector detector, make_stage_detector(m));
  detail::ClassificationsCsv table(m.head());
  Engine e{std::move(m.loaded.head), {}, std::move(detector), m.settings.fingerprint, std::move(table)};
  e.input = e.head->input();
  if (e.input.batch_size == 0) e.input.batch_size = 1;
  return e;
}

using detail::DemuxRead;
using ReadTask = detail::ReadTask<DemuxRead>;

// The signal and fingerprint of one read of a head batch (kept until the batch is classified).
struct ReadSlot {
  std::vector<float> pa;
  std::vector<double> features;
};

struct WorkerScratch {
  detail::DecodeScratch decode;
  detail::FeaturizeScratch featurize;
  std::unique_ptr<demux::HeadScratch> head;
  // The head batch being filled: slots[i] backs prepared[i], the read of tasks[i].
  std::vector<ReadSlot> slots;
  std::vector<demux::PreparedRead> prepared;
  std::vector<ReadTask*> tasks;
  std::vector<demux::Classification> calls;
};

WorkerScratch make_worker_scratch(const BoundaryDetector& detector, size_t batch_size) {
  WorkerScratch w;
  w.featurize.detector = detector.make_scratch();
  w.slots.resize(batch_size);
  w.prepared.reserve(batch_size);
  w.tasks.reserve(batch_size);
  w.calls.resize(batch_size);
  return w;
}

// The shared per-read steps (read_featurize.hpp) into `slot`: decode the detector's prefix, detect,
// fingerprint (when `want_fingerprint`). True when the read is ready; otherwise t.out.reason says
// why not.
bool featurize_read(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                    bool want_fingerprint, ReadTask& t, WorkerScratch& w, ReadSlot& slot);

// Classifies the batch collected in `w` and hands each call to its read.
void classify_batch(const Engine& e, WorkerScratch& w) {
  const size_t n = w.prepared.size();
  if (n == 0) return;
  const std::span<demux::Classification> calls(w.calls.data(), n);
  e.head->classify(w.prepared, *w.head, calls);
  for (size_t i = 0; i < n; ++i) {
    ReadTask& t = *w.tasks[i];
    std::swap(t.out.call, calls[i]);  // no copy: the buffers move between read and scratch
    if (!t.out.call.is_classified()) t.out.reason.assign(t.out.call.reason());
  }
  w.prepared.clear();
  w.tasks.clear();
}

// Featurizes one read into the next slot of the batch; classifies the batch when it is full.
void add_read(const Engine& e, ReadTask& t, WorkerScratch& w) {
  DemuxRead::reset_call(t.out.call);  // keeps its probabilities buffer
  t.out.call.status = demux::CallStatus::kNoFingerprint;
  ReadSlot& slot = w.slots[w.prepared.size()];
  const bool want_fingerprint = e.input.kind == demux::HeadInputKind::kFingerprint;
  if (!featurize_read(e.detector, e.fingerprint, want_fingerprint, t, w, slot)) return;
  if (want_fingerprint) {
    t.out.reason = detail::fingerprint_mismatch(*e.head, slot.features.size());
    if (!t.out.reason.empty()) return;
  }
  w.prepared.push_back(detail::prepare_for_head(e.input, slot.pa, t.batch->num_samples[t.row],
                                                t.out.bounds, slot.features));
  w.tasks.push_back(&t);
  if (w.prepared.size() == e.input.batch_size) classify_batch(e, w);
}

bool featurize_read(const BoundaryDetector& detector, const signal::FingerprintParams& params,
                    bool want_fingerprint, ReadTask& t, WorkerScratch& w, ReadSlot& slot) {
  const pod5::ReadBatch& b = *t.batch;
  if (!detail::decode_read_prefix(*t.file, b, t.row, detector.preload_samples(), w.decode, slot.pa,
                                  t.out.reason)) {
    return false;
  }
  t.out.n_decoded = slot.pa.size();
  return detail::featurize_signal(detector, params, want_fingerprint, slot.pa, b.num_samples[t.row],
                                  w.featurize, t.out.bounds, slot.features, t.out.reason);
}

// The serial end of the pipeline: CSV rows and per-label writers, in input order.
class Router {
 public:
  Router(const DemuxOptions& o, const Engine& e) : m_options(o), m_engine(e) {
    m_writer_options = o.writer;
    m_writer_options.signal_budget = std::make_shared<pod5::SignalMemoryBudget>(o.signal_memory_budget);
  }

  Status open_csv() {
    if (m_options.classifications_csv.empty()) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(StagedFile f, StagedFile::create(m_options.classifications_csv,
                                                             m_options.writer.overwrite));
    m_csv_file.emplace(std::move(f));
    m_csv.open(m_csv_file->staging_path(), std::ios::binary | std::ios::trunc);
    if (!m_csv) return Status::io_error("cannot write " + m_csv_file->staging_path().string());
    m_csv << m_engine.table.header();
    return Status::ok();
  }

  Status route(const ReadTask& t, DemuxReport& report) {
    const pod5::ReadBatch& b = *t.batch;  // its mapped signal pages are released by
                                          // for_each_read_ordered once the batch is done
    const std::string label = m_engine.table.row_label(t.out.call, t.out.reason);
    ++report.n_reads;
    report.n_samples_decoded += t.out.n_decoded;
    ++report.reads_per_label[label];
    if (!t.out.reason.empty()) ++report.unclassified_reasons[unclassified_reason_group(t.out.reason)];
    ++report.detector_used[t.out.bounds.method.empty() ? "none" : t.out.bounds.method];
    if (m_options.annotate) {
      auto [pos, inserted] = m_label_index.emplace(label, static_cast<uint32_t>(m_label_names.size()));
      if (inserted) m_label_names.push_back(label);
      m_annotations[t.file].emplace_back(b.read_id[t.row], pos->second);
    }
    if (m_csv.is_open()) {
      m_line.clear();
      const detail::RowBoundaries bounds{t.out.bounds.adapter_start, t.out.bounds.adapter_end,
                                         t.out.bounds.method};
      m_engine.table.append_row(m_line, b.read_id[t.row], label, t.out.call, bounds, t.out.reason);
      m_csv.write(m_line.data(), static_cast<std::streamsize>(m_line.size()));
      if (!m_csv) return Status::io_error("cannot write " + m_csv_file->staging_path().string());
    }
    if (m_options.out_dir.empty()) return Status::ok();
    auto& writer = m_writers[label];
    if (!writer) {
      auto path = m_options.out_dir / (m_options.prefix + "_" + label + ".pod5");
      ESCPOD_ASSIGN_OR_RETURN(writer, pod5::FileWriter::create(path, m_writer_options));
    }
    const auto& acq = t.file->run_info_ids()[static_cast<size_t>(b.run_info_idx[t.row])];
    if (const auto* ri = t.file->find_run_info(acq)) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(*ri));
    return copy_read(*t.file, b, t.row, *writer, m_copy, nullptr);
  }

  // All outputs finish before any is renamed into place (all or nothing).
  Status finish() {
    for (auto& [label, w] : m_writers) ESCPOD_RETURN_IF_ERROR(w->finish());
    if (m_csv.is_open()) {
      m_csv.close();
      if (!m_csv) return Status::io_error("cannot write " + m_csv_file->staging_path().string());
    }
    for (auto& [label, w] : m_writers) ESCPOD_RETURN_IF_ERROR(w->commit());
    if (m_csv_file) ESCPOD_RETURN_IF_ERROR(m_csv_file->commit(m_options.writer.fsync));
    return Status::ok();
  }

  // With annotate, after finish(): the `barcode` column of every input's sidecar (an input whose
  // reads were all skipped still gets its index and an all-unassigned column).
  Status write_annotations(const std::vector<std::unique_ptr<pod5::FileReader>>& readers, DemuxReport& report) {
    if (!m_options.annotate) return Status::ok();
    pod5::SidecarUpdateOptions so;
    so.fsync = m_options.writer.fsync;
    so.n_threads = m_options.n_threads;
    so.writer = m_options.annotate_writer;
    for (const auto& r : readers) {
      pod5::AnnotationUpdate u;
      u.name = "barcode";
      auto it = m_annotations.find(r.get());
      if (it != m_annotations.end()) {
        u.labels.reserve(it->second.size());
        for (const auto& [id, k] : it->second) u.labels.emplace_back(id, m_label_names[k]);
        m_annotations.erase(it);
      }
      ESCPOD_RETURN_IF_ERROR(pod5::update_sidecar(*r, {u}, so, nullptr));
      report.sidecars_written.push_back(pod5::sidecar_path(r->path()));
    }
    return Status::ok();
  }

 private:
  const DemuxOptions& m_options;
  const Engine& m_engine;
  pod5::WriterOptions m_writer_options;
  std::map<std::string, std::unique_ptr<pod5::FileWriter>> m_writers;
  std::optional<StagedFile> m_csv_file;
  std::ofstream m_csv;
  std::string m_line;
  CopyScratch m_copy;
  std::unordered_map<const pod5::FileReader*, std::vector<std::pair<pod5::ReadId, uint32_t>>> m_annotations;
  std::vector<std::string> m_label_names;
  std::unordered_map<std::string, uint32_t> m_label_index;
};

// `--info`'s outputs line. docs/demux.md §8.1: one output per distinct label name (a head's name
// `unclassified` is not a barcode), plus unclassified.
std::string outputs_line(const demux::Head& head) {
  std::string out = "outputs: barcode_<label>.pod5 for labels";
  const detail::ClassificationsCsv table(head);
  std::vector<std::string> listed;
  for (int32_t l : head.labels()) {
    std::string name = table.label_output(l);
    if (name == "unclassified" || std::find(listed.begin(), listed.end(), name) != listed.end()) continue;
    out += " " + name;
    listed.push_back(std::move(name));
  }
  return out + " (plus unclassified)\n";
}

}  // namespace

Result<DetectorChoice> parse_detector_choice(const std::string& method) {
  if (method.empty()) return DetectorChoice::kModelDefault;
  if (method == "cnn") return DetectorChoice::kCnn;
  if (method == "llr") return DetectorChoice::kLlr;
  return Status::usage("--method must be cnn or llr, not '" + method + "'");
}

Result<ModelSpec> resolve_model_spec(const std::filesystem::path& model, demux::HeadOptions head,
                                     const std::string& method, const std::filesystem::path& cnn_model,
                                     const std::string& cnn_precision) {
  // A bundle's pinned CNN is checked by the detector as it loads it (load_run_model), not here.
  auto crf = std::make_shared<demux::CrfHeadOptions>(head.crf ? *head.crf : demux::CrfHeadOptions{});
  crf->load.verify_boundary_pin = false;
  head.crf = std::move(crf);
  ESCPOD_ASSIGN_OR_RETURN(const DetectorChoice detector, parse_detector_choice(method));
  ESCPOD_ASSIGN_OR_RETURN(const CnnPrecision precision, parse_cnn_precision(cnn_precision));
  return ModelSpec{model, std::move(head), detector, cnn_model, precision};
}

Result<std::string> describe_demux_model(const ModelSpec& spec) {
  ESCPOD_ASSIGN_OR_RETURN(RunModel m, load_run_model(spec, /*need_detector=*/false));
  const demux::LoadedHead& h = m.loaded;
  if (h.default_settings) {
    const bool chosen = m.detector != DetectorChoice::kModelDefault;
    const bool cnn = m.settings.method == DetectMethod::kCnn;
    const char* why = chosen ? "RNA004 settings, chosen on the command line" : "RNA004 defaults";
    return h.head->describe() +
           fmt::format("\ndetector: {} ({}; {} models record no signal processing)\n", cnn ? "boundary CNN" : "LLR",
                       why, h.head->name()) +
           outputs_line(*h.head);
  }
  // The detector the model pins, whatever the run chooses.
  const StageSettings sp =
      stage_settings_from(*h.signal_processing, spec.path.string(), DetectorChoice::kModelDefault);
  std::string out = h.head->describe();
  if (!h.settings_source.empty()) out += "\nsignal processing: " + h.settings_source + "\n";
  if (!h.barcode_names.empty()) out += "barcodes as its config.toml names them: " + fmt::format("{}", fmt::join(h.barcode_names, " ")) + "\n";
  const bool cnn_detect = sp.method == DetectMethod::kCnn;
  out += fmt::format("\ndetector: {}\n", cnn_detect ? "boundary CNN (" + sp.cnn_model_name +
                                                          ") with LLR fallbacks"
                                                    : std::string("LLR"));
  if (cnn_detect) {
    auto cnn = find_cnn_model(spec.path, spec.cnn_model, sp.cnn_model_name);
    out += cnn.is_ok() ? "CNN file: " + cnn->string() + "\n" : "CNN file: MISSING: " + cnn.status().message() + "\n";
  }
  out += outputs_line(*h.head);
  return out;
}

Status run_demux(const std::vector<std::filesystem::path>& inputs, const DemuxOptions& options,
                 DemuxReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  ESCPOD_ASSIGN_OR_RETURN(Engine engine, make_engine(options));
  ESCPOD_ASSIGN_OR_RETURN(auto readers, detail::open_readers(inputs, options.n_threads));
  if (options.annotate) ESCPOD_RETURN_IF_ERROR(check_sidecars_writable(inputs));
  if (!options.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.out_dir, ec);
    if (ec) return Status::io_error("cannot create " + options.out_dir.string() + ": " + ec.message());
  }
  Router router(options, engine);
  ESCPOD_RETURN_IF_ERROR(router.open_csv());
  DemuxReport local;
  DemuxReport& rep = report ? *report : local;

  // One head batch per block (one read for the DTW-SVM and GBM heads): per-read work stealing,
  // a slow read never holds up others.
  Status s = detail::for_each_read_ordered<DemuxRead, WorkerScratch>(
      readers, options.n_threads, /*block_size=*/engine.input.batch_size,
      [](const pod5::ReadBatch&, size_t, size_t*) { return true; },
      [&engine] {
        WorkerScratch w = make_worker_scratch(engine.detector, engine.input.batch_size);
        w.head = engine.head->make_scratch();
        return w;
      },
      [&engine](detail::ReadBlock<DemuxRead>& block, WorkerScratch& w) {
        for (ReadTask& t : block.reads) add_read(engine, t, w);
        classify_batch(engine, w);
      },
      [&](const ReadTask& t) -> Status { return router.route(t, rep); });
  ESCPOD_RETURN_IF_ERROR(s);
  ESCPOD_RETURN_IF_ERROR(router.finish());
  ESCPOD_RETURN_IF_ERROR(router.write_annotations(readers, rep));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

Result<std::vector<FingerprintRow>> fingerprint_labelled_reads(
    const std::vector<std::filesystem::path>& inputs, const std::map<std::string, int32_t>& labels,
    const FingerprintOptions& options, FingerprintReport* report) {
  const std::filesystem::path where = options.cnn_model.empty() ? "signal_processing" : options.cnn_model;
  // The detector and fingerprints of the model being trained (no head yet), as a run's.
  RunModel m;
  m.path = where;
  m.settings = stage_settings_from(options.signal_processing, where.string(), options.detector);
  if (m.settings.method == DetectMethod::kCnn) {
    ESCPOD_ASSIGN_OR_RETURN(m.cnn, find_cnn_model(where, options.cnn_model, m.settings.cnn_model_name));
  }
  ESCPOD_ASSIGN_OR_RETURN(const BoundaryDetector detector, make_stage_detector(m));
  const signal::FingerprintParams& params = m.settings.fingerprint;

  std::unordered_map<pod5::ReadId, int32_t, pod5::ReadIdHash> by_id;
  for (const auto& [text, label] : labels) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadId id, pod5::ReadId::parse(text));
    by_id.emplace(id, label);
  }
  ESCPOD_ASSIGN_OR_RETURN(auto readers, detail::open_readers(inputs));
  FingerprintReport local;
  FingerprintReport& rep = report ? *report : local;
  std::vector<FingerprintRow> rows;
  ESCPOD_RETURN_IF_ERROR((detail::for_each_read_ordered<DemuxRead, WorkerScratch>(
      readers, options.n_threads, /*block_size=*/1,
      [&by_id](const pod5::ReadBatch& b, size_t row, size_t*) { return by_id.count(b.read_id[row]) > 0; },
      [&detector] { return make_worker_scratch(detector, 1); },
      [&detector, &params](detail::ReadBlock<DemuxRead>& block, WorkerScratch& w) {
        for (ReadTask& t : block.reads) {
          ReadSlot& slot = w.slots[0];
          if (featurize_read(detector, params, true, t, w, slot)) t.out.features = slot.features;
        }
      },
      [&](const ReadTask& t) -> Status {
        ++rep.n_reads;
        if (t.out.features.empty()) {
          ++rep.failures[t.out.reason];
          return Status::ok();
        }
        const pod5::ReadId& id = t.batch->read_id[t.row];
        rows.push_back({id.to_string(), by_id.at(id), t.out.features});
        return Status::ok();
      })));
  return rows;
}

}  // namespace escpod::pipeline
