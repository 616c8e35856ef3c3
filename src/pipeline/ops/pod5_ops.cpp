#include "escpod/pipeline/ops/pod5_ops.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "escpod/core/external_sort.hpp"
#include "escpod/core/log.hpp"
#include "escpod/core/process_exit.hpp"
#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pipeline/ops/read_fields.hpp"
#include "escpod/pipeline/ops/read_lookup.hpp"
#include "escpod/pod5/read_id_guard.hpp"
#include "escpod/pod5/records.hpp"
#include "pipeline/ops/csv_text.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {
namespace {

using Readers = std::vector<std::unique_ptr<pod5::FileReader>>;

Status check_end_reasons(const std::vector<std::string>& names, const char* flag) {
  for (const auto& n : names) {
    if (pod5::end_reason_index(n) < 0) {
      std::string known;
      for (auto k : pod5::kEndReasonNames) {
        if (!known.empty()) known.append(", ");
        known.append(k);
      }
      return Status::usage(std::string(flag) + ": unknown end reason '" + n + "' (known: " + known + ")");
    }
  }
  return Status::ok();
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

Status valid_output_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::invalid_argument("output name '" + name + "' is not a plain file name");
  }
  return Status::ok();
}

std::string with_pod5_extension(std::string name) {
  if (name.size() < 5 || name.compare(name.size() - 5, 5, ".pod5") != 0) name += ".pod5";
  return name;
}

// ---- merge's duplicate check: an external sort of (id, place) over every input read ----------

// A read's place in the merge's stream order: input number, then file-wide row.
uint64_t merge_place(size_t input, uint64_t row) { return (uint64_t{input} << 40) | row; }
size_t place_input(uint64_t place) { return static_cast<size_t>(place >> 40); }

struct IdAtPlace {
  pod5::ReadId id;
  uint64_t place = 0;
  friend bool operator<(const IdAtPlace& a, const IdAtPlace& b) {
    return std::tie(a.id, a.place) < std::tie(b.id, b.place);
  }
};

// The places of the reads a merge skips (every copy of an id after its first), sorted, read back
// in stream order through a small buffer from an unlinked scratch file.
class MergeSkips {
 public:
  explicit MergeSkips(std::filesystem::path folder) : m_folder(std::move(folder)) {}
  MergeSkips(MergeSkips&&) noexcept = default;

  Status append(uint64_t place) {
    m_pending.push_back(place);
    ++m_size;
    return m_pending.size() >= kBuffer ? flush() : Status::ok();
  }
  Status flush() {
    if (m_pending.empty()) return Status::ok();
    if (!m_file.is_open()) {
      ESCPOD_ASSIGN_OR_RETURN(m_file, escpod::detail::AnonymousScratchFile::create(m_folder));
    }
    ESCPOD_RETURN_IF_ERROR(m_file.append({reinterpret_cast<const uint8_t*>(m_pending.data()),
                                          m_pending.size() * sizeof(uint64_t)}).status());
    m_pending.clear();
    return Status::ok();
  }
  uint64_t size() const { return m_size; }

  // True when `place` is the next skip. Places must be asked in increasing order.
  Result<bool> take(uint64_t place) {
    if (m_taken == m_size) return false;
    if (m_pos == m_buf.size()) {
      const uint64_t n = std::min<uint64_t>(kBuffer, m_size - m_taken);
      m_buf.resize(static_cast<size_t>(n));
      ESCPOD_RETURN_IF_ERROR(m_file.read_at(m_taken * sizeof(uint64_t),
                                            {reinterpret_cast<uint8_t*>(m_buf.data()), m_buf.size() * sizeof(uint64_t)}));
      m_pos = 0;
    }
    if (m_buf[m_pos] != place) return false;
    ++m_pos;
    ++m_taken;
    return true;
  }

 private:
  static constexpr size_t kBuffer = 8192;
  std::filesystem::path m_folder;
  escpod::detail::AnonymousScratchFile m_file;
  std::vector<uint64_t> m_pending, m_buf;
  uint64_t m_size = 0, m_taken = 0;
  size_t m_pos = 0;
};

