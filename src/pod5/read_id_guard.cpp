#include "escpod/pod5/read_id_guard.hpp"

#include "read_id_set.hpp"

namespace escpod::pod5 {

ReadIdGuard::ReadIdGuard(std::filesystem::path scratch_folder, ReadIdGuardLimits limits)
    : m_window(std::max<size_t>(limits.window, 1)),
      m_recent(std::make_unique<detail::ReadIdSet>()),
      m_sorted(std::move(scratch_folder), limits.sort) {}

ReadIdGuard::~ReadIdGuard() = default;
ReadIdGuard::ReadIdGuard(ReadIdGuard&&) noexcept = default;
ReadIdGuard& ReadIdGuard::operator=(ReadIdGuard&&) noexcept = default;

Result<bool> ReadIdGuard::insert(const ReadId& id, uint32_t source) {
  if (m_recent->size() >= m_window) m_recent->clear();  // keeps its slots: no allocation
  if (!m_recent->insert(id)) return false;
  ESCPOD_RETURN_IF_ERROR(m_sorted.add(Entry{id, source}));
  return true;
}

Result<std::optional<ReadIdGuard::Duplicate>> ReadIdGuard::find_duplicate() {
  m_recent->clear();
  std::optional<Duplicate> found;
  std::optional<Entry> last;
  // Stops the drain early (a sentinel status) once a repeat is seen: the ids after it are moot.
  const Status stop = Status::internal("duplicate found");
  Status s = m_sorted.drain([&](const Entry& e) -> Status {
    if (last && last->id == e.id) {
      found = Duplicate{e.id, last->source, e.source};
      return stop;
    }
    last = e;
    return Status::ok();
  });
  if (!s.is_ok() && !found) return s;
  return found;
}

}  // namespace escpod::pod5
