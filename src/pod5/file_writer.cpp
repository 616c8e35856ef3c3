#include "escpod/pod5/file_writer.hpp"

#include <arrow/builder.h>
#include <arrow/extension_type.h>
#include <arrow/io/interfaces.h>
#include <arrow/ipc/writer.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "escpod/core/pool_task.hpp"
#include "pod5/arrow_types.hpp"
#include "pod5/container.hpp"
#include "escpod/pod5/read_id_guard.hpp"

namespace escpod::pod5 {

using detail::from_arrow;

namespace {

// Buffered writes to a file descriptor, tracking the absolute position. Write errors (disk full)
// are kept and reported by every later call.
class FdSink {
 public:
  explicit FdSink(int fd, size_t buffer_size = 1 << 20) : m_fd(fd), m_buffer_size(buffer_size) {
    m_buffer.reserve(m_buffer_size);
  }
  ~FdSink() {
    if (m_fd >= 0) ::close(m_fd);
  }
  arrow::Status write(const void* data, int64_t n) {
    if (!m_error.ok()) return m_error;
    const auto* p = static_cast<const uint8_t*>(data);
    m_position += n;
    if (m_buffer.size() + static_cast<size_t>(n) > m_buffer_size) {
      ARROW_RETURN_NOT_OK(flush());
      if (static_cast<size_t>(n) >= m_buffer_size) return write_through(p, static_cast<size_t>(n));
    }
    m_buffer.insert(m_buffer.end(), p, p + n);
    return arrow::Status::OK();
  }
  arrow::Status flush() {
    if (!m_error.ok()) return m_error;
    auto s = write_through(m_buffer.data(), m_buffer.size());
    m_buffer.clear();
    return s;
  }
  // Writes `pieces` in order straight from where they lie (writev, no copy into the buffer).
  arrow::Status write_gather(std::span<const iovec> pieces) {
    ARROW_RETURN_NOT_OK(flush());
    std::vector<iovec> rest(pieces.begin(), pieces.end());
    size_t first = 0;
    while (first < rest.size()) {
      const int count = static_cast<int>(std::min<size_t>(rest.size() - first, IOV_MAX));
      ssize_t w = ::writev(m_fd, rest.data() + first, count);
      if (w < 0) {
        if (errno == EINTR) continue;
        m_error = arrow::Status::IOError("write failed: ", std::strerror(errno));
        return m_error;
      }
      m_position += w;
      // Skip what was written: whole pieces, then part of the next one.
      auto left = static_cast<size_t>(w);
      while (first < rest.size() && left >= rest[first].iov_len) left -= rest[first++].iov_len;
      if (left > 0) {
        rest[first].iov_base = static_cast<uint8_t*>(rest[first].iov_base) + left;
        rest[first].iov_len -= left;
      }
    }
    return arrow::Status::OK();
  }
  // Appends the whole of the file open at `in_fd` (read from its start): copied inside the
  // kernel where it can (copy_file_range), else through a small buffer.
  arrow::Status append_file(int in_fd) {
    ARROW_RETURN_NOT_OK(flush());
    off_t in_pos = 0;
    for (;;) {
      const ssize_t n = ::copy_file_range(in_fd, &in_pos, m_fd, nullptr, size_t{1} << 30, 0);
      if (n > 0) {
        m_position += n;
        continue;
      }
      if (n == 0) return arrow::Status::OK();
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP) break;
      m_error = arrow::Status::IOError("copy failed: ", std::strerror(errno));
      return m_error;
    }
    std::vector<uint8_t> chunk(64 << 10);
    for (;;) {
      const ssize_t got = ::pread(in_fd, chunk.data(), chunk.size(), in_pos);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return arrow::Status::IOError("read failed: ", std::strerror(errno));
      if (got == 0) return arrow::Status::OK();
      in_pos += got;
      m_position += got;
      ARROW_RETURN_NOT_OK(write_through(chunk.data(), static_cast<size_t>(got)));
    }
  }
  arrow::Status pad_to_8() {
    static const uint8_t zeros[8] = {};
    const int64_t pad = (8 - m_position % 8) % 8;
    return write(zeros, pad);
  }
  int64_t position() const { return m_position; }
  arrow::Status close() {
    auto s = flush();
    if (m_fd >= 0 && ::close(m_fd) != 0 && s.ok()) s = arrow::Status::IOError(std::strerror(errno));
    m_fd = -1;
    return s;
  }

