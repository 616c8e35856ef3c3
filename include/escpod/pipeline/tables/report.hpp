// A run report from demultiplexing outputs: one self-contained HTML page (inline SVG plots, no
// scripts, nothing fetched), a JSON file with the same numbers, and MultiQC custom-content files.
//
// Inputs: classifications CSVs as `escpod demux --classifications` writes them (read_id, barcode,
// confidence, adapter_start, adapter_end, detector, reason, ...; `demux classify`'s
// predicted_barcode is accepted for barcode) and, optionally, the POD5 inputs, for signal
// lengths, durations and the run's throughput.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/staged_file.hpp"  // FsyncMode
#include "escpod/core/status.hpp"

namespace escpod::pipeline {

// Counts in `counts.size()` equal bins over [lo, hi); with `log10`, the edges are powers of ten
// (lo and hi are exponents). Values below lo go to the first bin, values at or above hi to the
// last, so the counts always add up to the values seen.
struct Histogram {
  double lo = 0;
  double hi = 1;
  bool log10 = false;
  std::vector<uint64_t> counts;

  void add(double value);
  double bin_lo(size_t i) const;  // in value units (10^edge when log10)
  double bin_hi(size_t i) const;
  uint64_t total() const;
};

// The group an unclassified reason is counted under: detection and fingerprint failures as they
// are, other reasons by their head before ": " (a decode error's detail is dropped). The fused
// demultiplexer's counts and the report's use this one function.
std::string unclassified_reason_group(std::string_view reason);

struct BarcodeReport {
  uint64_t n_reads = 0;
  double sum_confidence = 0;    // over the barcode's reads (unclassified: their best score)
  Histogram confidence;         // 20 bins over [0, 1]
  uint64_t n_with_signal = 0;   // reads found in the POD5 inputs
  uint64_t n_samples = 0;       // their signal samples
  double sum_duration_s = 0;    // their signal duration
  Histogram signal_samples;     // log10 bins, samples
};

struct ReportData {
  // From the classifications.
  uint64_t n_reads = 0;
  std::map<std::string, BarcodeReport> barcodes;            // "unclassified" included
  std::map<std::string, uint64_t> unclassified_reasons;     // grouped as demux groups them
  std::map<std::string, uint64_t> detectors;                // "cnn", "llr_short", "llr", "none"
  std::map<std::string, std::map<std::string, uint64_t>> detectors_per_barcode;
  // From the POD5 inputs (all zero / empty without them).
  uint64_t n_pod5_reads = 0;
  uint64_t n_pod5_reads_unclassified_in_csv = 0;  // POD5 reads absent from the classifications
  uint64_t n_csv_reads_without_signal = 0;        // classified reads absent from the POD5 inputs
  uint64_t n_samples = 0;
  double sum_duration_s = 0;
  Histogram signal_samples;       // log10 bins over 10^2..10^7 samples
  Histogram duration_s;           // linear bins, seconds
  Histogram reads_over_time;      // read starts over run time, hours
  double run_hours = 0;           // the last read's end
  // How it was made.
  std::string version;            // escpod's
  std::string command_line;
  std::string created_utc;        // ISO 8601
  std::vector<std::string> classifications;  // CSV paths
  std::vector<std::string> pod5_inputs;
  std::vector<std::string> writers;          // POD5 writing software and format versions
  double demux_seconds = 0;       // wall time of the demux that made the CSV (0: unknown)
  int demux_threads = 0;
  std::string model;              // the demux model, when known
  // The basecalled BAM the run tagged (demux --bam), and its records per label (bam-demux).
  std::string bam;
  std::map<std::string, uint64_t> bam_records_per_label;
};

struct ReportOptions {
  std::vector<std::filesystem::path> classifications;  // one or more CSVs (shards)
  std::vector<std::filesystem::path> pod5_inputs;      // may be empty
  int n_threads = 1;
  std::string version;
  std::string command_line;
  double demux_seconds = 0;
  int demux_threads = 0;
  std::string model;  // the demux model path (demux --report), shown as given
  std::string bam;    // the basecalled BAM demux --bam tagged, shown as given (empty: none)
  std::map<std::string, uint64_t> bam_records_per_label;  // its records per label
};

// Reads the CSVs and (if any) the POD5 inputs. Errors name the file and line: a missing column,
// a read id listed twice, an unparsable confidence.
Result<ReportData> collect_report(const ReportOptions& options);

// The page, the JSON document and one MultiQC custom-content section (a `_mqc.json` document),
// as text. Every number in the page is in the JSON. `mqc_section` is one of
// mqc_section_names().
std::string report_html(const ReportData& data);
std::string report_json(const ReportData& data);
const std::vector<std::string>& mqc_section_names();
std::string report_mqc_json(const ReportData& data, const std::string& section);

struct ReportOutputs {
  std::filesystem::path html;       // empty: not written
  std::filesystem::path json;       // empty: not written
  std::filesystem::path mqc_prefix; // PREFIX: writes PREFIX_<section>_mqc.json; empty: none
  bool overwrite = false;
  FsyncMode fsync = FsyncMode::kNone;  // each output synced before its rename (--fsync)
};
// Writes the requested outputs, each staged and renamed into place.
Status write_report(const ReportData& data, const ReportOutputs& outputs);

}  // namespace escpod::pipeline
