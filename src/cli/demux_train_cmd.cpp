// escpod demux train-svm: labelled fingerprint table -> WarpDemuX-compatible DTW-SVM model JSON.
#include "cli/demux_train_cmd.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/demux/train_svm.hpp"
#include "escpod/pipeline/tables/fingerprint_table.hpp"

namespace escpod::cli {
namespace {

struct TrainSvmCliOptions {
  std::string input;
  std::string output;
  std::string template_model;
  std::string name;
  double C = 1.0;
  int window = 15;
  double penalty = 0.1;
  double gamma = 1.0;
  double power = 1.0;
  std::string class_weight = "balanced";
  std::string thresholds = "zero";
  double target_precision = 0.99;
  int folds = 5;
  uint64_t seed = 9;
  bool float64_kernel = false;
  bool force = false;
  std::string fsync = "none";
};

// A comma-separated list of numbers from a flag (--class-weight, --thresholds); a cell that is
// not a number is a usage error naming the flag.
Result<std::vector<double>> parse_number_list(const std::string& text, const char* flag) {
  std::vector<double> out;
  for (std::string cell : CLI::detail::split(text, ',')) {
    CLI::detail::trim(cell);
    double v = 0;
    if (cell.empty() || !CLI::detail::lexical_cast(cell, v)) {
      return Status::usage(std::string(flag) + ": '" + cell + "' is not a number");
    }
    out.push_back(v);
  }
  return out;
}

Status run_train_svm(const TrainSvmCliOptions& o, const GlobalOptions& global) {
  demux::SvmTrainOptions t;
  t.C = o.C;
  t.window = o.window;
  t.penalty = o.penalty;
  t.gamma = o.gamma;
  t.power = o.power;
  t.float32_kernel = !o.float64_kernel;
  t.seed = o.seed;
  t.n_threads = resolve_threads(global);
  if (o.class_weight == "balanced") {
    t.weighting = demux::ClassWeighting::kBalanced;
  } else if (o.class_weight == "none") {
    t.weighting = demux::ClassWeighting::kNone;
  } else {
    t.weighting = demux::ClassWeighting::kExplicit;
    ESCPOD_ASSIGN_OR_RETURN(t.class_weights, parse_number_list(o.class_weight, "--class-weight"));
  }
  if (o.thresholds == "zero") {
    t.thresholds = demux::ThresholdMode::kZero;
  } else if (o.thresholds == "cv") {
    t.thresholds = demux::ThresholdMode::kCrossValidated;
    t.target_precision = o.target_precision;
    t.threshold_folds = o.folds;
  } else {
    t.thresholds = demux::ThresholdMode::kFixed;
    ESCPOD_ASSIGN_OR_RETURN(t.fixed_thresholds, parse_number_list(o.thresholds, "--thresholds"));
  }
  if (!o.template_model.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(demux::ModelTemplate tmpl, demux::load_model_template(o.template_model));
    demux::apply_template(tmpl, t);
  }
  ESCPOD_ASSIGN_OR_RETURN(pipeline::LabelledFingerprints table, pipeline::read_labelled_fingerprints(o.input));
  ESCPOD_ASSIGN_OR_RETURN(const FsyncMode fsync, parse_fsync_mode(o.fsync));
  // Reserve the output before the (long) training so that an existing file fails fast.
  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(o.output, o.force));
  const std::string name =
      o.name.empty() ? std::filesystem::path(o.output).stem().string() : o.name;
  log::info("training {} from {}: {} fingerprints of {} values, {} threads", name, o.input,
            table.labels.size(), table.n_features, t.n_threads);
  demux::SvmTrainReport rep;
  auto model = demux::train_dtw_svm(table.features, table.n_features, table.labels, t, name, &rep);
  if (!model.is_ok()) return model.status().with_context(o.input);
  {
    std::ofstream out(staged.staging_path(), std::ios::binary);
    out << demux::serialize_dtw_svm(*model);
    out.close();
    if (!out) return Status::io_error("cannot write " + staged.staging_path().string());
  }
  ESCPOD_RETURN_IF_ERROR(staged.commit(fsync));
  for (size_t c = 0; c < rep.n_classes; ++c) {
    log::info("class {}: label {:>3}, {} rows, weight {:.4g}, threshold {:.2f}", c,
              rep.class_labels[c], rep.class_rows[c], rep.class_weights[c], rep.thresholds[c]);
  }
  for (size_t c = 0; c < rep.n_classes; ++c) {
    if (rep.class_labels[c] != -1 && rep.thresholds[c] > 1.0)
      log::warn("class {} (label {}) has threshold {:.2f}: every call of it becomes -1{}",
                c, rep.class_labels[c], rep.thresholds[c],
                t.thresholds == demux::ThresholdMode::kCrossValidated
                    ? " (it never reached --target-precision in cross-validation; lower the "
                      "target or give --thresholds)"
                    : "");
  }
  log::info("{} support vectors of {} rows; training accuracy {:.2f}%", rep.n_support,
            rep.n_rows, 100.0 * rep.training_accuracy);
  log::info("DTW matrix {:.2f} s, libsvm {:.2f} s{}; wrote {}", rep.dtw_seconds, rep.svm_seconds,
            t.thresholds == demux::ThresholdMode::kCrossValidated
                ? fmt::format(", threshold CV {:.2f} s", rep.threshold_seconds)
                : std::string(),
            o.output);
  return Status::ok();
}

}  // namespace

