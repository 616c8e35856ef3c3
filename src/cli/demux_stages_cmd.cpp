#include "cli/demux_stages_cmd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "cli/crf_flags.hpp"
#include "cli/output.hpp"
#include "escpod/pipeline/demux/crf_basecall.hpp"
#include "escpod/pipeline/demux/demux_stages.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {

namespace {

double per_second(uint64_t n, double seconds) {
  return static_cast<double>(n) / std::max(seconds, 1e-9);
}

// A stage's model, resolved as the fused run resolves it (pipeline::resolve_model_spec: a CRF
// bundle's pinned detector, a SeqTagger folder's CNN choice) and loaded once.
// `runs_detector`: the stage detects boundaries (detect); the others read them from a table.
// `cnn_precision`: --cnn-precision (the stages that run the detector).
Result<pipeline::RunModel> stage_model(const std::string& model, const std::string& config, const std::string& method,
                                       const std::string& cnn_model, demux::HeadOptions head, bool runs_detector,
                                       const std::string& cnn_precision = "float32") {
  head.model_file = model_load_options(config);
  ESCPOD_ASSIGN_OR_RETURN(pipeline::ModelSpec spec,
                          pipeline::resolve_model_spec(model, std::move(head), method, cnn_model, cnn_precision));
  return pipeline::load_run_model(spec, runs_detector);
}

// ---- detect ---------------------------------------------------------------------------------

struct DetectCliOptions {
  std::vector<std::string> inputs;
  std::string model, config, cnn_model, method, cnn_precision = "float32";
  bool emit_llr_delta = false;
  CsvOutputFlags out;
};

Status run_detect(const DetectCliOptions& o, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(const pipeline::RunModel model,
                          stage_model(o.model, o.config, o.method, o.cnn_model, {}, true, o.cnn_precision));
  pipeline::DetectStageOptions d;
  d.emit_llr_delta = o.emit_llr_delta;
  d.n_threads = resolve_threads(global);
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  pipeline::DetectStageReport rep;
  ESCPOD_RETURN_IF_ERROR(with_csv_output(o.out, [&](std::ostream& csv) {
    return pipeline::detect_boundaries(files, model, d, csv, &rep);
  }));
  log::info("adapter found in {} of {} reads", rep.n_detected, rep.n_reads);
  for (const auto& [why, n] : rep.failures) log::info("  no adapter ({}): {}", why, n);
  for (const auto& [method, n] : rep.detector_used) log::info("  detector {}: {}", method, n);
  if (d.emit_llr_delta && !rep.end_deltas.empty()) {
    auto& v = rep.end_deltas;
    std::sort(v.begin(), v.end());
    const size_t within_100 = static_cast<size_t>(std::count_if(
        v.begin(), v.end(), [](int64_t x) { return x >= -100 && x <= 100; }));
    log::info("CNN - LLR adapter end, {} reads with both: median {}, 10%-90% [{}, {}], within 100 "
              "samples {:.1f}%", v.size(), v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10],
              100.0 * static_cast<double>(within_100) / static_cast<double>(v.size()));
  }
  log::info("{} reads in {:.2f} s ({:.0f} reads/s, {} threads)", rep.n_reads, rep.seconds,
            per_second(rep.n_reads, rep.seconds), d.n_threads);
  return Status::ok();
}

void register_detect(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<DetectCliOptions>();
  auto* sub = demux->add_subcommand(
      "detect",
      "Find each read's adapter (the model's detector: the boundary CNN with LLR fallbacks, or\n"
      "LLR) and write a boundaries CSV, one row per read in input order:\n"
      "read_id,num_samples,adapter_start,adapter_end,polya_end,detector,reason\n"
      "(positions 0 and a reason when no adapter was found). --emit-llr-delta (CNN detector\n"
      "only) also runs the LLR detector on the whole read and appends\n"
      "llr_adapter_start,llr_adapter_end,end_delta (CNN end - LLR end, empty unless both found\n"
      "one), with a summary of the differences on stderr.\n"
      "  escpod demux detect reads/ --model WDX4_rna004_v1_0.json -o boundaries.csv");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("-m,--model", o->model,
                  "The run's model (its detector settings), anything `escpod demux --model` takes: a\n"
                  "DTW-SVM or GBM JSON file, WarpDemuX's own .joblib file, a CTC-CRF model folder")
      ->required();
  add_model_config_flag(sub, o->config);
  add_method_flag(sub, o->method, "Override the model's detector: cnn or llr");
  sub->add_option("--cnn-model", o->cnn_model, "Boundary CNN (ONNX), if not beside the model");
  add_cnn_precision_flag(sub, o->cnn_precision);
  sub->add_flag("--emit-llr-delta", o->emit_llr_delta,
                "Also write the LLR detector's adapter and its end's difference from the CNN's");
  add_csv_output_flags(sub, o->out, "Boundaries CSV to write");
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_detect(*o, global); });
}

