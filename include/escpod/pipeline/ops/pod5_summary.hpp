// `escpod summary`: what a set of POD5 files holds, from the reads tables alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pipeline {

struct LengthStats {  // read lengths in samples
  uint64_t min = 0, max = 0, median = 0, n50 = 0;
  double mean = 0.0;
};

struct Pod5Summary {
  uint64_t n_files = 0;
  std::vector<std::pair<std::string, std::string>> skipped;  // unreadable file -> reason
  std::vector<std::string> warnings;                         // per file, prefixed by its path
  uint64_t n_reads = 0;
  uint64_t n_samples = 0;
  double duration_s = 0.0;  // sum over reads of num_samples / sample_rate
  LengthStats lengths;
  uint64_t n_channels = 0;  // distinct channels
  std::map<std::string, uint64_t> end_reasons;
  std::map<std::string, uint64_t> pod5_versions;  // footer version -> files
};

// Summarises `files` on up to n_threads threads. Unreadable files are skipped with their reason
// (the caller decides whether that is an error).
Pod5Summary summarize_pod5(const std::vector<std::filesystem::path>& files, int n_threads);

// Length statistics of `lengths` (sorted in place). N50: the length L such that reads of length
// >= L hold at least half of all samples.
LengthStats length_stats(std::vector<uint64_t>& lengths);

// The summary as JSON text (stable keys, for scripts).
std::string summary_json(const Pod5Summary& s);

}  // namespace escpod::pipeline
