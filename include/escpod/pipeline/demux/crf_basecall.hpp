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

// A run's ModelSpec from what a user gives (the CLI's flags, the Python arguments), for every
// entry point alike (the fused run, each stage, --info): `method` ("cnn", "llr", or "" for the
// model's default) and `cnn_model` as given, with the CRF model folders' detector rules applied.
// A SeqTagger folder records no detector: without `method` it runs LLR, or the CNN when
// `cnn_model` names a file. A CRF bundle pins its detector (docs/demux.md §1.3): a `cnn` pin
// refuses `llr`, and its CNN file is used unless `cnn_model` names another (the pin's sha256 is
// then not checked); a bundle that pins none needs a method, except when `describing` (--info
// runs no detector). head.crf null: the CRF head's defaults.
Result<ModelSpec> resolve_model_spec(const std::filesystem::path& model, demux::HeadOptions head,
                                     const std::string& method, const std::filesystem::path& cnn_model,
                                     bool describing = false);

}  // namespace escpod::pipeline