// Reads every input's read ids (the reads tables only) and sorts (id, place) externally: memory
// stays ~10 MiB whatever the number of reads. Without `duplicate_ok` the smallest repeated id is
// an error naming it and the files of its first two copies; with it, the places of every copy
// after the first come back sorted in stream order.
Result<MergeSkips> find_merge_duplicates(const Readers& readers, const std::filesystem::path& folder,
                                         bool duplicate_ok) {
  ExternalSortLimits limits;
  limits.run_records = size_t{1} << 18;  // 6 MiB of (id, place) records a run
  ExternalSorter<IdAtPlace> by_id(folder, limits);
  for (size_t k = 0; k < readers.size(); ++k) {
    uint64_t row = 0;
    for (size_t b = 0; b < readers[k]->n_read_batches(); ++b) {
      ESCPOD_ASSIGN_OR_RETURN(std::vector<pod5::ReadId> ids, readers[k]->read_batch_ids(b));
      for (const pod5::ReadId& id : ids) ESCPOD_RETURN_IF_ERROR(by_id.add({id, merge_place(k, row++)}));
    }
  }
  ExternalSorter<uint64_t> later_copies(folder, limits);
  std::optional<IdAtPlace> first;  // the first copy of the current id
  ESCPOD_RETURN_IF_ERROR(by_id.drain([&](const IdAtPlace& r) -> Status {
    if (!first || first->id != r.id) {
      first = r;
      return Status::ok();
    }
    if (!duplicate_ok) {
      return Status::invalid_argument("duplicate read id " + r.id.to_string() + " in " +
                                      readers[place_input(first->place)]->path().string() + " and " +
                                      readers[place_input(r.place)]->path().string() +
                                      " (use --duplicate-ok to keep the first)");
    }
    return later_copies.add(r.place);
  }));
  MergeSkips skips(folder);
  ESCPOD_RETURN_IF_ERROR(later_copies.drain([&](uint64_t place) { return skips.append(place); }));
  ESCPOD_RETURN_IF_ERROR(skips.flush());
  return skips;
}

}  // namespace

Status merge_files(const std::vector<std::filesystem::path>& inputs,
                   const std::filesystem::path& output, const MergeOptions& options,
                   CopyStats* stats, uint64_t* n_duplicates_skipped, SkippedInputs* skipped) {
  SkippedInputs local_skipped;
  ESCPOD_ASSIGN_OR_RETURN(
      Readers readers,
      detail::open_readers(inputs, options.n_threads,
                           options.skip_bad ? (skipped ? skipped : &local_skipped) : nullptr));
  // Duplicates are found before anything is written, in bounded memory; the writer need not
  // check again.
  ESCPOD_ASSIGN_OR_RETURN(MergeSkips skips,
                          find_merge_duplicates(readers, output.parent_path(), options.duplicate_ok));
  pod5::WriterOptions writer_options = options.writer;
  writer_options.check_duplicate_ids = false;
  ESCPOD_ASSIGN_OR_RETURN(auto writer, pod5::FileWriter::create(output, writer_options));
  for (const auto& r : readers)
    for (const auto& ri : r->run_infos()) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
  CopyScratch scratch;
  auto consume = [&](size_t k, const pod5::FileReader& r, const pod5::ReadBatch& b,
                     const PreparedRead& read) -> Status {
    ESCPOD_ASSIGN_OR_RETURN(bool skip, skips.take(merge_place(k, b.first_read_idx + read.row)));
    if (skip) return Status::ok();  // a later copy of an id (--duplicate-ok keeps the first)
    // `readers` outlive `writer` (declared first): chunks are written from their mappings.
    return copy_prepared(r, b, read, *writer, scratch, stats, pod5::ChunkBytes::kBorrow);
  };
  ESCPOD_RETURN_IF_ERROR(
      stream_reads(readers, options.n_threads, nullptr, consume, nullptr, copy_borrowed_by(*writer)));
  if (n_duplicates_skipped) *n_duplicates_skipped = skips.size();
  return writer->close();
}

