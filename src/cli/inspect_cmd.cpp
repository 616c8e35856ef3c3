// escpod inspect: what a POD5 file holds (summary), or every field of chosen reads.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/command.hpp"
#include "cli/output.hpp"
#include "escpod/pipeline/ops/read_fields.hpp"
#include "escpod/pipeline/ops/read_lookup.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/inputs.hpp"
#include "escpod/pod5/sidecar.hpp"

namespace escpod::cli {
using pipeline::all_read_fields;
using pipeline::default_view_fields;
using pipeline::find_read_field;
using pipeline::ReadField;

namespace {

struct InspectOptions {
  std::vector<std::string> args;
  OutputFlags output;
  bool no_index = false;
};

std::string format_time_ms(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm_utc;
  gmtime_r(&secs, &tm_utc);
  char buf[64];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm_utc);
  return fmt::format("{}.{:03}Z", buf, ((ms % 1000) + 1000) % 1000);
}

// The sidecar section: what reads.pod5.p5s holds, or why it cannot be used.
void append_sidecar_summary(const pod5::FileReader& file, std::string& out) {
  auto line = [&out](std::string_view key, const auto& value) {
    fmt::format_to(std::back_inserter(out), "  {:<22} {}\n", key, value);
  };
  auto sc = pod5::Sidecar::open(file);
  if (!sc.is_ok()) {
    line("sidecar", sc.status().code() == StatusCode::kNotFound ? std::string("none")
                                                                 : "UNUSABLE: " + sc.status().message());
    return;
  }
  line("sidecar", fmt::format("{} (p5s version {}; {} reads indexed; {})", sc->path().filename().string(),
                              sc->version(), sc->n_reads(), sc->provenance()));
  for (const auto& c : sc->columns()) {
    size_t n = 0;
    for (size_t r = 0; r < sc->n_reads(); ++r) n += c.has_value(r) ? 1 : 0;
    std::string detail = fmt::format("{} ({}{}): {} reads", c.name, pod5::annotation_kind_name(c.kind),
                                     c.derived ? ", from the design" : "", n);
    if (c.kind == pod5::AnnotationKind::kLabel) {
      std::vector<size_t> count(c.labels.size(), 0);
      for (int32_t k : c.label_idx)
        if (k >= 0) ++count[static_cast<size_t>(k)];
      detail += ",";
      for (size_t k = 0; k < c.labels.size() && k < 24; ++k) detail += fmt::format(" {}={}", c.labels[k], count[k]);
      if (c.labels.size() > 24) detail += fmt::format(" (+{} more labels)", c.labels.size() - 24);
    }
    line("sidecar column", detail);
  }
  if (const auto& d = sc->design()) {
    line("sidecar design", fmt::format("keys {} -> values {} ({} rows)", fmt::join(d->key_columns, ","),
                                       fmt::join(d->value_columns, ","), d->rows.size()));
  }
}

void append_summary(const pod5::FileReader& file, std::string& out) {
  const auto& info = file.info();
  auto line = [&out](std::string_view key, const auto& value) {
    fmt::format_to(std::back_inserter(out), "  {:<22} {}\n", key, value);
  };
  fmt::format_to(std::back_inserter(out), "{}\n", info.path.string());
  line("file size", fmt::format("{} bytes", info.file_size));
  line("pod5 version", info.pod5_version);
  line("reads table version", fmt::format("V{}", static_cast<int>(info.read_table_version)));
  line("writing software", info.software);
  line("file identifier", info.file_identifier);
  line("signal compression", info.is_vbz ? "vbz" : "none");
  line("reads", info.n_reads);
  line("read batches", info.n_read_batches);
  auto signal = file.signal_table_info();
  if (signal.is_ok()) {
    line("samples", signal->n_samples);
    line("signal rows", signal->n_rows);
    line("signal batches", fmt::format("{}{}", signal->n_batches,
                                       signal->uniform ? "" : " (NOT uniform: official tools misread this file; run `escpod repack`)"));
  } else {
    line("signal table", "DAMAGED: " + signal.status().message());
  }
  line("run infos", file.run_infos().size());
  for (const auto& ri : file.run_infos()) {
    fmt::format_to(std::back_inserter(out), "  run info {}\n", ri.acquisition_id);
    line("  acquisition start", format_time_ms(ri.acquisition_start_time_ms));
    line("  sample rate", ri.sample_rate);
    line("  adc range", fmt::format("[{}, {}]", ri.adc_min, ri.adc_max));
    line("  flow cell", fmt::format("{} ({})", ri.flow_cell_id, ri.flow_cell_product_code));
    line("  sequencing kit", ri.sequencing_kit);
    line("  experiment", ri.experiment_name);
    line("  sample id", ri.sample_id);
    line("  protocol", ri.protocol_name);
    line("  software", ri.software);
    line("  system", fmt::format("{} ({})", ri.system_name, ri.system_type));
    line("  position", fmt::format("{} ({})", ri.sequencer_position, ri.sequencer_position_type));
  }
  for (const auto& w : info.warnings) line("warning", w);
  append_sidecar_summary(file, out);
}

Status inspect_read(const InspectOptions& opts, Output& out) {
  if (opts.args.size() < 3) {
    return Status::usage("usage: escpod inspect read FILE|DIR READ_ID...");
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs({opts.args[1]}));
  std::vector<pod5::ReadId> ids;
  for (size_t a = 2; a < opts.args.size(); ++a) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadId id, pod5::ReadId::parse(opts.args[a]));
    ids.push_back(id);
  }
  // Through the read-id index when one covers the files: only the rows asked for are decoded.
  std::vector<pod5::ReadId> missing;
  ESCPOD_ASSIGN_OR_RETURN(auto found, pipeline::find_reads(files, ids, !opts.no_index, &missing));
  if (!missing.empty()) {
    return Status::not_found(opts.args[1] + ": no read " + missing.front().to_string() +
                             (missing.size() > 1 ? fmt::format(" (and {} more)", missing.size() - 1) : ""));
  }
  for (const auto& f : found) {
    const pod5::FileReader& file = *f.file;
    std::string& s = out.buffer();
    for (const auto& field : all_read_fields()) {
      fmt::format_to(std::back_inserter(s), "{:<28} ", field.name);
      ESCPOD_RETURN_IF_ERROR(field.append(file, f.batch, 0, s));
      s += '\n';
    }
    // Annotations come along when the file has a usable sidecar (a damaged one is named).
    auto sidecar = pod5::Sidecar::open(file);
    if (sidecar.is_ok()) {
      // The sidecar's locator for this read must hold it (bounds- and id-checked): a damaged
      // or stale sidecar is an error, never printed beside the wrong read.
      auto loc = sidecar->locate(file, f.batch.read_id[0]);
      if (!loc.is_ok() && loc.status().code() != StatusCode::kNotFound) return loc.status();
      if (auto row = sidecar->row_of(f.batch.read_id[0])) {
        for (const auto& c : sidecar->columns()) {
          fmt::format_to(std::back_inserter(s), "{:<28} {}\n", "p5s." + c.name, c.text(*row));
        }
      }
    } else if (sidecar.status().code() != StatusCode::kNotFound) {
      log::warn("{}", sidecar.status().message());
    }
    const std::string& run_id = file.run_info_ids()[static_cast<size_t>(f.batch.run_info_idx[0])];
    if (const auto* ri = file.find_run_info(run_id)) {
      fmt::format_to(std::back_inserter(s), "{:<28} {} Hz, adc [{}, {}], flow cell {}\n",
                     "run_info.summary", ri->sample_rate, ri->adc_min, ri->adc_max, ri->flow_cell_id);
    }
    s += '\n';
  }
  return out.finish();
}

