// CTC-CRF barcode models: loading (SeqTagger/bonito model folders and escapepod CRF bundles) and
// the encoder that turns one signal window into per-step CRF scores.
//
// Two kinds of model folder are recognised:
//  - SeqTagger / bonito `crf` folders: `config.toml` + `weights_N.tar` (a PyTorch state_dict,
//    read by nn::load_torch_state_dict) + `barcodes.fa`. The encoder is built in memory on the
//    nn engine from the config and the weights (conv 1->4 k5, conv 4->16 k5, conv 16->F k`winlen`
//    stride `stride`, all swish; LSTM layers of F alternating direction, the first reversed;
//    linear F->n_base^(state_len+1), tanh, x `scale`; the blank score inserted before each state's
//    moves). No converted copy is written anywhere (the models are CC BY-NC-ND 4.0; the authors
//    have filed patent applications EP24382340 and EP24383144 on the method).
//  - escapepod CRF bundles: `metadata.json` (format `escapepod-crf-encoder/1`) + an ONNX encoder
//    (and optionally a pinned boundary CNN, checked against its sha256); docs/formats.md §4.3.
//
// Encoder contract (both kinds): input a float32 window of n samples, already normalised; output
// time-major scores [T, batch, n_states * (n_base + 1)] with T = ceil(n / stride) (= chunk / stride
// for bundles, whose windows are always `chunk` long). Within a step, score index
// `dest * (n_base + 1) + edge`, edge 0 = stay/blank, edge 1 + j = move from state
// j * n_states / n_base + dest / n_base (docs/demux.md §7.1).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/nn/model.hpp"

namespace escpod::demux {

enum class CrfModelKind { kSeqTagger, kBundle };

// A reference sequence the model can emit (bundle `barcodes[]`, SeqTagger `barcodes.fa`), as
// stored in the model: for SeqTagger this is the barcode as listed, not yet in the emitted
// (reversed, truncated) form the matcher compares against.
struct CrfReference {
  std::string name;
  std::string sequence;
};

struct CrfConfig {
  int64_t chunk = 0;          // window length in samples (SeqTagger: basecaller.chunksize)
  int64_t stride = 0;         // samples per output step
  int state_len = 0;          // CRF state length (k-mer length of a state)
  int n_base = 0;             // bases (alphabet size without the blank)
  std::string alphabet;       // blank first, e.g. "NACGT"
  // Input normalisation: standardisation with (mean, stdev) in picoamps, or (SeqTagger v1, no
  // [standardisation] section) median/MAD of the signal: (x - median) / (1.4826 * MAD).
  bool standardise = false;
  double mean = 0.0;
  double stdev = 1.0;
  std::optional<int64_t> max_chunk;  // SeqTagger v2: longest rolling window (basecaller.max_chunksize)
  std::optional<int64_t> step;       // SeqTagger v2: rolling-window step (basecaller.step)
  std::optional<double> min_baseq;   // SeqTagger v2: mean base-quality cut-off (basecaller.min_baseQ)
  float scale = 5.0f;                // tanh scale of the move scores (SeqTagger; bundles: in the graph)
  float blank_score = 2.0f;          // fixed stay score (SeqTagger; bundles: in the graph)

