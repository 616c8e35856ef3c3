#include "escpod/pipeline/ops/read_signals.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <utility>

#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/parallel.hpp"
#include "escpod/core/staged_file.hpp"

namespace escpod::pipeline {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and pages fault as usual
#endif

namespace {

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

}  // namespace

Status decode_read_samples(const pod5::FileReader& file, std::span<const uint64_t> rows,
                           signal::Calibration calibration, SampleKind kind, uint64_t n, std::byte* out,
                           DecodeScratch& scratch) {
  if (kind == SampleKind::kAdc) {
    return file.read_signal(rows, {reinterpret_cast<int16_t*>(out), n}, scratch.codec);
  }
  scratch.adc.resize(n);
  ESCPOD_RETURN_IF_ERROR(file.read_signal(rows, scratch.adc, scratch.codec));
  signal::calibrate_to_pa(scratch.adc, calibration, {reinterpret_cast<float*>(out), n});
  return Status::ok();
}

// ---- ReadSignalList -------------------------------------------------------------------------

ReadSignalList::ReadSignalList(std::vector<std::shared_ptr<const pod5::FileReader>> files)
    : m_files(std::move(files)) {}

void ReadSignalList::add(uint32_t file, std::span<const uint64_t> rows, uint64_t n_samples,
                         signal::Calibration calibration) {
  m_file_of.push_back(file);
  m_rows.insert(m_rows.end(), rows.begin(), rows.end());
  m_row_offsets.push_back(m_rows.size());
  m_sample_offsets.push_back(m_sample_offsets.back() + n_samples);
  m_calibration.push_back(calibration);
}

void ReadSignalList::add_row(uint32_t file, const pod5::ReadBatch& batch, size_t row) {
  add(file, batch.rows_of(row), batch.num_samples[row], {batch.calibration_offset[row], batch.calibration_scale[row]});
}

Status ReadSignalList::decode_one(size_t i, size_t first, SampleKind kind, std::byte* base,
                                  DecodeScratch& scratch) const {
  const std::span<const uint64_t> rows(m_rows.data() + m_row_offsets[i], m_row_offsets[i + 1] - m_row_offsets[i]);
  const uint64_t at = m_sample_offsets[i] - m_sample_offsets[first];
  const uint64_t n = m_sample_offsets[i + 1] - m_sample_offsets[i];
  return decode_read_samples(*m_files[m_file_of[i]], rows, m_calibration[i], kind, n,
                             base + at * sample_bytes(kind), scratch);
}

Status decode_reads(const ReadSignalList& reads, size_t first, size_t last, SampleKind kind, void* out,
                    Executor& executor) {
  tbb::enumerable_thread_specific<DecodeScratch> scratch;
  auto* base = static_cast<std::byte*>(out);
  const auto& offsets = reads.sample_offsets();
  return parallel_for(executor, last - first, [&](size_t k) -> Status {
    if (interrupted()) return Status::cancelled("interrupted");
    const size_t i = first + k;
    populate_for_write(base + (offsets[i] - offsets[first]) * sample_bytes(kind),
                       (offsets[i + 1] - offsets[i]) * sample_bytes(kind));
    return reads.decode_one(i, first, kind, base, scratch.local());
  });
}

// ---- SignalBufferPool -----------------------------------------------------------------------

SignalBufferPool::Buffer::~Buffer() {
  if (m_pool && m_data) m_pool->give_back(std::move(m_data), m_bytes);
}

SignalBufferPool::Buffer SignalBufferPool::take(size_t bytes) {
  Buffer b;
  b.m_pool = shared_from_this();
  {
    std::lock_guard lock(m_mutex);
    for (auto it = m_free.begin(); it != m_free.end(); ++it) {
      if (it->second < bytes) continue;
      b.m_data = std::move(it->first);
      b.m_bytes = it->second;
      m_free.erase(it);
      return b;
    }
  }
  b.m_data.reset(new std::byte[bytes]);
  b.m_bytes = bytes;
  return b;
}

void SignalBufferPool::give_back(std::unique_ptr<std::byte[]> data, size_t bytes) {
  std::lock_guard lock(m_mutex);
  if (m_free.size() < kMaxFree) m_free.emplace_back(std::move(data), bytes);
}

// ---- SignalChunkStream ----------------------------------------------------------------------

// What the decoding thread hands next(): finished chunks in order, each once next() asks for it,
// then the end (with the stream's status). `closing`: the consumer is gone; the producer stops
// at its next hand-off.
struct SignalChunkStream::Shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<SignalChunk> ready;  // one at a time: handed over only when asked for
  uint64_t asked = 0;                // next() calls so far
  uint64_t delivered = 0;            // chunks put in `ready`
  bool finished = false;
  bool closing = false;
  Status status;
  std::shared_ptr<SignalBufferPool> pool = std::make_shared<SignalBufferPool>();
};

