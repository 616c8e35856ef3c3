// escpod demux: the fused demultiplexer, and its stages as subcommands.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "escpod/core/staged_file.hpp"
#include "escpod/demux/crf_head.hpp"
#include "escpod/demux/crf_model.hpp"
#include "escpod/demux/train_svm.hpp"
#include "escpod/pipeline/demux/crf_basecall.hpp"
#include "escpod/pipeline/demux/demux.hpp"
#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pipeline/tables/barcode_labels.hpp"
#include "escpod/pipeline/tables/demux_eval.hpp"
#include "escpod/pipeline/tables/fingerprint_table.hpp"
#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "escpod/pipeline/tables/bam_demux.hpp"
#include "escpod/pod5/inputs.hpp"

#include "cli/crf_flags.hpp"
#include "cli/demux_stages_cmd.hpp"
#include "cli/report_cmd.hpp"

#if __has_include("cli/demux_train_cmd.hpp")
#include "cli/demux_train_cmd.hpp"
#define ESCPOD_HAVE_TRAIN_SVM 1
#endif

namespace escpod::cli {
CommandBody* selected_body();
void select_body(CommandBody* body);

namespace {

struct DemuxCliOptions {
  std::vector<std::string> inputs;
  std::string model, config, cnn_model, method, out_dir, classifications, prefix = "barcode";
  std::string dtw_precision = "float32", cnn_precision = "float32";
  std::string report;  // HTML report path (with its JSON and MultiQC files beside it)
  std::string bam, bam_output;  // basecalled BAM to tag once the calls are final (bam-demux)
  bool info = false, annotate = false;
  int64_t memory_mib = 256;
  WriterFlags writer;
  CrfCliFlags crf;
  const CLI::App* app = nullptr;  // what was given on the command line (refusals)
};

// The run's model from the command line: the head's options (--config, --dtw-precision, the CRF
// flags) and the detector (--method, --cnn-model, a CRF bundle's pin).
Result<pipeline::ModelSpec> model_spec(const DemuxCliOptions& o) {
  demux::HeadOptions head;
  head.model_file = model_load_options(o.config);
  ESCPOD_ASSIGN_OR_RETURN(head.dtw, parse_dtw_precision(o.dtw_precision));
  ESCPOD_ASSIGN_OR_RETURN(demux::CrfHeadOptions crf, crf_head_options_from_flags(o.crf));
  head.crf = std::make_shared<const demux::CrfHeadOptions>(std::move(crf));
  // Options only one head kind reads: the model's loader refuses them for another kind.
  head.crf_options_given = given_crf_flags(o.app);
  head.dtw_precision_given = o.app->count("--dtw-precision") > 0;
  return pipeline::resolve_model_spec(o.model, std::move(head), o.method, o.cnn_model, o.cnn_precision);
}


// --bam: the basecalled BAM's records tagged with the run's calls (bam-demux), per label into
// -d beside the POD5 files and/or all into --bam-output.
Status check_bam_flags(const DemuxCliOptions& o) {
  if (!o.bam_output.empty() && o.bam.empty())
    return Status::usage("--bam-output writes the records of --bam IN.bam tagged; give --bam");
  if (!o.bam.empty() && o.out_dir.empty() && o.bam_output.empty())
    return Status::usage("--bam IN.bam needs -d DIR (one BAM per label beside the POD5 files) and/or "
                         "--bam-output OUT.bam (every record, tagged)");
  if (!o.bam.empty() && !std::filesystem::is_regular_file(o.bam))
    return Status::not_found("--bam " + o.bam + ": no such file");
  // Before the run, not after it: a BAM cut short is found now.
  if (!o.bam.empty()) return pipeline::check_bam_file(o.bam);
  return Status::ok();
}

Result<pipeline::BamDemuxReport> tag_bam(const DemuxCliOptions& o, const pipeline::DemuxOptions& d,
                                          const GlobalOptions& global) {
  pipeline::BamDemuxOptions b;
  b.calls.classifications = {d.classifications_csv};
  b.output = o.bam_output;
  b.out_dir = o.out_dir;
  b.prefix = o.prefix;
  b.n_threads = d.n_threads;
  b.overwrite = o.writer.force;
  b.fsync = d.writer.fsync;
  b.command_line = global.command_line;
  b.version = ESCPOD_VERSION;
  pipeline::BamDemuxReport rep;
  ESCPOD_RETURN_IF_ERROR(pipeline::bam_demux(o.bam, b, &rep));
  for (const auto& [label, n] : rep.records_per_label) log::info("BAM {:<16} {:>10} records", label, n);
  if (rep.n_reads_without_call)
    log::warn("{} reads of {} have no call (not in the demultiplexed inputs)", rep.n_reads_without_call, o.bam);
  return rep;
}

// Flags the run would ignore, refused before anything is read (the model kind's own are refused
// when it is loaded: HeadOptions).
Status check_demux_flags(const DemuxCliOptions& o) {
  if (o.model.empty()) return Status::usage("demux needs --model MODEL.json");
  if (o.info) {
    return refuse_given(o.app,
                        {"inputs", "--output-dir", "--classifications", "--prefix", "--report", "--memory-mib",
                         "--bam", "--bam-output", "--annotate", "--force", "--fsync", "--compression",
                         "--dtw-precision", "--cnn-precision", "--threads"},
                        "--info only describes the model and its detector");
  }
  if (o.method == "llr") {
    ESCPOD_RETURN_IF_ERROR(refuse_given(o.app, {"--cnn-model", "--cnn-precision"}, "--method llr runs no CNN"));
  }
  if (o.out_dir.empty()) {
    ESCPOD_RETURN_IF_ERROR(refuse_given(o.app, {"--prefix", "--memory-mib", "--compression"},
                                        "without -d/--output-dir no per-label POD5 file is written"));
  }
  if (o.inputs.empty()) return Status::usage("demux needs POD5 inputs");
  ESCPOD_RETURN_IF_ERROR(check_bam_flags(o));
  if (o.out_dir.empty() && o.classifications.empty() && !o.annotate && o.report.empty()) {
    return Status::usage("demux needs -d OUTDIR (per-barcode POD5 files), --annotate "
                         "(barcode column in each input's .p5s sidecar), --report HTML "
                         "and/or --classifications CSV");
  }
  return Status::ok();
}

Status run_demux_cmd(const DemuxCliOptions& o, const GlobalOptions& global) {
  ESCPOD_RETURN_IF_ERROR(check_demux_flags(o));
  ESCPOD_ASSIGN_OR_RETURN(pipeline::ModelSpec spec, model_spec(o));
  if (o.info) {
    ESCPOD_ASSIGN_OR_RETURN(std::string text, pipeline::describe_demux_model(spec));
    fmt::print("{}", text);
    return Status::ok();
  }
  pipeline::DemuxOptions d;
  d.model = std::move(spec);
  d.out_dir = o.out_dir;
  d.prefix = o.prefix;
  d.classifications_csv = o.classifications;
  // The report and the BAM tagging are built from the classifications: without
  // --classifications they go to a scratch file beside the report (or the BAM output), removed
  // afterwards.
  std::optional<ScratchPath> report_csv;
  if ((!o.report.empty() || !o.bam.empty()) && o.classifications.empty()) {
    const std::string beside = !o.report.empty() ? o.report : !o.bam_output.empty() ? o.bam_output : o.out_dir + "/calls";
    if (o.report.empty() && o.bam_output.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o.out_dir, ec);
      if (ec) return Status::io_error("cannot create " + o.out_dir + ": " + ec.message());
    }
    ESCPOD_ASSIGN_OR_RETURN(auto scratch, ScratchPath::create(beside, ".classifications.csv"));
    report_csv.emplace(std::move(scratch));
    d.classifications_csv = report_csv->path();
    std::error_code ec;
    std::filesystem::remove(report_csv->path(), ec);  // the CSV is staged and renamed onto it
  }
  d.n_threads = resolve_threads(global);
  d.signal_memory_budget = o.memory_mib << 20;
  d.annotate = o.annotate;
  d.annotate_writer = std::string("escpod ") + ESCPOD_VERSION;
  ESCPOD_ASSIGN_OR_RETURN(d.writer, writer_options(o.writer));
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  pipeline::DemuxReport report;
  ESCPOD_RETURN_IF_ERROR(pipeline::run_demux(files, d, &report));
  // A summary for people: stderr, like every command's summary (the data are the outputs).
  log::info("{:<16} {:>10} {:>8}", "label", "reads", "share");
  for (const auto& [label, n] : report.reads_per_label) {
    log::info("{:<16} {:>10} {:>7.1f}%", label, n,
              100.0 * static_cast<double>(n) / static_cast<double>(std::max<uint64_t>(1, report.n_reads)));
  }
  log::info("{:<16} {:>10}", "total", report.n_reads);
  for (const auto& p : report.sidecars_written) log::info("annotated {}", p.string());
  for (const auto& [reason, n] : report.unclassified_reasons) log::info("unclassified, {}: {}", reason, n);
  log::info("{} reads in {:.2f} s ({:.0f} reads/s, {} threads)", report.n_reads, report.seconds,
            static_cast<double>(report.n_reads) / std::max(report.seconds, 1e-9), d.n_threads);
  std::optional<pipeline::BamDemuxReport> bam_report;
  if (!o.bam.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto r, tag_bam(o, d, global));
    bam_report.emplace(std::move(r));
  }
  if (!o.report.empty()) {
    pipeline::ReportOptions r;
    r.classifications = {d.classifications_csv};
    r.pod5_inputs = files;
    r.n_threads = d.n_threads;
    r.version = ESCPOD_VERSION;
    r.command_line = global.command_line;
    r.demux_seconds = report.seconds;
    r.demux_threads = d.n_threads;
    r.model = o.model;
    if (bam_report) {
      r.bam = o.bam;
      r.bam_records_per_label = bam_report->records_per_label;
    }
    ESCPOD_RETURN_IF_ERROR(write_run_report(report_paths(o.report), r, o.writer.force, d.writer.fsync));
  }
  return Status::ok();
}

