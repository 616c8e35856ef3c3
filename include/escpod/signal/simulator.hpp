// Direct-RNA read simulation: the signal of one read, as a pure function of its parameters and
// an RNG state (no files, no threads). The run around it (read ids, channels, POD5 and truth CSV
// output, threads) lives in pipeline/simulate.
//
// Molecule and direction. A direct-RNA read is the molecule 5'-transcript-poly(A)-barcode-
// adapter-3' pulled through the pore 3' end first, so the signal shows, in time order:
//   [open pore] [adapter ... barcode] [poly(A)] [transcript, read 3'->5']
// The barcode is the part of the adapter region next to the poly(A): WarpDemuX fingerprints the
// last 25 t-test segments before the adapter end (docs/demux.md §4), which
// is where a barcode has to sit to be seen. In the truth, adapter_end == barcode_end ==
// polya_start and polya_end == transcript_start.
//
// Levels. Each base's level comes from a k-mer table indexed 5'->3' (ONT convention): the level
// of molecule base b is the entry of the k-mer starting at b - centre (clamped to the molecule),
// centre = k / 2. Table levels are in normalised units; each region maps them to picoamps with
// its own affine map (the adapter is not transcript RNA; its stand-in sequence is synthetic).
// The poly(A) is a flat level with a slow wander (homopolymer tails are not what k-mer tables are
// fitted on). Samples: per-base dwell (lognormal), per-read speed, offset, scale and linear
// drift, Gaussian noise, then ADC digitisation with the inverse of calibration.hpp's formula.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/signal/calibration.hpp"

namespace escpod::signal {

// splitmix64 step: advances `state` and returns the next output. Used to derive seeds.
uint64_t splitmix64(uint64_t& state);

// xoshiro256** seeded from (seed, stream) through splitmix64: one independent stream per read
// index, so a read's randomness never depends on which thread generated it or when. All
// distributions are implemented here (not <random>'s, whose algorithms differ between standard
// libraries), so a seed gives the same reads on every platform with IEEE doubles and the same libm.
class SimRng {
 public:
  SimRng(uint64_t seed, uint64_t stream);
  uint64_t next();
  double uniform();                 // [0, 1), 53 bits
  uint64_t below(uint64_t n);       // uniform in [0, n), n > 0 (rejection, unbiased)
  double normal();                  // standard normal, Box-Muller (exact)
  // Standard-normal-like noise, fast: Irwin-Hall sum of four 16-bit uniforms rescaled to unit
  // variance (bounded at +-3.46; kurtosis 2.7 instead of 3). For per-sample noise only.
  float fast_normal();

 private:
  uint64_t m_s[4];
  bool m_has_spare = false;
  double m_spare = 0.0;
};

// A complete k-mer level table: 4^k levels indexed by the k-mer's base-4 code (A=0 C=1 G=2 T/U=3,
// first base most significant).
class KmerTable {
 public:
  // A table with every level unset (NaN). k in [1, 12].
  static Result<KmerTable> create(int k, std::string label, bool synthetic);
  // A deterministic synthetic table (no pore model behind it): each base contributes by position
  // with weights peaking at the centre, plus a hashed per-k-mer term, then the levels are
  // standardised like the real ONT tables (median 0, MAD 0.6745). Always label it synthetic.
  static Result<KmerTable> synthetic(int k);

  // Sets the level of `kmer` (k letters ACGTU, any case). kInvalidArgument otherwise.
  Status set(std::string_view kmer, float level);
  // kInvalidArgument naming the number of missing k-mers and one of them, if any is unset.
  Status check_complete() const;

  int k() const { return m_k; }
  int centre() const { return m_k / 2; }
  const std::string& label() const { return m_label; }
  bool is_synthetic() const { return m_synthetic; }
  size_t size() const { return m_levels.size(); }
  float level_of_code(uint64_t code) const { return m_levels[code]; }
  // Level of a k-mer text (k letters); NaN for a bad letter.
  float level(std::string_view kmer) const;

  // out[b] = level of molecule base b (see the file comment); out.size() == molecule.size().
  // Letters other than ACGTU count as A.
  void molecule_levels(std::string_view molecule, std::span<float> out) const;

 private:
  int m_k = 0;
  std::string m_label;
  bool m_synthetic = false;
  std::vector<float> m_levels;
};

// Base code 0..3 of a letter (ACGT, U as T, any case), -1 otherwise.
int base_code(char c);

// Simulation parameters. Defaults are RNA004 (SQK-RNA004, FLO-PRO004RA, 4 kHz, 130 b/s), measured
// on the real reads in ../shared/data/escapepod/drna/yeast_trna_reads.pod5 and their Dorado BAM
// (see bench/results/simulate.md for the measurements) unless stated otherwise.
struct SimParams {
  double sample_rate_hz = 4000.0;     // run info sample_rate of the real RNA004 file
  double bases_per_second = 130.0;    // run info selected_speed_bases_per_second
  // Per-base dwell: lognormal, mean sample_rate/bases_per_second. Sigma fitted on the real move
  // tables (median 36, p95 120 samples/base there: sigma = ln(120/36)/1.645 = 0.73).
  double dwell_log_sigma = 0.73;
  double read_speed_log_sigma = 0.25;  // per-read speed factor (lognormal); real adapter lengths
                                       // spread 1,350-3,200 samples (10-90%)
  uint32_t min_dwell = 1;

