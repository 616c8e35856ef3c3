#include "escpod/pipeline/ops/read_lookup.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include <tbb/enumerable_thread_specific.h>

#include "escpod/core/log.hpp"
#include "escpod/core/parallel.hpp"
#include "escpod/core/staged_file.hpp"
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
    if (it == indexes.end()) it = indexes.emplace(r->second, open_usable_index(r->second)).first;
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

std::unique_ptr<pod5::ReadIndex> open_usable_index(const fs::path& root) {
  if (root.empty()) return nullptr;
  Result<std::unique_ptr<pod5::ReadIndex>> index = pod5::ReadIndex::open(root);
  if (index.is_ok()) return std::move(index).value();
  log::warn("read-id index not used (its files are scanned): {}", index.status().message());
  return nullptr;
}

Result<std::unique_ptr<pod5::FileReader>> open_for_random_access(const fs::path& path, const pod5::ReadIndex* index) {
  pod5::OpenOptions options;
  options.validate_all_batches = false;
  pod5::BatchLayout layout;
  const pod5::IndexedFile* entry = index ? index->verified_entry(path) : nullptr;
  if (Result<pod5::BatchLayout> stored = entry ? pod5::decode_batch_layout(*entry) : Status::not_found("");
      stored.is_ok()) {
    layout = std::move(stored).value();
    options.layout = &layout;
  }
  Result<std::unique_ptr<pod5::FileReader>> r = pod5::FileReader::open(path, options);
  if (r.is_ok() || options.layout == nullptr) return r;
  options.layout = nullptr;
  return pod5::FileReader::open(path, options);
}

// ---- ReadLocator ----------------------------------------------------------------------------

// Where an id is held: the best place (the first file in the order given) and how many places
// hold it. `unchecked`: a row an index names in a file whose rows cannot be read alone was not
// checked against the id (locate() then checks it).
struct ReadLocator::Found {
  std::optional<ReadLocation> best;
  size_t n_places = 0;
  bool unchecked = false;
};

ReadLocator::ReadLocator(std::vector<std::shared_ptr<const pod5::FileReader>> files) : m_files(std::move(files)) {
  m_first_batch.push_back(0);
  for (const auto& f : m_files) m_first_batch.push_back(m_first_batch.back() + f->n_read_batches());
  m_batches.resize(m_first_batch.back());
  m_batch_ids.resize(m_first_batch.back());
  m_indexed.assign(m_files.size(), false);
}

Result<std::unique_ptr<ReadLocator>> ReadLocator::build(std::vector<std::shared_ptr<const pod5::FileReader>> files,
                                                        bool use_index, Executor& executor) {
  std::unique_ptr<ReadLocator> locator(new ReadLocator(std::move(files)));
  if (use_index) locator->open_read_indexes();
  ESCPOD_RETURN_IF_ERROR(locator->scan_ids(executor));
  return locator;
}

size_t ReadLocator::n_reads() const {
  size_t n = 0;
  for (const auto& f : m_files) n += f->info().n_reads;
  return n;
}

// Files under a folder holding a usable index, with a fresh entry naming the open file's
// identifier (what verified_entry checks, without reading the footer again), are looked up there.
void ReadLocator::open_read_indexes() {
  std::map<fs::path, size_t> by_root;  // root -> m_persistent position (SIZE_MAX: unusable)
  for (uint32_t fi = 0; fi < m_files.size(); ++fi) {
    const fs::path& path = m_files[fi]->path();
    const fs::path root = pod5::ReadIndex::find_root(path);
    if (root.empty()) continue;
    auto it = by_root.find(root);
    if (it == by_root.end()) {
      std::unique_ptr<pod5::ReadIndex> opened = open_usable_index(root);
      it = by_root.emplace(root, opened ? m_persistent.size() : SIZE_MAX).first;
      if (opened) m_persistent.push_back({std::move(opened), {}});
    }
    if (it->second == SIZE_MAX) continue;
    Persistent& p = m_persistent[it->second];
    const pod5::IndexedFile* entry = p.index->fresh_entry(path);
    if (!entry || entry->file_identifier != m_files[fi]->info().file_identifier ||
        entry->n_batches != m_files[fi]->n_read_batches()) {
      log::debug("read-id index {}: {} is not indexed or changed since; scanning it", root.string(), path.string());
      continue;
    }
    p.file_of_slot.emplace(entry->slot, fi);
    m_indexed[fi] = true;
    ++m_n_indexed;
  }
}

