#include "cli/command.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "escpod/core/log.hpp"

namespace escpod::cli {
namespace {
// The body of the subcommand that was selected. CLI11 runs callbacks during parse; we only
// record the body there and run it after parsing succeeded, so usage errors exit 2 cleanly.
CommandBody* g_selected = nullptr;
}  // namespace

void set_body(CLI::App* sub, CommandBody body) {
  auto holder = std::make_shared<CommandBody>(std::move(body));
  sub->callback([holder] { g_selected = holder.get(); });
  // Keep the body alive as long as the app: CLI11 owns the callback, which owns the holder.
}

CommandBody* selected_body() { return g_selected; }

namespace {
bool g_skipped_inputs = false;
}

void add_skip_bad_flag(CLI::App* sub, bool& skip_bad) {
  sub->add_flag("--skip-bad", skip_bad,
                "Skip inputs that cannot be opened or fail validation, list them at the end with "
                "the reason, and exit 3 (outputs written without them) instead of failing");
}

void report_skipped_inputs(const std::vector<std::pair<std::string, std::string>>& skipped) {
  if (skipped.empty()) return;
  g_skipped_inputs = true;
  log::warn("{} input{} skipped (--skip-bad):", skipped.size(), skipped.size() == 1 ? "" : "s");
  for (const auto& [path, reason] : skipped) log::warn("  skipped {}: {}", path, reason);
}

int success_exit_code() { return g_skipped_inputs ? kExitSkippedInputs : 0; }
void select_body(CommandBody* body) { g_selected = body; }

void add_common_flags(CLI::App* sub, GlobalOptions& global) {
  sub->add_option("-t,-j,--threads", global.n_threads,
                  "Worker threads (default: min(16, available CPUs); env ESCPOD_THREADS)")
      ->check(CLI::PositiveNumber);
  add_verbosity_flags(sub, global);
}

void add_verbosity_flags(CLI::App* sub, GlobalOptions& global) {
  sub->add_flag_callback("-q,--quiet", [&global] { global.verbosity = -1; }, "Only print errors");
  sub->add_flag_callback("-v,--verbose", [&global] { global.verbosity = 1; },
                         "Print debugging detail");
}

void add_staging_flags(CLI::App* sub, WriterFlags& flags) {
  sub->add_flag("-f,--force", flags.force, "Overwrite existing outputs");
  sub->add_option("--fsync", flags.fsync,
                  "Sync outputs before renaming them into place: none (default), file, full")
      ->check(CLI::IsMember(kFsyncModes));
}

void add_writer_flags(CLI::App* sub, WriterFlags& flags) {
  add_staging_flags(sub, flags);
  sub->add_option("--compression", flags.compression, "Signal compression: vbz (default) or none")
      ->check(CLI::IsMember({"vbz", "none"}));
}

Result<pod5::WriterOptions> writer_options(const WriterFlags& flags) {
  pod5::WriterOptions o;
  ESCPOD_ASSIGN_OR_RETURN(o.fsync, parse_fsync_mode(flags.fsync));
  if (flags.compression != "vbz" && flags.compression != "none") {
    return Status::usage("--compression must be vbz or none, not '" + flags.compression + "'");
  }
  o.vbz = flags.compression == "vbz";
  o.overwrite = flags.force;
  return o;
}

int resolve_threads(const GlobalOptions& global) {
  if (global.n_threads > 0) return global.n_threads;
  if (const char* env = std::getenv("ESCPOD_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
    log::warn("ignoring ESCPOD_THREADS={} (not a positive integer)", env);
  }
  int available = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) available = CPU_COUNT(&set);
  if (available <= 0) available = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(available, 1, 16);
}

}  // namespace escpod::cli
