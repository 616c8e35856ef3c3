// escpod demux detect | fingerprint | classify: the demultiplexer's stages one at a time,
// exchanging CSV files (escpod/pipeline/demux/demux_stages.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.hpp"
#include "escpod/core/status.hpp"
#include "escpod/demux/dtw.hpp"
#include "escpod/pipeline/demux/demux.hpp"

namespace escpod::cli {

// Adds `detect`, `fingerprint` and `classify` under the `demux` subcommand object.
void register_demux_stages(CLI::App* demux_subcommand, GlobalOptions& global);

// --method cnn|llr (the boundary detector), shared by the fused demux, detect, fingerprint and
// train; parse_method reads it: "" (not given) -> kModelDefault, else cnn or llr.
void add_method_flag(CLI::App* sub, std::string& value, const std::string& help);
Result<pipeline::DetectorChoice> parse_method(const std::string& method);

// --dtw-precision float32|float64 (the DTW-SVM head's arithmetic), shared by the fused demux
// and `demux classify`.
void add_dtw_precision_flag(CLI::App* sub, std::string& value);
// --cnn-precision (float32 | bfloat16; pipeline::parse_cnn_precision) on the commands that run the
// boundary detector.
void add_cnn_precision_flag(CLI::App* sub, std::string& value);
Result<demux::DtwPrecision> parse_dtw_precision(const std::string& value);

// --config FILE.toml: a WarpDemuX joblib model's signal-processing config (WarpDemuX's TOML),
// shared by the fused demux and every stage that reads a model; found by the model's name when
// not given. A model that is not a joblib file refuses it (load_model_file).
void add_model_config_flag(CLI::App* sub, std::string& value);
demux::ModelLoadOptions model_load_options(const std::string& config);

}  // namespace escpod::cli
