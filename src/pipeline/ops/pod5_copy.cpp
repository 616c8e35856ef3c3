#include "escpod/pipeline/ops/pod5_copy.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/parallel.hpp"
#include "read_stream.hpp"

namespace escpod::pipeline {

Status prepare_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                    PreparedRead& out) {
  out.row = i;
  out.record = reader.record(batch, i);
  out.chunks.clear();
  uint64_t stored = 0;
  for (uint64_t row : batch.rows_of(i)) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::SignalChunk c, reader.signal_chunk(row));
    stored += c.n_samples;
    out.chunks.push_back(c);
  }
  if (stored != out.record.num_samples) {
    return Status::corrupt(reader.path().string() + ": read " + out.record.read_id.to_string() +
                           " has num_samples " + std::to_string(out.record.num_samples) +
                           " but its signal rows hold " + std::to_string(stored));
  }
  return Status::ok();
}

Status copy_prepared(const pod5::FileReader& reader, const pod5::ReadBatch& batch,
                     const PreparedRead& read, pod5::FileWriter& writer, CopyScratch& scratch,
                     CopyStats* stats, pod5::ChunkBytes how) {
  const uint64_t n = read.record.num_samples;
  if (reader.info().is_vbz == writer.is_vbz()) {
    ESCPOD_RETURN_IF_ERROR(writer.add_read_chunks(read.record, read.chunks, how));
    if (stats) stats->n_chunks_copied += read.chunks.size();
  } else {
    scratch.samples.resize(n);
    ESCPOD_RETURN_IF_ERROR(reader.read_signal(batch.rows_of(read.row), scratch.samples, scratch.codec));
    ESCPOD_RETURN_IF_ERROR(writer.add_read(read.record, scratch.samples));
    if (stats) ++stats->n_reads_reencoded;
  }
  if (stats) {
    ++stats->n_reads;
    stats->n_samples += n;
  }
  return Status::ok();
}

Status copy_read(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i,
                 pod5::FileWriter& writer, CopyScratch& scratch, CopyStats* stats) {
  ESCPOD_RETURN_IF_ERROR(prepare_read(reader, batch, i, scratch.prepared));
  return copy_prepared(reader, batch, scratch.prepared, writer, scratch, stats);
}

