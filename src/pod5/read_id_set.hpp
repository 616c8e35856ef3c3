// A set of read ids for duplicate detection in writers: open addressing over the 16-byte ids
// themselves (linear probing, load <= 3/4), ~21-32 bytes a read where std::unordered_set takes
// ~64 (node, pointer, bucket), and no allocation per insert. Internal to the pod5 layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5::detail {

class ReadIdSet {
 public:
  // Inserts `id`; false if it was already present.
  bool insert(const ReadId& id) {
    if (is_zero(id)) {  // the all-zero id marks empty slots; tracked on its own
      const bool fresh = !m_has_zero;
      m_has_zero = true;
      m_size += fresh;
      return fresh;
    }
    if ((m_used + 1) * 4 > m_slots.size() * 3) grow();
    if (!place(m_slots, id)) return false;
    ++m_used;
    ++m_size;
    return true;
  }
  bool contains(const ReadId& id) const {
    if (is_zero(id)) return m_has_zero;
    if (m_slots.empty()) return false;
    const size_t mask = m_slots.size() - 1;
    for (size_t i = hash(id) & mask;; i = (i + 1) & mask) {
      if (is_zero(m_slots[i])) return false;
      if (m_slots[i] == id) return true;
    }
  }
  size_t size() const { return m_size; }
  // Forgets every id, keeping the slots (no allocation when it fills again).
  void clear() {
    std::fill(m_slots.begin(), m_slots.end(), ReadId{});
    m_used = 0;
    m_size = 0;
    m_has_zero = false;
  }
  size_t memory_bytes() const { return m_slots.capacity() * sizeof(ReadId); }

 private:
  static bool is_zero(const ReadId& id) {
    uint64_t a, b;
    std::memcpy(&a, id.bytes.data(), 8);
    std::memcpy(&b, id.bytes.data() + 8, 8);
    return (a | b) == 0;
  }
  // Both halves mixed: random UUIDs need none, but sequential or hand-made ids must spread too.
  static size_t hash(const ReadId& id) {
    uint64_t a, b;
    std::memcpy(&a, id.bytes.data(), 8);
    std::memcpy(&b, id.bytes.data() + 8, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ULL)) * 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 29;
    return static_cast<size_t>(h);
  }
  // Puts a non-zero id in `slots` (a power of two, never full); false if it is already there.
  static bool place(std::vector<ReadId>& slots, const ReadId& id) {
    const size_t mask = slots.size() - 1;
    for (size_t i = hash(id) & mask;; i = (i + 1) & mask) {
      if (is_zero(slots[i])) {
        slots[i] = id;
        return true;
      }
      if (slots[i] == id) return false;
    }
  }
  void grow() {
    std::vector<ReadId> bigger(m_slots.empty() ? 1024 : 2 * m_slots.size());
    for (const ReadId& id : m_slots)
      if (!is_zero(id)) place(bigger, id);
    m_slots.swap(bigger);
  }

  std::vector<ReadId> m_slots;
  size_t m_used = 0;  // non-zero ids in m_slots
  size_t m_size = 0;
  bool m_has_zero = false;
};

}  // namespace escpod::pod5::detail
