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
#include <tbb/task_group.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <sys/mman.h>
#include <unistd.h>

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
#include <unordered_map>
#include <vector>

#include "escpod/core/cancel.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/arrow_extensions.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/file_writer.hpp"
#include "escpod/pod5/read_id.hpp"
#include "escpod/pod5/read_id_map.hpp"
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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and pages fault as usual
#endif

// Maps the pages under [p, p + bytes) in for writing in one call. Fresh memory that decoding is
// about to fill otherwise takes one page fault per 4 KB page, two threads contending for the
// page-table locks; populating each read's range first was ~20% cheaper in a probe on the build
// VM (74 MB written by two threads in 74 KB pieces: 17.7-18.5 ms faulting, 14.1-15.8 ms
// populating each piece first), and 1,000 random reads of the benchmark set took 56.9 ms against
// 60.2 ms without it (medians of 20 alternating pairs). A hint: on failure the pages fault in.
void populate_for_write(void* p, size_t bytes) {
  static std::atomic<bool> supported{true};
  if (bytes == 0 || !supported.load(std::memory_order_relaxed)) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
    supported.store(false, std::memory_order_relaxed);
  }
}

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
// One read's samples (ADC counts) into `out`, with this thread's codec.
Status decode_adc(const FileReader& r, std::span<const uint64_t> rows, std::span<int16_t> out) {
  thread_local pod5::VbzCodec codec;
  return r.read_signal(rows, out, codec);
}

// One read's samples in picoamps into `out`: decoded into this thread's ADC scratch (reused, no
// allocation per read once warm), then calibrated with the one formula of signal/calibration.hpp
// (equal to pod5's calibrate_signal_array).
Status decode_pa(const FileReader& r, std::span<const uint64_t> rows, signal::Calibration c, std::span<float> out) {
  thread_local std::vector<int16_t> adc;
  adc.resize(out.size());
  ESCPOD_RETURN_IF_ERROR(decode_adc(r, rows, adc));
  signal::calibrate_to_pa(adc, c, out);
  return Status::ok();
}

// A numpy array of n samples that `decode` fills with the GIL released; raises its error.
template <typename T, typename Decode>
nb::object decode_read(uint64_t n, Decode&& decode) {
  RawBuffer<T> out(n);
  Status s;
  {
    nb::gil_scoped_release release;
    s = decode(out.span());
  }
  if (!s.is_ok()) raise_status(s);
  return raw_to_numpy(std::move(out));
}

// How a File is opened: every reads batch validated up front (a standalone Reader, as pod5), or
// for random access (a DatasetReader): each batch validated when first decoded, signal batches
// loaded on first use, and rows read straight from the file (FileReader::read_batch_rows).
// A random-access open also takes the batch layout that a fresh read-id index (`escpod index`)
// stores for the file, so that opening reads no batch metadata; a layout that does not describe
// the file is dropped and the file opened without it (its own errors are then the file's).
// `index`: the index of the folder holding the file (nullptr: none, or not usable).
Result<std::unique_ptr<FileReader>> open_file(const std::string& path, bool validate_all_batches,
                                              const pod5::ReadIndex* index) {
  pod5::OpenOptions options;
  options.validate_all_batches = validate_all_batches;
  if (validate_all_batches) return FileReader::open(path, options);
  pod5::BatchLayout layout;
  const pod5::IndexedFile* entry = index ? index->verified_entry(path) : nullptr;
  if (Result<pod5::BatchLayout> stored = entry ? pod5::decode_batch_layout(*entry) : Status::not_found("");
      stored.is_ok()) {
    layout = std::move(stored).value();
    options.layout = &layout;
  }
  Result<std::unique_ptr<FileReader>> r = FileReader::open(path, options);
  if (r.is_ok() || options.layout == nullptr) return r;
  options.layout = nullptr;
  return FileReader::open(path, options);
}

// The read-id index stored under `root` (ReadIndex::find_root), or nullptr (no root, or a damaged
// index: not used).
std::unique_ptr<pod5::ReadIndex> open_index(const std::filesystem::path& root) {
  if (root.empty()) return nullptr;
  Result<std::unique_ptr<pod5::ReadIndex>> index = pod5::ReadIndex::open(root);
  return index.is_ok() ? std::move(index).value() : nullptr;
}