namespace {

// One reads batch on its way through stream_reads: a record of the engine's ring, reused (its
// batch columns and prepared reads keep their buffers from one batch to the next).
struct PreparedBatch {
  size_t file = 0;
  size_t batch_idx = 0;  // decoded in the parallel stage
  size_t first_row = 0, n_rows = ReadSlice::kWholeBatch;
  pod5::ReadBatch batch;
  std::vector<PreparedRead> reads;  // [0, n_reads) are this batch's
  size_t n_reads = 0;
};

// Faults in the pages a read's stored chunks span (one touch a page), so that the serial copy
// that follows finds them mapped: page faults are paid on the preparing threads.
void touch_pages(const PreparedRead& r) {
  constexpr size_t kPage = 4096;
  for (const auto& c : r.chunks) {
    const volatile uint8_t* p = c.bytes.data();
    for (size_t k = 0; k < c.bytes.size(); k += kPage) (void)p[k];
    if (!c.bytes.empty()) (void)p[c.bytes.size() - 1];
  }
}

// The input bytes of `rows` reads of `reader` (the file's size apportioned to its reads): the
// cost of a batch in the engine's byte budget, known before the batch is decoded.
uint64_t estimated_batch_bytes(const pod5::FileReader& reader, size_t rows) {
  const uint64_t n = std::max<uint64_t>(1, reader.info().n_reads);
  return reader.info().file_size / n * rows + 1;
}

// Up to two batches a thread in flight, as the former pipeline's tokens, bounded in bytes.
StreamLimits copy_stream_limits(const Executor& ex) {
  const auto width = static_cast<uint64_t>(ex.width());
  return {.max_bytes = std::max<uint64_t>(uint64_t{512} << 20, width * (uint64_t{128} << 20)),
          .max_items = static_cast<size_t>(2 * width)};
}

// Decodes b's batch (or slice) and prepares its selected reads.
Status prepare_batch(const pod5::FileReader& reader, const ReadSelector& select, PreparedBatch& b) {
  auto decoded = b.n_rows == ReadSlice::kWholeBatch ? reader.read_batch(b.batch_idx)
                                                    : reader.read_batch_rows(b.batch_idx, b.first_row, b.n_rows);
  ESCPOD_RETURN_IF_ERROR(decoded.status());
  b.batch = std::move(decoded).value();
  b.n_reads = 0;
  for (size_t i = 0; i < b.batch.size(); ++i) {
    if (select && !select(reader, b.batch, i)) continue;
    if (b.n_reads == b.reads.size()) b.reads.emplace_back();
    PreparedRead& r = b.reads[b.n_reads++];
    ESCPOD_RETURN_IF_ERROR(prepare_read(reader, b.batch, i, r));
    touch_pages(r);
  }
  return Status::ok();
}

Status detail_stream(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                     const std::vector<ReadSlice>* slices, int n_threads,
                     const ReadSelector& select, const PreparedConsumer& consume,
                     uint64_t* n_reads_seen, const BeforeRelease& before_release) {
  Executor& ex = Executor::for_threads(std::max(1, n_threads));
  OrderedStream<PreparedBatch, char> stream(ex, copy_stream_limits(ex));
  size_t next_slice = 0;
  size_t file = 0, batch_idx = 0;
  const auto progress = detail::start_read_progress(readers);
  // Source: the next batch (or slice) in input order; decoding waits for a worker.
  auto next_batch = [&](PreparedBatch& b, uint64_t* bytes, bool* end) -> Status {
    if (slices) {
      if (next_slice == slices->size()) {
        *end = true;
        return Status::ok();
      }
      const ReadSlice& sl = (*slices)[next_slice++];
      b.file = sl.file;
      b.batch_idx = sl.batch_idx;
      b.first_row = sl.first_row;
      b.n_rows = sl.n_rows;
    } else {
      while (file < readers.size() && batch_idx == readers[file]->n_read_batches()) {
        ++file;
        batch_idx = 0;
      }
      if (file == readers.size()) {
        *end = true;
        return Status::ok();
      }
      b.file = file;
      b.batch_idx = batch_idx++;
      b.first_row = 0;
      b.n_rows = ReadSlice::kWholeBatch;
    }
    const pod5::FileReader& reader = *readers[b.file];
    const size_t rows = b.n_rows == ReadSlice::kWholeBatch ? reader.batch_rows(b.batch_idx) : b.n_rows;
    *bytes = estimated_batch_bytes(reader, rows);
    return Status::ok();
  };
  // Sink: every prepared read to `consume` in input order, then the batch's pages released.
  auto consume_batch = [&](PreparedBatch& b, bool*) -> Status {
    const pod5::FileReader& reader = *readers[b.file];
    if (n_reads_seen) *n_reads_seen += b.batch.size();
    for (size_t k = 0; k < b.n_reads; ++k) {
      const PreparedRead& r = b.reads[k];
      ESCPOD_RETURN_IF_ERROR(detail::with_read_context(consume(b.file, reader, b.batch, r), reader,
                                                       r.record.read_id));
    }
    // Signal rows ascend with reads in files from MinKNOW and from writers like ours: release
    // what lies behind so resident memory stays bounded. Writers holding borrowed bytes of a
    // range copy them first.
    Status hook_status;
    pod5::FileReader::ReleaseHook hook;
    if (before_release) {
      hook = [&](const void* lo, const void* hi) { hook_status = before_release(lo, hi); };
    }
    reader.drop_signal_pages_behind(b.batch, hook);
    ESCPOD_RETURN_IF_ERROR(hook_status);
    progress->add(b.batch.size(), detail::input_bytes_of(reader, b.batch.first_read_idx, b.batch.size()));
    return Status::ok();
  };
  return stream.run(
      next_batch, [] { return char{}; },
      [&](PreparedBatch& b, char&) { return prepare_batch(*readers[b.file], select, b); },
      consume_batch);
}

}  // namespace

Status stream_reads(const std::vector<std::unique_ptr<pod5::FileReader>>& readers, int n_threads,
                    const ReadSelector& select, const PreparedConsumer& consume,
                    uint64_t* n_reads_seen, const BeforeRelease& before_release) {
  return detail_stream(readers, nullptr, n_threads, select, consume, n_reads_seen, before_release);
}