namespace {

using IdSet = std::unordered_set<pod5::ReadId, pod5::ReadIdHash>;

Status check_filter_criteria(const FilterCriteria& c) {
  if (!c.any()) {
    return Status::usage("filter needs at least one criterion (--ids, --min-samples, "
                                    "--max-samples, --end-reason, --exclude-end-reason, --annotation)");
  }
  ESCPOD_RETURN_IF_ERROR(check_end_reasons(c.end_reasons, "--end-reason"));
  return check_end_reasons(c.exclude_end_reasons, "--exclude-end-reason");
}

// The inputs, opened. With ids, only the rows an index names are decoded in indexed inputs (the
// rest in full): *plan says which. --skip-bad opens (and checks) every input itself, and
// --annotation reads whole batches.
Result<Readers> open_filter_inputs(const std::vector<std::filesystem::path>& inputs, const FilterCriteria& c,
                                   const FilterOptions& options, std::optional<IdLookupPlan>& plan,
                                   FilterReport& rep) {
  Readers readers;
  if (c.ids && options.use_index && !options.skip_bad && c.annotations.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(plan, plan_id_lookup(inputs, *c.ids, true, options.n_threads));
    readers = std::move(plan->readers);
  } else {
    ESCPOD_ASSIGN_OR_RETURN(readers, detail::open_readers(inputs, options.n_threads,
                                                          options.skip_bad ? &rep.skipped : nullptr));
  }
  return readers;
}

// The rows `plan` located through the read-id index; then, in full, the inputs whose index named
// rows holding other reads (`index_wrong`), when some `wanted` id is not `found` yet: never trust
// an index that disagrees with its file. During the rescan `still_missing` (read by `select`)
// points at the ids still missing.
Status stream_indexed_rows(const Readers& readers, IdLookupPlan& plan, int n_threads, const ReadSelector& select,
                           const PreparedConsumer& consume, const BeforeRelease& before_release,
                           std::vector<std::atomic<bool>>& index_wrong, const IdSet& wanted, const IdSet& found,
                           const IdSet*& still_missing, FilterReport& rep) {
  rep.n_files_indexed = plan.n_indexed;
  rep.n_files_not_opened = plan.n_not_opened;
  ESCPOD_RETURN_IF_ERROR(
      stream_read_slices(readers, plan.slices, n_threads, select, consume, &rep.n_reads_seen, before_release));
  std::vector<ReadSlice> rescan;
  for (size_t k = 0; k < readers.size(); ++k) {
    if (!index_wrong[k]) continue;
    log::warn("read-id index of {} names rows holding other reads (stale or damaged); scanning "
              "the file; run `escpod index` again", readers[k]->path().string());
    for (size_t b = 0; b < readers[k]->n_read_batches(); ++b) rescan.push_back({k, b, 0, ReadSlice::kWholeBatch});
  }
  IdSet missing_now;
  for (const auto& id : wanted)
    if (!found.count(id)) missing_now.insert(id);
  if (!rescan.empty() && !missing_now.empty()) {
    still_missing = &missing_now;
    std::fill(index_wrong.begin(), index_wrong.end(), false);
    plan.indexed.assign(readers.size(), false);
    ESCPOD_RETURN_IF_ERROR(
        stream_read_slices(readers, rescan, n_threads, select, consume, &rep.n_reads_seen, before_release));
  }
  return Status::ok();
}

// kNotFound when a listed id is in no input (rep.missing_ids, in list order), unless missing_ok.
Status check_missing_ids(const FilterCriteria& c, const IdSet& wanted, const IdSet& found,
                         const FilterOptions& options, FilterReport& rep) {
  if (!c.ids) return Status::ok();
  for (const auto& id : *c.ids)
    if (!found.count(id)) rep.missing_ids.push_back(id);
  if (!rep.missing_ids.empty() && !options.missing_ok) {
    return Status::not_found(std::to_string(rep.missing_ids.size()) + " of " +
                             std::to_string(wanted.size()) + " listed read ids are in no input (first: " +
                             rep.missing_ids.front().to_string() + "); use --missing-ok to allow" +
                             (rep.skipped.empty() ? "" : " (" + std::to_string(rep.skipped.size()) +
                              " inputs were skipped as bad)"));
  }
  return Status::ok();
}

}  // namespace

