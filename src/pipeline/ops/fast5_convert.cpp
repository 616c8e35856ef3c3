#include "escpod/pipeline/ops/fast5_convert.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "escpod/core/executor.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/ordered_stream.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/fast5/fast5_file.hpp"
#include "escpod/pod5/inputs.hpp"
#include "escpod/pod5/vbz.hpp"

namespace escpod::pipeline {

namespace fs = std::filesystem;

Result<std::vector<fs::path>> collect_fast5_inputs(const std::vector<std::string>& inputs) {
  return pod5::collect_inputs(inputs, ".fast5", "FAST5");
}

namespace {

// One read on its way from the FAST5 reader to the POD5 writer: a record of the engine's ring,
// reused (its buffers keep their capacity from one read to the next).
struct Item {
  size_t file_idx = 0;
  fast5::Fast5Read read;
  std::vector<int16_t> samples;             // decoded (kept for an uncompressed writer)
  std::vector<std::vector<uint8_t>> cells;  // POD5 VBZ chunks
  std::vector<pod5::SignalChunk> chunks;
};

struct Worker {
  pod5::VbzCodec codec;
};

Result<fs::path> output_path_for(const fs::path& input, const fs::path& output,
                                 const Fast5ConvertOptions& options) {
  if (!options.one_to_one) {
    std::error_code ec;
    if (fs::is_directory(output, ec)) return output / "output.pod5";
    return output;
  }
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(*options.one_to_one, ec);
  const fs::path in = fs::weakly_canonical(input, ec);
  fs::path rel = in.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") {
    return Status::usage("--one-to-one " + options.one_to_one->string() +
                                    " must be a parent folder of every input; " +
                                    input.string() + " is not under it");
  }
  rel.replace_extension(".pod5");
  return output / rel;
}

// Every input's output, resolved up front so that naming errors come before any work.
Result<std::vector<fs::path>> output_paths_for(const std::vector<fs::path>& inputs, const fs::path& output,
                                               const Fast5ConvertOptions& options) {
  std::vector<fs::path> out_paths;
  for (const auto& in : inputs) {
    ESCPOD_ASSIGN_OR_RETURN(fs::path p, output_path_for(in, output, options));
    out_paths.push_back(std::move(p));
  }
  if (options.one_to_one) {
    std::set<fs::path> distinct(out_paths.begin(), out_paths.end());
    if (distinct.size() != out_paths.size()) {
      return Status::usage("two inputs map to the same output under --one-to-one");
    }
  }
  return out_paths;
}

// Decodes the read's signal into item.samples and, for a VBZ writer, compresses it into POD5
// chunks of at most max_chunk samples (item.chunks, over item.cells). `input` names the file.
Status encode_read(Item& item, Worker& w, const fs::path& input, const pod5::WriterOptions& writer,
                   uint32_t max_chunk) {
  const std::string what = input.string() + ": read " + item.read.record.read_id.to_string();
  ESCPOD_RETURN_IF_ERROR(fast5::decode_signal(item.read.signal, item.samples, what));
  item.chunks.clear();
  if (!writer.vbz) return Status::ok();
  const size_t n = item.samples.size();
  const size_t n_chunks = (n + max_chunk - 1) / max_chunk;
  if (item.cells.size() < n_chunks) item.cells.resize(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    const size_t lo = c * max_chunk;
    const size_t len = std::min<size_t>(max_chunk, n - lo);
    if (Status st = w.codec.compress(std::span<const int16_t>(item.samples.data() + lo, len), item.cells[c],
                                     writer.zstd_level);
        !st.is_ok()) {
      return Status::internal(what + ": " + st.message());
    }
    item.chunks.push_back(pod5::SignalChunk{item.cells[c], static_cast<uint32_t>(len), item.read.record.read_id});
  }
  return Status::ok();
}

// A conversion's outputs (the engine's sink only): each opened when its first read comes (its
// folder made; listed in stats.outputs), committed all together at the end. With --one-to-one
// an output is finished as soon as the next one starts.
class ConvertOutputs {
 public:
  ConvertOutputs(const std::vector<fs::path>& paths, const Fast5ConvertOptions& options, Fast5ConvertStats& stats)
      : m_paths(paths), m_options(options), m_stats(stats) {}

  // The writer of input idx's output.
  Result<pod5::FileWriter*> writer_for(size_t idx) {
    const fs::path& p = m_paths[idx];
    if (m_current != nullptr && p == m_current_path) return m_current;
    if (m_current != nullptr && m_options.one_to_one) ESCPOD_RETURN_IF_ERROR(m_current->finish());
    auto it = m_writers.find(p);
    if (it == m_writers.end()) {
      std::error_code ec;
      if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
      ESCPOD_ASSIGN_OR_RETURN(auto w, pod5::FileWriter::create(p, m_options.writer));
      it = m_writers.emplace(p, std::move(w)).first;
      m_stats.outputs.push_back(p);
    }
    m_current = it->second.get();
    m_current_path = p;
    return m_current;
  }
  bool empty() const { return m_writers.empty(); }
  // All or nothing: every output finished before any is renamed into place.
  Status commit_all() {
    for (auto& [p, w] : m_writers) {
      if (w.get() == m_current || !m_options.one_to_one) ESCPOD_RETURN_IF_ERROR(w->finish());
    }
    for (auto& [p, w] : m_writers) ESCPOD_RETURN_IF_ERROR(w->commit());
    return Status::ok();
  }

