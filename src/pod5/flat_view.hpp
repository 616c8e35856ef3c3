#pragma once
// Bounds-checked reading of the flatbuffers in an Arrow IPC file (its footer and each message's
// header), enough to locate record batches and their buffers without Arrow's reader.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace escpod::pod5::detail {

class FlatView {
 public:
  FlatView(const uint8_t* data, size_t size) : m_data(data), m_size(size) {}
  template <typename T>
  bool read(size_t pos, T* out) const {
    if (pos > m_size || sizeof(T) > m_size - pos) return false;
    std::memcpy(out, m_data + pos, sizeof(T));
    return true;
  }
  // The table at the root of the buffer starting at `base`.
  bool root(size_t base, size_t* table) const {
    uint32_t off;
    if (!read(base, &off)) return false;
    *table = base + off;
    return *table < m_size;
  }
  // Position of field `idx` of `table` (0 when absent).
  bool field(size_t table, int idx, size_t* pos) const {
    int32_t soff;
    if (!read(table, &soff)) return false;
    const int64_t vt = static_cast<int64_t>(table) - soff;
    uint16_t vt_size;
    if (vt < 0 || !read(static_cast<size_t>(vt), &vt_size)) return false;
    const size_t entry = 4 + 2 * static_cast<size_t>(idx);
    if (entry + 2 > vt_size) {
      *pos = 0;
      return true;
    }
    uint16_t off;
    if (!read(static_cast<size_t>(vt) + entry, &off)) return false;
    *pos = off ? table + off : 0;
    return true;
  }
  // Follows the offset stored at `pos` (a table, vector or string).
  bool deref(size_t pos, size_t* out) const {
    uint32_t off;
    if (!read(pos, &off)) return false;
    *out = pos + off;
    return *out < m_size;
  }

 private:
  const uint8_t* m_data;
  size_t m_size;
};


}  // namespace escpod::pod5::detail