struct SplitCliOptions {
  std::vector<std::string> inputs;
  std::string classifications, out_dir, prefix = "barcode", annotation = "barcode";
  bool classified_only = false, sidecar = false;
  int64_t memory_mib = 256;
  WriterFlags writer;
};

Status run_split(const SplitCliOptions& o, int n_threads) {
  pipeline::SubsetOptions so;
  ESCPOD_ASSIGN_OR_RETURN(so.writer, writer_options(o.writer));
  so.writer.signal_budget = std::make_shared<pod5::SignalMemoryBudget>(o.memory_mib << 20);
  if (o.sidecar == !o.classifications.empty()) {
    return Status::usage("split needs one of --classifications CSV or --sidecar");
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  Result<std::vector<std::pair<pod5::ReadId, std::string>>> rows =
      o.sidecar ? pipeline::sidecar_labels(files, o.annotation, n_threads)
                : pipeline::read_call_labels(o.classifications);
  if (!rows.is_ok()) return rows.status();
  for (auto& [id, label] : *rows) {
    if (label.empty()) label = "unclassified";  // reads the sidecar leaves unassigned
  }
  std::vector<std::pair<pod5::ReadId, std::string>> mapping;
  for (auto& [id, label] : *rows) {
    if (o.classified_only && label == "unclassified") continue;
    mapping.emplace_back(id, o.prefix + "_" + label + ".pod5");
  }
  so.mapping = std::move(mapping);
  if (!o.classified_only) so.unmapped_output = o.prefix + "_unclassified.pod5";
  pipeline::SubsetReport report;
  ESCPOD_RETURN_IF_ERROR(pipeline::subset_files(files, o.out_dir, so, &report));
  uint64_t total = 0;
  for (const auto& [name, n] : report.reads_per_output) {
    log::info("{:<32} {:>10}", name, n);
    total += n;
  }
  log::info("{:<32} {:>10}", "total", total);
  if (report.n_unmapped) {
    log::info("{} reads not in the classifications {}", report.n_unmapped,
              o.classified_only ? "were not written" : "went to unclassified");
  }
  if (report.n_mapped_missing) log::warn("{} classified read ids are in no input", report.n_mapped_missing);
  return Status::ok();
}

void register_split(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<SplitCliOptions>();
  auto* sub = demux->add_subcommand(
      "split",
      "Write one POD5 per label from a classifications CSV (read_id and barcode columns, as\n"
      "demux --classifications and demux classify write them; predicted_barcode is read as\n"
      "barcode). Reads the CSV does not name go to unclassified. Counts per file on stderr.\n"
      "  escpod demux split reads/ --classifications calls.csv -d by_barcode/\n"
      "  escpod demux split reads/ --sidecar -d by_barcode/   (labels from each reads.pod5.p5s)\n"
      "--sidecar routes by a label column of the inputs' sidecars (--label-column, default barcode);\n"
      "reads with no label go to unclassified.");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("--classifications", o->classifications, "Classifications CSV");
  sub->add_flag("--sidecar", o->sidecar, "Route by the inputs' .p5s sidecars instead of a CSV");
  auto* column = sub->add_option("--label-column", o->annotation, "Sidecar label column to route by (default barcode)");
  add_deprecated_alias(sub, "--annotation", column, o->annotation);  // NAME=LABEL selection in filter
  sub->add_option("-d,--output-dir", o->out_dir, "Output folder")->required();
  sub->add_option("--prefix", o->prefix, "Output file prefix (default barcode)");
  sub->add_flag("--classified-only", o->classified_only, "Drop unclassified reads");
  sub->add_option("--memory-mib", o->memory_mib, "Pending output signal held in memory (default 256)")
      ->check(CLI::PositiveNumber);
  add_writer_flags(sub, o->writer);
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_split(*o, resolve_threads(global)); });
}