// ---- fingerprint ----------------------------------------------------------------------------

struct FingerprintCliOptions {
  std::vector<std::string> inputs;
  std::string boundaries, model, config, method;
  bool emit_dwell = false;
  CsvOutputFlags out;
};

Status run_fingerprint(const FingerprintCliOptions& o, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(const pipeline::RunModel model, stage_model(o.model, o.config, o.method, "", {}, false));
  pipeline::FingerprintStageOptions f;
  f.emit_dwell = o.emit_dwell;
  f.n_threads = resolve_threads(global);
  const auto format = pipeline::fingerprint_format_of(o.out.output);
  const size_t n_fp = pipeline::fingerprint_length(model);
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  ESCPOD_ASSIGN_OR_RETURN(pipeline::BoundariesTable table, pipeline::read_boundaries_csv(o.boundaries));
  pipeline::FingerprintStageReport rep;
  ESCPOD_RETURN_IF_ERROR(with_csv_output(o.out, [&](std::ostream& out) -> Status {
    const std::string what = o.out.output.empty() ? "standard output" : o.out.output;
    ESCPOD_ASSIGN_OR_RETURN(auto writer,
                            pipeline::FingerprintTableWriter::open(format, out, n_fp, f.emit_dwell, what));
    return pipeline::fingerprint_from_boundaries(files, table, model, f, *writer, &rep);
  }));
  uint64_t n_failed = 0;
  for (const auto& [why, n] : rep.failures) n_failed += n;
  log::info("fingerprinted {} of {} reads with an adapter ({} boundary rows without an adapter "
            "skipped)", rep.n_fingerprinted, rep.n_fingerprinted + n_failed, rep.n_dropped);
  for (const auto& [why, n] : rep.failures) log::info("  no fingerprint ({}): {}", why, n);
  if (rep.n_not_in_inputs) {
    log::warn("{} read ids of {} are in no input", rep.n_not_in_inputs, o.boundaries);
  }
  const uint64_t n = rep.n_fingerprinted + n_failed;
  log::info("{} reads in {:.2f} s ({:.0f} reads/s, {} threads)", n, rep.seconds, per_second(n, rep.seconds),
            f.n_threads);
  return Status::ok();
}

void register_fingerprint(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<FingerprintCliOptions>();
  auto* sub = demux->add_subcommand(
      "fingerprint",
      "Barcode fingerprints (WarpDemuX segmentation) of the reads a boundaries CSV names, in\n"
      "input order: read_id,fp_0..fp_24 (6 decimals), with --emit-dwell also dwell_0..dwell_24\n"
      "(samples in each of those events). An output named *.parquet is written as Parquet\n"
      "(read_id string, float64 columns, zstd) for pandas/polars; anything else as CSV. Reads\n"
      "without an adapter or whose fingerprint fails are counted on stderr, not written. Give\n"
      "the model the boundaries came from (its fingerprint settings; default: the RNA004\n"
      "settings) and the same --method.\n"
      "  escpod demux fingerprint reads/ --boundaries b.csv --model WDX4_rna004_v1_0.json -o fp.csv\n"
      "  escpod demux fingerprint reads/ --boundaries b.csv --emit-dwell -o fp.parquet");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("--boundaries", o->boundaries, "Boundaries CSV (from demux detect)")->required();
  sub->add_option("-m,--model", o->model,
                  "Model whose signal-processing settings to use (a model `escpod demux` takes whose\n"
                  "head reads fingerprints: DTW-SVM or GBM JSON, WarpDemuX's .joblib)");
  add_model_config_flag(sub, o->config);
  add_method_flag(sub, o->method, "Detector the boundaries came from, if not the model's: cnn or llr");
  sub->add_flag("--emit-dwell", o->emit_dwell,
                "Also write dwell_0..: the length in samples of each fingerprint event");
  add_csv_output_flags(sub, o->out, "Fingerprint table to write: CSV, or Parquet if named *.parquet");
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_fingerprint(*o, global); });
}

