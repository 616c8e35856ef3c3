// escpod bam-filter: the POD5 reads whose alignments in a BAM meet the criteria, into one file.
#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/ops/bam_filter.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
namespace {

struct BamFilterCliOptions {
  std::string bam, output, region, missing_ids;
  std::vector<std::string> inputs;
  bool mapped = false;
  bool no_index_build = false;
  std::optional<int> quality;
  WriterFlags writer;
};

std::string first_ids(const std::vector<pod5::ReadId>& ids, size_t n) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < n; ++i) {
    if (!s.empty()) s += ", ";
    s += ids[i].to_string();
  }
  if (ids.size() > n) s += ", ...";
  return s;
}

Status run_bam_filter(const BamFilterCliOptions& opts, const GlobalOptions& global) {
  pipeline::BamCriteria c;
  c.mapped_only = opts.mapped;
  c.region = opts.region;
  c.min_mapq = opts.quality;
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  pipeline::BamFilterOptions o;
  ESCPOD_ASSIGN_OR_RETURN(o.writer, writer_options(opts.writer));
  o.n_threads = resolve_threads(global);
  o.index = opts.no_index_build ? pipeline::BamIndexPolicy::kScanIfMissing
                                : pipeline::BamIndexPolicy::kBuildIfMissing;
  o.missing_ids_output = opts.missing_ids;
  pipeline::BamFilterReport rep;
  ESCPOD_RETURN_IF_ERROR(pipeline::bam_filter_files(opts.bam, files, opts.output, c, o, &rep));
  const auto& sel = rep.selection;
  log::info("{}: {} of {} records selected ({} by their pi parent id): {} reads", opts.bam,
            sel.n_records_selected, sel.n_records, sel.n_parent_ids, sel.read_ids.size());
  const auto& missing = rep.filter.missing_ids;
  if (!missing.empty()) {
    log::warn("{} of {} selected reads are in no POD5 input (first: {}){}", missing.size(),
              sel.read_ids.size(), first_ids(missing, 3),
              opts.missing_ids.empty() ? "; --missing-ids FILE lists them"
                                       : "; listed in " + opts.missing_ids);
  }
  log::info("wrote {} reads ({} samples) of {} seen to {}", rep.filter.copied.n_reads,
            rep.filter.copied.n_samples, rep.filter.n_reads_seen, opts.output);
  return Status::ok();
}

}  // namespace

void register_bam_filter(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<BamFilterCliOptions>();
  auto* sub = app.add_subcommand(
      "bam-filter",
      "Write the POD5 reads whose BAM records meet every criterion (AND) to one POD5 file.\n"
      "A record stands for its pi:Z parent read id when it has one (split reads), else its name.\n"
      "No criterion: every read the BAM names. Stored signal is copied as is.\n"
      "  escpod bam-filter -b calls.bam --mapped -o mapped.pod5 runs/\n"
      "  escpod bam-filter -b calls.bam --region chrX:10000-20000 --quality 20 -o roi.pod5 runs/\n"
      "  escpod bam-filter -b calls.bam --region tRNA-Ala --missing-ids absent.txt -o ala.pod5 a.pod5");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories")->required();
  sub->add_option("-b,--bam", opts->bam, "Aligned reads (BAM; SAM and CRAM also read)")->required();
  sub->add_option("-o,--output", opts->output, "Output POD5 file")->required();
  sub->add_flag("--mapped", opts->mapped, "Only mapped records (FLAG 0x4 unset)");
  sub->add_option("--region", opts->region,
                  "Records overlapping chr or chr:start-end (1-based inclusive, as samtools); "
                  "writes <bam>.bai first when the BAM has no index");
  sub->add_option("--quality", opts->quality, "Only records with MAPQ >= this (0-255)")
      ->check(CLI::Range(0, 255));
  sub->add_option("--missing-ids", opts->missing_ids,
                  "Write the selected read ids that are in no POD5 input to this file");
  sub->add_flag("--no-index-build", opts->no_index_build,
                "Never write a BAM index: --region scans the whole BAM when it has none");
  add_writer_flags(sub, opts->writer);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_bam_filter(*opts, global); });
}

}  // namespace escpod::cli
