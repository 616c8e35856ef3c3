// Recovering damaged or unfinished POD5 files (escpod recover): every reads row whose signal is
// complete is written to a new, valid POD5, and what could not be saved is accounted for.
// See pod5/recover.hpp for the kinds of damage understood and how tables are salvaged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_writer.hpp"

namespace escpod::pipeline {

struct RecoverOptions {
  pod5::WriterOptions writer;  // writer.vbz: the output's compression (chunks re-encoded if needed)
  // Files of the same run to take run infos from, by acquisition id, when the damaged file
  // lacks the run info its reads name. A needed id that none of them holds is an error.
  std::vector<std::filesystem::path> run_info_from;
};

struct RecoverReport {
  std::filesystem::path input;
  std::filesystem::path output;       // empty when nothing was written
  bool intact = false;                // the input opened normally: nothing to do
  std::string kind;                   // "unfinished (killed writer)" or "truncated or damaged"
  uint64_t n_reads_recovered = 0;
  uint64_t n_samples_recovered = 0;
  uint64_t n_signal_rows_found = 0;   // complete signal rows salvaged
  uint64_t n_reads_rows_found = 0;    // reads rows salvaged (recovered or lost below)
  std::map<std::string, uint64_t> lost;  // reason -> reads lost for it
  uint64_t bytes_unused = 0;          // input bytes after the last complete message of a table
  std::vector<std::string> notes;     // per-table scan results, side files used
  std::vector<std::string> run_infos_filled;  // acquisition ids taken from run_info_from
};

// Recovers `input` into `output` (staged and renamed into place). An intact input is reported
// (intact = true) and nothing is written; so is an input with no recoverable read (output
// empty). kAlreadyExists when output exists and !writer.overwrite; kNotFound naming the
// acquisition id when run_info_from lacks a needed run info; kCorrupt when the input is not a
// POD5 or holds no readable signal table.
Result<RecoverReport> recover_file(const std::filesystem::path& input,
                                   const std::filesystem::path& output,
                                   const RecoverOptions& options);

// Where recover writes by default: `<stem>_recovered.pod5` beside the input, or in out_dir.
std::filesystem::path recovered_path(const std::filesystem::path& input,
                                     const std::filesystem::path& out_dir = {});

// A human-readable report (several lines).
std::string format_recover_report(const RecoverReport& report);

}  // namespace escpod::pipeline
