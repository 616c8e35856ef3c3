// Model files, typed. A model file is read and parsed ONCE (load_model_file); what it holds comes
// back as values: its kind (which head classifies with it), its signal-processing settings (the
// `signal_processing` block: boundary detector and fingerprint), and the parsed classifier
// (WarpDemuxModel or GbmModel). No JSON crosses this header: nlohmann stays inside src/demux.
//
// One error style: a file that cannot be read is kIoError; anything wrong inside it (syntax, a
// field of the wrong type or value, a kind that cannot be determined) is kCorrupt, and the message
// names the file and the JSON path of the field, e.g.
//   "WDX4.json: signal_processing.core.max_obs_trace must be an integer, found string".
// Options of the block this build does not implement are kUnsupported (same message shape).
//
// The RNA004 defaults (docs/demux.md §3.0) exist once: the member defaults of
// signal::BoundaryConfig and signal::FingerprintParams plus kRna004CnnModelName below;
// SignalProcessing::rna004() and a block's missing keys take them from there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/gbm_model.hpp"
#include "escpod/demux/warpdemux_model.hpp"
#include "escpod/signal/boundaries.hpp"
#include "escpod/signal/fingerprint.hpp"

namespace escpod::demux {

inline constexpr const char* kRna004CnnModelName = "rna004_130bps@v0.2.4.pth";
inline constexpr const char* kRna004SignalProcessingConfigName = "rna004_130bps@v1.0";
inline constexpr const char* kRna004Chemistry = "RNA004";

// The `signal_processing` block of a model: what the boundary detector and the fingerprint use.
struct SignalProcessing {
  signal::BoundaryConfig boundaries;      // boundaries.cnn_detect: the CNN detects (else LLR)
  std::string cnn_model_name = kRna004CnnModelName;  // cnn_boundaries.model_name
  signal::FingerprintParams fingerprint;  // max_window_end is not part of the block (see below)

  // The keys as read, opaque: a block written back (serialize_signal_processing) keeps the keys
  // this build does not interpret (provenance, consensus settings, ...) and their order. Null for
  // settings built in code.
  struct Source;
  std::shared_ptr<const Source> source;

  // The effective RNA004 configuration with the CNN (use_cnn) or the LLR detector.
  static SignalProcessing rna004(bool use_cnn);

  bool uses_cnn() const { return boundaries.cnn_detect; }
  // Pins the detector the model records: cnn_boundaries.cnn_detect = use_cnn,
  // llr_boundaries.llr_detect = !use_cnn (what `demux train --method` writes).
  void set_detector(bool use_cnn);
};

// Parses a `signal_processing` block given as JSON text (`where` names it in messages: a file, or
// "--template"). Missing sections and keys keep the RNA004 defaults, unknown keys are kept opaque.
// Errors as above (kCorrupt for text that is no JSON object or a bad key, kUnsupported for the
// tRNA-only options mvs_polya.mvs_detect_overwrite, med_shift.detect_med_shift,
// rna_start_peak.detect_rna_start_peak set to true).
Result<SignalProcessing> parse_signal_processing(const std::string& block_text, const std::string& where);

// The block as JSON text: the source keys (in their order) with every key this build interprets
// set from the typed values, plus the interpreted keys the source lacks where they differ from
// the defaults; without a source, the compact block of the WarpDemuX 1.0 RNA004 models (core,
// cnn_boundaries, llr_boundaries, sig_extract, segmentation) plus any other interpreted key that
// differs from its default.
// parse_signal_processing(serialize_signal_processing(s)) == s value for value.
std::string serialize_signal_processing(const SignalProcessing& s);

bool operator==(const SignalProcessing& a, const SignalProcessing& b);

enum class ModelKind : uint8_t {
  kDtwSvm,  // WarpDemuX DTW-SVM (format "escapepod-wdx-dtw-svm", or the Rust escapepod schema)
  kGbm,     // gradient-boosted trees (model_type "gbm")
};
const char* model_kind_name(ModelKind kind);

// How a model file is read: what a model file cannot say itself.
struct ModelLoadOptions {
  // A WarpDemuX joblib model's signal-processing config (WarpDemuX's TOML, `--config`); empty:
  // found by the model's name as WarpDemuX would (docs/formats.md, "WarpDemuX model files").
  // Only joblib models have such a config: the caller refuses it for other files.
  std::filesystem::path warpdemux_config;
};

enum class ModelFormat : uint8_t {
  kJson,    // our JSON layouts (escapepod-wdx-dtw-svm, the Rust escapepod's, GBM)
  kJoblib,  // WarpDemuX's own model file: a joblib pickle of its DTW_SVM
};

// A whole model file, parsed once.
struct ModelFile {
  std::filesystem::path path;
  ModelFormat format = ModelFormat::kJson;
  ModelKind kind = ModelKind::kDtwSvm;
  std::string chemistry;                      // empty when the file does not say
  std::string signal_processing_config_name;  // empty when the file does not say
  // The file's signal_processing block; nullopt when it has none (GBM files never do; the Rust
  // escapepod's DTW-SVM schema may not). What a missing block means is the caller's rule.
  std::optional<SignalProcessing> signal_processing;
  // Where signal_processing came from, one line (a joblib model's config file and the
  // config.toml entry that named it); empty for a JSON file's own block.
  std::string settings_source;
  // A joblib model's barcode names as its folder's config.toml lists them (e.g. dpc1..dpc4).
  std::vector<std::string> barcode_names;
  std::optional<WarpDemuxModel> dtw_svm;      // kind kDtwSvm
  std::optional<GbmModel> gbm;                // kind kGbm
};

// The format is decided from the file's first bytes: a pickle (or a zlib/gzip-compressed joblib
// file) is a WarpDemuX joblib model (DTW-SVM; read strictly, no code runs: errors name the
// opcode or field and its byte offset), anything else JSON. For JSON the kind is decided from the
// file's own fields: model_type "gbm" (or a `trees` array) is GBM; format "escapepod-wdx-dtw-svm",
// or the DTW-SVM fields (training_fingerprints + support_indices) without a format, is DTW-SVM.
// Anything else is kCorrupt saying which fields it looked for; a `format` naming another kind is
// kUnsupported. options.warpdemux_config given for a JSON model is kUsage (a flag that does not apply).
Result<ModelFile> load_model_file(const std::filesystem::path& path, const ModelLoadOptions& options = {});

// Only the header of a model file: kind, chemistry, config name and signal_processing (the
// classifier itself is not built). For stages that only detect or fingerprint.
Result<ModelFile> load_model_settings(const std::filesystem::path& path, const ModelLoadOptions& options = {});

// A WarpDemuX joblib model (with its paired config) as our JSON layout, for tools that want it
// (`escpod demux export-model`): load_model_file of the text gives the same model.
Result<std::string> joblib_model_as_json(const std::filesystem::path& path, const ModelLoadOptions& options = {});

namespace detail {
// How many model/template files this process has parsed as JSON (tests: a run parses each once).
uint64_t model_json_parse_count();
}  // namespace detail

}  // namespace escpod::demux
