// FileReader's file mapping and the release of its pages (pod5/file_reader_parts.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "pod5/file_reader_parts.hpp"

namespace escpod::pod5::detail {

Status FileMapping::map_file(const std::filesystem::path& path, uint64_t file_size) {
  auto mapped = arrow::io::MemoryMappedFile::Open(path.string(), arrow::io::FileMode::READ);
  if (!mapped.ok()) return from_arrow(mapped.status(), path.string() + ": cannot map");
  file = *mapped;
  // The mapping's base: ReadAt on a memory-mapped file is a zero-copy slice of the map (one
  // byte: a whole-file ReadAt would advise reading all of it ahead, see table_bytes).
  auto size = file->GetSize();
  if (!size.ok() || static_cast<uint64_t>(*size) != file_size) {
    return Status::io_error(path.string() + ": changed while being opened (size)");
  }
  auto first = file->ReadAt(0, 1);
  if (!first.ok()) return from_arrow(first.status(), path.string() + ": cannot map");
  map_begin = (*first)->data();
  map_size = file_size;
  return Status::ok();
}

Status FileMapping::adopt(const std::shared_ptr<arrow::io::MemoryMappedFile>& main, uint64_t file_size,
                          const std::filesystem::path& path) {
  auto whole = main->ReadAt(0, static_cast<int64_t>(file_size));
  if (!whole.ok()) return from_arrow(whole.status(), path.string() + ": cannot map");
  file = main;
  map_begin = (*whole)->data();
  map_size = static_cast<size_t>((*whole)->size());
  return Status::ok();
}

void FileMapping::locate_reads_table(const EmbeddedTable& t) {
  if (map_begin && t.offset >= 0 && static_cast<size_t>(t.offset + t.length) <= map_size) {
    reads_table_begin = map_begin + t.offset;
    reads_table_end = reads_table_begin + t.length;
  }
}

arrow::Result<std::shared_ptr<arrow::Buffer>> FileMapping::table_bytes(const EmbeddedTable& t,
                                                                       bool plain_view) const {
  if (!plain_view) return file->ReadAt(t.offset, t.length);
  if (t.offset < 0 || t.length < 0 || static_cast<uint64_t>(t.offset) > map_size ||
      static_cast<uint64_t>(t.length) > map_size - static_cast<uint64_t>(t.offset)) {
    return arrow::Status::IOError("table at ", t.offset, " (", t.length, " bytes) outside the file");
  }
  return std::make_shared<arrow::Buffer>(map_begin + t.offset, t.length);
}

void FileMapping::drop_range(uintptr_t lo, uintptr_t hi) const {
  if (!map_begin) return;
  // Only ever the file's own mapping (MADV_DONTNEED would zero anonymous memory).
  lo = std::max(lo, reinterpret_cast<uintptr_t>(map_begin));
  hi = std::min(hi, reinterpret_cast<uintptr_t>(map_begin) + map_size);
  if (lo >= hi) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (lo + page - 1) & ~(page - 1);
  const uintptr_t b = hi & ~(page - 1);
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

std::pair<const uint8_t*, const uint8_t*> FileMapping::batch_span(const arrow::RecordBatch& rb) const {
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  const uint8_t* map_end = map_begin + map_size;
  auto visit = [&](auto&& self, const arrow::ArrayData& d) -> void {
    for (const auto& buf : d.buffers) {
      if (!buf || buf->size() == 0) continue;
      const uint8_t* p = buf->data();
      if (p < map_begin || p + buf->size() > map_end) continue;  // not in the mapping
      if (!lo || p < lo) lo = p;
      if (!hi || p + buf->size() > hi) hi = p + buf->size();
    }
    for (const auto& child : d.child_data) self(self, *child);
  };
  for (const auto& column : rb.column_data()) visit(visit, *column);
  return {lo, hi};
}

void FileMapping::drop_reads_batch_pages(const arrow::RecordBatch& rb) const {
  const auto [lo, hi] = batch_span(rb);
  if (!lo) return;
  if (!reads_table_begin || lo < reads_table_begin || hi > reads_table_end) {
    drop_pages(lo, hi);
    return;
  }
  const auto lo_u = reinterpret_cast<uintptr_t>(lo), hi_u = reinterpret_cast<uintptr_t>(hi);
  uintptr_t mark = reads_dropped_until.load(std::memory_order_relaxed);
  if (mark != 0 && hi_u <= mark && mark - hi_u < kRemapSpan) {
    // Just behind the mark (decoded out of order): its own span now; what the kernel mapped
    // around it goes with the next forward release's look-behind.
    drop_pages(lo, hi);
    return;
  }
  // The pass's next batch; or the first of a pass: no mark yet, or far behind it (a second
  // pass over the table, which would otherwise release only each batch's own span).
  const uintptr_t from = mark == 0   ? reinterpret_cast<uintptr_t>(reads_table_begin)
                         : hi_u > mark ? mark
                                       : lo_u;
  if (!reads_dropped_until.compare_exchange_strong(mark, hi_u)) {
    drop_pages(lo, hi);  // another thread moved the mark meanwhile
    return;
  }
  drop_behind(from, hi);
}

}  // namespace escpod::pod5::detail
