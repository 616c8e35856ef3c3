#include "pod5/reads_rows.hpp"

#include <arrow/extension_type.h>
#include <arrow/type.h>
#include <cmath>
#include <cstring>
#include <limits>


namespace escpod::pod5::detail {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Bytes a value of a fixed-width type (0 for bit-packed booleans, -1: not fixed width).
int value_width(const arrow::DataType& type) {
  const arrow::DataType& t = storage_type(type);
  if (t.id() == arrow::Type::BOOL) return 0;
  if (t.id() == arrow::Type::DICTIONARY) {
    return value_width(*static_cast<const arrow::DictionaryType&>(t).index_type());
  }
  if (const auto* fixed = dynamic_cast<const arrow::FixedWidthType*>(&t)) return fixed->bit_width() / 8;
  return -1;
}

}  // namespace

std::unique_ptr<ReadsRowReader> ReadsRowReader::create(int fd, const uint8_t* table, uint64_t table_offset,
                                                       uint64_t table_size, const arrow::Schema& schema) {
  std::unique_ptr<ReadsRowReader> r(new ReadsRowReader);
  r->m_fd = fd;
  r->m_table_offset = table_offset;
  for (const auto& f : schema.fields()) {
    Column c;
    c.node = r->m_n_nodes;
    c.buffer = r->m_n_buffers + 1;  // after the validity bitmap
    const arrow::DataType& t = storage_type(*f->type());
    c.type_id = t.id() == arrow::Type::DICTIONARY
                    ? static_cast<const arrow::DictionaryType&>(t).index_type()->id()
                    : t.id();
    c.width = value_width(t);
    if (!count_ipc_layout(*f->type(), &r->m_n_nodes, &r->m_n_buffers)) return nullptr;
    if (f->name() == "signal") {
      // list<uint64>: the offsets are the column's buffer, the values its child's.
      if (t.id() != arrow::Type::LIST || storage_type(*t.field(0)->type()).id() != arrow::Type::UINT64) return nullptr;
      r->m_signal_values = Column{arrow::Type::UINT64, 8, c.node + 1, c.buffer + 2};
      c.width = 4;
    } else if (c.width < 0) {
      continue;  // a column FileReader does not decode
    }
    r->m_columns.emplace(f->name(), c);
  }
  if (fd < 0 || !r->column("read_id") || !r->column("signal") || !r->column("num_samples")) return nullptr;
  if (!read_ipc_blocks(table, table_size, &r->m_blocks)) return nullptr;
  r->m_headers = std::make_unique<CachedHeader[]>(r->m_blocks.size());
  return r;
}

const ReadsRowReader::Column* ReadsRowReader::column(const char* name) const {
  auto it = m_columns.find(name);
  return it == m_columns.end() ? nullptr : &it->second;
}

Status ReadsRowReader::read_header(size_t batch, RecordBatchHeader* at, const std::string& ctx) const {
  const IpcBlock& block = m_blocks[batch];
  thread_local std::vector<uint8_t> meta;
  meta.resize(block.meta_size);
  ESCPOD_RETURN_IF_ERROR(pread_exact(m_fd, meta.data(), meta.size(), m_table_offset + block.offset, ctx));
  std::string why;
  if (!parse_record_batch_header(meta.data(), meta.size(), block.body_size, at, &why)) {
    return Status::corrupt(ctx + ": " + why);
  }
  if (at->node_length.size() != static_cast<size_t>(m_n_nodes) || at->buffers.size() != static_cast<size_t>(m_n_buffers)) {
    return Status::corrupt(ctx + ": " + std::to_string(at->node_length.size()) + " field nodes and " +
                           std::to_string(at->buffers.size()) + " buffers where the schema has " +
                           std::to_string(m_n_nodes) + " and " + std::to_string(m_n_buffers));
  }
  return Status::ok();
}

