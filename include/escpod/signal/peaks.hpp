// Peak finding with scipy.signal.find_peaks semantics (scipy 1.x), as ADAPTed and WarpDemuX use
// it: candidate local maxima (flat tops reported at their middle, rounded down), then the
// distance filter, then prominence, then width. Specified in
// docs/demux.md §3.5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace escpod::signal {

struct PeakOptions {
  // Minimum index distance between kept peaks; <= 1 disables the filter (scipy requires >= 1;
  // values in (0, 1] keep everything). Peaks are visited from the highest down; each kept peak
  // removes the others closer than ceil(distance). Equal heights: the later index is visited
  // first (a stable ascending sort walked backwards; scipy's unstable argsort may differ only
  // there).
  double min_distance = 0.0;
  // Keep a peak only if its prominence >= min_prominence. Negative disables.
  double min_prominence = -1.0;
  // Keep a peak only if its width at `rel_height` >= min_width (samples). Negative disables.
  double min_width = -1.0;
  // Where the width is measured: peak - rel_height * prominence. scipy's default 0.5.
  double rel_height = 0.5;
};

// Properties of the peaks returned by the last find_peaks call, in the same order as its output.
// Filled only for the filters that were enabled (prominence and bases when min_prominence or
// min_width is enabled; widths when min_width is).
struct PeakProperties {
  std::vector<double> prominences;
  std::vector<size_t> left_bases;
  std::vector<size_t> right_bases;
  std::vector<double> widths;
};

// Per-worker buffers. Reused across calls; they grow to the largest input and then stay.
struct PeakScratch {
  std::vector<size_t> candidates;
  std::vector<std::pair<double, size_t>> by_height;  // (height, candidate) of one cluster
  std::vector<uint8_t> keep;
  std::vector<size_t> walk_edge, walk_beyond;  // prominence walks' extents
  PeakProperties props;
};

// Indices of the peaks of `x`, ascending, written to `peaks` (cleared first; its capacity is
// reused). Samples 0 and n-1 are never peaks. NaN compares false everywhere (as in scipy), so a
// NaN neighbour blocks a peak. Properties of the returned peaks are in scratch.props afterwards.
// Thread safety: reentrant; scratch and output are the caller's.
void find_peaks(std::span<const double> x, const PeakOptions& options, PeakScratch& scratch,
                std::vector<size_t>& peaks);

}  // namespace escpod::signal