Status run_inspect(const InspectOptions& opts) {
  ESCPOD_ASSIGN_OR_RETURN(Output out, open_output(opts.output));
  if (!opts.args.empty() && opts.args[0] == "read") return inspect_read(opts, out);
  std::vector<std::string> inputs = opts.args;
  if (!inputs.empty() && inputs[0] == "summary") inputs.erase(inputs.begin());
  if (inputs.empty()) return Status::usage("inspect needs at least one FILE or DIR");
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(inputs));
  size_t n_failed = 0;
  Status first_error;
  for (const auto& path : files) {
    auto file = pod5::FileReader::open(path);
    if (!file.is_ok()) {
      log::error("{}", file.status().message());
      if (first_error.is_ok()) first_error = file.status();
      ++n_failed;
      continue;
    }
    append_summary(**file, out.buffer());
    out.flush();
    if (out.closed()) break;
  }
  ESCPOD_RETURN_IF_ERROR(out.finish());
  if (n_failed > 0) {
    return Status(first_error.code(), fmt::format("{} of {} files could not be read", n_failed, files.size()));
  }
  return Status::ok();
}

}  // namespace

void register_inspect(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<InspectOptions>();
  auto* sub = app.add_subcommand(
      "inspect",
      "Describe POD5 files: versions, writing software, reads, samples, batches, run infos.\n"
      "  escpod inspect FILE|DIR...            summary of each file (DIRs walked for *.pod5)\n"
      "  escpod inspect read FILE|DIR READ_ID...  every field of the given reads (ids with or\n"
      "                                        without dashes; a DIR's read-id index is used)");
  sub->add_option("args", opts->args, "[summary|read] FILE|DIR... [READ_ID...]")->required();
  add_output_flags(sub, opts->output);
  sub->add_flag("--no-index", opts->no_index, "inspect read: scan the files even where a read-id index covers them");
  add_verbosity_flags(sub, global);
  set_body(sub, [opts] { return run_inspect(*opts); });
}

}  // namespace escpod::cli