class File {
 public:
  explicit File(const std::string& path, bool validate_all_batches = true) {
    Result<std::unique_ptr<FileReader>> r = [&] {
      nb::gil_scoped_release release;
      const std::unique_ptr<pod5::ReadIndex> index =
          validate_all_batches ? nullptr : open_index(pod5::ReadIndex::find_root(path));
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
    const std::span<const uint64_t> row_span(rows.data(), rows.shape(0));
    return decode_read<int16_t>(n_samples, [&](std::span<int16_t> out) { return decode_adc(reader(), row_span, out); });
  }

  // Samples of one read in picoamps (float32), decoded and calibrated in one pass.
  nb::object signal_pa(const U64Array& rows, uint64_t n_samples, float offset, float scale) const {
    const std::span<const uint64_t> row_span(rows.data(), rows.shape(0));
    return decode_read<float>(n_samples, [&](std::span<float> out) {
      return decode_pa(reader(), row_span, {offset, scale}, out);
    });
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

// Where one read lies in a set of files.
struct Location {
  uint32_t file = 0;
  uint32_t batch = 0;
  uint32_t row = 0;
};

// The signals of a list of reads, given by (file, signal rows, sample count, calibration).
struct SignalJob {
  std::vector<std::shared_ptr<FileReader>> files;
  std::vector<uint32_t> file_of;           // per read
  std::vector<uint64_t> row_offsets{0};    // per read + 1, into rows
  std::vector<uint64_t> rows;
  std::vector<uint64_t> sample_offsets{0}; // per read + 1
  std::vector<signal::Calibration> calibration;

  size_t size() const { return file_of.size(); }

  void add(uint32_t file, std::span<const uint64_t> read_rows, uint64_t n_samples,
           signal::Calibration c) {
    file_of.push_back(file);
    rows.insert(rows.end(), read_rows.begin(), read_rows.end());
    row_offsets.push_back(rows.size());
    sample_offsets.push_back(sample_offsets.back() + n_samples);
    calibration.push_back(c);
  }

  // Decodes reads [first, last) on n_threads into fresh memory `out` (float32 picoamps when pa,
  // else int16), read i at sample sample_offsets[i] - sample_offsets[first]. Each worker maps in
  // (populate_for_write) and fills the part of `out` its reads take. The error is the first
  // failing read's; reads not yet started are skipped; Ctrl-C gives KeyboardInterrupt.
  void decode(size_t first, size_t last, bool pa, int n_threads, void* out) const {
    parallel_for_interruptible(n_threads, last - first, [&](size_t k) {
      return decode_one(first + k, pa, static_cast<std::byte*>(out), sample_offsets[first], true);
    });
  }

  // decode() for a short run of reads (one chunk of a stream, a few ms) into a recycled buffer
  // (its pages mapped already: not populated again), inside the pool of n_threads (the calling
  // thread one of them), without the helper thread and signal polling of run_interruptible (a
  // stream is interruptible between chunks). Touches no Python object: runs off the GIL.
  Status decode_chunk(size_t first, size_t last, bool pa, int n_threads, void* out) const {
    auto one = [&](size_t k) {
      return decode_one(first + k, pa, static_cast<std::byte*>(out), sample_offsets[first], false);
    };
    if (resolve_threads(n_threads) == 1) {
      for (size_t k = 0; k < last - first; ++k) ESCPOD_RETURN_IF_ERROR(one(k));
      return Status::ok();
    }
    return parallel_for(Executor::for_threads(resolve_threads(n_threads)), last - first, one);
  }

  // Every read into one buffer: (buffer, offsets).
  nb::tuple run(bool pa, int n_threads) {
    const uint64_t total = sample_offsets.back();
    RawBuffer<int16_t> adc(pa ? 0 : total);
    RawBuffer<float> picoamps(pa ? total : 0);
    decode(0, size(), pa, n_threads, pa ? static_cast<void*>(picoamps.data.get()) : adc.data.get());
    nb::object buf = pa ? raw_to_numpy(std::move(picoamps)) : raw_to_numpy(std::move(adc));
    return nb::make_tuple(buf, vector_to_numpy(std::move(sample_offsets)));
  }

 private:
  Status decode_one(size_t i, bool pa, std::byte* out, uint64_t base, bool populate) const {
    std::span<const uint64_t> rr(rows.data() + row_offsets[i], row_offsets[i + 1] - row_offsets[i]);
    const uint64_t lo = sample_offsets[i] - base, len = sample_offsets[i + 1] - sample_offsets[i];
    const FileReader& r = *files[file_of[i]];
    if (!pa) {
      int16_t* dst = reinterpret_cast<int16_t*>(out) + lo;
      if (populate) populate_for_write(dst, len * sizeof(int16_t));
      return decode_adc(r, rr, {dst, len});
    }
    float* dst = reinterpret_cast<float*>(out) + lo;
    if (populate) populate_for_write(dst, len * sizeof(float));
    return decode_pa(r, rr, calibration[i], {dst, len});
  }
};

// Output buffers recycled within one signal stream: a chunk's buffer comes back when numpy frees
// the chunk's arrays and a later chunk reuses it, so streaming a whole file faults in the pages
// of only the first few chunks. (First touch of fresh memory cost as much CPU as decoding into
// it on the build VM: ~0.14 s per 384 MB, kernel page faults and memcg accounting.)
class BufferPool {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
  };

  Buffer take(size_t bytes) {
    {
      std::lock_guard lock(m_mutex);
      for (auto it = m_free.begin(); it != m_free.end(); ++it) {
        if (it->bytes < bytes) continue;
        Buffer b = std::move(*it);
        m_free.erase(it);
        return b;
      }
    }
    return Buffer{std::unique_ptr<std::byte[]>(new std::byte[bytes]), bytes};
  }

  // Keeps at most kMaxFree buffers (a consumer holding arrays of two chunks still finds one).
  void give_back(Buffer b) {
    std::lock_guard lock(m_mutex);
    if (m_free.size() < kMaxFree) m_free.push_back(std::move(b));
  }

 private:
  static constexpr size_t kMaxFree = 3;
  std::mutex m_mutex;
  std::vector<Buffer> m_free;
};

// A numpy array of the first n elements of a pooled buffer, which goes back to the pool when
// numpy frees the array (and every view of it).
template <typename T>
nb::object pooled_to_numpy(std::shared_ptr<BufferPool> pool, BufferPool::Buffer&& buffer, size_t n) {
  struct Owner {
    std::shared_ptr<BufferPool> pool;
    BufferPool::Buffer buffer;
  };
  auto* owner = new Owner{std::move(pool), std::move(buffer)};
  T* data = reinterpret_cast<T*>(owner->buffer.data.get());
  nb::capsule cap(owner, [](void* p) noexcept {
    auto* o = static_cast<Owner*>(p);
    o->pool->give_back(std::move(o->buffer));
    delete o;
  });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(data, {n}, cap).cast();
}

// The reads of a SignalJob decoded chunk by chunk (about chunk_samples samples each, at least
// one read), each chunk on n_threads into a recycled buffer: next() gives (buffer, offsets) of
// the next chunk, read k of it at buffer[offsets[k]:offsets[k+1]], or None after the last. The
// chunk after the one returned is decoded while Python uses it (a task in the pool, joined by
// the next call), so the pool's threads do not wait on the consumer between chunks.
class SignalStream {
 public:
  SignalStream(SignalJob&& job, bool pa, int n_threads, uint64_t chunk_samples)
      : m_job(std::make_shared<const SignalJob>(std::move(job))), m_pa(pa), m_threads(n_threads),
        m_chunk_samples(std::max<uint64_t>(1, chunk_samples)) {}
  SignalStream(SignalStream&&) = default;
  ~SignalStream() {
    try {
      join();
    } catch (...) {  // a decode that threw: nothing left to report it to
    }
  }

  nb::object next() {
    if (!m_pending) {
      if (m_next >= m_job->size()) return nb::none();
      start_next();
    }
    {
      nb::gil_scoped_release release;
      join();
    }
    std::unique_ptr<Chunk> c = std::move(m_pending);
    if (!c->status.is_ok()) raise_status(c->status);
    if (m_next < m_job->size()) start_next();
    const auto& off = m_job->sample_offsets;
    const uint64_t n = off[c->last] - off[c->first];
    std::vector<uint64_t> offsets(off.begin() + static_cast<ptrdiff_t>(c->first),
                                  off.begin() + static_cast<ptrdiff_t>(c->last) + 1);
    for (uint64_t& o : offsets) o -= off[c->first];
    nb::object array = m_pa ? pooled_to_numpy<float>(m_pool, std::move(c->buffer), n)
                            : pooled_to_numpy<int16_t>(m_pool, std::move(c->buffer), n);
    return nb::make_tuple(array, vector_to_numpy(std::move(offsets)));
  }

  size_t n_reads() const { return m_job->size(); }

 private:
  struct Chunk {
    size_t first = 0, last = 0;
    BufferPool::Buffer buffer;
    Status status;
  };

  // Takes the reads of the next chunk and starts decoding them in the pool.
  void start_next() {
    auto c = std::make_unique<Chunk>();
    c->first = m_next;
    c->last = c->first + 1;
    const auto& off = m_job->sample_offsets;
    while (c->last < m_job->size() && off[c->last + 1] - off[c->first] <= m_chunk_samples) ++c->last;
    m_next = c->last;
    // Every buffer holds at least a full chunk, so any later chunk but an outsized read fits one.
    const size_t elem = m_pa ? sizeof(float) : sizeof(int16_t);
    c->buffer = m_pool->take(std::max<uint64_t>(off[c->last] - off[c->first], m_chunk_samples) * elem);
    Chunk* chunk = c.get();
    m_pending = std::move(c);
    if (!m_group) m_group = std::make_unique<tbb::task_group>();
    executor().execute([&] {
      m_group->run([job = m_job, chunk, pa = m_pa, threads = m_threads] {
        chunk->status = job->decode_chunk(chunk->first, chunk->last, pa, threads, chunk->buffer.data.get());
      });
    });
  }

  // Waits for the chunk in flight (the calling thread works on it meanwhile).
  void join() {
    if (m_group) executor().execute([&] { m_group->wait(); });
  }

  Executor& executor() const { return Executor::for_threads(resolve_threads(m_threads)); }

  std::shared_ptr<const SignalJob> m_job;
  bool m_pa;
  int m_threads;
  uint64_t m_chunk_samples;
  size_t m_next = 0;
  std::unique_ptr<Chunk> m_pending;  // started, not yet returned
  std::unique_ptr<tbb::task_group> m_group;
  std::shared_ptr<BufferPool> m_pool = std::make_shared<BufferPool>();
};

// Where read ids are in a set of files. A file covered by a persistent read-id index
// (`escpod index`, pod5/read_index.hpp) whose entry is verified (size, mtime and footer file
// identifier match) is looked up there; every other file's read-id column is scanned (ids only,
// batches in parallel) into a hash map. No other column is decoded to build it: batches are
// decoded when a signal look-up needs them. Not thread-safe (called with the GIL held).
class Index {
 public:
  Index(std::vector<File*> files, int n_threads, bool use_read_index) {
    for (File* f : files) m_files.push_back(f->shared());
    m_first_batch.push_back(0);
    for (const auto& f : m_files) m_first_batch.push_back(m_first_batch.back() + f->n_read_batches());
    m_batches.resize(m_first_batch.back());
    m_batch_ids.resize(m_first_batch.back());
    m_indexed.assign(m_files.size(), false);
    if (use_read_index) open_read_indexes();
    scan_ids(n_threads);
  }
  Index(const Index&) = delete;  // (vector<unique_ptr> claims to be copyable; nanobind asks)
  Index& operator=(const Index&) = delete;

  size_t n_reads() const {
    size_t n = 0;
    for (const auto& f : m_files) n += f->info().n_reads;
    return n;
  }
  // Ids held more than once: exact over the scanned files; in files a persistent index covers,
  // only those lookups found so far (complete() says whether every file was scanned).
  size_t n_duplicates() const { return m_n_duplicates + m_n_duplicates_seen; }
  bool complete() const { return m_n_indexed == 0; }
  size_t n_indexed_files() const { return m_n_indexed; }

  // (file, batch, row) arrays, -1 where an id is absent; the first file (in the order given)
  // holding an id wins.
  nb::tuple lookup(const IdArray& ids) {
    std::vector<ReadId> v = ids_from_numpy(ids);
    std::vector<int64_t> file(v.size(), -1), batch(v.size(), -1), row(v.size(), -1);
    for (size_t i = 0; i < v.size(); ++i) {
      const std::optional<Location> loc = locate(v[i]);
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
    const std::optional<Location> loc = locate(*id);
    if (!loc) return nb::none();
    return nb::make_tuple(loc->file, loc->batch, loc->row);
  }

  // Signals of the reads `ids` (all must be present): (buffer, offsets) as SignalJob::run.
  nb::tuple signals(const IdArray& ids, bool pa, int n_threads) { return job_of(ids, n_threads).run(pa, n_threads); }

  // The same reads as a stream of chunks (SignalStream): memory bounded by a few chunks.
  SignalStream signal_stream(const IdArray& ids, bool pa, int n_threads, uint64_t chunk_samples) {
    return SignalStream(job_of(ids, n_threads), pa, n_threads, chunk_samples);
  }

 private:
  struct Persistent {
    std::unique_ptr<pod5::ReadIndex> index;
    std::unordered_map<uint32_t, uint32_t> file_of_slot;
  };

  // Files under a folder holding a usable index, with a verified entry, are looked up there. A
  // damaged or missing index is not used (its files are scanned).
  void open_read_indexes() {
    std::map<std::filesystem::path, size_t> by_root;  // root -> m_persistent index
    for (uint32_t fi = 0; fi < m_files.size(); ++fi) {
      const std::filesystem::path& path = m_files[fi]->path();
      const std::filesystem::path root = pod5::ReadIndex::find_root(path);
      if (root.empty()) continue;
      auto it = by_root.find(root);
      if (it == by_root.end()) {
        Result<std::unique_ptr<pod5::ReadIndex>> opened = pod5::ReadIndex::open(root);
        it = by_root.emplace(root, opened.is_ok() ? m_persistent.size() : SIZE_MAX).first;
        if (opened.is_ok()) m_persistent.push_back({std::move(opened).value(), {}});
      }
      if (it->second == SIZE_MAX) continue;
      Persistent& p = m_persistent[it->second];
      const pod5::IndexedFile* entry = p.index->verified_entry(path);
      if (!entry || entry->n_batches != m_files[fi]->n_read_batches()) continue;
      p.file_of_slot.emplace(entry->slot, fi);
      m_indexed[fi] = true;
      ++m_n_indexed;
    }
  }

  // The read ids of every batch of the files not indexed, in parallel, into the hash map.
  void scan_ids(int n_threads) {
    std::vector<size_t> todo;  // global batch numbers
    for (size_t fi = 0; fi < m_files.size(); ++fi) {
      if (m_indexed[fi]) continue;
      for (size_t g = m_first_batch[fi]; g < m_first_batch[fi + 1]; ++g) todo.push_back(g);
    }
    parallel_for_interruptible(n_threads, todo.size(), [&](size_t k) -> Status {
      const auto [fi, bi] = file_batch(todo[k]);
      ESCPOD_ASSIGN_OR_RETURN(m_batch_ids[todo[k]], m_files[fi]->read_batch_ids(bi));
      return Status::ok();
    });
    size_t total = 0;
    for (size_t g : todo) total += m_batch_ids[g].size();
    m_map.reserve(total);
    for (size_t g : todo) {
      const auto [fi, bi] = file_batch(g);
      const auto& ids = m_batch_ids[g];
      for (size_t r = 0; r < ids.size(); ++r) {
        if (!m_map.try_emplace(ids[r], Location{fi, bi, static_cast<uint32_t>(r)}).second) ++m_n_duplicates;
      }
    }
  }

  std::pair<uint32_t, uint32_t> file_batch(size_t g) const {
    const auto fi = static_cast<uint32_t>(
        std::upper_bound(m_first_batch.begin(), m_first_batch.end(), g) - m_first_batch.begin() - 1);
    return {fi, static_cast<uint32_t>(g - m_first_batch[fi])};
  }

  // Where `id` is held: the best place (the first file in the order given) and how many places
  // hold it, from the scanned files' map and each persistent index. Rows an index names are not
  // checked here (*unchecked: whether one is in a file whose rows cannot be read alone, which
  // locate() then checks). Reads only: safe on several threads, each with its own `hits`.
  struct Found {
    std::optional<Location> best;
    size_t n_places = 0;
    bool unchecked = false;
  };
  template <typename OnIndexedRow>
  Status find_places(const ReadId& id, std::vector<pod5::IndexHit>& hits, Found* out,
                     OnIndexedRow&& on_indexed_row) const {
    *out = Found{};
    if (const Location* scanned = m_map.find(id)) {
      out->best = *scanned;
      ++out->n_places;
    }
    for (const Persistent& p : m_persistent) {
      hits.clear();
      ESCPOD_RETURN_IF_ERROR(p.index->lookup(id, &hits));
      for (const pod5::IndexHit& h : hits) {
        auto f = p.file_of_slot.find(h.slot);
        if (f == p.file_of_slot.end()) continue;
        const Location loc{f->second, h.batch, h.row};
        on_indexed_row(loc);
        out->unchecked |= !m_files[loc.file]->reads_rows_from_file();
        ++out->n_places;
        if (!out->best || loc.file < out->best->file) out->best = loc;
      }
    }
    return Status::ok();
  }

  // The first place `id` is held, in file order: the scanned files' map, then each persistent
  // index; a row an index names is checked against the id it holds (an index that does not
  // describe its file raises, naming it, rather than answer with another read).
  std::optional<Location> locate(const ReadId& id) {
    Found found;
    Status s = find_places(id, m_hits, &found, [&](const Location& loc) { check_indexed_row(loc, id); });
    if (!s.is_ok()) raise_status(s);
    count_places(found);
    return found.best;
  }

  void count_places(const Found& found) {
    if (found.n_places > 1 && m_persistent.size() > 0) ++m_n_duplicates_seen;
  }

  // The reads `ids` (all must be present; KeyError naming the first absent) as a SignalJob, in
  // the order given: located on n_threads, each row read alone where its file allows.
  SignalJob job_of(const IdArray& ids, int n_threads) {
    std::vector<ReadId> v = ids_from_numpy(ids);
    SignalJob job;
    job.files = m_files;
    job.file_of.reserve(v.size());
    const std::vector<Location> where = locate_all(v, n_threads);
    std::vector<ReadBatch> rows = read_rows(where, n_threads);
    for (size_t i = 0; i < v.size(); ++i) {
      if (rows[i].size() && rows[i].read_id[0] != v[i]) check_indexed_row(where[i], v[i]);  // raises
      const ReadBatch& b = rows[i].size() ? rows[i] : batch(where[i].file, where[i].batch);
      const size_t r = rows[i].size() ? 0 : where[i].row;
      job.add(where[i].file, b.rows_of(r), b.num_samples[r], {b.calibration_offset[r], b.calibration_scale[r]});
    }
    return job;
  }

  // locate() for many ids, the index look-ups on n_threads: rows in files that cannot read rows
  // alone are checked here, the others are left to the caller, who reads each row alone and
  // compares its id (check_indexed_row on a mismatch). KeyError naming the first absent id.
  std::vector<Location> locate_all(const std::vector<ReadId>& ids, int n_threads) {
    std::vector<Found> found(ids.size());
    parallel_for_interruptible(n_threads, ids.size(), [&](size_t i) {
      thread_local std::vector<pod5::IndexHit> hits;
      return find_places(ids[i], hits, &found[i], [](const Location&) {});
    });
    std::vector<Location> where(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (found[i].unchecked) found[i].best = locate(ids[i]);  // counts its places itself
      else count_places(found[i]);
      if (!found[i].best) {
        PyErr_SetString(PyExc_KeyError, ("read " + ids[i].to_string() + " is in none of the files").c_str());
        throw nb::python_error();
      }
      where[i] = *found[i].best;
    }
    return where;
  }

  void check_indexed_row(const Location& loc, const ReadId& id) {
    const FileReader& f = *m_files[loc.file];
    const size_t g = m_first_batch[loc.file] + loc.batch;
    if (loc.batch >= f.n_read_batches() || loc.row >= f.batch_rows(loc.batch)) {
      raise_status(Status::corrupt(f.path().string() + ": the read-id index names reads batch " +
                                   std::to_string(loc.batch) + " row " + std::to_string(loc.row) +
                                   ", which the file does not have (run `escpod index` again)"));
    }
    if (m_batch_ids[g].empty()) {
      Result<std::vector<ReadId>> ids = f.read_batch_ids(loc.batch);
      if (!ids.is_ok()) raise_status(ids.status());
      m_batch_ids[g] = std::move(ids).value();
    }
    if (m_batch_ids[g][loc.row] != id) {
      raise_status(Status::corrupt(f.path().string() + ": the read-id index places read " + id.to_string() +
                                   " at reads batch " + std::to_string(loc.batch) + " row " +
                                   std::to_string(loc.row) + ", which holds " +
                                   m_batch_ids[g][loc.row].to_string() + " (run `escpod index` again)"));
    }
  }

  // The rows at `where`, each read alone from its file, in parallel, for files that read rows
  // straight from the file (random-access opens) and whose batch is not decoded already; the
  // others are left empty (the caller takes them from the decoded batch). Reading one row costs
  // a few small preads; decoding its whole batch ~1,000 rows' worth of columns.
  std::vector<ReadBatch> read_rows(const std::vector<Location>& where, int n_threads) {
    std::vector<ReadBatch> rows(where.size());
    auto from_file = [&](const Location& w) {
      return m_files[w.file]->reads_rows_from_file() && !m_batches[m_first_batch[w.file] + w.batch];
    };
    if (std::none_of(where.begin(), where.end(), from_file)) return rows;
    parallel_for_interruptible(n_threads, where.size(), [&](size_t i) -> Status {
      if (!from_file(where[i])) return Status::ok();
      ESCPOD_ASSIGN_OR_RETURN(rows[i], m_files[where[i].file]->read_signal_ref(where[i].batch, where[i].row));
      return Status::ok();
    });
    return rows;
  }

  const ReadBatch& batch(uint32_t file, uint32_t batch_idx) {
    const size_t g = m_first_batch[file] + batch_idx;
    if (!m_batches[g]) {
      Result<ReadBatch> b = m_files[file]->read_batch(batch_idx);
      if (!b.is_ok()) raise_status(b.status());
      m_batches[g] = std::make_unique<const ReadBatch>(std::move(b).value());
    }
    return *m_batches[g];
  }

  std::vector<std::shared_ptr<FileReader>> m_files;
  std::vector<size_t> m_first_batch;                     // per file + 1: global batch numbers
  std::vector<std::unique_ptr<const ReadBatch>> m_batches;  // decoded on demand
  std::vector<std::vector<ReadId>> m_batch_ids;          // per global batch (scanned or checked)
  std::vector<bool> m_indexed;                           // per file: a persistent index covers it
  size_t m_n_indexed = 0;
  std::vector<Persistent> m_persistent;
  std::vector<pod5::IndexHit> m_hits;                    // lookup scratch
  pod5::ReadIdMap<Location> m_map;  // the scanned files' ids
  size_t m_n_duplicates = 0;       // in the scanned files
  size_t m_n_duplicates_seen = 0;  // ids found in more than one place by lookups using an index
};

// The reads of one file given batch and row arrays.
SignalJob file_job(File& f, const I64Array& batches, const I64Array& rows) {
  const FileReader& r = f.reader();
  if (batches.shape(0) != rows.shape(0)) throw nb::value_error("batches and rows differ in length");
  SignalJob job;
  job.files = {f.shared()};
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
    job.add(0, b.rows_of(ri), b.num_samples[ri], {b.calibration_offset[ri], b.calibration_scale[ri]});
  }
  return job;
}

// Every read of a file in file order; their ids into `ids` when given.
SignalJob all_job(File& f, std::vector<ReadId>* ids) {
  const FileReader& r = f.reader();
  SignalJob job;
  job.files = {f.shared()};
  for (size_t bi = 0; bi < r.n_read_batches(); ++bi) {
    Result<ReadBatch> b = r.read_batch(bi);
    if (!b.is_ok()) raise_status(b.status());
    for (size_t i = 0; i < b->size(); ++i) {
      job.add(0, b->rows_of(i), b->num_samples[i], {b->calibration_offset[i], b->calibration_scale[i]});
      if (ids) ids->push_back(b->read_id[i]);
    }
  }
  return job;
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
    if (it == index_of_root.end()) it = index_of_root.emplace(root, open_index(root)).first;
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
  return file_job(f, batches, rows).run(pa, n_threads);
}

// Every read of a file: (buffer, offsets, read ids) in file order.
nb::tuple all_signals(File& f, bool pa, int n_threads) {
  std::vector<ReadId> ids;
  nb::tuple t = all_job(f, &ids).run(pa, n_threads);
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
    return SignalStream(all_job(f, nullptr), pa, n_threads, chunk_samples);
  }, "file"_a, "pa"_a, "n_threads"_a, "chunk_samples"_a);
  m.def("file_signal_stream", [](File& f, const I64Array& batches, const I64Array& rows, bool pa, int n_threads,
                                 uint64_t chunk_samples) {
    return SignalStream(file_job(f, batches, rows), pa, n_threads, chunk_samples);
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