 private:
  arrow::Status write_through(const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(m_fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        m_error = arrow::Status::IOError("write failed: ", std::strerror(errno));
        return m_error;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return arrow::Status::OK();
  }
  int m_fd;
  size_t m_buffer_size;
  int64_t m_position = 0;
  std::vector<uint8_t> m_buffer;
  arrow::Status m_error;
};

// A signal batch's bytes that are not in one buffer: pieces owned by the writer and pieces
// borrowed from the caller (a reader's mapping), to be written with writev from where they lie.
// Arrow is handed an ordinary buffer whose address range is reserved but inaccessible
// (PROT_NONE); EmbeddedStream recognises writes from that range and writes the pieces instead.
// Should Arrow ever read the buffer itself, it faults loudly rather than writing wrong bytes.
class GatheredBytes {
 public:
  GatheredBytes() = default;
  GatheredBytes(const GatheredBytes&) = delete;
  GatheredBytes& operator=(const GatheredBytes&) = delete;
  ~GatheredBytes() {
    if (m_reserved) ::munmap(m_reserved, m_reserved_size);
  }
  // Sets the pieces of the next batch and returns the stand-in buffer Arrow serialises.
  Result<std::shared_ptr<arrow::Buffer>> set(std::vector<iovec> pieces) {
    m_pieces = std::move(pieces);
    m_size = 0;
    for (const iovec& p : m_pieces) m_size += p.iov_len;
    if (m_size > m_reserved_size) {
      if (m_reserved) ::munmap(m_reserved, m_reserved_size);
      m_reserved_size = std::max<size_t>(m_size, 64 << 20);
      void* p = ::mmap(nullptr, m_reserved_size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        m_reserved = nullptr;
        m_reserved_size = 0;
        return Status::io_error(std::string("cannot reserve address space: ") + std::strerror(errno));
      }
      m_reserved = static_cast<uint8_t*>(p);
    }
    return std::make_shared<arrow::Buffer>(m_reserved, static_cast<int64_t>(m_size));
  }
  bool covers(const void* data, int64_t n) const {
    const auto* p = static_cast<const uint8_t*>(data);
    return m_reserved && p >= m_reserved && p + n <= m_reserved + m_size;
  }
  // Writes bytes [data, data + n) of the stand-in range: the pieces that cover them.
  arrow::Status write_range(FdSink& sink, const void* data, int64_t n) const {
    size_t skip = static_cast<size_t>(static_cast<const uint8_t*>(data) - m_reserved);
    auto left = static_cast<size_t>(n);
    std::vector<iovec> out;
    for (const iovec& p : m_pieces) {
      if (left == 0) break;
      if (skip >= p.iov_len) {
        skip -= p.iov_len;
        continue;
      }
      const size_t take = std::min(p.iov_len - skip, left);
      out.push_back({static_cast<uint8_t*>(p.iov_base) + skip, take});
      skip = 0;
      left -= take;
    }
    return sink.write_gather(out);
  }
 private:
  std::vector<iovec> m_pieces;
  size_t m_size = 0;
  uint8_t* m_reserved = nullptr;
  size_t m_reserved_size = 0;
};

// An Arrow output stream over part of an FdSink: positions count from where it was opened, since
// each embedded Arrow file's internal offsets are relative to its own start.
class EmbeddedStream : public arrow::io::OutputStream {
 public:
  explicit EmbeddedStream(FdSink* sink) : m_sink(sink), m_base(sink->position()) {}
  arrow::Status Close() override {
    m_closed = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return m_closed; }
  arrow::Result<int64_t> Tell() const override { return m_sink->position() - m_base; }
  arrow::Status Write(const void* data, int64_t nbytes) override {
    if (m_gathered && m_gathered->covers(data, nbytes)) return m_gathered->write_range(*m_sink, data, nbytes);
    return m_sink->write(data, nbytes);
  }
  int64_t base() const { return m_base; }
  // While set, writes from `g`'s stand-in range are served from its pieces.
  void set_gathered(const GatheredBytes* g) { m_gathered = g; }

