// The demultiplexer from Python: the same library entry points as `escpod demux` and its stages
// (src/cli/demux_cmd.cpp, demux_stages_cmd.cpp), so calls equal the CLI's. Tables come back as
// CSV text in the CLI's format; python/escpod/demux.py turns them into dicts of numpy arrays.
#include "demux_bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <sstream>

#include "escpod/demux/crf_head.hpp"
#include "escpod/pipeline/demux/crf_basecall.hpp"
#include "escpod/pipeline/demux/demux.hpp"
#include "escpod/pipeline/demux/demux_stages.hpp"
#include "escpod/pipeline/tables/bam_demux.hpp"
#include "escpod/pipeline/tables/fingerprint_table.hpp"
#include "escpod/pod5/inputs.hpp"
#include "py_support.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace escpod::python {
namespace {

pipeline::DetectorChoice detector_choice(const std::string& method) {
  if (method.empty()) return pipeline::DetectorChoice::kModelDefault;
  if (method == "cnn") return pipeline::DetectorChoice::kCnn;
  if (method == "llr") return pipeline::DetectorChoice::kLlr;
  throw nb::value_error("method must be '', 'cnn' or 'llr'");
}

demux::DtwPrecision dtw_precision(const std::string& p) {
  if (p == "float32") return demux::DtwPrecision::kFloat32;
  if (p == "float64") return demux::DtwPrecision::kFloat64;
  throw nb::value_error("dtw_precision must be 'float32' or 'float64'");
}

std::vector<std::filesystem::path> collect(const std::vector<std::string>& inputs) {
  auto files = pod5::collect_pod5_inputs(inputs);
  if (!files.is_ok()) raise_status(files.status());
  return std::move(files).value();
}

template <typename Map>
nb::dict to_dict(const Map& m) {
  nb::dict d;
  for (const auto& [k, v] : m) d[nb::str(k.c_str())] = v;
  return d;
}

// The run's model from the Python arguments, resolved as the CLI resolves its flags
// (pipeline::resolve_model_spec); `crf` parsed by the CLI's parser (demux::crf_head_options).
pipeline::ModelSpec model_spec(const std::string& model, const std::string& config, const std::string& method,
                               const std::string& cnn_model, const std::string& dtw,
                               const demux::CrfHeadRequest& crf, const std::string& cnn_precision = "float32") {
  (void)detector_choice(method);  // a bad method is a ValueError before anything is read
  demux::HeadOptions head;
  head.model_file.warpdemux_config = config;
  head.dtw = dtw_precision(dtw);
  auto options = demux::crf_head_options(crf);
  if (!options.is_ok()) raise_status(options.status());
  head.crf = std::make_shared<const demux::CrfHeadOptions>(std::move(options).value());
  head.crf_options_given = crf.given;  // refused for a model that is not a CRF folder
  auto spec = pipeline::resolve_model_spec(model, std::move(head), method, cnn_model, cnn_precision);
  if (!spec.is_ok()) raise_status(spec.status());
  return std::move(spec).value();
}

pipeline::RunModel run_model(const pipeline::ModelSpec& spec, bool need_detector) {
  auto m = pipeline::load_run_model(spec, need_detector);
  if (!m.is_ok()) raise_status(m.status());
  return std::move(m).value();
}

// Fused pipeline: returns (report,); the classifications CSV goes to `classifications`.
// Per-label POD5 files go to out_dir when given.
demux::ModelLoadOptions model_options(const std::string& config) {
  demux::ModelLoadOptions o;
  o.warpdemux_config = config;
  return o;
}

nb::tuple demux_files(const std::vector<std::string>& inputs, const std::string& model, const std::string& config,
                      const std::string& out_dir, const std::string& classifications,
                      const std::string& method, const std::string& cnn_model,
                      const std::string& dtw, const std::string& prefix, int n_threads,
                      const demux::CrfHeadRequest& crf, const std::string& cnn_precision) {
  pipeline::DemuxOptions d;
  d.model = model_spec(model, config, method, cnn_model, dtw, crf, cnn_precision);
  d.out_dir = out_dir;
  d.prefix = prefix;
  d.classifications_csv = classifications;
  d.n_threads = resolve_threads(n_threads);
  auto files = collect(inputs);
  pipeline::DemuxReport report;
  Status s = run_interruptible([&](const std::atomic<bool>&) { return pipeline::run_demux(files, d, &report); });
  if (!s.is_ok()) raise_status(s);
  nb::dict r;
  r["n_reads"] = report.n_reads;
  r["n_samples_decoded"] = report.n_samples_decoded;
  r["reads_per_label"] = to_dict(report.reads_per_label);
  r["unclassified_reasons"] = to_dict(report.unclassified_reasons);
  r["detector_used"] = to_dict(report.detector_used);
  r["seconds"] = report.seconds;
  return nb::make_tuple(r);
}

std::string detect_files(const std::vector<std::string>& inputs, const std::string& model,
                         const std::string& config, const std::string& method, const std::string& cnn_model, bool emit_llr_delta,
                         int n_threads, const std::string& cnn_precision) {
  const pipeline::RunModel m = run_model(model_spec(model, config, method, cnn_model, "float32", {}, cnn_precision), true);
  pipeline::DetectStageOptions o;
  o.emit_llr_delta = emit_llr_delta;
  o.n_threads = resolve_threads(n_threads);
  auto files = collect(inputs);
  std::ostringstream csv;
  pipeline::DetectStageReport report;
  Status s = run_interruptible([&](const std::atomic<bool>&) {
    return pipeline::detect_boundaries(files, m, o, csv, &report);
  });
  if (!s.is_ok()) raise_status(s);
  return csv.str();
}

std::string fingerprint_files(const std::vector<std::string>& inputs, const std::string& boundaries_csv,
                              const std::string& model, const std::string& config, const std::string& method,
                              bool emit_dwell,
                              int n_threads) {
  const pipeline::RunModel m = run_model(model_spec(model, config, method, "", "float32", {}), false);
  pipeline::FingerprintStageOptions o;
  o.emit_dwell = emit_dwell;
  o.n_threads = resolve_threads(n_threads);
  auto files = collect(inputs);
  auto table = pipeline::read_boundaries_csv(boundaries_csv);
  if (!table.is_ok()) raise_status(table.status());
  std::ostringstream csv;
  auto writer = pipeline::FingerprintTableWriter::open(pipeline::FingerprintFormat::kCsv, csv, pipeline::fingerprint_length(m),
                                                        emit_dwell, "fingerprints");
  if (!writer.is_ok()) raise_status(writer.status());
  pipeline::FingerprintStageReport report;
  Status s = run_interruptible([&](const std::atomic<bool>&) {
    return pipeline::fingerprint_from_boundaries(files, *table, m, o, **writer, &report);
  });
  if (!s.is_ok()) raise_status(s);
  return csv.str();
}

std::string classify_file(const std::string& fingerprints, const std::string& model, const std::string& config,
                          const std::string& dtw, int n_threads) {
  const pipeline::RunModel m = run_model(model_spec(model, config, "", "", dtw, {}), false);
  pipeline::ClassifyStageOptions o;
  o.n_threads = resolve_threads(n_threads);
  std::ostringstream csv;
  pipeline::ClassifyStageReport report;
  Status s = run_interruptible([&](const std::atomic<bool>&) {
    return pipeline::classify_fingerprints(fingerprints, m, o, csv, &report);
  });
  if (!s.is_ok()) raise_status(s);
  return csv.str();
}

// `escpod demux basecall`: the basecall CSV's text and the run's counts.
nb::tuple basecall_files(const std::vector<std::string>& inputs, const std::string& boundaries_csv,
                         const std::string& model, int n_threads, const demux::CrfHeadRequest& crf) {
  // No detector runs here (boundaries come from the table): resolved as for --info.
  const pipeline::RunModel m = run_model(model_spec(model, "", "", "", "float32", crf), false);
  pipeline::CrfBasecallOptions o;
  o.n_threads = resolve_threads(n_threads);
  auto table = pipeline::read_boundaries_csv(boundaries_csv);
  if (!table.is_ok()) raise_status(table.status());
  auto files = collect(inputs);
  std::ostringstream csv;
  pipeline::CrfBasecallReport report;
  Status s = run_interruptible([&](const std::atomic<bool>&) {
    return pipeline::basecall_from_boundaries(files, *table, m, o, csv, &report);
  });
  if (!s.is_ok()) raise_status(s);
  nb::dict r;
  r["n_boundaries"] = report.n_boundaries;
  r["n_dropped"] = report.n_dropped;
  r["n_rows"] = report.n_rows;
  r["n_classified"] = report.n_classified;
  r["n_not_in_inputs"] = report.n_not_in_inputs;
  r["unclassified_reasons"] = to_dict(report.unclassified_reasons);
  r["seconds"] = report.seconds;
  return nb::make_tuple(csv.str(), r);
}

std::string describe_model(const std::string& model, const std::string& config, const std::string& cnn_model) {
  auto text = pipeline::describe_demux_model(model_spec(model, config, "", cnn_model, "float32", {}));
  if (!text.is_ok()) raise_status(text.status());
  return *text;
}

// `escpod bam-demux`: the calls onto a BAM's records; the run's counts.
nb::dict bam_demux_file(const std::string& bam, const std::vector<std::string>& classifications,
                        const std::vector<std::string>& pod5_inputs, const std::string& annotation,
                        const std::string& output, const std::string& out_dir, const std::string& prefix,
                        const std::string& reference, const std::string& missing_ids, int n_threads,
                        int64_t memory_mib, bool overwrite) {
  pipeline::BamDemuxOptions o;
  for (const auto& c : classifications) o.calls.classifications.emplace_back(c);
  if (!pod5_inputs.empty()) o.calls.pod5_inputs = collect(pod5_inputs);
  o.calls.annotation = annotation;
  o.output = output;
  o.out_dir = out_dir;
  o.prefix = prefix;
  o.reference = reference;
  o.missing_ids_output = missing_ids;
  o.n_threads = resolve_threads(n_threads);
  o.memory_budget = memory_mib << 20;
  o.overwrite = overwrite;
  o.command_line = "escpod.demux.bam_demux (Python)";
  o.version = ESCPOD_VERSION;
  pipeline::BamDemuxReport rep;
  Status s = run_interruptible([&](const std::atomic<bool>&) { return pipeline::bam_demux(bam, o, &rep); });
  if (!s.is_ok()) raise_status(s);
  nb::dict r;
  r["n_records"] = rep.n_records;
  r["n_calls"] = rep.n_calls;
  r["records_per_label"] = to_dict(rep.records_per_label);
  r["reads_per_label"] = to_dict(rep.reads_per_label);
  r["unclassified_reasons"] = to_dict(rep.unclassified_reasons);
  r["n_parent_ids"] = rep.n_parent_ids;
  r["n_duplex"] = rep.n_duplex;
  r["n_reads_without_call"] = rep.n_reads_without_call;
  r["n_calls_without_record"] = rep.n_calls_without_record;
  std::vector<std::string> written;
  for (const auto& p : rep.written) written.push_back(p.string());
  r["written"] = written;
  r["seconds"] = rep.seconds;
  return r;
}

// `escpod demux export-model`: a WarpDemuX joblib model as our JSON text.
std::string export_model(const std::string& model, const std::string& config) {
  auto text = demux::joblib_model_as_json(model, model_options(config));
  if (!text.is_ok()) raise_status(text.status());
  return *text;
}

}  // namespace

