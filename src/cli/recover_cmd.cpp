// escpod recover: salvage the complete reads of damaged or unfinished POD5 files.
#include <filesystem>

#include "cli/command.hpp"
#include "cli/output.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/pipeline/ops/pod5_recover.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct RecoverCliOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  std::vector<std::string> run_info_from;
  WriterFlags writer;
};

Status run_recover(const RecoverCliOptions& opts) {
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::RecoverOptions ro;
  ESCPOD_ASSIGN_OR_RETURN(ro.writer, writer_options(opts.writer));
  for (const auto& p : opts.run_info_from) ro.run_info_from.emplace_back(p);
  if (!opts.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opts.out_dir, ec);
    if (ec) return Status::io_error(opts.out_dir + ": cannot create: " + ec.message());
  }
  ESCPOD_ASSIGN_OR_RETURN(Output out, Output::open("-"));
  size_t n_failed = 0, n_recovered = 0, n_intact = 0;
  uint64_t total_bytes = 0;
  std::vector<uint64_t> sizes;
  for (const auto& f : files) {
    std::error_code ec;
    sizes.push_back(std::filesystem::file_size(f, ec));
    if (ec) sizes.back() = 0;
    total_bytes += sizes.back();
  }
  progress::Task task(files.size(), total_bytes, {.label = "recover", .unit = "files"});
  for (size_t k = 0; k < files.size(); ++k) {
    const auto& f = files[k];
    struct Counted {  // counts the file as done however the iteration ends
      progress::Task& t;
      uint64_t bytes;
      ~Counted() { t.add(1, bytes); }
    } counted{task, sizes[k]};
    const auto dest = pipeline::recovered_path(f, opts.out_dir);
    auto rep = pipeline::recover_file(f, dest, ro);
    if (!rep.is_ok()) {
      if (rep.status().code() == StatusCode::kCancelled) return rep.status();
      log::error("{}", rep.status().message());
      out.write(f.string() + ": recovery failed: " + rep.status().message() + "\n");
      ++n_failed;
      continue;
    }
    out.write(pipeline::format_recover_report(*rep));
    if (rep->intact) {
      ++n_intact;
    } else if (rep->output.empty()) {
      ++n_failed;
    } else {
      ++n_recovered;
    }
  }
  ESCPOD_RETURN_IF_ERROR(out.finish());
  log::info("recover: {} files recovered, {} intact, {} with nothing recovered or failed",
            n_recovered, n_intact, n_failed);
  if (n_failed > 0) {
    return Status::corrupt(std::to_string(n_failed) + " of " + std::to_string(files.size()) +
                           " inputs could not be recovered (see the report above)");
  }
  return Status::ok();
}

}  // namespace

void register_recover(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<RecoverCliOptions>();
  auto* sub = app.add_subcommand(
      "recover",
      "Recover the complete reads of damaged or unfinished POD5 files: files left by a killed\n"
      "writer (signal in the file, reads and run infos in its hidden .<id>.tmp-reads and\n"
      ".<id>.tmp-run-info side files) and finished files cut short or with a damaged footer.\n"
      "Every reads row whose signal rows are all present and decodable is written to\n"
      "<name>_recovered.pod5 beside the input (or in -o DIR); a report per file (stdout) gives\n"
      "the reads recovered, the reads lost and why, and the bytes left unused. Intact inputs\n"
      "are reported and left alone. Exit 0 when every damaged input gave a file, 1 otherwise.\n"
      "  escpod recover run/broken.pod5\n"
      "  escpod recover run/ -o recovered/ --run-info-from run/good.pod5");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories (walked for *.pod5)")->required();
  sub->add_option("-o,--output", opts->out_dir, "Output folder (default: beside each input)");
  sub->add_option("--run-info-from", opts->run_info_from,
                  "POD5 file of the same run to take missing run infos from (by acquisition "
                  "id; an id it lacks is an error); repeatable")
      ->check(CLI::ExistingFile);
  add_writer_flags(sub, opts->writer);
  add_verbosity_flags(sub, global);
  set_body(sub, [opts] { return run_recover(*opts); });
}

}  // namespace escpod::cli
