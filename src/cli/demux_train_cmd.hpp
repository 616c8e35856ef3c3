// escpod demux train-svm: trains a WarpDemuX-compatible DTW-kernel SVM from a labelled
// fingerprint table (escpod/demux/train_svm.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.hpp"

namespace escpod::cli {

// Adds `train-svm` under the `demux` subcommand object.
void register_demux_train_svm(CLI::App* demux_subcommand, GlobalOptions& global);

}  // namespace escpod::cli
