#include "escpod/pipeline/ops/annotations.hpp"

#include <algorithm>
#include <cmath>

#include "escpod/core/log.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline {
namespace {

Result<std::vector<std::string>> read_header(detail::LineReader& in, const std::string& path,
                                             std::vector<std::string_view>& cells, std::string& storage) {
  std::string line;
  while (in.next(line)) {
    if (line.find_first_not_of(" \r") == std::string::npos) continue;
    std::string_view text = line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (!text.empty() && text[0] == '#') text.remove_prefix(1);
    detail::split_csv(text, cells, storage);
    return std::vector<std::string>(cells.begin(), cells.end());
  }
  if (!in.error().empty()) return Status::io_error(path + ": " + in.error());
  return Status::invalid_argument(path + ": empty CSV (needs a header)");
}

}  // namespace

Result<AnnotationSource> read_annotation_csv(const std::string& path, const std::string& name,
                                             pod5::AnnotationKind kind, const std::string& value_column) {
  if (name.empty()) return Status::usage("--name is empty");
  if (pod5::is_reserved_sidecar_name(name)) {
    return Status::usage("'" + name + "' is reserved for the sidecar's index (read_id, batch_idx, row_idx)");
  }
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader in, detail::LineReader::open(path));
  std::vector<std::string_view> cells;
  std::string storage, line;
  ESCPOD_ASSIGN_OR_RETURN(auto header, read_header(in, path, cells, storage));
  auto index_of = [&header](const std::string& col) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), col) - header.begin());
  };
  const size_t id_col = index_of("read_id");
  if (id_col == header.size()) return Status::invalid_argument(path + ": header has no read_id column");
  size_t value_col = header.size();
  if (!value_column.empty()) {
    value_col = index_of(value_column);
    if (value_col == header.size()) return Status::invalid_argument(path + ": header has no column '" + value_column + "'");
  } else if (index_of(name) < header.size()) {
    value_col = index_of(name);
  } else if (header.size() == 2) {
    value_col = 1 - id_col;
  } else {
    return Status::invalid_argument(path + ": which column holds the values? It has no column '" + name +
                                    "' and more than one besides read_id (use --column)");
  }
  AnnotationSource src;
  src.name = name;
  src.kind = kind;
  const size_t need = std::max(id_col, value_col);
  while (in.next(line)) {
    const std::string where = path + " line " + std::to_string(in.line_no());
    std::string_view text = line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(' ') == std::string_view::npos || text[0] == '#') continue;
    detail::split_csv(text, cells, storage);
    if (cells.size() <= need) return Status::invalid_argument(where + ": too few columns");
    auto id = pod5::ReadId::parse(cells[id_col]);
    if (!id.is_ok()) return id.status().with_context(where);
    const std::string_view value = cells[value_col];
    bool inserted;
    if (kind == pod5::AnnotationKind::kLabel) {
      if (value.empty()) {
        return Status::invalid_argument(where + ": empty label for read " + id->to_string() +
                                        " (leave unassigned reads out)");
      }
      inserted = src.labels.emplace(*id, std::string(value)).second;
    } else {
      double v = 0;
      const std::string lower = [&] {
        std::string s(value);
        for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
      }();
      if (lower == "inf" || lower == "+inf" || lower == "infinity") {
        v = HUGE_VAL;
      } else if (lower == "-inf" || lower == "-infinity") {
        v = -HUGE_VAL;
      } else if (!detail::parse_double(value, v) || std::isnan(v)) {
        return Status::invalid_argument(where + ": score '" + std::string(value) + "' for read " + id->to_string() +
                                        " is not a number (NaN refused; leave unscored reads out)");
      }
      inserted = src.scores.emplace(*id, static_cast<float>(v)).second;
    }
    if (!inserted) return Status::invalid_argument(where + ": read " + id->to_string() + " appears twice");
  }
  if (!in.error().empty()) return Status::io_error(path + ": " + in.error());
  return src;
}