Status filter_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& output, const FilterCriteria& c,
                    const FilterOptions& options, FilterReport* report) {
  ESCPOD_RETURN_IF_ERROR(check_filter_criteria(c));
  IdSet wanted, found;
  if (c.ids) wanted.insert(c.ids->begin(), c.ids->end());
  FilterReport local;
  FilterReport& rep = report ? *report : local;
  std::optional<IdLookupPlan> plan;
  ESCPOD_ASSIGN_OR_RETURN(Readers readers, open_filter_inputs(inputs, c, options, plan, rep));
  std::unique_ptr<AnnotationFilter> by_annotation;
  if (!c.annotations.empty()) {
    std::vector<const pod5::FileReader*> plain;
    for (const auto& r : readers) plain.push_back(r.get());
    ESCPOD_ASSIGN_OR_RETURN(by_annotation, AnnotationFilter::create(c.annotations, plain));
  }
  ESCPOD_ASSIGN_OR_RETURN(auto writer, pod5::FileWriter::create(output, options.writer));
  for (const auto& r : readers)
    for (const auto& ri : r->run_infos()) ESCPOD_RETURN_IF_ERROR(writer->add_run_info(ri));
  // Every criterion reads only the batch and the (now constant) id set: safe on any thread.
  // Rows an index named that hold no listed id: the index disagrees with the file.
  std::unordered_map<const pod5::FileReader*, size_t> input_of;
  for (size_t k = 0; k < readers.size(); ++k) input_of[readers[k].get()] = k;
  std::vector<std::atomic<bool>> index_wrong(readers.size());
  const IdSet* still_missing = nullptr;
  auto select = [&](const pod5::FileReader& r, const pod5::ReadBatch& b, size_t i) {
    if (c.ids && !wanted.count(b.read_id[i])) {
      if (plan && plan->indexed[input_of.at(&r)]) index_wrong[input_of.at(&r)] = true;
      return false;
    }
    if (still_missing && !still_missing->count(b.read_id[i])) return false;
    const uint64_t n = b.num_samples[i];
    if (c.min_samples && n < *c.min_samples) return false;
    if (c.max_samples && n > *c.max_samples) return false;
    if (!c.end_reasons.empty() || !c.exclude_end_reasons.empty()) {
      const std::string& reason = r.end_reasons()[static_cast<size_t>(b.end_reason_idx[i])];
      if (!c.end_reasons.empty() && !contains(c.end_reasons, reason)) return false;
      if (contains(c.exclude_end_reasons, reason)) return false;
    }
    if (by_annotation && !by_annotation->accepts(r, b, i)) return false;
    return true;
  };
  CopyScratch scratch;
  auto consume = [&](size_t, const pod5::FileReader& r, const pod5::ReadBatch& b,
                     const PreparedRead& read) -> Status {
    // The same id in two inputs is written once; the writer would refuse the second anyway.
    if (c.ids && !found.insert(read.record.read_id).second) return Status::ok();
    return copy_prepared(r, b, read, *writer, scratch, &rep.copied, pod5::ChunkBytes::kBorrow);
  };
  if (plan) {
    ESCPOD_RETURN_IF_ERROR(stream_indexed_rows(readers, *plan, options.n_threads, select, consume,
                                               copy_borrowed_by(*writer), index_wrong, wanted, found, still_missing,
                                               rep));
  } else {
    ESCPOD_RETURN_IF_ERROR(stream_reads(readers, options.n_threads, select, consume, &rep.n_reads_seen,
                                        copy_borrowed_by(*writer)));
  }
  // A damaged sidecar (a locator that disagrees with the POD5) fails the run: no output.
  if (by_annotation) ESCPOD_RETURN_IF_ERROR(by_annotation->error());
  ESCPOD_RETURN_IF_ERROR(check_missing_ids(c, wanted, found, options, rep));
  ESCPOD_RETURN_IF_ERROR(writer->close());
  // Done with the inputs: a command-line process leaves unmapping them to its exit.
  leave_to_process_exit(readers);
  return Status::ok();
}

