#include "escpod/pipeline/ops/pod5_summary.hpp"

#include <nlohmann/json.hpp>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <set>

#include "escpod/pod5/file_reader.hpp"

namespace escpod::pipeline {

LengthStats length_stats(std::vector<uint64_t>& lengths) {
  LengthStats s;
  if (lengths.empty()) return s;
  std::sort(lengths.begin(), lengths.end());
  s.min = lengths.front();
  s.max = lengths.back();
  const size_t n = lengths.size();
  s.median = n % 2 ? lengths[n / 2] : (lengths[n / 2 - 1] + lengths[n / 2]) / 2;
  const uint64_t total = std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
  s.mean = static_cast<double>(total) / static_cast<double>(n);
  uint64_t running = 0;
  for (size_t k = n; k-- > 0;) {
    running += lengths[k];
    if (2 * running >= total) {
      s.n50 = lengths[k];
      break;
    }
  }
  return s;
}

Pod5Summary summarize_pod5(const std::vector<std::filesystem::path>& files, int n_threads) {
  Pod5Summary out;
  std::mutex mutex;
  std::vector<uint64_t> lengths;
  std::set<uint32_t> channels;
  // Per-file failures are kept in `out.skipped` (the loop itself never fails).
  (void)parallel_for(Executor::for_threads(std::max(1, n_threads)), files.size(), [&](size_t k) {
    auto opened = pod5::FileReader::open(files[k]);
    if (!opened.is_ok()) {
      std::lock_guard lock(mutex);
      out.skipped.emplace_back(files[k].string(), opened.status().message());
      return;
    }
    const pod5::FileReader& file = **opened;
    std::vector<uint64_t> local_lengths;
    std::set<uint32_t> local_channels;
    std::map<std::string, uint64_t> local_reasons;
    double duration = 0.0;
    for (size_t b = 0; b < file.n_read_batches(); ++b) {
      auto batch = file.read_batch(b);
      if (!batch.is_ok()) {
        std::lock_guard lock(mutex);
        out.skipped.emplace_back(files[k].string(), batch.status().message());
        return;
      }
      for (size_t i = 0; i < batch->size(); ++i) {
        local_lengths.push_back(batch->num_samples[i]);
        local_channels.insert(batch->channel[i]);
        ++local_reasons[file.end_reasons()[static_cast<size_t>(batch->end_reason_idx[i])]];
        const auto* ri = file.find_run_info(file.run_info_ids()[static_cast<size_t>(batch->run_info_idx[i])]);
        if (ri && ri->sample_rate > 0) {
          duration += static_cast<double>(batch->num_samples[i]) / ri->sample_rate;
        }
      }
    }
    std::lock_guard lock(mutex);
    ++out.n_files;
    ++out.pod5_versions[file.info().pod5_version];
    for (const auto& w : file.info().warnings) out.warnings.push_back(files[k].string() + ": " + w);
    if (file.info().read_table_version < pod5::ReadTableVersion::kV3) {
      out.warnings.push_back(files[k].string() + ": written by pod5 " + file.info().pod5_version +
                             " (an old layout; `escpod repack` updates it)");
    }
    out.n_reads += local_lengths.size();
    for (uint64_t l : local_lengths) out.n_samples += l;
    lengths.insert(lengths.end(), local_lengths.begin(), local_lengths.end());
    channels.insert(local_channels.begin(), local_channels.end());
    for (const auto& [r, c] : local_reasons) out.end_reasons[r] += c;
    out.duration_s += duration;
  });
  std::sort(out.skipped.begin(), out.skipped.end());
  std::sort(out.warnings.begin(), out.warnings.end());
  out.lengths = length_stats(lengths);
  out.n_channels = channels.size();
  return out;
}

std::string summary_json(const Pod5Summary& s) {
  nlohmann::ordered_json j;
  j["files"] = s.n_files;
  j["reads"] = s.n_reads;
  j["samples"] = s.n_samples;
  j["duration_s"] = s.duration_s;
  j["read_length_samples"] = {{"min", s.lengths.min}, {"max", s.lengths.max},
                              {"mean", s.lengths.mean}, {"median", s.lengths.median},
                              {"n50", s.lengths.n50}};
  j["channels"] = s.n_channels;
  j["end_reasons"] = s.end_reasons;
  j["pod5_versions"] = s.pod5_versions;
  j["warnings"] = s.warnings;
  auto skipped = nlohmann::ordered_json::array();
  for (const auto& [path, reason] : s.skipped) skipped.push_back({{"file", path}, {"reason", reason}});
  j["skipped"] = skipped;
  return j.dump(2) + "\n";
}

}  // namespace escpod::pipeline
