// The demultiplexer's stages run one at a time, exchanging tables (docs/formats.md): `demux
// detect` (POD5 -> boundaries CSV), `demux fingerprint` (POD5 + boundaries -> fingerprint table),
// `demux classify` (fingerprint table -> the classifications table), and for heads that read the
// signal window instead of a fingerprint (the CRF head) `demux basecall` (POD5 + boundaries ->
// calls, crf_basecall.hpp). Every entry point resolves its model the same way, once
// (load_run_model: the head and the settings its detector and fingerprints use), so any model the
// fused run (run_demux) accepts, each stage accepts where its table applies. Chained with the same
// model they give the fused run's calls (a Parquet fingerprint table keeps every bit; the CSV's 6
// decimals can move a read across a confidence threshold).
//
// Every stage works per read in parallel (oneTBB, one scratch per worker) and writes its rows in
// input order, so its output is identical for any thread count. Memory is bounded by the reads
// in flight; the fingerprint stage also holds the boundaries table (about 100 bytes per row).
// Outputs go to a caller-supplied stream (the CLI stages them with StagedFile).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "escpod/demux/dtw.hpp"
#include "escpod/demux/model_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"
#include "escpod/pipeline/demux/demux.hpp"
#include "escpod/pod5/read_id.hpp"
#include "escpod/pipeline/tables/fingerprint_table.hpp"
#include "escpod/signal/fingerprint.hpp"

