// FileReader's state, in the parts its members form (internal to the pod5 layer):
//   FileMapping       the file's memory mapping and the release of its pages
//                     (file_reader_mapping.cpp);
//   TablesAtOpen      the footer and what open() reads: the schemas' columns, the reads batches'
//                     row counts, the dictionaries and the run infos (file_reader_tables.cpp);
//   RecoveredBatches  the signal batches of a reader over tables salvaged by recovery;
//   OnDemandAccess    what is opened or decoded on first use: reads batches read again, rows read
//                     straight from the file, the signal table's batches, the read-id index
//                     (file_reader.cpp).
// FileReader::Impl holds one of each, and the steps that span them (opening, decoding a batch).
#pragma once

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "escpod/pod5/file_reader.hpp"
#include "pod5/arrow_types.hpp"
#include "pod5/container.hpp"
#include "pod5/ipc_layout.hpp"
#include "pod5/reads_rows.hpp"

namespace escpod::pod5::detail {

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

// A table's batches: from its Arrow file reader, or given (recovery).
using BatchSource = std::function<arrow::Result<std::shared_ptr<arrow::RecordBatch>>(int)>;

// (4) The file's memory mapping, and the release of its pages once read. Releasing is always
// safe for this read-only file mapping: a later access maps the page in again from the page
// cache (another thread still reading a dropped page only pays that re-read).
struct FileMapping {
  std::shared_ptr<arrow::io::MemoryMappedFile> file;
  // The whole file's mapping, and how far FileReader::drop_signal_pages has released it.
  const uint8_t* map_begin = nullptr;
  size_t map_size = 0;
  mutable std::atomic<uintptr_t> signal_dropped_until{0};
  // The reads table in the mapping (null: elsewhere), and how far a forward pass over its
  // batches has released it (drop_reads_batch_pages).
  const uint8_t* reads_table_begin = nullptr;
  const uint8_t* reads_table_end = nullptr;
  mutable std::atomic<uintptr_t> reads_dropped_until{0};

  // Maps `path`, which the footer read found to be `file_size` bytes (kIoError when it changed
  // since).
  Status map_file(const std::filesystem::path& path, uint64_t file_size);
  // Takes over the mapping recovery made of the damaged file `path` (`main`, file_size bytes).
  Status adopt(const std::shared_ptr<arrow::io::MemoryMappedFile>& main, uint64_t file_size,
               const std::filesystem::path& path);
  // Records where the reads table `t` lies in the mapping, if it does.
  void locate_reads_table(const EmbeddedTable& t);
  // A table's bytes, a zero-copy slice of the mapping. MemoryMappedFile::ReadAt also advises the
  // kernel to read the whole range ahead (MADV_WILLNEED): right for a pass over every batch, but
  // a random-access open would pay a page-cache walk over the whole signal table for the few
  // batches it touches (measured: ~5% of pulling 100 reads out of 10 files), so `plain_view`
  // takes a plain view of the mapping instead (the mapping, held by `file`, outlives it).
  arrow::Result<std::shared_ptr<arrow::Buffer>> table_bytes(const EmbeddedTable& t, bool plain_view) const;

  // True when [p, p + n) lies inside the file's mapping (an empty range anywhere).
  bool in_mapping(const void* p, size_t n) const {
    if (n == 0) return true;
    const auto* b = static_cast<const uint8_t*>(p);
    return map_begin && b >= map_begin && b <= map_begin + map_size && n <= size_t(map_begin + map_size - b);
  }
  // Releases the whole pages inside [lo, hi) from this process's resident set.
  void drop_pages(const void* lo, const void* hi) const {
    drop_range(reinterpret_cast<uintptr_t>(lo), reinterpret_cast<uintptr_t>(hi));
  }
  void drop_range(uintptr_t lo, uintptr_t hi) const;
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
    explicit ScanRelease(const FileMapping& mapping) : m_mapping(mapping) {}
    // `start`: where the scan's current batch begins; [.., done_to) may go.
    void reached(const uint8_t* start, const uint8_t* done_to) {
      if (!m_from) m_from = start;
      if (done_to - m_from >= kDropStride) {
        m_mapping.drop_behind(reinterpret_cast<uintptr_t>(m_from), done_to);
        m_from = done_to;
      }
    }

