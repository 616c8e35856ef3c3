// escpod live replay: barcode decisions on the signal prefix, played from POD5 files as a
// sequencer sends them (escpod/pipeline/demux/live_replay.hpp; docs/live.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "cli/command.hpp"
#include "cli/demux_stages_cmd.hpp"
#include "cli/output.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/demux/live_replay.hpp"

namespace escpod::cli {

namespace {

struct LiveCliOptions {
  std::vector<std::string> inputs;
  std::string model, config, method, cnn_model, live_config;
  std::string dtw_precision = "float32", cnn_precision = "float32";
  pipeline::LiveOptions live;
  uint64_t decide_by = pipeline::LiveOptions::kDefaultDecideBy;
  double chunk_seconds = 0.4;
  uint64_t seed = 0;
  bool info = false;
  CsvOutputFlags out;
  const CLI::App* app = nullptr;
};

Result<pipeline::ModelSpec> live_model_spec(const LiveCliOptions& o) {
  demux::HeadOptions head;
  head.model_file = model_load_options(o.config);
  ESCPOD_ASSIGN_OR_RETURN(head.dtw, parse_dtw_precision(o.dtw_precision));
  head.dtw_precision_given = o.app->count("--dtw-precision") > 0;
  return pipeline::resolve_model_spec(o.model, std::move(head), o.method, o.cnn_model, o.cnn_precision);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

void log_shares(const char* title, const std::map<std::string, pipeline::ReplayShare>& shares) {
  uint64_t reads = 0, samples = 0;
  for (const auto& [label, s] : shares) {
    reads += s.reads;
    samples += s.samples;
  }
  log::info("{}: {} reads", title, reads);
  for (const auto& [label, s] : shares) {
    log::info("  {:<16} {:>8} reads {:>6.1f}%   {:>6.1f}% of samples", label, s.reads,
              reads ? 100.0 * static_cast<double>(s.reads) / static_cast<double>(reads) : 0.0,
              samples ? 100.0 * static_cast<double>(s.samples) / static_cast<double>(samples) : 0.0);
  }
}

// WarpDemuX's default max_signal_after_polya (1,500 samples) was set for RNA002 with 0.1 s chunks;
// live decisions here come one or two chunks past the adapter end, so with it most rejects are
// kept as too late. Say so rather than leave a user wondering why nothing was unblocked.
void warn_if_rejects_came_too_late(const pipeline::ReplayReport& r) {
  uint64_t too_late = 0, unblocked = 0;
  for (const auto& [what, n] : r.actions_by_reason) {
    if (what.find("too_late_to_reject") != std::string::npos) too_late += n;
    if (what.rfind("unblock:", 0) == 0) unblocked += n;
  }
  if (too_late > unblocked) {
    log::warn("{} rejects were kept as too late and {} unblocked: decisions came more than the "
              "config's [balancing] max_signal_after_polya samples past the adapter end; raise it "
              "(docs/live_config.md) or use shorter --chunk-seconds",
              too_late, unblocked);
  }
}

void log_replay_report(const pipeline::ReplayReport& r) {
  std::vector<double> at(r.samples_at_decision.begin(), r.samples_at_decision.end());
  log::info("{} reads: {} decided early, {} at the decisive point or the read's end, {} undecidable", r.n_reads,
            r.n_early, r.n_decisive, r.n_undecidable);
  log::info("live label = whole-read call for {} of {} decided reads ({:.1f}%)", r.n_agree, r.n_decided,
            r.n_decided ? 100.0 * static_cast<double>(r.n_agree) / static_cast<double>(r.n_decided) : 0.0);
  log::info("samples at decision: median {:.0f}, p90 {:.0f}", quantile(at, 0.5), quantile(at, 0.9));
  log::info("time per chunk: p50 {:.3f} ms, p99 {:.3f} ms ({} chunks); state per read <= {} bytes",
            1e3 * quantile(r.feed_seconds, 0.5), 1e3 * quantile(r.feed_seconds, 0.99), r.feed_seconds.size(),
            r.max_state_bytes);
  for (const auto& [what, n] : r.actions_by_reason) log::info("  {:<48} {:>8}", what, n);
  log_shares("sequenced without balancing", r.without_balancing);
  log_shares("sequenced with balancing", r.with_balancing);
  log::info("run time (simulated): {:.1f} s without balancing, {:.1f} s with; pore time saved {:.1f} s",
            r.run_seconds_without, r.run_seconds_with, r.pore_seconds_saved);
  log::info("replayed in {:.2f} s", r.wall_seconds);
  warn_if_rejects_came_too_late(r);
}

// Flags the run would ignore, refused before anything is read.
Status check_live_flags(const LiveCliOptions& o) {
  if (o.method == "llr") ESCPOD_RETURN_IF_ERROR(refuse_given(o.app, {"--cnn-model", "--cnn-precision"}, "--method llr runs no CNN"));
  if (o.live_config.empty() && !o.info) {
    ESCPOD_RETURN_IF_ERROR(refuse_given(o.app, {"--seed"}, "it seeds the policy's channel assignment; give --live-config"));
  }
  return Status::ok();
}

Status run_live_replay_cmd(LiveCliOptions o) {
  ESCPOD_RETURN_IF_ERROR(check_live_flags(o));
  if (o.app->count("--decide-by") > 0) o.live.decide_by = o.decide_by;
  ESCPOD_ASSIGN_OR_RETURN(pipeline::ModelSpec spec, live_model_spec(o));
  if (o.info) {
    ESCPOD_RETURN_IF_ERROR(refuse_given(o.app, {"inputs", "--live-config", "--chunk-seconds", "--seed", "--output",
                                                "--force", "--fsync"},
                                        "--info only describes the classifier"));
    ESCPOD_ASSIGN_OR_RETURN(pipeline::LiveClassifier c, pipeline::LiveClassifier::create(spec, o.live));
    fmt::print("{}", c.describe());
    return Status::ok();
  }
  if (o.inputs.empty()) return Status::usage("live replay needs POD5 inputs");
  if (o.config.empty() && o.live_config.empty()) {
    log::info("no --live-config: every read is accepted (decisions only, no balancing)");
  }
  pipeline::ReplayOptions r;
  r.model = std::move(spec);
  r.live = o.live;
  r.config = o.live_config;
  r.chunk_seconds = o.chunk_seconds;
  r.seed = o.seed;
  std::vector<std::filesystem::path> inputs(o.inputs.begin(), o.inputs.end());
  pipeline::ReplayReport report;
  ESCPOD_RETURN_IF_ERROR(with_csv_output(o.out, [&](std::ostream& csv) {
    return pipeline::run_live_replay(inputs, r, &csv, &report);  // rows written as reads end
  }));
  log_replay_report(report);
  return Status::ok();
}

void add_classifier_flags(CLI::App* sub, LiveCliOptions& o) {
  sub->add_option("-m,--model", o.model, "Demultiplexing model: any model `escpod demux` takes")->required();
  add_model_config_flag(sub, o.config);
  add_method_flag(sub, o.method, "Boundary detector: cnn or llr (default: the model's)");
  sub->add_option("--cnn-model", o.cnn_model, "Boundary CNN (ONNX), if not beside the model");
  add_cnn_precision_flag(sub, o.cnn_precision);
  add_dtw_precision_flag(sub, o.dtw_precision);
  sub->add_option("--min-confidence", o.live.min_confidence,
                  "Confidence (top-1 minus top-2 probability) an early decision needs besides the\n"
                  "model's own threshold; 0 = the model's rule alone")
      ->capture_default_str();
  sub->add_option("--first-attempt", o.live.first_attempt, "Samples a read must have before the first attempt")
      ->capture_default_str();
  sub->add_option("--attempt-every", o.live.attempt_every, "New samples between attempts")->capture_default_str();
  sub->add_option("--decide-by", o.decide_by,
                  "LLR-only detector: samples by which a read is decided (the CNN decides by 13,000)")
      ->capture_default_str();
}

void register_live_replay(CLI::App* live, GlobalOptions& global) {
  auto o = std::make_shared<LiveCliOptions>();
  auto* sub = live->add_subcommand("replay", "Play POD5 reads as a sequencer would and decide each one live");
  sub->footer(
      "Each read is sent on its channel in chunks of --chunk-seconds; the classifier decides from\n"
      "the signal prefix and the policy of --live-config (WarpDemuX's live TOML: balancer types\n"
      "adapter_count, read_count, base_normalization, none, reject_all) unblocks or accepts it.\n"
      "An unblocked read frees its channel after the unblock duration. Writes one CSV row per read\n"
      "(-o, default stdout) and logs agreement with the whole-read call, samples and time to a\n"
      "decision, and the barcode shares with and without balancing.\n"
      "  escpod live replay reads.pod5 --model WDX4_rna004_v1_0.json --live-config live.toml -o live.csv\n"
      "  escpod live replay --model WDX4_rna004_v1_0.json --info");
  sub->add_option("inputs", o->inputs, "POD5 files to replay");
  add_classifier_flags(sub, *o);
  sub->add_option("--live-config", o->live_config, "Balancing policy: WarpDemuX live config (TOML); none: accept all");
  sub->add_option("--chunk-seconds", o->chunk_seconds, "Signal per chunk, seconds")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the policy's channel assignment")->capture_default_str();
  sub->add_flag("--info", o->info, "Describe the classifier (head, detector, attempts) and exit");
  add_csv_output_flags(sub, o->out, "Per-read CSV to write");
  add_verbosity_flags(sub, global);
  o->app = sub;
  set_body(sub, [o] { return run_live_replay_cmd(*o); });
}

// `live run` is the read-until client of MinKNOW's data service. MinKNOW's API is distributed as
// the Python package minknow-api, so the client is Python (escpod.live, on this library's
// classifier and policy through escpod._core): this command hands every argument to it. The
// wheel's `escpod` launcher runs it directly with its own interpreter.
Status exec_python_live_run(const std::vector<std::string>& args) {
  // A missing package is named, not left to Python's "No module named ..." traceback.
  static const char* const kRunClient =
      "import sys\n"
      "try:\n"
      "    from escpod.live.run import main\n"
      "except ImportError as e:\n"
      "    why = ('escpod live run is the Python read-until client escpod.live; this python3 ('\n"
      "           + sys.executable + ') cannot import it: ' + str(e) + '. Install the escpod wheel '\n"
      "           'with its live extra (pip install escpod[live]), or run escpod live run from that '\n"
      "           'environment.')\n"
      "    if '-h' in sys.argv[1:] or '--help' in sys.argv[1:]:\n"
      "        print('Read-until client of MinKNOW: decide and balance barcodes live.\\n' + why)\n"
      "        sys.exit(0)\n"
      "    sys.exit('escpod: ' + why)\n"
      "sys.exit(main(['run'] + sys.argv[1:]))\n";
  std::vector<std::string> argv{"python3", "-c", kRunClient};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  execvp(c_argv[0], c_argv.data());
  return Status::not_found(fmt::format(
      "live run is the Python read-until client (python3 -m escpod.live run, installed with the escpod "
      "wheel and requirements-live.txt): cannot run python3: {}", std::strerror(errno)));
}

void register_live_run(CLI::App* live) {
  auto args = std::make_shared<std::vector<std::string>>();
  auto* sub = live->add_subcommand("run", "Read-until client of MinKNOW: decide and balance live (Python client)");
  sub->prefix_command();  // every argument, --help included, goes to the Python client
  sub->set_help_flag();
  sub->footer("Runs escpod.live's client with python3 (`python3 -m escpod.live run ARGS`; see its --help and\n"
              "docs/live_readuntil.md).");
  set_body(sub, [sub, args] {
    *args = sub->remaining();
    return exec_python_live_run(*args);
  });
}

}  // namespace

void register_live(CLI::App& app, GlobalOptions& global) {
  auto* live = app.add_subcommand("live", "Barcode decisions while reads are sequencing (read-until)");
  live->require_subcommand(1);
  register_live_replay(live, global);
  register_live_run(live);
}

}  // namespace escpod::cli