Status ReadsRowReader::locate(size_t batch, uint64_t batch_rows, const RecordBatchHeader** at, uint64_t* body,
                              const std::string& where) const {
  const std::string ctx = where + ": reads batch " + std::to_string(batch);
  if (batch >= m_blocks.size()) return Status::corrupt(ctx + " is not in the table's IPC footer");
  CachedHeader& cached = m_headers[batch];
  std::call_once(cached.once, [&] { cached.status = read_header(batch, &cached.header, ctx); });
  ESCPOD_RETURN_IF_ERROR(cached.status);
  if (static_cast<uint64_t>(cached.header.length) != batch_rows) {
    return Status::corrupt(ctx + " holds " + std::to_string(cached.header.length) + " rows, " +
                           std::to_string(batch_rows) + " expected");
  }
  *at = &cached.header;
  *body = m_table_offset + m_blocks[batch].offset + m_blocks[batch].meta_size;
  return Status::ok();
}

Status ReadsRowReader::read_raw(const RowRange& r, const Column& c, const char* name, uint64_t count) const {
  const RecordBatchHeader& at = r.at;
  if (at.node_length[static_cast<size_t>(c.node)] != static_cast<int64_t>(r.batch_rows)) {
    return Status::corrupt(r.ctx + ": column " + name + " holds " +
                           std::to_string(at.node_length[static_cast<size_t>(c.node)]) + " values, " +
                           std::to_string(r.batch_rows) + " expected");
  }
  const auto [off, len] = at.buffers[static_cast<size_t>(c.buffer)];
  const uint64_t first = r.first;
  const uint64_t lo = c.width ? first * static_cast<uint64_t>(c.width) : first / 8;
  const uint64_t hi = c.width ? (first + count) * static_cast<uint64_t>(c.width) : (first + count + 7) / 8;
  if (hi > len) return Status::corrupt(r.ctx + ": column " + name + "'s values buffer is too short");
  r.bytes.resize(static_cast<size_t>(hi - lo));
  return pread_exact(m_fd, r.bytes.data(), r.bytes.size(), r.body + off + lo, r.where);
}

template <typename S, typename T>
Status ReadsRowReader::read_values(const RowRange& r, const char* name, S, T fallback, std::vector<T>& dst) const {
  const size_t n = r.n;
  dst.assign(n, fallback);
  const Column* c = column(name);
  if (!c) return Status::ok();
  if (c->width != static_cast<int>(sizeof(S))) return Status::internal(r.ctx + ": column " + name + " width");
  ESCPOD_RETURN_IF_ERROR(read_raw(r, *c, name, n));
  for (size_t i = 0; i < n; ++i) {
    S v;
    std::memcpy(&v, r.bytes.data() + i * sizeof(S), sizeof(S));
    dst[i] = static_cast<T>(v);
  }
  return Status::ok();
}

// signal: list<uint64> of global signal-table rows.
Status ReadsRowReader::read_signal_rows(const RowRange& r, ReadBatch* out) const {
  const RecordBatchHeader& at = r.at;
  const size_t n = r.n;
  const std::string& ctx = r.ctx;
  const Column& list = *column("signal");
  ESCPOD_RETURN_IF_ERROR(read_raw(r, list, "signal", n + 1));
  std::vector<int32_t> offs(n + 1);
  std::memcpy(offs.data(), r.bytes.data(), 4 * (n + 1));
  const int64_t n_values = at.node_length[static_cast<size_t>(m_signal_values.node)];
  for (size_t i = 0; i < n; ++i) {
    if (offs[i] < 0 || offs[i] > offs[i + 1] || offs[i + 1] > n_values) {
      return Status::corrupt(ctx + " row " + std::to_string(i) + ": signal row list offsets " + std::to_string(offs[i]) +
                             ".." + std::to_string(offs[i + 1]) + " outside " + std::to_string(n_values) + " values");
    }
  }
  const auto [voff, vlen] = at.buffers[static_cast<size_t>(m_signal_values.buffer)];
  if (static_cast<uint64_t>(offs[n]) * 8 > vlen) return Status::corrupt(ctx + ": column signal's values buffer is too short");
  out->signal_rows.resize(static_cast<size_t>(offs[n] - offs[0]));
  ESCPOD_RETURN_IF_ERROR(pread_exact(m_fd, out->signal_rows.data(), out->signal_rows.size() * 8,
                                     r.body + voff + static_cast<uint64_t>(offs[0]) * 8, r.where));
  out->signal_offsets.resize(n + 1);
  for (size_t i = 0; i <= n; ++i) out->signal_offsets[i] = static_cast<uint64_t>(offs[i] - offs[0]);
  return Status::ok();
}

