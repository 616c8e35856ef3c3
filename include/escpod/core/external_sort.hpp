// Sorting more fixed-size records than should stay in memory: records gather in a buffer of
// at most `run_records`; a full buffer is sorted and appended to an anonymous scratch file as
// one run; drain() merges the runs (at most `fan_in` at a time, in extra passes when there are
// more) and hands every record to a callback in sorted order. Memory is bounded by the limits,
// whatever the number of records: run_records + fan_in * read_records records, plus 16 bytes per
// run on disk. Used for duplicate read-id checks over runs of any size (pod5::ReadIdGuard, the
// merge pre-pass). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <queue>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod {

namespace detail {

// A scratch file opened in a folder and unlinked at once: nothing is left behind on any exit,
// signals included. Move-only; the descriptor closes with the object.
class AnonymousScratchFile {
 public:
  AnonymousScratchFile() = default;
  AnonymousScratchFile(AnonymousScratchFile&& other) noexcept;
  AnonymousScratchFile& operator=(AnonymousScratchFile&& other) noexcept;
  AnonymousScratchFile(const AnonymousScratchFile&) = delete;
  AnonymousScratchFile& operator=(const AnonymousScratchFile&) = delete;
  ~AnonymousScratchFile();

  // kIoError naming `folder` when no file can be made there.
  static Result<AnonymousScratchFile> create(const std::filesystem::path& folder);
  bool is_open() const { return m_fd >= 0; }
  // Appends `bytes` at the end of the file; returns the offset they start at.
  Result<uint64_t> append(std::span<const uint8_t> bytes);
  // Reads exactly out.size() bytes at `offset` (kIoError on a short read).
  Status read_at(uint64_t offset, std::span<uint8_t> out) const;
  // Empties the file (its runs are all consumed).
  Status truncate();

 private:
  int m_fd = -1;
  uint64_t m_size = 0;
  std::filesystem::path m_folder;  // for messages
};

}  // namespace detail

struct ExternalSortLimits {
  size_t run_records = 32768;  // records held in memory before a run is spilled (>= 1)
  size_t fan_in = 64;          // runs merged at once (>= 2)
  size_t read_records = 512;   // records read from a run per refill (>= 1)
};

// T: trivially copyable; Less: a strict weak order on T. Records that compare equal come out
// next to each other in an unspecified order among themselves.
template <class T, class Less = std::less<T>>
class ExternalSorter {
  static_assert(std::is_trivially_copyable_v<T>, "records are spilled as bytes");

 public:
  // Spills (if any) go to an unlinked file in `scratch_folder`, made on the first spill.
  explicit ExternalSorter(std::filesystem::path scratch_folder, ExternalSortLimits limits = {},
                          Less less = {})
      : m_folder(std::move(scratch_folder)), m_limits(limits), m_less(less) {
    m_limits.run_records = std::max<size_t>(m_limits.run_records, 1);
    m_limits.fan_in = std::max<size_t>(m_limits.fan_in, 2);
    m_limits.read_records = std::max<size_t>(m_limits.read_records, 1);
  }

  // Adds a record; spills a full buffer (kIoError if the scratch file cannot be written).
  Status add(const T& record) {
    if (m_buffer.size() >= m_limits.run_records) ESCPOD_RETURN_IF_ERROR(spill());
    m_buffer.push_back(record);
    ++m_size;
    return Status::ok();
  }
  uint64_t size() const { return m_size; }
  bool spilled() const { return !m_runs.empty(); }
  size_t n_runs() const { return m_runs.size(); }

  // Calls fn(const T&) -> Status on every record added, in sorted order, stopping at the first
  // error fn returns. Empties the sorter (it can be filled and drained again).
  template <class Fn>
  Status drain(Fn&& fn) {
    Status s = drain_all(fn);
    m_buffer.clear();
    m_runs.clear();
    m_size = 0;
    if (m_file.is_open()) {
      Status t = m_file.truncate();
      if (s.is_ok()) s = t;
    }
    return s;
  }

 private:
  struct Run {
    uint64_t offset = 0;  // bytes into the file
    uint64_t count = 0;   // records
  };
  // Reads a run through a small buffer.
  struct Cursor {
    Run run;
    uint64_t next = 0;  // records of the run consumed into `buf` so far
    std::vector<T> buf;
    size_t pos = 0;
  };

  static std::span<const uint8_t> bytes_of(const std::vector<T>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
  }