  // Open pore before the read: level = median_before of the real reads (median 194.3 pA, 5-95%
  // 185-205); length uniform in [0, 2 * mean] samples (the real reads start on the adapter, so
  // this is kept short).
  double open_pore_pa = 194.3;
  double open_pore_sd_pa = 5.0;
  double open_pore_mean_samples = 40.0;

  // Adapter (and barcode) region: pA = adapter_shift + adapter_scale * level. Real RNA004
  // adapter [0, ts): median 73.6 pA, MAD 9.9 pA (per-read medians over 180 reads).
  double adapter_shift_pa = 73.6;
  double adapter_scale_pa = 15.2;
  // Transcript: pA = shift + scale * level; Dorado's RNA004 standardisation read back from the
  // BAM's sm/sd tags converted to pA: 80.04 and 16.97 for every read.
  double transcript_shift_pa = 80.04;
  double transcript_scale_pa = 16.97;
  // Poly(A): flat level with a slow random-walk wander. No real RNA004 poly(A) is available
  // here (the RNA004 reads are tRNA); the level is the RNA002 poly(A)/adapter ratio measured on
  // the WarpDemuX sample reads (1.42) times the RNA004 adapter median (73.6): 104.5 pA, above
  // ADAPTed's 1.3 x adapter plausibility bound. (The 9-mer table's AAAAAAAAA would give 96.3.)
  double polya_pa = 104.5;
  double polya_wander_pa = 0.05;      // random-walk step sd per base

  // Noise: white Gaussian, sd per read ~ N(noise_pa, noise_read_sd_pa). Real: difference-based
  // noise estimate 2.3 pA (adapter), 2.6 pA (transcript).
  double noise_pa = 2.4;
  double noise_read_sd_pa = 0.25;
  // Per-read drift: pA' = read_offset + read_scale * pA + slope * t. Real per-read adapter
  // medians spread 67.5-78.8 pA (10-90%) with a shared adapter sequence.
  double read_offset_sd_pa = 4.0;
  double read_scale_log_sigma = 0.04;
  double drift_sd_pa_per_10k = 1.0;   // sd of the linear drift over 10,000 samples

  // ADC: 11-bit digitiser as in the real file (adc 0..2047, scale 0.1462070643901825 pA/ADC).
  int16_t adc_min = 0;
  int16_t adc_max = 2047;
};

// Where each region of a simulated read lies, in samples.
struct ReadLayout {
  uint64_t adapter_start = 0;
  uint64_t adapter_end = 0;
  uint64_t barcode_start = 0;
  uint64_t barcode_end = 0;
  uint64_t polya_start = 0;
  uint64_t polya_end = 0;
  uint64_t transcript_start = 0;
  uint64_t num_samples = 0;
};

// What one read is made of. Sequences 5'->3'.
struct ReadSpec {
  std::string_view adapter;     // adapter part 3' of the barcode
  std::string_view barcode;
  uint32_t polya_length = 0;    // bases
  std::string_view transcript;
  Calibration calibration;      // the read's ADC calibration (offset in ADC units, scale pA/ADC)
};

// Output of simulate_read; reuse one per worker (vectors keep their capacity).
struct SimulatedRead {
  std::vector<int16_t> adc;
  ReadLayout layout;
  float open_pore_pa = 0.0f;    // the read's open-pore level (median_before)
  // scratch
  std::string molecule;
  std::vector<float> levels;
  std::vector<uint32_t> dwell;
};

// Simulates one read into `out`. kInvalidArgument for an empty adapter or transcript, a
// calibration with a non-positive scale, or parameters out of range.
Status simulate_read(const KmerTable& table, const SimParams& params, const ReadSpec& spec,
                     SimRng& rng, SimulatedRead& out);

// A uniformly random ACGT sequence of length n.
void random_sequence(SimRng& rng, size_t n, std::string& out);

// The default adapter stand-in: a fixed pseudo-random 52-nt sequence (ONT does not publish the
// RNA004 adapter). With a 20-nt barcode, 72 bases at ~30.8 samples/base last ~2,200 samples,
// the median real RNA004 adapter length (Dorado ts; 10-90%: 1,350-3,200).
const std::string& default_adapter_sequence();

// pA -> ADC with the inverse of adc_to_pa: round(pA / scale - offset), clamped to [lo, hi].
int16_t pa_to_adc(float pa, Calibration c, int16_t lo, int16_t hi);

}  // namespace escpod::signal
