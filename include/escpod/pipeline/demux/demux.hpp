// The fused demultiplexer: POD5 reads -> adapter boundaries -> what the model's head asks for (a
// barcode fingerprint, or a signal window; demux/head.hpp) -> the head's call (DTW-SVM, GBM, or a
// registered head kind) -> one POD5 per label (+ `unclassified`) and an optional classifications
// CSV (the head's extra columns appended), in one streaming pass with no intermediate files.
//
// Work is per read with work stealing (oneTBB pipeline), or per head batch for heads that ask
// for batches: a serial reader hands out reads in input order, workers (each with its own
// scratch) decode only the signal prefix the detector needs and classify, and a serial writer
// consumes results in input order, so outputs are
// identical for any thread count. Memory is bounded by the number of reads in flight (4 a thread)
// and one shared budget for pending output signal (SignalMemoryBudget), whatever the input size
// or the number of labels. Every input read ends in exactly one output; a read that cannot be
// classified (no signal, no adapter, no fingerprint, noise, low confidence) goes to
// `unclassified` with its reason, never aborting the run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/dtw.hpp"
#include "escpod/demux/head.hpp"
#include "escpod/demux/model_file.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"  // CnnPrecision
#include "escpod/pipeline/tables/barcode_labels.hpp"  // label_name, kNoiseLabel
#include "escpod/pod5/file_writer.hpp"

namespace escpod::pipeline {

enum class DetectorChoice { kModelDefault, kCnn, kLlr };

// "" (the model's default), "cnn" or "llr"; anything else is a usage error naming --method.
Result<DetectorChoice> parse_detector_choice(const std::string& method);

// What a run's model is and how to load it, the same for the fused run, every stage and the
// Python API (resolve_model_spec builds it from what a user gives; load_run_model loads it).
struct ModelSpec {
  // A file or folder demux::load_head reads: DTW-SVM or GBM JSON, WarpDemuX joblib, CRF model
  // folder, or a registered head kind's model.
  std::filesystem::path path;
  // How the head is loaded and run: a WarpDemuX joblib model's config (--config), the DTW-SVM
  // head's DTW arithmetic (float32, or float64: dtaidistance's distances bit for bit), the CRF
  // head's options.
  demux::HeadOptions head;
  DetectorChoice detector = DetectorChoice::kModelDefault;
  std::filesystem::path cnn_model;  // boundary CNN (ONNX); empty: found beside the model
  CnnPrecision cnn_precision = CnnPrecision::kFloat32;  // the CNN's arithmetic (CNN detector only)
};

// A run's ModelSpec from what a user gives (the CLI's flags, the Python arguments), the same for
// every entry point: `method` ("cnn", "llr", or "" for the model's default; else a usage error),
// `cnn_model` as given and `cnn_precision` (parse_cnn_precision's names); head.crf null: the CRF head's defaults. An empty `model` is a spec
// without one (`demux fingerprint` without --model: the RNA004 settings). Reads no file: the model's
// own rules (a CRF bundle's pinned detector) are applied when it is loaded (load_run_model).
Result<ModelSpec> resolve_model_spec(const std::filesystem::path& model, demux::HeadOptions head,
                                     const std::string& method, const std::filesystem::path& cnn_model,
                                     const std::string& cnn_precision = "float32");

struct DemuxOptions {
  ModelSpec model;
  std::filesystem::path out_dir;        // per-label POD5 files; empty: write none
  std::string prefix = "barcode";       // file names <prefix>_<label>.pod5
  std::filesystem::path classifications_csv;  // empty: none
  int n_threads = 1;
  int64_t signal_memory_budget = 256ll << 20;  // pending output signal held in memory, bytes
  pod5::WriterOptions writer;           // fsync, overwrite, compression of the outputs
  // Write each read's label as the `barcode` label column of its input's .p5s sidecar (literal
  // `unclassified` included), for every input, only after the whole run succeeded. Inputs whose
  // existing sidecar is damaged or belongs to another file are refused before the run starts.
  bool annotate = false;
  std::string annotate_writer = "escpod";  // recorded in the sidecars
};

struct DemuxReport {
  uint64_t n_reads = 0;
  uint64_t n_samples_decoded = 0;
  std::map<std::string, uint64_t> reads_per_label;     // "BC04", ..., "unclassified"
  std::map<std::string, uint64_t> unclassified_reasons;
  std::map<std::string, uint64_t> detector_used;       // "cnn", "llr_short", "llr", "none"
  double seconds = 0.0;
  std::vector<std::filesystem::path> sidecars_written;  // with annotate
};

// Runs the fused demultiplexer over `inputs` (POD5 files, in order).
Status run_demux(const std::vector<std::filesystem::path>& inputs, const DemuxOptions& options,
                 DemuxReport* report);

// Barcode fingerprints of labelled reads, for training. The detector and fingerprint settings
// come from `signal_processing` (a model's signal_processing block); `detector` may override its
// detector as in DemuxOptions.
struct FingerprintOptions {
  demux::SignalProcessing signal_processing = demux::SignalProcessing::rna004(true);
  std::filesystem::path cnn_model;  // needed when the CNN detects
  DetectorChoice detector = DetectorChoice::kModelDefault;
  int n_threads = 1;
};

struct FingerprintRow {
  std::string read_id;
  int32_t label = -1;
  std::vector<double> features;
};

struct FingerprintReport {
  uint64_t n_reads = 0;  // labelled reads found in the inputs
  std::map<std::string, uint64_t> failures;  // reads without a fingerprint, by reason
};

// Fingerprints every read of `inputs` that `labels` names (read id text -> barcode number,
// -1 = noise class), in input order. Reads that fail detection or fingerprinting are counted
// by reason, not returned.
Result<std::vector<FingerprintRow>> fingerprint_labelled_reads(
    const std::vector<std::filesystem::path>& inputs, const std::map<std::string, int32_t>& labels,
    const FingerprintOptions& options, FingerprintReport* report);

// Human-readable description of a model and the detector it pins (for `demux --info`); for a
// model that records no signal processing, the detector spec.detector chooses (its default when
// kModelDefault).
Result<std::string> describe_demux_model(const ModelSpec& spec);

}  // namespace escpod::pipeline