struct TrainCliOptions {
  std::vector<std::string> inputs;
  std::string labels, output, method = "llr", cnn_model, template_model, fingerprints;
  double c = 1.0;
  WriterFlags writer;
};

Status write_text_staged(const std::string& path, const std::string& text, const WriterFlags& flags) {
  ESCPOD_ASSIGN_OR_RETURN(FsyncMode fsync, parse_fsync_mode(flags.fsync));
  ESCPOD_ASSIGN_OR_RETURN(StagedFile f, StagedFile::create(path, flags.force));
  {
    std::ofstream out(f.staging_path(), std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return Status::io_error("cannot write " + f.staging_path().string());
  }
  return f.commit(fsync);
}

Status run_train(const TrainCliOptions& o, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(auto labels, pipeline::read_training_labels(o.labels));
  pipeline::FingerprintOptions fo;
  fo.n_threads = resolve_threads(global);
  fo.cnn_model = o.cnn_model;
  ESCPOD_ASSIGN_OR_RETURN(fo.detector, parse_method(o.method));
  demux::SvmTrainOptions so;
  if (!o.template_model.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(demux::ModelTemplate t, demux::load_model_template(o.template_model));
    if (!t.has_signal_processing)
      return Status::invalid_argument(o.template_model + ": no signal_processing block to copy");
    demux::apply_template(t, so);
  }
  so.signal_processing.set_detector(o.method == "cnn");
  fo.signal_processing = so.signal_processing;
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  pipeline::FingerprintReport frep;
  ESCPOD_ASSIGN_OR_RETURN(auto rows, pipeline::fingerprint_labelled_reads(files, labels, fo, &frep));
  log::info("fingerprinted {} of {} labelled reads", rows.size(), frep.n_reads);
  for (const auto& [why, n] : frep.failures) log::info("  no fingerprint ({}): {}", why, n);
  if (rows.empty()) return Status::invalid_argument("no labelled read yielded a fingerprint");
  const size_t d = rows.front().features.size();
  std::vector<double> x;
  std::vector<int32_t> y;
  for (const auto& r : rows) {
    x.insert(x.end(), r.features.begin(), r.features.end());
    y.push_back(r.label);
  }
  if (!o.fingerprints.empty()) {
    pipeline::LabelledFingerprints table{d, {}, x, y};
    for (const auto& r : rows) table.read_ids.push_back(r.read_id);
    std::ostringstream csv;
    ESCPOD_RETURN_IF_ERROR(pipeline::write_labelled_fingerprints(csv, table, o.fingerprints));
    ESCPOD_RETURN_IF_ERROR(write_text_staged(o.fingerprints, csv.str(), o.writer));
  }
  so.C = o.c;
  so.n_threads = fo.n_threads;
  demux::SvmTrainReport trep;
  ESCPOD_ASSIGN_OR_RETURN(demux::TrainedDtwSvm model,
                          demux::train_dtw_svm(x, d, y, so, std::filesystem::path(o.output).stem().string(), &trep));
  ESCPOD_RETURN_IF_ERROR(write_text_staged(o.output, demux::serialize_dtw_svm(model), o.writer));
  log::info("trained {} classes on {} fingerprints: {} support vectors, training accuracy {:.3f} "
            "(DTW {:.1f} s, SVM {:.1f} s)", trep.n_classes, trep.n_rows, trep.n_support,
            trep.training_accuracy, trep.dtw_seconds, trep.svm_seconds);
  return Status::ok();
}

void register_train(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<TrainCliOptions>();
  auto* sub = demux->add_subcommand(
      "train",
      "Train a DTW-SVM model from labelled reads: detect each read's adapter, fingerprint the\n"
      "barcode, and fit the classifier (libsvm, Platt probabilities). Labels CSV: read_id and\n"
      "barcode columns. A label is a barcode (letters ending in its number 1..999: BC04, bc4,\n"
      "demo04, or the number alone) or the noise class (noise, unclassified, -1); any other\n"
      "label is an error naming the file, line and label. A simulator truth CSV works as it is.\n"
      "  escpod demux train sim.pod5 --labels sim.truth.csv --method llr -o model.json");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("--labels", o->labels, "CSV with read_id and barcode columns")->required();
  sub->add_option("-o,--output", o->output, "Model JSON to write")->required();
  add_method_flag(sub, o->method, "Boundary detector the model pins: llr (default) or cnn");
  sub->add_option("--cnn-model", o->cnn_model, "Boundary CNN (ONNX) for --method cnn");
  auto* settings_from = sub->add_option("--settings-from", o->template_model,
                                        "Copy signal-processing settings from this model");
  add_deprecated_alias(sub, "--template", settings_from, o->template_model);  // a name pattern in subset
  sub->add_option("--fingerprints", o->fingerprints, "Also write the training fingerprints (CSV)");
  sub->add_option("-C,--C", o->c, "SVM regularisation C (default 1)")->check(CLI::PositiveNumber);
  add_staging_flags(sub, o->writer);
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_train(*o, global); });
}