namespace escpod::pipeline {

// What a model's signal_processing block pins for the stages (the settings the fused pipeline
// derives from the same block).
struct StageSettings {
  DetectorConfig config;
  DetectMethod method = DetectMethod::kCnn;
  std::string cnn_model_name;     // e.g. rna004_130bps@v0.2.4.pth
  signal::FingerprintParams fingerprint;  // max_window_end = preload_samples
  size_t preload_samples = 0;     // calibrated samples decoded per read (SIZE_MAX: whole read)
};

// The same from a model's typed signal-processing settings; `where` names the model in the
// warning an override gives.
StageSettings stage_settings_from(const demux::SignalProcessing& processing, const std::string& where,
                                  DetectorChoice choice);

// The ONNX file of a model's boundary CNN: `explicit_path` (--cnn-model) if given, else the file
// named after `cnn_model_name` beside the model. kNotFound says where it looked.
Result<std::filesystem::path> find_cnn_model(const std::filesystem::path& model_path,
                                             const std::filesystem::path& explicit_path,
                                             const std::string& cnn_model_name);


// A run's model, resolved once (the fused run, every stage, --info): its head (demux::load_head:
// DTW-SVM or GBM file, WarpDemuX joblib, CRF model folder), the settings the detector and
// fingerprints use (the model's signal processing, or the RNA004 defaults for a kind whose models
// record none, with the detector choice applied), and the boundary CNN file. A spec without a
// path (`demux fingerprint` without --model) gives the RNA004 defaults and no head.
struct RunModel {
  std::filesystem::path path;
  demux::LoadedHead loaded;
  StageSettings settings;
  std::filesystem::path cnn;  // the CNN's ONNX file when settings.method is kCnn and `need_detector`
  std::string cnn_sha256;     // a CRF bundle's pin on that file (the detector checks it), or empty
  DetectorChoice detector = DetectorChoice::kModelDefault;  // the run's choice, the model's rules applied
  CnnPrecision cnn_precision = CnnPrecision::kFloat32;      // the spec's, for the detector's CNN
  const demux::Head& head() const { return *loaded.head; }  // precondition: a model was given
};

// Loads spec.path once (load_head) and chooses the detector: spec.detector, or the model's; a CRF
// bundle's pin (docs/formats.md §4.3: a `cnn` pin refuses --method llr and brings its CNN file,
// whose sha256 the detector checks unless spec.cnn_model names another; a bundle pinning none
// needs a method when a detector runs); a SeqTagger folder, which pins none, runs LLR, or the CNN
// when spec.cnn_model names a file. `need_detector`: find the CNN file (kNotFound says where it
// looked) when the detector uses it; `demux classify` and `basecall` read boundaries, --info runs
// nothing. Errors: load_head's, a model without signal-processing settings, the pin's, kUsage for
// a bfloat16 CNN precision with the LLR detector (it runs no CNN).
Result<RunModel> load_run_model(ModelSpec spec, bool need_detector = true);

// The boundary detector the model's settings describe (with its CNN file).
Result<BoundaryDetector> make_stage_detector(const RunModel& model);

// The model's head reads `kind` (a fingerprint or a signal window), else invalid_argument naming
// the model and the stage that fits it (`stage`: "demux fingerprint" for the message).
Status require_head_input(const RunModel& model, demux::HeadInputKind kind, const std::string& stage);

// ---- detect ---------------------------------------------------------------------------------

struct DetectStageOptions {
  // CNN only: also run the LLR-only detector on the whole read and append
  // llr_adapter_start,llr_adapter_end,end_delta (cnn end - llr end; empty unless both ends > 0).
  bool emit_llr_delta = false;
  int n_threads = 1;
};

struct DetectStageReport {
  uint64_t n_reads = 0;
  uint64_t n_detected = 0;
  std::map<std::string, uint64_t> failures;       // by reason
  std::map<std::string, uint64_t> detector_used;  // "cnn", "llr_short", "llr", "none"
  uint64_t n_llr_delta = 0;         // emit_llr_delta: reads where both detectors found an end
  std::vector<int64_t> end_deltas;  // emit_llr_delta: those ends' differences (cnn - llr)
  double seconds = 0.0;
};

// Header of the boundaries CSV this stage writes, and the columns emit_llr_delta appends.
inline constexpr const char* kBoundariesHeader =
    "read_id,num_samples,adapter_start,adapter_end,polya_end,detector,reason";
inline constexpr const char* kLlrDeltaColumns = "llr_adapter_start,llr_adapter_end,end_delta";

// Writes one boundaries row per input read, in input order, header first. A read whose
// detection failed gets adapter_start = adapter_end = polya_end = 0, the attempt that failed in
// `detector` ("none" when no detector ran) and the reason; the fingerprint stage drops it.
Status detect_boundaries(const std::vector<std::filesystem::path>& inputs, const RunModel& model,
                         const DetectStageOptions& options, std::ostream& csv, DetectStageReport* report);

// ---- fingerprint ----------------------------------------------------------------------------

struct BoundaryRow {
  pod5::ReadId read_id;
  uint64_t num_samples = 0;
  int64_t adapter_start = 0, adapter_end = 0;
};

struct BoundariesTable {
  std::vector<BoundaryRow> rows;  // usable rows, file order
  uint64_t n_dropped = 0;         // rows with adapter_end <= adapter_start
};

// Reads a boundaries CSV (docs/formats.md §3.1): columns by header name (read_id, num_samples or
// signal_len else column 1, adapter_start, adapter_end), a leading '#' on the header stripped,
// later '#' lines skipped, gzip read transparently, positions may be floats (truncated), rows
// with adapter_end <= adapter_start dropped and counted. Errors name the file and line.
Result<BoundariesTable> read_boundaries_csv(const std::filesystem::path& path);

struct FingerprintStageOptions {
  bool emit_dwell = false;  // also dwell_0..: the length in samples of each fingerprint event
  int n_threads = 1;
};

struct FingerprintStageReport {
  uint64_t n_boundaries = 0;        // usable rows in the boundaries CSV
  uint64_t n_dropped = 0;           // rows without an adapter
  uint64_t n_fingerprinted = 0;
  uint64_t n_not_in_inputs = 0;     // boundary rows whose read is in no input
  std::map<std::string, uint64_t> failures;  // reads with boundaries but no fingerprint
  double seconds = 0.0;
};

// Fingerprints every input read the boundaries table names, in input order, into `table`
// (opened with fingerprint_length(model) and options.emit_dwell; finished here), with the model's
// fingerprint settings (the detector choice decides how much signal is decoded). Failures are
// counted by reason, not written. The model's head must read fingerprints (require_head_input).
Status fingerprint_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                   const BoundariesTable& boundaries, const RunModel& model,
                                   const FingerprintStageOptions& options,
                                   FingerprintTableWriter& table, FingerprintStageReport* report);

// The fingerprint length (fp_* columns) the model's fingerprints have.
size_t fingerprint_length(const RunModel& model);

// ---- classify -------------------------------------------------------------------------------

struct ClassifyStageOptions {
  int n_threads = 1;
  size_t chunk_rows = 4096;    // rows read, classified and written at a time
};

struct ClassifyStageReport {
  uint64_t n_reads = 0;
  std::map<std::string, uint64_t> calls;            // "BC04", ..., "unclassified"
  std::map<std::string, uint64_t> unclassified_reasons;
  double seconds = 0.0;
};

// Classifies a fingerprint table (FingerprintTableReader: CSV, gzip CSV or Parquet by name; N the
// model's fingerprint length) with the model's head, the fused run's, and writes the
// classifications table the fused run writes (pipeline/demux/classifications_csv.hpp; the
// boundary and detector cells empty: this stage does not see them), in input order. The head must
// read fingerprints (DTW-SVM, GBM). Errors: a missing fp column, a malformed number (naming file
// and line or row).
Status classify_fingerprints(const std::filesystem::path& fingerprints, const RunModel& model,
                             const ClassifyStageOptions& options, std::ostream& csv,
                             ClassifyStageReport* report);

}  // namespace escpod::pipeline
