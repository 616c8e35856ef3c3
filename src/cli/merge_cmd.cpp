// escpod merge: many POD5 files into one.
#include <chrono>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct MergeCliOptions {
  std::vector<std::string> inputs;
  std::string output;
  bool duplicate_ok = false;
  bool skip_bad = false;
  WriterFlags writer;
};

Status run_merge(const MergeCliOptions& opts, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::MergeOptions mo;
  ESCPOD_ASSIGN_OR_RETURN(mo.writer, writer_options(opts.writer));
  mo.duplicate_ok = opts.duplicate_ok;
  mo.skip_bad = opts.skip_bad;
  mo.n_threads = resolve_threads(global);
  const auto t0 = std::chrono::steady_clock::now();
  pipeline::CopyStats stats;
  uint64_t n_dup = 0;
  pipeline::SkippedInputs skipped;
  Status status = pipeline::merge_files(files, opts.output, mo, &stats, &n_dup, &skipped);
  report_skipped_inputs(skipped);
  ESCPOD_RETURN_IF_ERROR(status);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("merged {} files into {}: {} reads, {} samples in {:.2f} s{}", files.size() - skipped.size(), opts.output,
            stats.n_reads, stats.n_samples, secs,
            n_dup ? " (" + std::to_string(n_dup) + " duplicate reads skipped)" : "");
  return Status::ok();
}

}  // namespace

void register_merge(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<MergeCliOptions>();
  auto* sub = app.add_subcommand(
      "merge",
      "Merge POD5 files into one. Run infos are deduplicated by acquisition id; stored signal is\n"
      "copied without re-encoding. A read id found twice is an error naming both files.\n"
      "  escpod merge run1/ run2/ -o all.pod5");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories")->required();
  sub->add_option("-o,--output", opts->output, "Output POD5 file")->required();
  sub->add_flag("--duplicate-ok", opts->duplicate_ok, "Keep the first of reads sharing an id");
  add_skip_bad_flag(sub, opts->skip_bad);
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_merge(*opts, global); });
}

}  // namespace escpod::cli
