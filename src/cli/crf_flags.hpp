// Command-line flags of the CTC-CRF head, shared by the fused `escpod demux` and
// `escpod demux basecall` (escpod/demux/crf_head.hpp has what each option means).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_head.hpp"

namespace escpod::cli {

// The flags fill the library's request (demux::crf_head_options parses it for the CLI and Python).
using CrfCliFlags = demux::CrfHeadRequest;

void add_crf_flags(CLI::App* sub, CrfCliFlags& flags);
// The CRF flags given on `sub`'s command line, as spelled there ("--decoder", ...): the run
// refuses them for a model that is not a CRF folder (demux::HeadOptions::crf_options_given).
std::vector<std::string> given_crf_flags(const CLI::App* sub);
// Validates the flags (invalid_argument naming the flag).
Result<demux::CrfHeadOptions> crf_head_options_from_flags(const CrfCliFlags& flags);

}  // namespace escpod::cli
