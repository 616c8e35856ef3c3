// escpod subset: partition reads into one POD5 per output name.
#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct SubsetCliOptions {
  std::vector<std::string> inputs;
  std::string out_dir, csv, name_template;
  std::vector<std::string> columns;
  WriterFlags writer;
  bool skip_bad = false;
};

Status run_subset(const SubsetCliOptions& opts, const GlobalOptions& global) {
  if (opts.csv.empty() == opts.columns.empty()) {
    return Status::usage("subset needs exactly one of --csv MAP or --columns FIELD,...");
  }
  pipeline::SubsetOptions so;
  ESCPOD_ASSIGN_OR_RETURN(so.writer, writer_options(opts.writer));
  if (!opts.csv.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto rows, pipeline::read_subset_csv(opts.csv));
    so.mapping = std::move(rows);
  }
  so.columns = opts.columns;
  so.name_template = opts.name_template;
  so.n_threads = resolve_threads(global);
  so.skip_bad = opts.skip_bad;
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::SubsetReport report;
  Status status = pipeline::subset_files(files, opts.out_dir, so, &report);
  report_skipped_inputs(report.skipped);
  ESCPOD_RETURN_IF_ERROR(status);
  uint64_t total = 0;
  for (const auto& [name, n] : report.reads_per_output) {
    log::info("{}: {} reads", name, n);
    total += n;
  }
  log::info("wrote {} reads into {} files in {}", total, report.reads_per_output.size(), opts.out_dir);
  if (report.n_unmapped) log::info("{} reads named by no mapping row were not written", report.n_unmapped);
  if (report.n_mapped_missing) log::warn("{} mapped read ids are in no input", report.n_mapped_missing);
  return Status::ok();
}

}  // namespace

void register_subset(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<SubsetCliOptions>();
  auto* sub = app.add_subcommand(
      "subset",
      "Split reads into one POD5 per output name.\n"
      "  escpod subset runs/ --csv map.csv -o by_sample/      (CSV columns read_id,output)\n"
      "  escpod subset runs/ --columns channel,end_reason -o split/ \\\n"
      "         --template '{end_reason}-ch{channel}.pod5'\n"
      "Reads a mapping does not name are not written (counted in the log).");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories")->required();
  sub->add_option("-o,--output", opts->out_dir, "Output folder (created if missing)")->required();
  sub->add_option("--csv", opts->csv, "CSV with header columns read_id and output");
  sub->add_option("--columns", opts->columns, "Group by these read fields (see `escpod view --list-fields`)")
      ->delimiter(',');
  sub->add_option("--template", opts->name_template,
                  "Output file name for --columns, with {field} placeholders");
  add_skip_bad_flag(sub, opts->skip_bad);
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_subset(*opts, global); });
}

}  // namespace escpod::cli