namespace {

// A chunk being decoded (the sink, in order, hands it on with its last piece). Its buffer is
// taken by the first piece worked on, not when the source cuts it: a chunk whose pieces wait for
// the byte budget holds no memory yet.
struct ChunkInProgress {
  SignalChunk chunk;
  uint64_t bytes = 0;
  std::once_flag buffer_taken;
};

// A stream item: reads [first, last) of one chunk.
struct Piece {
  std::shared_ptr<ChunkInProgress> chunk;
  size_t first = 0, last = 0;
  bool last_of_chunk = false;
};

// Cuts a list into chunks of about chunk_samples samples and the chunks into pieces of about
// piece_samples (each at least one read).
class PieceCutter {
 public:
  PieceCutter(const ReadSignalList& reads, uint64_t chunk_samples, uint64_t piece_samples)
      : m_offsets(reads.sample_offsets()), m_n(reads.size()), m_chunk_samples(chunk_samples),
        m_piece_samples(piece_samples) {}

  bool done() const { return m_next == m_n; }
  // The end of reads [first, end): about `budget` samples (at least one read), never past `limit`.
  size_t cut(size_t first, uint64_t budget, size_t limit) const {
    size_t end = first + 1;
    while (end < limit && m_offsets[end + 1] - m_offsets[first] <= budget) ++end;
    return end;
  }
  // The next piece, starting a chunk (through `start_chunk`, given its read range) when needed.
  template <class StartChunk>
  void next(Piece& piece, StartChunk&& start_chunk) {
    if (!m_chunk || m_next == m_chunk_end) {
      m_chunk_end = cut(m_next, m_chunk_samples, m_n);
      m_chunk = start_chunk(m_next, m_chunk_end);
    }
    piece.chunk = m_chunk;
    piece.first = m_next;
    piece.last = cut(m_next, m_piece_samples, m_chunk_end);
    piece.last_of_chunk = piece.last == m_chunk_end;
    m_next = piece.last;
  }

 private:
  const std::vector<uint64_t>& m_offsets;
  size_t m_n;
  uint64_t m_chunk_samples, m_piece_samples;
  size_t m_next = 0, m_chunk_end = 0;
  std::shared_ptr<ChunkInProgress> m_chunk;
};

}  // namespace

SignalChunkStream::SignalChunkStream(std::shared_ptr<const ReadSignalList> reads, SampleKind kind, int n_threads,
                                     uint64_t chunk_samples)
    : m_reads(std::move(reads)), m_kind(kind), m_threads(n_threads),
      m_chunk_samples(std::max<uint64_t>(1, chunk_samples)), m_shared(std::make_unique<Shared>()) {}

SignalChunkStream::~SignalChunkStream() {
  {
    std::lock_guard lock(m_shared->mutex);
    m_shared->closing = true;
  }
  m_shared->changed.notify_all();
  if (m_producer.joinable()) m_producer.join();
}

