// Selecting the reads of a boundaries table while streaming POD5 inputs, and their rows as the
// per-read steps (read_featurize.hpp) take boundaries: shared by the stages that start from a
// boundaries CSV (fingerprint, CRF basecall). Internal.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "escpod/pipeline/demux/demux_stages.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline::detail {

// A row's boundaries as the detector would have given them: found (read_boundaries_csv drops rows
// with adapter_end <= adapter_start), no poly(A) end, no method.
inline Boundaries row_boundaries(const BoundaryRow& row) {
  Boundaries b;
  b.adapter_start = row.adapter_start;
  b.adapter_end = row.adapter_end;
  b.success = true;
  return b;
}

// Read id -> row of a BoundariesTable, and which rows the inputs reached. Later rows of a read id
// win (one answer per read).
class BoundaryRowIndex {
 public:
  explicit BoundaryRowIndex(const BoundariesTable& table) : m_seen(table.rows.size(), 0) {
    m_index.reserve(table.rows.size());
    for (size_t i = 0; i < table.rows.size(); ++i) m_index[table.rows[i].read_id] = i;
  }

  // The `select` of for_each_read_ordered: true, with *row set and that row marked seen, when
  // `id` has a row. Not thread-safe; the stream calls it from its serial source.
  bool select(const pod5::ReadId& id, size_t* row) {
    const auto it = m_index.find(id);
    if (it == m_index.end()) return false;
    *row = it->second;
    m_seen[it->second] = 1;
    return true;
  }

  // Rows whose read id none of the inputs held (rows shadowed by a later row count too).
  uint64_t n_unseen() const {
    return static_cast<uint64_t>(std::count(m_seen.begin(), m_seen.end(), uint8_t{0}));
  }

 private:
  std::unordered_map<pod5::ReadId, size_t, pod5::ReadIdHash> m_index;
  std::vector<uint8_t> m_seen;
};

}  // namespace escpod::pipeline::detail
