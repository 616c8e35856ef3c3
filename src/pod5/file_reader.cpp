#include "escpod/pod5/file_reader.hpp"

#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "pod5/arrow_types.hpp"
#include "pod5/container.hpp"
#include "pod5/flat_view.hpp"
#include "pod5/ipc_layout.hpp"
#include "pod5/reads_rows.hpp"
#include "pod5/recovered_tables.hpp"

namespace escpod::pod5 {

using detail::from_arrow;
using detail::storage_of;

namespace {

// Direct pointers into one memory-mapped signal batch, so reading a chunk costs no Arrow calls.
struct SignalBatchView {
  std::shared_ptr<arrow::RecordBatch> batch;  // keeps the buffers alive (null: the mapping does)
  const uint8_t* read_ids = nullptr;          // 16 bytes a row
  const int64_t* offsets = nullptr;           // n_rows + 1 (bytes for VBZ, samples for raw)
  const uint8_t* vbz_data = nullptr;
  const int16_t* raw_values = nullptr;
  int64_t data_size = 0;                      // bytes (VBZ) or values (raw) addressable
  const uint32_t* samples = nullptr;
  int64_t n_rows = 0;
  // The batch's signal bytes inside the mapping, and the lowest address of any of its buffers
  // (ids, offsets, sample counts, data), for dropping its pages once read.
  const uint8_t* bytes_begin = nullptr;
  const uint8_t* bytes_end = nullptr;
  const uint8_t* region_begin = nullptr;
  // Views read with pread (random-access opens): the ids, offsets and sample counts, copied.
  std::vector<uint64_t> owned;
};

// How a V0-V2 dictionary-of-struct entry or a V3+ dictionary entry maps to our fields.
struct DictMaps {
  // V3+: straight string dictionaries (file-wide, from the last batch: deltas only append).
  // V0-V2: derived per struct-dictionary entry.
  std::vector<uint32_t> pore_channel;
  std::vector<uint8_t> pore_well;
  std::vector<int16_t> pore_type;  // -> pore_types
  std::vector<float> calib_offset, calib_scale;
  std::vector<int16_t> end_reason;  // -> end_reasons
  std::vector<uint8_t> end_forced;
  std::vector<int16_t> run_info;  // -> run_info_ids
};

Status type_error(const std::string& path, const char* table, const std::string& column,
                  const std::string& expected, const arrow::DataType& found) {
  return Status::corrupt(path + ": " + table + " table column '" + column + "' has type " +
                         found.ToString() + ", expected " + expected);
}

int16_t intern(std::vector<std::string>& table, const std::string& value) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i] == value) return static_cast<int16_t>(i);
  table.push_back(value);
  return static_cast<int16_t>(table.size() - 1);
}

std::vector<std::pair<std::string, std::string>> map_entries(const arrow::MapArray& map,
                                                             int64_t row) {
  std::vector<std::pair<std::string, std::string>> out;
  if (map.IsNull(row)) return out;
  auto keys = std::static_pointer_cast<arrow::StringArray>(map.keys());
  auto items = std::static_pointer_cast<arrow::StringArray>(map.items());
  for (int32_t j = map.value_offset(row); j < map.value_offset(row) + map.value_length(row); ++j) {
    out.emplace_back(keys->GetString(j), items->IsNull(j) ? "" : items->GetString(j));
  }
  return out;
}

// Reads row `row` of a run-info struct/record (columns looked up by name through `get`).
template <typename Get>
Status run_info_from_columns(const Get& get, int64_t row, RunInfo* out, const std::string& ctx) {
  auto str = [&](const char* name, std::string* dst) -> Status {
    auto a = get(name);
    if (!a) return Status::corrupt(ctx + ": run info lacks '" + name + "'");
    if (a->type_id() != arrow::Type::STRING)
      return Status::corrupt(ctx + ": run info '" + name + "' is " + a->type()->ToString());
    auto& s = static_cast<const arrow::StringArray&>(*a);
    *dst = s.IsNull(row) ? "" : s.GetString(row);
    return Status::ok();
  };
  auto ts = [&](const char* name, int64_t* dst) -> Status {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::TIMESTAMP)
      return Status::corrupt(ctx + ": run info '" + name + "' missing or not a timestamp");
    auto unit = static_cast<const arrow::TimestampType&>(*a->type()).unit();
    int64_t v = static_cast<const arrow::TimestampArray&>(*a).Value(row);
    switch (unit) {
      case arrow::TimeUnit::SECOND: v *= 1000; break;
      case arrow::TimeUnit::MILLI: break;
      case arrow::TimeUnit::MICRO: v /= 1000; break;
      case arrow::TimeUnit::NANO: v /= 1000000; break;
    }
    *dst = v;
    return Status::ok();
  };
  auto map = [&](const char* name, std::vector<std::pair<std::string, std::string>>* dst) {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::MAP)
      return Status::corrupt(ctx + ": run info '" + std::string(name) + "' missing or not a map");
    *dst = map_entries(static_cast<const arrow::MapArray&>(*a), row);
    return Status::ok();
  };
  auto i16 = [&](const char* name, int16_t* dst) -> Status {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::INT16)
      return Status::corrupt(ctx + ": run info '" + std::string(name) + "' missing or not int16");
    *dst = static_cast<const arrow::Int16Array&>(*a).Value(row);
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(str("acquisition_id", &out->acquisition_id));
  ESCPOD_RETURN_IF_ERROR(ts("acquisition_start_time", &out->acquisition_start_time_ms));
  ESCPOD_RETURN_IF_ERROR(i16("adc_max", &out->adc_max));
  ESCPOD_RETURN_IF_ERROR(i16("adc_min", &out->adc_min));
  ESCPOD_RETURN_IF_ERROR(map("context_tags", &out->context_tags));
  ESCPOD_RETURN_IF_ERROR(str("experiment_name", &out->experiment_name));
  ESCPOD_RETURN_IF_ERROR(str("flow_cell_id", &out->flow_cell_id));
  ESCPOD_RETURN_IF_ERROR(str("flow_cell_product_code", &out->flow_cell_product_code));
  ESCPOD_RETURN_IF_ERROR(str("protocol_name", &out->protocol_name));
  ESCPOD_RETURN_IF_ERROR(str("protocol_run_id", &out->protocol_run_id));
  ESCPOD_RETURN_IF_ERROR(ts("protocol_start_time", &out->protocol_start_time_ms));
  ESCPOD_RETURN_IF_ERROR(str("sample_id", &out->sample_id));
  {
    auto a = get("sample_rate");
    if (!a || a->type_id() != arrow::Type::UINT16)
      return Status::corrupt(ctx + ": run info 'sample_rate' missing or not uint16");
    out->sample_rate = static_cast<const arrow::UInt16Array&>(*a).Value(row);
  }
  ESCPOD_RETURN_IF_ERROR(str("sequencing_kit", &out->sequencing_kit));
  ESCPOD_RETURN_IF_ERROR(str("sequencer_position", &out->sequencer_position));
  ESCPOD_RETURN_IF_ERROR(str("sequencer_position_type", &out->sequencer_position_type));
  ESCPOD_RETURN_IF_ERROR(str("software", &out->software));
  ESCPOD_RETURN_IF_ERROR(str("system_name", &out->system_name));
  ESCPOD_RETURN_IF_ERROR(str("system_type", &out->system_type));
  ESCPOD_RETURN_IF_ERROR(map("tracking_id", &out->tracking_id));
  return Status::ok();
}

// Copies a primitive column into `out`, or fills it with `fallback` when the column is absent.
template <typename ArrowType, typename T>
void copy_column(const std::shared_ptr<arrow::Array>& a, int64_t n, T fallback,
                 std::vector<T>& out) {
  out.resize(static_cast<size_t>(n));
  if (!a) {
    std::fill(out.begin(), out.end(), fallback);
    return;
  }
  const auto& typed = static_cast<const arrow::NumericArray<ArrowType>&>(*a);
  const auto* values = typed.raw_values();
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<T>(values[i]);
}

}  // namespace

struct FileReader::Impl {
  FileInfo info;
  std::shared_ptr<arrow::io::MemoryMappedFile> file;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> reads_reader;
  // Reads batches, one entry each: kept in memory only where they cannot be read again (files
  // rebuilt by recovery) and for the last batch (its dictionaries are the file's); the others
  // are null and re-read from reads_reader when used, as their Arrow objects (~13 KB a batch of
  // 1000 rows) would otherwise make a reader's memory grow with the read count.
  std::vector<std::shared_ptr<arrow::RecordBatch>> read_batches;
  mutable std::mutex reads_reader_mutex;
  const uint8_t* reads_table_begin = nullptr;  // the reads table in the mapping (null: elsewhere)
  const uint8_t* reads_table_end = nullptr;
  mutable std::atomic<uintptr_t> reads_dropped_until{0};
  // Drops reads batch b's pages once its values are copied out. Inside the mapped reads table,
  // everything from below the last mark up to the batch's end goes (IPC headers, dictionary
  // messages and the pages the kernel mapped around them included: see drop_behind), so a
  // forward pass keeps a bounded resident set whatever the read count. Dropping a page another
  // thread still reads only costs it a re-read from the page cache.
  void drop_reads_batch_pages(size_t b, const arrow::RecordBatch& rb) const {
    (void)b;
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
  }  // RecordBatchFileReader is not documented thread-safe
  Result<std::shared_ptr<arrow::RecordBatch>> reads_batch(size_t b) const {
    if (read_batches[b]) return read_batches[b];
    arrow::Result<std::shared_ptr<arrow::RecordBatch>> batch;
    {
      std::lock_guard lock(reads_reader_mutex);
      batch = reads_reader->ReadRecordBatch(static_cast<int>(b));
    }
    if (!batch.ok()) return from_arrow(batch.status(), where() + ": reads batch " + std::to_string(b));
    const uint64_t want = read_batch_first[b + 1] - read_batch_first[b];
    if (static_cast<uint64_t>((*batch)->num_rows()) != want) {
      return Status::corrupt(where() + ": reads batch " + std::to_string(b) + " holds " +
                             std::to_string((*batch)->num_rows()) + " rows, " + std::to_string(want) +
                             " expected (" + read_rows_source + ")");
    }
    return std::move(*batch);
  }
  std::vector<uint64_t> read_batch_first;  // prefix sums of rows
  // Random-access opens of V3+ files: rows of batches not held in memory are read straight from
  // the file (pod5/reads_rows.hpp) instead of through Arrow and the mapping.
  std::unique_ptr<detail::ReadsRowReader> row_reader;
  Status check_dictionary_indices(const ReadBatch& batch, size_t batch_idx) const;
  // Every index of column `name` in rows [first_row, first_row + idx.size()) of reads batch
  // batch_idx inside a dictionary of dict_size entries; else an error naming the file, batch, row
  // and column.
  Status check_index_range(size_t batch_idx, size_t first_row, const char* name, std::span<const int16_t> idx,
                           size_t dict_size) const;
  // Batch row counts given at open (OpenOptions::layout): batches are then not read at open,
  // and each is checked against its count when loaded. Where the counts came from, for errors.
  const BatchLayout* given_layout = nullptr;  // only during open()
  const char* read_rows_source = "read at open";
  const char* signal_rows_source = "its IPC metadata";
  std::vector<uint64_t> given_signal_first;  // prefix sums of the given signal row counts
  // Signal table: schema checked at open, batches loaded on first use (ensure_signal).
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> signal_reader;
  // Without a signal_reader (a file rebuilt by recovery): the signal batches themselves.
  std::vector<std::shared_ptr<arrow::RecordBatch>> given_signal;
  int id_col = -1, sig_col = -1, n_col = -1;
  mutable std::once_flag signal_once;
  mutable Status signal_status;
  mutable SignalTableInfo signal_info;
  mutable std::vector<SignalBatchView> signal_batches;
  mutable std::vector<uint64_t> signal_batch_first;  // prefix sums, size n_batches + 1
  // Lazy signal (files opened without validate_all_batches): the batches' row counts come from
  // the Arrow IPC metadata alone, and each batch is loaded and validated on first use.
  bool lazy_signal = false;
  const uint8_t* signal_table_begin = nullptr;
  size_t signal_table_size = 0;
  // Random-access opens: the file, read with pread (rows of reads batches, signal batch views),
  // where faulting in pages of the mapping would cost more (pod5/reads_rows.hpp).
  detail::UniqueFd fd;
  uint64_t signal_table_offset = 0;
  mutable std::vector<detail::IpcBlock> signal_blocks;  // filled when a lazy signal layout is adopted
  // Where the signal table's columns are in a RecordBatch message (open_signal).
  struct SignalIpcLayout {
    int n_nodes = 0, n_buffers = 0;
    int ids_node = -1, ids = -1, offsets = -1, data = -1, data_node = -1, samples_node = -1, samples = -1;
  } signal_ipc;
  bool read_signal_blocks() const;
  Status make_signal_view_from_file(int b, SignalBatchView* v) const;
  mutable bool lazy_ready = false;
  mutable std::unique_ptr<std::once_flag[]> batch_once;
  mutable std::unique_ptr<Status[]> batch_status;
  mutable std::once_flag samples_once;
  mutable Status samples_status;
  std::vector<RunInfo> run_infos;
  std::vector<std::string> pore_types, end_reasons, run_info_ids;
  DictMaps dict;
  bool legacy_struct_columns = false;  // V0-V2
  bool validated_at_open = true;        // OpenOptions::validate_all_batches
  // Column indices in the reads schema (-1 when absent).
  std::unordered_map<std::string, int> col;
  // The whole file's mapping, and how far drop_signal_pages has released it.
  const uint8_t* map_begin = nullptr;
  size_t map_size = 0;
  mutable std::atomic<uintptr_t> signal_dropped_until{0};

