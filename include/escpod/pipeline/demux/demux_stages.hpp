// The demultiplexer's stages run one at a time, exchanging CSV files (escapepod-behaviour.md
// 1.3, 2.1-2.3): `demux detect` (POD5 -> boundaries CSV), `demux fingerprint` (POD5 + boundaries
// -> fingerprint table), `demux classify` (fingerprint table -> calls). Chained with the same
// model they give the fused pipeline's calls (run_demux), except where the 6-decimal rounding of
// the fingerprint table moves a read across a confidence threshold.
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

// The boundary detector `s` describes (finding the CNN beside `model_path` when it is used).
Result<BoundaryDetector> make_stage_detector(const StageSettings& s, const std::filesystem::path& model_path,
                                             const std::filesystem::path& cnn_model);

// Settings from `model_path`'s signal_processing block (empty path: the RNA004 defaults,
// demux::SignalProcessing::rna004(true)), with the detector overridden per `choice` (a warning
// when LLR overrides a CNN-trained model). Reads the model file once (demux::load_model_settings).
// Errors: those of load_model_settings, a model without a signal_processing block.
Result<StageSettings> stage_settings(const std::filesystem::path& model_path, DetectorChoice choice,
                                     const demux::ModelLoadOptions& model_options = {});

// ---- detect ---------------------------------------------------------------------------------

struct DetectStageOptions {
  std::filesystem::path model_path;  // required: the settings and the CNN's name
  demux::ModelLoadOptions model_options;  // a WarpDemuX joblib model's config (--config)
  std::filesystem::path cnn_model;   // empty: found beside the model
  DetectorChoice detector = DetectorChoice::kModelDefault;
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
Status detect_boundaries(const std::vector<std::filesystem::path>& inputs,
                         const DetectStageOptions& options, std::ostream& csv,
                         DetectStageReport* report);

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

// Reads a boundaries CSV (2.1 reader rules): columns by header name (read_id, num_samples or
// signal_len else column 1, adapter_start, adapter_end), a leading '#' on the header stripped,
// later '#' lines skipped, gzip read transparently, positions may be floats (truncated), rows
// with adapter_end <= adapter_start dropped and counted. Errors name the file and line.
Result<BoundariesTable> read_boundaries_csv(const std::filesystem::path& path);

struct FingerprintStageOptions {
  std::filesystem::path model_path;  // empty: RNA004 defaults
  demux::ModelLoadOptions model_options;  // a WarpDemuX joblib model's config (--config)
  DetectorChoice detector = DetectorChoice::kModelDefault;  // decides how much signal is decoded
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
// (opened with the model's fingerprint length and options.emit_dwell; finished here). Failures
// are counted by reason, not written.
Status fingerprint_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                   const BoundariesTable& boundaries,
                                   const FingerprintStageOptions& options,
                                   FingerprintTableWriter& table, FingerprintStageReport* report);

// The fingerprint length (fp_* columns) the stage writes for these options' model.
Result<size_t> fingerprint_length(const FingerprintStageOptions& options);

// ---- classify -------------------------------------------------------------------------------

struct ClassifyStageOptions {
  std::filesystem::path model_path;  // a DTW-SVM model: JSON or WarpDemuX joblib
  demux::ModelLoadOptions model_options;  // a WarpDemuX joblib model's config (--config)
  bool probabilities = false;  // append one pNN column per class
  // DTW arithmetic: float32 (default, ~2x faster, within the golden tolerances) or float64
  // (dtaidistance's distances bit for bit).
  demux::DtwPrecision dtw = demux::DtwPrecision::kFloat32;
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
// model's fingerprint length) and writes read_id,barcode,confidence,is_confident[,pNN...] in
// input order (`barcode` as in every table escpod writes; escapepod calls it predicted_barcode).
// Errors: a missing fp column, a malformed number (naming file and line or row).
Status classify_fingerprints(const std::filesystem::path& fingerprints,
                             const ClassifyStageOptions& options, std::ostream& csv,
                             ClassifyStageReport* report);

}  // namespace escpod::pipeline
