#include "escpod/pod5/recover.hpp"

#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>

#include <cstring>
#include <string_view>

#include "pod5/arrow_types.hpp"
#include "pod5/container.hpp"
#include "pod5/recovered_tables.hpp"

namespace escpod::pod5 {
namespace {

constexpr uint8_t kArrowMagic[8] = {'A', 'R', 'R', 'O', 'W', '1', 0, 0};
constexpr size_t kMarkerBytes = 16;

enum class TableKind { kUnknown, kSignal, kReads, kRunInfo };

TableKind classify(const arrow::Schema& schema) {
  if (schema.GetFieldIndex("read_number") >= 0) return TableKind::kReads;
  if (schema.GetFieldIndex("acquisition_id") >= 0) return TableKind::kRunInfo;
  if (schema.GetFieldIndex("samples") >= 0 && schema.GetFieldIndex("signal") >= 0) {
    return TableKind::kSignal;
  }
  return TableKind::kUnknown;
}

struct StreamResult {
  std::shared_ptr<arrow::Schema> schema;
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  int64_t end = 0;  // absolute offset after the last complete message kept
};

bool is_end_of_stream(const arrow::Buffer& whole, int64_t at) {
  static constexpr uint8_t kEos[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  static constexpr uint8_t kLegacyEos[4] = {0, 0, 0, 0};
  const int64_t left = whole.size() - at;
  return (left >= 8 && std::memcmp(whole.data() + at, kEos, 8) == 0) ||
         (left >= 4 && std::memcmp(whole.data() + at, kLegacyEos, 4) == 0);
}

// Reads the Arrow IPC file starting at `start` (its ARROW1 header) as a stream, message by
// message, keeping every record batch that is complete and passes full validation, and stopping
// at the end-of-stream marker, the end of the bytes, or the first message that is cut or damaged.
StreamResult scan_stream(const std::shared_ptr<arrow::Buffer>& whole, int64_t start,
                         TableScan& scan) {
  StreamResult out;
  out.end = start;
  const int64_t limit = whole->size();
  if (limit - start < 8 || std::memcmp(whole->data() + start, kArrowMagic, 8) != 0) {
    scan.stop = limit - start < 8 ? "cut inside its Arrow header" : "no Arrow header";
    return out;
  }
  auto input = std::make_shared<arrow::io::BufferReader>(
      arrow::SliceBuffer(whole, start + 8, limit - start - 8));
  auto options = arrow::ipc::IpcReadOptions::Defaults();
  options.use_threads = false;
  auto reader = arrow::ipc::RecordBatchStreamReader::Open(input, options);
  if (!reader.ok()) {
    scan.stop = "schema unreadable (" + reader.status().message() + ")";
    return out;
  }
  out.schema = (*reader)->schema();
  scan.found = true;
  auto position = [&] {
    auto at = input->Tell();
    return start + 8 + (at.ok() ? *at : 0);
  };
  out.end = position();
  for (;;) {
    std::shared_ptr<arrow::RecordBatch> batch;
    auto st = (*reader)->ReadNext(&batch);
    if (!st.ok()) {
      scan.stop = "record batch " + std::to_string(out.batches.size()) + " cut or damaged (" +
                  st.message() + ")";
      break;
    }
    if (!batch) {
      if (is_end_of_stream(*whole, out.end)) {
        scan.complete = true;
      } else {
        scan.stop = "ends after record batch " + std::to_string(out.batches.size()) +
                    " without its end-of-stream marker";
      }
      break;
    }
    st = batch->ValidateFull();
    if (!st.ok()) {
      scan.stop = "record batch " + std::to_string(out.batches.size()) + " fails validation (" +
                  st.message() + ")";
      break;
    }
    scan.n_rows += static_cast<uint64_t>(batch->num_rows());
    out.batches.push_back(std::move(batch));
    out.end = position();
  }
  scan.n_batches = out.batches.size();
  return out;
}

// The next section marker at or after `from` (8-aligned, followed by an Arrow header or the
// footer magic), or -1.
int64_t find_marker(const arrow::Buffer& whole, int64_t from, const uint8_t* marker) {
  const uint8_t* data = whole.data();
  const int64_t size = whole.size();
  int64_t p = (from + 7) / 8 * 8;
  while (p + static_cast<int64_t>(kMarkerBytes) + 8 <= size) {
    const void* hit = memmem(data + p, static_cast<size_t>(size - p), marker, kMarkerBytes);
    if (!hit) return -1;
    const int64_t at = static_cast<const uint8_t*>(hit) - data;
    if (at % 8 == 0 && at + static_cast<int64_t>(kMarkerBytes) + 8 <= size) {
      const uint8_t* next = data + at + kMarkerBytes;
      if (std::memcmp(next, kArrowMagic, 8) == 0 || std::memcmp(next, detail::kFooterMagic, 8) == 0) {
        return at;
      }
    }
    p = at + 1;
  }
  return -1;
}

struct Mapped {
  std::shared_ptr<arrow::io::MemoryMappedFile> file;
  std::shared_ptr<arrow::Buffer> bytes;
};

Result<Mapped> map_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return Status::not_found(path.string() + ": no such file");
    return Status::io_error(path.string() + ": " + ec.message());
  }
  Mapped m;
  if (size == 0) {
    m.bytes = std::make_shared<arrow::Buffer>(nullptr, 0);
    return m;
  }
  auto opened = arrow::io::MemoryMappedFile::Open(path.string(), arrow::io::FileMode::READ);
  if (!opened.ok()) return detail::from_arrow(opened.status(), path.string() + ": cannot map");
  m.file = *opened;
  auto whole = m.file->ReadAt(0, static_cast<int64_t>(size));
  if (!whole.ok()) return detail::from_arrow(whole.status(), path.string() + ": cannot map");
  m.bytes = *whole;
  return m;
}

std::string metadata(const arrow::Schema& schema, const char* key) {
  if (!schema.metadata()) return {};
  auto v = schema.metadata()->Get(key);
  return v.ok() ? *v : std::string();
}

struct Found {
  TableScan scan;
  StreamResult stream;
};

// Keeps the better of two scans of the same table (more rows; the first on a tie).
void keep_better(Found& slot, Found&& candidate) {
  if (!candidate.scan.found) {
    if (!slot.scan.found && slot.scan.source.empty()) slot = std::move(candidate);
    return;
  }
  if (!slot.scan.found || candidate.scan.n_rows > slot.scan.n_rows) slot = std::move(candidate);
}

}  // namespace