Result<pod5::SidecarDesign> read_design_csv(const std::string& path, const std::vector<std::string>& key_columns) {
  ESCPOD_ASSIGN_OR_RETURN(detail::LineReader in, detail::LineReader::open(path));
  std::vector<std::string_view> cells;
  std::string storage, line;
  ESCPOD_ASSIGN_OR_RETURN(auto header, read_header(in, path, cells, storage));
  pod5::SidecarDesign d;
  std::vector<size_t> order;
  for (const auto& k : key_columns) {
    auto it = std::find(header.begin(), header.end(), k);
    if (it == header.end()) return Status::invalid_argument(path + ": design key column '" + k + "' is not in the header");
    d.key_columns.push_back(k);
    order.push_back(static_cast<size_t>(it - header.begin()));
  }
  for (size_t c = 0; c < header.size(); ++c) {
    if (std::find(key_columns.begin(), key_columns.end(), header[c]) != key_columns.end()) continue;
    d.value_columns.push_back(header[c]);
    order.push_back(c);
  }
  while (in.next(line)) {
    std::string_view text = line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(' ') == std::string_view::npos || text[0] == '#') continue;
    detail::split_csv(text, cells, storage);
    if (cells.size() != header.size()) {
      return Status::invalid_argument(path + " line " + std::to_string(in.line_no()) + ": " +
                                      std::to_string(cells.size()) + " cells, header has " +
                                      std::to_string(header.size()));
    }
    std::vector<std::string> row;
    for (size_t c : order) row.emplace_back(cells[c]);
    d.rows.push_back(std::move(row));
  }
  if (!in.error().empty()) return Status::io_error(path + ": " + in.error());
  // Validation (names, widths, empty cells, repeated keys) is the design's own.
  auto checked = pod5::parse_sidecar_design(pod5::design_to_json(d));
  if (!checked.is_ok()) return checked.status().with_context(path);
  return d;
}

Status check_sidecars_writable(const std::vector<std::filesystem::path>& inputs) {
  for (const auto& path : inputs) {
    ESCPOD_ASSIGN_OR_RETURN(auto reader, pod5::FileReader::open(path));
    auto sc = pod5::Sidecar::open(*reader);
    if (!sc.is_ok() && sc.status().code() != StatusCode::kNotFound) return sc.status();
  }
  return Status::ok();
}

Status annotate_files(const std::vector<std::filesystem::path>& inputs,
                      const std::vector<AnnotationSource>& sources, const AnnotateOptions& options,
                      AnnotateReport* report) {
  AnnotateReport local;
  AnnotateReport& rep = report ? *report : local;
  if (sources.empty() && !options.design) return Status::usage("nothing to annotate");
  struct Pending {
    std::unique_ptr<pod5::FileReader> reader;
    pod5::Sidecar sidecar;
    uint64_t n_assigned = 0;
  };
  // Everything is prepared in memory first: a bad input or a source matching nothing writes no file.
  std::vector<Pending> pending;
  std::vector<size_t> hits(sources.size(), 0);
  for (const auto& path : inputs) {
    Pending p;
    ESCPOD_ASSIGN_OR_RETURN(p.reader, pod5::FileReader::open(path));
    auto existing = pod5::Sidecar::open(*p.reader);
    if (existing.is_ok()) {
      // A damaged index is never carried into a new file.
      ESCPOD_RETURN_IF_ERROR(existing->verify_index(*p.reader, options.n_threads));
      p.sidecar = std::move(*existing);
    } else if (existing.status().code() == StatusCode::kNotFound) {
      ESCPOD_ASSIGN_OR_RETURN(p.sidecar, pod5::Sidecar::build_index(*p.reader, options.n_threads));
      ++rep.n_indexes_built;
    } else {
      return existing.status();
    }
    if (options.design) ESCPOD_RETURN_IF_ERROR(p.sidecar.set_design(*options.design).with_context(path.string()));
    const auto& ids = p.sidecar.read_ids();
    for (size_t s = 0; s < sources.size(); ++s) {
      const auto& src = sources[s];
      Status st;
      if (src.kind == pod5::AnnotationKind::kLabel) {
        std::vector<std::pair<size_t, std::string>> rows;
        for (size_t r = 0; r < ids.size(); ++r) {
          auto it = src.labels.find(ids[r]);
          if (it != src.labels.end()) rows.emplace_back(r, it->second);
        }
        hits[s] += rows.size();
        p.n_assigned = std::max<uint64_t>(p.n_assigned, rows.size());
        st = p.sidecar.set_labels(src.name, rows);
      } else {
        std::vector<std::pair<size_t, float>> rows;
        for (size_t r = 0; r < ids.size(); ++r) {
          auto it = src.scores.find(ids[r]);
          if (it != src.scores.end()) rows.emplace_back(r, it->second);
        }
        hits[s] += rows.size();
        p.n_assigned = std::max<uint64_t>(p.n_assigned, rows.size());
        st = p.sidecar.set_scores(src.name, rows);
      }
      ESCPOD_RETURN_IF_ERROR(st.with_context(path.string()));
    }
    pending.push_back(std::move(p));
  }
  for (size_t s = 0; s < sources.size(); ++s) {
    if (hits[s] == 0 && sources[s].size() > 0) {
      return Status::invalid_argument("none of the " + std::to_string(sources[s].size()) + " reads given for '" +
                                      sources[s].name + "' is in the inputs (wrong files?); no sidecar written");
    }
    rep.n_not_in_inputs += sources[s].size() - std::min<uint64_t>(hits[s], sources[s].size());
  }
  for (auto& p : pending) {
    ESCPOD_RETURN_IF_ERROR(p.sidecar.write(pod5::sidecar_path(p.reader->path()), options.fsync, options.writer));
    rep.assigned_per_file.emplace_back(p.reader->path(), p.n_assigned);
  }
  return Status::ok();
}

