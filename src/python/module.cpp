// escpod._core: the C++ half of the Python package (python/escpod). It exposes files, batches,
// signal decoding, a read-id index and the writer as columnar numpy arrays; the pod5-compatible
// classes are written in Python on top of it.
//
// Every call that can take long releases the GIL. Such calls run their work on a helper thread
// while the calling thread polls PyErr_CheckSignals() every 50 ms: Ctrl-C sets the work's
// cancellation flag, waits for it to stop, and raises KeyboardInterrupt.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <tbb/global_control.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "escpod/core/cancel.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pipeline/ops/read_lookup.hpp"
#include "escpod/pipeline/ops/read_signals.hpp"
#include "escpod/pod5/arrow_extensions.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"
#include "escpod/pod5/read_id.hpp"
#include "escpod/pod5/read_index.hpp"
#include "escpod/pod5/records.hpp"
#include "escpod/pod5/vbz.hpp"
#include "escpod/signal/calibration.hpp"
#include "demux_bindings.hpp"
#include "live_bindings.hpp"
#include "py_support.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace escpod::python {

using pipeline::ReadLocation;
using pipeline::ReadLocator;
using pipeline::ReadSignalList;
using pipeline::SampleKind;
using pipeline::SignalChunkStream;
using pod5::FileReader;
using pod5::ReadBatch;
using pod5::ReadId;

[[noreturn]] void raise_status(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kNotFound: type = PyExc_FileNotFoundError; break;
    case StatusCode::kAlreadyExists: type = PyExc_FileExistsError; break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUsage: type = PyExc_ValueError; break;
    case StatusCode::kCancelled: type = PyExc_KeyboardInterrupt; break;
    default: break;
  }
  PyErr_SetString(type, s.message().c_str());
  throw nb::python_error();
}

Status run_interruptible(const std::function<Status(const std::atomic<bool>&)>& work) {
  std::atomic<bool> cancel{false};
  std::future<Status> done;
  bool interrupted = false;
  {
    nb::gil_scoped_release release;
    done = std::async(std::launch::async, [&] { return work(cancel); });
    for (;;) {
      if (done.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready) break;
      {
        nb::gil_scoped_acquire acquire;
        // A handler that raised (KeyboardInterrupt for Ctrl-C) leaves its exception set.
        interrupted = PyErr_CheckSignals() != 0;
      }
      if (interrupted) {
        cancel = true;
        set_cancel_requested(true);  // library loops polling interrupted() stop too
        done.wait();
        set_cancel_requested(false);
        break;
      }
    }
  }
  Status s = done.get();
  if (interrupted) throw nb::python_error();  // the handler's exception, still set
  return s;
}

int resolve_threads(int n_threads) {
  if (n_threads > 0) return n_threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The pool a call asked for n_threads (0: every core) runs on.
Executor& executor_for(int n_threads) { return Executor::for_threads(resolve_threads(n_threads)); }

SampleKind kind_of(bool pa) { return pa ? SampleKind::kPicoamps : SampleKind::kAdc; }

// fn(i) -> Status for every i in [0, n) on the pool of n_threads, with the GIL released and
// Ctrl-C polled (run_interruptible): items not yet started are skipped once one fails or Ctrl-C
// is pressed. Raises the first error (KeyboardInterrupt for Ctrl-C).
template <class Fn>
void parallel_for_interruptible(int n_threads, size_t n, Fn&& fn) {
  Status s = run_interruptible([&](const std::atomic<bool>& cancel) -> Status {
    return parallel_for(Executor::for_threads(resolve_threads(n_threads)), n, [&](size_t i) -> Status {
      if (cancel.load(std::memory_order_relaxed)) return Status::cancelled("interrupted");
      return fn(i);
    });
  });
  if (!s.is_ok()) raise_status(s);
}

namespace {

// A heap vector handed to numpy without copying: the capsule frees it with the array.
template <typename T>
nb::object vector_to_numpy(std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner).cast();
}

// An uninitialised heap array (no zero fill: every element is written before numpy sees it).
template <typename T>
struct RawBuffer {
  std::unique_ptr<T[]> data;
  size_t size = 0;
  explicit RawBuffer(size_t n) : data(new T[n]), size(n) {}
  std::span<T> span() { return {data.get(), size}; }
};

template <typename T>
nb::object raw_to_numpy(RawBuffer<T>&& b) {
  T* p = b.data.release();
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(p, {b.size}, owner).cast();
}

nb::object ids_to_numpy(std::vector<ReadId>&& ids) {
  static_assert(sizeof(ReadId) == 16);
  auto* heap = new std::vector<ReadId>(std::move(ids));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<ReadId>*>(p); });
  auto* data = reinterpret_cast<uint8_t*>(heap->data());
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<2>>(data, {heap->size(), size_t{16}}, owner).cast();
}

using IdArray = nb::ndarray<const uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using U64Array = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using I64Array = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig>;

std::vector<ReadId> ids_from_numpy(const IdArray& a) {
  if (a.shape(1) != 16) throw nb::value_error("read ids must be an (n, 16) uint8 array");
  std::vector<ReadId> out(a.shape(0));
  if (!out.empty()) std::memcpy(out.data(), a.data(), out.size() * 16);
  return out;
}