  // True when [p, p + n) lies inside the file's mapping (an empty range anywhere).
  bool in_mapping(const void* p, size_t n) const {
    if (n == 0) return true;
    const auto* b = static_cast<const uint8_t*>(p);
    return map_begin && b >= map_begin && b <= map_begin + map_size && n <= size_t(map_begin + map_size - b);
  }

  // Releases the whole pages inside [lo, hi) from this process's resident set. Always safe for
  // this read-only file mapping: a later access maps the page in again from the page cache.
  void drop_pages(const void* lo, const void* hi) const {
    drop_range(reinterpret_cast<uintptr_t>(lo), reinterpret_cast<uintptr_t>(hi));
  }
  void drop_range(uintptr_t lo, uintptr_t hi) const {
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
  // A fault maps more than the page it touches: fault-around (64 KiB by default) and, on recent
  // kernels, the whole large folio of the page cache around it, always inside the 2 MiB that
  // one page table covers. A forward pass that faults just above the mark up to which it has
  // released so maps pages below the mark again, and a release that starts at the mark never
  // sees them: ~20 KB a reads batch of 1,000 rows stayed mapped until the pass ended (45 MiB
  // at 3 M reads, 6 at 300 k; bench/results/memory.md, Session 7).
  static constexpr uintptr_t kRemapSpan = uintptr_t{2} << 20;
  // Releases [mark, hi) of a forward pass and everything from the kRemapSpan boundary one span
  // below the mark (pages mapped again by faults above it, and those of batches released just
  // behind it out of order). The look-behind is empty page tables, cheap to walk.
  void drop_behind(uintptr_t mark, const void* hi) const {
    const uintptr_t from = mark > kRemapSpan ? (mark - kRemapSpan) & ~(kRemapSpan - 1) : 0;
    drop_range(from, reinterpret_cast<uintptr_t>(hi));
  }
  // Releases are batched: each is a TLB shootdown on every core running our threads (~23 us).
  static constexpr ptrdiff_t kDropStride = 16 << 20;
  // Releases what a forward scan over the mapping is done with, kDropStride at a time (the peak
  // resident set, not only the final one, must not grow with the file).
  class ScanRelease {
   public:
    explicit ScanRelease(const Impl& im) : m_im(im) {}
    // `start`: where the scan's current batch begins; [.., done_to) may go.
    void reached(const uint8_t* start, const uint8_t* done_to) {
      if (!m_from) m_from = start;
      if (done_to - m_from >= kDropStride) {
        m_im.drop_behind(reinterpret_cast<uintptr_t>(m_from), done_to);
        m_from = done_to;
      }
    }

   private:
    const Impl& m_im;
    const uint8_t* m_from = nullptr;
  };
  // Drops the pages spanned by a record batch's buffers (children included, dictionaries not:
  // they are shared between batches), once its values have been copied out.
  void drop_batch_pages(const arrow::RecordBatch& rb) const {
    const auto [lo, hi] = batch_span(rb);
    if (lo) drop_pages(lo, hi);
  }
  // The part of the mapping a record batch's buffers span ({nullptr, nullptr} if none).
  std::pair<const uint8_t*, const uint8_t*> batch_span(const arrow::RecordBatch& rb) const {
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
  mutable std::once_flag id_index_once;
  mutable Status id_index_status;  // a reads batch that could not be re-read for the index
  mutable std::unordered_map<ReadId, std::pair<uint32_t, uint32_t>, ReadIdHash> id_index;

  std::string where() const { return info.path.string(); }

  std::shared_ptr<arrow::Array> column(const arrow::RecordBatch& b, const char* name) const {
    auto it = col.find(name);
    if (it == col.end()) return nullptr;
    return storage_of(b.column(it->second));
  }

  Result<std::shared_ptr<arrow::ipc::RecordBatchFileReader>> open_table(
      const detail::EmbeddedTable& t, const char* what) {
    auto buffer = table_bytes(t);
    if (!buffer.ok()) return from_arrow(buffer.status(), where() + ": " + what + " table");
    auto reader = arrow::ipc::RecordBatchFileReader::Open(
        std::make_shared<arrow::io::BufferReader>(*buffer));
    if (!reader.ok()) return from_arrow(reader.status(), where() + ": " + what + " table");
    return *reader;
  }

  // A table's bytes, a zero-copy slice of the mapping. MemoryMappedFile::ReadAt also advises the
  // kernel to read the whole range ahead (MADV_WILLNEED): right for a pass over every batch, but
  // a random-access open (lazy_signal) would pay a page-cache walk over the whole signal table
  // for the few batches it touches (measured: ~5% of pulling 100 reads out of 10 files), so it
  // takes a plain view of the mapping instead (the mapping, held by `file`, outlives it).
  arrow::Result<std::shared_ptr<arrow::Buffer>> table_bytes(const detail::EmbeddedTable& t) const {
    if (!lazy_signal) return file->ReadAt(t.offset, t.length);
    if (t.offset < 0 || t.length < 0 || static_cast<uint64_t>(t.offset) > map_size ||
        static_cast<uint64_t>(t.length) > map_size - static_cast<uint64_t>(t.offset)) {
      return arrow::Status::IOError("table at ", t.offset, " (", t.length, " bytes) outside the file");
    }
    return std::make_shared<arrow::Buffer>(map_begin + t.offset, t.length);
  }

  Status check_metadata(const arrow::Schema& schema, const char* what) {
    auto md = schema.metadata();
    if (!md) return Status::corrupt(where() + ": " + what + " table schema has no MINKNOW metadata");
    auto id = md->Get("MINKNOW:file_identifier");
    if (!id.ok()) {
      return Status::corrupt(where() + ": " + what + " table lacks MINKNOW:file_identifier");
    }
    if (*id != info.file_identifier) {
      info.warnings.push_back(std::string(what) + " table file identifier " + *id +
                              " differs from the footer's " + info.file_identifier);
    }
    return Status::ok();
  }

  Status open_signal(const detail::EmbeddedTable& t);
  Status check_signal_schema(const arrow::Schema& schema);
  int n_signal_batches() const {
    return signal_reader ? signal_reader->num_record_batches() : static_cast<int>(given_signal.size());
  }
  Status ensure_signal() const;
  Status load_signal_batches() const;
  Status make_signal_view(int b, SignalBatchView* v) const;
  bool signal_layout_from_metadata() const;
  // Lazy signal over batches whose row prefix sums are `first` (size n_batches + 1).
  void adopt_signal_layout(std::vector<uint64_t> first) const;
  Status check_given_layout(const BatchLayout& layout, int n_read_batches) const;
  // Batch b's view, loading it first in lazy mode; nullptr with *status set when it fails.
  const SignalBatchView* batch_view(size_t b, Status* status) const;
  // A table's batches: from its Arrow file reader, or given (recovery).
  using BatchSource = std::function<arrow::Result<std::shared_ptr<arrow::RecordBatch>>(int)>;
  Status load_reads(const detail::EmbeddedTable& t);
  Status load_reads(const arrow::Schema& schema, int n_batches, const BatchSource& get);
  Status load_run_info(const detail::EmbeddedTable& t);
  Status load_run_info(const arrow::Schema& schema, int n_batches, const BatchSource& get);
  Status load_legacy_dictionaries();
  Status load_dictionaries();
  Status decode_batch(size_t batch_idx, ReadBatch* out) const;
  Status decode_rows(size_t batch_idx, const arrow::RecordBatch& rb, uint64_t first_read_idx,
                     ReadBatch* out) const;
  Status check_signal_owners(const ReadBatch& batch) const;
  // Where `bytes` (inside the signal table's mapping) start in the file, when a random-access
  // reader should read them with pread (after ensure_signal); nullopt: read them where mapped.
  std::optional<uint64_t> pread_offset(std::span<const uint8_t> bytes) const {
    if (!lazy_ready || fd.get() < 0 || signal_table_begin == nullptr || bytes.data() < signal_table_begin ||
        bytes.data() + bytes.size() > signal_table_begin + signal_table_size) {
      return std::nullopt;
    }
    return signal_table_offset + static_cast<uint64_t>(bytes.data() - signal_table_begin);
  }
  size_t batch_rows_of(size_t batch_idx) const {
    return static_cast<size_t>(read_batch_first[batch_idx + 1] - read_batch_first[batch_idx]);
  }
  // kInvalidArgument naming the file when rows [first_row, first_row + n_rows) are not all in
  // reads batch batch_idx.
  Status check_row_range(size_t batch_idx, size_t first_row, size_t n_rows) const;
  // Rows read straight from the file by row_reader (only `columns`: ReadsRowReader::read_rows).
  Result<ReadBatch> rows_from_file(size_t batch_idx, size_t first_row, size_t n_rows,
                                   detail::ReadsRowReader::Columns columns) const;
  // Validates `rb` (a reads batch or a slice of one) unless open already did.
  Status check_batch(const arrow::RecordBatch& rb, size_t batch_idx) const {
    if (validated_at_open) return Status::ok();
    return from_arrow(rb.ValidateFull(), where() + ": reads batch " + std::to_string(batch_idx));
  }
  // check_batch for the few rows read_batch_rows decodes: what decode_rows relies on, without
  // ValidateFull's walk over every column (and each dictionary again) for a one-row slice
  // (measured: a third of the decoding cost of pulling reads by id). Validate() checks every
  // buffer is large enough for the rows; decode_rows checks the dictionary indices; here, the
  // signal row lists' offsets.
  Status check_slice(const arrow::RecordBatch& rb, size_t batch_idx) const {
    if (validated_at_open) return Status::ok();
    const std::string ctx = where() + ": reads batch " + std::to_string(batch_idx);
    ESCPOD_RETURN_IF_ERROR(from_arrow(rb.Validate(), ctx));
    const auto& list = static_cast<const arrow::ListArray&>(*column(rb, "signal"));
    const int32_t* offs = list.raw_value_offsets();
    const int64_t n_values = list.values()->length();
    for (int64_t i = 0; i < rb.num_rows(); ++i) {
      if (offs[i] < 0 || offs[i] > offs[i + 1] || offs[i + 1] > n_values) {
        return Status::corrupt(ctx + " row " + std::to_string(i) + ": signal row list offsets " +
                               std::to_string(offs[i]) + ".." + std::to_string(offs[i + 1]) + " outside " +
                               std::to_string(n_values) + " values");
      }
    }
    return Status::ok();
  }
  // The batch holding global signal row `row`; nullptr when out of range or (lazy) the batch
  // fails to load (then *status says why, if given).
  const SignalBatchView* locate(uint64_t row, int64_t* row_in_batch, Status* status = nullptr) const;
};

Status FileReader::Impl::open_signal(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(signal_reader, open_table(t, "signal"));
  if (map_begin && t.offset >= 0 && static_cast<uint64_t>(t.offset) + static_cast<uint64_t>(t.length) <= map_size) {
    signal_table_begin = map_begin + t.offset;
    signal_table_size = static_cast<size_t>(t.length);
    signal_table_offset = static_cast<uint64_t>(t.offset);
  }
  ESCPOD_RETURN_IF_ERROR(check_signal_schema(*signal_reader->schema()));
  // Buffers in schema order: validity then the type's own (read_id: values; signal VBZ:
  // offsets, data; raw: offsets, then the int16 child's validity and values; samples: values).
  const arrow::Schema& schema = *signal_reader->schema();
  SignalIpcLayout& l = signal_ipc;
  for (int c = 0; c < schema.num_fields(); ++c) {
    const int node = l.n_nodes, buffer = l.n_buffers;
    if (!detail::count_ipc_layout(*schema.field(c)->type(), &l.n_nodes, &l.n_buffers)) {
      l = SignalIpcLayout{};  // not a layout views can be read from: Arrow reads them
      break;
    }
    if (c == id_col) l.ids_node = node, l.ids = buffer + 1;
    if (c == sig_col) {
      l.offsets = buffer + 1;
      l.data = info.is_vbz ? buffer + 2 : buffer + 3;
      l.data_node = info.is_vbz ? node : node + 1;
    }
    if (c == n_col) l.samples_node = node, l.samples = buffer + 1;
  }
  return Status::ok();
}

Status FileReader::Impl::check_signal_schema(const arrow::Schema& schema) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "signal"));
  id_col = schema.GetFieldIndex("read_id");
  sig_col = schema.GetFieldIndex("signal");
  n_col = schema.GetFieldIndex("samples");
  if (id_col < 0 || sig_col < 0 || n_col < 0) {
    return Status::corrupt(where() + ": signal table lacks read_id, signal or samples");
  }
  const auto& id_field = *schema.field(id_col);
  const auto* id_storage = id_field.type()->id() == arrow::Type::EXTENSION
      ? static_cast<const arrow::ExtensionType&>(*id_field.type()).storage_type().get()
      : id_field.type().get();
  if (detail::extension_name(id_field) != "minknow.uuid" ||
      !id_storage->Equals(*arrow::fixed_size_binary(16))) {
    return type_error(where(), "signal", "read_id", "minknow.uuid", *id_field.type());
  }
  const auto& sig_field = *schema.field(sig_col);
  if (detail::extension_name(sig_field) == "minknow.vbz") {
    info.is_vbz = true;
  } else if (sig_field.type()->id() == arrow::Type::LARGE_LIST &&
             static_cast<const arrow::LargeListType&>(*sig_field.type()).value_type()->id() ==
                 arrow::Type::INT16) {
    info.is_vbz = false;
  } else {
    return type_error(where(), "signal", "signal", "minknow.vbz or large_list<int16>",
                      *sig_field.type());
  }
  if (schema.field(n_col)->type()->id() != arrow::Type::UINT32) {
    return type_error(where(), "signal", "samples", "uint32", *schema.field(n_col)->type());
  }
  return Status::ok();
}