Status stream_read_slices(const std::vector<std::unique_ptr<pod5::FileReader>>& readers,
                          const std::vector<ReadSlice>& slices, int n_threads,
                          const ReadSelector& select, const PreparedConsumer& consume,
                          uint64_t* n_reads_seen, const BeforeRelease& before_release) {
  return detail_stream(readers, &slices, n_threads, select, consume, n_reads_seen, before_release);
}

uint64_t repack_size_base(size_t n_run_infos) {
  // Signature, section markers, three Arrow file headers/footers with schemas, the footer
  // flatbuffer, dictionaries: under 16 KiB in our files; run infos under 4 KiB each.
  return 32768 + 8192 * static_cast<uint64_t>(n_run_infos);
}

uint64_t repack_size_per_read(uint64_t signal_bytes, size_t n_chunks) {
  // Signal table: id 16 + offset 8 + samples 4 bytes a chunk, plus padding and one record batch
  // header per signal batch (~1 KiB per 100 chunks). Reads table: ~110 bytes a row plus a batch
  // header per 1000 rows. Doubled for margin.
  return signal_bytes + 64 * static_cast<uint64_t>(n_chunks) + 256;
}

namespace {

// kInvalidArgument when two inputs share a file name (their outputs would collide in out_dir);
// creates out_dir if needed.
Status prepare_repack_outputs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir) {
  std::set<std::string> names;
  for (const auto& in : inputs) {
    if (!names.insert(in.filename().string()).second) {
      return Status::invalid_argument("two inputs are named " + in.filename().string() +
                                      ": their repacked outputs would collide in " + out_dir.string());
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) {
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Status::io_error("cannot create output folder " + out_dir.string() + ": " + ec.message());
  }
  return Status::ok();
}

// Repacks the input `reader` (of path `in`) into one file at `out_path`.
Status repack_whole(const std::vector<std::unique_ptr<pod5::FileReader>>& reader, const std::filesystem::path& in,
                    const std::filesystem::path& out_path, const RepackOptions& options, CopyStats& stats,
                    CopyScratch& scratch) {
  std::error_code ec;
  pod5::WriterOptions wo = options.writer;
  // Replacing the input itself is the point of repacking in place.
  if (std::filesystem::equivalent(in, out_path, ec)) wo.overwrite = true;
  ESCPOD_ASSIGN_OR_RETURN(auto writer, pod5::FileWriter::create(out_path, wo));
  for (const auto& ri : reader[0]->run_infos()) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
  // Files are repacked in parallel; each one streams on its own thread.
  ESCPOD_RETURN_IF_ERROR(stream_reads(
      reader, 1, nullptr,
      [&](size_t, const pod5::FileReader& r, const pod5::ReadBatch& b, const PreparedRead& read) {
        // Chunks are written from the reader's mapping (copied before its pages are released).
        return copy_prepared(r, b, read, *writer, scratch, &stats, pod5::ChunkBytes::kBorrow);
      },
      nullptr, copy_borrowed_by(*writer)));
  return writer->close();
}

// What `read` adds to a repacked file (repack_size_per_read), its signal re-encoded when the
// writer's compression differs from the input's.
uint64_t repacked_read_cost(const pod5::FileReader& r, const PreparedRead& read, const pod5::WriterOptions& writer) {
  uint64_t signal_bytes = 0;
  if (r.info().is_vbz == writer.vbz) {
    for (const auto& c : read.chunks) signal_bytes += c.bytes.size();
  } else {
    // Re-encoded: at most the raw size (VBZ's bound is close to it), plus a margin.
    signal_bytes = read.record.num_samples * 2 + 64 * read.chunks.size() + 64;
  }
  const uint64_t n_chunks = std::max<uint64_t>(
      read.chunks.size(), (read.record.num_samples + writer.max_chunk_samples - 1) /
                              std::max<uint32_t>(1, writer.max_chunk_samples));
  return repack_size_per_read(signal_bytes, n_chunks);
}

// Repacks the input `reader` (of path `in`) into numbered parts in out_dir, each closed (renamed
// into place) before the next starts.
Status repack_split(const std::vector<std::unique_ptr<pod5::FileReader>>& reader, const std::filesystem::path& in,
                    const std::filesystem::path& out_dir, const RepackOptions& options, CopyStats& stats,
                    CopyScratch& scratch) {
  std::unique_ptr<pod5::FileWriter> writer;
  size_t part = 0;
  uint64_t part_reads = 0, part_bytes = 0;
  const uint64_t base = repack_size_base(reader[0]->run_infos().size());
  const std::string stem = in.stem().string();
  auto next_part = [&]() -> Status {
    if (writer) ESCPOD_RETURN_IF_ERROR(writer->close());
    char num[32];
    std::snprintf(num, sizeof num, "_%05zu.pod5", ++part);
    ESCPOD_ASSIGN_OR_RETURN(writer, pod5::FileWriter::create(out_dir / (stem + num), options.writer));
    for (const auto& ri : reader[0]->run_infos()) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
    part_reads = 0;
    part_bytes = base;
    return Status::ok();
  };
  auto consume = [&](size_t, const pod5::FileReader& r, const pod5::ReadBatch& b,
                     const PreparedRead& read) -> Status {
    const uint64_t cost = repacked_read_cost(r, read, options.writer);
    const bool full = part_reads > 0 &&
        ((options.reads_per_file > 0 && part_reads >= options.reads_per_file) ||
         (options.max_file_bytes > 0 && part_bytes + cost > options.max_file_bytes));
    if (!writer || full) {
      if (Status st = next_part(); !st.is_ok()) return st;
    }
    if (options.max_file_bytes > 0 && part_bytes + cost > options.max_file_bytes) {
      log::warn("{}: read {} alone needs about {} bytes, over --max-file-bytes {}; it gets a file of its own",
                in.string(), read.record.read_id.to_string(), part_bytes + cost, options.max_file_bytes);
    }
    ++part_reads;
    part_bytes += cost;
    return copy_prepared(r, b, read, *writer, scratch, &stats, pod5::ChunkBytes::kBorrow);
  };
  const Status streamed = stream_reads(reader, 1, nullptr, consume, nullptr,
                                       [&](const void* lo, const void* hi) {
                                         return writer ? writer->copy_borrowed_in(lo, hi) : Status::ok();
                                       });
  ESCPOD_RETURN_IF_ERROR(streamed);
  if (!writer) ESCPOD_RETURN_IF_ERROR(next_part());  // an input without reads: one empty part
  return writer->close();
}

}  // namespace