  Status spill() {
    if (m_buffer.empty()) return Status::ok();
    std::sort(m_buffer.begin(), m_buffer.end(), m_less);
    if (!m_file.is_open()) {
      ESCPOD_ASSIGN_OR_RETURN(m_file, detail::AnonymousScratchFile::create(m_folder));
    }
    ESCPOD_ASSIGN_OR_RETURN(uint64_t offset, m_file.append(bytes_of(m_buffer)));
    m_runs.push_back({offset, m_buffer.size()});
    m_buffer.clear();
    return Status::ok();
  }

  // Loads the next records of `c` into its buffer; false when the run is used up.
  Result<bool> refill(const detail::AnonymousScratchFile& file, Cursor& c) const {
    const uint64_t n = std::min<uint64_t>(m_limits.read_records, c.run.count - c.next);
    if (n == 0) return false;
    c.buf.resize(static_cast<size_t>(n));
    ESCPOD_RETURN_IF_ERROR(file.read_at(c.run.offset + c.next * sizeof(T),
                                        {reinterpret_cast<uint8_t*>(c.buf.data()), c.buf.size() * sizeof(T)}));
    c.next += n;
    c.pos = 0;
    return true;
  }

  // Merges `runs` of `file` in order, calling out(const T&) -> Status.
  template <class Out>
  Status merge(const detail::AnonymousScratchFile& file, std::span<const Run> runs, Out&& out) const {
    std::vector<Cursor> cursors(runs.size());
    auto later = [&](size_t a, size_t b) {  // min-heap on the cursors' current records
      return m_less(cursors[b].buf[cursors[b].pos], cursors[a].buf[cursors[a].pos]);
    };
    std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
    for (size_t i = 0; i < runs.size(); ++i) {
      cursors[i].run = runs[i];
      ESCPOD_ASSIGN_OR_RETURN(bool any, refill(file, cursors[i]));
      if (any) heap.push(i);
    }
    while (!heap.empty()) {
      const size_t i = heap.top();
      heap.pop();
      Cursor& c = cursors[i];
      ESCPOD_RETURN_IF_ERROR(out(c.buf[c.pos]));
      if (++c.pos == c.buf.size()) {
        ESCPOD_ASSIGN_OR_RETURN(bool more, refill(file, c));
        if (!more) continue;
      }
      heap.push(i);
    }
    return Status::ok();
  }

  // One pass: every fan_in consecutive runs become one run of a fresh file.
  Status merge_pass() {
    ESCPOD_ASSIGN_OR_RETURN(detail::AnonymousScratchFile next, detail::AnonymousScratchFile::create(m_folder));
    std::vector<Run> merged;
    std::vector<T> out;
    out.reserve(m_limits.run_records);
    for (size_t first = 0; first < m_runs.size(); first += m_limits.fan_in) {
      const size_t n = std::min(m_limits.fan_in, m_runs.size() - first);
      Run run{0, 0};
      bool started = false;
      auto flush = [&]() -> Status {
        if (out.empty()) return Status::ok();
        ESCPOD_ASSIGN_OR_RETURN(uint64_t offset, next.append(bytes_of(out)));
        if (!started) run.offset = offset;
        started = true;
        run.count += out.size();
        out.clear();
        return Status::ok();
      };
      ESCPOD_RETURN_IF_ERROR(merge(m_file, std::span<const Run>(m_runs).subspan(first, n),
                                   [&](const T& r) -> Status {
                                     out.push_back(r);
                                     return out.size() >= m_limits.run_records ? flush() : Status::ok();
                                   }));
      ESCPOD_RETURN_IF_ERROR(flush());
      merged.push_back(run);
    }
    m_file = std::move(next);
    m_runs = std::move(merged);
    return Status::ok();
  }

  template <class Fn>
  Status drain_all(Fn& fn) {
    if (m_runs.empty()) {  // everything fits in memory
      std::sort(m_buffer.begin(), m_buffer.end(), m_less);
      for (const T& r : m_buffer) ESCPOD_RETURN_IF_ERROR(fn(r));
      return Status::ok();
    }
    ESCPOD_RETURN_IF_ERROR(spill());
    std::vector<T>().swap(m_buffer);  // the merge's buffers take its place
    while (m_runs.size() > m_limits.fan_in) ESCPOD_RETURN_IF_ERROR(merge_pass());
    return merge(m_file, m_runs, [&](const T& r) -> Status { return fn(r); });
  }

  std::filesystem::path m_folder;
  ExternalSortLimits m_limits;
  Less m_less;
  std::vector<T> m_buffer;
  std::vector<Run> m_runs;
  detail::AnonymousScratchFile m_file;
  uint64_t m_size = 0;
};

}  // namespace escpod