   private:
    const FileMapping& m_mapping;
    const uint8_t* m_from = nullptr;
  };
  // The part of the mapping a record batch's buffers span, children included, dictionaries not
  // ({nullptr, nullptr} if none).
  std::pair<const uint8_t*, const uint8_t*> batch_span(const arrow::RecordBatch& rb) const;
  // Drops a reads batch's pages once its values are copied out. Inside the mapped reads table,
  // everything from below the last mark up to the batch's end goes (IPC headers, dictionary
  // messages and the pages the kernel mapped around them included: see drop_behind), so a
  // forward pass keeps a bounded resident set whatever the read count.
  void drop_reads_batch_pages(const arrow::RecordBatch& rb) const;
};

// (1) The footer and the tables read at open: the file's description, the reads and signal
// schemas' columns, every reads batch's row count, the dictionaries and the run infos. Filled by
// open() (or open_recovered()), read-only afterwards.
struct TablesAtOpen {
  FileInfo info;
  bool validated_at_open = true;  // OpenOptions::validate_all_batches
  // Batch row counts given at open (OpenOptions::layout): batches are then not read at open,
  // and each is checked against its count when loaded. Where the counts came from, for errors.
  const BatchLayout* given_layout = nullptr;  // only during open()
  const char* read_rows_source = "read at open";
  const char* signal_rows_source = "its IPC metadata";
  std::vector<uint64_t> given_signal_first;  // prefix sums of the given signal row counts
  // Column indices in the reads schema (-1 when absent), and in the signal schema.
  std::unordered_map<std::string, int> col;
  bool legacy_struct_columns = false;  // V0-V2
  int id_col = -1, sig_col = -1, n_col = -1;
  // Reads batches, one entry each: kept in memory only where they cannot be read again (files
  // rebuilt by recovery) and for the last batch (its dictionaries are the file's); the others
  // are null and read again (OnDemandAccess::reads_batch) when used, as their Arrow objects
  // (~13 KB a batch of 1000 rows) would otherwise make a reader's memory grow with the read count.
  std::vector<std::shared_ptr<arrow::RecordBatch>> read_batches;
  std::vector<uint64_t> read_batch_first;  // prefix sums of rows
  std::vector<RunInfo> run_infos;
  std::vector<std::string> pore_types, end_reasons, run_info_ids;
  DictMaps dict;

  std::string where() const { return info.path.string(); }
  std::shared_ptr<arrow::Array> column(const arrow::RecordBatch& b, const char* name) const {
    auto it = col.find(name);
    if (it == col.end()) return nullptr;
    return storage_of(b.column(it->second));
  }
  size_t batch_rows_of(size_t batch_idx) const {
    return static_cast<size_t>(read_batch_first[batch_idx + 1] - read_batch_first[batch_idx]);
  }

