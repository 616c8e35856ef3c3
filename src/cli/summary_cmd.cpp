// escpod summary: reads, duration, length distribution, channels, end reasons of POD5 files.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/output.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/pod5_summary.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct SummaryCliOptions {
  std::vector<std::string> inputs;
  bool json = false;
  bool skip_bad = false;
  OutputFlags output;
};

std::string human(const pipeline::Pod5Summary& s) {
  std::string out;
  auto line = [&out](std::string_view k, const std::string& v) {
    fmt::format_to(std::back_inserter(out), "{:<20} {}\n", k, v);
  };
  line("files", fmt::format("{}{}", s.n_files, s.skipped.empty() ? "" : fmt::format(" ({} skipped)", s.skipped.size())));
  line("reads", fmt::format("{}", s.n_reads));
  line("samples", fmt::format("{}", s.n_samples));
  line("duration", fmt::format("{:.1f} s ({:.2f} h) of signal", s.duration_s, s.duration_s / 3600));
  line("read length", fmt::format("N50 {}, mean {:.0f}, median {}, range [{}, {}] samples", s.lengths.n50,
                                  s.lengths.mean, s.lengths.median, s.lengths.min, s.lengths.max));
  line("channels", fmt::format("{}", s.n_channels));
  for (const auto& [reason, n] : s.end_reasons) {
    line("end reason", fmt::format("{:<32} {:>10} ({:.1f}%)", reason, n,
                                   s.n_reads ? 100.0 * static_cast<double>(n) / static_cast<double>(s.n_reads) : 0.0));
  }
  for (const auto& [v, n] : s.pod5_versions) line("pod5 version", fmt::format("{} ({} files)", v, n));
  for (const auto& w : s.warnings) line("warning", w);
  for (const auto& [f, why] : s.skipped) line("skipped", fmt::format("{}: {}", f, why));
  return out;
}

Status run_summary(const SummaryCliOptions& opts, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  auto s = pipeline::summarize_pod5(files, resolve_threads(global));
  // --skip-bad means what it means in merge, filter and subset: without it, a bad input fails the
  // command (nothing written); with it, the others are summarised and the skipped listed (exit 3).
  if (!opts.skip_bad && !s.skipped.empty()) {
    for (const auto& [f, why] : s.skipped) log::error("{}", why);
    return Status::corrupt(fmt::format("{} input{} could not be read (--skip-bad summarises the others)",
                                       s.skipped.size(), s.skipped.size() == 1 ? "" : "s"));
  }
  ESCPOD_ASSIGN_OR_RETURN(Output out, open_output(opts.output));
  out.write(opts.json ? pipeline::summary_json(s) : human(s));
  ESCPOD_RETURN_IF_ERROR(out.finish());
  if (s.n_files == 0) return Status::corrupt("no input file could be read");
  if (opts.skip_bad) report_skipped_inputs(s.skipped);
  return Status::ok();
}

}  // namespace

void register_summary(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<SummaryCliOptions>();
  auto* sub = app.add_subcommand(
      "summary",
      "Summarise POD5 files: reads, signal duration, read lengths (N50, mean, median, range),\n"
      "channels, end reasons. An unreadable file fails the command, naming it and why, unless\n"
      "--skip-bad (then the others are summarised, the skipped listed, exit 3).\n"
      "  escpod summary runs/ --json");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories (walked for *.pod5)")->required();
  sub->add_flag("--json", opts->json, "Print JSON instead of text");
  add_skip_bad_flag(sub, opts->skip_bad);
  add_output_flags(sub, opts->output);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_summary(*opts, global); });
}

}  // namespace escpod::cli
