// escpod convert fast5: legacy FAST5 files to POD5.
#include <chrono>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/fast5_convert.hpp"

namespace escpod::cli {
namespace {

struct ConvertFast5CliOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string one_to_one;
  WriterFlags writer;
};

Status run_convert_fast5(const ConvertFast5CliOptions& opts, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(auto files, pipeline::collect_fast5_inputs(opts.inputs));
  pipeline::Fast5ConvertOptions co;
  ESCPOD_ASSIGN_OR_RETURN(co.writer, writer_options(opts.writer));
  co.n_threads = resolve_threads(global);
  if (!opts.one_to_one.empty()) co.one_to_one = opts.one_to_one;
  const auto t0 = std::chrono::steady_clock::now();
  pipeline::Fast5ConvertStats stats;
  ESCPOD_RETURN_IF_ERROR(pipeline::convert_fast5(files, opts.output, co, &stats));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("converted {} FAST5 files: {} reads, {} samples into {} POD5 file{} in {:.2f} s",
            stats.n_files, stats.n_reads, stats.n_samples, stats.outputs.size(),
            stats.outputs.size() == 1 ? "" : "s", secs);
  return Status::ok();
}

}  // namespace

void register_convert(CLI::App& app, GlobalOptions& global) {
  auto* convert = app.add_subcommand("convert", "Convert other formats to POD5");
  convert->require_subcommand(1);
  auto opts = std::make_shared<ConvertFast5CliOptions>();
  auto* sub = convert->add_subcommand(
      "fast5",
      "Convert multi-read and single-read FAST5 files to POD5, with every field and the run\n"
      "information that `pod5 convert fast5` writes (VBZ- or gzip-compressed FAST5 signal).\n"
      "Directories are searched recursively for *.fast5. Nothing is written if any read fails.\n"
      "  escpod convert fast5 run/fast5_pass/ -o run.pod5\n"
      "  escpod convert fast5 run/fast5_pass/ -o pod5/ --one-to-one run/fast5_pass/\n"
      "  escpod convert fast5 a.fast5 b.fast5 -o out/        (writes out/output.pod5)");
  sub->add_option("inputs", opts->inputs, "FAST5 files or directories")->required();
  sub->add_option("-o,--output", opts->output,
                  "Output POD5 file; an existing directory gets output.pod5; with --one-to-one, "
                  "the output directory")
      ->required();
  sub->add_option("-O,--one-to-one", opts->one_to_one,
                  "One POD5 per input, at OUTPUT/<input path relative to this folder>.pod5");
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_convert_fast5(*opts, global); });
}

}  // namespace escpod::cli
