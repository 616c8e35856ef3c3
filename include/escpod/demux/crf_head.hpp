// The CTC-CRF barcode head: a demux::Head over a CRF model folder (SeqTagger/bonito `crf` model
// or escapepod CRF bundle, crf_model.hpp) that basecalls a window of each read's signal, names
// the call's barcode by edit distance (crf_match.hpp) and gates it on its confidence
// (crf_lattice.hpp). Specification: docs/demux.md §7 (the head) and
// §7.8 (SeqTagger's models). The engine (pipeline::run_demux) needs no change: load_head takes a
// folder is_crf_model_dir accepts as this head, with the run's HeadOptions::crf, and the head
// reads the calibrated prefix the engine decodes.
//
// Windows (our choices where SeqTagger's are unpublished; every one is an option below):
//  - bundles: [adapter_end - chunk, adapter_end) with the bundle's margin and clamping rules
//    (docs/demux.md §7.2), standardised with the bundle's constants;
//  - SeqTagger v1 (no [standardisation]): the last `chunk` samples before the detected adapter
//    end (our detectors' adapter end is where the poly(A) tail starts), median/MAD-normalised
//    over those samples, left-padded with zeros when fewer than `chunk` precede the boundary;
//  - SeqTagger v2: `chunk`-sample windows starting at 0, step, 2*step, ... while they end within
//    max_chunksize samples of the read start (and within the decoded prefix), standardised with
//    the config's constants; the window whose call has the best mean base quality wins (the
//    best mean log-posterior with the posterior decoder), ties to the earlier window.
// A read with no usable window is unclassified with CallStatus::kNoWindow.
//
// Labels: reference i of the panel is label i + 1 (the engine names outputs BC01, BC02, ...;
// SeqTagger's barcodes.fa names them Barcode_1, Barcode_2, ... in the same order). describe()
// lists the mapping.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_decode.hpp"
#include "escpod/demux/crf_match.hpp"
#include "escpod/demux/crf_model.hpp"
#include "escpod/demux/head.hpp"

