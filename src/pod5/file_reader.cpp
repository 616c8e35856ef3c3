// FileReader: open(), open_recovered() and the reading API, over the parts of its state
// (pod5/file_reader_parts.hpp): here, what is opened or decoded on demand (OnDemandAccess) and the
// steps spanning the parts (FileReader::Impl).
#include "escpod/pod5/file_reader.hpp"

#include <arrow/io/memory.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "pod5/file_reader_parts.hpp"
#include "pod5/flat_view.hpp"
#include "pod5/recovered_tables.hpp"

namespace escpod::pod5 {

using detail::from_arrow;
using detail::SignalBatchView;
using detail::storage_of;

namespace {

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

namespace detail {

// ---- OnDemandAccess: reads batches and rows --------------------------------------------------

Result<std::shared_ptr<arrow::RecordBatch>> OnDemandAccess::reads_batch(size_t b) const {
  if (tables.read_batches[b]) return tables.read_batches[b];
  arrow::Result<std::shared_ptr<arrow::RecordBatch>> batch;
  {
    std::lock_guard lock(reads_reader_mutex);
    batch = reads_reader->ReadRecordBatch(static_cast<int>(b));
  }
  if (!batch.ok()) return from_arrow(batch.status(), tables.where() + ": reads batch " + std::to_string(b));
  const uint64_t want = tables.read_batch_first[b + 1] - tables.read_batch_first[b];
  if (static_cast<uint64_t>((*batch)->num_rows()) != want) {
    return Status::corrupt(tables.where() + ": reads batch " + std::to_string(b) + " holds " +
                           std::to_string((*batch)->num_rows()) + " rows, " + std::to_string(want) +
                           " expected (" + tables.read_rows_source + ")");
  }
  return std::move(*batch);
}

Result<ReadBatch> OnDemandAccess::rows_from_file(size_t batch_idx, size_t first_row, size_t n_rows,
                                                 ReadsRowReader::Columns columns) const {
  using Columns = ReadsRowReader::Columns;
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(row_reader->read_rows(batch_idx, tables.batch_rows_of(batch_idx), first_row, n_rows, &batch,
                                               tables.where(), columns));
  batch.batch_idx = batch_idx;
  batch.first_read_idx = tables.read_batch_first[batch_idx] + first_row;
  if (columns == Columns::kAll) ESCPOD_RETURN_IF_ERROR(tables.check_dictionary_indices(batch, batch_idx));
  // As decode_rows: a batch layout given at open is checked against the signal table's owners.
  if (columns != Columns::kIds && !tables.given_signal_first.empty()) {
    ESCPOD_RETURN_IF_ERROR(check_signal_owners(batch));
  }
  return batch;
}

Status OnDemandAccess::ensure_id_index() const {
  std::call_once(id_index_once, [this] {
    for (size_t b = 0; b < tables.read_batches.size(); ++b) {
      auto held = reads_batch(b);
      if (!held.is_ok()) {
        id_index_status = held.status();
        return;
      }
      auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(tables.column(**held, "read_id"));
      for (int64_t r = 0; r < ids->length(); ++r) {
        ReadId rid;
        std::memcpy(rid.bytes.data(), ids->GetValue(r), 16);
        id_index.emplace(rid, std::make_pair(static_cast<uint32_t>(b), static_cast<uint32_t>(r)));
      }
    }
  });
  return id_index_status;
}

// ---- OnDemandAccess: the signal table --------------------------------------------------------

Status OnDemandAccess::ensure_signal() const {
  std::call_once(signal_once, [this] {
    if (lazy_signal && !tables.given_signal_first.empty()) {
      adopt_signal_layout(tables.given_signal_first);
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

Status OnDemandAccess::count_lazy_samples() const {
  std::call_once(samples_once, [this] {
    uint64_t total = 0;
    for (size_t b = 0; b < signal_batches.size(); ++b) {
      Status st;
      const SignalBatchView* v = batch_view(b, &st);
      if (!v) {
        samples_status = st;
        return;
      }
      for (int64_t r = 0; r < v->n_rows; ++r) total += v->samples[r];
    }
    signal_info.n_samples = total;
  });
  return samples_status;
}

// Row counts of the signal batches from the IPC metadata only (footer blocks, each message's
// RecordBatch.length). False when anything is not as expected: the caller then loads every
// batch the usual way.
bool OnDemandAccess::signal_layout_from_metadata() const {
  if (!read_signal_blocks()) return false;
  const FlatView f(signal_table_begin, signal_table_size);
  std::vector<uint64_t> first{0};
  for (const IpcBlock& block : signal_blocks) {
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
  mapping.drop_pages(signal_table_begin, signal_table_begin + signal_table_size);
  adopt_signal_layout(std::move(first));
  return true;
}

// The signal table's record batch blocks from its IPC footer, as many as Arrow's reader counts.
bool OnDemandAccess::read_signal_blocks() const {
  if (!signal_table_begin || !signal_reader) return false;
  if (!read_ipc_blocks(signal_table_begin, signal_table_size, &signal_blocks)) return false;
  return signal_blocks.size() == static_cast<size_t>(signal_reader->num_record_batches());
}

void OnDemandAccess::adopt_signal_layout(std::vector<uint64_t> first) const {
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

const SignalBatchView* OnDemandAccess::batch_view(size_t b, Status* status) const {
  if (!lazy_ready) return &signal_batches[b];
  std::call_once(batch_once[b], [&] {
    SignalBatchView v;
    Status s = make_signal_view(static_cast<int>(b), &v);
    if (s.is_ok() && static_cast<uint64_t>(v.n_rows) != signal_batch_first[b + 1] - signal_batch_first[b]) {
      s = Status::corrupt(tables.where() + ": signal batch " + std::to_string(b) + " holds " +
                          std::to_string(v.n_rows) + " rows, " + tables.signal_rows_source + " says " +
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
Status OnDemandAccess::make_signal_view(int b, SignalBatchView* out) const {
  if (lazy_ready && fd.get() >= 0 && signal_ipc.n_buffers > 0 && static_cast<size_t>(b) < signal_blocks.size()) {
    return make_signal_view_from_file(b, out);
  }
  auto batch = signal_reader ? signal_reader->ReadRecordBatch(b)
                             : arrow::Result<std::shared_ptr<arrow::RecordBatch>>(
                                   recovered.signal[static_cast<size_t>(b)]);
  const std::string ctx = tables.where() + ": signal batch " + std::to_string(b) + " of " +
                          std::to_string(n_signal_batches());
  if (!batch.ok()) return from_arrow(batch.status(), ctx);
  ESCPOD_RETURN_IF_ERROR(from_arrow((*batch)->ValidateFull(), ctx));
  SignalBatchView& v = *out;
  v.batch = *batch;
  v.n_rows = v.batch->num_rows();
  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(storage_of(v.batch->column(tables.id_col)));
  v.read_ids = ids->raw_values();
  auto sig = storage_of(v.batch->column(tables.sig_col));
  if (tables.info.is_vbz) {
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
  v.samples = std::static_pointer_cast<arrow::UInt32Array>(v.batch->column(tables.n_col))->raw_values();
  v.region_begin = std::min({v.read_ids, reinterpret_cast<const uint8_t*>(v.offsets),
                             reinterpret_cast<const uint8_t*>(v.samples),
                             v.bytes_begin ? v.bytes_begin : v.read_ids});
  // Buffers that are slices of the file's mapping stay valid as long as the mapping (held by
  // `file`): the Arrow objects (~3 KB a batch, ~30 bytes a read at 100 rows a batch) can go, so
  // a reader's memory does not grow with the file's read count.
  const auto rows = static_cast<size_t>(v.n_rows);
  if (mapping.in_mapping(v.read_ids, 16 * rows) && mapping.in_mapping(v.offsets, 8 * (rows + 1)) &&
      mapping.in_mapping(v.samples, 4 * rows) &&
      mapping.in_mapping(v.bytes_begin, static_cast<size_t>(v.bytes_end - v.bytes_begin))) {
    v.batch.reset();
  }
  return Status::ok();
}

Status OnDemandAccess::read_signal_header(size_t b, uint64_t at, std::vector<uint8_t>& head, RecordBatchHeader* h,
                                          const std::string& ctx) const {
  const IpcBlock& block = signal_blocks[b];
  // One read for the header and the start of the body, where the writer puts the read ids and
  // the signal offsets (24 bytes a row, by the row count the layout expects): both are then
  // copied from it (read on their own if they lie elsewhere).
  const uint64_t expected_rows =
      b + 1 < signal_batch_first.size() ? signal_batch_first[b + 1] - signal_batch_first[b] : 0;
  head.resize(block.meta_size + std::min<uint64_t>(block.body_size, 24 * expected_rows + 136));
  ESCPOD_RETURN_IF_ERROR(pread_exact(fd.get(), head.data(), head.size(), at, tables.where()));
  std::string why;
  if (!parse_record_batch_header(head.data(), block.meta_size, block.body_size, h, &why)) {
    return Status::corrupt(ctx + ": " + why);
  }
  const SignalIpcLayout& l = signal_ipc;
  if (h->node_length.size() != static_cast<size_t>(l.n_nodes) ||
      h->buffers.size() != static_cast<size_t>(l.n_buffers)) {
    return Status::corrupt(ctx + ": its header does not match the signal table's schema");
  }
  return Status::ok();
}

// Signal batch b for random access, without Arrow: its header, ids, offsets and sample counts
// read with pread (a few KB) and checked as ValidateFull would (buffer sizes, offsets within
// the data); the signal bytes stay in the mapping, touched only for the rows read.
Status OnDemandAccess::make_signal_view_from_file(int b, SignalBatchView* out) const {
  const bool is_vbz = tables.info.is_vbz;
  const std::string ctx =
      tables.where() + ": signal batch " + std::to_string(b) + " of " + std::to_string(n_signal_batches());
  const IpcBlock& block = signal_blocks[static_cast<size_t>(b)];
  const uint64_t at = signal_table_offset + block.offset;
  thread_local std::vector<uint8_t> head;
  RecordBatchHeader h;
  ESCPOD_RETURN_IF_ERROR(read_signal_header(static_cast<size_t>(b), at, head, &h, ctx));
  const SignalIpcLayout& l = signal_ipc;
  const auto rows = static_cast<uint64_t>(h.length);
  const auto data_values = static_cast<uint64_t>(h.node_length[static_cast<size_t>(l.data_node)]);
  const uint64_t value_bytes = is_vbz ? 1 : 2;
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
  ESCPOD_ASSIGN_OR_RETURN(uint64_t data_at, buffer(l.data, is_vbz ? 0 : 2 * data_values, "signal data"));
  const uint64_t data_len = is_vbz ? h.buffers[static_cast<size_t>(l.data)].second : data_values;

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
    return pread_exact(fd.get(), dst, n, body + off, tables.where());
  };
  ESCPOD_RETURN_IF_ERROR(fetch(ids, 16 * rows, ids_at));
  ESCPOD_RETURN_IF_ERROR(fetch(offsets, 8 * (rows + 1), offsets_at));
  ESCPOD_RETURN_IF_ERROR(fetch(samples, 4 * rows, samples_at));
  for (uint64_t r = 0; r < rows; ++r) {
    if (offsets[0] < 0 || offsets[r] > offsets[r + 1] || static_cast<uint64_t>(offsets[r + 1]) > data_len) {
      return Status::corrupt(ctx + " row " + std::to_string(r) + ": signal offsets " + std::to_string(offsets[r]) +
                             ".." + std::to_string(offsets[r + 1]) + " outside " + std::to_string(data_len) +
                             (is_vbz ? " bytes" : " values"));
    }
  }
  v.read_ids = ids;
  v.offsets = offsets;
  v.samples = samples;
  v.data_size = static_cast<int64_t>(data_len);
  const uint8_t* data = signal_table_begin + (body - signal_table_offset) + data_at;
  if (is_vbz) {
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
Status OnDemandAccess::load_signal_batches() const {
  const int n_batches = n_signal_batches();
  signal_batch_first.push_back(0);
  FileMapping::ScanRelease release(mapping);
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
    mapping.drop_pages(signal_batches.front().region_begin, signal_batches.back().bytes_end);
  }
  return Status::ok();
}

const SignalBatchView* OnDemandAccess::locate(uint64_t row, int64_t* row_in_batch, Status* status) const {
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

Status OnDemandAccess::check_signal_owners(const ReadBatch& batch) const {
  ESCPOD_RETURN_IF_ERROR(ensure_signal());
  for (size_t i = 0; i < batch.size(); ++i) {
    for (uint64_t row : batch.rows_of(i)) {
      int64_t in_batch = 0;
      Status located;
      const SignalBatchView* v = locate(row, &in_batch, &located);
      ESCPOD_RETURN_IF_ERROR(located);
      if (!v || std::memcmp(v->read_ids + 16 * in_batch, batch.read_id[i].bytes.data(), 16) != 0) {
        return Status::corrupt(tables.where() + ": read " + batch.read_id[i].to_string() + ": signal row " +
                               std::to_string(row) + (v ? " belongs to another read" : " is out of range") +
                               " by " + tables.signal_rows_source + " (it does not describe this file)");
      }
    }
  }
  return Status::ok();
}

}  // namespace detail

// ---- FileReader::Impl: opening --------------------------------------------------------------

Result<std::shared_ptr<arrow::ipc::RecordBatchFileReader>> FileReader::Impl::open_table(
    const detail::EmbeddedTable& t, const char* what) {
  auto buffer = mapping.table_bytes(t, lazy.lazy_signal);
  if (!buffer.ok()) return from_arrow(buffer.status(), tables.where() + ": " + what + " table");
  auto reader = arrow::ipc::RecordBatchFileReader::Open(
      std::make_shared<arrow::io::BufferReader>(*buffer));
  if (!reader.ok()) return from_arrow(reader.status(), tables.where() + ": " + what + " table");
  return *reader;
}

Status FileReader::Impl::open_signal(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(lazy.signal_reader, open_table(t, "signal"));
  if (mapping.map_begin && t.offset >= 0 &&
      static_cast<uint64_t>(t.offset) + static_cast<uint64_t>(t.length) <= mapping.map_size) {
    lazy.signal_table_begin = mapping.map_begin + t.offset;
    lazy.signal_table_size = static_cast<size_t>(t.length);
    lazy.signal_table_offset = static_cast<uint64_t>(t.offset);
  }
  ESCPOD_RETURN_IF_ERROR(tables.check_signal_schema(*lazy.signal_reader->schema()));
  find_signal_ipc_layout(*lazy.signal_reader->schema());
  return Status::ok();
}

void FileReader::Impl::find_signal_ipc_layout(const arrow::Schema& schema) {
  // Buffers in schema order: validity then the type's own (read_id: values; signal VBZ:
  // offsets, data; raw: offsets, then the int16 child's validity and values; samples: values).
  detail::OnDemandAccess::SignalIpcLayout& l = lazy.signal_ipc;
  for (int c = 0; c < schema.num_fields(); ++c) {
    const int node = l.n_nodes, buffer = l.n_buffers;
    if (!detail::count_ipc_layout(*schema.field(c)->type(), &l.n_nodes, &l.n_buffers)) {
      l = detail::OnDemandAccess::SignalIpcLayout{};  // not a layout views can be read from: Arrow reads them
      break;
    }
    if (c == tables.id_col) l.ids_node = node, l.ids = buffer + 1;
    if (c == tables.sig_col) {
      l.offsets = buffer + 1;
      l.data = tables.info.is_vbz ? buffer + 2 : buffer + 3;
      l.data_node = tables.info.is_vbz ? node : node + 1;
    }
    if (c == tables.n_col) l.samples_node = node, l.samples = buffer + 1;
  }
}

Status FileReader::Impl::load_run_info(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(auto reader, open_table(t, "run info"));
  return tables.load_run_info(*reader->schema(), reader->num_record_batches(),
                              [&reader](int b) { return reader->ReadRecordBatch(b); });
}

Status FileReader::Impl::load_reads(const detail::EmbeddedTable& t) {
  ESCPOD_ASSIGN_OR_RETURN(lazy.reads_reader, open_table(t, "reads"));
  mapping.locate_reads_table(t);
  ESCPOD_RETURN_IF_ERROR(load_reads(*lazy.reads_reader->schema(), lazy.reads_reader->num_record_batches(),
                                    [this](int b) { return lazy.reads_reader->ReadRecordBatch(b); }));
  if (lazy.lazy_signal && !tables.legacy_struct_columns && mapping.reads_table_begin) {
    lazy.row_reader = detail::ReadsRowReader::create(lazy.fd.get(), mapping.reads_table_begin,
                                                     static_cast<uint64_t>(t.offset), static_cast<uint64_t>(t.length),
                                                     *lazy.reads_reader->schema());
    if (lazy.row_reader && lazy.row_reader->n_batches() != tables.read_batches.size()) lazy.row_reader.reset();
  }
  return Status::ok();
}

Status FileReader::Impl::load_reads(const arrow::Schema& schema, int n_batches,
                                    const detail::BatchSource& get_batch) {
  ESCPOD_RETURN_IF_ERROR(tables.check_reads_schema(schema));
  if (tables.given_layout) {
    ESCPOD_RETURN_IF_ERROR(tables.check_given_layout(*tables.given_layout, n_batches,
                                                     static_cast<size_t>(lazy.n_signal_batches())));
  }
  ESCPOD_RETURN_IF_ERROR(read_reads_batches(n_batches, get_batch));
  return tables.legacy_struct_columns ? tables.load_legacy_dictionaries() : tables.load_dictionaries();
}

Status FileReader::Impl::read_reads_batches(int n_batches, const detail::BatchSource& get_batch) {
  const BatchLayout* given = tables.given_layout;
  auto& first = tables.read_batch_first;
  first.push_back(0);
  detail::FileMapping::ScanRelease release(mapping);
  for (int b = 0; b < n_batches; ++b) {
    // A given row count spares reading the batch now (it is read, and checked, when used); the
    // last batch is always read: its dictionaries are the file's.
    if (given && b + 1 < n_batches) {
      first.push_back(first.back() + given->read_batch_rows[static_cast<size_t>(b)]);
      tables.read_batches.push_back(nullptr);
      continue;
    }
    auto batch = get_batch(b);
    const std::string ctx = tables.where() + ": reads batch " + std::to_string(b);
    if (!batch.ok()) return from_arrow(batch.status(), ctx);
    if (given && static_cast<uint64_t>((*batch)->num_rows()) != given->read_batch_rows.back()) {
      return Status::corrupt(ctx + " holds " + std::to_string((*batch)->num_rows()) + " rows, " +
                             std::to_string(given->read_batch_rows.back()) + " expected (" +
                             tables.read_rows_source + ")");
    }
    ESCPOD_RETURN_IF_ERROR(tables.validate_at_open(**batch, b + 1 == n_batches, ctx));
    // Validation read the whole batch: release what it read as the scan goes, so opening a
    // huge file keeps a small resident set too.
    const auto [lo, hi] = mapping.batch_span(**batch);
    if (lo) release.reached(lo, hi);
    first.push_back(first.back() + static_cast<uint64_t>((*batch)->num_rows()));
    const bool keep = !lazy.reads_reader || b + 1 == n_batches;
    tables.read_batches.push_back(keep ? std::move(*batch) : nullptr);
  }
  tables.info.n_read_batches = tables.read_batches.size();
  tables.info.n_reads = first.back();
  return Status::ok();
}

Status FileReader::Impl::load_recovered(detail::RecoveredTables& salvaged) {
  if (salvaged.main) ESCPOD_RETURN_IF_ERROR(mapping.adopt(salvaged.main, salvaged.file_size, salvaged.path));
  if (salvaged.signal_schema) {
    ESCPOD_RETURN_IF_ERROR(tables.check_signal_schema(*salvaged.signal_schema));
    recovered.signal = std::move(salvaged.signal);
  }
  if (salvaged.reads_schema) {
    ESCPOD_RETURN_IF_ERROR(load_reads(*salvaged.reads_schema, static_cast<int>(salvaged.reads.size()),
                                      detail::RecoveredBatches::source(salvaged.reads)));
  }
  if (salvaged.run_info_schema && !tables.legacy_struct_columns) {
    ESCPOD_RETURN_IF_ERROR(tables.load_run_info(*salvaged.run_info_schema,
                                                static_cast<int>(salvaged.run_info.size()),
                                                detail::RecoveredBatches::source(salvaged.run_info)));
  }
  return Status::ok();
}

// ---- FileReader::Impl: decoding reads batches -----------------------------------------------

Status FileReader::Impl::decode_batch(size_t batch_idx, ReadBatch* out) const {
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, lazy.reads_batch(batch_idx));
  const arrow::RecordBatch& rb = *held;
  ESCPOD_RETURN_IF_ERROR(tables.check_batch(rb, batch_idx));
  ESCPOD_RETURN_IF_ERROR(decode_rows(batch_idx, rb, tables.read_batch_first[batch_idx], out));
  // Every value is copied into `out`: the batch's pages are not needed again.
  mapping.drop_reads_batch_pages(rb);
  return Status::ok();
}

Status FileReader::Impl::decode_rows(size_t batch_idx, const arrow::RecordBatch& rb,
                                     uint64_t first_read_idx, ReadBatch* out) const {
  out->batch_idx = batch_idx;
  out->first_read_idx = first_read_idx;
  decode_ids_and_signal_rows(rb, out);
  decode_plain_columns(rb, out);
  const auto first_row = static_cast<size_t>(first_read_idx - tables.read_batch_first[batch_idx]);
  if (tables.legacy_struct_columns) {
    ESCPOD_RETURN_IF_ERROR(decode_legacy_columns(batch_idx, rb, first_row, out));
  } else {
    ESCPOD_RETURN_IF_ERROR(decode_dictionary_columns(batch_idx, rb, first_row, out));
  }
  ESCPOD_RETURN_IF_ERROR(decode_num_samples(rb, out));
  // Row counts given at open are trusted for the batches not loaded; a wrong one would shift
  // signal rows onto other reads' chunks. The signal table names each chunk's read: check it.
  if (!tables.given_signal_first.empty()) ESCPOD_RETURN_IF_ERROR(lazy.check_signal_owners(*out));
  return Status::ok();
}

// read_id, and each read's signal rows (offsets rebased to the slice's first row).
void FileReader::Impl::decode_ids_and_signal_rows(const arrow::RecordBatch& rb, ReadBatch* out) const {
  const int64_t n = rb.num_rows();
  const auto rows = static_cast<size_t>(n);
  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(tables.column(rb, "read_id"));
  out->read_id.resize(rows);
  if (n > 0) std::memcpy(out->read_id.data(), ids->raw_values(), rows * 16);

  auto list = std::static_pointer_cast<arrow::ListArray>(tables.column(rb, "signal"));
  auto list_values = std::static_pointer_cast<arrow::UInt64Array>(list->values());
  const int32_t* offs = list->raw_value_offsets();
  out->signal_offsets.resize(rows + 1);
  out->signal_rows.assign(list_values->raw_values() + offs[0], list_values->raw_values() + offs[n]);
  for (size_t i = 0; i <= rows; ++i) out->signal_offsets[i] = static_cast<uint64_t>(offs[i] - offs[0]);
}

// The columns stored as they are read (absent ones, of older versions, get their fallbacks).
void FileReader::Impl::decode_plain_columns(const arrow::RecordBatch& rb, ReadBatch* out) const {
  const int64_t n = rb.num_rows();
  auto column = [&](const char* name) { return tables.column(rb, name); };
  copy_column<arrow::UInt32Type>(column("read_number"), n, uint32_t{0}, out->read_number);
  copy_column<arrow::UInt64Type>(column("start"), n, uint64_t{0}, out->start_sample);
  copy_column<arrow::FloatType>(column("median_before"), n, kNaN, out->median_before);
  copy_column<arrow::UInt64Type>(column("num_minknow_events"), n, uint64_t{0}, out->num_minknow_events);
  copy_column<arrow::FloatType>(column("tracked_scaling_scale"), n, kNaN, out->tracked_scaling_scale);
  copy_column<arrow::FloatType>(column("tracked_scaling_shift"), n, kNaN, out->tracked_scaling_shift);
  copy_column<arrow::FloatType>(column("predicted_scaling_scale"), n, kNaN, out->predicted_scaling_scale);
  copy_column<arrow::FloatType>(column("predicted_scaling_shift"), n, kNaN, out->predicted_scaling_shift);
  copy_column<arrow::UInt32Type>(column("num_reads_since_mux_change"), n, uint32_t{0},
                                 out->num_reads_since_mux_change);
  copy_column<arrow::FloatType>(column("time_since_mux_change"), n, 0.0f, out->time_since_mux_change);
  copy_column<arrow::FloatType>(column("open_pore_level"), n, kNaN, out->open_pore_level);
  copy_column<arrow::FloatType>(column("expected_open_pore_level"), n, kNaN, out->expected_open_pore_level);
  copy_column<arrow::FloatType>(column("selected_read_level"), n, kNaN, out->selected_read_level);
}

// V0-V2: the pore, calibration, end reason and run info fields through the struct
// dictionaries' entries (TablesAtOpen::dict).
Status FileReader::Impl::decode_legacy_columns(size_t batch_idx, const arrow::RecordBatch& rb, size_t first_row,
                                               ReadBatch* out) const {
  const auto rows = static_cast<size_t>(rb.num_rows());
  const detail::DictMaps& dict = tables.dict;
  std::vector<int16_t> pore, calib, end, run;
  ESCPOD_RETURN_IF_ERROR(tables.dictionary_indices(rb, batch_idx, first_row, "pore", dict.pore_type.size(), pore));
  ESCPOD_RETURN_IF_ERROR(
      tables.dictionary_indices(rb, batch_idx, first_row, "calibration", dict.calib_offset.size(), calib));
  ESCPOD_RETURN_IF_ERROR(
      tables.dictionary_indices(rb, batch_idx, first_row, "end_reason", dict.end_reason.size(), end));
  ESCPOD_RETURN_IF_ERROR(tables.dictionary_indices(rb, batch_idx, first_row, "run_info", dict.run_info.size(), run));
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
  return Status::ok();
}

// V3+: string dictionary indices, and the pore and calibration fields as columns of their own.
Status FileReader::Impl::decode_dictionary_columns(size_t batch_idx, const arrow::RecordBatch& rb,
                                                   size_t first_row, ReadBatch* out) const {
  const int64_t n = rb.num_rows();
  const auto rows = static_cast<size_t>(n);
  ESCPOD_RETURN_IF_ERROR(tables.dictionary_indices(rb, batch_idx, first_row, "pore_type", tables.pore_types.size(),
                                                   out->pore_type_idx));
  ESCPOD_RETURN_IF_ERROR(tables.dictionary_indices(rb, batch_idx, first_row, "end_reason", tables.end_reasons.size(),
                                                   out->end_reason_idx));
  ESCPOD_RETURN_IF_ERROR(tables.dictionary_indices(rb, batch_idx, first_row, "run_info", tables.run_info_ids.size(),
                                                   out->run_info_idx));
  if (auto c32 = tables.column(rb, "channel_32bit")) {
    copy_column<arrow::UInt32Type>(c32, n, uint32_t{0}, out->channel);
  } else if (auto ch = tables.column(rb, "channel"); ch->type_id() == arrow::Type::UINT32) {
    copy_column<arrow::UInt32Type>(ch, n, uint32_t{0}, out->channel);
  } else {
    copy_column<arrow::UInt16Type>(ch, n, uint32_t{0}, out->channel);
  }
  copy_column<arrow::UInt8Type>(tables.column(rb, "well"), n, uint8_t{0}, out->well);
  copy_column<arrow::FloatType>(tables.column(rb, "calibration_offset"), n, 0.0f, out->calibration_offset);
  copy_column<arrow::FloatType>(tables.column(rb, "calibration_scale"), n, 0.0f, out->calibration_scale);
  auto forced = std::static_pointer_cast<arrow::BooleanArray>(tables.column(rb, "end_reason_forced"));
  out->end_reason_forced.resize(rows);
  for (size_t i = 0; i < rows; ++i) out->end_reason_forced[i] = forced->Value(static_cast<int64_t>(i));
  return Status::ok();
}

// num_samples: stored from V2 on; before, the sum of the read's chunk sizes, from the signal
// table.
Status FileReader::Impl::decode_num_samples(const arrow::RecordBatch& rb, ReadBatch* out) const {
  const int64_t n = rb.num_rows();
  const auto rows = static_cast<size_t>(n);
  if (auto ns = tables.column(rb, "num_samples")) {
    copy_column<arrow::UInt64Type>(ns, n, uint64_t{0}, out->num_samples);
    return Status::ok();
  }
  ESCPOD_RETURN_IF_ERROR(lazy.ensure_signal());
  out->num_samples.resize(rows);
  for (size_t i = 0; i < rows; ++i) {
    uint64_t total = 0;
    for (uint64_t row : out->rows_of(i)) {
      int64_t in_batch = 0;
      Status located;
      const SignalBatchView* v = lazy.locate(row, &in_batch, &located);
      if (!located.is_ok()) return located;
      if (!v) {
        return Status::corrupt(tables.where() + ": read " + out->read_id[i].to_string() +
                               " refers to signal row " + std::to_string(row) + " of " +
                               std::to_string(lazy.signal_info.n_rows));
      }
      total += v->samples[in_batch];
    }
    out->num_samples[i] = total;
  }
  return Status::ok();
}

// ---- FileReader -----------------------------------------------------------------------------

Result<std::unique_ptr<FileReader>> FileReader::open(const std::filesystem::path& path) {
  return open(path, OpenOptions{});
}

Result<std::unique_ptr<FileReader>> FileReader::open(const std::filesystem::path& path,
                                                     const OpenOptions& options) {
  detail::register_extension_types();
  auto impl = std::make_unique<Impl>();
  detail::TablesAtOpen& tables = impl->tables;
  tables.info.path = path;
  tables.apply_options(options);
  impl->lazy.lazy_signal = !options.validate_all_batches;
  ESCPOD_ASSIGN_OR_RETURN(detail::Footer footer, detail::read_footer(path, &tables.info.file_size));
  tables.adopt_footer(footer);
  ESCPOD_RETURN_IF_ERROR(impl->mapping.map_file(path, tables.info.file_size));

  if (impl->lazy.lazy_signal) impl->lazy.fd = detail::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ESCPOD_RETURN_IF_ERROR(impl->open_signal(footer.signal));
  ESCPOD_RETURN_IF_ERROR(impl->load_reads(footer.reads));
  tables.given_layout = nullptr;  // the caller's; the signal counts were copied
  if (footer.run_info.present() && !tables.legacy_struct_columns) {
    ESCPOD_RETURN_IF_ERROR(impl->load_run_info(footer.run_info));
  } else if (!tables.legacy_struct_columns) {
    return Status::corrupt(path.string() + ": footer lacks the run info table");
  }
  tables.warn_missing_run_infos();
  // Opening touched every reads batch's metadata (and the kernel mapped pages around each);
  // release them: batches are mapped in again one at a time as they are decoded.
  impl->mapping.drop_pages(impl->mapping.map_begin, impl->mapping.map_begin + impl->mapping.map_size);
  return std::unique_ptr<FileReader>(new FileReader(std::move(impl)));
}

Result<std::unique_ptr<FileReader>> FileReader::open_recovered(detail::RecoveredTables tables) {
  detail::register_extension_types();
  auto impl = std::make_unique<Impl>();
  FileInfo& info = impl->tables.info;
  info.path = tables.path;
  info.file_size = tables.file_size;
  info.file_identifier = tables.file_identifier;
  info.software = tables.software;
  info.pod5_version = tables.pod5_version;
  ESCPOD_RETURN_IF_ERROR(impl->load_recovered(tables));
  return std::unique_ptr<FileReader>(new FileReader(std::move(impl)));
}

Result<SignalTableInfo> FileReader::signal_table_info() const {
  ESCPOD_RETURN_IF_ERROR(m_impl->lazy.ensure_signal());
  if (m_impl->lazy.lazy_ready) ESCPOD_RETURN_IF_ERROR(m_impl->lazy.count_lazy_samples());
  return m_impl->lazy.signal_info;
}

Result<BatchLayout> FileReader::batch_layout() const {
  ESCPOD_RETURN_IF_ERROR(m_impl->lazy.ensure_signal());
  BatchLayout out;
  auto counts = [this](const std::vector<uint64_t>& first, const char* table,
                       std::vector<uint32_t>* rows) -> Status {
    for (size_t b = 0; b + 1 < first.size(); ++b) {
      const uint64_t n = first[b + 1] - first[b];
      if (n > UINT32_MAX) {
        return Status::unsupported(m_impl->tables.where() + ": " + table + " batch " + std::to_string(b) +
                                   " holds " + std::to_string(n) + " rows (more than 2^32)");
      }
      rows->push_back(static_cast<uint32_t>(n));
    }
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(counts(m_impl->tables.read_batch_first, "reads", &out.read_batch_rows));
  ESCPOD_RETURN_IF_ERROR(counts(m_impl->lazy.signal_batch_first, "signal", &out.signal_batch_rows));
  return out;
}

Result<ReadBatch> FileReader::read_batch(size_t batch_idx) const {
  const detail::TablesAtOpen& tables = m_impl->tables;
  if (batch_idx >= tables.read_batches.size()) {
    return Status::invalid_argument(tables.where() + ": reads batch " + std::to_string(batch_idx) + " of " +
                                    std::to_string(tables.read_batches.size()));
  }
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(m_impl->decode_batch(batch_idx, &batch));
  return batch;
}

size_t FileReader::batch_rows(size_t batch_idx) const {
  if (batch_idx >= m_impl->tables.read_batches.size()) return 0;
  return m_impl->tables.batch_rows_of(batch_idx);
}

bool FileReader::reads_rows_from_file() const { return m_impl->lazy.row_reader != nullptr; }

Result<ReadBatch> FileReader::read_batch_rows(size_t batch_idx, size_t first_row, size_t n_rows) const {
  const detail::TablesAtOpen& tables = m_impl->tables;
  ESCPOD_RETURN_IF_ERROR(tables.check_row_range(batch_idx, first_row, n_rows));
  if (m_impl->lazy.row_reader && !tables.read_batches[batch_idx]) {
    return m_impl->lazy.rows_from_file(batch_idx, first_row, n_rows, detail::ReadsRowReader::Columns::kAll);
  }
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, m_impl->lazy.reads_batch(batch_idx));
  auto slice = held->Slice(static_cast<int64_t>(first_row), static_cast<int64_t>(n_rows));
  ESCPOD_RETURN_IF_ERROR(tables.check_slice(*slice, batch_idx));
  ReadBatch batch;
  ESCPOD_RETURN_IF_ERROR(
      m_impl->decode_rows(batch_idx, *slice, tables.read_batch_first[batch_idx] + first_row, &batch));
  return batch;
}

Result<ReadBatch> FileReader::read_signal_ref(size_t batch_idx, size_t row) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->tables.check_row_range(batch_idx, row, 1));
  if (m_impl->lazy.row_reader && !m_impl->tables.read_batches[batch_idx]) {
    return m_impl->lazy.rows_from_file(batch_idx, row, 1, detail::ReadsRowReader::Columns::kSignal);
  }
  return read_batch_rows(batch_idx, row, 1);
}

Result<std::vector<ReadId>> FileReader::read_batch_ids(size_t batch_idx) const {
  const detail::TablesAtOpen& tables = m_impl->tables;
  const detail::FileMapping& mapping = m_impl->mapping;
  if (batch_idx >= tables.read_batches.size()) {
    return Status::invalid_argument(tables.where() + ": reads batch " + std::to_string(batch_idx) + " of " +
                                    std::to_string(tables.read_batches.size()));
  }
  if (m_impl->lazy.row_reader && !tables.read_batches[batch_idx]) {
    // Random-access opens: the id column alone, in one read of the file.
    ESCPOD_ASSIGN_OR_RETURN(ReadBatch rows, m_impl->lazy.rows_from_file(batch_idx, 0, batch_rows(batch_idx),
                                                                       detail::ReadsRowReader::Columns::kIds));
    return std::move(rows.read_id);
  }
  ESCPOD_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> held, m_impl->lazy.reads_batch(batch_idx));
  const arrow::RecordBatch& rb = *held;
  auto ids = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(tables.column(rb, "read_id"));
  if (!tables.validated_at_open) {
    ESCPOD_RETURN_IF_ERROR(
        from_arrow(ids->ValidateFull(), tables.where() + ": reads batch " + std::to_string(batch_idx) + " read_id"));
  }
  std::vector<ReadId> out(static_cast<size_t>(ids->length()));
  if (!out.empty()) std::memcpy(out.data(), ids->raw_values(), out.size() * 16);
  // Copied out: release the pages read (and those the kernel mapped around them), so a pass over
  // every id of a huge file (merge's duplicate check) keeps a small resident set.
  mapping.drop_reads_batch_pages(rb);
  // A pass over every batch's ids (merge's duplicate check) leaves IPC headers and dictionary
  // messages mapped around each batch (~22 KB a batch, measured): its last batch releases the
  // whole table.
  if (batch_idx + 1 == tables.read_batches.size() && mapping.reads_table_begin) {
    mapping.drop_pages(mapping.reads_table_begin, mapping.reads_table_end);
    mapping.reads_dropped_until.store(0);  // the next pass starts from the table's beginning
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
  r.pore_type = m_impl->tables.pore_types[static_cast<size_t>(b.pore_type_idx[i])];
  r.calibration_offset = b.calibration_offset[i];
  r.calibration_scale = b.calibration_scale[i];
  r.end_reason = m_impl->tables.end_reasons[static_cast<size_t>(b.end_reason_idx[i])];
  r.end_reason_forced = b.end_reason_forced[i] != 0;
  r.run_info = m_impl->tables.run_info_ids[static_cast<size_t>(b.run_info_idx[i])];
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
  ESCPOD_RETURN_IF_ERROR(m_impl->lazy.ensure_id_index());
  auto it = m_impl->lazy.id_index.find(id);
  if (it == m_impl->lazy.id_index.end()) {
    return Status::not_found(m_impl->tables.where() + ": no read " + id.to_string());
  }
  ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, read_batch(it->second.first));
  return record(batch, it->second.second);
}

Result<SignalChunk> FileReader::signal_chunk(uint64_t row) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->lazy.ensure_signal());
  int64_t r = 0;
  Status located;
  const SignalBatchView* v = m_impl->lazy.locate(row, &r, &located);
  if (!located.is_ok()) return located;
  if (!v) {
    return Status::corrupt(m_impl->tables.where() + ": signal row " + std::to_string(row) +
                           " out of range (" + std::to_string(m_impl->lazy.signal_info.n_rows) + " rows)");
  }
  SignalChunk c;
  c.n_samples = v->samples[r];
  std::memcpy(c.read_id.bytes.data(), v->read_ids + 16 * r, 16);
  const int64_t begin = v->offsets[r], end = v->offsets[r + 1];
  if (m_impl->tables.info.is_vbz) {
    c.bytes = {v->vbz_data + begin, static_cast<size_t>(end - begin)};
  } else {
    c.bytes = {reinterpret_cast<const uint8_t*>(v->raw_values + begin),
               static_cast<size_t>(end - begin) * sizeof(int16_t)};
  }
  return c;
}

void FileReader::drop_signal_pages(uint64_t end_row, const ReleaseHook& before) const {
  // Files read lazily (random access) hold only the batches they touched: nothing to stream past.
  if (!m_impl->lazy.ensure_signal().is_ok() || m_impl->lazy.lazy_ready) return;
  const detail::OnDemandAccess& im = m_impl->lazy;
  const detail::FileMapping& mapping = m_impl->mapping;
  const auto& batches = im.signal_batches;
  if (batches.empty()) return;
  // Batches are laid out in the file in order: everything below the first batch that still
  // holds rows >= end_row (its lowest buffer) can go, including the IPC metadata and the pages
  // shared with the previous batch that a per-batch drop would have to keep.
  const auto& first = im.signal_batch_first;
  const size_t keep = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), end_row) -
                                          first.begin()) - 1;
  const uint8_t* hi = keep < batches.size() ? batches[keep].region_begin : batches.back().bytes_end;
  uintptr_t seen = mapping.signal_dropped_until.load(std::memory_order_relaxed);
  const uintptr_t start = seen ? seen : reinterpret_cast<uintptr_t>(batches.front().region_begin);
  if (reinterpret_cast<uintptr_t>(hi) <= start) return;
  // Release kDropStride of file at a time, and whatever is left once the end is reached.
  const bool to_end = keep >= batches.size();
  if (!to_end && reinterpret_cast<uintptr_t>(hi) - start < static_cast<uintptr_t>(detail::FileMapping::kDropStride)) {
    return;
  }
  // Another caller advancing the mark concurrently drops its own range; only one drops this one.
  if (!mapping.signal_dropped_until.compare_exchange_strong(seen, reinterpret_cast<uintptr_t>(hi))) return;
  if (before) before(reinterpret_cast<const void*>(start), hi);
  mapping.drop_behind(start, hi);
}

void FileReader::drop_signal_pages_behind(const ReadBatch& done, const ReleaseHook& before) const {
  if (done.signal_rows.empty() || !m_impl->lazy.ensure_signal().is_ok()) return;
  const auto [lowest, highest] = std::minmax_element(done.signal_rows.begin(), done.signal_rows.end());
  // A batch holding the last signal row finishes the file: everything can go.
  const bool last = *highest + 1 >= m_impl->lazy.signal_info.n_rows;
  drop_signal_pages(last ? UINT64_MAX : *lowest, before);
}

Result<uint64_t> FileReader::count_samples(std::span<const uint64_t> rows) const {
  ESCPOD_RETURN_IF_ERROR(m_impl->lazy.ensure_signal());
  uint64_t total = 0;
  for (uint64_t row : rows) {
    int64_t r = 0;
    Status located;
    const SignalBatchView* v = m_impl->lazy.locate(row, &r, &located);
    if (!located.is_ok()) return located;
    if (!v) {
      return Status::corrupt(m_impl->tables.where() + ": signal row " + std::to_string(row) +
                             " out of range (" + std::to_string(m_impl->lazy.signal_info.n_rows) + " rows)");
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
    if (const std::optional<uint64_t> at = m_impl->lazy.pread_offset(c.bytes)) {
      copied.resize(c.bytes.size());
      ESCPOD_RETURN_IF_ERROR(detail::pread_exact(m_impl->lazy.fd.get(), copied.data(), copied.size(), *at, m_impl->tables.where()));
      c.bytes = {copied.data(), copied.size()};
    }
    const size_t take = std::min<size_t>(c.n_samples, out.size() - pos);
    auto dst = out.subspan(pos, take);
    Status s;
    if (m_impl->tables.info.is_vbz) {
      s = take == c.n_samples ? codec.decompress(c.bytes, dst)
                              : codec.decompress_prefix(c.bytes, c.n_samples, dst);
    } else if (c.bytes.size() != size_t{c.n_samples} * 2) {
      s = Status::corrupt("holds " + std::to_string(c.bytes.size() / 2) + " samples, 'samples' says " +
                          std::to_string(c.n_samples));
    } else {
      std::memcpy(dst.data(), c.bytes.data(), take * sizeof(int16_t));
    }
    if (!s.is_ok()) {
      return s.with_context(m_impl->tables.where() + ": signal row " + std::to_string(row) + " (read " +
                            c.read_id.to_string() + ")");
    }
    pos += take;
  }
  if (pos < out.size()) {
    return Status::corrupt(m_impl->tables.where() + ": signal rows hold " + std::to_string(pos) +
                           " samples, " + std::to_string(out.size()) + " requested");
  }
  return Status::ok();
}


FileReader::FileReader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
FileReader::~FileReader() = default;

const FileInfo& FileReader::info() const { return m_impl->tables.info; }
const std::filesystem::path& FileReader::path() const { return m_impl->tables.info.path; }
const std::vector<RunInfo>& FileReader::run_infos() const { return m_impl->tables.run_infos; }
const std::vector<std::string>& FileReader::pore_types() const { return m_impl->tables.pore_types; }
const std::vector<std::string>& FileReader::end_reasons() const { return m_impl->tables.end_reasons; }
const std::vector<std::string>& FileReader::run_info_ids() const { return m_impl->tables.run_info_ids; }
size_t FileReader::n_read_batches() const { return m_impl->tables.read_batches.size(); }

const RunInfo* FileReader::find_run_info(std::string_view acquisition_id) const {
  for (const auto& r : m_impl->tables.run_infos)
    if (r.acquisition_id == acquisition_id) return &r;
  return nullptr;
}

}  // namespace escpod::pod5