struct ExportModelCliOptions {
  std::string model, config, output;
  WriterFlags writer;
};

void register_export_model(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<ExportModelCliOptions>();
  auto* sub = demux->add_subcommand(
      "export-model",
      "Write a WarpDemuX .joblib model, with its signal-processing config, as our model JSON\n"
      "(escapepod-wdx-dtw-svm: the same model, value for value; `demux --model` reads either).\n"
      "  escpod demux export-model WDX4_rna004_v1_0.joblib -o WDX4_rna004_v1_0.json");
  sub->add_option("model", o->model, "WarpDemuX model file (.joblib)")->required();
  add_model_config_flag(sub, o->config);
  sub->add_option("-o,--output", o->output, "Model JSON to write")->required();
  add_staging_flags(sub, o->writer);
  add_verbosity_flags(sub, global);
  set_body(sub, [o]() -> Status {
    ESCPOD_ASSIGN_OR_RETURN(std::string text, demux::joblib_model_as_json(o->model, model_load_options(o->config)));
    ESCPOD_RETURN_IF_ERROR(write_text_staged(o->output, text, o->writer));
    log::info("wrote {} ({} bytes)", o->output, text.size());
    return Status::ok();
  });
}

struct EvalCliOptions {
  std::string calls, truth;
};

void register_evaluate(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<EvalCliOptions>();
  auto* sub = demux->add_subcommand(
      "evaluate",
      "Score barcode calls against ground truth: per-barcode precision and recall (the table is\n"
      "the command's output: stdout). Labels as demux train reads them; one that is neither a\n"
      "barcode nor the noise class is an error naming the file, line and label.\n"
      "  escpod demux evaluate --calls calls.csv --truth sim.truth.csv");
  sub->add_option("--calls", o->calls, "Classifications CSV (read_id, barcode)")->required();
  sub->add_option("--truth", o->truth, "Truth CSV (read_id, barcode)")->required();
  add_verbosity_flags(sub, global);
  set_body(sub, [o] () -> Status {
    ESCPOD_ASSIGN_OR_RETURN(auto scores, pipeline::score_calls(o->calls, o->truth));
    fmt::print("{}", pipeline::format_scores(scores));
    return Status::ok();
  });
}

}  // namespace

