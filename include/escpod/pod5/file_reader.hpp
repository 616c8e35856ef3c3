// Reading POD5 files of every table version (V0-V7): footer, run infos, reads, signal.
//
// Opening probes the header and footer with ordinary reads, then memory-maps the file and opens
// the embedded Arrow tables with Apache Arrow's IPC reader, checking each column's type against
// the POD5 schema of its version. The signal table's batches are loaded lazily, on the first
// signal access, so reading only read fields (view, filter by fields) never touches signal pages.
// After open() a FileReader is logically immutable: every const method is thread-safe, and
// views it returns live as long as the reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"
#include "escpod/pod5/records.hpp"
#include "escpod/pod5/vbz.hpp"

namespace escpod::pod5 {

namespace detail {
struct RecoveredTables;  // pod5/recovered_tables.hpp (internal: Arrow types)
}

// Reads-table layout versions (docs/formats.md §1.3), detected from the columns.
enum class ReadTableVersion : int { kV0 = 0, kV1, kV2, kV3, kV4, kV5, kV6, kV7 };

struct FileInfo {
  std::filesystem::path path;
  uint64_t file_size = 0;
  std::string file_identifier;
  std::string software;      // the program that wrote the file
  std::string pod5_version;  // library version stamped in the footer
  ReadTableVersion read_table_version = ReadTableVersion::kV7;
  bool is_vbz = true;        // signal compression (per file)
  uint64_t n_reads = 0;
  size_t n_read_batches = 0;
  size_t n_run_info_rows = 0;      // before de-duplication by acquisition id
  std::vector<std::string> warnings;
  // Where the footer says each embedded Arrow IPC file lies (absolute offset in the .pod5 and
  // exact length; offset -1 when absent, and for readers of recovered tables), for callers that
  // open a table with another Arrow reader (the Python package hands them to pyarrow).
  struct TableSpan {
    int64_t offset = -1;
    int64_t length = 0;
  };
  TableSpan reads_table, run_info_table, signal_table;
};

// What the signal table holds; reading it touches every signal batch's metadata, so it is
// computed on first request (FileReader::signal_table_info) rather than at open.
struct SignalTableInfo {
  uint64_t n_rows = 0;     // stored chunks
  size_t n_batches = 0;
  uint64_t n_samples = 0;  // sum of the chunks' sample counts
  bool uniform = true;     // false: official tools and dorado misread this file (repack it)
};

// Reads of one reads-table batch, columnar and version-independent. Dictionary columns are
// indices into the file-wide tables FileReader::pore_types(), end_reasons(), run_info_ids().
struct ReadBatch {
  size_t batch_idx = 0;
  uint64_t first_read_idx = 0;  // file-wide index of row 0
  std::vector<ReadId> read_id;
  std::vector<uint64_t> signal_offsets;  // size()+1 offsets into signal_rows
  std::vector<uint64_t> signal_rows;     // global signal-table rows, read after read
  std::vector<uint32_t> read_number;
  std::vector<uint64_t> start_sample;
  std::vector<float> median_before;
  std::vector<uint64_t> num_minknow_events;
  std::vector<float> tracked_scaling_scale, tracked_scaling_shift;
  std::vector<float> predicted_scaling_scale, predicted_scaling_shift;
  std::vector<uint32_t> num_reads_since_mux_change;
  std::vector<float> time_since_mux_change;
  std::vector<uint64_t> num_samples;
  std::vector<uint32_t> channel;
  std::vector<uint8_t> well;
  std::vector<int16_t> pore_type_idx;
  std::vector<float> calibration_offset, calibration_scale;
  std::vector<int16_t> end_reason_idx;
  std::vector<uint8_t> end_reason_forced;
  std::vector<int16_t> run_info_idx;
  std::vector<float> open_pore_level, expected_open_pore_level, selected_read_level;

  size_t size() const { return read_id.size(); }
  std::span<const uint64_t> rows_of(size_t i) const {
    return {signal_rows.data() + signal_offsets[i], signal_offsets[i + 1] - signal_offsets[i]};
  }
  // Appends row i of `from` (a batch with every column, of the same file: dictionary indices
  // are copied as they are) after this batch's rows: a selection of rows gathered from several
  // batches. batch_idx and first_read_idx are left as they are.
  void append_row(const ReadBatch& from, size_t i);
};

// One stored signal chunk (a signal-table row), as stored: VBZ bytes or raw little-endian int16.
struct SignalChunk {
  std::span<const uint8_t> bytes;
  uint32_t n_samples = 0;
  ReadId read_id;  // the owner recorded in the signal table
};

// Row counts of a file's table batches, in batch order: what opening learns by reading every
// reads batch and every signal batch's IPC metadata. The read-id index stores it per file
// (pod5/read_index.hpp), so that a lookup opens a file without touching those pages.
struct BatchLayout {
  std::vector<uint32_t> read_batch_rows;
  std::vector<uint32_t> signal_batch_rows;
  bool operator==(const BatchLayout&) const = default;
};

// How much FileReader::open checks up front.
struct OpenOptions {
  // true: every reads batch is validated at open (a damaged reads table fails the open).
  // false: only the footer, the schemas and the last reads batch's dictionaries are checked at
  // open; each batch is validated when it is decoded (read_batch, read_batch_rows,
  // read_batch_ids). The signal batches' row counts are then taken from the Arrow IPC metadata
  // alone and each signal batch is loaded and validated on first use (signal_table_info loads
  // them all; drop_signal_pages does nothing), so pulling a few reads costs the same whatever
  // the file size. Random access by id (the read-id index) opens files this way.
  bool validate_all_batches = true;
  // With validate_all_batches false only: the batch row counts, known beforehand (from the
  // read-id index; must outlive open()). Open then reads no reads batch but the last (the
  // dictionaries) and no signal metadata; the batch counts must equal the file's and every batch
  // is checked against its row count when loaded (kCorrupt, naming the file and batch, when the
  // layout does not describe this file).
  const BatchLayout* layout = nullptr;
};

class FileReader {
 public:
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Opens and validates `path`. Errors name the file and the problem: kNotFound, kIoError,
  // kCorrupt (not a POD5, truncated, bad footer, table not matching its schema), kUnsupported
  // (unknown version or table type).
  static Result<std::unique_ptr<FileReader>> open(const std::filesystem::path& path);
  static Result<std::unique_ptr<FileReader>> open(const std::filesystem::path& path,
                                                  const OpenOptions& options);