Status FileReader::Impl::ensure_signal() const {
  std::call_once(signal_once, [this] {
    if (lazy_signal && !given_signal_first.empty()) {
      adopt_signal_layout(given_signal_first);
      lazy_ready = true;
      signal_status = Status::ok();
      if (!read_signal_blocks()) signal_blocks.clear();  // views are then read through Arrow
    } else if (lazy_signal && signal_layout_from_metadata()) {
      lazy_ready = true;
      signal_status = Status::ok();
    } else {
      signal_status = load_signal_batches();
    }
  });
  return signal_status;
}

// Row counts of the signal batches from the IPC metadata only (footer blocks, each message's
// RecordBatch.length). False when anything is not as expected: the caller then loads every
// batch the usual way.
bool FileReader::Impl::signal_layout_from_metadata() const {
  if (!read_signal_blocks()) return false;
  const detail::FlatView f(signal_table_begin, signal_table_size);
  std::vector<uint64_t> first{0};
  for (const detail::IpcBlock& block : signal_blocks) {
    auto msg = static_cast<size_t>(block.offset);
    uint32_t word;
    if (!f.read(msg, &word)) return false;
    msg += word == 0xFFFFFFFFu ? 8 : 4;  // continuation marker (current format), then the length
    size_t mtable, hpos, htype_pos, rb;
    uint8_t htype = 0;
    if (!f.root(msg, &mtable) || !f.field(mtable, 1, &htype_pos) || htype_pos == 0 ||
        !f.read(htype_pos, &htype) || htype != 3 /* RecordBatch */ || !f.field(mtable, 2, &hpos) ||
        hpos == 0 || !f.deref(hpos, &rb)) {
      return false;
    }
    size_t len_pos;
    int64_t rows = 0;
    if (!f.field(rb, 0, &len_pos)) return false;
    if (len_pos != 0 && !f.read(len_pos, &rows)) return false;
    if (rows < 0) return false;
    first.push_back(first.back() + static_cast<uint64_t>(rows));
  }
  // The headers read above are spread over the whole table (and the kernel maps pages around
  // each): release them, or every batch's neighbourhood stays resident.
  drop_pages(signal_table_begin, signal_table_begin + signal_table_size);
  adopt_signal_layout(std::move(first));
  return true;
}

// The signal table's record batch blocks from its IPC footer, as many as Arrow's reader counts.
bool FileReader::Impl::read_signal_blocks() const {
  if (!signal_table_begin || !signal_reader) return false;
  if (!detail::read_ipc_blocks(signal_table_begin, signal_table_size, &signal_blocks)) return false;
  return signal_blocks.size() == static_cast<size_t>(signal_reader->num_record_batches());
}

void FileReader::Impl::adopt_signal_layout(std::vector<uint64_t> first) const {
  const size_t n_blocks = first.size() - 1;
  signal_batch_first = std::move(first);
  signal_batches.assign(n_blocks, SignalBatchView{});
  batch_once = std::make_unique<std::once_flag[]>(n_blocks);
  batch_status = std::make_unique<Status[]>(n_blocks);
  signal_info.n_batches = n_blocks;
  signal_info.n_rows = signal_batch_first.back();
  const uint64_t stride = n_blocks > 0 ? signal_batch_first[1] : 0;
  for (size_t b = 1; b < n_blocks; ++b) {
    const uint64_t rows = signal_batch_first[b + 1] - signal_batch_first[b];
    if ((b + 1 < n_blocks && rows != stride) || (b + 1 == n_blocks && rows > stride)) signal_info.uniform = false;
  }
}

// A layout given at open must have as many batches as the file's tables (their IPC footers).
Status FileReader::Impl::check_given_layout(const BatchLayout& layout, int n_read_batches) const {
  const auto n_signal = static_cast<size_t>(n_signal_batches());
  if (layout.read_batch_rows.size() != static_cast<size_t>(n_read_batches) ||
      layout.signal_batch_rows.size() != n_signal) {
    return Status::corrupt(where() + ": has " + std::to_string(n_read_batches) + " reads and " +
                           std::to_string(n_signal) + " signal batches, the given layout (" +
                           std::string(read_rows_source) + ") " + std::to_string(layout.read_batch_rows.size()) +
                           " and " + std::to_string(layout.signal_batch_rows.size()));
  }
  return Status::ok();
}

const SignalBatchView* FileReader::Impl::batch_view(size_t b, Status* status) const {
  if (!lazy_ready) return &signal_batches[b];
  std::call_once(batch_once[b], [&] {
    SignalBatchView v;
    Status s = make_signal_view(static_cast<int>(b), &v);
    if (s.is_ok() && static_cast<uint64_t>(v.n_rows) != signal_batch_first[b + 1] - signal_batch_first[b]) {
      s = Status::corrupt(where() + ": signal batch " + std::to_string(b) + " holds " + std::to_string(v.n_rows) +
                          " rows, " + signal_rows_source + " says " +
                          std::to_string(signal_batch_first[b + 1] - signal_batch_first[b]));
    }
    if (s.is_ok()) signal_batches[b] = std::move(v);
    batch_status[b] = std::move(s);
  });
  if (!batch_status[b].is_ok()) {
    if (status) *status = batch_status[b];
    return nullptr;
  }
  return &signal_batches[b];
}

// Loads signal batch b and checks it (offsets, sizes) into direct pointers.
Status FileReader::Impl::make_signal_view(int b, SignalBatchView* out) const {
  if (lazy_ready && fd.get() >= 0 && signal_ipc.n_buffers > 0 && static_cast<size_t>(b) < signal_blocks.size()) {
    return make_signal_view_from_file(b, out);
  }
  auto batch = signal_reader ? signal_reader->ReadRecordBatch(b)
                             : arrow::Result<std::shared_ptr<arrow::RecordBatch>>(
                                   given_signal[static_cast<size_t>(b)]);
  const std::string ctx = where() + ": signal batch " + std::to_string(b) + " of " +
                          std::to_string(n_signal_batches());
  if (!batch.ok()) return from_arrow(batch.status(), ctx);
  ESCPOD_RETURN_IF_ERROR(from_arrow((*batch)->ValidateFull(), ctx));
  SignalBatchView& v = *out;
  v.batch = *batch;
  v.n_rows = v.batch->num_rows();
  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(storage_of(v.batch->column(id_col)));
  v.read_ids = ids->raw_values();
  auto sig = storage_of(v.batch->column(sig_col));
  if (info.is_vbz) {
    auto bin = std::static_pointer_cast<arrow::LargeBinaryArray>(sig);
    v.offsets = bin->raw_value_offsets();
    v.vbz_data = bin->value_data() ? bin->value_data()->data() : nullptr;
    v.data_size = bin->value_data() ? bin->value_data()->size() : 0;
    v.bytes_begin = v.vbz_data;
    v.bytes_end = v.vbz_data + v.data_size;
  } else {
    auto list = std::static_pointer_cast<arrow::LargeListArray>(sig);
    v.offsets = list->raw_value_offsets();
    auto values = std::static_pointer_cast<arrow::Int16Array>(list->values());
    v.raw_values = values->raw_values();
    v.data_size = values->length();
    v.bytes_begin = reinterpret_cast<const uint8_t*>(v.raw_values);
    v.bytes_end = v.bytes_begin + v.data_size * 2;
  }
  v.samples = std::static_pointer_cast<arrow::UInt32Array>(v.batch->column(n_col))->raw_values();
  v.region_begin = std::min({v.read_ids, reinterpret_cast<const uint8_t*>(v.offsets),
                             reinterpret_cast<const uint8_t*>(v.samples),
                             v.bytes_begin ? v.bytes_begin : v.read_ids});
  // Buffers that are slices of the file's mapping stay valid as long as the mapping (held by
  // `file`): the Arrow objects (~3 KB a batch, ~30 bytes a read at 100 rows a batch) can go, so
  // a reader's memory does not grow with the file's read count.
  const auto rows = static_cast<size_t>(v.n_rows);
  if (in_mapping(v.read_ids, 16 * rows) && in_mapping(v.offsets, 8 * (rows + 1)) &&
      in_mapping(v.samples, 4 * rows) && in_mapping(v.bytes_begin, static_cast<size_t>(v.bytes_end - v.bytes_begin))) {
    v.batch.reset();
  }
  return Status::ok();
}