nb::dict run_info_dict(const pod5::RunInfo& r) {
  nb::dict d;
  auto pairs = [](const std::vector<std::pair<std::string, std::string>>& v) {
    nb::list l;
    for (const auto& [k, val] : v) l.append(nb::make_tuple(k, val));
    return l;
  };
  d["acquisition_id"] = r.acquisition_id;
  d["acquisition_start_time"] = r.acquisition_start_time_ms;
  d["adc_max"] = r.adc_max;
  d["adc_min"] = r.adc_min;
  d["context_tags"] = pairs(r.context_tags);
  d["experiment_name"] = r.experiment_name;
  d["flow_cell_id"] = r.flow_cell_id;
  d["flow_cell_product_code"] = r.flow_cell_product_code;
  d["protocol_name"] = r.protocol_name;
  d["protocol_run_id"] = r.protocol_run_id;
  d["protocol_start_time"] = r.protocol_start_time_ms;
  d["sample_id"] = r.sample_id;
  d["sample_rate"] = r.sample_rate;
  d["sequencing_kit"] = r.sequencing_kit;
  d["sequencer_position"] = r.sequencer_position;
  d["sequencer_position_type"] = r.sequencer_position_type;
  d["software"] = r.software;
  d["system_name"] = r.system_name;
  d["system_type"] = r.system_type;
  d["tracking_id"] = pairs(r.tracking_id);
  return d;
}

nb::dict batch_dict(ReadBatch&& b) {
  nb::dict d;
  d["read_id"] = ids_to_numpy(std::move(b.read_id));
  d["signal_offsets"] = vector_to_numpy(std::move(b.signal_offsets));
  d["signal_rows"] = vector_to_numpy(std::move(b.signal_rows));
  d["read_number"] = vector_to_numpy(std::move(b.read_number));
  d["start_sample"] = vector_to_numpy(std::move(b.start_sample));
  d["median_before"] = vector_to_numpy(std::move(b.median_before));
  d["num_minknow_events"] = vector_to_numpy(std::move(b.num_minknow_events));
  d["tracked_scaling_scale"] = vector_to_numpy(std::move(b.tracked_scaling_scale));
  d["tracked_scaling_shift"] = vector_to_numpy(std::move(b.tracked_scaling_shift));
  d["predicted_scaling_scale"] = vector_to_numpy(std::move(b.predicted_scaling_scale));
  d["predicted_scaling_shift"] = vector_to_numpy(std::move(b.predicted_scaling_shift));
  d["num_reads_since_mux_change"] = vector_to_numpy(std::move(b.num_reads_since_mux_change));
  d["time_since_mux_change"] = vector_to_numpy(std::move(b.time_since_mux_change));
  d["num_samples"] = vector_to_numpy(std::move(b.num_samples));
  d["channel"] = vector_to_numpy(std::move(b.channel));
  d["well"] = vector_to_numpy(std::move(b.well));
  d["pore_type"] = vector_to_numpy(std::move(b.pore_type_idx));
  d["calibration_offset"] = vector_to_numpy(std::move(b.calibration_offset));
  d["calibration_scale"] = vector_to_numpy(std::move(b.calibration_scale));
  d["end_reason"] = vector_to_numpy(std::move(b.end_reason_idx));
  d["end_reason_forced"] = vector_to_numpy(std::move(b.end_reason_forced));
  d["run_info"] = vector_to_numpy(std::move(b.run_info_idx));
  d["open_pore_level"] = vector_to_numpy(std::move(b.open_pore_level));
  d["expected_open_pore_level"] = vector_to_numpy(std::move(b.expected_open_pore_level));
  d["selected_read_level"] = vector_to_numpy(std::move(b.selected_read_level));
  return d;
}

// An open POD5 file. close() releases the mapping at once (Python's GC may run much later).
// One read's first n samples into a fresh numpy array (T: int16 ADC counts or float32
// picoamps), decoded with the GIL released with this thread's scratch; raises the error.
template <typename T>
nb::object decode_read(const FileReader& r, const U64Array& rows, uint64_t n, signal::Calibration c) {
  thread_local pipeline::DecodeScratch scratch;
  constexpr SampleKind kind = std::is_same_v<T, float> ? SampleKind::kPicoamps : SampleKind::kAdc;
  RawBuffer<T> out(n);
  Status s;
  {
    nb::gil_scoped_release release;
    s = pipeline::decode_read_samples(r, {rows.data(), rows.shape(0)}, c, kind, n,
                                      reinterpret_cast<std::byte*>(out.data.get()), scratch);
  }
  if (!s.is_ok()) raise_status(s);
  return raw_to_numpy(std::move(out));
}

// How a File is opened: every reads batch validated up front (a standalone Reader, as pod5), or
// for random access (a DatasetReader: pipeline::open_for_random_access, with the layout a fresh
// read-id index stores for the file).
Result<std::unique_ptr<FileReader>> open_file(const std::string& path, bool validate_all_batches,
                                              const pod5::ReadIndex* index) {
  if (!validate_all_batches) return pipeline::open_for_random_access(path, index);
  pod5::OpenOptions options;
  options.validate_all_batches = true;
  return FileReader::open(path, options);
}