 private:
  FdSink* m_sink;
  int64_t m_base;
  bool m_closed = false;
  const GatheredBytes* m_gathered = nullptr;
};

Result<int> open_for_write(const std::filesystem::path& p) {
  int fd = ::open(p.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return Status::io_error("cannot open " + p.string() + ": " + std::strerror(errno));
  return fd;
}

arrow::ipc::IpcWriteOptions ipc_options(bool dictionary_deltas) {
  auto o = arrow::ipc::IpcWriteOptions::Defaults();
  o.alignment = 8;
  o.emit_dictionary_deltas = dictionary_deltas;
  return o;
}

std::shared_ptr<arrow::Array> wrap(const std::shared_ptr<arrow::DataType>& ext,
                                   const std::shared_ptr<arrow::Array>& storage) {
  return arrow::ExtensionType::WrapArray(ext, storage);
}

// The reads table's columns (V7 schema order) being built, one read at a time.
struct ReadsColumns {
  arrow::FixedSizeBinaryBuilder ids{arrow::fixed_size_binary(16)};
  std::shared_ptr<arrow::UInt64Builder> row_values = std::make_shared<arrow::UInt64Builder>();
  arrow::ListBuilder rows{arrow::default_memory_pool(), row_values,
                          arrow::list(arrow::field("item", arrow::uint64()))};
  arrow::UInt32Builder read_number, num_reads_since_mux_change, channel_32bit;
  arrow::UInt64Builder start, num_minknow_events, num_samples;
  arrow::FloatBuilder median_before, tss, tsh, pss, psh, time_since_mux_change, cal_off, cal_scale,
      open_pore, expected_open_pore, selected_level;
  arrow::UInt16Builder channel;
  arrow::UInt8Builder well;
  arrow::Int16Builder pore_idx, end_idx, run_idx;
  arrow::BooleanBuilder forced;

  // Appends read `r`; its pore type and run info must be in the dictionaries given.
  arrow::Status append(const ReadRecord& r, const std::vector<std::string>& pore_types,
                       const std::vector<std::string>& run_info_ids) {
    ARROW_RETURN_NOT_OK(ids.Append(r.read_id.bytes.data()));
    ARROW_RETURN_NOT_OK(rows.Append());
    ARROW_RETURN_NOT_OK(row_values->AppendValues(r.signal_rows));
    ARROW_RETURN_NOT_OK(read_number.Append(r.read_number));
    ARROW_RETURN_NOT_OK(start.Append(r.start_sample));
    ARROW_RETURN_NOT_OK(median_before.Append(r.median_before));
    ARROW_RETURN_NOT_OK(num_minknow_events.Append(r.num_minknow_events));
    ARROW_RETURN_NOT_OK(tss.Append(r.tracked_scaling_scale));
    ARROW_RETURN_NOT_OK(tsh.Append(r.tracked_scaling_shift));
    ARROW_RETURN_NOT_OK(pss.Append(r.predicted_scaling_scale));
    ARROW_RETURN_NOT_OK(psh.Append(r.predicted_scaling_shift));
    ARROW_RETURN_NOT_OK(num_reads_since_mux_change.Append(r.num_reads_since_mux_change));
    ARROW_RETURN_NOT_OK(time_since_mux_change.Append(r.time_since_mux_change));
    ARROW_RETURN_NOT_OK(num_samples.Append(r.num_samples));
    // V7: channel holds the value when it fits 16 bits, else 0; channel_32bit always holds it.
    ARROW_RETURN_NOT_OK(channel.Append(r.channel > 0xffff ? 0 : static_cast<uint16_t>(r.channel)));
    ARROW_RETURN_NOT_OK(well.Append(r.well));
    int16_t p = 0;
    while (pore_types[static_cast<size_t>(p)] != r.pore_type) ++p;
    ARROW_RETURN_NOT_OK(pore_idx.Append(p));
    ARROW_RETURN_NOT_OK(cal_off.Append(r.calibration_offset));
    ARROW_RETURN_NOT_OK(cal_scale.Append(r.calibration_scale));
    ARROW_RETURN_NOT_OK(end_idx.Append(static_cast<int16_t>(end_reason_index(r.end_reason))));
    ARROW_RETURN_NOT_OK(forced.Append(r.end_reason_forced));
    int16_t q = 0;
    while (run_info_ids[static_cast<size_t>(q)] != r.run_info) ++q;
    ARROW_RETURN_NOT_OK(run_idx.Append(q));
    ARROW_RETURN_NOT_OK(open_pore.Append(r.open_pore_level));
    ARROW_RETURN_NOT_OK(expected_open_pore.Append(r.expected_open_pore_level));
    ARROW_RETURN_NOT_OK(selected_level.Append(r.selected_read_level));
    return channel_32bit.Append(r.channel);
  }

  // The finished columns into `cols`, the dictionary columns over the (cumulative) dictionaries
  // given. Every column is finished; the first error is returned.
  arrow::Status finish(const std::vector<std::string>& pore_types, const std::vector<std::string>& run_info_ids,
                       std::vector<std::shared_ptr<arrow::Array>>& cols) {
    arrow::Status st;
    auto push = [&](arrow::Result<std::shared_ptr<arrow::Array>> r) {
      if (!r.ok()) {
        if (st.ok()) st = r.status();
        cols.push_back(nullptr);
      } else {
        cols.push_back(*r);
      }
    };
    auto done = [](auto& builder) { return builder.Finish(); };
    push(done(ids).Map([](auto a) { return wrap(detail::uuid_type(), a); }));
    push(done(rows));
    push(done(read_number));
    push(done(start));
    push(done(median_before));
    push(done(num_minknow_events));
    push(done(tss));
    push(done(tsh));
    push(done(pss));
    push(done(psh));
    push(done(num_reads_since_mux_change));
    push(done(time_since_mux_change));
    push(done(num_samples));
    push(done(channel));
    push(done(well));
    push(dictionary(pore_idx, pore_types));
    push(done(cal_off));
    push(done(cal_scale));
    push(dictionary(end_idx, kEndReasonNames));
    push(done(forced));
    push(dictionary(run_idx, run_info_ids));
    push(done(open_pore));
    push(done(expected_open_pore));
    push(done(selected_level));
    push(done(channel_32bit));
    return st;
  }

 private:
  template <typename Values>
  static arrow::Result<std::shared_ptr<arrow::Array>> strings(const Values& values) {
    arrow::StringBuilder b;
    for (const auto& v : values) ARROW_RETURN_NOT_OK(b.Append(std::string_view(v)));
    return b.Finish();
  }
  // A dictionary<int16, utf8> column: the indices built in `idx`, over `values`.
  template <typename Values>
  static arrow::Result<std::shared_ptr<arrow::Array>> dictionary(arrow::Int16Builder& idx, const Values& values) {
    ARROW_ASSIGN_OR_RAISE(auto indices, idx.Finish());
    ARROW_ASSIGN_OR_RAISE(auto dict, strings(values));
    return arrow::DictionaryArray::FromArrays(arrow::dictionary(arrow::int16(), arrow::utf8()), indices, dict);
  }
};

}  // namespace

struct FileWriter::Impl {
  WriterOptions options;
  std::filesystem::path path;
  std::optional<StagedFile> staged;
  std::optional<ScratchPath> reads_scratch;
  std::string file_identifier;
  std::vector<uint8_t> marker;  // 16 random bytes
  std::unique_ptr<FdSink> sink;        // the staging file
  std::unique_ptr<FdSink> reads_sink;  // the reads-table scratch file
  std::shared_ptr<EmbeddedStream> signal_stream, reads_stream;
  std::shared_ptr<arrow::ipc::RecordBatchWriter> signal_writer, reads_writer;
  std::shared_ptr<arrow::Schema> signal_schema, reads_schema;
  VbzCodec codec;
  std::vector<uint8_t> compressed;
  bool closed = false;
  Status failed;  // a failed write poisons the writer

  // Pending signal batch: ids, sample counts and the stored bytes of each chunk. The bytes stay
  // in memory while the shared budget allows, else they go to a spill file beside the output,
  // so a run writing hundreds of outputs holds a bounded amount of signal whatever their number.
  std::vector<uint8_t> sig_ids;        // 16 bytes a row
  std::vector<uint32_t> sig_samples;
  std::vector<int64_t> sig_offsets{0};  // byte offsets (VBZ) or sample offsets (raw)
  std::vector<uint8_t> sig_bytes;       // in-memory pending bytes
  int64_t sig_reserved = 0;             // bytes of sig_bytes taken from the budget
  std::optional<ScratchPath> spill_path;
  std::unique_ptr<FdSink> spill;        // pending bytes beyond the budget
  int64_t spill_bytes = 0;
  int64_t sig_pending = 0;
  uint64_t sig_rows_written = 0;
  // The pending batch's bytes in order, as pieces (coalesced): borrowed ones point at the
  // caller's bytes, owned ones (nullptr) at sig_bytes[offset]. Only consulted when some piece is
  // borrowed; the batch is then written with writev through `gathered`.
  struct Piece {
    const uint8_t* borrowed;
    size_t offset;
    size_t n;
  };
  std::vector<Piece> sig_pieces;
  bool sig_has_borrowed = false;
  // Appends `p`, merged into the last piece when it continues it.
  void append_piece(const Piece& p) {
    if (p.n == 0) return;
    if (!sig_pieces.empty()) {
      Piece& last = sig_pieces.back();
      const bool continues = p.borrowed ? last.borrowed && last.borrowed + last.n == p.borrowed
                                        : !last.borrowed && last.offset + last.n == p.offset;
      if (continues) {
        last.n += p.n;
        return;
      }
    }
    sig_pieces.push_back(p);
  }
  GatheredBytes gathered;  // the batch being written, when it has borrowed pieces