  // What open() takes from its options (the layout's signal counts are copied), and from the
  // footer.
  void apply_options(const OpenOptions& options);
  void adopt_footer(const Footer& footer);
  // A table schema's MINKNOW metadata (a file identifier differing from the footer's warns).
  Status check_metadata(const arrow::Schema& schema, const char* what);
  // The signal schema's columns (id_col, sig_col, n_col) and compression (info.is_vbz).
  Status check_signal_schema(const arrow::Schema& schema);
  // The reads schema's columns (col), checked against the POD5 schema of the version they
  // reveal (info.read_table_version, legacy_struct_columns).
  Status check_reads_schema(const arrow::Schema& schema);
  // A layout given at open must have as many batches as the file's tables (their IPC footers).
  Status check_given_layout(const BatchLayout& layout, int n_read_batches, size_t n_signal) const;
  // What open() checks of a reads batch it reads (`last`: the file's last, whose dictionaries
  // are the file's); `ctx` names the batch.
  Status validate_at_open(const arrow::RecordBatch& rb, bool last, const std::string& ctx) const;
  Status load_run_info(const arrow::Schema& schema, int n_batches, const BatchSource& get_batch);
  // The string tables and (V0-V2) the struct dictionaries' fields, from the last reads batch.
  Status load_dictionaries();
  Status load_legacy_dictionaries();
  // Warns of run info ids the reads refer to that the run info table lacks.
  void warn_missing_run_infos();
  // Counts one run-info row and keeps it unless its acquisition id is kept already.
  void add_run_info_row(RunInfo&& ri);

  // Validates `rb` (a reads batch or a slice of one) unless open already did.
  Status check_batch(const arrow::RecordBatch& rb, size_t batch_idx) const {
    if (validated_at_open) return Status::ok();
    return from_arrow(rb.ValidateFull(), where() + ": reads batch " + std::to_string(batch_idx));
  }
  // check_batch for the few rows read_batch_rows decodes (see the definition).
  Status check_slice(const arrow::RecordBatch& rb, size_t batch_idx) const;
  // kInvalidArgument naming the file when rows [first_row, first_row + n_rows) are not all in
  // reads batch batch_idx.
  Status check_row_range(size_t batch_idx, size_t first_row, size_t n_rows) const;
  // Every index of column `name` in rows [first_row, first_row + idx.size()) of reads batch
  // batch_idx inside a dictionary of dict_size entries; else an error naming the file, batch, row
  // and column.
  Status check_index_range(size_t batch_idx, size_t first_row, const char* name, std::span<const int16_t> idx,
                           size_t dict_size) const;
  Status check_dictionary_indices(const ReadBatch& batch, size_t batch_idx) const;
  // The indices of dictionary column `name` of `rb` (rows from first_row of reads batch
  // batch_idx) into `dst`, checked against a dictionary of dict_size entries.
  Status dictionary_indices(const arrow::RecordBatch& rb, size_t batch_idx, size_t first_row, const char* name,
                            size_t dict_size, std::vector<int16_t>& dst) const;

 private:
  // kCorrupt unless column `name` has type `type` (absent: an error only when `required`).
  Status expect_column(const arrow::Schema& schema, const char* name, const std::shared_ptr<arrow::DataType>& type,
                       bool required) const;
  // Steps of check_reads_schema: columns every version has; then V0-V2's or V3+'s.
  Status check_common_read_columns(const arrow::Schema& schema);
  Status check_legacy_read_columns(const arrow::Schema& schema);
  Status check_dictionary_read_columns(const arrow::Schema& schema);
};

// (3) Tables salvaged from a damaged file (FileReader::open_recovered) have no Arrow file reader
// to read their batches again: the signal batches are held here (the reads batches are all kept
// in TablesAtOpen::read_batches).
struct RecoveredBatches {
  std::vector<std::shared_ptr<arrow::RecordBatch>> signal;

  // A BatchSource over batches held in memory (which must outlive it).
  static BatchSource source(const std::vector<std::shared_ptr<arrow::RecordBatch>>& batches) {
    return [&batches](int b) { return batches[static_cast<size_t>(b)]; };
  }
};

// (2) What is opened or decoded on demand, for reads by index or id: reads batches read again
// through Arrow (or their rows straight from the file), the signal table's batches (all on the
// first signal access, or each on first use for random-access opens), the read-id index. Reads
// the other parts, which outlive it. Every const method is thread-safe.
struct OnDemandAccess {
  OnDemandAccess(const TablesAtOpen& opened, const FileMapping& mapped, const RecoveredBatches& salvaged)
      : tables(opened), mapping(mapped), recovered(salvaged) {}
  const TablesAtOpen& tables;
  const FileMapping& mapping;
  const RecoveredBatches& recovered;

