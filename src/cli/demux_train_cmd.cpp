// escpod demux train-svm: labelled fingerprint table -> WarpDemuX-compatible DTW-SVM model JSON.
#include "cli/demux_train_cmd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/demux/train_svm.hpp"

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
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? line.npos
                                                                           : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool parse_double(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool parse_int(std::string_view s, int32_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// "BC04", "bc4", "barcode04", "4", "04" -> 4; "noise", "unclassified", "-1" -> -1.
bool parse_barcode(std::string_view s, int32_t& out) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (lower == "noise" || lower == "unclassified" || lower == "-1") {
    out = -1;
    return true;
  }
  std::string_view v = lower;
  if (v.starts_with("barcode")) v.remove_prefix(7);
  else if (v.starts_with("bc")) v.remove_prefix(2);
  if (!parse_int(v, out)) return false;
  return out >= 1;
}

struct LabelledTable {
  std::vector<double> fps;
  std::vector<int32_t> labels;
  size_t width = 0;
};

Result<LabelledTable> read_labelled_fingerprints(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error("cannot open " + path);
  std::string line;
  if (!std::getline(in, line)) return Status::invalid_argument(path + ": empty file");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string_view> header = split_commas(line);
  // fp_<i> columns (any order in the file, must cover 0..d-1) and the barcode column.
  std::map<int32_t, size_t> fp_columns;
  size_t barcode_col = header.size();
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string_view h = header[c];
    int32_t idx = 0;
    if (h.starts_with("fp_") && parse_int(h.substr(3), idx) && idx >= 0) {
      if (!fp_columns.emplace(idx, c).second)
        return Status::invalid_argument(path + ": column " + std::string(h) + " appears twice");
    } else if (h == "barcode") {
      barcode_col = c;
    }
  }
  if (fp_columns.empty())
    return Status::invalid_argument(path + ": no fp_0, fp_1, ... columns in the header");
  if (barcode_col == header.size())
    return Status::invalid_argument(path +
                                    ": no `barcode` column (training needs a label per read: "
                                    "BC04 or 4, noise/-1/unclassified for the noise class)");
  LabelledTable t;
  t.width = fp_columns.size();
  if (fp_columns.rbegin()->first != static_cast<int32_t>(t.width) - 1)
    return Status::invalid_argument(path + ": fingerprint columns must be fp_0 .. fp_" +
                                    std::to_string(t.width - 1) + " without gaps");
  std::vector<size_t> cols;
  for (const auto& [idx, col] : fp_columns) cols.push_back(col);
  size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    const std::vector<std::string_view> cells = split_commas(line);
    const std::string where = path + " line " + std::to_string(line_no);
    if (cells.size() != header.size())
      return Status::invalid_argument(where + ": " + std::to_string(cells.size()) +
                                      " fields, the header has " +
                                      std::to_string(header.size()));
    for (size_t i = 0; i < cols.size(); ++i) {
      double v = 0;
      if (!parse_double(cells[cols[i]], v))
        return Status::invalid_argument(where + ": fp_" + std::to_string(i) + " '" +
                                        std::string(cells[cols[i]]) + "' is not a number");
      t.fps.push_back(v);
    }
    int32_t label = 0;
    if (!parse_barcode(cells[barcode_col], label))
      return Status::invalid_argument(where + ": barcode '" + std::string(cells[barcode_col]) +
                                      "' is not a barcode (BC04, 4) or noise (noise, -1, "
                                      "unclassified)");
    t.labels.push_back(label);
  }
  if (t.labels.empty()) return Status::invalid_argument(path + ": no data rows");
  return t;
}

Result<std::vector<double>> parse_number_list(const std::string& text, const char* what) {
  std::vector<double> out;
  for (std::string_view cell : split_commas(text)) {
    double v = 0;
    if (!parse_double(cell, v))
      return Status::invalid_argument(std::string(what) + ": '" + std::string(cell) +
                                      "' is not a number");
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
  ESCPOD_ASSIGN_OR_RETURN(LabelledTable table, read_labelled_fingerprints(o.input));
  // Reserve the output before the (long) training so that an existing file fails fast.
  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(o.output, o.force));
  const std::string name =
      o.name.empty() ? std::filesystem::path(o.output).stem().string() : o.name;
  log::info("training {} from {}: {} fingerprints of {} values, {} threads", name, o.input,
            table.labels.size(), table.width, t.n_threads);
  demux::SvmTrainReport rep;
  auto model = demux::train_dtw_svm(table.fps, table.width, table.labels, t, name, &rep);
  if (!model.is_ok()) return model.status().with_context(o.input);
  {
    std::ofstream out(staged.staging_path(), std::ios::binary);
    out << demux::serialize_dtw_svm(*model);
    out.close();
    if (!out) return Status::io_error("cannot write " + staged.staging_path().string());
  }
  ESCPOD_RETURN_IF_ERROR(staged.commit(FsyncMode::kNone));
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
      "fingerprints: CSV with read_id,fp_0..fp_{N-1},barcode (barcode BC04 or 4; noise, -1 or\n"
      "unclassified for the noise class). Defaults are those of WarpDemuX's RNA004 models: DTW\n"
      "window 15, penalty 0.1, K = exp(-d), C 1, balanced class weights, seed 9.\n"
      "  escpod demux train-svm labelled_fps.csv -o my_model.json\n"
      "  escpod demux train-svm fps.csv -o m.json --template WDX4_rna004_v1_0.json --thresholds cv\n"
      "  escpod demux train-svm fps.csv -o m.json --C 2 --thresholds 0.2,0.3,0.2,0 -t 8");
  sub->add_option("input", opts->input, "Labelled fingerprint CSV")->required();
  sub->add_option("-o,--output", opts->output, "Model JSON to write")->required();
  sub->add_option("--template", opts->template_model,
                  "Model JSON whose signal_processing block (and chemistry) to copy "
                  "(default: the RNA004 block of WDX4_rna004_v1_0)");
  sub->add_option("--name", opts->name, "model_name (default: output file stem)");
  sub->add_option("-C,--C", opts->C, "SVM regularisation C (default 1)");
  sub->add_option("--window", opts->window, "DTW band: |i-j| <= window-1; 0 = none (default 15)");
  sub->add_option("--penalty", opts->penalty, "DTW penalty, squared per warp step (default 0.1)");
  sub->add_option("--gamma", opts->gamma, "Kernel exp(-gamma d^power): gamma (default 1)");
  sub->add_option("--power", opts->power, "Kernel power (default 1)");
  sub->add_option("--class-weight", opts->class_weight,
                  "balanced (default), none, or one weight per class (barcodes ascending, then "
                  "noise), comma-separated");
  sub->add_option("--thresholds", opts->thresholds,
                  "zero (default: no filtering), cv (cross-validated per-class thresholds for "
                  "--target-precision), or one value per class, comma-separated");
  sub->add_option("--target-precision", opts->target_precision,
                  "Precision per class for --thresholds cv (default 0.99)");
  sub->add_option("--folds", opts->folds, "Folds for --thresholds cv (default 5)");
  sub->add_option("--seed", opts->seed, "Seed of libsvm's Platt CV and the folds (default 9)");
  sub->add_flag("--float64-kernel", opts->float64_kernel,
                "Keep the kernel in double (default: float32 like WarpDemuX)");
  sub->add_flag("-f,--force", opts->force, "Overwrite the output");
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_train_svm(*opts, global); });
}

}  // namespace escpod::cli