  // Pending reads batch (columns as plain vectors; turned into Arrow arrays per batch).
  std::vector<ReadRecord> pending_reads;  // signal_rows filled with the rows we wrote
  uint64_t n_reads = 0;
  // Duplicate guard in bounded memory: repeats among recent ids fail add_read, the rest are
  // found by finish() (spilled ids merged from a scratch file beside the output).
  std::optional<ReadIdGuard> seen_ids;

  // Dictionaries: cumulative (each reads batch carries all values so far).
  std::vector<std::string> pore_types;
  std::vector<std::string> run_info_ids;
  std::vector<RunInfo> run_infos;

  Status fail(Status s) {
    if (failed.is_ok()) failed = s;
    return s;
  }
  Status arrow_status(const arrow::Status& s, const char* what) {
    if (s.ok()) return Status::ok();
    return fail(Status::io_error(path.string() + ": " + what + ": " + s.message()));
  }

  // The signal batch being written in the background, and the buffers of the one before it
  // (kept for their capacity).
  struct InFlight {
    std::vector<uint8_t> ids, bytes;
    std::vector<uint32_t> samples;
    std::vector<int64_t> offsets;
    std::shared_ptr<arrow::RecordBatch> batch;
    arrow::ipc::RecordBatchWriter* writer = nullptr;
    arrow::Status status;
    // The task's join as ThreadSanitizer sees it (libtbb's own is invisible to it: see
    // core/parallel.hpp): released once the write is done, acquired by wait_signal_tasks().
    std::atomic<uint32_t> finished{0};
    // Runs on a pool thread (spawned through core/pool_task.hpp, whose hand-off TSan sees).
    void run_pool_task() {
      status = writer->WriteRecordBatch(*batch);
      finished.fetch_add(1, std::memory_order_release);
    }
  };
  std::unique_ptr<InFlight> in_flight;
  InFlight spare;
  tbb::task_group signal_tasks;
  // The pool the background write was started in (the caller's executor): it is waited for in
  // that pool, where its task is queued; a wait from outside it (finish() after the caller's
  // stream has left its pool) could not run the task, and a pool without spare threads never
  // would.
  std::optional<tbb::task_arena> signal_arena;
  void wait_signal_tasks() {
    if (signal_arena) {
      signal_arena->execute([this] { signal_tasks.wait(); });
    } else {
      signal_tasks.wait();
    }
    if (in_flight) (void)in_flight->finished.load(std::memory_order_acquire);  // the join, for TSan
  }
  ~Impl() { wait_signal_tasks(); }
  Status wait_signal_write();