Result<std::vector<std::pair<pod5::ReadId, std::string>>> read_subset_csv(
    const std::string& path, const std::vector<std::string>& output_columns, const std::string& empty_as) {
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader in, detail::LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  if (!in.next(line)) return Status::invalid_argument(path + ": empty CSV (needs a header)");
  detail::split_csv(!line.empty() && line[0] == '#' ? std::string_view(line).substr(1) : std::string_view(line),
                    cells, storage);
  std::vector<std::string> header(cells.begin(), cells.end());
  auto id_col = std::find(header.begin(), header.end(), "read_id") - header.begin();
  auto out_col = static_cast<long>(header.size());
  for (auto it = output_columns.rbegin(); it != output_columns.rend(); ++it) {
    if (auto found = std::find(header.begin(), header.end(), *it); found != header.end()) {
      out_col = found - header.begin();
    }
  }
  if (id_col == static_cast<long>(header.size()) || out_col == static_cast<long>(header.size())) {
    std::string names;
    for (const auto& c : output_columns) names += (names.empty() ? "" : " or ") + c;
    return Status::invalid_argument(path + ": header must name the columns read_id and " + names);
  }
  std::vector<std::pair<pod5::ReadId, std::string>> rows;
  while (in.next(line)) {
    const size_t line_no = in.line_no();
    if (line.find_first_not_of(' ') == std::string::npos || line[0] == '#') continue;
    detail::split_csv(line, cells, storage);
    const auto need = static_cast<size_t>(std::max(id_col, out_col));
    if (cells.size() <= need) {
      return Status::invalid_argument(path + " line " + std::to_string(line_no) + ": too few columns");
    }
    auto id = pod5::ReadId::parse(cells[static_cast<size_t>(id_col)]);
    if (!id.is_ok()) return id.status().with_context(path + " line " + std::to_string(line_no));
    std::string out(cells[static_cast<size_t>(out_col)]);
    if (out.empty() && !empty_as.empty()) out = empty_as;
    if (auto s = valid_output_name(out); !s.is_ok()) {
      return s.with_context(path + " line " + std::to_string(line_no));
    }
    rows.emplace_back(*id, out);
  }
  if (!in.error().empty()) return Status::io_error(path + ": " + in.error());
  return rows;
}

namespace {

// The --columns fields (into `fields`) and the output name template: --template, checked to
// name only those columns, or one placeholder per column joined by '_'.
Result<std::string> subset_name_template(const SubsetOptions& options, std::vector<const ReadField*>& fields) {
  std::string name_template = options.name_template;
  if (options.columns.empty()) {
    return Status::usage("subset needs --csv MAP or --columns FIELD,...");
  }
  for (const auto& c : options.columns) {
    const ReadField* f = find_read_field(c);
    if (!f || c == "signal_hash") return Status::usage("--columns: unknown field '" + c + "'");
    fields.push_back(f);
  }
  if (name_template.empty()) {
    for (const auto& c : options.columns) {
      if (!name_template.empty()) name_template.push_back('_');
      name_template.push_back('{');
      name_template.append(c);
      name_template.push_back('}');
    }
    name_template += ".pod5";
  }
  for (size_t pos = name_template.find('{'); pos != std::string::npos; pos = name_template.find('{', pos + 1)) {
    size_t end = name_template.find('}', pos);
    if (end == std::string::npos) return Status::usage("--template: unmatched '{'");
    if (!contains(options.columns, name_template.substr(pos + 1, end - pos - 1))) {
      return Status::usage("--template names {" + name_template.substr(pos + 1, end - pos - 1) +
                                      "}, which is not one of --columns");
    }
  }
  return name_template;
}

// subset's output files, by name (".pod5" added), numbered in order of first use.
class SubsetOutputs {
 public:
  uint32_t index(const std::string& name) {
    auto [it, inserted] = m_index.emplace(with_pod5_extension(name), static_cast<uint32_t>(m_names.size()));
    if (inserted) m_names.push_back(it->first);
    return it->second;
  }
  const std::string& name(uint32_t idx) const { return m_names[idx]; }

