// What the fused demultiplexer's workers find out about one read (pipeline/demux.cpp), internal
// to the pipeline layer. The streaming engine keeps one record per read slot of its ring and
// calls reset() before each read (read_stream.hpp's reset_payload), so the record's buffers are
// allocated while the ring warms up and reused for every later read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "escpod/demux/classification.hpp"
#include "escpod/pipeline/detect/boundary_detector.hpp"

namespace escpod::pipeline::detail {

struct DemuxRead {
  Boundaries bounds;
  demux::Classification call;
  std::string reason;  // why unclassified (empty when classified)
  uint64_t n_decoded = 0;
  std::vector<double> features;  // kept only when fingerprinting for training

  // Every field as in DemuxRead{}, with the capacity of every string and vector kept.
  void reset() {
    reset_boundaries(bounds);
    reset_call(call);
    reason.clear();
    n_decoded = 0;
    features.clear();
  }

  // Each buffer is moved out, the struct default-assigned (so a field added later is reset
  // too) and the emptied buffer moved back in with its capacity.
  static void reset_boundaries(Boundaries& b) {
    std::vector<int64_t> candidates = std::move(b.polya_candidates);
    std::string method = std::move(b.method), fail_reason = std::move(b.fail_reason);
    b = Boundaries{};
    candidates.clear();
    method.clear();
    fail_reason.clear();
    b.polya_candidates = std::move(candidates);
    b.method = std::move(method);
    b.fail_reason = std::move(fail_reason);
  }
  static void reset_call(demux::Classification& c) {
    std::vector<double> probabilities = std::move(c.probabilities);
    c = demux::Classification{};
    probabilities.clear();
    c.probabilities = std::move(probabilities);
  }
};

}  // namespace escpod::pipeline::detail
