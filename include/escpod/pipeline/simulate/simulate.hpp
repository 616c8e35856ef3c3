// `escpod simulate`: a POD5 of simulated direct-RNA reads plus a ground-truth CSV.
//
// Reads are generated in parallel (oneTBB) and written in read order. Read i's randomness comes
// only from (seed, i) (signal::SimRng), so the POD5 signal and the truth CSV are identical for a
// seed whatever the thread count. Both outputs are staged and appear together at the end.
//
// Truth CSV: the header line
//   read_id,barcode,adapter_start,adapter_end,barcode_start,barcode_end,polya_start,polya_end,
//   transcript_start,num_samples,transcript
// then '#' comment lines (parameters; the k-mer model, marked SYNTHETIC when it is one), then one
// row per read in POD5 order. Comments follow the header so that boundary-CSV readers (which
// strip '#' from the first line and skip later '#' lines) read the file as a boundaries CSV.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_writer.hpp"
#include "escpod/signal/simulator.hpp"

namespace escpod::pipeline {

struct Barcode {
  std::string name;
  std::string sequence;  // 5'->3', upper-case ACGT
};

// Barcode reference CSV (docs/formats.md §3.5): a header with `name` and `sequence`
// columns (case-insensitive, any position, other columns ignored), fields split on commas and
// trimmed, blank lines skipped, sequences upper-cased, non-empty and ACGT-only (U is read as T
// here since the barcodes are RNA), names unique, at least one row. Errors name `source` and the
// 1-based line.
Result<std::vector<Barcode>> parse_barcode_csv(std::string_view text, std::string_view source);
// `synthetic:N` (N in [1, 96]): N deterministic 20-nt barcodes bc01..bcNN with pairwise Hamming
// distance >= 8; otherwise a CSV file path.
Result<std::vector<Barcode>> load_barcodes(const std::string& spec);

// `synthetic:K`: signal::KmerTable::synthetic(K). Otherwise an ONT-style level table file,
// plain or gzip (read with zlib): lines `KMER<TAB or spaces>level`; '#' lines, blank lines and a
// first line whose level is not a number (a header) are skipped; extra columns ignored; every
// 4^k k-mer must be present. Errors name the file and line.
Result<signal::KmerTable> load_kmer_table(const std::string& spec);

struct FastaRecord {
  std::string name;
  std::string sequence;  // upper-case; U kept as letters the k-mer lookup reads as T
};
// A FASTA file (plain or gzip). kInvalidArgument when it holds no sequence.
Result<std::vector<FastaRecord>> load_fasta(const std::filesystem::path& path);

struct SimulateOptions {
  uint64_t n_reads = 0;
  uint64_t seed = 1;
  int n_threads = 1;
  std::string kmer_model;                   // path or synthetic:K
  std::string barcodes = "synthetic:4";     // path or synthetic:N
  std::string transcripts;                  // FASTA path; empty: random transcripts
  std::filesystem::path truth_path;         // empty: <output stem>.truth.csv beside the output
  // Random transcripts: lognormal length with this mean (sigma 0.5), clamped to [min, max].
  double transcript_length_mean = 300.0;
  uint32_t transcript_length_min = 20;
  uint32_t transcript_length_max = 20000;
  // Poly(A) tail length: normal(mean, sd) clamped to [min, 500].
  double polya_length_mean = 60.0;
  double polya_length_sd = 20.0;
  uint32_t polya_length_min = 10;
  std::string adapter;                      // empty: signal::default_adapter_sequence()
  uint32_t n_channels = 512;
  signal::SimParams params;
  pod5::WriterOptions writer;
};

struct SimulateStats {
  uint64_t n_reads = 0;
  uint64_t n_samples = 0;
  double seconds = 0.0;
  std::filesystem::path truth_path;
  std::string kmer_label;
  bool kmer_synthetic = false;
};

// Default truth path for an output: OUT.pod5 -> OUT.truth.csv.
std::filesystem::path default_truth_path(const std::filesystem::path& output);

// Writes `output` (POD5) and the truth CSV. kInvalidArgument for n_reads == 0 and bad inputs;
// errors of the loaders and writers as they come, naming the file.
Status simulate(const std::filesystem::path& output, const SimulateOptions& options,
                SimulateStats* stats = nullptr);

}  // namespace escpod::pipeline