void bind_demux(nb::module_& m) {
  // The CTC-CRF head's options, as `escpod demux`'s flags (demux::CrfHeadRequest): NaN / -1 unset.
  nb::class_<demux::CrfHeadRequest>(m, "CrfHeadRequest")
      .def(nb::init<>())
      .def_rw("decoder", &demux::CrfHeadRequest::decoder)
      .def_rw("window", &demux::CrfHeadRequest::window)
      .def_rw("norm", &demux::CrfHeadRequest::norm)
      .def_rw("barcodes", &demux::CrfHeadRequest::barcodes)
      .def_rw("precision", &demux::CrfHeadRequest::precision)
      .def_rw("min_margin", &demux::CrfHeadRequest::min_margin)
      .def_rw("min_baseq", &demux::CrfHeadRequest::min_baseq)
      .def_rw("min_mean_post", &demux::CrfHeadRequest::min_mean_post)
      .def_rw("min_crf_margin", &demux::CrfHeadRequest::min_crf_margin)
      .def_rw("min_crf_prob", &demux::CrfHeadRequest::min_crf_prob)
      .def_rw("ref_scores", &demux::CrfHeadRequest::ref_scores)
      .def_rw("window_batch", &demux::CrfHeadRequest::window_batch)
      .def_rw("given", &demux::CrfHeadRequest::given);
  m.def("demux_files", &demux_files, "inputs"_a, "model"_a, "config"_a, "out_dir"_a, "classifications"_a,
        "method"_a, "cnn_model"_a, "dtw"_a, "prefix"_a, "n_threads"_a, "crf"_a, "cnn_precision"_a);
  m.def("detect_files", &detect_files, "inputs"_a, "model"_a, "config"_a, "method"_a, "cnn_model"_a,
        "emit_llr_delta"_a, "n_threads"_a, "cnn_precision"_a);
  m.def("fingerprint_files", &fingerprint_files, "inputs"_a, "boundaries_csv"_a, "model"_a, "config"_a, "method"_a,
        "emit_dwell"_a, "n_threads"_a);
  m.def("classify_file", &classify_file, "fingerprints"_a, "model"_a, "config"_a, "dtw"_a, "n_threads"_a);
  m.def("describe_model", &describe_model, "model"_a, "config"_a, "cnn_model"_a);
  m.def("export_model", &export_model, "model"_a, "config"_a);
  m.def("bam_demux_file", &bam_demux_file, "bam"_a, "classifications"_a, "pod5_inputs"_a, "annotation"_a,
        "output"_a, "out_dir"_a, "prefix"_a, "reference"_a, "missing_ids"_a, "threads"_a, "memory_mib"_a,
        "overwrite"_a);
  m.def("basecall_files", &basecall_files, "inputs"_a, "boundaries_csv"_a, "model"_a, "threads"_a, "crf"_a);
}

}  // namespace escpod::python