// Signal batch b for random access, without Arrow: its header, ids, offsets and sample counts
// read with pread (a few KB) and checked as ValidateFull would (buffer sizes, offsets within
// the data); the signal bytes stay in the mapping, touched only for the rows read.
Status FileReader::Impl::make_signal_view_from_file(int b, SignalBatchView* out) const {
  const std::string ctx = where() + ": signal batch " + std::to_string(b) + " of " + std::to_string(n_signal_batches());
  const detail::IpcBlock& block = signal_blocks[static_cast<size_t>(b)];
  const uint64_t at = signal_table_offset + block.offset;
  // One read for the header and the start of the body, where the writer puts the read ids and
  // the signal offsets (24 bytes a row, by the row count the layout expects): both are then
  // copied from it (read on their own if they lie elsewhere).
  const auto bi = static_cast<size_t>(b);
  const uint64_t expected_rows = bi + 1 < signal_batch_first.size() ? signal_batch_first[bi + 1] - signal_batch_first[bi] : 0;
  thread_local std::vector<uint8_t> head;
  head.resize(block.meta_size + std::min<uint64_t>(block.body_size, 24 * expected_rows + 136));
  ESCPOD_RETURN_IF_ERROR(detail::pread_exact(fd.get(), head.data(), head.size(), at, where()));
  detail::RecordBatchHeader h;
  std::string why;
  if (!detail::parse_record_batch_header(head.data(), block.meta_size, block.body_size, &h, &why)) {
    return Status::corrupt(ctx + ": " + why);
  }
  const SignalIpcLayout& l = signal_ipc;
  if (h.node_length.size() != static_cast<size_t>(l.n_nodes) || h.buffers.size() != static_cast<size_t>(l.n_buffers)) {
    return Status::corrupt(ctx + ": its header does not match the signal table's schema");
  }
  const auto rows = static_cast<uint64_t>(h.length);
  const auto data_values = static_cast<uint64_t>(h.node_length[static_cast<size_t>(l.data_node)]);
  const uint64_t value_bytes = info.is_vbz ? 1 : 2;
  auto buffer = [&](int i, uint64_t need, const char* what) -> Result<uint64_t> {
    const auto [off, len] = h.buffers[static_cast<size_t>(i)];
    if (len < need) return Status::corrupt(ctx + ": " + what + " buffer holds " + std::to_string(len) + " bytes, " + std::to_string(need) + " needed");
    return off;
  };
  if (static_cast<uint64_t>(h.node_length[static_cast<size_t>(l.ids_node)]) != rows ||
      static_cast<uint64_t>(h.node_length[static_cast<size_t>(l.samples_node)]) != rows) {
    return Status::corrupt(ctx + ": columns of different lengths");
  }
  ESCPOD_ASSIGN_OR_RETURN(uint64_t ids_at, buffer(l.ids, 16 * rows, "read_id"));
  ESCPOD_ASSIGN_OR_RETURN(uint64_t offsets_at, buffer(l.offsets, 8 * (rows + 1), "signal offsets"));
  ESCPOD_ASSIGN_OR_RETURN(uint64_t samples_at, buffer(l.samples, 4 * rows, "samples"));
  ESCPOD_ASSIGN_OR_RETURN(uint64_t data_at, buffer(l.data, info.is_vbz ? 0 : 2 * data_values, "signal data"));
  const uint64_t data_len = info.is_vbz ? h.buffers[static_cast<size_t>(l.data)].second : data_values;

  SignalBatchView& v = *out;
  v.n_rows = h.length;
  // One allocation, in words: ids (2 a row), offsets (rows + 1), samples (packed 2 a word).
  v.owned.assign(2 * rows + (rows + 1) + (rows + 1) / 2, 0);
  auto* ids = reinterpret_cast<uint8_t*>(v.owned.data());
  auto* offsets = reinterpret_cast<int64_t*>(v.owned.data() + 2 * rows);
  auto* samples = reinterpret_cast<uint32_t*>(v.owned.data() + 3 * rows + 1);
  const uint64_t body = at + block.meta_size;
  const uint64_t in_head = head.size() - block.meta_size;  // body bytes already read
  auto fetch = [&](void* dst, uint64_t n, uint64_t off) -> Status {
    if (off + n <= in_head) {
      std::memcpy(dst, head.data() + block.meta_size + off, n);
      return Status::ok();
    }
    return detail::pread_exact(fd.get(), dst, n, body + off, where());
  };
  ESCPOD_RETURN_IF_ERROR(fetch(ids, 16 * rows, ids_at));
  ESCPOD_RETURN_IF_ERROR(fetch(offsets, 8 * (rows + 1), offsets_at));
  ESCPOD_RETURN_IF_ERROR(fetch(samples, 4 * rows, samples_at));
  for (uint64_t r = 0; r < rows; ++r) {
    if (offsets[0] < 0 || offsets[r] > offsets[r + 1] || static_cast<uint64_t>(offsets[r + 1]) > data_len) {
      return Status::corrupt(ctx + " row " + std::to_string(r) + ": signal offsets " + std::to_string(offsets[r]) +
                             ".." + std::to_string(offsets[r + 1]) + " outside " + std::to_string(data_len) +
                             (info.is_vbz ? " bytes" : " values"));
    }
  }
  v.read_ids = ids;
  v.offsets = offsets;
  v.samples = samples;
  v.data_size = static_cast<int64_t>(data_len);
  const uint8_t* data = signal_table_begin + (body - signal_table_offset) + data_at;
  if (info.is_vbz) {
    v.vbz_data = data;
  } else {
    v.raw_values = reinterpret_cast<const int16_t*>(data);
  }
  v.bytes_begin = data;
  v.bytes_end = data + data_len * value_bytes;
  v.region_begin = data;
  return Status::ok();
}

// Reads every signal batch's metadata and validates it (offsets, sizes). Done on first signal
// access only: commands that never touch signal (view, most of inspect) skip it entirely.
Status FileReader::Impl::load_signal_batches() const {
  const int n_batches = n_signal_batches();
  signal_batch_first.push_back(0);
  ScanRelease release(*this);
  for (int b = 0; b < n_batches; ++b) {
    SignalBatchView v;
    ESCPOD_RETURN_IF_ERROR(make_signal_view(b, &v));
    if (b > 0 && b + 1 < n_batches &&
        v.n_rows != signal_batches.front().n_rows) {
      signal_info.uniform = false;
    }
    if (b + 1 == n_batches && b > 0 && v.n_rows > signal_batches.front().n_rows) {
      signal_info.uniform = false;
    }
    for (int64_t r = 0; r < v.n_rows; ++r) signal_info.n_samples += v.samples[r];
    signal_batch_first.push_back(signal_batch_first.back() + static_cast<uint64_t>(v.n_rows));
    // Release what the scan touched below this batch as it goes (it maps only a few pages a
    // batch, so per-batch releases would cost more than the memory they save).
    release.reached(v.region_begin, v.region_begin);
    signal_batches.push_back(std::move(v));
  }
  signal_info.n_batches = signal_batches.size();
  signal_info.n_rows = signal_batch_first.back();
  // The scan above touched (and the kernel's fault-around mapped) pages of every batch; release
  // them, or a huge file would keep ~50 KB per batch resident until the end of the run.
  if (!signal_batches.empty()) {
    drop_pages(signal_batches.front().region_begin, signal_batches.back().bytes_end);
  }
  return Status::ok();
}

Status FileReader::Impl::load_run_info(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(auto reader, open_table(t, "run info"));
  return load_run_info(*reader->schema(), reader->num_record_batches(),
                       [&reader](int b) { return reader->ReadRecordBatch(b); });
}

Status FileReader::Impl::load_run_info(const arrow::Schema& schema, int n_batches,
                                       const BatchSource& get_batch) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "run info"));
  for (int b = 0; b < n_batches; ++b) {
    auto batch = get_batch(b);
    const std::string ctx = where() + ": run info batch " + std::to_string(b);
    if (!batch.ok()) return from_arrow(batch.status(), ctx);
    ESCPOD_RETURN_IF_ERROR(from_arrow((*batch)->ValidateFull(), ctx));
    const auto& rb = **batch;
    auto get = [&rb](const char* name) { return rb.GetColumnByName(name); };
    for (int64_t r = 0; r < rb.num_rows(); ++r) {
      RunInfo ri;
      ESCPOD_RETURN_IF_ERROR(run_info_from_columns(get, r, &ri, ctx));
      ++info.n_run_info_rows;
      if (std::none_of(run_infos.begin(), run_infos.end(),
                       [&](const RunInfo& x) { return x.acquisition_id == ri.acquisition_id; })) {
        run_infos.push_back(std::move(ri));
      }
    }
  }
  return Status::ok();
}

Status FileReader::Impl::load_reads(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(reads_reader, open_table(t, "reads"));
  if (map_begin && t.offset >= 0 && static_cast<size_t>(t.offset + t.length) <= map_size) {
    reads_table_begin = map_begin + t.offset;
    reads_table_end = reads_table_begin + t.length;
  }
  ESCPOD_RETURN_IF_ERROR(load_reads(*reads_reader->schema(), reads_reader->num_record_batches(),
                                    [this](int b) { return reads_reader->ReadRecordBatch(b); }));
  if (lazy_signal && !legacy_struct_columns && reads_table_begin) {
    row_reader = detail::ReadsRowReader::create(fd.get(), reads_table_begin, static_cast<uint64_t>(t.offset),
                                                static_cast<uint64_t>(t.length), *reads_reader->schema());
    if (row_reader && row_reader->n_batches() != read_batches.size()) row_reader.reset();
  }
  return Status::ok();
}