  // Reads table: the Arrow reader batches not held in TablesAtOpen::read_batches are read again
  // with (RecordBatchFileReader is not documented thread-safe, hence the mutex).
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> reads_reader;
  mutable std::mutex reads_reader_mutex;
  // Random-access opens of V3+ files: rows of batches not held in memory are read straight from
  // the file (pod5/reads_rows.hpp) instead of through Arrow and the mapping.
  std::unique_ptr<ReadsRowReader> row_reader;

  // Lazy signal (files opened without validate_all_batches): the batches' row counts come from
  // the Arrow IPC metadata alone, and each batch is loaded and validated on first use.
  bool lazy_signal = false;
  // Random-access opens: the file, read with pread (rows of reads batches, signal batch views),
  // where faulting in pages of the mapping would cost more (pod5/reads_rows.hpp).
  UniqueFd fd;
  // Signal table: schema checked at open, batches loaded on first use (ensure_signal).
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> signal_reader;
  const uint8_t* signal_table_begin = nullptr;
  size_t signal_table_size = 0;
  uint64_t signal_table_offset = 0;
  // Where the signal table's columns are in a RecordBatch message (FileReader::Impl::open_signal).
  struct SignalIpcLayout {
    int n_nodes = 0, n_buffers = 0;
    int ids_node = -1, ids = -1, offsets = -1, data = -1, data_node = -1, samples_node = -1, samples = -1;
  } signal_ipc;
  mutable std::vector<IpcBlock> signal_blocks;  // filled when a lazy signal layout is adopted
  mutable std::once_flag signal_once;
  mutable Status signal_status;
  mutable SignalTableInfo signal_info;
  mutable std::vector<SignalBatchView> signal_batches;
  mutable std::vector<uint64_t> signal_batch_first;  // prefix sums, size n_batches + 1
  mutable bool lazy_ready = false;
  mutable std::unique_ptr<std::once_flag[]> batch_once;
  mutable std::unique_ptr<Status[]> batch_status;
  mutable std::once_flag samples_once;
  mutable Status samples_status;

  // Read-id index (FileReader::find_read), built on first use.
  mutable std::once_flag id_index_once;
  mutable Status id_index_status;  // a reads batch that could not be re-read for the index
  mutable std::unordered_map<ReadId, std::pair<uint32_t, uint32_t>, ReadIdHash> id_index;

  // Reads batch b: held since open, or read again (and checked against its row count).
  Result<std::shared_ptr<arrow::RecordBatch>> reads_batch(size_t b) const;
  // Rows read straight from the file by row_reader (only `columns`: ReadsRowReader::read_rows).
  Result<ReadBatch> rows_from_file(size_t batch_idx, size_t first_row, size_t n_rows,
                                   ReadsRowReader::Columns columns) const;
  // Builds id_index on first call; its status.
  Status ensure_id_index() const;

  int n_signal_batches() const {
    return signal_reader ? signal_reader->num_record_batches() : static_cast<int>(recovered.signal.size());
  }
  Status ensure_signal() const;
  // Lazy files count their samples on the first call (every batch loaded); its status.
  Status count_lazy_samples() const;
  // Where `bytes` (inside the signal table's mapping) start in the file, when a random-access
  // reader should read them with pread (after ensure_signal); nullopt: read them where mapped.
  std::optional<uint64_t> pread_offset(std::span<const uint8_t> bytes) const {
    if (!lazy_ready || fd.get() < 0 || signal_table_begin == nullptr || bytes.data() < signal_table_begin ||
        bytes.data() + bytes.size() > signal_table_begin + signal_table_size) {
      return std::nullopt;
    }
    return signal_table_offset + static_cast<uint64_t>(bytes.data() - signal_table_begin);
  }
  // The batch holding global signal row `row`; nullptr when out of range or (lazy) the batch
  // fails to load (then *status says why, if given).
  const SignalBatchView* locate(uint64_t row, int64_t* row_in_batch, Status* status = nullptr) const;
  // Row counts given at open are trusted for the batches not loaded; a wrong one would shift
  // signal rows onto other reads' chunks. The signal table names each chunk's read: check it.
  Status check_signal_owners(const ReadBatch& batch) const;

