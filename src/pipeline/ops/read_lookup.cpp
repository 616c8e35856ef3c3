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

namespace {

// What a read-id index says about one input.
struct IndexedInput {
  const pod5::ReadIndex* index = nullptr;  // null: the input is scanned
  const pod5::IndexedFile* entry = nullptr;
  std::vector<std::pair<uint32_t, uint32_t>> rows;  // (batch, row) of each id found in it
};
using IndexesByRoot = std::map<fs::path, std::unique_ptr<pod5::ReadIndex>>;  // null: unusable

// The fresh index entry of each input, each index opened once (a damaged one is not used).
std::vector<IndexedInput> find_index_entries(const std::vector<fs::path>& inputs, IndexesByRoot& indexes) {
  std::vector<IndexedInput> state(inputs.size());
  std::map<fs::path, fs::path> root_of_dir;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const fs::path dir = fs::absolute(inputs[i]).parent_path();
    auto r = root_of_dir.find(dir);
    if (r == root_of_dir.end()) r = root_of_dir.emplace(dir, pod5::ReadIndex::find_root(inputs[i])).first;
    if (r->second.empty()) continue;
    auto it = indexes.find(r->second);
    if (it == indexes.end()) {
      auto opened = pod5::ReadIndex::open(r->second);
      if (!opened.is_ok()) log::warn("read-id index not used (its files are scanned): {}", opened.status().message());
      it = indexes.emplace(r->second, opened.is_ok() ? std::move(opened).value() : nullptr).first;
    }
    if (!it->second) continue;
    const pod5::IndexedFile* entry = it->second->fresh_entry(inputs[i]);
    if (!entry) {
      log::info("read-id index {}: {} is not indexed or changed since (size/mtime); scanning it",
                it->first.string(), inputs[i].string());
      continue;
    }
    state[i].index = it->second.get();
    state[i].entry = entry;
  }
  return state;
}

// Looks every id up in each index in use and gives each input the rows holding them. An index
// whose lookup fails (a damaged bucket) is dropped: its inputs are scanned.
void look_up_ids(const std::vector<pod5::ReadId>& ids, std::vector<IndexedInput>& state) {
  std::map<const pod5::ReadIndex*, std::unordered_map<uint32_t, size_t>> slot_input;
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].index) slot_input[state[i].index][state[i].entry->slot] = i;
  }
  std::vector<pod5::IndexHit> hits;
  for (const auto& [index, slots] : slot_input) {
    Status status;
    for (const auto& id : ids) {
      hits.clear();
      status = index->lookup(id, &hits);
      if (!status.is_ok()) break;
      for (const auto& h : hits) {
        auto it = slots.find(h.slot);
        if (it != slots.end()) state[it->second].rows.emplace_back(h.batch, h.row);
      }
    }
    if (!status.is_ok()) {
      log::warn("read-id index not used (its files are scanned): {}", status.message());
      for (const auto& [slot, i] : slots) state[i] = IndexedInput{};
    }
  }
}