 private:
  std::vector<std::string> m_names;
  std::unordered_map<std::string, uint32_t> m_index;
};

using SubsetTargets = std::unordered_map<pod5::ReadId, uint32_t, pod5::ReadIdHash>;  // -> output index

// The output of every read the mapping names; kInvalidArgument for a read mapped to two outputs.
Status map_subset_reads(const std::vector<std::pair<pod5::ReadId, std::string>>& mapping, SubsetOutputs& outputs,
                        SubsetTargets& target) {
  for (const auto& [id, out] : mapping) {
    auto [it, inserted] = target.emplace(id, outputs.index(out));
    if (!inserted && outputs.name(it->second) != with_pod5_extension(out)) {
      return Status::invalid_argument("read " + id.to_string() + " is mapped to two outputs: " +
                                      outputs.name(it->second) + " and " + out);
    }
  }
  return Status::ok();
}

// Into `key`: `name_template` with each {column} replaced by read i's value of that field.
Status subset_key(const std::string& name_template, const std::vector<const ReadField*>& fields,
                  const std::vector<std::string>& columns, const pod5::FileReader& reader,
                  const pod5::ReadBatch& batch, size_t i, std::string& key) {
  key = name_template;
  for (size_t k = 0; k < fields.size(); ++k) {
    std::string value;
    ESCPOD_RETURN_IF_ERROR(fields[k]->append(reader, batch, i, value));
    const std::string placeholder = "{" + columns[k] + "}";
    for (size_t pos = key.find(placeholder); pos != std::string::npos; pos = key.find(placeholder, pos)) {
      key.replace(pos, placeholder.size(), value);
      pos += value.size();
    }
  }
  return Status::ok();
}

// Copies `read` to writers[idx], created as out_dir / `name` on first use, with its run info.
Status copy_to_subset_output(std::vector<std::unique_ptr<pod5::FileWriter>>& writers, uint32_t idx,
                             const std::filesystem::path& out_dir, const std::string& name,
                             const pod5::WriterOptions& writer_options, const pod5::FileReader& reader,
                             const pod5::ReadBatch& batch, const PreparedRead& read, CopyScratch& scratch) {
  while (writers.size() <= idx) writers.push_back(nullptr);
  if (!writers[idx]) {
    ESCPOD_ASSIGN_OR_RETURN(writers[idx], pod5::FileWriter::create(out_dir / name, writer_options));
  }
  const auto& acq = reader.run_info_ids()[static_cast<size_t>(batch.run_info_idx[read.row])];
  if (const auto* ri = reader.find_run_info(acq)) ESCPOD_RETURN_IF_ERROR(writers[idx]->add_run_info(*ri));
  return copy_prepared(reader, batch, read, *writers[idx], scratch, nullptr, pod5::ChunkBytes::kBorrow);
}

// kInvalidArgument naming a read id that `written` saw twice (repeats far apart, found after the
// stream) and the inputs of both copies.
Status check_subset_duplicates(pod5::ReadIdGuard& written, const Readers& readers) {
  ESCPOD_ASSIGN_OR_RETURN(std::optional<pod5::ReadIdGuard::Duplicate> dup, written.find_duplicate());
  if (dup) {
    return Status::invalid_argument("read " + dup->id.to_string() + " appears twice in the inputs (" +
                                    readers[dup->first_source]->path().string() + " and " +
                                    readers[dup->second_source]->path().string() + ")");
  }
  return Status::ok();
}

// All or nothing: finishes every output before any is renamed into place.
Status finish_then_commit(std::vector<std::unique_ptr<pod5::FileWriter>>& writers) {
  for (auto& w : writers)
    if (w) ESCPOD_RETURN_IF_ERROR(w->finish());
  for (auto& w : writers)
    if (w) ESCPOD_RETURN_IF_ERROR(w->commit());
  return Status::ok();
}

}  // namespace