Result<std::optional<SignalChunk>> SignalChunkStream::next() {
  if (!m_producer.joinable() && m_reads->size() > 0) m_producer = std::thread([this] { produce(); });
  std::unique_lock lock(m_shared->mutex);
  ++m_shared->asked;
  m_shared->changed.notify_all();
  m_shared->changed.wait(lock, [&] { return m_shared->ready || m_shared->finished || m_reads->size() == 0; });
  if (m_shared->ready) return std::exchange(m_shared->ready, std::nullopt);
  if (!m_shared->status.is_ok()) return m_shared->status;
  return std::optional<SignalChunk>();
}

// The stream's coordinator, on m_producer: pieces decoded on the executor, each chunk handed to
// next() when asked for (the sink waits until then, while the next chunk's pieces are decoded):
// the consumer's chunk, one finished and one being decoded are all the memory in use.
void SignalChunkStream::produce() {
  Executor& executor = Executor::for_threads(m_threads);
  const ReadSignalList& reads = *m_reads;
  const auto& offsets = reads.sample_offsets();
  const size_t elem = sample_bytes(m_kind);
  const uint64_t full_chunk = std::min(m_chunk_samples, offsets.back());
  // Pieces small enough that every thread finds one in a chunk; the budget lets the next chunk
  // start while the last pieces of this one finish.
  const uint64_t piece_samples = std::max<uint64_t>(1, full_chunk / (4 * static_cast<uint64_t>(executor.width())));
  StreamLimits limits;
  limits.max_bytes = std::max<uint64_t>(1, full_chunk * elem);
  PieceCutter cutter(reads, m_chunk_samples, piece_samples);
  Shared& shared = *m_shared;
  OrderedStream<Piece, DecodeScratch> stream(executor, limits);
  Status status = stream.run(
      [&](Piece& piece, uint64_t* cost, bool* end) -> Status {
        if (cutter.done()) {
          *end = true;
          piece.chunk.reset();
          return Status::ok();
        }
        cutter.next(piece, [&](size_t first, size_t last) {
          auto c = std::make_shared<ChunkInProgress>();
          c->chunk.first_read = first;
          c->chunk.end_read = last;
          // Every buffer holds at least a full chunk (or the whole list, when smaller), so any
          // later chunk but an outsized read fits one.
          c->bytes = std::max<uint64_t>(offsets[last] - offsets[first], full_chunk) * elem;
          return c;
        });
        *cost = (offsets[piece.last] - offsets[piece.first]) * elem;
        return Status::ok();
      },
      [] { return DecodeScratch(); },
      [&](Piece& piece, DecodeScratch& scratch) -> Status {
        ChunkInProgress& in_progress = *piece.chunk;
        std::call_once(in_progress.buffer_taken, [&] { in_progress.chunk.buffer = shared.pool->take(in_progress.bytes); });
        const SignalChunk& c = in_progress.chunk;
        for (size_t i = piece.first; i < piece.last; ++i) {
          ESCPOD_RETURN_IF_ERROR(reads.decode_one(i, c.first_read, m_kind, c.buffer.data(), scratch));
        }
        return Status::ok();
      },
      [&](Piece& piece, bool* stop) -> Status {
        std::shared_ptr<ChunkInProgress> chunk = std::move(piece.chunk);
        if (!piece.last_of_chunk) return Status::ok();
        std::unique_lock lock(shared.mutex);
        shared.changed.wait(lock, [&] { return shared.asked > shared.delivered || shared.closing; });
        if (shared.closing) {
          *stop = true;
          return Status::ok();
        }
        shared.ready = std::move(chunk->chunk);
        ++shared.delivered;
        lock.unlock();
        shared.changed.notify_all();
        return Status::ok();
      });
  {
    std::lock_guard lock(shared.mutex);
    shared.finished = true;
    shared.status = std::move(status);
  }
  shared.changed.notify_all();
}

}  // namespace escpod::pipeline