class File {
 public:
  explicit File(const std::string& path, bool validate_all_batches = true) {
    Result<std::unique_ptr<FileReader>> r = [&] {
      nb::gil_scoped_release release;
      const std::unique_ptr<pod5::ReadIndex> index =
          validate_all_batches ? nullptr : pipeline::open_usable_index(pod5::ReadIndex::find_root(path));
      return open_file(path, validate_all_batches, index.get());
    }();
    if (!r.is_ok()) raise_status(r.status());
    m_reader = std::shared_ptr<FileReader>(std::move(r).value());
  }
  explicit File(std::unique_ptr<FileReader> reader) : m_reader(std::move(reader)) {}

  const FileReader& reader() const {
    if (!m_reader) throw nb::value_error("the file has been closed");
    return *m_reader;
  }
  std::shared_ptr<FileReader> shared() const {
    reader();
    return m_reader;
  }
  void close() { m_reader.reset(); }
  bool closed() const { return !m_reader; }

  nb::dict info() const {
    const pod5::FileInfo& i = reader().info();
    nb::dict d;
    d["path"] = i.path.string();
    d["file_size"] = i.file_size;
    d["file_identifier"] = i.file_identifier;
    d["software"] = i.software;
    d["pod5_version"] = i.pod5_version;
    d["read_table_version"] = static_cast<int>(i.read_table_version);
    d["is_vbz"] = i.is_vbz;
    d["n_reads"] = i.n_reads;
    d["n_read_batches"] = i.n_read_batches;
    auto span = [](const pod5::FileInfo::TableSpan& t) { return nb::make_tuple(t.offset, t.length); };
    d["reads_table"] = span(i.reads_table);
    d["run_info_table"] = span(i.run_info_table);
    d["signal_table"] = span(i.signal_table);
    nb::list warnings;
    for (const auto& w : i.warnings) warnings.append(w);
    d["warnings"] = warnings;
    return d;
  }

  nb::list run_infos() const {
    nb::list l;
    for (const auto& r : reader().run_infos()) l.append(run_info_dict(r));
    return l;
  }

  // Rows (batches[k], rows[k]) of the reads table in the order given, as one batch dict (a
  // selection, as batch() gives a whole batch), each row read alone on n_threads: worth it where
  // rows_alone (a random-access open reads a row's values straight from the file; otherwise
  // every row decodes its whole batch). IndexError for a batch or row out of range.
  nb::dict rows(const I64Array& batches, const I64Array& rows, int n_threads) const {
    const FileReader& r = reader();
    if (batches.shape(0) != rows.shape(0)) throw nb::value_error("batches and rows differ in length");
    const size_t n = rows.shape(0);
    for (size_t k = 0; k < n; ++k) {
      const int64_t b = batches.data()[k], row = rows.data()[k];
      if (b < 0 || static_cast<size_t>(b) >= r.n_read_batches()) throw nb::index_error("read batch index out of range");
      if (row < 0 || static_cast<size_t>(row) >= r.batch_rows(static_cast<size_t>(b))) throw nb::index_error("row index out of range");
    }
    std::vector<ReadBatch> one(n);
    parallel_for_interruptible(n_threads, n, [&](size_t k) -> Status {
      ESCPOD_ASSIGN_OR_RETURN(one[k], r.read_batch_rows(static_cast<size_t>(batches.data()[k]),
                                                        static_cast<size_t>(rows.data()[k]), 1));
      return Status::ok();
    });
    ReadBatch out;
    out.signal_offsets = {0};
    for (const ReadBatch& b : one) out.append_row(b, 0);
    return batch_dict(std::move(out));
  }

  nb::dict batch(size_t idx) const {
    const FileReader& r = reader();
    if (idx >= r.n_read_batches()) throw nb::index_error("read batch index out of range");
    Result<ReadBatch> b = [&] {
      nb::gil_scoped_release release;
      return r.read_batch(idx);
    }();
    if (!b.is_ok()) raise_status(b.status());
    return batch_dict(std::move(b).value());
  }

  // Samples of one read (ADC counts) given its signal rows and sample count.
  nb::object signal(const U64Array& rows, uint64_t n_samples) const {
    return decode_read<int16_t>(reader(), rows, n_samples, {});
  }

  // Samples of one read in picoamps (float32), decoded and calibrated in one pass.
  nb::object signal_pa(const U64Array& rows, uint64_t n_samples, float offset, float scale) const {
    return decode_read<float>(reader(), rows, n_samples, {offset, scale});
  }

  // One stored signal chunk (a signal-table row) as (bytes as stored: VBZ or raw int16, sample
  // count, owner read id (16 bytes)); `row` is the global signal-table row.
  nb::tuple chunk(uint64_t row) const {
    Result<pod5::SignalChunk> c = reader().signal_chunk(row);
    if (!c.is_ok()) raise_status(c.status());
    return nb::make_tuple(nb::bytes(c->bytes.data(), c->bytes.size()), c->n_samples,
                          nb::bytes(c->read_id.bytes.data(), 16));
  }

