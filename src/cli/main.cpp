// escpod: the command-line entry point. Maps subcommand names to their register functions and
// Status to exit codes (kExitCodesHelp, printed under `escpod --help`). The first SIGINT/SIGTERM
// stops the run cleanly (no output, staging files removed; 130 / 143), a second exits at once.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "cli/command.hpp"
#include "cli/version_report.hpp"
#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/process_exit.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"

namespace escpod::cli {
CommandBody* selected_body();

namespace {
constexpr const char* kExitCodesHelp =
    "Exit status: 0 success; 1 failure (bad or unreadable input data, I/O errors, a duplicate\n"
    "read id, ...); 2 usage error (bad flags or arguments); 3 completed with inputs skipped\n"
    "(--skip-bad); 130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM. The first signal stops the\n"
    "run cleanly (no output is written, staging files are removed); a second signal exits at once.\n"
    "Data products go to stdout or -o FILE; logs, summaries and progress go to stderr.";

// The exit status of a command body's Status. Only kUsage (bad flags or arguments, detected by
// CLI11 or a command's argument validation) is a usage error; kInvalidArgument is bad data.
int exit_code_of(const Status& status) {
  if (status.is_ok()) return success_exit_code();
  switch (status.code()) {
    case StatusCode::kUsage: return kExitUsage;
    // Stopped by a signal: SIGINT's 130. The interrupt handler exits 128 + the signal itself
    // (143 for SIGTERM) when it stops the process; a Status only carries the SIGINT meaning.
    case StatusCode::kCancelled: return kExitInterrupted;
    default: return kExitFailure;
  }
}

// Every command, in the order `escpod --help` lists them.
void register_commands(CLI::App& app, GlobalOptions& global) {
  for (auto* add : {register_inspect, register_view, register_repack, register_merge, register_filter,
                    register_subset, register_summary, register_annotate, register_index, register_recover,
                    register_bam_filter, register_bam_demux, register_report, register_simulate}) {
    add(app, global);
  }
#if defined(ESCPOD_HAVE_DEMUX) && defined(ESCPOD_HAVE_NN)
  register_demux(app, global);
  register_live(app, global);
#endif
#if defined(ESCPOD_HAVE_NN)
  register_model(app, global);
#endif
#if defined(ESCPOD_HAVE_FAST5)
  register_convert(app, global);
#endif
}

// This process ends when its command returns: what the command is done with is left to the
// kernel (core/process_exit.hpp). Not under AddressSanitizer, whose leak check runs at exit.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kLeaveTeardownToExit = false;
#else
constexpr bool kLeaveTeardownToExit = true;
#endif
}  // namespace
}  // namespace escpod::cli

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
  app.set_version_flag("--version", std::function<std::string()>([] { return cli::version_report(ESCPOD_VERSION); }));
  app.require_subcommand(1);
  app.footer(cli::kExitCodesHelp);
  cli::GlobalOptions global;
  for (int i = 0; i < argc; ++i) global.command_line += (i ? " " : "") + std::string(argv[i]);
  cli::register_commands(app, global);

  // An unknown command is named, with the commands it is close to (CLI11 alone would say "A
  // subcommand is required").
  if (argc > 1 && argv[1][0] != '-' && !cli::is_command(app, argv[1])) {
    std::fprintf(stderr, "%s", cli::unknown_command_message(app, argv[1]).c_str());
    return cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : cli::kExitUsage;
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
  if (body == nullptr) return cli::kExitUsage;
  // The one pool of the process, -t wide: every layer runs its parallel work in it.
  Executor::install(cli::resolve_threads(global));
  set_process_ends_after_command(cli::kLeaveTeardownToExit);
  Status status = (*body)();
  if (interrupt_signal() != 0 && !status.is_ok()) {
    log::error("{}", status.message());
    return interrupt_exit_code();
  }
  if (interrupt_signal() != 0) {
    // The signal came after the command's last output was committed (renamed into place): the
    // run is complete, so it says so. Exiting 130 here would claim "nothing written" over an
    // output that was (seen as a flaky conformance.sidecar: 130 with the new sidecar in place).
    log::warn("interrupt received after the outputs were complete; they are kept");
  }
  if (!status.is_ok()) log::error("{}", status.message());
  const int code = cli::exit_code_of(status);
  if (status.is_ok() && process_ends_after_command()) {
    // Every output is closed: exit without running static destructors or freeing what is left.
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