  Status start();
  Status add_chunk(const ReadId& id, const uint8_t* bytes, size_t n_bytes, uint32_t n_samples,
                   ChunkBytes how = ChunkBytes::kCopy);
  void reset_pending_signal();
  Status flush_signal_batch();
  // Steps of flush_signal_batch: the pending batch's bytes gathered from borrowed pieces (after
  // the write before, which used the same stand-in range); the spilled tail read back after the
  // in-memory head into `joined`; the batch over the pending buffers; its write by a background
  // task; after a write in place, the pending state reset and its memory released.
  Result<std::shared_ptr<arrow::Buffer>> gather_borrowed_signal();
  Status read_back_spill(std::vector<uint8_t>& joined);
  std::shared_ptr<arrow::RecordBatch> make_signal_batch(const std::shared_ptr<arrow::Buffer>& data) const;
  Status write_signal_in_background(std::shared_ptr<arrow::RecordBatch> batch);
  void release_written_signal();
  Status flush_reads_batch();
  Status write_run_info_table();
  Status finish();
  Status check_read(const ReadRecord& read);
  Status check_unique_ids();
  Status duplicate_id(const ReadId& id) const {
    return Status::invalid_argument(path.string() + ": duplicate read id " + id.to_string());
  }
};

Status FileWriter::Impl::start() {
  ESCPOD_ASSIGN_OR_RETURN(StagedFile s, StagedFile::create(path, options.overwrite));
  staged.emplace(std::move(s));
  ESCPOD_ASSIGN_OR_RETURN(ScratchPath r, ScratchPath::create(path, ".reads"));
  reads_scratch.emplace(std::move(r));
  if (options.check_duplicate_ids) seen_ids.emplace(path.parent_path());
  file_identifier = ReadId::random().to_string();
  ReadId m = ReadId::random();
  marker.assign(m.bytes.begin(), m.bytes.end());
  ESCPOD_ASSIGN_OR_RETURN(int fd, open_for_write(staged->staging_path()));
  // Writers under a shared budget come in numbers (one per barcode): keep their fixed cost small.
  sink = std::make_unique<FdSink>(fd, options.signal_budget ? (64 << 10) : (1 << 20));
  ESCPOD_ASSIGN_OR_RETURN(int rfd, open_for_write(reads_scratch->path()));
  reads_sink = std::make_unique<FdSink>(rfd, options.signal_budget ? (16 << 10) : (64 << 10));

  ESCPOD_RETURN_IF_ERROR(arrow_status(sink->write(detail::kSignature, 8), "write"));
  ESCPOD_RETURN_IF_ERROR(arrow_status(sink->write(marker.data(), 16), "write"));

  signal_schema = detail::signal_schema(options.vbz, file_identifier, options.software,
                                        kWrittenPod5Version);
  reads_schema = detail::reads_schema(file_identifier, options.software, kWrittenPod5Version);
  signal_stream = std::make_shared<EmbeddedStream>(sink.get());
  signal_stream->set_gathered(&gathered);
  auto sw = arrow::ipc::MakeFileWriter(signal_stream, signal_schema, ipc_options(false),
                                       signal_schema->metadata());
  if (!sw.ok()) return arrow_status(sw.status(), "signal table");
  signal_writer = *sw;
  reads_stream = std::make_shared<EmbeddedStream>(reads_sink.get());
  auto rw = arrow::ipc::MakeFileWriter(reads_stream, reads_schema, ipc_options(true),
                                       reads_schema->metadata());
  if (!rw.ok()) return arrow_status(rw.status(), "reads table");
  reads_writer = *rw;
  return Status::ok();
}

Status FileWriter::Impl::add_chunk(const ReadId& id, const uint8_t* bytes, size_t n_bytes,
                                   uint32_t n_samples, ChunkBytes how) {
  sig_ids.insert(sig_ids.end(), id.bytes.begin(), id.bytes.end());
  sig_samples.push_back(n_samples);
  const auto n = static_cast<int64_t>(n_bytes);
  sig_offsets.push_back(sig_offsets.back() + (options.vbz ? n : n / 2));
  // Only budgeted writers spill, and spilled bytes are not pieces: those writers copy.
  const bool borrow = how == ChunkBytes::kBorrow && !options.signal_budget;
  const bool fits = !spill && (!options.signal_budget || options.signal_budget->try_take(n));
  if (borrow) {
    append_piece({bytes, 0, n_bytes});
    sig_has_borrowed = true;
  } else if (fits) {
    append_piece({nullptr, sig_bytes.size(), n_bytes});
    sig_bytes.insert(sig_bytes.end(), bytes, bytes + n_bytes);
    if (options.signal_budget) sig_reserved += n;
  } else {
    if (!spill) {
      ESCPOD_ASSIGN_OR_RETURN(ScratchPath sp, ScratchPath::create(path, ".signal"));
      spill_path.emplace(std::move(sp));
      ESCPOD_ASSIGN_OR_RETURN(int fd, open_for_write(spill_path->path()));
      spill = std::make_unique<FdSink>(fd, 64 << 10);
    }
    ESCPOD_RETURN_IF_ERROR(arrow_status(spill->write(bytes, n), "spill file"));
    spill_bytes += n;
  }
  ++sig_pending;
  ++sig_rows_written;
  // Flush as soon as the batch is full, even mid-read: every batch but the last is uniform.
  if (sig_pending == static_cast<int64_t>(options.signal_batch_rows)) return flush_signal_batch();
  return Status::ok();
}

Status FileWriter::Impl::flush_signal_batch() {
  if (sig_pending == 0) return Status::ok();
  // The batch's bytes, contiguous: in memory, or the in-memory head plus the spilled tail.
  std::shared_ptr<arrow::Buffer> data;
  std::vector<uint8_t> joined;
  if (sig_has_borrowed) {
    ESCPOD_ASSIGN_OR_RETURN(data, gather_borrowed_signal());
  } else if (spill_bytes > 0) {
    ESCPOD_RETURN_IF_ERROR(read_back_spill(joined));
    data = arrow::Buffer::Wrap(joined.data(), static_cast<int64_t>(joined.size()));
  } else {
    data = arrow::Buffer::Wrap(sig_bytes.data(), static_cast<int64_t>(sig_bytes.size()));
  }
  auto batch = make_signal_batch(data);
  // Without a shared budget (single-output commands), the batch is written by a background task
  // while the caller fills the next one: copying chunks in and writing them out overlap.
  const bool async = !options.signal_budget && !spill;
  if (async) return write_signal_in_background(std::move(batch));
  ESCPOD_RETURN_IF_ERROR(arrow_status(signal_writer->WriteRecordBatch(*batch), "signal batch"));
  release_written_signal();
  return Status::ok();
}

Result<std::shared_ptr<arrow::Buffer>> FileWriter::Impl::gather_borrowed_signal() {
  // The stand-in range is reused batch after batch: the one before must be written first.
  ESCPOD_RETURN_IF_ERROR(wait_signal_write());
  std::vector<iovec> pieces;
  pieces.reserve(sig_pieces.size());
  // sig_bytes keeps its data pointer from here on (it is moved, not copied).
  for (const Piece& p : sig_pieces) {
    pieces.push_back({p.borrowed ? const_cast<uint8_t*>(p.borrowed) : sig_bytes.data() + p.offset, p.n});
  }
  auto stand_in = gathered.set(std::move(pieces));
  if (!stand_in.is_ok()) return fail(stand_in.status());
  return std::move(stand_in).value();
}

Status FileWriter::Impl::read_back_spill(std::vector<uint8_t>& joined) {
  ESCPOD_RETURN_IF_ERROR(arrow_status(spill->flush(), "signal batch"));
  joined.resize(sig_bytes.size() + static_cast<size_t>(spill_bytes));
  std::memcpy(joined.data(), sig_bytes.data(), sig_bytes.size());
  int fd = ::open(spill_path->path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(Status::io_error("cannot reopen " + spill_path->path().string()));
  size_t got = 0;
  while (got < static_cast<size_t>(spill_bytes)) {
    ssize_t r = ::pread(fd, joined.data() + sig_bytes.size() + got, static_cast<size_t>(spill_bytes) - got,
                        static_cast<off_t>(got));
    if (r <= 0) {
      ::close(fd);
      return fail(Status::io_error("cannot read back " + spill_path->path().string()));
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return Status::ok();
}

std::shared_ptr<arrow::RecordBatch> FileWriter::Impl::make_signal_batch(
    const std::shared_ptr<arrow::Buffer>& data) const {
  auto offsets = arrow::Buffer::Wrap(sig_offsets.data(), static_cast<int64_t>(sig_offsets.size()));
  std::shared_ptr<arrow::Array> signal;
  if (options.vbz) {
    signal = wrap(detail::vbz_type(), std::make_shared<arrow::LargeBinaryArray>(sig_pending, offsets, data));
  } else {
    auto values = std::make_shared<arrow::Int16Array>(data->size() / 2, data);
    signal = std::make_shared<arrow::LargeListArray>(
        arrow::large_list(arrow::field("item", arrow::int16())), sig_pending, offsets, values);
  }
  auto ids = std::make_shared<arrow::FixedSizeBinaryArray>(
      arrow::fixed_size_binary(16), sig_pending,
      arrow::Buffer::Wrap(sig_ids.data(), static_cast<int64_t>(sig_ids.size())));
  auto samples = std::make_shared<arrow::UInt32Array>(
      sig_pending, arrow::Buffer::Wrap(sig_samples.data(), static_cast<int64_t>(sig_samples.size())));
  return arrow::RecordBatch::Make(signal_schema, sig_pending, {wrap(detail::uuid_type(), ids), signal, samples});
}

Status FileWriter::Impl::write_signal_in_background(std::shared_ptr<arrow::RecordBatch> batch) {
  ESCPOD_RETURN_IF_ERROR(wait_signal_write());
  auto f = std::make_unique<InFlight>();
  // Moving a vector keeps its data pointer, so the Arrow buffers wrapping them stay valid.
  f->ids = std::move(sig_ids);
  f->samples = std::move(sig_samples);
  f->offsets = std::move(sig_offsets);
  f->bytes = std::move(sig_bytes);
  f->batch = std::move(batch);
  in_flight = std::move(f);
  InFlight* job = in_flight.get();
  signal_arena.emplace(tbb::task_arena::attach());
  job->writer = signal_writer.get();
  signal_arena->execute([this, job] { escpod::detail::spawn_pool_task(signal_tasks, job); });
  // Fresh buffers for the next batch, reusing the capacity of the batch written before.
  sig_ids = std::move(spare.ids);
  sig_samples = std::move(spare.samples);
  sig_offsets = std::move(spare.offsets);
  sig_bytes = std::move(spare.bytes);
  reset_pending_signal();
  return Status::ok();
}

void FileWriter::Impl::release_written_signal() {
  // Reset, keeping capacity; give the memory back to the shared budget; empty the spill file.
  reset_pending_signal();
  if (options.signal_budget && sig_reserved > 0) {
    options.signal_budget->give_back(sig_reserved);
    sig_reserved = 0;
    // Capacity held while a budget is in force would escape it.
    std::vector<uint8_t>().swap(sig_bytes);
  }
  if (spill) {
    spill.reset();
    spill_path.reset();  // removes the file; a new one is made if needed again
    spill_bytes = 0;
  }
}

void FileWriter::Impl::reset_pending_signal() {
  sig_pending = 0;
  sig_ids.clear();
  sig_samples.clear();
  sig_offsets.assign(1, 0);
  sig_bytes.clear();
  sig_pieces.clear();
  sig_has_borrowed = false;
}

Status FileWriter::Impl::wait_signal_write() {
  if (!in_flight) return Status::ok();
  wait_signal_tasks();
  auto done = std::move(in_flight);
  if (!done->status.ok()) return arrow_status(done->status, "signal batch");
  spare.ids = std::move(done->ids);
  spare.samples = std::move(done->samples);
  spare.offsets = std::move(done->offsets);
  spare.bytes = std::move(done->bytes);
  return Status::ok();
}

Status FileWriter::Impl::flush_reads_batch() {
  if (pending_reads.empty()) return Status::ok();
  auto check = [this](const arrow::Status& s) { return arrow_status(s, "reads batch"); };
  const auto n = static_cast<int64_t>(pending_reads.size());
  ReadsColumns columns;
  for (const ReadRecord& r : pending_reads) {
    ESCPOD_RETURN_IF_ERROR(check(columns.append(r, pore_types, run_info_ids)));
  }
  std::vector<std::shared_ptr<arrow::Array>> cols;
  ESCPOD_RETURN_IF_ERROR(check(columns.finish(pore_types, run_info_ids, cols)));
  auto batch = arrow::RecordBatch::Make(reads_schema, n, cols);
  pending_reads.clear();
  return check(reads_writer->WriteRecordBatch(*batch));
}

Status FileWriter::Impl::write_run_info_table() {
  auto schema = detail::run_info_schema(file_identifier, options.software, kWrittenPod5Version);
  auto stream = std::make_shared<EmbeddedStream>(sink.get());
  auto check = [this](const arrow::Status& s) { return arrow_status(s, "run info table"); };
  auto w = arrow::ipc::MakeFileWriter(stream, schema, ipc_options(false), schema->metadata());
  ESCPOD_RETURN_IF_ERROR(check(w.status()));
  auto map_type = std::static_pointer_cast<arrow::MapType>(schema->GetFieldByName("context_tags")->type());
  for (const RunInfo& ri : run_infos) {
    std::vector<std::shared_ptr<arrow::Array>> cols;
    arrow::Status st;
    auto str = [&](const std::string& v) {
      arrow::StringBuilder b;
      st &= b.Append(v);
      std::shared_ptr<arrow::Array> a;
      st &= b.Finish(&a);
      cols.push_back(a);
    };
    auto ts = [&](int64_t v) {
      arrow::TimestampBuilder b(arrow::timestamp(arrow::TimeUnit::MILLI, "UTC"), arrow::default_memory_pool());
      st &= b.Append(v);
      std::shared_ptr<arrow::Array> a;
      st &= b.Finish(&a);
      cols.push_back(a);
    };
    auto i16 = [&](int16_t v) {
      arrow::Int16Builder b;
      st &= b.Append(v);
      std::shared_ptr<arrow::Array> a;
      st &= b.Finish(&a);
      cols.push_back(a);
    };
    auto map = [&](const std::vector<std::pair<std::string, std::string>>& kv) {
      auto keys = std::make_shared<arrow::StringBuilder>();
      auto items = std::make_shared<arrow::StringBuilder>();
      arrow::MapBuilder b(arrow::default_memory_pool(), keys, items, map_type);
      st &= b.Append();
      for (const auto& [k, v] : kv) {
        st &= keys->Append(k);
        st &= items->Append(v);
      }
      std::shared_ptr<arrow::Array> a;
      st &= b.Finish(&a);
      cols.push_back(a);
    };
    str(ri.acquisition_id);
    ts(ri.acquisition_start_time_ms);
    i16(ri.adc_max);
    i16(ri.adc_min);
    map(ri.context_tags);
    str(ri.experiment_name);
    str(ri.flow_cell_id);
    str(ri.flow_cell_product_code);
    str(ri.protocol_name);
    str(ri.protocol_run_id);
    ts(ri.protocol_start_time_ms);
    str(ri.sample_id);
    {
      arrow::UInt16Builder b;
      st &= b.Append(ri.sample_rate);
      std::shared_ptr<arrow::Array> a;
      st &= b.Finish(&a);
      cols.push_back(a);
    }
    str(ri.sequencing_kit);
    str(ri.sequencer_position);
    str(ri.sequencer_position_type);
    str(ri.software);
    str(ri.system_name);
    str(ri.system_type);
    map(ri.tracking_id);
    ESCPOD_RETURN_IF_ERROR(check(st));
    // Official files hold one run info per batch.
    ESCPOD_RETURN_IF_ERROR(check((*w)->WriteRecordBatch(*arrow::RecordBatch::Make(schema, 1, cols))));
  }
  return check((*w)->Close());
}

// Repeats too far apart for add_read's window: found before anything is committed.
Status FileWriter::Impl::check_unique_ids() {
  if (!seen_ids) return Status::ok();
  ESCPOD_ASSIGN_OR_RETURN(std::optional<ReadIdGuard::Duplicate> dup, seen_ids->find_duplicate());
  seen_ids.reset();  // its memory and scratch file go before the tables are written
  if (dup) return duplicate_id(dup->id);
  return Status::ok();
}

Status FileWriter::Impl::finish() {
  auto io = [this](const arrow::Status& s) { return arrow_status(s, "write"); };
  ESCPOD_RETURN_IF_ERROR(check_unique_ids());
  ESCPOD_RETURN_IF_ERROR(flush_signal_batch());
  ESCPOD_RETURN_IF_ERROR(wait_signal_write());
  ESCPOD_RETURN_IF_ERROR(flush_reads_batch());
  ESCPOD_RETURN_IF_ERROR(io(signal_writer->Close()));
  const detail::EmbeddedTable signal{signal_stream->base(), sink->position() - signal_stream->base()};
  ESCPOD_RETURN_IF_ERROR(io(sink->pad_to_8()));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(marker.data(), 16)));

  const int64_t run_info_start = sink->position();
  ESCPOD_RETURN_IF_ERROR(write_run_info_table());
  const detail::EmbeddedTable run_info{run_info_start, sink->position() - run_info_start};
  ESCPOD_RETURN_IF_ERROR(io(sink->pad_to_8()));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(marker.data(), 16)));

