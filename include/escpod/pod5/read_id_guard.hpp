// Finding repeated read ids among any number of reads in bounded memory (issue 13, part 8).
//
// Ids are checked at once against a window of the most recent ones (a hash set of at most
// `window` ids, so a repeat close by fails where it happens, e.g. at add_read), and every id also
// goes, with its source number, to an external sort (escpod/core/external_sort.hpp) whose runs
// spill to an unlinked scratch file beside the output. find_duplicate() after the last id merges
// the runs and reports the smallest repeated id with the sources of its first two occurrences,
// so a repeat anywhere is still found before an output is committed. Memory stays below
// ~(window * 32 + run_records * 20 + fan_in * read_records * 20) bytes, ~1.5 MiB with the
// defaults, whatever the number of reads; ~20 bytes a read go to disk. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "escpod/core/external_sort.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

namespace detail {
class ReadIdSet;
}

struct ReadIdGuardLimits {
  size_t window = 8192;  // ids checked at insert time (>= 1)
  ExternalSortLimits sort{};
};

class ReadIdGuard {
 public:
  struct Duplicate {
    ReadId id;
    uint32_t first_source = 0;   // sources of the id's first two occurrences (first <= second)
    uint32_t second_source = 0;
  };

  // Spills go to `scratch_folder` (an output's folder), only once more than
  // limits.sort.run_records ids were inserted.
  explicit ReadIdGuard(std::filesystem::path scratch_folder, ReadIdGuardLimits limits = {});
  ~ReadIdGuard();
  ReadIdGuard(ReadIdGuard&&) noexcept;
  ReadIdGuard& operator=(ReadIdGuard&&) noexcept;

  // Records `id` as coming from `source` (a caller's file number). false: `id` repeats one of
  // the last `window` ids (not recorded again). kIoError if a spill fails.
  Result<bool> insert(const ReadId& id, uint32_t source = 0);

  // After the last insert: a repeated id not yet reported by insert, or nullopt if all ids
  // inserted are distinct. Consumes the ids (the guard starts empty again).
  Result<std::optional<Duplicate>> find_duplicate();

  uint64_t size() const { return m_sorted.size(); }

 private:
  struct Entry {
    ReadId id;
    uint32_t source;
  };
  struct ById {
    bool operator()(const Entry& a, const Entry& b) const {
      const int c = std::memcmp(a.id.bytes.data(), b.id.bytes.data(), 16);
      return c != 0 ? c < 0 : a.source < b.source;
    }
  };

  size_t m_window;
  std::unique_ptr<detail::ReadIdSet> m_recent;
  ExternalSorter<Entry, ById> m_sorted;
};

}  // namespace escpod::pod5