const char* read_signal_state_name(ReadSignalState state) {
  switch (state) {
    case ReadSignalState::kComplete: return "complete";
    case ReadSignalState::kMissing: return "signal incomplete (rows past the salvaged signal)";
    case ReadSignalState::kDamaged: return "signal damaged (a row does not decode or its sample count disagrees)";
    case ReadSignalState::kNotOwned: return "signal row owned by another read";
  }
  return "?";
}

namespace {

// The best scan found of each table.
struct FoundTables {
  Found signal, reads, run_info;
};

// kCorrupt unless `bytes` (the file at `path`) start with the POD5 signature and reach past the
// first section marker.
Status check_recoverable(const arrow::Buffer& bytes, const std::filesystem::path& path) {
  const int64_t size = bytes.size();
  if (size < 8 || std::memcmp(bytes.data(), detail::kSignature, 8) != 0) {
    return Status::corrupt(path.string() + ": not a POD5 file (no POD5 signature at the start)");
  }
  if (size < 24 + 8) {
    return Status::corrupt(path.string() + ": nothing to recover (" + std::to_string(size) +
                           " bytes: cut before the signal table)");
  }
  return Status::ok();
}

// Scans the embedded tables of the main file (`main`, whose section marker is `marker`) into
// `found`; tables that are no POD5 table are noted in `out`.
void scan_main_file(const Mapped& main, const std::filesystem::path& path, const uint8_t* marker,
                    FoundTables& found, DamagedFile& out) {
  const arrow::Buffer& bytes = *main.bytes;
  const int64_t size = bytes.size();
  // Embedded tables follow one another, each after a section marker; the first one at 24.
  int64_t at = 24;
  bool first = true;
  while (at >= 0 && at < size) {
    Found f;
    f.scan.source = path;
    f.stream = scan_stream(main.bytes, at, f.scan);
    // Where the next table starts bounds what this one could have used.
    const int64_t next = find_marker(bytes, f.stream.end, marker);
    if (!f.scan.complete) f.scan.bytes_unused = static_cast<uint64_t>((next >= 0 ? next : size) - f.stream.end);
    if (!f.scan.found && !first && f.scan.stop == "no Arrow header") break;  // the footer
    const TableKind kind = f.scan.found ? classify(*f.stream.schema) : first ? TableKind::kSignal
                                                                             : TableKind::kUnknown;
    switch (kind) {
      case TableKind::kSignal: keep_better(found.signal, std::move(f)); break;
      case TableKind::kReads: keep_better(found.reads, std::move(f)); break;
      case TableKind::kRunInfo: keep_better(found.run_info, std::move(f)); break;
      case TableKind::kUnknown:
        out.notes.push_back("table at offset " + std::to_string(at) + " skipped: " +
                            (f.scan.found ? "not a POD5 table" : f.scan.stop));
        out.bytes_unused += f.scan.bytes_unused;
        break;
    }
    first = false;
    at = next >= 0 ? next + static_cast<int64_t>(kMarkerBytes) : -1;
  }
}

// Scans the side file `side_path` of `what` (reads or run infos) into `slot`, unless it is
// empty or, looked up rather than given (`explicit_sides` false), absent. Its mapping is kept in
// `side_maps` (the batches point into it).
Status scan_side_file(const std::filesystem::path& side_path, bool explicit_sides, const char* what, Found& slot,
                      DamagedFile& out, std::vector<Mapped>& side_maps) {
  if (side_path.empty() || (!explicit_sides && !std::filesystem::exists(side_path))) {
    return Status::ok();
  }
  out.kind = DamageKind::kUnfinished;
  out.side_files.push_back(side_path);
  ESCPOD_ASSIGN_OR_RETURN(Mapped m, map_file(side_path));
  Found f;
  f.scan.source = side_path;
  if (m.bytes->size() == 0) {
    f.scan.stop = "empty (the writer had flushed no " + std::string(what) + " yet)";
    out.notes.push_back(side_path.filename().string() + " is empty: the writer was killed before it flushed any " + what);
  } else {
    f.stream = scan_stream(m.bytes, 0, f.scan);
    if (!f.scan.complete) f.scan.bytes_unused = static_cast<uint64_t>(m.bytes->size() - f.stream.end);
    if (f.scan.found && classify(*f.stream.schema) == TableKind::kSignal) {
      return Status::corrupt(side_path.string() + ": holds a signal table, not " + what);
    }
  }
  keep_better(slot, std::move(f));
  side_maps.push_back(std::move(m));
  return Status::ok();
}

// A killed writer's side files: reads and run-info batches flushed so far. Given (both paths
// non-null) or looked up beside `path` by the file identifier `file_id`.
Status scan_side_files(const std::filesystem::path& path, const std::string& file_id,
                       const std::filesystem::path* reads_path, const std::filesystem::path* run_info_path,
                       FoundTables& found, DamagedFile& out, std::vector<Mapped>& side_maps) {
  const bool explicit_sides = reads_path != nullptr;
  if (!explicit_sides && (file_id.empty() || file_id.find('/') != std::string::npos)) return Status::ok();
  auto beside = [&](const char* suffix) {
    return path.parent_path() / ("." + file_id + suffix);
  };
  ESCPOD_RETURN_IF_ERROR(scan_side_file(explicit_sides ? *reads_path : beside(".tmp-reads"), explicit_sides,
                                        "reads", found.reads, out, side_maps));
  return scan_side_file(explicit_sides ? *run_info_path : beside(".tmp-run-info"), explicit_sides, "run infos",
                        found.run_info, out, side_maps);
}

// What FileReader::open_recovered reads: the tables found, the main file's mapping, and the
// identity its signal table's schema records.
detail::RecoveredTables recovered_tables(const std::filesystem::path& path, const Mapped& main,
                                         const std::string& file_id, FoundTables& found) {
  const auto& sig_schema = *found.signal.stream.schema;
  detail::RecoveredTables tables;
  tables.path = path;
  tables.file_size = static_cast<uint64_t>(main.bytes->size());
  tables.main = main.file;
  tables.file_identifier = file_id;
  tables.software = metadata(sig_schema, "MINKNOW:software");
  tables.pod5_version = metadata(sig_schema, "MINKNOW:pod5_version");
  tables.signal_schema = found.signal.stream.schema;
  tables.signal = std::move(found.signal.stream.batches);
  if (found.reads.scan.found) {
    tables.reads_schema = found.reads.stream.schema;
    tables.reads = std::move(found.reads.stream.batches);
  }
  if (found.run_info.scan.found) {
    tables.run_info_schema = found.run_info.stream.schema;
    tables.run_info = std::move(found.run_info.stream.batches);
  }
  return tables;
}

// Side paths null: looked up beside `path` by the file identifier.
Result<DamagedFile> open_damaged_impl(const std::filesystem::path& path,
                                      const std::filesystem::path* reads_path,
                                      const std::filesystem::path* run_info_path) {
  ESCPOD_ASSIGN_OR_RETURN(Mapped main, map_file(path));
  ESCPOD_RETURN_IF_ERROR(check_recoverable(*main.bytes, path));
  uint8_t marker[kMarkerBytes];
  std::memcpy(marker, main.bytes->data() + 8, kMarkerBytes);

  DamagedFile out;
  FoundTables found;
  scan_main_file(main, path, marker, found, out);
  if (!found.signal.scan.found) {
    return Status::corrupt(path.string() + ": nothing to recover: the signal table's schema is " +
                           (found.signal.scan.stop.empty() ? "missing" : found.signal.scan.stop));
  }
  const std::string file_id = metadata(*found.signal.stream.schema, "MINKNOW:file_identifier");

  std::vector<Mapped> side_maps;  // kept until the reader is open: its batches point into them
  out.kind = DamageKind::kTruncated;
  ESCPOD_RETURN_IF_ERROR(scan_side_files(path, file_id, reads_path, run_info_path, found, out, side_maps));

  ESCPOD_ASSIGN_OR_RETURN(out.reader, FileReader::open_recovered(recovered_tables(path, main, file_id, found)));
  out.signal = std::move(found.signal.scan);
  out.reads = std::move(found.reads.scan);
  out.run_info = std::move(found.run_info.scan);
  out.bytes_unused += out.signal.bytes_unused + out.reads.bytes_unused + out.run_info.bytes_unused;
  return out;
}

}  // namespace