 private:
  Status load_signal_batches() const;
  bool signal_layout_from_metadata() const;
  bool read_signal_blocks() const;
  // Lazy signal over batches whose row prefix sums are `first` (size n_batches + 1).
  void adopt_signal_layout(std::vector<uint64_t> first) const;
  // Batch b's view, loading it first in lazy mode; nullptr with *status set when it fails.
  const SignalBatchView* batch_view(size_t b, Status* status) const;
  Status make_signal_view(int b, SignalBatchView* v) const;
  Status make_signal_view_from_file(int b, SignalBatchView* v) const;
  // Step of make_signal_view_from_file: reads batch b's header and the start of its body into
  // `head` (the block at file offset `at`) and parses the header into *h, checked against the
  // signal table's layout; `ctx` names the batch.
  Status read_signal_header(size_t b, uint64_t at, std::vector<uint8_t>& head, RecordBatchHeader* h,
                            const std::string& ctx) const;
};

}  // namespace escpod::pod5::detail

namespace escpod::pod5 {

// FileReader's parts (above), and the steps that span them.
struct FileReader::Impl {
  detail::FileMapping mapping;
  detail::TablesAtOpen tables;
  detail::RecoveredBatches recovered;
  detail::OnDemandAccess lazy{tables, mapping, recovered};

  // open(): the signal table (schema, and where its batches lie), the reads table (schema and
  // every batch's row count), the run info table.
  Status open_signal(const detail::EmbeddedTable& t);
  Status load_reads(const detail::EmbeddedTable& t);
  Status load_reads(const arrow::Schema& schema, int n_batches, const detail::BatchSource& get_batch);
  Status load_run_info(const detail::EmbeddedTable& t);
  // open_recovered(): the same from the tables recovery salvaged.
  Status load_recovered(detail::RecoveredTables& salvaged);

  Status decode_batch(size_t batch_idx, ReadBatch* out) const;
  // Decodes `rb`, reads batch `batch_idx` or a slice of it (Arrow's raw accessors honour the
  // slice offset) whose first row is the file's read first_read_idx.
  Status decode_rows(size_t batch_idx, const arrow::RecordBatch& rb, uint64_t first_read_idx,
                     ReadBatch* out) const;

 private:
  Result<std::shared_ptr<arrow::ipc::RecordBatchFileReader>> open_table(const detail::EmbeddedTable& t,
                                                                        const char* what);
  // The signal columns' field nodes and buffers in a RecordBatch message (lazy.signal_ipc).
  void find_signal_ipc_layout(const arrow::Schema& schema);
  // Reads (or, for a given layout, takes the row count of) every reads batch at open.
  Status read_reads_batches(int n_batches, const detail::BatchSource& get_batch);
  // Steps of decode_rows.
  void decode_ids_and_signal_rows(const arrow::RecordBatch& rb, ReadBatch* out) const;
  void decode_plain_columns(const arrow::RecordBatch& rb, ReadBatch* out) const;
  Status decode_legacy_columns(size_t batch_idx, const arrow::RecordBatch& rb, size_t first_row,
                               ReadBatch* out) const;
  Status decode_dictionary_columns(size_t batch_idx, const arrow::RecordBatch& rb, size_t first_row,
                                   ReadBatch* out) const;
  Status decode_num_samples(const arrow::RecordBatch& rb, ReadBatch* out) const;
};

}  // namespace escpod::pod5
