// escpod report: an HTML page (inline SVG), a JSON file and MultiQC custom-content files from
// demultiplexing outputs (classifications CSVs, optionally the POD5 inputs).
#include <fmt/format.h>

#include "cli/report_cmd.hpp"

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {

ReportPaths report_paths(const std::string& html) {
  std::filesystem::path p(html);
  std::filesystem::path base = p;
  if (base.extension() == ".html" || base.extension() == ".htm") base.replace_extension();
  return {p, std::filesystem::path(base.string() + ".json"), base};
}

Status write_run_report(const ReportPaths& paths, const pipeline::ReportOptions& options, bool overwrite,
                        FsyncMode fsync) {
  ESCPOD_ASSIGN_OR_RETURN(pipeline::ReportData data, pipeline::collect_report(options));
  pipeline::ReportOutputs out;
  out.html = paths.html;
  out.json = paths.json;
  out.mqc_prefix = paths.mqc_prefix;
  out.overwrite = overwrite;
  out.fsync = fsync;
  ESCPOD_RETURN_IF_ERROR(pipeline::write_report(data, out));
  log::info("report: {} ({} reads), {}, {}_*_mqc.json", paths.html.string(), data.n_reads, paths.json.string(),
            paths.mqc_prefix.string());
  return Status::ok();
}

namespace {

struct ReportCliOptions {
  std::vector<std::string> classifications;
  std::vector<std::string> inputs;
  std::string output;
  std::string json;
  std::string multiqc;
  bool force = false;
  std::string fsync = "none";
};

Status run_report(const ReportCliOptions& o, const GlobalOptions& global) {
  pipeline::ReportOptions r;
  for (const auto& c : o.classifications) r.classifications.emplace_back(c);
  if (!o.inputs.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(r.pod5_inputs, pod5::collect_pod5_inputs(o.inputs));
  }
  r.n_threads = resolve_threads(global);
  r.version = ESCPOD_VERSION;
  r.command_line = global.command_line;
  ReportPaths paths = report_paths(o.output);
  if (!o.json.empty()) paths.json = o.json;
  if (!o.multiqc.empty()) paths.mqc_prefix = o.multiqc;
  ESCPOD_ASSIGN_OR_RETURN(const FsyncMode fsync, parse_fsync_mode(o.fsync));
  return write_run_report(paths, r, o.force, fsync);
}

}  // namespace

void register_report(CLI::App& app, GlobalOptions& global) {
  auto o = std::make_shared<ReportCliOptions>();
  auto* sub = app.add_subcommand(
      "report",
      "Write a self-contained HTML report (inline SVG plots, nothing fetched) of a demultiplexing\n"
      "run: reads per barcode, confidence per barcode, unclassified reasons, the detector that\n"
      "found each adapter and, given the POD5 inputs, read length (samples), signal duration and\n"
      "throughput over the run; plus OUT.json with the same numbers and MultiQC custom-content\n"
      "files OUT_<section>_mqc.json (OUT: the HTML path without .html).\n"
      "  escpod report --classifications calls.csv reads/ -o run.html\n"
      "  escpod report --classifications shard1.csv --classifications shard2.csv -o run.html");
  sub->add_option("inputs", o->inputs, "POD5 files or directories the classifications came from (optional)");
  sub->add_option("--classifications", o->classifications,
                  "Classifications CSV from `escpod demux` (repeat for shards)")
      ->required()
      ->allow_extra_args(false);
  sub->add_option("-o,--output", o->output, "HTML report path")->required();
  auto* json = sub->add_option("--json-output", o->json, "JSON path (default: OUT.json)");
  add_deprecated_alias(sub, "--json", json, o->json);  // `--json` is a flag (JSON to stdout) elsewhere
  sub->add_option("--multiqc", o->multiqc, "MultiQC file prefix (default: OUT)");
  add_force_flag(sub, o->force);
  add_fsync_flag(sub, o->fsync);
  add_common_flags(sub, global);
  set_body(sub, [o, &global] { return run_report(*o, global); });
}

}  // namespace escpod::cli
