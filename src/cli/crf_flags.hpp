// Command-line flags of the CTC-CRF head, shared by the fused `escpod demux` and
// `escpod demux basecall` (escpod/demux/crf_head.hpp has what each option means).
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <string>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_head.hpp"

namespace escpod::cli {

// NaN / -1: unset (the model's or escapepod's default applies).
struct CrfCliFlags {
  std::string decoder, window, norm = "window", barcodes;
  int32_t min_margin = 0;
  double min_baseq = std::nan(""), min_mean_post = std::nan(""), min_crf_margin = std::nan(""),
         min_crf_prob = std::nan("");
  bool ref_scores = false;
  int64_t boundary_margin = -1, clamp_max_shift = -1;
  int32_t window_batch = -1;  // --crf-batch (-1: the head's default for the placement)
  std::string precision = "f32";  // --encoder-precision
};

void add_crf_flags(CLI::App* sub, CrfCliFlags& flags);
// Validates the flags (invalid_argument naming the flag).
Result<demux::CrfHeadOptions> crf_head_options(const CrfCliFlags& flags);

}  // namespace escpod::cli