  // A reader over tables salvaged from a damaged file (pod5/recover.hpp builds them): the same
  // API, over whatever complete batches recovery found. The reads table and the run-info table
  // may be absent (no reads, no run infos). Errors as open().
  static Result<std::unique_ptr<FileReader>> open_recovered(detail::RecoveredTables tables);

  const FileInfo& info() const;
  // Whether read_batch_rows reads rows straight from the file (random-access opens of files with
  // a num_samples column) rather than decoding their batch through Arrow.
  bool reads_rows_from_file() const;
  // Signal-table statistics; loads and validates the signal batches' metadata on first use
  // (kCorrupt naming the batch if one is damaged). Thread-safe.
  Result<SignalTableInfo> signal_table_info() const;
  const std::filesystem::path& path() const;
  // The row count of every reads and signal batch (signal: from the IPC metadata, or the batches
  // loaded, as signal_table_info). Thread-safe.
  Result<BatchLayout> batch_layout() const;

  // Run infos, de-duplicated by acquisition id, in file order.
  const std::vector<RunInfo>& run_infos() const;
  // The run info of an acquisition id, or nullptr.
  const RunInfo* find_run_info(std::string_view acquisition_id) const;

  // File-wide dictionaries the ReadBatch index columns point into.
  const std::vector<std::string>& pore_types() const;
  const std::vector<std::string>& end_reasons() const;
  const std::vector<std::string>& run_info_ids() const;

  size_t n_read_batches() const;
  // Decodes reads-table batch `batch_idx` (< n_read_batches()). Thread-safe.
  Result<ReadBatch> read_batch(size_t batch_idx) const;
  // Rows [first_row, first_row + n_rows) of reads batch `batch_idx` only, as a ReadBatch of
  // n_rows rows (batch_idx kept, first_read_idx the file-wide index of first_row); decodes and
  // touches only those rows. kInvalidArgument when the range is outside the batch. Thread-safe.
  Result<ReadBatch> read_batch_rows(size_t batch_idx, size_t first_row, size_t n_rows) const;
  // Only what decoding the signal of row `row` of reads batch `batch_idx` needs: a one-row
  // ReadBatch holding read_id, the signal rows, num_samples and the calibration, its other
  // columns empty. On random-access opens (reads_rows_from_file) a few small reads of the file;
  // otherwise the row decoded as read_batch_rows does. Thread-safe.
  Result<ReadBatch> read_signal_ref(size_t batch_idx, size_t row) const;
  // Rows in reads batch `batch_idx` (no decoding).
  size_t batch_rows(size_t batch_idx) const;
  // The read ids of reads batch `batch_idx`, in row order (the id column only). Thread-safe.
  Result<std::vector<ReadId>> read_batch_ids(size_t batch_idx) const;
  // Row `i` of `batch` as a self-contained record (strings resolved).
  ReadRecord record(const ReadBatch& batch, size_t i) const;

  // Calls fn for every reads batch, from up to `n_threads` threads, batches handed out one at a
  // time (work stealing); stops at and returns the first error fn or decoding returns.
  Status for_each_batch(int n_threads,
                        const std::function<Status(const ReadBatch&)>& fn) const;

  // The read with this id. Builds an id index on first use (thread-safe). kNotFound if absent.
  Result<ReadRecord> find_read(const ReadId& id) const;

  // Raw stored chunk `row` (global signal-table row). kCorrupt if out of range.
  Result<SignalChunk> signal_chunk(uint64_t row) const;

  // Decodes the first out.size() samples of the read whose chunks are `rows` into `out`
  // (out.size() <= the read's sample count; a prefix decodes only what it needs). `codec` is the
  // calling worker's scratch. Errors name the file, the row and the problem.
  Status read_signal(std::span<const uint64_t> rows, std::span<int16_t> out,
                     VbzCodec& codec) const;
  // Called with the part of the mapping about to be released, just before it is.
  using ReleaseHook = std::function<void(const void* lo, const void* hi)>;
  // Hints that signal rows below `end_row` will not be read again soon: drops the mapped pages
  // of every signal batch entirely below it, so streaming a huge file keeps resident memory
  // bounded (64 MB of file at a time, and the rest once `end_row` is past the last row). Safe at
  // any time (a later read maps the pages in again). `before` sees each range first (a writer
  // that borrowed bytes from it copies them then).
  void drop_signal_pages(uint64_t end_row, const ReleaseHook& before = nullptr) const;
  // drop_signal_pages below the lowest signal row of `done`, a reads batch of this file whose
  // reads are all finished with (streaming commands call it batch by batch); all of the file's
  // signal when `done` holds its last signal row.
  void drop_signal_pages_behind(const ReadBatch& done, const ReleaseHook& before = nullptr) const;

  // Total samples of the chunks `rows`, from the signal table (not the reads table).
  Result<uint64_t> count_samples(std::span<const uint64_t> rows) const;

 private:
  struct Impl;
  explicit FileReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::pod5
