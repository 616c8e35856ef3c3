// `escpod demux basecall`: the CTC-CRF head on the reads a boundaries CSV names, one CSV row per
// read with the decoded barcode sequence (behaviour doc section 2.5).
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
  std::filesystem::path model_path;  // a CRF model folder (SeqTagger or bundle)
  demux::CrfHeadOptions head;
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

// Writes the header and one row per input read that the boundaries table names, in input
// order: read_id,barcode,confidence,best_dist,second_best_dist,adapter_end,decoded_len,decoded_seq
// [,baseq (beam search)][,crf_logp,crf_margin,crf_best,mean_logpost (lattice scoring)].
// barcode is the nearest reference's name, or `unclassified` when a gate rejected the call (its
// distances and scores kept) or the read had no usable window / signal (empty sequence and empty
// distance and score cells). confidence = edit margin, empty with one reference.
Status basecall_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                const BoundariesTable& boundaries, const CrfBasecallOptions& options,
                                std::ostream& csv, CrfBasecallReport* report);

// A fused demux run with a CRF model folder (the CLI's `escpod demux`, the Python API's
// `demux`): the CRF head's options for the run (HeadOptions::crf) and the detector. A SeqTagger
// folder records no detector: without `method` it runs LLR, or the CNN when `cnn_model` names a
// file. A CRF bundle pins its detector (behaviour doc 1.3, 2.10): a `cnn` pin refuses `llr`, and
// its CNN file is used unless `cnn_model` names another (the pin's sha256 is then not checked); a
// bundle that pins none needs a method, except when `describing` (--info runs no detector).
// Other models: `method` and `cnn_model` as given.
struct CrfRunSetup {
  std::string cnn_model;  // the CNN file the run uses ("" = none)
  std::string method;     // "cnn", "llr", or "" for the model's default
  std::shared_ptr<const demux::CrfHeadOptions> crf;  // for DemuxOptions::head.crf
};
Result<CrfRunSetup> setup_crf_run(const std::filesystem::path& model, const demux::CrfHeadOptions& options,
                                  const std::string& cnn_model, const std::string& method, bool describing);

}  // namespace escpod::pipeline
