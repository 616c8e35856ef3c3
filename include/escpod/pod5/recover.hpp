// Salvaging what a damaged or unfinished POD5 file still holds.
//
// Two kinds of damage are understood:
//  - an unfinished file left by a killed official writer: the main file holds the signature and
//    the signal table's Arrow stream written so far (no footer); hidden side files beside it,
//    `.<file_identifier>.tmp-reads` and `.<file_identifier>.tmp-run-info`, hold the reads and
//    run-info batches flushed so far (possibly none);
//  - a finished file cut short or damaged: no footer, a damaged footer, or a cut anywhere inside
//    the signal, run-info or reads table.
// open_damaged() scans every embedded Arrow table message by message (section markers locate
// the tables when the footer cannot), keeps each table's complete, valid record batches in file
// order, and returns a FileReader over them. Whether a read is complete is then decided per read
// (check_read_signal): all its signal rows present, owned by it and decodable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"

namespace escpod::pod5 {

enum class DamageKind {
  kUnfinished,  // killed writer: signal in the main file, reads/run infos in side files
  kTruncated,   // finished file cut short or with a damaged footer (tables in the main file)
};

// What scanning one embedded table found.
struct TableScan {
  bool found = false;          // its schema could be read
  std::filesystem::path source;  // the file it was read from
  uint64_t n_batches = 0;      // complete, valid record batches kept
  uint64_t n_rows = 0;         // rows in them
  bool complete = false;       // reached its end-of-stream marker
  uint64_t bytes_unused = 0;   // bytes after its last complete message (a cut or damage)
  std::string stop;            // why scanning stopped early ("" when complete)
};

struct DamagedFile {
  std::unique_ptr<FileReader> reader;  // over the salvaged batches
  DamageKind kind = DamageKind::kTruncated;
  TableScan signal, run_info, reads;
  std::vector<std::filesystem::path> side_files;  // the killed writer's files that were used
  uint64_t bytes_unused = 0;  // sum over the tables
  std::vector<std::string> notes;  // what the scan noticed, for the report
};

// Scans `path` (a file that FileReader::open refuses) and the writer's side files beside it.
// kNotFound / kIoError if it cannot be read, kCorrupt when it is not a POD5 at all (no
// signature) or holds no readable signal-table schema. Never reads outside the files.
Result<DamagedFile> open_damaged(const std::filesystem::path& path);
// The same with the killed writer's side files named explicitly (an empty path: none; a named
// file that does not exist is kNotFound), e.g. when they were moved away from the main file.
Result<DamagedFile> open_damaged(const std::filesystem::path& path,
                                 const std::filesystem::path& reads_side,
                                 const std::filesystem::path& run_info_side);

enum class ReadSignalState {
  kComplete,
  kMissing,   // a signal row lies beyond the salvaged signal (the file was cut before it)
  kDamaged,   // a signal row does not decode, or holds fewer/more samples than the read says
  kNotOwned,  // a signal row records another read as its owner
};
// Short text for a state, e.g. "signal incomplete".
const char* read_signal_state_name(ReadSignalState state);

// Checks read `i` of `batch` (of `file`): every signal row present, recorded as this read's (or
// with a zero id, as old writers left them), decodable, and the samples summing to num_samples.
// `codec` and `samples` are the caller's scratch. Thread-safe for distinct scratch.
ReadSignalState check_read_signal(const FileReader& file, const ReadBatch& batch, size_t i,
                                  VbzCodec& codec, std::vector<int16_t>& samples);

}  // namespace escpod::pod5
