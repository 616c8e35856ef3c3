// How subcommands plug into `escpod`: each cli/<name>_cmd.cpp defines one register function that
// adds its CLI11 subcommand, parses flags into an options struct and sets a callback returning a
// Status. main() maps that Status to an exit code. cli/ holds no algorithms.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_writer.hpp"

namespace escpod::cli {

// Settings shared by every command, filled from the global flags before a command runs.
struct GlobalOptions {
  int verbosity = 0;      // -q: -1, default 0, -v: 1
  int n_threads = 0;      // --threads; 0 = default (min(16, CPUs available))
  std::string command_line;  // argv joined (reports record it)
};

// A command's body: runs after parsing; its Status becomes the exit code (0 ok, 2 for
// Status::usage, 1 for any other failure). Argument checks a body makes return Status::usage.
using CommandBody = std::function<Status()>;

// Each subcommand registers itself with this: `set_body(sub, [opts]{ return run(*opts); })`.
void set_body(CLI::App* sub, CommandBody body);

// Adds the shared -t/--threads, -q, -v flags to a subcommand.
void add_common_flags(CLI::App* sub, GlobalOptions& global);
// Adds -q, -v only: for commands with no parallel work (no -t that would be ignored).
void add_verbosity_flags(CLI::App* sub, GlobalOptions& global);

// Flags of every command that writes POD5 files: -f/--force, --fsync, --compression.
struct WriterFlags {
  bool force = false;
  std::string fsync = "none";
  std::string compression = "vbz";
};
void add_writer_flags(CLI::App* sub, WriterFlags& flags);
// -f/--force and --fsync only, for commands that write text or JSON (compression stays "vbz").
void add_staging_flags(CLI::App* sub, WriterFlags& flags);
// The options among `names` ("--prefix", or a positional's name) that the user gave to `app`.
std::vector<std::string> given_options(const CLI::App* app, std::initializer_list<std::string_view> names);
// A usage error when any of `names` was given: "--prefix, --memory-mib would be ignored: WHY".
// A command refuses what it would ignore rather than dropping it silently.
Status refuse_given(const CLI::App* app, std::initializer_list<std::string_view> names, std::string_view why);

// The one definition of each shared flag (one meaning, one help text, in every command).
void add_force_flag(CLI::App* sub, bool& force);
void add_fsync_flag(CLI::App* sub, std::string& fsync);

// "escpod: warning: --memory is deprecated: use --memory-mib (the old spelling goes in the next release)".
void log_deprecated(const std::string& old_name, const std::string& new_name);
// A renamed option's old spelling, kept for one release: the same value, hidden from --help, a
// warning naming the new spelling when used, and never together with it.
template <typename T>
void add_deprecated_alias(CLI::App* sub, const std::string& old_name, CLI::Option* renamed, T& value) {
  const std::string new_name = renamed->get_name();
  auto* alias = sub->add_option(old_name, value, "deprecated spelling of " + new_name);
  alias->group("")->excludes(renamed)->each([old_name, new_name](const std::string&) {
    log_deprecated(old_name, new_name);
  });
}
void add_deprecated_flag_alias(CLI::App* sub, const std::string& old_name, CLI::Option* renamed, bool& value);
// Validated writer options from the flags (kInvalidArgument for bad values).
Result<pod5::WriterOptions> writer_options(const WriterFlags& flags);

// `--fsync` values (CLI11 check: anything else is a usage error).
inline const std::vector<std::string> kFsyncModes = {"none", "file", "full"};

// "escpod: 'inspectt' is not a command; did you mean inspect?" (commands within two edits, or
// starting with it), else the list of commands; newline-terminated.
std::string unknown_command_message(const CLI::App& app, std::string_view name);
bool is_command(const CLI::App& app, std::string_view name);

// Worker threads to use: explicit --threads, else ESCPOD_THREADS, else min(16, CPUs usable by
// this process per its affinity mask).
int resolve_threads(const GlobalOptions& global);

// Register functions, one per command file.
void register_inspect(CLI::App& app, GlobalOptions& global);
void register_view(CLI::App& app, GlobalOptions& global);
void register_repack(CLI::App& app, GlobalOptions& global);
void register_merge(CLI::App& app, GlobalOptions& global);
void register_filter(CLI::App& app, GlobalOptions& global);
void register_bam_filter(CLI::App& app, GlobalOptions& global);
void register_bam_demux(CLI::App& app, GlobalOptions& global);
void register_subset(CLI::App& app, GlobalOptions& global);
void register_summary(CLI::App& app, GlobalOptions& global);
void register_annotate(CLI::App& app, GlobalOptions& global);
void register_index(CLI::App& app, GlobalOptions& global);
void register_simulate(CLI::App& app, GlobalOptions& global);
void register_demux(CLI::App& app, GlobalOptions& global);
void register_live(CLI::App& app, GlobalOptions& global);  // live replay (demux layer)
void register_model(CLI::App& app, GlobalOptions& global);  // nn engine (weak: optional)
void register_convert(CLI::App& app, GlobalOptions& global);  // FAST5 (fast5 layer: optional)
void register_recover(CLI::App& app, GlobalOptions& global);

// Exit statuses. kExitFailure: data and I/O errors (any Status but kUsage and kCancelled).
// kExitUsage: bad flags or arguments only (CLI11's parse errors and Status::usage).
// kExitSkippedInputs: the command completed but skipped inputs (--skip-bad); its outputs are
// written and valid, without the skipped inputs' reads. kExitInterrupted / kExitTerminated:
// stopped by SIGINT / SIGTERM (128 + the signal number, as a shell reports it).
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSkippedInputs = 3;
inline constexpr int kExitInterrupted = 130;
inline constexpr int kExitTerminated = 143;
// Adds the --skip-bad flag (documented with the exit status) to a subcommand.
void add_skip_bad_flag(CLI::App* sub, bool& skip_bad);
// Logs each skipped input with its reason (after the command's other output) and makes a
// successful run exit kExitSkippedInputs. Nothing happens for an empty list.
void report_skipped_inputs(const std::vector<std::pair<std::string, std::string>>& skipped);
// The exit status of a successful run: 0, or kExitSkippedInputs after report_skipped_inputs.
int success_exit_code();
void register_report(CLI::App& app, GlobalOptions& global);

}  // namespace escpod::cli