Status FileReader::Impl::load_reads(const arrow::Schema& schema, int n_batches,
                                    const BatchSource& get_batch) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "reads"));
  for (int i = 0; i < schema.num_fields(); ++i) col[schema.field(i)->name()] = i;

  auto expect = [&](const char* name, const std::shared_ptr<arrow::DataType>& type,
                    bool required) -> Status {
    auto it = col.find(name);
    if (it == col.end()) {
      return required ? Status::corrupt(where() + ": reads table lacks column '" + name + "'")
                      : Status::ok();
    }
    const auto& found = schema.field(it->second)->type();
    if (!found->Equals(*type)) return type_error(where(), "reads", name, type->ToString(), *found);
    return Status::ok();
  };
  // read_id and the signal row list are common to every version.
  const auto& id_field = *schema.field(col.count("read_id") ? col["read_id"] : 0);
  if (!col.count("read_id") || detail::extension_name(id_field) != "minknow.uuid") {
    return Status::corrupt(where() + ": reads table lacks a minknow.uuid 'read_id' column");
  }
  ESCPOD_RETURN_IF_ERROR(expect("signal", arrow::list(arrow::uint64()), true));
  ESCPOD_RETURN_IF_ERROR(expect("read_number", arrow::uint32(), true));
  ESCPOD_RETURN_IF_ERROR(expect("start", arrow::uint64(), true));
  ESCPOD_RETURN_IF_ERROR(expect("median_before", arrow::float32(), true));
  // V1 fields (optional: absent in V0).
  ESCPOD_RETURN_IF_ERROR(expect("num_minknow_events", arrow::uint64(), false));
  for (const char* f : {"tracked_scaling_scale", "tracked_scaling_shift", "predicted_scaling_scale",
                        "predicted_scaling_shift", "time_since_mux_change"}) {
    ESCPOD_RETURN_IF_ERROR(expect(f, arrow::float32(), false));
  }
  ESCPOD_RETURN_IF_ERROR(expect("num_reads_since_mux_change", arrow::uint32(), false));
  ESCPOD_RETURN_IF_ERROR(expect("num_samples", arrow::uint64(), false));
  for (const char* f : {"open_pore_level", "expected_open_pore_level", "selected_read_level"}) {
    ESCPOD_RETURN_IF_ERROR(expect(f, arrow::float32(), false));
  }

  legacy_struct_columns = col.count("pore") > 0;
  if (legacy_struct_columns) {
    for (const char* f : {"pore", "calibration", "end_reason", "run_info"}) {
      auto it = col.find(f);
      if (it == col.end()) return Status::corrupt(where() + ": V0-V2 reads table lacks '" + f + "'");
      const auto& type = *schema.field(it->second)->type();
      if (type.id() != arrow::Type::DICTIONARY ||
          static_cast<const arrow::DictionaryType&>(type).value_type()->id() != arrow::Type::STRUCT) {
        return type_error(where(), "reads", f, "dictionary<struct>", type);
      }
    }
    info.read_table_version = col.count("num_samples")          ? ReadTableVersion::kV2
                              : col.count("num_minknow_events") ? ReadTableVersion::kV1
                                                                : ReadTableVersion::kV0;
  } else {
    auto dict_type = arrow::dictionary(arrow::int16(), arrow::utf8());
    for (const char* f : {"pore_type", "end_reason", "run_info"}) {
      ESCPOD_RETURN_IF_ERROR(expect(f, dict_type, true));
    }
    ESCPOD_RETURN_IF_ERROR(expect("well", arrow::uint8(), true));
    ESCPOD_RETURN_IF_ERROR(expect("calibration_offset", arrow::float32(), true));
    ESCPOD_RETURN_IF_ERROR(expect("calibration_scale", arrow::float32(), true));
    ESCPOD_RETURN_IF_ERROR(expect("end_reason_forced", arrow::boolean(), true));
    ESCPOD_RETURN_IF_ERROR(expect("channel_32bit", arrow::uint32(), false));
    auto ch = col.find("channel");
    if (ch == col.end()) return Status::corrupt(where() + ": reads table lacks column 'channel'");
    const auto& ch_type = *schema.field(ch->second)->type();
    if (ch_type.id() != arrow::Type::UINT16 && ch_type.id() != arrow::Type::UINT32) {
      return type_error(where(), "reads", "channel", "uint16 or uint32", ch_type);
    }
    info.read_table_version = col.count("channel_32bit")              ? ReadTableVersion::kV7
                              : ch_type.id() == arrow::Type::UINT32   ? ReadTableVersion::kV6
                              : col.count("expected_open_pore_level") ? ReadTableVersion::kV5
                              : col.count("open_pore_level")          ? ReadTableVersion::kV4
                                                                      : ReadTableVersion::kV3;
  }

  if (given_layout) ESCPOD_RETURN_IF_ERROR(check_given_layout(*given_layout, n_batches));
  read_batch_first.push_back(0);
  ScanRelease release(*this);
  for (int b = 0; b < n_batches; ++b) {
    // A given row count spares reading the batch now (it is read, and checked, when used); the
    // last batch is always read: its dictionaries are the file's.
    if (given_layout && b + 1 < n_batches) {
      read_batch_first.push_back(read_batch_first.back() + given_layout->read_batch_rows[static_cast<size_t>(b)]);
      read_batches.push_back(nullptr);
      continue;
    }
    auto batch = get_batch(b);
    const std::string ctx = where() + ": reads batch " + std::to_string(b);
    if (!batch.ok()) return from_arrow(batch.status(), ctx);
    if (given_layout && static_cast<uint64_t>((*batch)->num_rows()) != given_layout->read_batch_rows.back()) {
      return Status::corrupt(ctx + " holds " + std::to_string((*batch)->num_rows()) + " rows, " +
                             std::to_string(given_layout->read_batch_rows.back()) + " expected (" +
                             read_rows_source + ")");
    }
    // The last batch holds the complete dictionaries the string tables come from: always checked
    // (without validate_all_batches only its dictionaries: the batch is checked when decoded).
    if (validated_at_open) {
      ESCPOD_RETURN_IF_ERROR(from_arrow((*batch)->ValidateFull(), ctx));
    } else if (b + 1 == n_batches) {
      for (const auto& column : (*batch)->columns()) {
        if (column->type_id() != arrow::Type::DICTIONARY) continue;
        const auto& values = static_cast<const arrow::DictionaryArray&>(*column).dictionary();
        ESCPOD_RETURN_IF_ERROR(from_arrow(values->ValidateFull(), ctx + " dictionary"));
      }
    }
    // Validation read the whole batch: release what it read as the scan goes, so opening a
    // huge file keeps a small resident set too.
    const auto [lo, hi] = batch_span(**batch);
    if (lo) release.reached(lo, hi);
    read_batch_first.push_back(read_batch_first.back() + static_cast<uint64_t>((*batch)->num_rows()));
    const bool keep = !reads_reader || b + 1 == n_batches;
    read_batches.push_back(keep ? std::move(*batch) : nullptr);
  }
  info.n_read_batches = read_batches.size();
  info.n_reads = read_batch_first.back();
  return legacy_struct_columns ? load_legacy_dictionaries() : load_dictionaries();
}

// V3+: string dictionaries. Arrow's file reader applies every dictionary (deltas included) up
// front, so the last batch's dictionary is the complete one and earlier indices stay valid.
Status FileReader::Impl::load_dictionaries() {
  if (read_batches.empty()) return Status::ok();
  const auto& last = *read_batches.back();
  auto strings = [&](const char* name, std::vector<std::string>& out) {
    auto d = std::static_pointer_cast<arrow::DictionaryArray>(last.column(col.at(name)));
    auto values = std::static_pointer_cast<arrow::StringArray>(d->dictionary());
    out.clear();
    for (int64_t i = 0; i < values->length(); ++i) out.push_back(values->GetString(i));
  };
  strings("pore_type", pore_types);
  strings("end_reason", end_reasons);
  strings("run_info", run_info_ids);
  return Status::ok();
}

// V0-V2: pore, calibration, end_reason and run_info are dictionaries of structs; derive our
// columns per dictionary entry once, and the run infos from the run_info structs.
Status FileReader::Impl::load_legacy_dictionaries() {
  if (read_batches.empty()) return Status::ok();
  const auto& last = *read_batches.back();
  const std::string ctx = where() + ": reads table";
  auto struct_dict = [&](const char* name) {
    auto d = std::static_pointer_cast<arrow::DictionaryArray>(last.column(col.at(name)));
    return std::static_pointer_cast<arrow::StructArray>(d->dictionary());
  };
  auto field = [&](const std::shared_ptr<arrow::StructArray>& s, const char* f,
                   arrow::Type::type type) -> Result<std::shared_ptr<arrow::Array>> {
    auto a = s->GetFieldByName(f);
    if (!a || a->type_id() != type) {
      return Status::corrupt(ctx + ": struct field '" + f + "' missing or of the wrong type");
    }
    return a;
  };
  {
    auto pore = struct_dict("pore");
    ESCPOD_ASSIGN_OR_RETURN(auto channel, field(pore, "channel", arrow::Type::UINT16));
    ESCPOD_ASSIGN_OR_RETURN(auto well, field(pore, "well", arrow::Type::UINT8));
    ESCPOD_ASSIGN_OR_RETURN(auto type, field(pore, "pore_type", arrow::Type::STRING));
    for (int64_t i = 0; i < pore->length(); ++i) {
      dict.pore_channel.push_back(static_cast<const arrow::UInt16Array&>(*channel).Value(i));
      dict.pore_well.push_back(static_cast<const arrow::UInt8Array&>(*well).Value(i));
      dict.pore_type.push_back(
          intern(pore_types, static_cast<const arrow::StringArray&>(*type).GetString(i)));
    }
  }
  {
    auto calib = struct_dict("calibration");
    ESCPOD_ASSIGN_OR_RETURN(auto offset, field(calib, "offset", arrow::Type::FLOAT));
    ESCPOD_ASSIGN_OR_RETURN(auto scale, field(calib, "scale", arrow::Type::FLOAT));
    for (int64_t i = 0; i < calib->length(); ++i) {
      dict.calib_offset.push_back(static_cast<const arrow::FloatArray&>(*offset).Value(i));
      dict.calib_scale.push_back(static_cast<const arrow::FloatArray&>(*scale).Value(i));
    }
  }
  {
    auto end = struct_dict("end_reason");
    ESCPOD_ASSIGN_OR_RETURN(auto name, field(end, "name", arrow::Type::STRING));
    ESCPOD_ASSIGN_OR_RETURN(auto forced, field(end, "forced", arrow::Type::BOOL));
    for (int64_t i = 0; i < end->length(); ++i) {
      dict.end_reason.push_back(
          intern(end_reasons, static_cast<const arrow::StringArray&>(*name).GetString(i)));
      dict.end_forced.push_back(static_cast<const arrow::BooleanArray&>(*forced).Value(i));
    }
  }
  {
    auto runs = struct_dict("run_info");
    auto get = [&runs](const char* name) { return runs->GetFieldByName(name); };
    for (int64_t i = 0; i < runs->length(); ++i) {
      RunInfo ri;
      ESCPOD_RETURN_IF_ERROR(run_info_from_columns(get, i, &ri, ctx));
      dict.run_info.push_back(intern(run_info_ids, ri.acquisition_id));
      ++info.n_run_info_rows;
      if (std::none_of(run_infos.begin(), run_infos.end(),
                       [&](const RunInfo& x) { return x.acquisition_id == ri.acquisition_id; })) {
        run_infos.push_back(std::move(ri));
      }
    }
  }
  return Status::ok();
}

Status FileReader::Impl::decode_batch(size_t batch_idx, ReadBatch* out) const {
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, reads_batch(batch_idx));
  const arrow::RecordBatch& rb = *held;
  ESCPOD_RETURN_IF_ERROR(check_batch(rb, batch_idx));
  ESCPOD_RETURN_IF_ERROR(decode_rows(batch_idx, rb, read_batch_first[batch_idx], out));
  // Every value is copied into `out`: the batch's pages are not needed again.
  drop_reads_batch_pages(batch_idx, rb);
  return Status::ok();
}