Result<std::vector<std::pair<pod5::ReadId, std::string>>> sidecar_labels(
    const std::vector<std::filesystem::path>& inputs, const std::string& column, int n_threads) {
  std::vector<std::pair<pod5::ReadId, std::string>> rows;
  for (const auto& path : inputs) {
    ESCPOD_ASSIGN_OR_RETURN(auto reader, pod5::FileReader::open(path));
    auto sc = pod5::Sidecar::open(*reader);
    if (!sc.is_ok()) {
      if (sc.status().code() == StatusCode::kNotFound) {
        return Status::not_found(path.string() + " has no sidecar (" + pod5::sidecar_path(path).string() +
                                 "); run `escpod demux --annotate` or `escpod annotate` first");
      }
      return sc.status();
    }
    ESCPOD_ASSIGN_OR_RETURN(const pod5::AnnotationColumn* col, sc->column(column, pod5::AnnotationKind::kLabel));
    // Routing goes by read id, but a sidecar whose index disagrees with its POD5 is damaged:
    // refuse it rather than trust its columns.
    ESCPOD_RETURN_IF_ERROR(sc->verify_index(*reader, n_threads));
    for (size_t r = 0; r < sc->n_reads(); ++r) rows.emplace_back(sc->read_ids()[r], col->text(r));
  }
  return rows;
}

Result<std::vector<std::string>> sidecar_column_names(const std::vector<std::filesystem::path>& inputs) {
  std::vector<std::string> names;
  for (const auto& path : inputs) {
    ESCPOD_ASSIGN_OR_RETURN(auto reader, pod5::FileReader::open(path));
    auto sc = pod5::Sidecar::open(*reader);
    if (!sc.is_ok()) {
      if (sc.status().code() == StatusCode::kNotFound) continue;
      return sc.status();
    }
    for (const auto& c : sc->columns())
      if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  }
  return names;
}

// ---- lookups while streaming -----------------------------------------------------------------

Result<std::unique_ptr<SidecarLookup>> SidecarLookup::open(const std::vector<const pod5::FileReader*>& readers,
                                                           bool required) {
  auto out = std::make_unique<SidecarLookup>();
  for (const auto* r : readers) {
    auto sc = pod5::Sidecar::open(*r);
    if (!sc.is_ok()) {
      if (sc.status().code() != StatusCode::kNotFound) return sc.status();
      if (required) {
        return Status::not_found(r->path().string() + " has no sidecar (" + pod5::sidecar_path(r->path()).string() +
                                 "); run `escpod demux --annotate` or `escpod annotate` first");
      }
      continue;
    }
    auto owned = std::make_unique<pod5::Sidecar>(std::move(*sc));
    out->m_order.push_back(owned.get());
    out->m_sidecars.emplace(r, std::move(owned));
  }
  return out;
}