 private:
  const std::vector<fs::path>& m_paths;
  const Fast5ConvertOptions& m_options;
  Fast5ConvertStats& m_stats;
  std::map<fs::path, std::unique_ptr<pod5::FileWriter>> m_writers;  // open or finished, by path
  pod5::FileWriter* m_current = nullptr;
  fs::path m_current_path;
};

}  // namespace

Status convert_fast5(const std::vector<fs::path>& inputs, const fs::path& output,
                     const Fast5ConvertOptions& options, Fast5ConvertStats* stats) {
  const int threads = std::max(1, options.n_threads);
  const size_t n_tokens = static_cast<size_t>(threads) * 2 + 2;
  ESCPOD_ASSIGN_OR_RETURN(const std::vector<fs::path> out_paths, output_paths_for(inputs, output, options));

  // Reader state (the engine's source only).
  size_t file_idx = 0, read_idx = 0;
  std::unique_ptr<fast5::Fast5File> file;

  // Writer state (the engine's sink only).
  Fast5ConvertStats local;
  ConvertOutputs outputs(out_paths, options, local);
  std::set<std::pair<pod5::FileWriter*, std::string>> run_infos_added;
  local.n_files = inputs.size();
  const uint32_t max_chunk = std::max<uint32_t>(1, options.writer.max_chunk_samples);

  // Progress: reads against the totals of the files opened so far, bytes against all inputs.
  uint64_t total_bytes = 0;
  const std::vector<uint64_t> input_bytes = pod5::file_sizes(inputs, &total_bytes);
  progress::Task task(0, total_bytes, {.label = "convert fast5", .unit = "reads"});

  // Source: the next read of the inputs, in order (files opened one after another).
  auto next_read = [&](Item& item, uint64_t* cost, bool* end) -> Status {
    while (file_idx < inputs.size()) {
      if (!file) {
        ESCPOD_ASSIGN_OR_RETURN(file, fast5::Fast5File::open(inputs[file_idx]));
        read_idx = 0;
        task.add_totals(file->n_reads(), 0);
        if (file->n_reads() == 0) log::warn("{}: no reads", inputs[file_idx].string());
      }
      if (read_idx < file->n_reads()) {
        item.file_idx = file_idx;
        ESCPOD_RETURN_IF_ERROR(file->read(read_idx++, item.read));
        *cost = 4 * item.read.record.num_samples + 1;  // stored signal + decoded samples, about
        return Status::ok();
      }
      file.reset();
      task.add(0, input_bytes[file_idx]);
      ++file_idx;
    }
    *end = true;
    return Status::ok();
  };
  // Work: decode the signal and compress its POD5 chunks.
  auto encode = [&](Item& item, Worker& w) -> Status {
    return encode_read(item, w, inputs[item.file_idx], options.writer, max_chunk);
  };
  // Sink: the read to its output, in input order.
  auto write = [&](Item& item, bool*) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(pod5::FileWriter * writer, outputs.writer_for(item.file_idx));
    const auto& rec = item.read.record;
    Status s;
    if (run_infos_added.emplace(writer, rec.run_info).second) s = writer->add_run_info(*item.read.run_info);
    if (s.is_ok()) {
      s = options.writer.vbz ? writer->add_read_chunks(rec, item.chunks, pod5::ChunkBytes::kCopy)
                             : writer->add_read(rec, item.samples);
    }
    if (!s.is_ok()) {
      return Status(s.code(), inputs[item.file_idx].string() + ": read " + rec.read_id.to_string() + ": " +
                                  s.message());
    }
    ++local.n_reads;
    task.add(1);
    local.n_samples += item.samples.size();
    return Status::ok();
  };
  Executor& ex = Executor::for_threads(threads);
  OrderedStream<Item, Worker> stream(
      ex, {.max_bytes = std::max<uint64_t>(uint64_t{256} << 20, static_cast<uint64_t>(threads) * (uint64_t{32} << 20)),
           .max_items = n_tokens});
  const Status streamed = stream.run(next_read, [] { return Worker{}; }, encode, write);
  if (!streamed.is_ok()) return streamed;  // writers destroyed: staging files removed
  if (outputs.empty()) return Status::invalid_argument("the inputs hold no reads; nothing written");
  ESCPOD_RETURN_IF_ERROR(outputs.commit_all());
  if (stats) *stats = std::move(local);
  return Status::ok();
}

}  // namespace escpod::pipeline