// Decodes `rb`, reads batch `batch_idx` or a slice of it (Arrow's raw accessors honour the
// slice offset).
Status FileReader::Impl::decode_rows(size_t batch_idx, const arrow::RecordBatch& rb,
                                     uint64_t first_read_idx, ReadBatch* out) const {
  const int64_t n = rb.num_rows();
  const auto rows = static_cast<size_t>(n);
  out->batch_idx = batch_idx;
  out->first_read_idx = first_read_idx;

  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(column(rb, "read_id"));
  out->read_id.resize(rows);
  if (n > 0) std::memcpy(out->read_id.data(), ids->raw_values(), rows * 16);

  auto list = std::static_pointer_cast<arrow::ListArray>(column(rb, "signal"));
  auto list_values = std::static_pointer_cast<arrow::UInt64Array>(list->values());
  const int32_t* offs = list->raw_value_offsets();
  out->signal_offsets.resize(rows + 1);
  out->signal_rows.assign(list_values->raw_values() + offs[0], list_values->raw_values() + offs[n]);
  for (size_t i = 0; i <= rows; ++i) out->signal_offsets[i] = static_cast<uint64_t>(offs[i] - offs[0]);

  copy_column<arrow::UInt32Type>(column(rb, "read_number"), n, uint32_t{0}, out->read_number);
  copy_column<arrow::UInt64Type>(column(rb, "start"), n, uint64_t{0}, out->start_sample);
  copy_column<arrow::FloatType>(column(rb, "median_before"), n, kNaN, out->median_before);
  copy_column<arrow::UInt64Type>(column(rb, "num_minknow_events"), n, uint64_t{0},
                                 out->num_minknow_events);
  copy_column<arrow::FloatType>(column(rb, "tracked_scaling_scale"), n, kNaN, out->tracked_scaling_scale);
  copy_column<arrow::FloatType>(column(rb, "tracked_scaling_shift"), n, kNaN, out->tracked_scaling_shift);
  copy_column<arrow::FloatType>(column(rb, "predicted_scaling_scale"), n, kNaN,
                                out->predicted_scaling_scale);
  copy_column<arrow::FloatType>(column(rb, "predicted_scaling_shift"), n, kNaN,
                                out->predicted_scaling_shift);
  copy_column<arrow::UInt32Type>(column(rb, "num_reads_since_mux_change"), n, uint32_t{0},
                                 out->num_reads_since_mux_change);
  copy_column<arrow::FloatType>(column(rb, "time_since_mux_change"), n, 0.0f,
                                out->time_since_mux_change);
  copy_column<arrow::FloatType>(column(rb, "open_pore_level"), n, kNaN, out->open_pore_level);
  copy_column<arrow::FloatType>(column(rb, "expected_open_pore_level"), n, kNaN,
                                out->expected_open_pore_level);
  copy_column<arrow::FloatType>(column(rb, "selected_read_level"), n, kNaN, out->selected_read_level);

  auto indices = [&](const char* name, size_t dict_size, std::vector<int16_t>& dst) -> Status {
    auto d = std::static_pointer_cast<arrow::DictionaryArray>(rb.column(col.at(name)));
    auto idx = std::static_pointer_cast<arrow::Int16Array>(d->indices());
    dst.resize(rows);
    for (size_t i = 0; i < rows; ++i) dst[i] = idx->Value(static_cast<int64_t>(i));
    return check_index_range(batch_idx, first_read_idx - read_batch_first[batch_idx], name, dst, dict_size);
  };

  if (legacy_struct_columns) {
    std::vector<int16_t> pore, calib, end, run;
    ESCPOD_RETURN_IF_ERROR(indices("pore", dict.pore_type.size(), pore));
    ESCPOD_RETURN_IF_ERROR(indices("calibration", dict.calib_offset.size(), calib));
    ESCPOD_RETURN_IF_ERROR(indices("end_reason", dict.end_reason.size(), end));
    ESCPOD_RETURN_IF_ERROR(indices("run_info", dict.run_info.size(), run));
    out->channel.resize(rows);
    out->well.resize(rows);
    out->pore_type_idx.resize(rows);
    out->calibration_offset.resize(rows);
    out->calibration_scale.resize(rows);
    out->end_reason_idx.resize(rows);
    out->end_reason_forced.resize(rows);
    out->run_info_idx.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      const auto p = static_cast<size_t>(pore[i]), c = static_cast<size_t>(calib[i]);
      const auto e = static_cast<size_t>(end[i]), r = static_cast<size_t>(run[i]);
      out->channel[i] = dict.pore_channel[p];
      out->well[i] = dict.pore_well[p];
      out->pore_type_idx[i] = dict.pore_type[p];
      out->calibration_offset[i] = dict.calib_offset[c];
      out->calibration_scale[i] = dict.calib_scale[c];
      out->end_reason_idx[i] = dict.end_reason[e];
      out->end_reason_forced[i] = dict.end_forced[e];
      out->run_info_idx[i] = dict.run_info[r];
    }
  } else {
    ESCPOD_RETURN_IF_ERROR(indices("pore_type", pore_types.size(), out->pore_type_idx));
    ESCPOD_RETURN_IF_ERROR(indices("end_reason", end_reasons.size(), out->end_reason_idx));
    ESCPOD_RETURN_IF_ERROR(indices("run_info", run_info_ids.size(), out->run_info_idx));
    if (auto c32 = column(rb, "channel_32bit")) {
      copy_column<arrow::UInt32Type>(c32, n, uint32_t{0}, out->channel);
    } else if (auto ch = column(rb, "channel"); ch->type_id() == arrow::Type::UINT32) {
      copy_column<arrow::UInt32Type>(ch, n, uint32_t{0}, out->channel);
    } else {
      copy_column<arrow::UInt16Type>(ch, n, uint32_t{0}, out->channel);
    }
    copy_column<arrow::UInt8Type>(column(rb, "well"), n, uint8_t{0}, out->well);
    copy_column<arrow::FloatType>(column(rb, "calibration_offset"), n, 0.0f, out->calibration_offset);
    copy_column<arrow::FloatType>(column(rb, "calibration_scale"), n, 0.0f, out->calibration_scale);
    auto forced = std::static_pointer_cast<arrow::BooleanArray>(column(rb, "end_reason_forced"));
    out->end_reason_forced.resize(rows);
    for (size_t i = 0; i < rows; ++i) out->end_reason_forced[i] = forced->Value(static_cast<int64_t>(i));
  }

  if (auto ns = column(rb, "num_samples")) {
    copy_column<arrow::UInt64Type>(ns, n, uint64_t{0}, out->num_samples);
  } else {
    // V0-V1: the sum of the read's chunk sizes, from the signal table.
    ESCPOD_RETURN_IF_ERROR(ensure_signal());
    out->num_samples.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      uint64_t total = 0;
      for (uint64_t row : out->rows_of(i)) {
        int64_t in_batch = 0;
        Status located;
        const SignalBatchView* v = locate(row, &in_batch, &located);
        if (!located.is_ok()) return located;
        if (!v) {
          return Status::corrupt(where() + ": read " + out->read_id[i].to_string() +
                                 " refers to signal row " + std::to_string(row) + " of " +
                                 std::to_string(signal_info.n_rows));
        }
        total += v->samples[in_batch];
      }
      out->num_samples[i] = total;
    }
  }
  // Row counts given at open are trusted for the batches not loaded; a wrong one would shift
  // signal rows onto other reads' chunks. The signal table names each chunk's read: check it.
  if (!given_signal_first.empty()) ESCPOD_RETURN_IF_ERROR(check_signal_owners(*out));
  return Status::ok();
}

Status FileReader::Impl::check_index_range(size_t batch_idx, size_t first_row, const char* name,
                                           std::span<const int16_t> idx, size_t dict_size) const {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || static_cast<size_t>(idx[i]) >= dict_size) {
      return Status::corrupt(where() + ": reads batch " + std::to_string(batch_idx) + " row " +
                             std::to_string(first_row + i) +
                             ": " + name + " index " + std::to_string(idx[i]) + " outside its dictionary");
    }
  }
  return Status::ok();
}

Status FileReader::Impl::check_dictionary_indices(const ReadBatch& batch, size_t batch_idx) const {
  const size_t first_row = batch.first_read_idx - read_batch_first[batch_idx];
  ESCPOD_RETURN_IF_ERROR(check_index_range(batch_idx, first_row, "pore_type", batch.pore_type_idx, pore_types.size()));
  ESCPOD_RETURN_IF_ERROR(check_index_range(batch_idx, first_row, "end_reason", batch.end_reason_idx, end_reasons.size()));
  return check_index_range(batch_idx, first_row, "run_info", batch.run_info_idx, run_info_ids.size());
}

Status FileReader::Impl::check_signal_owners(const ReadBatch& batch) const {
  ESCPOD_RETURN_IF_ERROR(ensure_signal());
  for (size_t i = 0; i < batch.size(); ++i) {
    for (uint64_t row : batch.rows_of(i)) {
      int64_t in_batch = 0;
      Status located;
      const SignalBatchView* v = locate(row, &in_batch, &located);
      ESCPOD_RETURN_IF_ERROR(located);
      if (!v || std::memcmp(v->read_ids + 16 * in_batch, batch.read_id[i].bytes.data(), 16) != 0) {
        return Status::corrupt(where() + ": read " + batch.read_id[i].to_string() + ": signal row " +
                               std::to_string(row) + (v ? " belongs to another read" : " is out of range") +
                               " by " + signal_rows_source + " (it does not describe this file)");
      }
    }
  }
  return Status::ok();
}

const SignalBatchView* FileReader::Impl::locate(uint64_t row, int64_t* row_in_batch, Status* status) const {
  if (row >= signal_info.n_rows) return nullptr;
  // Uniform files (the norm) resolve with one division; others by binary search.
  size_t b;
  const uint64_t stride = signal_batch_first.size() > 1 ? signal_batch_first[1] : 0;
  if (signal_info.uniform && stride > 0) {
    b = static_cast<size_t>(row / stride);
  } else {
    b = static_cast<size_t>(std::upper_bound(signal_batch_first.begin(), signal_batch_first.end(), row) -
                            signal_batch_first.begin()) - 1;
  }
  *row_in_batch = static_cast<int64_t>(row - signal_batch_first[b]);
  return batch_view(b, status);
}

Result<std::unique_ptr<FileReader>> FileReader::open(const std::filesystem::path& path) {
  return open(path, OpenOptions{});
}

