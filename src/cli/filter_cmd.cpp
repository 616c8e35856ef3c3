// escpod filter: the reads of POD5 files that meet every criterion, into one file.
#include <sstream>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct FilterCliOptions {
  std::vector<std::string> inputs;
  std::string output, ids;
  std::optional<uint64_t> min_samples, max_samples;
  std::vector<std::string> end_reasons, exclude_end_reasons, annotations;
  bool missing_ok = false;
  bool skip_bad = false;
  bool no_index = false;
  WriterFlags writer;
};

Status run_filter(const FilterCliOptions& opts, const GlobalOptions& global) {
  pipeline::FilterCriteria c;
  if (!opts.ids.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto ids, pod5::read_id_list(opts.ids));
    c.ids = std::move(ids);
  }
  c.min_samples = opts.min_samples;
  c.max_samples = opts.max_samples;
  c.end_reasons = opts.end_reasons;
  c.exclude_end_reasons = opts.exclude_end_reasons;
  c.annotations = opts.annotations;
  if (!c.any()) {
    return Status::usage("filter needs at least one criterion: --ids, --min-samples, "
                                    "--max-samples, --end-reason, --exclude-end-reason or --annotation");
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::FilterOptions fo;
  ESCPOD_ASSIGN_OR_RETURN(fo.writer, writer_options(opts.writer));
  fo.missing_ok = opts.missing_ok;
  fo.skip_bad = opts.skip_bad;
  fo.use_index = !opts.no_index;
  fo.n_threads = resolve_threads(global);
  pipeline::FilterReport report;
  Status status = pipeline::filter_files(files, opts.output, c, fo, &report);
  report_skipped_inputs(report.skipped);
  ESCPOD_RETURN_IF_ERROR(status);
  if (!report.missing_ids.empty()) {
    log::warn("{} listed read ids are in no input (first: {})", report.missing_ids.size(),
              report.missing_ids.front().to_string());
  }
  if (report.n_files_indexed > 0) {
    log::info("kept {} reads ({} samples) in {}; {} of {} inputs located through the read-id index "
              "({} holding none of the ids not opened)",
              report.copied.n_reads, report.copied.n_samples, opts.output, report.n_files_indexed,
              files.size(), report.n_files_not_opened);
  } else {
    log::info("kept {} of {} reads ({} samples) in {}", report.copied.n_reads, report.n_reads_seen,
              report.copied.n_samples, opts.output);
  }
  return Status::ok();
}

}  // namespace

void register_filter(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<FilterCliOptions>();
  auto* sub = app.add_subcommand(
      "filter",
      "Write the reads meeting every criterion (AND) to one POD5 file.\n"
      "With --ids, inputs covered by a fresh read-id index (`escpod index`) decode only the\n"
      "rows holding the listed reads, and those holding none are not opened; the reads written\n"
      "are the same (run infos only those of the inputs opened).\n"
      "  escpod filter runs/ --ids wanted.txt -o wanted.pod5\n"
      "  escpod filter reads.pod5 --min-samples 4000 --exclude-end-reason mux_change -o long.pod5\n"
      "  escpod filter runs/ --annotation barcode=BC01 --annotation barcode=BC02 -o bc1_2.pod5\n"
      "--annotation reads each input's .p5s sidecar (escpod demux --annotate, escpod annotate):\n"
      "the same NAME given twice is OR, different NAMEs are AND.");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories")->required();
  sub->add_option("-o,--output", opts->output, "Output POD5 file")->required();
  sub->add_option("-i,--ids", opts->ids,
                  "Read ids to keep, one per line (dashes optional, '#' comments; '-' = stdin)");
  sub->add_option("--min-samples", opts->min_samples, "Keep reads with at least this many samples");
  sub->add_option("--max-samples", opts->max_samples, "Keep reads with at most this many samples");
  sub->add_option("--end-reason", opts->end_reasons, "Keep only these end reasons (comma-separated)")
      ->delimiter(',');
  sub->add_option("--exclude-end-reason", opts->exclude_end_reasons, "Drop these end reasons")
      ->delimiter(',');
  sub->add_option("--annotation", opts->annotations,
                  "Keep reads whose sidecar label NAME is LABEL (NAME=LABEL, repeatable)");
  sub->add_flag("--missing-ok", opts->missing_ok, "Listed ids missing from the inputs are a warning");
  add_skip_bad_flag(sub, opts->skip_bad);
  sub->add_flag("--no-index", opts->no_index, "Scan every input even where a read-id index covers it");
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_filter(*opts, global); });
}

}  // namespace escpod::cli
