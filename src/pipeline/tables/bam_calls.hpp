// Internal: the calls `bam-demux` joins to records (docs/formats.md, "The calls"): one table from
// classifications CSVs of any layout escpod, escapepod or WarpDemuX write, or from .p5s sidecars.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/tables/bam_demux.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline::detail {

struct BamCall {
  uint32_t label = 0;      // index into BamCalls::labels
  uint8_t source = 0;      // index into BamCalls::sources
  bool has_confidence = false;
  mutable bool seen = false;  // a record named the read (bam-demux's census sets it)
  float confidence = 0.0f;
};

struct BamCalls {
  static constexpr uint32_t kUnclassified = 0;  // labels[0] == "unclassified"
  std::vector<std::string> labels{"unclassified"};
  std::vector<std::string> sources;  // "escpod", "escpod-crf", "warpdemux", "escapepod", "sidecar"
  std::unordered_map<pod5::ReadId, BamCall, pod5::ReadIdHash> by_read;
};

// Every call of `source`. Errors name the file and line: a read id listed twice (within a file
// or across shards), a table without a read_id or label column, a label that is neither a
// barcode, the noise class nor a name safe as a file-name part.
Result<BamCalls> read_bam_calls(const BamCallsSource& source);

}  // namespace escpod::pipeline::detail
