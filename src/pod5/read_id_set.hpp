// A set of read ids for duplicate detection in writers: a ReadIdMap without values (open
// addressing over the 16-byte ids, ~21-32 bytes a read, no allocation per insert). Internal to
// the pod5 layer.
#pragma once

#include "escpod/pod5/read_id_map.hpp"

namespace escpod::pod5::detail {

class ReadIdSet {
 public:
  // Inserts `id`; false if it was already present.
  bool insert(const ReadId& id) { return m_ids.try_emplace(id, Nothing{}).second; }
  bool contains(const ReadId& id) const { return m_ids.contains(id); }
  size_t size() const { return m_ids.size(); }
  // Forgets every id, keeping the slots (no allocation when it fills again).
  void clear() { m_ids.clear(); }
  size_t memory_bytes() const { return m_ids.memory_bytes(); }

 private:
  struct Nothing {};
  ReadIdMap<Nothing> m_ids;
};

}  // namespace escpod::pod5::detail
