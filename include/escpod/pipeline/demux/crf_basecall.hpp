// `escpod demux basecall`: the CTC-CRF head on the reads a boundaries CSV names, one row per read
// of the classifications table with the decoded barcode sequence.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_head.hpp"
#include "escpod/pipeline/demux/demux_stages.hpp"

namespace escpod::pipeline {

struct CrfBasecallOptions {
  int n_threads = 1;
};

struct CrfBasecallReport {
  uint64_t n_boundaries = 0;     // usable rows of the boundaries CSV
  uint64_t n_dropped = 0;        // rows with adapter_end <= adapter_start
  uint64_t n_rows = 0;           // rows written
  uint64_t n_classified = 0;
  uint64_t n_not_in_inputs = 0;  // boundary rows whose read is in no input
  std::map<std::string, uint64_t> unclassified_reasons;
  double seconds = 0.0;
};

// Writes the header and one row per input read that the boundaries table names, in input order,
// with the model's head (it must read the signal window: a CRF model folder): the fused run's
// classifications table (classifications_csv.hpp: read_id,barcode,confidence,adapter_start,
// adapter_end,detector,reason, then the head's columns; the detector cell empty) and the decoded
// barcode sequence last (decoded_seq; empty when the read had no usable window or signal). A call
// a gate rejected is `unclassified` with the gate as its reason, its distances and scores kept.
Status basecall_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                const BoundariesTable& boundaries, const RunModel& model,
                                const CrfBasecallOptions& options, std::ostream& csv, CrfBasecallReport* report);


}  // namespace escpod::pipeline