void register_demux_train_svm(CLI::App* demux_subcommand, GlobalOptions& global) {
  auto opts = std::make_shared<TrainSvmCliOptions>();
  auto* sub = demux_subcommand->add_subcommand(
      "train-svm",
      "Train a WarpDemuX-compatible DTW-kernel SVM (libsvm C-SVC, Platt scaling) from labelled\n"
      "fingerprints: CSV with read_id,fp_0..fp_{N-1},barcode (a barcode: letters ending in its\n"
      "number 1..999, BC04, or the number, 4; the noise class: noise, unclassified or -1; any other\n"
      "label is an error naming the file, line and label). Defaults are those of WarpDemuX's RNA004 models: DTW\n"
      "window 15, penalty 0.1, K = exp(-d), C 1, balanced class weights, seed 9.\n"
      "  escpod demux train-svm labelled_fps.csv -o my_model.json\n"
      "  escpod demux train-svm fps.csv -o m.json --settings-from WDX4_rna004_v1_0.json --thresholds cv\n"
      "  escpod demux train-svm fps.csv -o m.json --C 2 --thresholds 0.2,0.3,0.2,0 -t 8");
  sub->add_option("input", opts->input, "Labelled fingerprint CSV")->required();
  sub->add_option("-o,--output", opts->output, "Model JSON to write")->required();
  auto* settings_from = sub->add_option("--settings-from", opts->template_model,
                                        "Model JSON whose signal_processing block (and chemistry) to copy "
                                        "(default: the RNA004 block of WDX4_rna004_v1_0)");
  add_deprecated_alias(sub, "--template", settings_from, opts->template_model);  // a name pattern in subset
  auto* model_name = sub->add_option("--model-name", opts->name, "model_name (default: output file stem)");
  add_deprecated_alias(sub, "--name", model_name, opts->name);  // a sidecar column in annotate
  sub->add_option("-C,--C", opts->C, "SVM regularisation C (default 1)")->check(CLI::PositiveNumber);
  sub->add_option("--window", opts->window, "DTW band: |i-j| <= window-1; 0 = none (default 15)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--penalty", opts->penalty, "DTW penalty, squared per warp step (default 0.1)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--gamma", opts->gamma, "Kernel exp(-gamma d^power): gamma (default 1)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--power", opts->power, "Kernel power (default 1)")->check(CLI::PositiveNumber);
  sub->add_option("--class-weight", opts->class_weight,
                  "balanced (default), none, or one weight per class (barcodes ascending, then "
                  "noise), comma-separated");
  sub->add_option("--thresholds", opts->thresholds,
                  "zero (default: no filtering), cv (cross-validated per-class thresholds for "
                  "--target-precision), or one value per class, comma-separated");
  sub->add_option("--target-precision", opts->target_precision,
                  "Precision per class for --thresholds cv (default 0.99)");
  sub->add_option("--folds", opts->folds, "Folds for --thresholds cv (default 5)")
      ->check(CLI::Range(2, 1000));
  sub->add_option("--seed", opts->seed, "Seed of libsvm's Platt CV and the folds (default 9)");
  sub->add_flag("--float64-kernel", opts->float64_kernel,
                "Keep the kernel in double (default: float32 like WarpDemuX)");
  add_force_flag(sub, opts->force);
  add_fsync_flag(sub, opts->fsync);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_train_svm(*opts, global); });
}

}  // namespace escpod::cli
