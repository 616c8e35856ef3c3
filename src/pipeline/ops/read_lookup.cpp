#include "escpod/pipeline/ops/read_lookup.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "escpod/core/log.hpp"
#include "escpod/pod5/read_index.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {
namespace fs = std::filesystem;

Result<IdLookupPlan> plan_id_lookup(const std::vector<fs::path>& inputs,
                                    const std::vector<pod5::ReadId>& ids, bool use_index,
                                    int n_threads) {
  IdLookupPlan plan;
  const size_t n = inputs.size();
  plan.indexed.assign(n, false);
  std::vector<pod5::OpenOptions> open_options(n);
  std::map<fs::path, std::unique_ptr<pod5::ReadIndex>> indexes;  // root -> index (null: unusable)
  std::vector<const pod5::ReadIndex*> index_of(n, nullptr);
  std::vector<const pod5::IndexedFile*> entry_of(n, nullptr);
  if (use_index) {
    std::map<fs::path, fs::path> root_of_dir;
    for (size_t i = 0; i < n; ++i) {
      const fs::path dir = fs::absolute(inputs[i]).parent_path();
      auto r = root_of_dir.find(dir);
      if (r == root_of_dir.end()) r = root_of_dir.emplace(dir, pod5::ReadIndex::find_root(inputs[i])).first;
      if (r->second.empty()) continue;
      auto it = indexes.find(r->second);
      if (it == indexes.end()) {
        auto opened = pod5::ReadIndex::open(r->second);
        if (!opened.is_ok()) {
          log::warn("read-id index not used (its files are scanned): {}", opened.status().message());
          it = indexes.emplace(r->second, nullptr).first;
        } else {
          it = indexes.emplace(r->second, std::move(opened).value()).first;
        }
      }
      if (!it->second) continue;
      const pod5::IndexedFile* entry = it->second->fresh_entry(inputs[i]);
      if (!entry) {
        log::info("read-id index {}: {} is not indexed or changed since (size/mtime); scanning it",
                  it->first.string(), inputs[i].string());
        continue;
      }
      index_of[i] = it->second.get();
      entry_of[i] = entry;
      open_options[i].validate_all_batches = false;
    }
  }
  ESCPOD_ASSIGN_OR_RETURN(plan.readers, detail::open_readers(inputs, n_threads, nullptr, &open_options));
  std::map<const pod5::ReadIndex*, std::unordered_map<uint32_t, size_t>> slot_input;
  for (size_t i = 0; i < n; ++i) {
    if (!entry_of[i]) continue;
    if (plan.readers[i]->info().file_identifier != entry_of[i]->file_identifier) {
      log::info("read-id index: {} has a different file identifier than when indexed; scanning it",
                inputs[i].string());
      continue;
    }
    plan.indexed[i] = true;
    slot_input[index_of[i]][entry_of[i]->slot] = i;
  }
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> rows(n);  // (batch, row) per input
  std::vector<pod5::IndexHit> hits;
  for (const auto& [index, slots] : slot_input) {
    Status status;
    for (const auto& id : ids) {
      hits.clear();
      status = index->lookup(id, &hits);
      if (!status.is_ok()) break;
      for (const auto& h : hits) {
        auto it = slots.find(h.slot);
        if (it != slots.end()) rows[it->second].emplace_back(h.batch, h.row);
      }
    }
    if (!status.is_ok()) {
      log::warn("read-id index not used (its files are scanned): {}", status.message());
      for (const auto& [slot, i] : slots) {
        plan.indexed[i] = false;
        rows[i].clear();
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const pod5::FileReader& reader = *plan.readers[i];
    if (plan.indexed[i]) {
      auto& r = rows[i];
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
      const bool in_range = std::all_of(r.begin(), r.end(), [&](const auto& br) {
        return br.first < reader.n_read_batches() && br.second < reader.batch_rows(br.first);
      });
      if (in_range) {
        for (size_t k = 0; k < r.size(); ++k) {
          if (k > 0 && r[k].first == r[k - 1].first && r[k].second == r[k - 1].second + 1) {
            ++plan.slices.back().n_rows;
          } else {
            plan.slices.push_back({i, r[k].first, r[k].second, 1});
          }
        }
        ++plan.n_indexed;
        continue;
      }
      log::warn("read-id index names rows {} does not have; scanning it", inputs[i].string());
      plan.indexed[i] = false;
    }
    for (size_t b = 0; b < reader.n_read_batches(); ++b) plan.slices.push_back({i, b, 0, ReadSlice::kWholeBatch});
  }
  return plan;
}

Result<std::vector<FoundRead>> find_reads(const std::vector<fs::path>& inputs,
                                          const std::vector<pod5::ReadId>& ids, bool use_index,
                                          std::vector<pod5::ReadId>* missing) {
  ESCPOD_ASSIGN_OR_RETURN(IdLookupPlan plan, plan_id_lookup(inputs, ids, use_index, 0));
  std::vector<std::shared_ptr<const pod5::FileReader>> readers;
  for (auto& r : plan.readers) readers.push_back(std::move(r));
  std::unordered_multimap<pod5::ReadId, size_t, pod5::ReadIdHash> wanted;
  for (size_t k = 0; k < ids.size(); ++k) wanted.emplace(ids[k], k);
  std::vector<std::optional<FoundRead>> found(ids.size());
  size_t n_found = 0;
  auto take = [&](size_t file, size_t batch, size_t row, const pod5::ReadId& id) -> Status {
    auto [lo, hi] = wanted.equal_range(id);
    if (lo == hi || found[lo->second]) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch one, readers[file]->read_batch_rows(batch, row, 1));
    for (auto it = lo; it != hi; ++it) {
      found[it->second] = FoundRead{readers[file], one};
      ++n_found;
    }
    return Status::ok();
  };
  for (const ReadSlice& s : plan.slices) {
    if (n_found == ids.size()) break;
    const pod5::FileReader& reader = *readers[s.file];
    if (s.n_rows == ReadSlice::kWholeBatch) {
      ESCPOD_ASSIGN_OR_RETURN(auto batch_ids, reader.read_batch_ids(s.batch_idx));
      for (size_t r = 0; r < batch_ids.size(); ++r) ESCPOD_RETURN_IF_ERROR(take(s.file, s.batch_idx, r, batch_ids[r]));
    } else {
      ESCPOD_ASSIGN_OR_RETURN(auto batch, reader.read_batch_rows(s.batch_idx, s.first_row, s.n_rows));
      for (size_t r = 0; r < batch.size(); ++r) {
        ESCPOD_RETURN_IF_ERROR(take(s.file, s.batch_idx, s.first_row + r, batch.read_id[r]));
      }
    }
  }
  std::vector<FoundRead> out;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (found[k]) {
      out.push_back(std::move(*found[k]));
    } else if (missing) {
      missing->push_back(ids[k]);
    }
  }
  return out;
}

}  // namespace escpod::pipeline
