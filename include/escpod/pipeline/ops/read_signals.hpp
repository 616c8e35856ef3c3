// The signals of a list of reads, decoded in parallel into one buffer, or streamed chunk by
// chunk on the streaming engine (core/ordered_stream.hpp) with memory bounded by a few chunks.
// The Python package's signal calls (DatasetReader.signals / iter_signals, Reader.iter_signals)
// are these, handed to numpy without a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "escpod/core/executor.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/vbz.hpp"
#include "escpod/signal/calibration.hpp"

namespace escpod::pipeline {

// Which samples: ADC counts as stored (int16) or calibrated picoamps (float32).
enum class SampleKind { kAdc, kPicoamps };
inline size_t sample_bytes(SampleKind kind) { return kind == SampleKind::kAdc ? sizeof(int16_t) : sizeof(float); }

// One worker's decoding buffers (reused: no allocation per read once warm).
struct DecodeScratch {
  pod5::VbzCodec codec;
  std::vector<int16_t> adc;
};

// The first n samples of the read whose signal rows are `rows` into `out` (n int16 ADC counts,
// or n float32 picoamps calibrated with `calibration`: the one formula of signal/calibration.hpp,
// equal to pod5's calibrate_signal_array). Errors name the file and row.
Status decode_read_samples(const pod5::FileReader& file, std::span<const uint64_t> rows,
                           signal::Calibration calibration, SampleKind kind, uint64_t n, std::byte* out,
                           DecodeScratch& scratch);

// A list of reads to decode: each one's file, signal rows, sample count and calibration. Reads
// lie back to back in a decoded buffer: read i at sample_offsets()[i].
class ReadSignalList {
 public:
  explicit ReadSignalList(std::vector<std::shared_ptr<const pod5::FileReader>> files = {});

  // Appends a read of files()[file].
  void add(uint32_t file, std::span<const uint64_t> rows, uint64_t n_samples, signal::Calibration calibration);
  // Appends row `row` of `batch`, a reads batch of files()[file].
  void add_row(uint32_t file, const pod5::ReadBatch& batch, size_t row);

  size_t size() const { return m_file_of.size(); }
  const std::vector<std::shared_ptr<const pod5::FileReader>>& files() const { return m_files; }
  // size() + 1 entries: read i holds samples [offsets[i], offsets[i + 1]).
  const std::vector<uint64_t>& sample_offsets() const { return m_sample_offsets; }

  // Read i into `base` + its place relative to read `first` (sample_offsets()[i] -
  // sample_offsets()[first] elements of `kind` in).
  Status decode_one(size_t i, size_t first, SampleKind kind, std::byte* base, DecodeScratch& scratch) const;

 private:
  std::vector<std::shared_ptr<const pod5::FileReader>> m_files;
  std::vector<uint32_t> m_file_of;           // per read
  std::vector<uint64_t> m_row_offsets{0};    // per read + 1, into m_rows
  std::vector<uint64_t> m_rows;
  std::vector<uint64_t> m_sample_offsets{0}; // per read + 1
  std::vector<signal::Calibration> m_calibration;
};

// Decodes reads [first, last) of `reads` into `out` (fresh memory: each worker maps in the pages
// of its reads for writing first, which is cheaper than faulting them in one by one), in
// parallel on `executor`, read by read as threads come free. The error of the first failing read
// in list order; kCancelled once interrupted() (core/staged_file.hpp) says so.
Status decode_reads(const ReadSignalList& reads, size_t first, size_t last, SampleKind kind, void* out,
                    Executor& executor);

// Buffers recycled within one chunk stream: a chunk's buffer comes back when its user drops it
// and a later chunk reuses it, so streaming a whole file faults in the pages of only the first
// few chunks (first touch of fresh memory cost as much CPU as decoding into it: ~0.14 s per 384 MB
// on the build VM).
class SignalBufferPool : public std::enable_shared_from_this<SignalBufferPool> {
 public:
  // A buffer that goes back to its pool when destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&&) = default;
    Buffer& operator=(Buffer&&) = default;
    ~Buffer();
    std::byte* data() const { return m_data.get(); }
    size_t bytes() const { return m_bytes; }

   private:
    friend class SignalBufferPool;
    std::unique_ptr<std::byte[]> m_data;
    size_t m_bytes = 0;
    std::shared_ptr<SignalBufferPool> m_pool;
  };

  // A buffer of at least `bytes` (a free one when one is large enough).
  Buffer take(size_t bytes);

 private:
  void give_back(std::unique_ptr<std::byte[]> data, size_t bytes);
  // Kept free at most: a consumer holding two chunks while two more are decoded still finds one.
  static constexpr size_t kMaxFree = 4;
  std::mutex m_mutex;
  std::vector<std::pair<std::unique_ptr<std::byte[]>, size_t>> m_free;
};

// Reads [first_read, end_read) of a stream's list, decoded back to back into `buffer` (read k at
// sample sample_offsets()[k] - sample_offsets()[first_read]).
struct SignalChunk {
  size_t first_read = 0;
  size_t end_read = 0;
  SignalBufferPool::Buffer buffer;
};

// The reads of a list decoded chunk by chunk (about chunk_samples samples each, at least one
// read) on the streaming engine: each chunk is cut into pieces of a few reads that the
// executor's threads decode straight into the chunk's buffer as they come free, and chunks are
// handed out in order. Decoding runs ahead of the consumer by about one chunk: memory stays
// within a few chunks whatever the list's length. Starts at the first next(); the destructor
// stops it. next() is for one consumer thread.
class SignalChunkStream {
 public:
  SignalChunkStream(std::shared_ptr<const ReadSignalList> reads, SampleKind kind, int n_threads,
                    uint64_t chunk_samples);
  SignalChunkStream(const SignalChunkStream&) = delete;
  SignalChunkStream& operator=(const SignalChunkStream&) = delete;
  ~SignalChunkStream();

  // The next chunk (waits for it), or nullopt after the last; the first failing read's error
  // once the chunks before it are out (and on every later call).
  Result<std::optional<SignalChunk>> next();
  size_t n_reads() const { return m_reads->size(); }
  const ReadSignalList& reads() const { return *m_reads; }

 private:
  struct Shared;
  void produce();

  std::shared_ptr<const ReadSignalList> m_reads;
  SampleKind m_kind;
  int m_threads;
  uint64_t m_chunk_samples;
  std::unique_ptr<Shared> m_shared;  // the hand-off between the decoding thread and next()
  std::thread m_producer;            // runs the stream (its coordinator)
};

}  // namespace escpod::pipeline