  // Append the reads table from its scratch file.
  ESCPOD_RETURN_IF_ERROR(io(reads_writer->Close()));
  ESCPOD_RETURN_IF_ERROR(io(reads_sink->close()));
  const int64_t reads_start = sink->position();
  {
    int fd = ::open(reads_scratch->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(Status::io_error("cannot reopen " + reads_scratch->path().string()));
    auto s = sink->append_file(fd);
    ::close(fd);
    if (!s.ok()) return io(s);
  }
  const detail::EmbeddedTable reads{reads_start, sink->position() - reads_start};
  ESCPOD_RETURN_IF_ERROR(io(sink->pad_to_8()));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(marker.data(), 16)));

  auto footer = detail::build_footer(file_identifier, options.software, kWrittenPod5Version, signal,
                                     run_info, reads);
  const int64_t footer_len = static_cast<int64_t>(footer.size());
  ESCPOD_RETURN_IF_ERROR(io(sink->write(detail::kFooterMagic, 8)));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(footer.data(), footer_len)));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(&footer_len, 8)));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(marker.data(), 16)));
  ESCPOD_RETURN_IF_ERROR(io(sink->write(detail::kSignature, 8)));
  ESCPOD_RETURN_IF_ERROR(io(sink->close()));
  reads_scratch.reset();
  return Status::ok();
}