  // (signal batch, row within it) of global signal-table rows, from the signal table's batch
  // row counts (the layout).
  nb::tuple signal_row_positions(const U64Array& rows) const {
    Result<pod5::BatchLayout> layout = reader().batch_layout();
    if (!layout.is_ok()) raise_status(layout.status());
    std::vector<uint64_t> first{0};
    for (uint32_t n : layout->signal_batch_rows) first.push_back(first.back() + n);
    std::vector<int64_t> batch(rows.shape(0)), row(rows.shape(0));
    for (size_t i = 0; i < rows.shape(0); ++i) {
      const uint64_t g = rows.data()[i];
      const auto it = std::upper_bound(first.begin(), first.end(), g);
      if (it == first.end()) throw nb::index_error("signal row out of range");
      batch[i] = it - first.begin() - 1;
      row[i] = static_cast<int64_t>(g - first[static_cast<size_t>(batch[i])]);
    }
    return nb::make_tuple(vector_to_numpy(std::move(batch)), vector_to_numpy(std::move(row)));
  }

  uint64_t byte_count(const U64Array& rows) const {
    const FileReader& r = reader();
    uint64_t total = 0;
    for (size_t i = 0; i < rows.shape(0); ++i) {
      Result<pod5::SignalChunk> c = r.signal_chunk(rows.data()[i]);
      if (!c.is_ok()) raise_status(c.status());
      total += c->bytes.size();
    }
    return total;
  }

 private:
  std::shared_ptr<FileReader> m_reader;
};

// Every read of a list decoded into one fresh buffer on n_threads (GIL released, Ctrl-C polled):
// (buffer, offsets), read i at buffer[offsets[i]:offsets[i + 1]].
nb::tuple decode_all(const ReadSignalList& reads, bool pa, int n_threads) {
  const uint64_t total = reads.sample_offsets().back();
  RawBuffer<int16_t> adc(pa ? 0 : total);
  RawBuffer<float> picoamps(pa ? total : 0);
  void* out = pa ? static_cast<void*>(picoamps.data.get()) : static_cast<void*>(adc.data.get());
  Status s = run_interruptible([&](const std::atomic<bool>&) {
    return pipeline::decode_reads(reads, 0, reads.size(), kind_of(pa), out, executor_for(n_threads));
  });
  if (!s.is_ok()) raise_status(s);
  nb::object buf = pa ? raw_to_numpy(std::move(picoamps)) : raw_to_numpy(std::move(adc));
  return nb::make_tuple(buf, vector_to_numpy(std::vector<uint64_t>(reads.sample_offsets())));
}

// A numpy array of the first n elements of a chunk's buffer, which goes back to its stream's
// pool when numpy frees the array (and every view of it).
template <typename T>
nb::object pooled_to_numpy(pipeline::SignalBufferPool::Buffer&& buffer, size_t n) {
  auto* owner = new pipeline::SignalBufferPool::Buffer(std::move(buffer));
  T* data = reinterpret_cast<T*>(owner->data());
  nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<pipeline::SignalBufferPool::Buffer*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, {n}, cap).cast();
}

// The library's chunk stream (pipeline::SignalChunkStream) for Python: next() gives (buffer,
// offsets) of the next chunk, read k of it at buffer[offsets[k]:offsets[k+1]], or None after the
// last. Decoding runs ahead while Python uses a chunk; next() waits with the GIL released.
class SignalStream {
 public:
  SignalStream(ReadSignalList&& reads, bool pa, int n_threads, uint64_t chunk_samples)
      : m_stream(std::make_unique<SignalChunkStream>(std::make_shared<const ReadSignalList>(std::move(reads)),
                                                     kind_of(pa), resolve_threads(n_threads), chunk_samples)),
        m_pa(pa) {}

  nb::object next() {
    Result<std::optional<pipeline::SignalChunk>> c = Status::ok();
    {
      nb::gil_scoped_release release;
      c = m_stream->next();
    }
    if (!c.is_ok()) raise_status(c.status());
    if (!c->has_value()) return nb::none();
    pipeline::SignalChunk& chunk = **c;
    const auto& off = m_stream->reads().sample_offsets();
    const uint64_t first = off[chunk.first_read];
    std::vector<uint64_t> offsets(off.begin() + static_cast<ptrdiff_t>(chunk.first_read),
                                  off.begin() + static_cast<ptrdiff_t>(chunk.end_read) + 1);
    for (uint64_t& o : offsets) o -= first;
    const uint64_t n = offsets.back();
    nb::object array = m_pa ? pooled_to_numpy<float>(std::move(chunk.buffer), n)
                            : pooled_to_numpy<int16_t>(std::move(chunk.buffer), n);
    return nb::make_tuple(array, vector_to_numpy(std::move(offsets)));
  }

  size_t n_reads() const { return m_stream->n_reads(); }

 private:
  std::unique_ptr<SignalChunkStream> m_stream;
  bool m_pa;
};

// The library's read-id lookup over open files (pipeline::ReadLocator) for Python. Called with
// the GIL held; the parallel steps run with it released.
class Index {
 public:
  Index(std::vector<File*> files, int n_threads, bool use_read_index) {
    std::vector<std::shared_ptr<const FileReader>> readers;
    for (File* f : files) readers.push_back(f->shared());
    Status s = run_interruptible([&](const std::atomic<bool>&) -> Status {
      ESCPOD_ASSIGN_OR_RETURN(m_locator, ReadLocator::build(std::move(readers), use_read_index, executor_for(n_threads)));
      return Status::ok();
    });
    if (!s.is_ok()) raise_status(s);
  }

