// Selecting POD5 reads by their alignments: the read ids of a BAM's records that meet a few
// alignment criteria (mapped, overlapping a region, mapping quality), then the POD5 reads with
// those ids copied into one file by the same streaming engine as `filter` (stored signal copied
// as is). htslib reads the BAM; no htslib type appears here.
//
// Which POD5 read a record stands for: its `pi:Z` tag (parent read id) when present, since a
// split read's own name is a fresh id and its signal is the parent's; else its name. A duplex
// name `a;b` stands for both reads. Names that are not read ids (UUIDs) are an error naming the
// BAM and the record.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/ops/pod5_ops.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline {

// A record is selected when it meets every criterion set (AND); a read is selected when any of
// its records is. No criterion: every record, mapped or not.
struct BamCriteria {
  bool mapped_only = false;  // drop records flagged unmapped (FLAG 0x4)
  // "" = the whole file; else samtools' region syntax: "chr", "chr:beg" (to the contig's end) or
  // "chr:beg-end", 1-based inclusive ("{name}" quotes a contig name holding ':'). Records overlap
  // it as `samtools view BAM REGION` counts overlap (unmapped records placed there included).
  std::string region;
  std::optional<int> min_mapq;  // keep records with MAPQ >= this (0-255), as `samtools view -q`
  bool any() const { return mapped_only || !region.empty() || min_mapq.has_value(); }
};

// What a region query does when the BAM has no index (<bam>.bai, <bam>.csi, <stem>.bai).
enum class BamIndexPolicy {
  kBuildIfMissing,  // write <bam>.bai atomically (staged, renamed into place); if it cannot be
                    // written (read-only folder, unsorted BAM) warn and scan the whole file
  kScanIfMissing,   // never write anything: scan the whole file, checking overlap per record
};

struct BamSelectOptions {
  int n_threads = 1;  // BGZF decompression (and index building) threads
  BamIndexPolicy index = BamIndexPolicy::kBuildIfMissing;
};

struct BamSelection {
  std::vector<pod5::ReadId> read_ids;  // distinct, in the order first selected
  uint64_t n_records = 0;              // records visited (all, or those the index returned)
  uint64_t n_records_selected = 0;
  uint64_t n_parent_ids = 0;           // selected records whose read came from their pi tag
  std::filesystem::path index_built;   // the index this call wrote, empty when none
  bool scanned_without_index = false;  // a region query that scanned the whole file
};

// The reads of `bam` (BAM, SAM or CRAM) whose records meet `criteria`. Errors name the file:
// kNotFound/kIoError it cannot be opened; kCorrupt not an alignment file, a damaged header or
// record; kInvalidArgument a region that does not parse, a contig the header lacks (listing some
// it has), a MAPQ outside 0-255, a name or pi tag that is not a read id; kCancelled on Ctrl-C.
// Thread-safe for distinct outputs (htslib keeps no shared state we change, except its log
// level, which follows escpod's verbosity).
Result<BamSelection> select_bam_reads(const std::filesystem::path& bam, const BamCriteria& criteria,
                                      const BamSelectOptions& options);

struct BamFilterOptions {
  pod5::WriterOptions writer;
  int n_threads = 1;
  BamIndexPolicy index = BamIndexPolicy::kBuildIfMissing;
  // When set, the selected read ids that are in no input are written there, one per line
  // (staged like every output; refused up front when it exists and writer.overwrite is false).
  std::filesystem::path missing_ids_output;
};

struct BamFilterReport {
  BamSelection selection;
  FilterReport filter;  // filter.missing_ids: selected by the BAM, in no POD5 input
};

// select_bam_reads, then the POD5 reads of `inputs` with those ids into `output` (one copy per
// id even when inputs repeat it). BAM errors come before any output is created; reads of the BAM
// missing from the inputs are reported, not an error.
Status bam_filter_files(const std::filesystem::path& bam,
                        const std::vector<std::filesystem::path>& inputs,
                        const std::filesystem::path& output, const BamCriteria& criteria,
                        const BamFilterOptions& options, BamFilterReport* report);

// The version of the htslib loaded, e.g. "1.16" (escpod --version).
const char* htslib_version();

}  // namespace escpod::pipeline