  int64_t n_states() const;  // n_base ^ state_len
  int64_t n_scores() const;  // n_states * (n_base + 1)
  int64_t steps(int64_t window) const;  // T for a window of `window` samples
};

// Pinned boundary detector of a bundle (docs/formats.md §4.3 `boundary`).
struct CrfBoundaryPin {
  std::string method;                 // "cnn" or "llr"; empty when the bundle pins none
  std::filesystem::path onnx;         // absolute path of the pinned CNN (method cnn)
  std::string model_id;
  std::string sha256;                 // lowercase hex
  int64_t min_obs_adapter = 0, max_obs_trace = 0, downscale_factor = 0, input_len = 0;
  double pad_value = 0.0;
  int64_t margin = 200;               // samples required beyond `chunk`
  int64_t clamp_max_shift = 0;        // window clamping allowance (0 = off)
};

// The SHA-256 of `bytes`, as 64 lowercase hex digits (a bundle's boundary.sha256 pin).
std::string sha256_hex(std::string_view bytes);

struct CrfModel {
  CrfModelKind kind = CrfModelKind::kSeqTagger;
  std::filesystem::path path;         // the folder
  std::filesystem::path encoder_file; // weights_N.tar or the bundle's ONNX
  std::string format;                 // bundle `format`, or "bonito.crf"
  CrfConfig config;
  std::vector<CrfReference> references;
  CrfBoundaryPin boundary;            // bundles only
  std::string info_json;              // bundle `model` and `metrics` (for --info), "{}" otherwise
  std::shared_ptr<const nn::Model> encoder;
};

struct CrfLoadOptions {
  // How the encoder is built and run: backend, and the opt-in reduced-precision paths
  // (nn::LoadOptions::bf16_gemm, bf16_conv, lstm_int8; `parse_encoder_precision`).
  nn::LoadOptions encoder;
  // Check a bundle's pinned boundary CNN against its sha256 (off when the user supplies their
  // own CNN with --cnn-model: the pin is then unused).
  bool verify_boundary_pin = true;
};

// "f32" (the default: everything float32; amx_f32 where the CPU has AMX), "f32-fma" (no amx_f32),
// "bf16" (bf16_gemm and bf16_conv: the dense products and the convolutions with many inputs per
// output) or "int8" (lstm_int8) into `encoder`; invalid_argument naming the choices otherwise.
Status parse_encoder_precision(std::string_view name, nn::LoadOptions& encoder);

// A folder that looks like a CRF model folder of either kind: config.toml (SeqTagger/bonito), or
// a metadata.json with format escapepod-crf-encoder/... (a bundle), whose text is kept so that
// loading it reads the file no second time.
struct CrfModelFolder {
  std::filesystem::path dir;
  std::optional<std::string> bundle_metadata;  // the bundle's metadata.json; nullopt: SeqTagger
};
// The folder as a CRF model folder, or nullopt. Does not validate it.
std::optional<CrfModelFolder> probe_crf_model_dir(const std::filesystem::path& dir);
bool is_crf_model_dir(const std::filesystem::path& dir);

// Loads either kind, with every load-time check: for SeqTagger the config values the
// architecture needs (package bonito.crf, lstm, swish, labels), the exact state_dict key set and
// every tensor shape; for bundles every check of docs/formats.md §4.3. Both end with a zero-window
// run checking the output shape [T, 1, n_scores]. Errors name the file and what is wrong.
Result<CrfModel> load_crf_model(const std::filesystem::path& dir, const CrfLoadOptions& options = {});
Result<CrfModel> load_crf_model(const CrfModelFolder& folder, const CrfLoadOptions& options = {});

// Runs a model's encoder for one worker. Holds the worker's nn::Workspace; after the first call
// for a window length it allocates nothing. One thread at a time; make one per worker (they share
// the model's weights).
class CrfEncoder {
 public:
  // `n_threads` kernels threads per call (1 = the calling thread only).
  explicit CrfEncoder(const CrfModel& model, int n_threads = 1);

  int64_t n_scores() const { return m_n_scores; }
  int64_t steps(size_t n) const { return m_config.steps(static_cast<int64_t>(n)); }

  // Scores of one window of `n` normalised samples into `scores_out`, which must hold
  // steps(n) * n_scores() floats, time-major [T, n_scores]. Bundles accept only n == chunk.
  Status run(const float* window, size_t n, float* scores_out);
  // `batch` windows of `n` samples each, stored one after another; output [T, batch, n_scores]
  // (time-major, as the encoder contract says).
  Status run_batch(const float* windows, size_t batch, size_t n, float* scores_out);

 private:
  std::shared_ptr<const nn::Model> m_model;
  CrfConfig m_config;
  CrfModelKind m_kind;
  int64_t m_n_scores = 0;
  nn::Workspace m_workspace;
};

}  // namespace escpod::demux