  size_t n_reads() const { return m_locator->n_reads(); }
  size_t n_duplicates() const { return m_locator->n_duplicates(); }
  bool complete() const { return m_locator->complete(); }
  size_t n_indexed_files() const { return m_locator->n_indexed_files(); }

  // (file, batch, row) arrays, -1 where an id is absent; the first file (in the order given)
  // holding an id wins.
  nb::tuple lookup(const IdArray& ids) {
    std::vector<ReadId> v = ids_from_numpy(ids);
    std::vector<int64_t> file(v.size(), -1), batch(v.size(), -1), row(v.size(), -1);
    for (size_t i = 0; i < v.size(); ++i) {
      const std::optional<ReadLocation> loc = locate(v[i]);
      if (!loc) continue;
      file[i] = loc->file;
      batch[i] = loc->batch;
      row[i] = loc->row;
    }
    return nb::make_tuple(vector_to_numpy(std::move(file)), vector_to_numpy(std::move(batch)),
                          vector_to_numpy(std::move(row)));
  }

  // One id given as text: (file, batch, row), or None when absent. ValueError when the text is
  // not a read id. (The per-read path of DatasetReader.get_read: no numpy arrays.)
  nb::object find(const std::string& text) {
    Result<ReadId> id = ReadId::parse(text);
    if (!id.is_ok()) raise_status(id.status());
    const std::optional<ReadLocation> loc = locate(*id);
    if (!loc) return nb::none();
    return nb::make_tuple(loc->file, loc->batch, loc->row);
  }

  // Signals of the reads `ids` (all must be present): (buffer, offsets) as decode_all.
  nb::tuple signals(const IdArray& ids, bool pa, int n_threads) { return decode_all(list_of(ids, n_threads), pa, n_threads); }

  // The same reads as a stream of chunks (SignalStream): memory bounded by a few chunks.
  SignalStream signal_stream(const IdArray& ids, bool pa, int n_threads, uint64_t chunk_samples) {
    return SignalStream(list_of(ids, n_threads), pa, n_threads, chunk_samples);
  }

 private:
  std::optional<ReadLocation> locate(const ReadId& id) {
    Result<std::optional<ReadLocation>> loc = m_locator->locate(id);
    if (!loc.is_ok()) raise_status(loc.status());
    return *loc;
  }

  // The reads `ids` in the order given, located and their rows read on n_threads; KeyError naming
  // the first absent id.
  ReadSignalList list_of(const IdArray& ids, int n_threads) {
    const std::vector<ReadId> v = ids_from_numpy(ids);
    std::vector<std::optional<ReadLocation>> found;
    Status s = run_interruptible([&](const std::atomic<bool>&) -> Status {
      ESCPOD_ASSIGN_OR_RETURN(found, m_locator->locate_all(v, executor_for(n_threads)));
      return Status::ok();
    });
    if (!s.is_ok()) raise_status(s);
    std::vector<ReadLocation> where(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!found[i]) {
        PyErr_SetString(PyExc_KeyError, ("read " + v[i].to_string() + " is in none of the files").c_str());
        throw nb::python_error();
      }
      where[i] = *found[i];
    }
    std::optional<ReadSignalList> list;
    s = run_interruptible([&](const std::atomic<bool>&) -> Status {
      ESCPOD_ASSIGN_OR_RETURN(list, m_locator->signals_at(v, where, executor_for(n_threads)));
      return Status::ok();
    });
    if (!s.is_ok()) raise_status(s);
    return std::move(*list);
  }

  std::unique_ptr<ReadLocator> m_locator;
};

// The reads of one file given batch and row arrays (IndexError for one out of range).
ReadSignalList file_list(File& f, const I64Array& batches, const I64Array& rows) {
  const FileReader& r = f.reader();
  if (batches.shape(0) != rows.shape(0)) throw nb::value_error("batches and rows differ in length");
  ReadSignalList list({f.shared()});
  std::vector<std::unique_ptr<ReadBatch>> cache(r.n_read_batches());
  for (size_t i = 0; i < rows.shape(0); ++i) {
    const int64_t bi = batches.data()[i], ri = rows.data()[i];
    if (bi < 0 || static_cast<size_t>(bi) >= cache.size()) throw nb::index_error("batch index out of range");
    if (!cache[bi]) {
      Result<ReadBatch> b = r.read_batch(static_cast<size_t>(bi));
      if (!b.is_ok()) raise_status(b.status());
      cache[bi] = std::make_unique<ReadBatch>(std::move(b).value());
    }
    const ReadBatch& b = *cache[bi];
    if (ri < 0 || static_cast<size_t>(ri) >= b.size()) throw nb::index_error("row index out of range");
    list.add_row(0, b, static_cast<size_t>(ri));
  }
  return list;
}

// Every read of a file in file order; their ids into `ids` when given.
ReadSignalList all_list(File& f, std::vector<ReadId>* ids) {
  const FileReader& r = f.reader();
  ReadSignalList list({f.shared()});
  for (size_t bi = 0; bi < r.n_read_batches(); ++bi) {
    Result<ReadBatch> b = r.read_batch(bi);
    if (!b.is_ok()) raise_status(b.status());
    for (size_t i = 0; i < b->size(); ++i) {
      list.add_row(0, *b, i);
      if (ids) ids->push_back(b->read_id[i]);
    }
  }
  return list;
}