// Opens the inputs that may hold the ids: every scanned input, and each indexed one the index
// places an id in (with the batch layout the index stores). An indexed input without ids is
// left closed once its footer confirms it is the file indexed; otherwise it is scanned.
Status open_inputs(const std::vector<fs::path>& inputs, std::vector<IndexedInput>& state, int n_threads,
                   IdLookupPlan* plan) {
  std::vector<fs::path> paths;
  std::vector<pod5::BatchLayout> layouts;  // per path opened with a layout (empty: none)
  for (size_t i = 0; i < inputs.size(); ++i) {
    IndexedInput& s = state[i];
    if (s.index && s.rows.empty()) {
      if (s.index->verified_entry(inputs[i])) {
        ++plan->n_indexed;
        ++plan->n_not_opened;
        continue;
      }
      log::info("read-id index: {} has a different file identifier than when indexed; scanning it",
                inputs[i].string());
      s = IndexedInput{};
    }
    plan->input_of.push_back(i);
    paths.push_back(inputs[i]);
    auto layout = s.index ? pod5::decode_batch_layout(*s.entry) : Result<pod5::BatchLayout>(pod5::BatchLayout{});
    if (!layout.is_ok() && layout.status().code() != StatusCode::kNotFound) {
      log::warn("read-id index: {}; opening the file without it", layout.status().message());
    }
    layouts.push_back(layout.is_ok() ? std::move(layout).value() : pod5::BatchLayout{});
  }
  auto options_for = [&](bool with_layouts) {
    std::vector<pod5::OpenOptions> options(paths.size());
    for (size_t k = 0; k < paths.size(); ++k) {
      const IndexedInput& s = state[plan->input_of[k]];
      options[k].validate_all_batches = s.index == nullptr;
      const bool has_layout = !layouts[k].read_batch_rows.empty() || !layouts[k].signal_batch_rows.empty();
      if (s.index && with_layouts && has_layout) options[k].layout = &layouts[k];
    }
    return options;
  };
  auto options = options_for(true);
  auto readers = detail::open_readers(paths, n_threads, nullptr, &options);
  if (!readers.is_ok() && std::any_of(options.begin(), options.end(), [](const auto& o) { return o.layout; })) {
    // Perhaps a layout that does not describe its file (the index is wrong about it): open
    // without the layouts; a failure then is the file's own.
    const Status first = readers.status();
    options = options_for(false);
    readers = detail::open_readers(paths, n_threads, nullptr, &options);
    if (readers.is_ok()) log::warn("read-id index: {}; the files were opened without the index's batch layouts", first.message());
  }
  ESCPOD_RETURN_IF_ERROR(readers.status());
  plan->readers = std::move(readers).value();
  return Status::ok();
}

// The slices to read: the rows the index names in each indexed reader (runs of consecutive rows
// merged), every batch of the others.
void plan_slices(const std::vector<fs::path>& inputs, std::vector<IndexedInput>& state, IdLookupPlan* plan) {
  plan->indexed.assign(plan->readers.size(), false);
  for (size_t k = 0; k < plan->readers.size(); ++k) {
    const pod5::FileReader& reader = *plan->readers[k];
    IndexedInput& s = state[plan->input_of[k]];
    if (s.index && reader.info().file_identifier != s.entry->file_identifier) {
      log::info("read-id index: {} has a different file identifier than when indexed; scanning it",
                inputs[plan->input_of[k]].string());
      s.index = nullptr;
    }
    if (s.index) {
      auto& r = s.rows;
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
      const bool in_range = std::all_of(r.begin(), r.end(), [&](const auto& br) {
        return br.first < reader.n_read_batches() && br.second < reader.batch_rows(br.first);
      });
      if (in_range) {
        for (size_t j = 0; j < r.size(); ++j) {
          if (j > 0 && r[j].first == r[j - 1].first && r[j].second == r[j - 1].second + 1) {
            ++plan->slices.back().n_rows;
          } else {
            plan->slices.push_back({k, r[j].first, r[j].second, 1});
          }
        }
        plan->indexed[k] = true;
        ++plan->n_indexed;
        continue;
      }
      log::warn("read-id index names rows {} does not have; scanning it", inputs[plan->input_of[k]].string());
    }
    for (size_t b = 0; b < reader.n_read_batches(); ++b) plan->slices.push_back({k, b, 0, ReadSlice::kWholeBatch});
  }
}

}  // namespace

Result<IdLookupPlan> plan_id_lookup(const std::vector<fs::path>& inputs,
                                    const std::vector<pod5::ReadId>& ids, bool use_index,
                                    int n_threads) {
  IdLookupPlan plan;
  IndexesByRoot indexes;
  std::vector<IndexedInput> state(inputs.size());
  if (use_index) {
    state = find_index_entries(inputs, indexes);
    look_up_ids(ids, state);
  }
  ESCPOD_RETURN_IF_ERROR(open_inputs(inputs, state, n_threads, &plan));
  plan_slices(inputs, state, &plan);
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