const pod5::Sidecar* SidecarLookup::sidecar_of(const pod5::FileReader& reader) const {
  auto it = m_sidecars.find(&reader);
  return it == m_sidecars.end() ? nullptr : it->second.get();
}

std::optional<size_t> SidecarLookup::row(const pod5::FileReader& reader, const pod5::ReadBatch& batch,
                                         size_t i) const {
  const pod5::Sidecar* sc = sidecar_of(reader);
  if (!sc) return std::nullopt;
  const pod5::ReadId& id = batch.read_id[i];
  auto row = sc->row_of(id);
  const pod5::ReadLocator here{static_cast<uint32_t>(batch.batch_idx), static_cast<uint32_t>(i)};
  if (row && sc->locator(*row) == here) return row;
  std::lock_guard lock(m_mutex);
  if (!m_failed) {
    m_failed = true;
    m_error = Status::corrupt(
        sc->path().string() + ": " +
        (row ? "read " + id.to_string() + " is at batch " + std::to_string(here.batch_idx) + " row " +
                   std::to_string(here.row_idx) + " of the POD5, the sidecar says batch " +
                   std::to_string(sc->locator(*row).batch_idx) + " row " + std::to_string(sc->locator(*row).row_idx)
             : "has no row for read " + id.to_string() + " of the POD5") +
        " (damaged sidecar, " + sc->provenance() + "; remove it and annotate again)");
  }
  return std::nullopt;
}

Status SidecarLookup::error() const {
  if (!m_failed) return Status::ok();
  std::lock_guard lock(m_mutex);
  return m_error;
}

std::vector<std::string> SidecarLookup::column_names() const {
  std::vector<std::string> names;
  for (const auto* sc : m_order)
    for (const auto& c : sc->columns())
      if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  return names;
}

Result<std::unique_ptr<AnnotationFilter>> AnnotationFilter::create(const std::vector<std::string>& criteria,
                                                                   const std::vector<const pod5::FileReader*>& readers) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_name;  // NAME -> LABELs, first-seen order
  for (const auto& text : criteria) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
      return Status::usage("--annotation '" + text + "': expected NAME=LABEL");
    }
    std::string name = text.substr(0, eq), label = text.substr(eq + 1);
    auto it = std::find_if(by_name.begin(), by_name.end(), [&](const auto& p) { return p.first == name; });
    if (it == by_name.end()) {
      by_name.push_back({name, {label}});
    } else {
      it->second.push_back(label);
    }
  }
  auto out = std::make_unique<AnnotationFilter>();
  ESCPOD_ASSIGN_OR_RETURN(out->m_lookup, SidecarLookup::open(readers, /*required=*/true));
  for (const auto* r : readers) {
    const pod5::Sidecar* sc = out->m_lookup->sidecar_of(*r);
    PerFile pf;
    for (const auto& [name, labels] : by_name) {
      ESCPOD_ASSIGN_OR_RETURN(const pod5::AnnotationColumn* col, sc->column(name, pod5::AnnotationKind::kLabel));
      std::vector<uint8_t> accepted(col->labels.size(), 0);
      for (const auto& l : labels) {
        auto pos = std::find(col->labels.begin(), col->labels.end(), l);
        if (pos != col->labels.end()) accepted[static_cast<size_t>(pos - col->labels.begin())] = 1;
      }
      pf.names.emplace_back(col, std::move(accepted));
    }
    out->m_per_file.emplace(r, std::move(pf));
  }
  return out;
}

bool AnnotationFilter::accepts(const pod5::FileReader& reader, const pod5::ReadBatch& batch, size_t i) const {
  auto row = m_lookup->row(reader, batch, i);
  if (!row) return false;
  const PerFile& pf = m_per_file.at(&reader);
  for (const auto& [col, accepted] : pf.names) {
    const int32_t idx = col->label_idx[*row];
    if (idx < 0 || !accepted[static_cast<size_t>(idx)]) return false;
  }
  return true;
}

}  // namespace escpod::pipeline
