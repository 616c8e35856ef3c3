// Demux heads: the classifier end of the demultiplexer behind one interface. The engine
// (pipeline::run_demux) decodes and calibrates each read, detects its adapter, prepares what the
// head asked for (a barcode fingerprint, or a window of calibrated signal placed relative to the
// detected adapter end), hands the head batches of prepared reads, and routes the calls. A head
// never sees files or threads; a new head (e.g. a CTC-CRF barcode caller) plugs in by registering
// a HeadKind: the engine does not change.
//
// Contract of a head: immutable after loading and shared by every worker; all per-call state in
// its HeadScratch (one per worker, from make_scratch()); classify() is const, allocation-free
// once its scratch and the calls' probability vectors have held one batch, and never fails for a
// read: an unusable read gets CallStatus::kInvalidInput (the engine reports why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/classification.hpp"
#include "escpod/demux/dtw.hpp"
#include "escpod/demux/model_file.hpp"

namespace escpod::demux {

enum class HeadInputKind : uint8_t {
  kFingerprint,   // the barcode fingerprint (signal::barcode_fingerprint of the model's settings)
  kSignalWindow,  // calibrated samples around the adapter end (HeadInput::window_*)
};

// How a head's extra CSV column is written (Head::extra_column_kinds).
enum class ColumnKind : uint8_t {
  kNumber,     // the value, 6 decimals
  kClassName,  // a class index, written as its label's output name
};

// What a head needs of each read, declared once.
struct HeadInput {
  HeadInputKind kind = HeadInputKind::kFingerprint;
  // kFingerprint: the fingerprint length the head accepts; 0 = the head checks the length itself.
  size_t fingerprint_length = 0;
  // kSignalWindow: samples [adapter_end + window_begin, adapter_end + window_end), clipped to
  // the samples the engine decoded: the detector's prefix (11 500 for RNA004 with the CNN, the
  // whole read with LLR). A read that ends early gives a shorter window, never an error.
  int64_t window_begin = 0;
  int64_t window_end = 0;
  // Reads per classify() call the head works best with (1: per read; an encoder: its batch).
  // The engine passes at most this many, fewer at the end of the input.
  size_t batch_size = 1;
};

// One read, prepared for the head. Spans stay valid for the classify() call only.
struct PreparedRead {
  std::span<const float> pa;          // the calibrated samples decoded (the detector's prefix)
  uint64_t num_samples = 0;           // the read's full length in samples
  int64_t adapter_start = 0;          // detected boundaries, samples from the read start
  int64_t adapter_end = 0;
  std::span<const double> fingerprint;  // kFingerprint
  std::span<const float> window;        // kSignalWindow
  int64_t window_start = 0;             // kSignalWindow: sample index of window[0]
};

// A head's per-worker state (derive from it).
class HeadScratch {
 public:
  virtual ~HeadScratch() = default;
};

class Head {
 public:
  virtual ~Head() = default;

  // Short kind name for messages ("DTW-SVM", "GBM").
  virtual std::string_view name() const = 0;
  virtual HeadInput input() const = 0;
  // Extra per-read CSV columns, in the order of Classification::probabilities (e.g. "p04"...,
  // "p-1"). A call with fewer values leaves the remaining cells empty.
  virtual std::span<const std::string> extra_columns() const = 0;
  // How the engine writes each extra column (one entry per column; empty: all are numbers). A
  // kClassName column holds a class index (0-based, in labels() order) and is written as that
  // label's output name, the name the `barcode` column and the output files use (e.g. the CRF
  // head's crf_best); a value that is not a class index leaves the cell empty.
  virtual std::span<const ColumnKind> extra_column_kinds() const { return {}; }
  // Output label of each class index (barcode number, -1 for noise).
  virtual std::span<const int32_t> labels() const = 0;
  // The output name of each label, in labels() order (e.g. a CRF reference's name, docs/demux.md
  // §8.1), or empty: the engine then names label L "BC" + L zero-padded to 2. Names are safe as a
  // file-name part (the head refuses others at load); equal names share one output, and the name
  // `unclassified` routes to the unclassified output.
  virtual std::span<const std::string> label_names() const { return {}; }
  // Multi-line human-readable description (`demux --info`).
  virtual std::string describe() const = 0;

