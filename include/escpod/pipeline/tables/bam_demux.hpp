// Barcodes onto basecalled records (`escpod bam-demux`, docs/formats.md "Barcodes on basecalled
// records"): the signal-level calls joined to a BAM's records by read (a split read's pi:Z
// parent, both parents of a duplex record), written as dorado's barcode tags and read groups into
// one tagged BAM and/or one BAM per label. htslib reads and writes; no htslib type appears here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"

namespace escpod::pipeline {

// Where the calls come from: classifications/calls CSVs (shards), or the label column of POD5
// inputs' .p5s sidecars.
struct BamCallsSource {
  std::vector<std::filesystem::path> classifications;
  std::vector<std::filesystem::path> pod5_inputs;  // with `annotation`
  std::string annotation = "barcode";
};

struct BamDemuxOptions {
  BamCallsSource calls;
  std::filesystem::path output;   // -o: every record, tagged (empty: none)
  std::filesystem::path out_dir;  // -d: <prefix>_<label>.bam per label (empty: none)
  std::string prefix = "barcode";
  std::filesystem::path reference;           // CRAM input's reference FASTA (empty: htslib's search)
  std::filesystem::path missing_ids_output;  // read ids of records without a call (empty: none)
  int n_threads = 1;                         // BGZF (de)compression and index threads
  int64_t memory_budget = 64ll << 20;        // -d: records waiting in per-label buffers, bytes
  bool overwrite = false;
  FsyncMode fsync = FsyncMode::kNone;
  std::string command_line;                  // recorded in the @PG line
  std::string version;
};

struct BamDemuxReport {
  uint64_t n_records = 0;
  uint64_t n_calls = 0;                             // rows of the calls
  std::map<std::string, uint64_t> records_per_label;  // label -> records ("unclassified" too)
  std::map<std::string, uint64_t> reads_per_label;    // label -> distinct reads with a call
  std::map<std::string, uint64_t> unclassified_reasons;  // "no call", "duplex parents disagree"
  uint64_t n_parent_ids = 0;             // records whose read came from their pi tag
  uint64_t n_duplex = 0;                 // records named a;b
  uint64_t n_reads_without_call = 0;     // distinct reads of records with no call
  uint64_t n_calls_without_record = 0;   // calls whose read no record names
  std::vector<std::filesystem::path> written;  // outputs (and their indexes), in order
  double seconds = 0.0;
};

// Joins the calls to `bam`'s records and writes the outputs. Everything is checked before any
// output appears: the calls (duplicate read id, unknown layout, bad label: kInvalidArgument /
// kCorrupt naming the file and line), the whole BAM (cut short, no end-of-file marker, a name or
// pi tag that is not a read id); outputs are staged and renamed into place only when all are
// complete. Neither output given: kUsage. kCancelled on Ctrl-C.
Status bam_demux(const std::filesystem::path& bam, const BamDemuxOptions& options, BamDemuxReport* report);

// The cheap checks of an alignment file (it opens, is BAM/SAM/CRAM, has its end-of-file marker
// and a readable header), for a run that tags it only after long work (`demux --bam`).
Status check_bam_file(const std::filesystem::path& bam);

}  // namespace escpod::pipeline
