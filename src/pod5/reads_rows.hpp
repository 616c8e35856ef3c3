#pragma once
// Random access to a few rows of a reads table without Arrow's record-batch reader: each row's
// values are read with pread from where the batch's IPC metadata puts them.
//
// Why: pulling one read out of a 1,000-row reads batch through the file's mapping touches one
// page for each of its ~20 columns, and every such fault maps ~16 pages around it (fault-around)
// that must be torn down again; Arrow also materialises every column of the batch first.
// Measured on the 10-file benchmark set: a fault costs ~2-2.5 us plus ~1-2.8 us to unmap, a
// small pread ~0.8-1 us (bench/results/index.md, session 9).

#include <arrow/type_fwd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "pod5/ipc_layout.hpp"

namespace escpod::pod5::detail {

class ReadsRowReader {
 public:
  // A reader for the reads table stored at [table_offset, table_offset + table_size) of the file
  // open at `fd` (the caller's; it must outlive the reader), whose bytes are also mapped at
  // `table` (only its IPC footer is read from there, once), with the given Arrow schema. Null
  // (not an error) when the table holds anything this reader does not handle (legacy struct
  // columns, unknown column types, a damaged footer): the caller then decodes through Arrow.
  static std::unique_ptr<ReadsRowReader> create(int fd, const uint8_t* table, uint64_t table_offset,
                                                uint64_t table_size, const arrow::Schema& schema);
  ReadsRowReader(const ReadsRowReader&) = delete;
  ReadsRowReader& operator=(const ReadsRowReader&) = delete;

  size_t n_batches() const { return m_blocks.size(); }

  // Decodes rows [first_row, first_row + n_rows) of reads batch `batch` (which must hold
  // `batch_rows` rows) into `out`'s per-read vectors, as FileReader's Arrow decoding does
  // (absent optional columns get the same fallbacks). Dictionary indices are copied as stored:
  // the caller checks them against its dictionaries. `where` names the file in errors. Safe to
  // call from several threads at once.
  // `columns` below kAll reads fewer columns (the others of `out` are left empty): kSignal
  // read_id, the signal rows, num_samples and the calibration (what decoding the reads' signal
  // needs), kIds read_id alone.
  enum class Columns { kAll, kSignal, kIds };
  Status read_rows(size_t batch, uint64_t batch_rows, size_t first_row, size_t n_rows, ReadBatch* out,
                   const std::string& where, Columns columns = Columns::kAll) const;

 private:
  struct Column {
    int type_id = -1;  // arrow::Type::type of the stored values (an extension's storage)
    int width = 0;     // bytes a value (0: bit-packed booleans)
    int node = -1;     // index of the column's field node in a RecordBatch message
    int buffer = -1;   // index of its values buffer (a list's: its offsets)
  };
  ReadsRowReader() = default;
  const Column* column(const char* name) const;
  // Batch `batch`'s header, read and checked on first use (later calls, from any thread, get the
  // same answer without reading the file): *at points at it, *body is the file offset of its body.
  Status locate(size_t batch, uint64_t batch_rows, const RecordBatchHeader** at, uint64_t* body,
                const std::string& where) const;
  // Reads and parses batch `batch`'s header from the file, checked against the schema.
  Status read_header(size_t batch, RecordBatchHeader* at, const std::string& ctx) const;
  // What one read_rows call reads from: batch `at`'s header, the file offset of its body, the
  // batch's row count, the rows wanted [first, first + n), `where` (the file) and `ctx` (the
  // batch) for errors, and the calling thread's scratch buffer for raw values.
  struct RowRange {
    const RecordBatchHeader& at;
    uint64_t body;
    uint64_t batch_rows;
    uint64_t first;
    size_t n;
    const std::string& where;
    const std::string& ctx;
    std::vector<uint8_t>& bytes;
  };
  // The raw bytes of values [first, first + count) of fixed-width column `c` into r.bytes
  // (booleans: whole bytes); count is n but for a list's offsets (n + 1: where the last row ends).
  Status read_raw(const RowRange& r, const Column& c, const char* name, uint64_t count) const;
  // Column `name` as T (stored as S), or `fallback` for every row when the table lacks it.
  template <typename S, typename T>
  Status read_values(const RowRange& r, const char* name, S, T fallback, std::vector<T>& dst) const;
  // Steps of read_rows: the signal row lists; the columns only Columns::kAll reads.
  Status read_signal_rows(const RowRange& r, ReadBatch* out) const;
  Status read_field_columns(const RowRange& r, ReadBatch* out) const;
  struct CachedHeader {
    std::once_flag once;
    Status status;
    RecordBatchHeader header;
  };

  int m_fd = -1;
  uint64_t m_table_offset = 0;
  std::vector<IpcBlock> m_blocks;
  std::unique_ptr<CachedHeader[]> m_headers;  // per batch, filled on first use (locate)
  std::unordered_map<std::string, Column> m_columns;
  Column m_signal_values;  // the child of the signal list column
  int m_n_nodes = 0, m_n_buffers = 0;
};

}  // namespace escpod::pod5::detail
