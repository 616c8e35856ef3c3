// A hash map from read id to a small value: open addressing over the 16-byte ids themselves
// (linear probing, load <= 3/4, the all-zero id marking empty slots and kept on its own), keys
// and values in two flat arrays. No allocation per insert, ~21-32 bytes a read plus the values,
// where std::unordered_map takes ~64 plus the value (node, pointer, bucket), and an insert costs
// a probe or two instead of a node allocation. With an empty Value it is a set (no value array).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

template <class Value>
class ReadIdMap {
  static constexpr bool kSet = std::is_empty_v<Value>;

 public:
  // Inserts (id, value) unless `id` is present: the stored value and whether it was inserted.
  std::pair<Value*, bool> try_emplace(const ReadId& id, const Value& value) {
    if (is_zero(id)) {
      const bool fresh = !m_has_zero;
      if (fresh) m_zero_value = value;
      m_has_zero = true;
      m_size += fresh;
      return {&m_zero_value, fresh};
    }
    if ((m_used + 1) * 4 > m_keys.size() * 3) rehash(m_keys.empty() ? 1024 : 2 * m_keys.size());
    const size_t i = slot_of(id);
    if (!is_zero(m_keys[i])) return {value_at(i), false};
    m_keys[i] = id;
    if constexpr (!kSet) m_values[i] = value;
    ++m_used;
    ++m_size;
    return {value_at(i), true};
  }
  // The value stored for `id`, or nullptr.
  const Value* find(const ReadId& id) const {
    if (is_zero(id)) return m_has_zero ? &m_zero_value : nullptr;
    if (m_keys.empty()) return nullptr;
    const size_t i = slot_of(id);
    return is_zero(m_keys[i]) ? nullptr : value_at(i);
  }
  bool contains(const ReadId& id) const { return find(id) != nullptr; }
  size_t size() const { return m_size; }
  // Room for n ids without growing.
  void reserve(size_t n) {
    size_t slots = m_keys.empty() ? 1024 : m_keys.size();
    while (n * 4 > slots * 3) slots *= 2;
    if (slots > m_keys.size()) rehash(slots);
  }
  // Forgets every id, keeping the slots (no allocation when it fills again).
  void clear() {
    std::fill(m_keys.begin(), m_keys.end(), ReadId{});
    m_used = 0;
    m_size = 0;
    m_has_zero = false;
  }
  size_t memory_bytes() const { return m_keys.capacity() * sizeof(ReadId) + m_values.capacity() * sizeof(Value); }

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
  // The slot holding non-zero `id`, or the empty slot where it would go (the table is never full).
  size_t slot_of(const ReadId& id) const {
    const size_t mask = m_keys.size() - 1;
    size_t i = hash(id) & mask;
    while (!is_zero(m_keys[i]) && !(m_keys[i] == id)) i = (i + 1) & mask;
    return i;
  }
  Value* value_at(size_t i) const {
    if constexpr (kSet) {
      return &m_zero_value;  // an empty Value: any address will do
    } else {
      return const_cast<Value*>(&m_values[i]);
    }
  }
  void rehash(size_t n_slots) {
    std::vector<ReadId> keys(n_slots);
    std::vector<Value> values(kSet ? 0 : n_slots);
    keys.swap(m_keys);
    values.swap(m_values);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (is_zero(keys[i])) continue;
      const size_t j = slot_of(keys[i]);
      m_keys[j] = keys[i];
      if constexpr (!kSet) m_values[j] = values[i];
    }
  }

  std::vector<ReadId> m_keys;
  std::vector<Value> m_values;  // beside m_keys (empty for a set)
  mutable Value m_zero_value{};
  size_t m_used = 0;  // non-zero ids in m_keys
  size_t m_size = 0;
  bool m_has_zero = false;
};

}  // namespace escpod::pod5
