// Internal: the calls `bam-demux` joins to records (docs/formats.md, "The calls"): one table from
// classifications CSVs of any layout escpod, escapepod or WarpDemuX write, or from .p5s sidecars.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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

// Calls by read id, built once: one flat array sorted by a mixed hash of the id, and the offset
// of every 2^k-th hash range (~4 entries a range), so the join holds ~36 bytes a call and a
// lookup reads one or two cache lines, whatever the number of records or the ids' pattern.
class CallIndex {
 public:
  struct Origin {
    uint32_t file = 0;  // index of the table it came from
    uint32_t line = 0;
  };
  void add(const pod5::ReadId& id, const BamCall& call, Origin origin);
  // Sorts and indexes what was added. A read id added twice: kInvalidArgument naming both places
  // (`where(origin)` gives "file:line").
  Status build(const std::function<std::string(Origin)>& where);
  const BamCall* find(const pod5::ReadId& id) const;
  size_t size() const { return m_entries.size(); }
  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : m_entries) f(e.id, e.call);
  }

 private:
  struct Entry {
    pod5::ReadId id;
    BamCall call;
    Origin origin;
  };
  static uint64_t mix(const pod5::ReadId& id);
  // While loading: fixed-size chunks (no doubling copy), moved into m_entries by build().
  static constexpr size_t kChunk = 1 << 16;
  std::vector<std::vector<Entry>> m_chunks;
  std::vector<Entry> m_entries;
  std::vector<uint32_t> m_range_start;  // 2^m_bits + 1 offsets into m_entries
  int m_bits = 0;
};

struct BamCalls {
  static constexpr uint32_t kUnclassified = 0;  // labels[0] == "unclassified"
  std::vector<std::string> labels{"unclassified"};
  std::vector<std::string> sources;  // "escpod", "escpod-crf", "warpdemux", "escapepod", "sidecar"
  CallIndex by_read;
};

// Every call of `source`. Errors name the file and line: a read id listed twice (within a file
// or across shards), a table without a read_id or label column, a label that is neither a
// barcode, the noise class nor a name safe as a file-name part.
Result<BamCalls> read_bam_calls(const BamCallsSource& source);

}  // namespace escpod::pipeline::detail