Result<std::unique_ptr<FileReader>> FileReader::open(const std::filesystem::path& path,
                                                     const OpenOptions& options) {
  detail::register_extension_types();
  auto impl = std::make_unique<Impl>();
  impl->info.path = path;
  impl->validated_at_open = options.validate_all_batches;
  impl->lazy_signal = !options.validate_all_batches;
  if (options.layout && !options.validate_all_batches) {
    impl->given_layout = options.layout;
    impl->read_rows_source = impl->signal_rows_source = "the given batch layout";
    impl->given_signal_first.reserve(options.layout->signal_batch_rows.size() + 1);
    impl->given_signal_first.push_back(0);
    for (uint32_t rows : options.layout->signal_batch_rows) {
      impl->given_signal_first.push_back(impl->given_signal_first.back() + rows);
    }
  }
  ESCPOD_ASSIGN_OR_RETURN(detail::Footer footer, detail::read_footer(path, &impl->info.file_size));
  impl->info.file_identifier = footer.file_identifier;
  impl->info.software = footer.software;
  impl->info.pod5_version = footer.pod5_version;
  impl->info.warnings = footer.warnings;
  impl->info.reads_table = {footer.reads.offset, footer.reads.length};
  impl->info.run_info_table = {footer.run_info.offset, footer.run_info.length};
  impl->info.signal_table = {footer.signal.offset, footer.signal.length};

  auto mapped = arrow::io::MemoryMappedFile::Open(path.string(), arrow::io::FileMode::READ);
  if (!mapped.ok()) return from_arrow(mapped.status(), path.string() + ": cannot map");
  impl->file = *mapped;
  {
    // The mapping's base: ReadAt on a memory-mapped file is a zero-copy slice of the map (one
    // byte: a whole-file ReadAt would advise reading all of it ahead, see table_bytes).
    auto size = impl->file->GetSize();
    if (!size.ok() || static_cast<uint64_t>(*size) != impl->info.file_size) {
      return Status::io_error(path.string() + ": changed while being opened (size)");
    }
    auto first = impl->file->ReadAt(0, 1);
    if (!first.ok()) return from_arrow(first.status(), path.string() + ": cannot map");
    impl->map_begin = (*first)->data();
    impl->map_size = impl->info.file_size;
  }

  if (impl->lazy_signal) impl->fd = detail::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ESCPOD_RETURN_IF_ERROR(impl->open_signal(footer.signal));
  ESCPOD_RETURN_IF_ERROR(impl->load_reads(footer.reads));
  impl->given_layout = nullptr;  // the caller's; the signal counts were copied
  if (footer.run_info.present() && !impl->legacy_struct_columns) {
    ESCPOD_RETURN_IF_ERROR(impl->load_run_info(footer.run_info));
  } else if (!impl->legacy_struct_columns) {
    return Status::corrupt(path.string() + ": footer lacks the run info table");
  }
  for (const auto& id : impl->run_info_ids) {
    if (!std::any_of(impl->run_infos.begin(), impl->run_infos.end(),
                     [&](const RunInfo& r) { return r.acquisition_id == id; })) {
      impl->info.warnings.push_back("reads refer to run info '" + id +
                                    "' missing from the run info table");
    }
  }
  // Opening touched every reads batch's metadata (and the kernel mapped pages around each);
  // release them: batches are mapped in again one at a time as they are decoded.
  impl->drop_pages(impl->map_begin, impl->map_begin + impl->map_size);
  return std::unique_ptr<FileReader>(new FileReader(std::move(impl)));
}

Result<std::unique_ptr<FileReader>> FileReader::open_recovered(detail::RecoveredTables tables) {
  detail::register_extension_types();
  auto impl = std::make_unique<Impl>();
  impl->info.path = tables.path;
  impl->info.file_size = tables.file_size;
  impl->info.file_identifier = tables.file_identifier;
  impl->info.software = tables.software;
  impl->info.pod5_version = tables.pod5_version;
  if (tables.main) {
    auto whole = tables.main->ReadAt(0, static_cast<int64_t>(tables.file_size));
    if (!whole.ok()) return from_arrow(whole.status(), tables.path.string() + ": cannot map");
    impl->file = tables.main;
    impl->map_begin = (*whole)->data();
    impl->map_size = static_cast<size_t>((*whole)->size());
  }
  if (tables.signal_schema) {
    ESCPOD_RETURN_IF_ERROR(impl->check_signal_schema(*tables.signal_schema));
    impl->given_signal = std::move(tables.signal);
  }
  if (tables.reads_schema) {
    auto& batches = tables.reads;
    ESCPOD_RETURN_IF_ERROR(impl->load_reads(*tables.reads_schema, static_cast<int>(batches.size()),
                                            [&batches](int b) { return batches[static_cast<size_t>(b)]; }));
  }
  if (tables.run_info_schema && !impl->legacy_struct_columns) {
    auto& batches = tables.run_info;
    ESCPOD_RETURN_IF_ERROR(impl->load_run_info(*tables.run_info_schema,
                                               static_cast<int>(batches.size()),
                                               [&batches](int b) { return batches[static_cast<size_t>(b)]; }));
  }
  return std::unique_ptr<FileReader>(new FileReader(std::move(impl)));
}

Result<SignalTableInfo> FileReader::signal_table_info() const {
  ESCPOD_RETURN_IF_ERROR(m_impl->ensure_signal());
  if (m_impl->lazy_ready) {
    // Lazy files count their samples on this first request (every batch loaded).
    const Impl& im = *m_impl;
    std::call_once(im.samples_once, [&im] {
      uint64_t total = 0;
      for (size_t b = 0; b < im.signal_batches.size(); ++b) {
        Status st;
        const SignalBatchView* v = im.batch_view(b, &st);
        if (!v) {
          im.samples_status = st;
          return;
        }
        for (int64_t r = 0; r < v->n_rows; ++r) total += v->samples[r];
      }
      im.signal_info.n_samples = total;
    });
    ESCPOD_RETURN_IF_ERROR(im.samples_status);
  }
  return m_impl->signal_info;
}

Result<BatchLayout> FileReader::batch_layout() const {
  ESCPOD_RETURN_IF_ERROR(m_impl->ensure_signal());
  BatchLayout out;
  auto counts = [this](const std::vector<uint64_t>& first, const char* table,
                       std::vector<uint32_t>* rows) -> Status {
    for (size_t b = 0; b + 1 < first.size(); ++b) {
      const uint64_t n = first[b + 1] - first[b];
      if (n > UINT32_MAX) {
        return Status::unsupported(m_impl->where() + ": " + table + " batch " + std::to_string(b) + " holds " +
                                   std::to_string(n) + " rows (more than 2^32)");
      }
      rows->push_back(static_cast<uint32_t>(n));
    }
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(counts(m_impl->read_batch_first, "reads", &out.read_batch_rows));
  ESCPOD_RETURN_IF_ERROR(counts(m_impl->signal_batch_first, "signal", &out.signal_batch_rows));
  return out;
}

Result<ReadBatch> FileReader::read_batch(size_t batch_idx) const {
  if (batch_idx >= m_impl->read_batches.size()) {
    return Status::invalid_argument(m_impl->where() + ": reads batch " + std::to_string(batch_idx) +
                                    " of " + std::to_string(m_impl->read_batches.size()));
  }
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(m_impl->decode_batch(batch_idx, &batch));
  return batch;
}

size_t FileReader::batch_rows(size_t batch_idx) const {
  if (batch_idx >= m_impl->read_batches.size()) return 0;
  return m_impl->batch_rows_of(batch_idx);
}

bool FileReader::reads_rows_from_file() const { return m_impl->row_reader != nullptr; }

Result<ReadBatch> FileReader::read_batch_rows(size_t batch_idx, size_t first_row, size_t n_rows) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->check_row_range(batch_idx, first_row, n_rows));
  if (m_impl->row_reader && !m_impl->read_batches[batch_idx]) {
    return m_impl->rows_from_file(batch_idx, first_row, n_rows, detail::ReadsRowReader::Columns::kAll);
  }
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, m_impl->reads_batch(batch_idx));
  auto slice = held->Slice(static_cast<int64_t>(first_row),
                                                      static_cast<int64_t>(n_rows));
  ESCPOD_RETURN_IF_ERROR(m_impl->check_slice(*slice, batch_idx));
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(
      m_impl->decode_rows(batch_idx, *slice, m_impl->read_batch_first[batch_idx] + first_row, &batch));
  return batch;
}

Result<ReadBatch> FileReader::read_signal_ref(size_t batch_idx, size_t row) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->check_row_range(batch_idx, row, 1));
  if (m_impl->row_reader && !m_impl->read_batches[batch_idx]) {
    return m_impl->rows_from_file(batch_idx, row, 1, detail::ReadsRowReader::Columns::kSignal);
  }
  return read_batch_rows(batch_idx, row, 1);
}

Status FileReader::Impl::check_row_range(size_t batch_idx, size_t first_row, size_t n_rows) const {
  const size_t n_batch = batch_idx < read_batches.size() ? batch_rows_of(batch_idx) : 0;
  if (batch_idx >= read_batches.size() || first_row > n_batch || n_rows > n_batch - first_row) {
    return Status::invalid_argument(where() + ": rows " + std::to_string(first_row) + "+" + std::to_string(n_rows) +
                                    " of reads batch " + std::to_string(batch_idx) + " (" + std::to_string(n_batch) +
                                    " rows, " + std::to_string(read_batches.size()) + " batches)");
  }
  return Status::ok();
}

Result<ReadBatch> FileReader::Impl::rows_from_file(size_t batch_idx, size_t first_row, size_t n_rows,
                                                   detail::ReadsRowReader::Columns columns) const {
  using Columns = detail::ReadsRowReader::Columns;
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(row_reader->read_rows(batch_idx, batch_rows_of(batch_idx), first_row, n_rows, &batch,
                                               where(), columns));
  batch.batch_idx = batch_idx;
  batch.first_read_idx = read_batch_first[batch_idx] + first_row;
  if (columns == Columns::kAll) ESCPOD_RETURN_IF_ERROR(check_dictionary_indices(batch, batch_idx));
  // As decode_rows: a batch layout given at open is checked against the signal table's owners.
  if (columns != Columns::kIds && !given_signal_first.empty()) ESCPOD_RETURN_IF_ERROR(check_signal_owners(batch));
  return batch;
}

Result<std::vector<ReadId>> FileReader::read_batch_ids(size_t batch_idx) const {
  if (batch_idx >= m_impl->read_batches.size()) {
    return Status::invalid_argument(m_impl->where() + ": reads batch " + std::to_string(batch_idx) +
                                    " of " + std::to_string(m_impl->read_batches.size()));
  }
  if (m_impl->row_reader && !m_impl->read_batches[batch_idx]) {
    // Random-access opens: the id column alone, in one read of the file.
    ESCPOD_ASSIGN_OR_RETURN(ReadBatch rows, m_impl->rows_from_file(batch_idx, 0, batch_rows(batch_idx),
                                                                  detail::ReadsRowReader::Columns::kIds));
    return std::move(rows.read_id);
  }
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, m_impl->reads_batch(batch_idx));
  const arrow::RecordBatch& rb = *held;
  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(m_impl->column(rb, "read_id"));
  if (!m_impl->validated_at_open) {
    ESCPOD_RETURN_IF_ERROR(from_arrow(ids->ValidateFull(), m_impl->where() + ": reads batch " +
                                                               std::to_string(batch_idx) + " read_id"));
  }
  std::vector<ReadId> out(static_cast<size_t>(ids->length()));
  if (!out.empty()) std::memcpy(out.data(), ids->raw_values(), out.size() * 16);
  // Copied out: release the pages read (and those the kernel mapped around them), so a pass over
  // every id of a huge file (merge's duplicate check) keeps a small resident set.
  m_impl->drop_reads_batch_pages(batch_idx, rb);
  // A pass over every batch's ids (merge's duplicate check) leaves IPC headers and dictionary
  // messages mapped around each batch (~22 KB a batch, measured): its last batch releases the
  // whole table.
  if (batch_idx + 1 == m_impl->read_batches.size() && m_impl->reads_table_begin) {
    m_impl->drop_pages(m_impl->reads_table_begin, m_impl->reads_table_end);
    m_impl->reads_dropped_until.store(0);  // the next pass starts from the table's beginning
  }
  return out;
}

