// escpod demux detect | fingerprint | classify: the demultiplexer's stages one at a time,
// exchanging CSV files (escpod/pipeline/demux_stages.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.hpp"

namespace escpod::cli {

// Adds `detect`, `fingerprint` and `classify` under the `demux` subcommand object.
void register_demux_stages(CLI::App* demux_subcommand, GlobalOptions& global);

}  // namespace escpod::cli