// Opens `paths` for random access (open_file) on n_threads: a list of Files in the order given.
// Raises the first failing path's error (each names its file).
nb::list open_files(const std::vector<std::string>& paths, int n_threads) {
  // Each folder's index opened once, for all its files.
  std::map<std::filesystem::path, std::unique_ptr<pod5::ReadIndex>> index_of_root;
  std::vector<const pod5::ReadIndex*> index(paths.size(), nullptr);
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::filesystem::path root = pod5::ReadIndex::find_root(paths[i]);
    auto it = index_of_root.find(root);
    if (it == index_of_root.end()) it = index_of_root.emplace(root, pipeline::open_usable_index(root)).first;
    index[i] = it->second.get();
  }
  std::vector<std::unique_ptr<FileReader>> readers(paths.size());
  parallel_for_interruptible(n_threads, paths.size(), [&](size_t i) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(readers[i], open_file(paths[i], false, index[i]));
    return Status::ok();
  });
  nb::list out;
  for (auto& r : readers) out.append(File(std::move(r)));
  return out;
}

// Signals of reads of one file given batch and row arrays: (buffer, offsets).
nb::tuple file_signals(File& f, const I64Array& batches, const I64Array& rows, bool pa, int n_threads) {
  return decode_all(file_list(f, batches, rows), pa, n_threads);
}

// Every read of a file: (buffer, offsets, read ids) in file order.
nb::tuple all_signals(File& f, bool pa, int n_threads) {
  std::vector<ReadId> ids;
  nb::tuple t = decode_all(all_list(f, &ids), pa, n_threads);
  return nb::make_tuple(t[0], t[1], ids_to_numpy(std::move(ids)));
}

std::vector<std::pair<std::string, std::string>> pairs_from(const nb::handle& h) {
  std::vector<std::pair<std::string, std::string>> out;
  for (nb::handle item : h) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    out.emplace_back(nb::cast<std::string>(t[0]), nb::cast<std::string>(t[1]));
  }
  return out;
}

class Writer {
 public:
  Writer(const std::string& path, const std::string& software, bool vbz) {
    pod5::WriterOptions o;
    o.software = software;
    o.vbz = vbz;
    auto w = pod5::FileWriter::create(path, o);
    if (!w.is_ok()) raise_status(w.status());
    m_writer = std::move(w).value();
  }

  pod5::FileWriter& writer() {
    if (!m_writer) throw nb::value_error("the writer has been closed");
    return *m_writer;
  }

  void add_run_info(const nb::dict& d) {
    pod5::RunInfo r;
    r.acquisition_id = nb::cast<std::string>(d["acquisition_id"]);
    r.acquisition_start_time_ms = nb::cast<int64_t>(d["acquisition_start_time"]);
    r.adc_max = nb::cast<int16_t>(d["adc_max"]);
    r.adc_min = nb::cast<int16_t>(d["adc_min"]);
    r.context_tags = pairs_from(d["context_tags"]);
    r.experiment_name = nb::cast<std::string>(d["experiment_name"]);
    r.flow_cell_id = nb::cast<std::string>(d["flow_cell_id"]);
    r.flow_cell_product_code = nb::cast<std::string>(d["flow_cell_product_code"]);
    r.protocol_name = nb::cast<std::string>(d["protocol_name"]);
    r.protocol_run_id = nb::cast<std::string>(d["protocol_run_id"]);
    r.protocol_start_time_ms = nb::cast<int64_t>(d["protocol_start_time"]);
    r.sample_id = nb::cast<std::string>(d["sample_id"]);
    r.sample_rate = nb::cast<uint16_t>(d["sample_rate"]);
    r.sequencing_kit = nb::cast<std::string>(d["sequencing_kit"]);
    r.sequencer_position = nb::cast<std::string>(d["sequencer_position"]);
    r.sequencer_position_type = nb::cast<std::string>(d["sequencer_position_type"]);
    r.software = nb::cast<std::string>(d["software"]);
    r.system_name = nb::cast<std::string>(d["system_name"]);
    r.system_type = nb::cast<std::string>(d["system_type"]);
    r.tracking_id = pairs_from(d["tracking_id"]);
    Status s = writer().add_run_info(r);
    if (!s.is_ok()) raise_status(s);
  }

  // fields: the ReadRecord fields in declaration order up to selected_read_level (see
  // python/escpod/writer.py); signal: int16 ADC samples.
  void add_read(nb::bytes read_id, const nb::tuple& f,
                const nb::ndarray<const int16_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& signal) {
    const pod5::ReadRecord r = record_from(read_id, f);
    pod5::FileWriter& w = writer();
    Status s;
    {
      nb::gil_scoped_release release;
      s = w.add_read(r, std::span<const int16_t>(signal.data(), signal.shape(0)));
    }
    if (!s.is_ok()) raise_status(s);
  }