// The read ids of every batch of the files not indexed, in parallel, into the hash map.
Status ReadLocator::scan_ids(Executor& executor) {
  std::vector<size_t> todo;  // global batch numbers
  for (size_t fi = 0; fi < m_files.size(); ++fi) {
    if (m_indexed[fi]) continue;
    for (size_t g = m_first_batch[fi]; g < m_first_batch[fi + 1]; ++g) todo.push_back(g);
  }
  ESCPOD_RETURN_IF_ERROR(parallel_for(executor, todo.size(), [&](size_t k) -> Status {
    if (interrupted()) return Status::cancelled("interrupted");
    const auto [fi, bi] = file_batch(todo[k]);
    ESCPOD_ASSIGN_OR_RETURN(m_batch_ids[todo[k]], m_files[fi]->read_batch_ids(bi));
    return Status::ok();
  }));
  size_t total = 0;
  for (size_t g : todo) total += m_batch_ids[g].size();
  m_map.reserve(total);
  for (size_t g : todo) {
    const auto [fi, bi] = file_batch(g);
    const auto& ids = m_batch_ids[g];
    for (size_t r = 0; r < ids.size(); ++r) {
      if (!m_map.try_emplace(ids[r], ReadLocation{fi, bi, static_cast<uint32_t>(r)}).second) ++m_n_duplicates;
    }
  }
  return Status::ok();
}

std::pair<uint32_t, uint32_t> ReadLocator::file_batch(size_t g) const {
  const auto fi = static_cast<uint32_t>(
      std::upper_bound(m_first_batch.begin(), m_first_batch.end(), g) - m_first_batch.begin() - 1);
  return {fi, static_cast<uint32_t>(g - m_first_batch[fi])};
}

// Every place holding `id`: the scanned files' map, then each index. With check_rows, each row an
// index names is checked against the id (reading its batch's ids); without, rows in files that
// cannot read a row alone set `unchecked` (reads only: safe on several threads, each with its own
// `hits`).
Status ReadLocator::find_places(const pod5::ReadId& id, std::vector<pod5::IndexHit>& hits, bool check_rows,
                                Found* out) {
  *out = Found{};
  if (const ReadLocation* scanned = m_map.find(id)) {
    out->best = *scanned;
    ++out->n_places;
  }
  for (const Persistent& p : m_persistent) {
    hits.clear();
    ESCPOD_RETURN_IF_ERROR(p.index->lookup(id, &hits));
    for (const pod5::IndexHit& h : hits) {
      auto f = p.file_of_slot.find(h.slot);
      if (f == p.file_of_slot.end()) continue;
      const ReadLocation loc{f->second, h.batch, h.row};
      if (check_rows) {
        ESCPOD_RETURN_IF_ERROR(check_indexed_row(loc, id));
      } else {
        out->unchecked |= !m_files[loc.file]->reads_rows_from_file();
      }
      ++out->n_places;
      if (!out->best || loc.file < out->best->file) out->best = loc;
    }
  }
  return Status::ok();
}

void ReadLocator::count_places(const Found& found) {
  if (found.n_places > 1 && !m_persistent.empty()) ++m_n_duplicates_seen;
}

Result<std::optional<ReadLocation>> ReadLocator::locate(const pod5::ReadId& id) {
  Found found;
  ESCPOD_RETURN_IF_ERROR(find_places(id, m_hits, /*check_rows=*/true, &found));
  count_places(found);
  return found.best;
}

// Rows named by an index in files that cannot read a row alone are checked here (serially, with
// the batch ids cached); the others are left to signals_at, which reads each row anyway.
Result<std::vector<std::optional<ReadLocation>>> ReadLocator::locate_all(std::span<const pod5::ReadId> ids,
                                                                         Executor& executor) {
  std::vector<Found> found(ids.size());
  tbb::enumerable_thread_specific<std::vector<pod5::IndexHit>> hits;
  ESCPOD_RETURN_IF_ERROR(parallel_for(executor, ids.size(), [&](size_t i) -> Status {
    if (interrupted()) return Status::cancelled("interrupted");
    return find_places(ids[i], hits.local(), /*check_rows=*/false, &found[i]);
  }));
  std::vector<std::optional<ReadLocation>> where(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (found[i].unchecked) {
      ESCPOD_ASSIGN_OR_RETURN(where[i], locate(ids[i]));  // counts its places itself
      continue;
    }
    count_places(found[i]);
    where[i] = found[i].best;
  }
  return where;
}