void ReadBatch::append_row(const ReadBatch& from, size_t i) {
  auto one = [&](auto& to, const auto& column) { to.push_back(column[i]); };
  one(read_id, from.read_id);
  if (signal_offsets.empty()) signal_offsets.push_back(0);
  const std::span<const uint64_t> rows = from.rows_of(i);
  signal_rows.insert(signal_rows.end(), rows.begin(), rows.end());
  signal_offsets.push_back(signal_rows.size());
  one(read_number, from.read_number);
  one(start_sample, from.start_sample);
  one(median_before, from.median_before);
  one(num_minknow_events, from.num_minknow_events);
  one(tracked_scaling_scale, from.tracked_scaling_scale);
  one(tracked_scaling_shift, from.tracked_scaling_shift);
  one(predicted_scaling_scale, from.predicted_scaling_scale);
  one(predicted_scaling_shift, from.predicted_scaling_shift);
  one(num_reads_since_mux_change, from.num_reads_since_mux_change);
  one(time_since_mux_change, from.time_since_mux_change);
  one(num_samples, from.num_samples);
  one(channel, from.channel);
  one(well, from.well);
  one(pore_type_idx, from.pore_type_idx);
  one(calibration_offset, from.calibration_offset);
  one(calibration_scale, from.calibration_scale);
  one(end_reason_idx, from.end_reason_idx);
  one(end_reason_forced, from.end_reason_forced);
  one(run_info_idx, from.run_info_idx);
  one(open_pore_level, from.open_pore_level);
  one(expected_open_pore_level, from.expected_open_pore_level);
  one(selected_read_level, from.selected_read_level);
}

ReadRecord FileReader::record(const ReadBatch& b, size_t i) const {
  ReadRecord r;
  r.read_id = b.read_id[i];
  r.read_number = b.read_number[i];
  r.start_sample = b.start_sample[i];
  r.median_before = b.median_before[i];
  r.num_minknow_events = b.num_minknow_events[i];
  r.tracked_scaling_scale = b.tracked_scaling_scale[i];
  r.tracked_scaling_shift = b.tracked_scaling_shift[i];
  r.predicted_scaling_scale = b.predicted_scaling_scale[i];
  r.predicted_scaling_shift = b.predicted_scaling_shift[i];
  r.num_reads_since_mux_change = b.num_reads_since_mux_change[i];
  r.time_since_mux_change = b.time_since_mux_change[i];
  r.num_samples = b.num_samples[i];
  r.channel = b.channel[i];
  r.well = b.well[i];
  r.pore_type = m_impl->pore_types[static_cast<size_t>(b.pore_type_idx[i])];
  r.calibration_offset = b.calibration_offset[i];
  r.calibration_scale = b.calibration_scale[i];
  r.end_reason = m_impl->end_reasons[static_cast<size_t>(b.end_reason_idx[i])];
  r.end_reason_forced = b.end_reason_forced[i] != 0;
  r.run_info = m_impl->run_info_ids[static_cast<size_t>(b.run_info_idx[i])];
  r.open_pore_level = b.open_pore_level[i];
  r.expected_open_pore_level = b.expected_open_pore_level[i];
  r.selected_read_level = b.selected_read_level[i];
  auto rows = b.rows_of(i);
  r.signal_rows.assign(rows.begin(), rows.end());
  return r;
}

Status FileReader::for_each_batch(int n_threads,
                                  const std::function<Status(const ReadBatch&)>& fn) const {
  const size_t n = n_read_batches();
  if (n_threads <= 1 || n <= 1) {
    for (size_t b = 0; b < n; ++b) {
      ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, read_batch(b));
      ESCPOD_RETURN_IF_ERROR(fn(batch));
    }
    return Status::ok();
  }
  // Batches in parallel; the error returned is the first failing batch's (in batch order, as the
  // serial loop above returns), and batches not yet started are skipped once one fails.
  return parallel_for(Executor::for_threads(n_threads), n, [&](size_t b) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, read_batch(b));
    return fn(batch);
  });
}

Result<ReadRecord> FileReader::find_read(const ReadId& id) const {
  std::call_once(m_impl->id_index_once, [this] {
    for (size_t b = 0; b < m_impl->read_batches.size(); ++b) {
      auto held = m_impl->reads_batch(b);
      if (!held.is_ok()) {
        m_impl->id_index_status = held.status();
        return;
      }
      auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(m_impl->column(**held, "read_id"));
      for (int64_t r = 0; r < ids->length(); ++r) {
        ReadId rid;
        std::memcpy(rid.bytes.data(), ids->GetValue(r), 16);
        m_impl->id_index.emplace(rid, std::make_pair(static_cast<uint32_t>(b), static_cast<uint32_t>(r)));
      }
    }
  });
  ESCPOD_RETURN_IF_ERROR(m_impl->id_index_status);
  auto it = m_impl->id_index.find(id);
  if (it == m_impl->id_index.end()) {
    return Status::not_found(m_impl->where() + ": no read " + id.to_string());
  }
  ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, read_batch(it->second.first));
  return record(batch, it->second.second);
}

Result<SignalChunk> FileReader::signal_chunk(uint64_t row) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->ensure_signal());
  int64_t r = 0;
  Status located;
  const SignalBatchView* v = m_impl->locate(row, &r, &located);
  if (!located.is_ok()) return located;
  if (!v) {
    return Status::corrupt(m_impl->where() + ": signal row " + std::to_string(row) +
                           " out of range (" + std::to_string(m_impl->signal_info.n_rows) + " rows)");
  }
  SignalChunk c;
  c.n_samples = v->samples[r];
  std::memcpy(c.read_id.bytes.data(), v->read_ids + 16 * r, 16);
  const int64_t begin = v->offsets[r], end = v->offsets[r + 1];
  if (m_impl->info.is_vbz) {
    c.bytes = {v->vbz_data + begin, static_cast<size_t>(end - begin)};
  } else {
    c.bytes = {reinterpret_cast<const uint8_t*>(v->raw_values + begin),
               static_cast<size_t>(end - begin) * sizeof(int16_t)};
  }
  return c;
}

void FileReader::drop_signal_pages(uint64_t end_row, const ReleaseHook& before) const {
  // Files read lazily (random access) hold only the batches they touched: nothing to stream past.
  if (!m_impl->ensure_signal().is_ok() || m_impl->lazy_ready) return;
  const Impl& im = *m_impl;
  const auto& batches = im.signal_batches;
  if (batches.empty()) return;
  // Batches are laid out in the file in order: everything below the first batch that still
  // holds rows >= end_row (its lowest buffer) can go, including the IPC metadata and the pages
  // shared with the previous batch that a per-batch drop would have to keep.
  const auto& first = im.signal_batch_first;
  const size_t keep = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), end_row) -
                                          first.begin()) - 1;
  const uint8_t* hi = keep < batches.size() ? batches[keep].region_begin : batches.back().bytes_end;
  uintptr_t seen = im.signal_dropped_until.load(std::memory_order_relaxed);
  const uintptr_t start = seen ? seen : reinterpret_cast<uintptr_t>(batches.front().region_begin);
  if (reinterpret_cast<uintptr_t>(hi) <= start) return;
  // Release kDropStride of file at a time, and whatever is left once the end is reached.
  const bool to_end = keep >= batches.size();
  if (!to_end && reinterpret_cast<uintptr_t>(hi) - start < static_cast<uintptr_t>(Impl::kDropStride)) return;
  // Another caller advancing the mark concurrently drops its own range; only one drops this one.
  if (!im.signal_dropped_until.compare_exchange_strong(seen, reinterpret_cast<uintptr_t>(hi))) return;
  if (before) before(reinterpret_cast<const void*>(start), hi);
  im.drop_behind(start, hi);
}

void FileReader::drop_signal_pages_behind(const ReadBatch& done, const ReleaseHook& before) const {
  if (done.signal_rows.empty() || !m_impl->ensure_signal().is_ok()) return;
  const auto [lowest, highest] = std::minmax_element(done.signal_rows.begin(), done.signal_rows.end());
  // A batch holding the last signal row finishes the file: everything can go.
  const bool last = *highest + 1 >= m_impl->signal_info.n_rows;
  drop_signal_pages(last ? UINT64_MAX : *lowest, before);
}

Result<uint64_t> FileReader::count_samples(std::span<const uint64_t> rows) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->ensure_signal());
  uint64_t total = 0;
  for (uint64_t row : rows) {
    int64_t r = 0;
    Status located;
    const SignalBatchView* v = m_impl->locate(row, &r, &located);
    if (!located.is_ok()) return located;
    if (!v) {
      return Status::corrupt(m_impl->where() + ": signal row " + std::to_string(row) +
                             " out of range (" + std::to_string(m_impl->signal_info.n_rows) + " rows)");
    }
    total += v->samples[r];
  }
  return total;
}

Status FileReader::read_signal(std::span<const uint64_t> rows, std::span<int16_t> out,
                               VbzCodec& codec) const {
  // Random-access readers copy each chunk's bytes out with pread rather than fault them in
  // through the mapping: a fault maps ~16 pages around the chunk (the kernel's fault-around),
  // each accounted and later unmapped, which cost more than the copy (measured: 1,000 random
  // reads of the 10-file benchmark set, bench/results/python.md, session 11).
  thread_local std::vector<uint8_t> copied;
  size_t pos = 0;
  for (uint64_t row : rows) {
    if (pos == out.size()) break;
    ESCPOD_ASSIGN_OR_RETURN(SignalChunk c, signal_chunk(row));
    if (const std::optional<uint64_t> at = m_impl->pread_offset(c.bytes)) {
      copied.resize(c.bytes.size());
      ESCPOD_RETURN_IF_ERROR(detail::pread_exact(m_impl->fd.get(), copied.data(), copied.size(), *at, m_impl->where()));
      c.bytes = {copied.data(), copied.size()};
    }
    const size_t take = std::min<size_t>(c.n_samples, out.size() - pos);
    auto dst = out.subspan(pos, take);
    Status s;
    if (m_impl->info.is_vbz) {
      s = take == c.n_samples ? codec.decompress(c.bytes, dst)
                              : codec.decompress_prefix(c.bytes, c.n_samples, dst);
    } else if (c.bytes.size() != size_t{c.n_samples} * 2) {
      s = Status::corrupt("holds " + std::to_string(c.bytes.size() / 2) + " samples, 'samples' says " +
                          std::to_string(c.n_samples));
    } else {
      std::memcpy(dst.data(), c.bytes.data(), take * sizeof(int16_t));
    }
    if (!s.is_ok()) {
      return s.with_context(m_impl->where() + ": signal row " + std::to_string(row) + " (read " +
                            c.read_id.to_string() + ")");
    }
    pos += take;
  }
  if (pos < out.size()) {
    return Status::corrupt(m_impl->where() + ": signal rows hold " + std::to_string(pos) +
                           " samples, " + std::to_string(out.size()) + " requested");
  }
  return Status::ok();
}


FileReader::FileReader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
FileReader::~FileReader() = default;

const FileInfo& FileReader::info() const { return m_impl->info; }
const std::filesystem::path& FileReader::path() const { return m_impl->info.path; }
const std::vector<RunInfo>& FileReader::run_infos() const { return m_impl->run_infos; }
const std::vector<std::string>& FileReader::pore_types() const { return m_impl->pore_types; }
const std::vector<std::string>& FileReader::end_reasons() const { return m_impl->end_reasons; }
const std::vector<std::string>& FileReader::run_info_ids() const { return m_impl->run_info_ids; }
size_t FileReader::n_read_batches() const { return m_impl->read_batches.size(); }

const RunInfo* FileReader::find_run_info(std::string_view acquisition_id) const {
  for (const auto& r : m_impl->run_infos)
    if (r.acquisition_id == acquisition_id) return &r;
  return nullptr;
}

}  // namespace escpod::pod5