void register_demux(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<DemuxCliOptions>();
  auto* sub = app.add_subcommand(
      "demux",
      "Demultiplex direct-RNA reads from the signal: find the adapter, fingerprint the barcode,\n"
      "classify it (WarpDemuX DTW-SVM model), and write one POD5 per barcode plus\n"
      "`unclassified`, in one streaming pass.\n"
      "  escpod demux reads/ --model WDX4_rna004_v1_0.json -d out/ --classifications calls.csv\n"
      "  escpod demux reads/ --model WDX4_rna004_v1_0.json --annotate   (labels, no copies)\n"
      "  escpod demux --model WDX4_rna004_v1_0.json --info\n"
      "  escpod demux reads/ --model WDX4_rna004_v1_0.joblib --cnn-model adapted_cnn.onnx -d out/\n"
      "A WarpDemuX .joblib model is read as WarpDemuX ships it, with the signal-processing config\n"
      "its folder's config.toml names (or --config); `demux export-model` writes it as JSON.\n"
      "The model pins its boundary detector (the CNN, with LLR fallbacks); the CNN's ONNX file\n"
      "is found beside the model or given with --cnn-model. A SeqTagger/bonito folder pins none:\n"
      "it runs with the LLR detector, or with the CNN when --cnn-model or --method cnn is given.");
  opts->app = sub;
  sub->add_option("inputs", opts->inputs, "POD5 files or directories");
  sub->add_option("-m,--model", opts->model,
                  "DTW-SVM model (our JSON, or WarpDemuX's own .joblib file), GBM JSON, or a CTC-CRF\n"
                  "model folder (SeqTagger or bundle)");
  add_model_config_flag(sub, opts->config);
  sub->add_option("--cnn-model", opts->cnn_model, "Boundary CNN (ONNX), if not beside the model");
  add_cnn_precision_flag(sub, opts->cnn_precision);
  add_method_flag(sub, opts->method, "Override the model's detector: cnn or llr");
  sub->add_option("-d,--output-dir", opts->out_dir, "Folder for <prefix>_<label>.pod5 files");
  sub->add_option("--classifications", opts->classifications,
                  "CSV: read_id,barcode,confidence,adapter_start,adapter_end,detector,reason,p..");
  sub->add_option("--prefix", opts->prefix, "Output file prefix (default barcode)");
  sub->add_option("--report", opts->report,
                  "HTML report of the run (as `escpod report` writes it, with REPORT.json and\n"
                  "REPORT_<section>_mqc.json beside it)");
  sub->add_option("--memory-mib", opts->memory_mib,
                  "Pending output signal held in memory, all outputs together (default 256)")
      ->check(CLI::PositiveNumber);
  add_dtw_precision_flag(sub, opts->dtw_precision);
  add_crf_flags(sub, opts->crf);
  sub->add_option("--bam", opts->bam,
                  "Basecalled BAM of these reads (dorado's): once the calls are final, its records are\n"
                  "tagged with them as `escpod bam-demux` does, one <prefix>_<label>.bam per label into -d");
  sub->add_option("--bam-output", opts->bam_output, "With --bam: every record of it, tagged, into this BAM");
  sub->add_flag("--info", opts->info, "Describe the model and its detector, then exit");
  sub->add_flag("--annotate", opts->annotate,
                "Write each read's label into its input's .p5s sidecar (column barcode) once the run "
                "succeeded; with no -d, no POD5 is written");
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  register_split(sub, global);
  register_train(sub, global);
  register_evaluate(sub, global);
  register_export_model(sub, global);
  register_demux_stages(sub, global);
#ifdef ESCPOD_HAVE_TRAIN_SVM
  register_demux_train_svm(sub, global);
#endif
  // The fused run is the body unless a stage subcommand was chosen.
  auto body = std::make_shared<CommandBody>([opts, &global] { return run_demux_cmd(*opts, global); });
  sub->callback([sub, body] {
    if (sub->get_subcommands().empty()) select_body(body.get());
  });
}

}  // namespace escpod::cli