Status FileWriter::Impl::check_read(const ReadRecord& read) {
  if (closed) return Status::internal(path.string() + ": writer already closed");
  if (!failed.is_ok()) return failed;
  if (end_reason_index(read.end_reason) < 0) {
    return Status::invalid_argument(path.string() + ": read " + read.read_id.to_string() +
                                    " has unknown end reason '" + read.end_reason + "'");
  }
  if (std::find(run_info_ids.begin(), run_info_ids.end(), read.run_info) == run_info_ids.end()) {
    return Status::invalid_argument(path.string() + ": read " + read.read_id.to_string() +
                                    " refers to run info '" + read.run_info +
                                    "' that was not added");
  }
  if (seen_ids) {
    ESCPOD_ASSIGN_OR_RETURN(bool fresh, seen_ids->insert(read.read_id));
    if (!fresh) return duplicate_id(read.read_id);
  }
  if (std::find(pore_types.begin(), pore_types.end(), read.pore_type) == pore_types.end()) {
    if (pore_types.size() >= 32767) {
      return Status::unsupported(path.string() + ": more than 32767 pore types");
    }
    pore_types.push_back(read.pore_type);
  }
  return Status::ok();
}

FileWriter::FileWriter(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
FileWriter::~FileWriter() = default;  // an unclosed writer's staging files are removed

Result<std::unique_ptr<FileWriter>> FileWriter::create(const std::filesystem::path& path,
                                                       const WriterOptions& options) {
  detail::register_extension_types();
  if (options.max_chunk_samples == 0 || options.signal_batch_rows == 0 ||
      options.read_batch_rows == 0) {
    return Status::invalid_argument("writer chunk and batch sizes must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->path = path;
  ESCPOD_RETURN_IF_ERROR(impl->start());
  return std::unique_ptr<FileWriter>(new FileWriter(std::move(impl)));
}

bool FileWriter::is_vbz() const { return m_impl->options.vbz; }
uint64_t FileWriter::n_reads() const { return m_impl->n_reads; }

Status FileWriter::add_run_info(const RunInfo& run_info) {
  auto& d = *m_impl;
  if (std::find(d.run_info_ids.begin(), d.run_info_ids.end(), run_info.acquisition_id) !=
      d.run_info_ids.end()) {
    return Status::ok();
  }
  if (d.run_info_ids.size() >= 32767) return Status::unsupported(d.path.string() + ": more than 32767 run infos");
  d.run_info_ids.push_back(run_info.acquisition_id);
  d.run_infos.push_back(run_info);
  return Status::ok();
}

Status FileWriter::add_read(const ReadRecord& read, std::span<const int16_t> signal) {
  auto& d = *m_impl;
  ESCPOD_RETURN_IF_ERROR(d.check_read(read));
  ReadRecord r = read;
  r.signal_rows.clear();
  r.num_samples = signal.size();
  for (size_t pos = 0; pos < signal.size(); pos += d.options.max_chunk_samples) {
    auto chunk = signal.subspan(pos, std::min<size_t>(d.options.max_chunk_samples, signal.size() - pos));
    r.signal_rows.push_back(d.sig_rows_written);
    if (d.options.vbz) {
      ESCPOD_RETURN_IF_ERROR(d.codec.compress(chunk, d.compressed, d.options.zstd_level));
      ESCPOD_RETURN_IF_ERROR(d.add_chunk(r.read_id, d.compressed.data(), d.compressed.size(),
                                         static_cast<uint32_t>(chunk.size())));
    } else {
      ESCPOD_RETURN_IF_ERROR(d.add_chunk(r.read_id, reinterpret_cast<const uint8_t*>(chunk.data()),
                                         chunk.size() * 2, static_cast<uint32_t>(chunk.size())));
    }
  }
  d.pending_reads.push_back(std::move(r));
  ++d.n_reads;
  if (d.pending_reads.size() == d.options.read_batch_rows) return d.flush_reads_batch();
  return Status::ok();
}

Status FileWriter::add_read_chunks(const ReadRecord& read, std::span<const SignalChunk> chunks,
                                   ChunkBytes how) {
  auto& d = *m_impl;
  ESCPOD_RETURN_IF_ERROR(d.check_read(read));
  ReadRecord r = read;
  r.signal_rows.clear();
  r.num_samples = 0;
  for (const SignalChunk& c : chunks) {
    if (!d.options.vbz && c.bytes.size() != size_t{c.n_samples} * 2) {
      return Status::invalid_argument(d.path.string() + ": read " + r.read_id.to_string() +
                                      ": raw chunk size does not match its sample count");
    }
    r.signal_rows.push_back(d.sig_rows_written);
    r.num_samples += c.n_samples;
    ESCPOD_RETURN_IF_ERROR(d.add_chunk(r.read_id, c.bytes.data(), c.bytes.size(), c.n_samples, how));
  }
  d.pending_reads.push_back(std::move(r));
  ++d.n_reads;
  if (d.pending_reads.size() == d.options.read_batch_rows) return d.flush_reads_batch();
  return Status::ok();
}

Status FileWriter::copy_borrowed_in(const void* lo, const void* hi) {
  auto& d = *m_impl;
  if (!d.failed.is_ok()) return d.failed;
  // The batch being written may be reading from the range: let it finish first.
  ESCPOD_RETURN_IF_ERROR(d.wait_signal_write());
  if (!d.sig_has_borrowed) return Status::ok();
  const auto* a = static_cast<const uint8_t*>(lo);
  const auto* b = static_cast<const uint8_t*>(hi);
  bool still_borrowed = false;
  for (auto& p : d.sig_pieces) {
    if (!p.borrowed) continue;
    if (p.borrowed < b && p.borrowed + p.n > a) {
      const size_t offset = d.sig_bytes.size();
      d.sig_bytes.insert(d.sig_bytes.end(), p.borrowed, p.borrowed + p.n);
      p = {nullptr, offset, p.n};
    } else {
      still_borrowed = true;
    }
  }
  d.sig_has_borrowed = still_borrowed;
  return Status::ok();
}

Status FileWriter::finish() {
  auto& d = *m_impl;
  if (d.closed) return Status::internal(d.path.string() + ": writer finished twice");
  if (!d.failed.is_ok()) return d.failed;
  d.closed = true;
  Status s = d.finish();
  if (!s.is_ok()) {
    d.staged.reset();  // removes the staging file
    d.reads_scratch.reset();
  }
  return s;
}

Status FileWriter::commit() {
  auto& d = *m_impl;
  if (!d.closed || !d.staged) return Status::internal(d.path.string() + ": commit before finish");
  Status s = d.staged->commit(d.options.fsync);
  d.staged.reset();
  return s;
}

Status FileWriter::close() {
  ESCPOD_RETURN_IF_ERROR(finish());
  return commit();
}

}  // namespace escpod::pod5
