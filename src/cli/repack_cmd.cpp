// escpod repack: rewrite POD5 files through our writer (uniform batches, current layout).
#include <chrono>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct RepackCliOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  uint64_t reads_per_file = 0;
  uint64_t max_file_bytes = 0;
  WriterFlags writer;
};

Status run_repack(const RepackCliOptions& opts, const GlobalOptions& global) {
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::RepackOptions ro;
  ESCPOD_ASSIGN_OR_RETURN(ro.writer, writer_options(opts.writer));
  ro.n_threads = resolve_threads(global);
  ro.reads_per_file = opts.reads_per_file;
  ro.max_file_bytes = opts.max_file_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  pipeline::CopyStats stats;
  ESCPOD_RETURN_IF_ERROR(pipeline::repack_files(files, opts.out_dir, ro, &stats));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("repacked {} files: {} reads, {} samples ({} chunks copied as stored, {} reads "
            "re-encoded) in {:.2f} s",
            files.size(), stats.n_reads, stats.n_samples, stats.n_chunks_copied,
            stats.n_reads_reencoded, secs);
  return Status::ok();
}

}  // namespace

void register_repack(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<RepackCliOptions>();
  auto* sub = app.add_subcommand(
      "repack",
      "Rewrite POD5 files through escpod's writer: current layout, uniform batches, real read\n"
      "ids in the signal table. Outputs keep the input file names; DIR may hold the inputs\n"
      "(each file is replaced only once its new version is complete).\n"
      "With --reads-per-file or --max-file-bytes, each input is split into numbered files\n"
      "<stem>_00001.pod5, <stem>_00002.pod5, ... in DIR, reads in input order.\n"
      "  escpod repack old/*.pod5 -o repacked/\n"
      "  escpod repack big.pod5 -o parts/ --reads-per-file 4000   # parts/big_00001.pod5, ...\n"
      "  escpod repack big.pod5 -o parts/ --max-file-bytes 2G");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories")->required();
  sub->add_option("-o,--output", opts->out_dir, "Output folder (created if missing)")->required();
  sub->add_option("--reads-per-file", opts->reads_per_file, "Split: at most N reads per output file")
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-file-bytes", opts->max_file_bytes,
                  "Split: output files of at most B bytes (suffixes K, M, G: powers of 1024)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::PositiveNumber);
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_repack(*opts, global); });
}

}  // namespace escpod::cli