bool ReadLocator::has_row(const ReadLocation& loc) const {
  const pod5::FileReader& f = *m_files[loc.file];
  return loc.batch < f.n_read_batches() && loc.row < f.batch_rows(loc.batch);
}

Status ReadLocator::check_indexed_row(const ReadLocation& loc, const pod5::ReadId& id) {
  const pod5::FileReader& f = *m_files[loc.file];
  if (!has_row(loc)) {
    return Status::corrupt(f.path().string() + ": the read-id index names reads batch " + std::to_string(loc.batch) +
                           " row " + std::to_string(loc.row) + ", which the file does not have (run `escpod index` again)");
  }
  std::vector<pod5::ReadId>& ids = m_batch_ids[m_first_batch[loc.file] + loc.batch];
  if (ids.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(ids, f.read_batch_ids(loc.batch));
  }
  if (ids[loc.row] == id) return Status::ok();
  return Status::corrupt(f.path().string() + ": the read-id index places read " + id.to_string() + " at reads batch " +
                         std::to_string(loc.batch) + " row " + std::to_string(loc.row) + ", which holds " +
                         ids[loc.row].to_string() + " (run `escpod index` again)");
}

// The rows at `where` read alone from their files, in parallel, for files that read rows straight
// from the file and whose batch is not decoded already; the others are left empty. Reading one
// row costs a few small preads; decoding its whole batch ~1,000 rows' worth of columns.
Result<std::vector<pod5::ReadBatch>> ReadLocator::read_rows_alone(std::span<const ReadLocation> where,
                                                                  Executor& executor) {
  std::vector<pod5::ReadBatch> rows(where.size());
  auto alone = [&](const ReadLocation& w) {
    return m_files[w.file]->reads_rows_from_file() && !m_batches[m_first_batch[w.file] + w.batch];
  };
  if (std::none_of(where.begin(), where.end(), alone)) return rows;
  ESCPOD_RETURN_IF_ERROR(parallel_for(executor, where.size(), [&](size_t i) -> Status {
    if (interrupted()) return Status::cancelled("interrupted");
    if (!alone(where[i])) return Status::ok();
    ESCPOD_ASSIGN_OR_RETURN(rows[i], m_files[where[i].file]->read_signal_ref(where[i].batch, where[i].row));
    return Status::ok();
  }));
  return rows;
}

Result<const pod5::ReadBatch*> ReadLocator::batch(uint32_t file, uint32_t batch_idx) {
  std::unique_ptr<const pod5::ReadBatch>& b = m_batches[m_first_batch[file] + batch_idx];
  if (!b) {
    ESCPOD_ASSIGN_OR_RETURN(pod5::ReadBatch decoded, m_files[file]->read_batch(batch_idx));
    b = std::make_unique<const pod5::ReadBatch>(std::move(decoded));
  }
  return b.get();
}

Result<ReadSignalList> ReadLocator::signals_at(std::span<const pod5::ReadId> ids, std::span<const ReadLocation> where,
                                               Executor& executor) {
  for (size_t i = 0; i < where.size(); ++i) {  // an index's row past its file's end: say so first
    if (!has_row(where[i])) return check_indexed_row(where[i], ids[i]);
  }
  ESCPOD_ASSIGN_OR_RETURN(std::vector<pod5::ReadBatch> rows, read_rows_alone(where, executor));
  ReadSignalList list(m_files);
  for (size_t i = 0; i < where.size(); ++i) {
    const pod5::ReadBatch* b = &rows[i];
    size_t r = 0;
    if (b->size() == 0) {
      ESCPOD_ASSIGN_OR_RETURN(b, batch(where[i].file, where[i].batch));
      r = where[i].row;
    }
    if (b->read_id[r] != ids[i]) ESCPOD_RETURN_IF_ERROR(check_indexed_row(where[i], ids[i]));
    list.add_row(where[i].file, *b, r);
  }
  return list;
}

}  // namespace escpod::pipeline
