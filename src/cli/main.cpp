// escpod: the command-line entry point. Maps subcommand names to their register functions and
// Status to exit codes: 0 success, 1 runtime failure, 2 usage error, 3 completed with inputs
// skipped (--skip-bad), 128 + signal number when interrupted (130 Ctrl-C, 143 SIGTERM): the
// first signal stops the run cleanly (no output, staging files removed), a second exits at once.
#include <csignal>
#include <cstdio>

#include "cli/command.hpp"
#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"

namespace escpod::cli {
CommandBody* selected_body();
}

int main(int argc, char** argv) {
  using namespace escpod;
  // `escpod view ... | head` must end quietly: writes to a closed pipe fail with EPIPE, which
  // the output code treats as "consumer is done" instead of dying on SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C or a scheduler's SIGTERM stops the run: every staging file removed, exit 128 + the
  // signal number (a second signal exits at once).
  install_interrupt_cleanup();

  CLI::App app{"escpod: fast POD5 tools and signal-level barcode demultiplexing for nanopore "
               "direct-RNA reads"};
  app.set_version_flag("--version", std::string("escpod ") + ESCPOD_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 success; 1 failure (bad data, I/O); 2 usage error; 3 completed with inputs "
      "skipped (--skip-bad); 130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM. The first signal "
      "stops the run cleanly: no output is written and staging files are removed; a second "
      "signal exits at once.");
  cli::GlobalOptions global;
  for (int i = 0; i < argc; ++i) global.command_line += (i ? " " : "") + std::string(argv[i]);

  cli::register_inspect(app, global);
  cli::register_view(app, global);
  cli::register_repack(app, global);
  cli::register_merge(app, global);
  cli::register_filter(app, global);
  cli::register_bam_filter(app, global);
  cli::register_subset(app, global);
  cli::register_summary(app, global);
  cli::register_annotate(app, global);
  cli::register_index(app, global);
  cli::register_report(app, global);
  cli::register_simulate(app, global);
  cli::register_recover(app, global);
#if defined(ESCPOD_HAVE_DEMUX) && defined(ESCPOD_HAVE_NN)
  cli::register_demux(app, global);
#endif
#ifdef ESCPOD_HAVE_NN
  cli::register_model(app, global);
#endif
#ifdef ESCPOD_HAVE_FAST5
  cli::register_convert(app, global);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  log::set_level(global.verbosity < 0   ? log::Level::kError
                 : global.verbosity > 0 ? log::Level::kDebug
                                        : log::Level::kInfo);
  // Progress on stderr for long runs (a bar on a terminal, plain lines otherwise), labelled with
  // the command path ("demux detect"); -q turns it off.
  progress::set_mode(global.verbosity < 0 ? progress::Mode::kOff : progress::Mode::kAuto);
  std::string label;
  for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
    a = a->get_subcommands().front();
    label += (label.empty() ? "" : " ") + a->get_name();
  }
  progress::set_default_label(label);
  cli::CommandBody* body = cli::selected_body();
  if (body == nullptr) return 2;
  // The one pool of the process, -t wide: every layer runs its parallel work in it.
  Executor::install(cli::resolve_threads(global));
  Status status = (*body)();
  if (interrupt_signal() != 0 || status.code() == StatusCode::kCancelled) {
    log::error("{}", status.is_ok() ? std::string("interrupted") : status.message());
    return interrupt_exit_code();
  }
  if (status.is_ok()) return cli::success_exit_code();
  log::error("{}", status.message());
  if (status.code() == StatusCode::kInvalidArgument) return 2;
  return 1;
}