Result<DamagedFile> open_damaged(const std::filesystem::path& path) {
  return open_damaged_impl(path, nullptr, nullptr);
}

Result<DamagedFile> open_damaged(const std::filesystem::path& path,
                                 const std::filesystem::path& reads_side,
                                 const std::filesystem::path& run_info_side) {
  return open_damaged_impl(path, &reads_side, &run_info_side);
}

ReadSignalState check_read_signal(const FileReader& file, const ReadBatch& batch, size_t i,
                                  VbzCodec& codec, std::vector<int16_t>& samples) {
  auto info = file.signal_table_info();
  if (!info.is_ok()) return ReadSignalState::kMissing;
  const ReadId& id = batch.read_id[i];
  static const ReadId kZero{};
  uint64_t total = 0;
  for (uint64_t row : batch.rows_of(i)) {
    if (row >= info->n_rows) return ReadSignalState::kMissing;
    auto chunk = file.signal_chunk(row);
    if (!chunk.is_ok()) return ReadSignalState::kDamaged;
    if (chunk->read_id != id && chunk->read_id != kZero) return ReadSignalState::kNotOwned;
    // 64 Mi samples (an hour at 18 kHz) in one chunk is damage, not data: never allocate for it.
    if (chunk->n_samples > (1u << 26)) return ReadSignalState::kDamaged;
    samples.resize(chunk->n_samples);
    if (!file.read_signal({&row, 1}, samples, codec).is_ok()) return ReadSignalState::kDamaged;
    total += chunk->n_samples;
  }
  if (total != batch.num_samples[i]) return ReadSignalState::kDamaged;
  return ReadSignalState::kComplete;
}

}  // namespace escpod::pod5