  virtual std::unique_ptr<HeadScratch> make_scratch() const = 0;
  // calls[i] = the call for reads[i]; reads.size() == calls.size() <= input().batch_size.
  virtual void classify(std::span<const PreparedRead> reads, HeadScratch& scratch,
                        std::span<Classification> calls) const = 0;
};

struct CrfHeadOptions;  // crf_head.hpp

// How a run loads and runs its head: travels with the run (DemuxOptions, the stages' options,
// the Python calls), so two runs in one process never see each other's options.
struct HeadOptions {
  DtwPrecision dtw = DtwPrecision::kFloat32;  // the DTW-SVM head's DTW arithmetic
  ModelLoadOptions model_file;                // how a model file is read (a joblib model's config)
  // The CRF head's options (gates, decoder, windows, encoder backend) for a CRF model folder;
  // null: its defaults. Immutable once set, shared by the copies of a run's options.
  std::shared_ptr<const CrfHeadOptions> crf;
  // Options the caller set that only one head kind reads, as the CLI spells them: load_head
  // refuses them (kUsage, naming each) for a model of another kind, so that none is ignored.
  std::vector<std::string> crf_options_given;  // e.g. "--decoder", "--min-margin"
  bool dtw_precision_given = false;            // --dtw-precision (DTW-SVM models)
};

// A loaded head with the signal-processing settings the engine prepares its reads with: those
// its model records, or (default_settings) the RNA004 defaults of a kind whose models record none
// (GBM). nullopt: the model should have recorded them and did not (the engine refuses it).
struct LoadedHead {
  std::unique_ptr<Head> head;
  std::optional<SignalProcessing> signal_processing;
  bool default_settings = false;
  std::string kind;  // "dtw-svm", "gbm", or a registered kind's name
  // Where signal_processing came from when the model file does not hold it (a WarpDemuX joblib
  // model's config: ModelFile::settings_source), and the barcode names its registry lists.
  std::string settings_source;
  std::vector<std::string> barcode_names;
  // The boundary detector a model pins (a CRF bundle, docs/formats.md §4.3): method "cnn" (with
  // its ONNX file and sha256), "llr", or "" (pins none, the run must choose). nullopt: the model
  // pins nothing (every other kind). The run applies it (pipeline::load_run_model), and the
  // detector checks the file's sha256 as it loads it, so the file is read once.
  struct DetectorPin {
    std::string method;
    std::filesystem::path onnx;
    std::string sha256;
  };
  std::optional<DetectorPin> detector_pin;
};

// The heads of a parsed model file (DTW-SVM or GBM; the file is consumed).
Result<LoadedHead> make_head(ModelFile&& file, const HeadOptions& options);

// A head kind whose models are files or folders this library does not parse itself (registered
// by the code that implements it; the CRF head's folders are built in, load_head knows them). claims(path) must be cheap and must not fail: it says whether
// `path` is one of its models (e.g. a folder holding its manifest).
struct HeadKind {
  std::string name;
  // What claims() looks for, for the error about a folder no kind claims (e.g. "config.toml
  // (a SeqTagger/bonito model folder)").
  std::string looks_for;
  std::function<bool(const std::filesystem::path&)> claims;
  std::function<Result<LoadedHead>(const std::filesystem::path&, const HeadOptions&)> load;
};
// Thread-safe; a later registration of the same name replaces the earlier one.
void register_head_kind(HeadKind kind);

// Model file or folder -> head: a registered kind that claims `model`, else a model file
// (load_model_file: DTW-SVM or GBM). A folder no kind claims is kInvalidArgument naming it and
// what each registered kind looked for in it.
Result<LoadedHead> load_head(const std::filesystem::path& model, const HeadOptions& options);

}  // namespace escpod::demux