  // A read whose signal is already VBZ-compressed (pod5's CompressedRead): `chunks` are the
  // VBZ cells (uint8 arrays), `chunk_samples` their sample counts; stored as they are (copied).
  // A writer of uncompressed signal refuses them (the caller decompresses first).
  void add_read_chunks(nb::bytes read_id, const nb::tuple& f, const nb::list& chunks,
                       const std::vector<uint32_t>& chunk_samples) {
    const pod5::ReadRecord r = record_from(read_id, f);
    if (chunks.size() != chunk_samples.size()) throw nb::value_error("signal_chunks and signal_chunk_lengths differ in length");
    pod5::FileWriter& w = writer();
    if (!w.is_vbz()) throw nb::value_error("compressed chunks need a VBZ writer");
    std::vector<pod5::SignalChunk> stored(chunks.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      auto bytes = nb::cast<nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(chunks[i]);
      stored[i].bytes = {bytes.data(), bytes.shape(0)};
      stored[i].n_samples = chunk_samples[i];
      stored[i].read_id = r.read_id;
    }
    Status s;
    {
      nb::gil_scoped_release release;
      s = check_cells(stored);
      if (s.is_ok()) s = w.add_read_chunks(r, stored, pod5::ChunkBytes::kCopy);
    }
    if (!s.is_ok()) raise_status(s);
  }

  void close() {
    if (!m_writer) return;
    pod5::FileWriter& w = *m_writer;
    Status s;
    {
      nb::gil_scoped_release release;
      s = w.close();
    }
    m_writer.reset();
    if (!s.is_ok()) raise_status(s);
  }

  // Drops the staging file: nothing appears at the destination.
  void abort() { m_writer.reset(); }
  bool closed() const { return !m_writer; }

 private:
  // Every cell decodes to exactly its stated sample count (a wrong count or a damaged cell
  // would be stored as is and fail only when read back): kInvalidArgument naming the chunk.
  static Status check_cells(std::span<const pod5::SignalChunk> cells) {
    thread_local pod5::VbzCodec codec;
    thread_local std::vector<int16_t> scratch;  // reused across reads
    for (size_t i = 0; i < cells.size(); ++i) {
      scratch.resize(cells[i].n_samples);
      Status s = codec.decompress(cells[i].bytes, scratch);
      if (!s.is_ok()) {
        return Status::invalid_argument("signal chunk " + std::to_string(i) + " (" + std::to_string(cells[i].n_samples) +
                                        " samples stated): " + s.message());
      }
    }
    return Status::ok();
  }

  static pod5::ReadRecord record_from(const nb::bytes& read_id, const nb::tuple& f) {
    if (read_id.size() != 16) throw nb::value_error("read_id must be 16 bytes");
    pod5::ReadRecord r;
    std::memcpy(r.read_id.bytes.data(), read_id.c_str(), 16);
    size_t k = 0;
    r.read_number = nb::cast<uint32_t>(f[k++]);
    r.start_sample = nb::cast<uint64_t>(f[k++]);
    r.median_before = nb::cast<float>(f[k++]);
    r.num_minknow_events = nb::cast<uint64_t>(f[k++]);
    r.tracked_scaling_scale = nb::cast<float>(f[k++]);
    r.tracked_scaling_shift = nb::cast<float>(f[k++]);
    r.predicted_scaling_scale = nb::cast<float>(f[k++]);
    r.predicted_scaling_shift = nb::cast<float>(f[k++]);
    r.num_reads_since_mux_change = nb::cast<uint32_t>(f[k++]);
    r.time_since_mux_change = nb::cast<float>(f[k++]);
    r.channel = nb::cast<uint32_t>(f[k++]);
    r.well = nb::cast<uint8_t>(f[k++]);
    r.pore_type = nb::cast<std::string>(f[k++]);
    r.calibration_offset = nb::cast<float>(f[k++]);
    r.calibration_scale = nb::cast<float>(f[k++]);
    r.end_reason = nb::cast<std::string>(f[k++]);
    r.end_reason_forced = nb::cast<bool>(f[k++]);
    r.run_info = nb::cast<std::string>(f[k++]);
    r.open_pore_level = nb::cast<float>(f[k++]);
    r.expected_open_pore_level = nb::cast<float>(f[k++]);
    r.selected_read_level = nb::cast<float>(f[k++]);
    return r;
  }

  std::unique_ptr<pod5::FileWriter> m_writer;
};

using I16Array = nb::ndarray<const int16_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using U8Array = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// One VBZ cell (zstd level 1, as the official writer) of `samples`.
nb::object vbz_compress(const I16Array& samples) {
  std::vector<uint8_t> out;
  Status s;
  {
    nb::gil_scoped_release release;
    thread_local pod5::VbzCodec codec;
    s = codec.compress({samples.data(), samples.shape(0)}, out);
  }
  if (!s.is_ok()) raise_status(s);
  return vector_to_numpy(std::move(out));
}

// The n_samples samples of one VBZ cell; ValueError when the cell does not hold exactly that.
nb::object vbz_decompress(const U8Array& cell, uint64_t n_samples) {
  RawBuffer<int16_t> out(n_samples);
  Status s;
  {
    nb::gil_scoped_release release;
    thread_local pod5::VbzCodec codec;
    s = codec.decompress({cell.data(), cell.shape(0)}, out.span());
  }
  if (!s.is_ok()) {
    PyErr_SetString(PyExc_ValueError, s.message().c_str());
    throw nb::python_error();
  }
  return raw_to_numpy(std::move(out));
}

