// escpod bam-demux: the signal-level barcode calls onto a BAM's records (dorado's barcode tags and
// read groups), into one tagged BAM and/or one BAM per label.
#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/tables/bam_demux.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct BamDemuxCliOptions {
  std::string bam, output, out_dir, prefix = "barcode", reference, missing_ids, annotation;
  std::vector<std::string> classifications, pod5;
  int64_t memory_mib = 64;
  WriterFlags writer;
};

Result<pipeline::BamCallsSource> calls_source(const BamDemuxCliOptions& o) {
  pipeline::BamCallsSource s;
  if (o.classifications.empty() == o.pod5.empty())
    return Status::usage("bam-demux needs its calls: --classifications CSV... or --pod5 IN... (their .p5s "
                         "sidecars), one of the two");
  if (!o.annotation.empty() && o.pod5.empty())
    return Status::usage("--annotation names the sidecar column of --pod5 inputs; with --classifications the "
                         "label is the table's barcode column");
  for (const auto& c : o.classifications) s.classifications.emplace_back(c);
  if (!o.pod5.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(s.pod5_inputs, pod5::collect_pod5_inputs(o.pod5));
  }
  if (!o.annotation.empty()) s.annotation = o.annotation;
  return s;
}

void log_report(const pipeline::BamDemuxReport& r, const pipeline::BamDemuxOptions& o) {
  log::info("{:<16} {:>10} {:>10}", "label", "records", "reads");
  for (const auto& [label, n] : r.records_per_label) {
    auto it = r.reads_per_label.find(label);
    log::info("{:<16} {:>10} {:>10}", label, n, it == r.reads_per_label.end() ? 0 : it->second);
  }
  log::info("{:<16} {:>10}", "total", r.n_records);
  for (const auto& [reason, n] : r.unclassified_reasons) log::info("unclassified, {}: {} records", reason, n);
  log::info("{} records ({} split reads by their pi parent, {} duplex); {} reads of records have no call{}; "
            "{} calls without a record (of {})",
            r.n_records, r.n_parent_ids, r.n_duplex, r.n_reads_without_call,
            o.missing_ids_output.empty() || r.n_reads_without_call == 0
                ? std::string()
                : " (listed in " + o.missing_ids_output.string() + ")",
            r.n_calls_without_record, r.n_calls);
  for (const auto& p : r.written) log::info("wrote {}", p.string());
  log::info("{:.2f} s", r.seconds);
}

// Flags that only act with -d (--prefix, --memory-mib) are refused without it, not ignored.
Status check_flags(const BamDemuxCliOptions& opts, const CLI::App& sub) {
  if (opts.out_dir.empty()) {
    for (const char* flag : {"--prefix", "--memory-mib"})
      if (sub.count(flag) > 0) return Status::usage(std::string(flag) + " applies to -d DIR (one BAM per label); give -d");
  }
  return Status::ok();
}

Status run_bam_demux(const BamDemuxCliOptions& opts, const CLI::App& sub, const GlobalOptions& global) {
  ESCPOD_RETURN_IF_ERROR(check_flags(opts, sub));
  pipeline::BamDemuxOptions o;
  ESCPOD_ASSIGN_OR_RETURN(o.calls, calls_source(opts));
  o.output = opts.output;
  o.out_dir = opts.out_dir;
  o.prefix = opts.prefix;
  o.reference = opts.reference;
  o.missing_ids_output = opts.missing_ids;
  o.n_threads = resolve_threads(global);
  o.memory_budget = opts.memory_mib << 20;
  o.overwrite = opts.writer.force;
  ESCPOD_ASSIGN_OR_RETURN(o.fsync, parse_fsync_mode(opts.writer.fsync));
  o.command_line = global.command_line;
  o.version = ESCPOD_VERSION;
  pipeline::BamDemuxReport rep;
  ESCPOD_RETURN_IF_ERROR(pipeline::bam_demux(opts.bam, o, &rep));
  log_report(rep, o);
  return Status::ok();
}

}  // namespace

void register_bam_demux(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<BamDemuxCliOptions>();
  auto* sub = app.add_subcommand(
      "bam-demux",
      "Put the signal-level barcode calls onto basecalled records: each record's read is its\n"
      "pi:Z parent (split reads) or its name (a duplex a;b takes its parents' label when they\n"
      "agree); records get BC:Z:<label>, RG:Z:<read group>_<label> with a matching @RG header line\n"
      "(dorado's barcoding conventions), ec:f confidence, eh:Z where the call came from, er:Z why\n"
      "a record is unclassified (docs/formats.md). Every other field is left as it is.\n"
      "  escpod bam-demux -b calls.bam --classifications classifications.csv -o tagged.bam\n"
      "  escpod bam-demux -b calls.bam --classifications shard*.csv -d per_barcode/\n"
      "  escpod bam-demux -b calls.bam --pod5 runs/ -d per_barcode/   (labels from .p5s sidecars)");
  sub->add_option("-b,--bam", opts->bam, "Basecalled reads: BAM, SAM or CRAM (a file: it is read twice)")->required();
  sub->add_option("--classifications", opts->classifications,
                  "Calls CSV(s): escpod's tables (barcode column), escapepod's or WarpDemuX's predictions "
                  "(predicted_barcode); plain or gzip");
  sub->add_option("--pod5", opts->pod5, "POD5 files or folders whose .p5s sidecars hold the labels");
  auto* column = sub->add_option("--label-column", opts->annotation,
                                 "Sidecar label column of --pod5 inputs (default barcode)");
  add_deprecated_alias(sub, "--annotation", column, opts->annotation);  // NAME=LABEL selection in filter
  sub->add_option("-o,--output", opts->output, "Tagged BAM of every record");
  sub->add_option("-d,--output-dir", opts->out_dir, "Folder for one <prefix>_<label>.bam per label");
  sub->add_option("--prefix", opts->prefix, "File name prefix of -d outputs (default barcode)");
  sub->add_option("--reference", opts->reference, "Reference FASTA of a CRAM input");
  sub->add_option("--missing-ids", opts->missing_ids, "Write the read ids of records without a call to this file");
  sub->add_option("--memory-mib", opts->memory_mib,
                  "-d: records waiting for their label's file, all labels together (default 64)")
      ->check(CLI::PositiveNumber);
  add_staging_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, sub, &global] { return run_bam_demux(*opts, *sub, global); });
}

}  // namespace escpod::cli
