// WarpDemuX's own model files (docs/formats.md, "WarpDemuX model files"): a joblib pickle of
// warpdemux.models.dtw_svm.DTW_SVM, paired by name with a WarpDemuX signal-processing config
// (TOML). Both are read into the JSON objects of our own model layout, so one builder
// (ModelBuilder::dtw_svm) and one signal-processing parser make the typed values from either.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/model_file.hpp"
#include "json_fields.hpp"

namespace escpod::demux::detail {

// Whether a file's first bytes are a pickle (protocol 2-5) or a compressed joblib file.
bool looks_like_joblib(std::span<const uint8_t> head);

// The whole file, decompressed when joblib compressed it with zlib or gzip; other compressors
// (lz4, bz2, xz/lzma) and joblib's pre-0.10 "ZF" layout are kUnsupported with the way out.
Result<std::vector<uint8_t>> read_joblib_bytes(const std::filesystem::path& path);
// The same from the file's bytes, read already (`path` names it in messages).
Result<std::vector<uint8_t>> joblib_pickle_bytes(std::vector<uint8_t> bytes, const std::filesystem::path& path);

// Where a joblib model's signal-processing settings came from, and what its folder's config.toml
// says about it.
struct WarpDemuxPairing {
  std::string config_name;     // "rna004_130bps@v1.0"
  std::string chemistry;       // "RNA004", "RNA002"
  std::string source;          // one line for --info
  std::vector<std::string> barcode_names;  // config.toml which_barcodes, as written
  Json block;                  // the effective signal_processing block
};

// Pairs the model at `model` with its config: options.warpdemux_config when given, else the
// config.toml beside the model (its entry for the model's name, then `<spc>.toml` beside it; a
// version that differs between the names is accepted when exactly one file fits), else, for a
// model whose name says rna004, WarpDemuX 1.0's built-in RNA004 config. Each layer is merged key
// by key inside each section over ADAPTed's configuration for the chemistry, as WarpDemuX does.
Result<WarpDemuxPairing> pair_warpdemux_config(const std::filesystem::path& model,
                                               const ModelLoadOptions& options);

// The model's object in our JSON layout (format escapepod-wdx-dtw-svm), from the pickle's bytes;
// `pairing` supplies the chemistry, config name and signal_processing block.
Result<Json> dtw_svm_json_from_joblib(std::span<const uint8_t> bytes, const std::filesystem::path& path,
                                      const WarpDemuxPairing& pairing);

}  // namespace escpod::demux::detail