Status ReadsRowReader::read_field_columns(const RowRange& r, ReadBatch* out) const {
  const size_t n = r.n;
  ESCPOD_RETURN_IF_ERROR(read_values(r, "read_number", uint32_t{}, uint32_t{0}, out->read_number));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "start", uint64_t{}, uint64_t{0}, out->start_sample));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "median_before", float{}, kNaN, out->median_before));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "num_minknow_events", uint64_t{}, uint64_t{0}, out->num_minknow_events));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "tracked_scaling_scale", float{}, kNaN, out->tracked_scaling_scale));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "tracked_scaling_shift", float{}, kNaN, out->tracked_scaling_shift));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "predicted_scaling_scale", float{}, kNaN, out->predicted_scaling_scale));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "predicted_scaling_shift", float{}, kNaN, out->predicted_scaling_shift));
  ESCPOD_RETURN_IF_ERROR(
      read_values(r, "num_reads_since_mux_change", uint32_t{}, uint32_t{0}, out->num_reads_since_mux_change));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "time_since_mux_change", float{}, 0.0f, out->time_since_mux_change));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "open_pore_level", float{}, kNaN, out->open_pore_level));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "expected_open_pore_level", float{}, kNaN, out->expected_open_pore_level));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "selected_read_level", float{}, kNaN, out->selected_read_level));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "pore_type", int16_t{}, int16_t{0}, out->pore_type_idx));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "end_reason", int16_t{}, int16_t{0}, out->end_reason_idx));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "run_info", int16_t{}, int16_t{0}, out->run_info_idx));
  if (column("channel_32bit")) {
    ESCPOD_RETURN_IF_ERROR(read_values(r, "channel_32bit", uint32_t{}, uint32_t{0}, out->channel));
  } else if (column("channel") && column("channel")->type_id == arrow::Type::UINT32) {
    ESCPOD_RETURN_IF_ERROR(read_values(r, "channel", uint32_t{}, uint32_t{0}, out->channel));
  } else {
    ESCPOD_RETURN_IF_ERROR(read_values(r, "channel", uint16_t{}, uint32_t{0}, out->channel));
  }
  ESCPOD_RETURN_IF_ERROR(read_values(r, "well", uint8_t{}, uint8_t{0}, out->well));
  out->end_reason_forced.assign(n, 0);
  if (const Column* forced = column("end_reason_forced")) {
    ESCPOD_RETURN_IF_ERROR(read_raw(r, *forced, "end_reason_forced", n));
    for (size_t i = 0; i < n; ++i) {
      const uint64_t bit = (r.first % 8) + i;
      out->end_reason_forced[i] = (r.bytes[bit / 8] >> (bit % 8)) & 1;
    }
  }
  return read_values(r, "num_samples", uint64_t{}, uint64_t{0}, out->num_samples);
}

Status ReadsRowReader::read_rows(size_t batch, uint64_t batch_rows, size_t first_row, size_t n_rows,
                                 ReadBatch* out, const std::string& where, Columns columns) const {
  const RecordBatchHeader* header = nullptr;
  uint64_t body = 0;
  ESCPOD_RETURN_IF_ERROR(locate(batch, batch_rows, &header, &body, where));
  const std::string ctx = where + ": reads batch " + std::to_string(batch);
  const size_t n = n_rows;
  thread_local std::vector<uint8_t> bytes;
  const RowRange r{*header, body, batch_rows, first_row, n, where, ctx, bytes};

  out->read_id.resize(n);
  ESCPOD_RETURN_IF_ERROR(read_raw(r, *column("read_id"), "read_id", n));
  if (column("read_id")->width != 16) return Status::internal(ctx + ": read_id width");
  if (n > 0) std::memcpy(out->read_id.data(), bytes.data(), 16 * n);
  if (columns == Columns::kIds) return Status::ok();

  ESCPOD_RETURN_IF_ERROR(read_signal_rows(r, out));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "calibration_offset", float{}, 0.0f, out->calibration_offset));
  ESCPOD_RETURN_IF_ERROR(read_values(r, "calibration_scale", float{}, 0.0f, out->calibration_scale));
  if (columns == Columns::kSignal) return read_values(r, "num_samples", uint64_t{}, uint64_t{0}, out->num_samples);
  return read_field_columns(r, out);
}

}  // namespace escpod::pod5::detail
