// Test access to CrfRefScorer's unchecked builder: emissions shorter than state_len (even empty),
// whose final position has several cells, so probabilities over every emission can be summed.
#pragma once

#include "escpod/demux/crf_lattice.hpp"

namespace escpod::demux::detail {

struct CrfRefScorerAccess {
  static Result<CrfRefScorer> build_any_length(const CrfGeometry& g, std::span<const BarcodeRef> refs) {
    return CrfRefScorer::build(g, refs, true, CrfBackend::kAuto);
  }
};

}  // namespace escpod::demux::detail