Status subset_files(const std::vector<std::filesystem::path>& inputs,
                    const std::filesystem::path& out_dir, const SubsetOptions& options,
                    SubsetReport* report) {
  const bool by_columns = !options.mapping.has_value();
  std::vector<const ReadField*> fields;
  std::string name_template = options.name_template;
  if (by_columns) {
    ESCPOD_ASSIGN_OR_RETURN(name_template, subset_name_template(options, fields));
  }
  SubsetTargets target;
  SubsetOutputs outputs;
  if (!by_columns) ESCPOD_RETURN_IF_ERROR(map_subset_reads(*options.mapping, outputs, target));
  SubsetReport local;
  SubsetReport& rep = report ? *report : local;
  ESCPOD_ASSIGN_OR_RETURN(Readers readers, detail::open_readers(inputs, options.n_threads,
                                                                options.skip_bad ? &rep.skipped : nullptr));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::io_error("cannot create output folder " + out_dir.string() + ": " + ec.message());

  std::vector<std::unique_ptr<pod5::FileWriter>> writers;
  // Every read id once across all outputs, in bounded memory (repeats far apart are found
  // after the stream, before any output is committed).
  pod5::ReadIdGuard written(out_dir);
  pod5::WriterOptions writer_options = options.writer;
  writer_options.check_duplicate_ids = false;  // `written` covers every output
  uint64_t n_written = 0;
  CopyScratch scratch;
  std::string key;
  // Reads no mapping row names are dropped before their signal is touched, unless they go to
  // the unmapped output.
  const bool drop_unmapped = !by_columns && options.unmapped_output.empty();
  auto select = [&](const pod5::FileReader&, const pod5::ReadBatch& b, size_t i) {
    return !drop_unmapped || target.count(b.read_id[i]) > 0;
  };
  uint64_t n_seen = 0, n_selected = 0;
  auto consume = [&](size_t input, const pod5::FileReader& reader, const pod5::ReadBatch& batch,
                     const PreparedRead& read) -> Status {
    ++n_selected;
    const size_t i = read.row;
    uint32_t idx;
    if (by_columns) {
      ESCPOD_RETURN_IF_ERROR(subset_key(name_template, fields, options.columns, reader, batch, i, key));
      ESCPOD_RETURN_IF_ERROR(valid_output_name(key));
      idx = outputs.index(key);
    } else {
      auto it = target.find(batch.read_id[i]);
      if (it == target.end()) {
        ++rep.n_unmapped;
        idx = outputs.index(options.unmapped_output);
      } else {
        idx = it->second;
      }
    }
    ESCPOD_ASSIGN_OR_RETURN(bool fresh, written.insert(batch.read_id[i], static_cast<uint32_t>(input)));
    ++n_written;
    if (!fresh) {
      return Status::invalid_argument("read " + batch.read_id[i].to_string() + " appears twice in the inputs (" +
                                      reader.path().string() + ")");
    }
    ESCPOD_RETURN_IF_ERROR(copy_to_subset_output(writers, idx, out_dir, outputs.name(idx), writer_options, reader,
                                                 batch, read, scratch));
    ++rep.reads_per_output[outputs.name(idx)];
    return Status::ok();
  };
  auto before_release = [&](const void* lo, const void* hi) -> Status {
    for (auto& w : writers)
      if (w) ESCPOD_RETURN_IF_ERROR(w->copy_borrowed_in(lo, hi));
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(stream_reads(readers, options.n_threads, select, consume, &n_seen, before_release));
  if (drop_unmapped) rep.n_unmapped = n_seen - n_selected;
  ESCPOD_RETURN_IF_ERROR(check_subset_duplicates(written, readers));
  if (!by_columns) rep.n_mapped_missing = target.size() - std::min<uint64_t>(target.size(), n_written);
  return finish_then_commit(writers);
}

}  // namespace escpod::pipeline
