// escpod annotate: write a column (labels or scores) into the .p5s sidecars of POD5 files.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct AnnotateCliOptions {
  std::vector<std::string> inputs;
  std::string from, name, kind = "label", column, design;
  std::vector<std::string> keys;
  std::string fsync = "none";
};

Status run_annotate(const AnnotateCliOptions& o, const GlobalOptions& global) {
  if (o.from.empty() && o.design.empty()) {
    return Status::usage("annotate needs --from CSV --name NAME, and/or --design CSV --keys K,...");
  }
  if (!o.from.empty() && o.name.empty()) return Status::usage("--from needs --name NAME");
  if (o.kind != "label" && o.kind != "score") return Status::usage("--kind must be label or score");
  if (!o.design.empty() && o.keys.empty()) return Status::usage("--design needs --keys (its key columns)");
  pipeline::AnnotateOptions ao;
  ao.n_threads = resolve_threads(global);
  ESCPOD_ASSIGN_OR_RETURN(ao.fsync, parse_fsync_mode(o.fsync));
  ao.writer = std::string("escpod ") + ESCPOD_VERSION;
  std::vector<pipeline::AnnotationSource> sources;
  if (!o.from.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(
        auto src, pipeline::read_annotation_csv(o.from, o.name,
                                                o.kind == "score" ? pod5::AnnotationKind::kScore
                                                                  : pod5::AnnotationKind::kLabel,
                                                o.column));
    sources.push_back(std::move(src));
  }
  if (!o.design.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto d, pipeline::read_design_csv(o.design, o.keys));
    ao.design = std::move(d);
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(o.inputs));
  pipeline::AnnotateReport report;
  ESCPOD_RETURN_IF_ERROR(pipeline::annotate_files(files, sources, ao, &report));
  for (const auto& [path, n] : report.assigned_per_file) {
    log::info("{}: {} reads annotated", pod5::sidecar_path(path).string(), n);
  }
  if (report.n_not_in_inputs) log::warn("{} rows name reads that are in no input", report.n_not_in_inputs);
  return Status::ok();
}

}  // namespace

void register_annotate(CLI::App& app, GlobalOptions& global) {
  auto o = std::make_shared<AnnotateCliOptions>();
  auto* sub = app.add_subcommand(
      "annotate",
      "Write a per-read column into each POD5's .p5s sidecar (reads.pod5 -> reads.pod5.p5s), from a\n"
      "read_id,<value> CSV; the sidecar's other columns are kept, and the write is atomic.\n"
      "  escpod annotate runs/ --from calls.csv --name barcode\n"
      "  escpod annotate reads.pod5 --from qscores.csv --name qscore --kind score\n"
      "  escpod annotate reads.pod5 --design samples.csv --keys barcode   (derived label columns)\n"
      "Reads the CSV does not name are unassigned in that column. Use the column with\n"
      "`escpod filter --annotation NAME=LABEL`, `escpod view --include NAME`, `escpod demux split\n"
      "--sidecar --label-column NAME`.");
  sub->add_option("inputs", o->inputs, "POD5 files or directories")->required();
  sub->add_option("--from", o->from, "CSV with read_id and a value column");
  sub->add_option("--name", o->name, "Column to write");
  sub->add_option("--kind", o->kind, "label (default) or score (float32)");
  sub->add_option("--column", o->column, "CSV column holding the values (default: NAME, or the only other one)");
  sub->add_option("--design", o->design, "Design CSV: key columns then value columns; values become label columns");
  sub->add_option("--keys", o->keys, "The design's key columns (comma-separated)")->delimiter(',');
  add_fsync_flag(sub, o->fsync);
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_annotate(*o, global); });
}

}  // namespace escpod::cli