namespace escpod::demux {

enum class CrfDecoderChoice : uint8_t {
  kModelDefault,  // posterior for bundles, beam for SeqTagger folders
  kPosterior,
  kBeam,
};
// "posterior" / "beam" / "default"; parse_crf_decoder accepts the first two.
const char* crf_decoder_name(CrfDecoderChoice choice);
Result<CrfDecoderChoice> parse_crf_decoder(const std::string& text);

// Where a SeqTagger v1 window's median/MAD are taken.
enum class CrfNormSpan : uint8_t {
  kWindow,  // the window's own samples (default; the zero padding excluded)
  kPrefix,  // every sample the engine decoded up to the adapter end (adapter and all)
};

// Where a SeqTagger window sits (v1 default kBeforeBoundary, v2 default kRollingStart).
enum class CrfWindowPlacement : uint8_t {
  kModelDefault,
  kBeforeBoundary,  // the last `chunk` samples before the adapter end
  kRollingStart,    // rolling windows over the read start, best call kept
};
Result<CrfWindowPlacement> parse_crf_window_placement(const std::string& text);
const char* crf_window_placement_name(CrfWindowPlacement placement);

inline constexpr int32_t kDefaultRollingWindowBatch = 16;
inline constexpr int32_t kDefaultReadWindowBatch = 4;

struct CrfHeadOptions {
  CrfDecoderChoice decoder = CrfDecoderChoice::kModelDefault;
  CrfWindowPlacement placement = CrfWindowPlacement::kModelDefault;
  CrfNormSpan norm_span = CrfNormSpan::kWindow;
  // Gates, checked in this order (the first failure names the gate in the `gate` column):
  //  edit margin (min_margin, 0 keeps ties), lattice margin, lattice probability (crf_lattice.hpp),
  //  base quality (min_baseq; beam search only), mean posterior (min_mean_post: exp of the mean
  //  log-posterior along the decoded path; computed for every call).
  int32_t min_margin = 0;
  std::optional<double> min_crf_margin;
  std::optional<double> min_crf_prob;
  // nullopt: the model's min_baseQ where it has one (b13: 60, b07: 50), else kDefaultMinBaseq.
  std::optional<double> min_baseq;
  // nullopt: kDefaultMinMeanPost.
  std::optional<double> min_mean_post;
  bool ref_scores = false;  // lattice columns (implied by min_crf_margin / min_crf_prob)
  std::optional<int64_t> boundary_margin;   // bundles: overrides the bundle's margin
  std::optional<int64_t> clamp_max_shift;   // bundles: overrides the bundle's clamp allowance
  CrfLoadOptions load;                      // encoder backend, bundle pin check
  // Windows per encoder call (1..16; 1: one window per call): a SeqTagger v2 read's rolling
  // windows, or, for the one-window placements (SeqTagger v1, bundles), the windows of that many
  // reads of one classify() call (the head asks the engine for batches of this size). Batched
  // scores are bitwise those of one window per call (the encoder's kernels treat batch rows
  // independently), so the calls do not depend on it; it trades scratch (~1 MB of scores and
  // activations per window) for speed. nullopt: kDefaultRollingWindowBatch (all nine of b13's
  // windows) or kDefaultReadWindowBatch reads (fused b04 demux, 1,500 reads, -t 1: 1.26x the
  // reads/s of one read per call for +19 MiB; 8 and 16 reads were no faster and larger,
  // bench/results/crf_head.md Session 13).
  std::optional<int32_t> max_window_batch;
  // --barcodes: references from a CSV (read_barcode_csv) instead of the model's, matched as given
  // (the CSV holds what the model emits). Empty: the model's references.
  std::filesystem::path barcodes_csv;
};

// Reads a barcode reference CSV (docs/formats.md §3.5): the header must contain `name` and
// `sequence` (case-insensitive), other columns are ignored, fields are split on commas and
// trimmed, blank lines skipped, sequences upper-cased. Errors (invalid_argument / io_error) name
// the file and line: a missing column, a short row, an empty file. Symbols and duplicate names
// are checked when the panel is built (BarcodePanel::create).
Result<std::vector<BarcodeRef>> read_barcode_csv(const std::filesystem::path& path);

// Our defaults for the gates a model does not set, chosen so that the 200 barcode-free RNA004
// reads of shared/data/escapepod are rejected by every shipped SeqTagger model
// (bench/results/crf_head.md has the distributions they were read from).
inline constexpr double kDefaultMinBaseq = 60.0;
inline constexpr double kDefaultMinMeanPost = 0.95;

// The head's extra CSV columns, in order (empty cells where a value does not apply are left to
// the end: the column set depends on the decoder and on ref_scores):
//   window_start  sample index of the chosen window's first sample (negative: zero padding)
//   edit_dist     edit distance of the call to the chosen reference
//   second_dist   runner-up distance (-1 with a single reference)
//   call_len      bases in the call
//   mean_post     exp(mean log-posterior) along the posterior-decode path
//   gate          0 pass, 1 edit margin, 2 crf margin, 3 crf prob, 4 baseq, 5 mean posterior
//   baseq         mean base quality (beam search only)
//   crf_logp, crf_margin           (ref_scores only)
//   crf_best      the most probable reference (ref_scores only): its class index in
//                 Classification::probabilities, written as the reference's name
//                 (ColumnKind::kClassName)

// The call behind read `index` of the last classify() of a CRF head on `scratch` (for `demux
// basecall`, which writes the sequence): views into the scratch, valid until its next
// classify(). nullopt when `scratch` is not a CRF head's or that read had no usable window.
struct CrfReadCall {
  std::string_view sequence;   // the decoded call (beam or posterior, as the head runs)
  std::string_view reference;  // name of the nearest reference by edit distance
  std::string_view crf_best;   // name of the most probable reference (empty without ref_scores)
};
std::optional<CrfReadCall> crf_read_call(const HeadScratch& scratch, size_t index);

// Samples from the read start a CRF head reads for a read whose adapter ends at `adapter_end`
// (what a caller must decode); 0 when `head` is not a CRF head.
int64_t crf_samples_needed(const Head& head, int64_t adapter_end);

// The head's options as a user gives them (the CLI's flags, the Python API's arguments): text,
// with NaN / -1 for "unset" (the model's or escapepod's default applies). One parser for both.
struct CrfHeadRequest {
  std::string decoder, window, norm = "window", barcodes;
  std::string precision = "f32";  // parse_encoder_precision
  int32_t min_margin = 0;
  double min_baseq = std::nan(""), min_mean_post = std::nan(""), min_crf_margin = std::nan(""),
         min_crf_prob = std::nan("");
  bool ref_scores = false;
  int64_t boundary_margin = -1, clamp_max_shift = -1;
  int32_t window_batch = -1;  // -1: the head's default for the placement
  // The options the caller set, as the CLI spells them ("--decoder", ...): refused for a model of
  // another kind (HeadOptions::crf_options_given).
  std::vector<std::string> given;
};
// Validates `request` (invalid_argument naming the option: --decoder, --crf-window, --crf-norm,
// --min-margin, --crf-batch, --encoder-precision, as the CLI spells them).
Result<CrfHeadOptions> crf_head_options(const CrfHeadRequest& request);

// Loads a CRF model folder as a head with `options`.
Result<LoadedHead> load_crf_head(const std::filesystem::path& folder, const CrfHeadOptions& options);
// The same from a probed folder (probe_crf_model_dir: its metadata is not read again).
Result<LoadedHead> load_crf_head(const CrfModelFolder& folder, const CrfHeadOptions& options);

// What load_head looks for to take a folder as a CRF model (for its error about a folder nothing
// claims).
inline constexpr const char* kCrfModelLooksFor =
    "config.toml (a SeqTagger/bonito CTC-CRF model folder) or metadata.json with format "
    "escapepod-crf-encoder/N (an escapepod CRF bundle)";

}  // namespace escpod::demux