// ---- classify -------------------------------------------------------------------------------

}  // namespace

void add_method_flag(CLI::App* sub, std::string& value, const std::string& help) {
  sub->add_option("--method", value, help)->check(CLI::IsMember({"cnn", "llr"}));
}

Result<pipeline::DetectorChoice> parse_method(const std::string& method) {
  return pipeline::parse_detector_choice(method);
}

void add_model_config_flag(CLI::App* sub, std::string& value) {
  sub->add_option("--config", value,
                  "WarpDemuX signal-processing config (TOML) of a WarpDemuX .joblib model; default:\n"
                  "the one its folder's config.toml names (e.g. rna004_130bps@v1.0.toml beside it)");
}

demux::ModelLoadOptions model_load_options(const std::string& config) {
  demux::ModelLoadOptions o;
  o.warpdemux_config = config;
  return o;
}

void add_dtw_precision_flag(CLI::App* sub, std::string& value) {
  sub->add_option("--dtw-precision", value,
                  "DTW arithmetic: float32 (default; about 2x faster, probabilities within 1e-6\n"
                  "of WarpDemuX's) or float64 (WarpDemuX's dtaidistance distances bit for bit)")
      ->check(CLI::IsMember({"float32", "float64"}));
}

void add_cnn_precision_flag(CLI::App* sub, std::string& value) {
  sub->add_option("--cnn-precision", value,
                  "Boundary CNN arithmetic: float32 (default, exact) or bfloat16 (its convolutions in\n"
                  "bfloat16 on CPUs with AVX512_BF16: ~2x faster detection; boundaries can move by a\n"
                  "few samples on some reads; elsewhere float32 runs)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
}

Result<demux::DtwPrecision> parse_dtw_precision(const std::string& value) {
  if (value == "float32") return demux::DtwPrecision::kFloat32;
  if (value == "float64") return demux::DtwPrecision::kFloat64;
  return Status::usage("--dtw-precision must be float32 or float64, not '" + value + "'");
}

namespace {

struct ClassifyCliOptions {
  std::string fingerprints, model, config;
  std::string dtw_precision = "float32";
  bool probabilities = false;
  CsvOutputFlags out;
};

Status run_classify(const ClassifyCliOptions& o, const GlobalOptions& global, const CLI::App* app) {
  if (o.probabilities) {
    log::warn("--probabilities is deprecated: the classifications table always has the head's columns "
              "(the DTW-SVM head's per-class probabilities among them); it will be removed");
  }
  demux::HeadOptions head;
  ESCPOD_ASSIGN_OR_RETURN(head.dtw, parse_dtw_precision(o.dtw_precision));
  head.dtw_precision_given = app->count("--dtw-precision") > 0;  // refused for a GBM model
  ESCPOD_ASSIGN_OR_RETURN(const pipeline::RunModel model,
                          stage_model(o.model, o.config, "", "", std::move(head), false));
  pipeline::ClassifyStageOptions c;
  c.n_threads = resolve_threads(global);
  pipeline::ClassifyStageReport rep;
  ESCPOD_RETURN_IF_ERROR(with_csv_output(o.out, [&](std::ostream& csv) {
    return pipeline::classify_fingerprints(o.fingerprints, model, c, csv, &rep);
  }));
  for (const auto& [label, n] : rep.calls) {
    log::info("{:<16} {:>10} {:>7.1f}%", label, n,
              100.0 * static_cast<double>(n) / static_cast<double>(std::max<uint64_t>(1, rep.n_reads)));
  }
  for (const auto& [why, n] : rep.unclassified_reasons) log::info("unclassified, {}: {}", why, n);
  log::info("{} reads in {:.2f} s ({:.0f} reads/s, {} threads)", rep.n_reads, rep.seconds,
            per_second(rep.n_reads, rep.seconds), c.n_threads);
  return Status::ok();
}

void register_classify(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<ClassifyCliOptions>();
  auto* sub = demux->add_subcommand(
      "classify",
      "Classify a fingerprint table (read_id,fp_0..: CSV, gzip CSV, or Parquet if named\n"
      "*.parquet; barcode and dwell_* columns are ignored) with the model's head (DTW-SVM or GBM),\n"
      "as the fused `escpod demux` does, and write the same classifications table, in input order:\n"
      "read_id,barcode,confidence,adapter_start,adapter_end,detector,reason, then the head's\n"
      "columns (DTW-SVM: one probability per class); this stage does not see the boundaries, so\n"
      "those three cells are empty. barcode is the output label (BC + two digits) or\n"
      "unclassified, with the reason. Counts per label on stderr.\n"
      "  escpod demux classify fp.parquet --model WDX4_rna004_v1_0.json -o calls.csv");
  sub->add_option("fingerprints", o->fingerprints, "Fingerprint table (from demux fingerprint): CSV or .parquet")->required();
  sub->add_option("-m,--model", o->model,
                  "Model whose head reads fingerprints: DTW-SVM or GBM JSON, WarpDemuX's own .joblib file")
      ->required();
  add_model_config_flag(sub, o->config);
  sub->add_flag("--probabilities", o->probabilities,
                "Deprecated (the head's columns, the probabilities among them, are always written)");
  add_dtw_precision_flag(sub, o->dtw_precision);
  add_csv_output_flags(sub, o->out, "Calls CSV to write");
  add_common_flags(sub, global);
  set_body(sub, [o, &global, sub] { return run_classify(*o, global, sub); });
}

}  // namespace

namespace {

// ---- basecall (CTC-CRF head) ------------------------------------------------------------------

struct BasecallCliOptions {
  std::vector<std::string> inputs;
  std::string boundaries, model;
  CrfCliFlags crf;
  CsvOutputFlags out;
};

Status run_basecall(const BasecallCliOptions& o, const GlobalOptions& global) {
  demux::HeadOptions head;
  ESCPOD_ASSIGN_OR_RETURN(demux::CrfHeadOptions crf, crf_head_options_from_flags(o.crf));
  head.crf = std::make_shared<const demux::CrfHeadOptions>(std::move(crf));
  ESCPOD_ASSIGN_OR_RETURN(const pipeline::RunModel model, stage_model(o.model, "", "", "", std::move(head), false));
  pipeline::CrfBasecallOptions b;
  b.n_threads = resolve_threads(global);
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  ESCPOD_ASSIGN_OR_RETURN(pipeline::BoundariesTable table, pipeline::read_boundaries_csv(o.boundaries));
  pipeline::CrfBasecallReport rep;
  ESCPOD_RETURN_IF_ERROR(with_csv_output(o.out, [&](std::ostream& csv) {
    return pipeline::basecall_from_boundaries(files, table, model, b, csv, &rep);
  }));
  log::info("{} reads basecalled, {} classified ({} boundary rows without an adapter skipped)", rep.n_rows,
            rep.n_classified, rep.n_dropped);
  for (const auto& [why, n] : rep.unclassified_reasons) log::info("unclassified, {}: {}", why, n);
  if (rep.n_not_in_inputs) log::warn("{} read ids of {} are in no input", rep.n_not_in_inputs, o.boundaries);
  log::info("{} reads in {:.2f} s ({:.0f} reads/s, {} threads)", rep.n_rows, rep.seconds,
            per_second(rep.n_rows, rep.seconds), b.n_threads);
  return Status::ok();
}

void register_basecall(CLI::App* demux, GlobalOptions& global) {
  auto o = std::make_shared<BasecallCliOptions>();
  auto* sub = demux->add_subcommand(
      "basecall",
      "Basecall the barcode of the reads a boundaries CSV names with a CTC-CRF model folder\n"
      "(SeqTagger or escapepod bundle) and name it by edit distance: one row per read, in input\n"
      "order, of the classifications table the fused `escpod demux` writes (read_id,barcode,\n"
      "confidence,adapter_start,adapter_end,detector,reason, then the head's columns: distances,\n"
      "gates, scores), then decoded_seq, the barcode sequence the head decoded.\n"
      "  escpod demux basecall reads/ --boundaries b.csv --model seqtagger/b04_RNA004 -o calls.csv");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("--boundaries", o->boundaries, "Boundaries CSV (from demux detect)")->required();
  sub->add_option("-m,--model", o->model, "CTC-CRF model folder")->required();
  add_crf_flags(sub, o->crf);
  add_csv_output_flags(sub, o->out, "Calls CSV");
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_basecall(*o, global); });
}

}  // namespace

void register_demux_stages(CLI::App* demux, GlobalOptions& global) {
  register_detect(demux, global);
  register_fingerprint(demux, global);
  register_classify(demux, global);
  register_basecall(demux, global);
}

}  // namespace escpod::cli
