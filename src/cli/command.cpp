#include "cli/command.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "escpod/core/log.hpp"
#include "escpod/core/text.hpp"

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

bool is_command(const CLI::App& app, std::string_view name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(std::string(name))) return true;
  return false;
}

std::string unknown_command_message(const CLI::App& app, std::string_view name) {
  std::vector<std::string> close, all;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string& n = sub->get_name();
    all.push_back(n);
    if (edit_distance(name, n) <= 2 || (name.size() >= 2 && n.rfind(name, 0) == 0)) close.push_back(n);
  }
  std::string msg = "escpod: '" + std::string(name) + "' is not a command; ";
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  msg += close.empty() ? "the commands are " + join(all) : "did you mean " + join(close) + "?";
  return msg + " (escpod --help)\n";
}

std::vector<std::string> given_options(const CLI::App* app, std::initializer_list<std::string_view> names) {
  std::vector<std::string> given;
  for (std::string_view n : names)
    if (app->count(std::string(n)) > 0) given.emplace_back(n);
  return given;
}

Status refuse_given(const CLI::App* app, std::initializer_list<std::string_view> names, std::string_view why) {
  const std::vector<std::string> given = given_options(app, names);
  if (given.empty()) return Status::ok();
  std::string list;
  for (const auto& g : given) list += (list.empty() ? "" : ", ") + (g == "inputs" ? std::string("the inputs") : g);
  return Status::usage(list + " would be ignored: " + std::string(why));
}

void add_force_flag(CLI::App* sub, bool& force) {
  sub->add_flag("-f,--force", force, "Overwrite existing outputs");
}

void add_fsync_flag(CLI::App* sub, std::string& fsync) {
  sub->add_option("--fsync", fsync, "Sync outputs before renaming them into place: none (default), file, full")
      ->check(CLI::IsMember(kFsyncModes));
}

void add_staging_flags(CLI::App* sub, WriterFlags& flags) {
  add_force_flag(sub, flags.force);
  add_fsync_flag(sub, flags.fsync);
}

void log_deprecated(const std::string& old_name, const std::string& new_name) {
  log::warn("{} is deprecated: use {} (the old spelling goes in the next release)", old_name, new_name);
}

void add_deprecated_flag_alias(CLI::App* sub, const std::string& old_name, CLI::Option* renamed, bool& value) {
  const std::string new_name = renamed->get_name();
  auto* alias = sub->add_flag(old_name, value, "deprecated spelling of " + new_name);
  alias->group("")->excludes(renamed)->each([old_name, new_name](const std::string&) {
    log_deprecated(old_name, new_name);
  });
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