nb::object pack_ids(const nb::list& texts, bool invalid_ok) {
  std::vector<ReadId> out;
  out.reserve(texts.size());
  for (nb::handle h : texts) {
    std::string t = nb::cast<std::string>(nb::str(h));
    Result<ReadId> id = ReadId::parse(t);
    if (!id.is_ok()) {
      if (invalid_ok) continue;
      raise_status(id.status());
    }
    out.push_back(*id);
  }
  return ids_to_numpy(std::move(out));
}

nb::list format_ids(const IdArray& ids) {
  std::vector<ReadId> v = ids_from_numpy(ids);
  nb::list out;
  char buf[36];
  for (const auto& id : v) {
    id.format_to(buf);
    out.append(nb::str(buf, 36));
  }
  return out;
}

}  // namespace
}  // namespace escpod::python

NB_MODULE(_core, m) {
  using namespace escpod::python;
  m.doc() = "escpod C++ core (files, signal decoding, read-id index, writer, demultiplexer)";
  // The one version: CMake's project(VERSION), also escpod --version's and the wheel's.
  m.attr("__version__") = ESCPOD_VERSION;
  // We share libarrow with pyarrow: registering POD5's extension types would change what
  // pyarrow, and the official pod5 package, read from every POD5 in this process.
  escpod::pod5::set_register_arrow_extension_types(false);

  nb::class_<File>(m, "File")
      .def(nb::init<const std::string&, bool>(), "path"_a, "validate_all_batches"_a = true)
      .def("info", &File::info)
      .def("run_infos", &File::run_infos)
      .def("pore_types", [](const File& f) { return f.reader().pore_types(); })
      .def("end_reasons", [](const File& f) { return f.reader().end_reasons(); })
      .def("run_info_ids", [](const File& f) { return f.reader().run_info_ids(); })
      .def("n_read_batches", [](const File& f) { return f.reader().n_read_batches(); })
      .def("batch", &File::batch, "idx"_a)
      .def("rows", &File::rows, "batches"_a, "rows"_a, "n_threads"_a = 0)
      .def_prop_ro("rows_alone", [](const File& f) { return f.reader().reads_rows_from_file(); })
      .def("signal", &File::signal, "rows"_a, "n_samples"_a)
      .def("byte_count", &File::byte_count, "rows"_a)
      .def("signal_pa", &File::signal_pa, "rows"_a, "n_samples"_a, "offset"_a, "scale"_a)
      .def("chunk", &File::chunk, "row"_a)
      .def("signal_row_positions", &File::signal_row_positions, "rows"_a)
      .def("close", &File::close)
      .def_prop_ro("closed", &File::closed);

  nb::class_<Index>(m, "Index")
      .def(nb::init<std::vector<File*>, int, bool>(), "files"_a, "n_threads"_a = 0, "use_read_index"_a = true)
      .def_prop_ro("n_reads", &Index::n_reads)
      .def_prop_ro("n_duplicates", &Index::n_duplicates)
      .def_prop_ro("complete", &Index::complete)
      .def_prop_ro("n_indexed_files", &Index::n_indexed_files)
      .def("lookup", &Index::lookup, "ids"_a)
      .def("find", &Index::find, "read_id"_a)
      .def("signals", &Index::signals, "ids"_a, "pa"_a, "n_threads"_a = 0)
      .def("signal_stream", &Index::signal_stream, "ids"_a, "pa"_a, "n_threads"_a = 0, "chunk_samples"_a = 1 << 20);

  m.def("open_files", &open_files, "paths"_a, "n_threads"_a = 0);
  m.def("file_signals", &file_signals, "file"_a, "batches"_a, "rows"_a, "pa"_a, "n_threads"_a = 0);
  m.def("all_signals", &all_signals, "file"_a, "pa"_a, "n_threads"_a = 0);
  nb::class_<SignalStream>(m, "SignalStream")
      .def("next", &SignalStream::next)
      .def_prop_ro("n_reads", &SignalStream::n_reads);
  m.def("all_signal_stream", [](File& f, bool pa, int n_threads, uint64_t chunk_samples) {
    return SignalStream(all_list(f, nullptr), pa, n_threads, chunk_samples);
  }, "file"_a, "pa"_a, "n_threads"_a, "chunk_samples"_a);
  m.def("file_signal_stream", [](File& f, const I64Array& batches, const I64Array& rows, bool pa, int n_threads,
                                 uint64_t chunk_samples) {
    return SignalStream(file_list(f, batches, rows), pa, n_threads, chunk_samples);
  }, "file"_a, "batches"_a, "rows"_a, "pa"_a, "n_threads"_a, "chunk_samples"_a);
  m.def("pack_ids", &pack_ids, "texts"_a, "invalid_ok"_a = false);
  m.def("vbz_compress", &vbz_compress, "samples"_a);
  m.def("vbz_decompress", &vbz_decompress, "cell"_a, "n_samples"_a);
  m.def("format_ids", &format_ids, "ids"_a);

  nb::class_<Writer>(m, "Writer")
      .def(nb::init<const std::string&, const std::string&, bool>(), "path"_a, "software"_a, "vbz"_a)
      .def("add_run_info", &Writer::add_run_info)
      .def("add_read", &Writer::add_read)
      .def("add_read_chunks", &Writer::add_read_chunks)
      .def("close", &Writer::close)
      .def("abort", &Writer::abort)
      .def_prop_ro("closed", &Writer::closed);

  bind_demux(m);
  bind_live(m);
}