Status repack_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const RepackOptions& options,
                    CopyStats* total) {
  ESCPOD_RETURN_IF_ERROR(prepare_repack_outputs(inputs, out_dir));
  // Files are repacked in parallel, each by its own stream_reads, whose progress joins this one:
  // bytes are known now, reads as each file is opened.
  std::error_code ec;
  uint64_t n_bytes = 0;
  for (const auto& in : inputs) {
    const auto size = std::filesystem::file_size(in, ec);
    if (!ec) n_bytes += size;
  }
  progress::Task progress(0, n_bytes);
  std::mutex mutex;  // guards *total
  auto repack_one = [&](const std::filesystem::path& in) -> Status {
    std::vector<std::unique_ptr<pod5::FileReader>> reader(1);
    ESCPOD_ASSIGN_OR_RETURN(reader[0], pod5::FileReader::open(in));
    const bool split = options.reads_per_file > 0 || options.max_file_bytes > 0;
    const auto out_path = out_dir / in.filename();
    CopyStats stats;
    CopyScratch scratch;
    if (!split) {
      ESCPOD_RETURN_IF_ERROR(repack_whole(reader, in, out_path, options, stats, scratch));
    } else {
      ESCPOD_RETURN_IF_ERROR(repack_split(reader, in, out_dir, options, stats, scratch));
    }
    log::debug("repacked {} -> {}: {} reads", in.string(), out_path.string(), stats.n_reads);
    std::lock_guard lock(mutex);
    if (total) {
      total->n_reads += stats.n_reads;
      total->n_samples += stats.n_samples;
      total->n_chunks_copied += stats.n_chunks_copied;
      total->n_reads_reencoded += stats.n_reads_reencoded;
    }
    return Status::ok();
  };
  // Files are repacked in parallel; the error returned is the first failing input's, in input
  // order, and inputs not yet started are skipped once one fails.
  return parallel_for(Executor::for_threads(std::max(1, options.n_threads)), inputs.size(),
                      [&](size_t k) { return repack_one(inputs[k]); });
}

}  // namespace escpod::pipeline
