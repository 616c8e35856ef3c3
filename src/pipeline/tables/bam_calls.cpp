// The calls bam-demux joins (bam_calls.hpp): the table's layout from its header, its labels as
// escpod names them.
#include "pipeline/tables/bam_calls.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pipeline/tables/barcode_labels.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline::detail {

namespace fs = std::filesystem;

namespace {

// The columns of one calls table and who wrote it.
struct Layout {
  size_t read_id = 0, label = 0;
  std::optional<size_t> confidence;
  std::string source;
  size_t n_columns = 0;
};

std::optional<size_t> column(const std::vector<std::string_view>& header, std::string_view name) {
  auto it = std::find(header.begin(), header.end(), name);
  if (it == header.end()) return std::nullopt;
  return static_cast<size_t>(it - header.begin());
}

Result<Layout> layout_of(std::string_view header_line, const fs::path& path) {
  if (!header_line.empty() && header_line.front() == '#') header_line.remove_prefix(1);  // WarpDemuX's
  std::vector<std::string_view> cells;
  std::string storage;
  split_csv(header_line, cells, storage);
  Layout l;
  l.n_columns = cells.size();
  const auto id = column(cells, "read_id");
  auto label = column(cells, kLabelColumn);
  const bool legacy = !label.has_value();
  if (!label) label = column(cells, kLegacyLabelColumn);
  if (!id || !label)
    return Status::invalid_argument(path.string() + ":1: not a calls table: it needs a read_id column and a "
                                    "barcode (or predicted_barcode) column; the header is '" +
                                    std::string(header_line) + "'");
  l.read_id = *id;
  l.label = *label;
  l.confidence = column(cells, "confidence");
  if (!l.confidence) l.confidence = column(cells, "confidence_score");
  if (column(cells, "confidence_score")) l.source = "warpdemux";
  else if (column(cells, "decoded_seq") || column(cells, "crf_best")) l.source = "escpod-crf";
  else if (legacy) l.source = "escapepod";
  else l.source = "escpod";
  return l;
}

bool safe_name(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.size() > 200) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '+';
  });
}

// Collects calls into one table: labels interned, a read id twice an error.
class Builder {
 public:
  uint8_t source(const std::string& name) {
    auto it = std::find(m_calls.sources.begin(), m_calls.sources.end(), name);
    if (it != m_calls.sources.end()) return static_cast<uint8_t>(it - m_calls.sources.begin());
    m_calls.sources.push_back(name);
    return static_cast<uint8_t>(m_calls.sources.size() - 1);
  }
  // The label as escpod names it: a barcode or the noise class normalised (BC04, unclassified),
  // any other safe name kept.
  Result<uint32_t> label(std::string_view text, const std::string& where) {
    std::string name;
    if (text.empty()) {
      name = "unclassified";
    } else if (auto n = parse_barcode_label(text, where); n.is_ok()) {
      name = label_name(*n);
    } else if (safe_name(text)) {
      name = std::string(text);
    } else {
      return Status::invalid_argument(where + ": label '" + std::string(text) +
                                      "' is neither a barcode, the noise class, nor a name of letters, digits "
                                      "and ._+- (it names an output file)");
    }
    auto [it, fresh] = m_label_index.try_emplace(name, static_cast<uint32_t>(m_calls.labels.size()));
    if (fresh) m_calls.labels.push_back(name);
    return it->second;
  }
  // A table (a file, or a sidecar column): the index of its name for messages.
  uint32_t table(std::string name) {
    m_tables.push_back(std::move(name));
    return static_cast<uint32_t>(m_tables.size() - 1);
  }
  void add(const pod5::ReadId& id, const BamCall& call, CallIndex::Origin origin) {
    m_calls.by_read.add(id, call, origin);
  }
  Result<BamCalls> take() {
    ESCPOD_RETURN_IF_ERROR(m_calls.by_read.build(
        [&](CallIndex::Origin o) { return m_tables[o.file] + ":" + std::to_string(o.line); }));
    return std::move(m_calls);
  }

 private:
  BamCalls m_calls;
  std::vector<std::string> m_tables;
  std::unordered_map<std::string, uint32_t> m_label_index{{"unclassified", BamCalls::kUnclassified}};
};

Status read_row(Builder& b, const Layout& l, uint8_t source, const std::vector<std::string_view>& cells,
                const std::string& where, CallIndex::Origin origin) {
  if (cells.size() <= std::max(l.read_id, l.label))
    return Status::invalid_argument(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                                    std::to_string(l.n_columns));
  auto id = pod5::ReadId::parse(cells[l.read_id]);
  if (!id.is_ok())
    return Status::invalid_argument(where + ": read_id '" + std::string(cells[l.read_id]) + "' is not a read id (a UUID)");
  BamCall call;
  call.source = source;
  ESCPOD_ASSIGN_OR_RETURN(call.label, b.label(cells[l.label], where));
  if (l.confidence && *l.confidence < cells.size() && !cells[*l.confidence].empty()) {
    double c = 0.0;
    if (!parse_double(cells[*l.confidence], c) || !std::isfinite(c))
      return Status::invalid_argument(where + ": confidence '" + std::string(cells[*l.confidence]) + "' is not a number");
    call.has_confidence = true;
    call.confidence = static_cast<float>(c);
  }
  b.add(*id, call, origin);
  return Status::ok();
}

Status read_csv(Builder& b, const fs::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(LineReader in, LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  if (!in.next(line))
    return in.error().empty() ? Status::invalid_argument(path.string() + ": empty, not a calls table")
                              : Status::io_error(path.string() + ": " + in.error());
  ESCPOD_ASSIGN_OR_RETURN(const Layout layout, layout_of(line, path));
  const uint8_t source = b.source(layout.source);
  const uint32_t table = b.table(path.string());
  std::string where;
  while (in.next(line)) {
    if (line.empty() || line.front() == '#') continue;
    split_csv(line, cells, storage);
    const auto line_no = static_cast<uint32_t>(in.line_no());
    where.assign(path.string()).append(":").append(std::to_string(line_no));
    ESCPOD_RETURN_IF_ERROR(read_row(b, layout, source, cells, where, CallIndex::Origin{table, line_no}));
  }
  if (!in.error().empty()) return Status::io_error(path.string() + ": " + in.error());
  return Status::ok();
}

Status read_sidecars(Builder& b, const BamCallsSource& s) {
  ESCPOD_ASSIGN_OR_RETURN(auto rows, sidecar_labels(s.pod5_inputs, s.annotation));
  const uint8_t source = b.source("sidecar");
  const uint32_t table = b.table("the .p5s sidecars' column " + s.annotation + ", row");
  uint32_t row = 0;
  for (const auto& [id, text] : rows) {
    ++row;
    if (text.empty()) continue;  // a read the column gives no label: no call
    const std::string where = "sidecar column " + s.annotation + " (read " + id.to_string() + ")";
    BamCall call;
    call.source = source;
    ESCPOD_ASSIGN_OR_RETURN(call.label, b.label(text, where));
    b.add(id, call, CallIndex::Origin{table, row});
  }
  return Status::ok();
}

}  // namespace

uint64_t CallIndex::mix(const pod5::ReadId& id) {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, id.bytes.data(), 8);
  std::memcpy(&b, id.bytes.data() + 8, 8);
  uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

void CallIndex::add(const pod5::ReadId& id, const BamCall& call, Origin origin) {
  if (m_chunks.empty() || m_chunks.back().size() == kChunk) {
    m_chunks.emplace_back();
    m_chunks.back().reserve(kChunk);
  }
  m_chunks.back().push_back(Entry{id, call, origin});
}

Status CallIndex::build(const std::function<std::string(Origin)>& where) {
  size_t n = 0;
  for (const auto& c : m_chunks) n += c.size();
  m_entries.reserve(n);
  for (auto& c : m_chunks) {
    m_entries.insert(m_entries.end(), c.begin(), c.end());
    std::vector<Entry>().swap(c);
  }
  m_chunks.clear();
  std::sort(m_entries.begin(), m_entries.end(), [](const Entry& x, const Entry& y) {
    const uint64_t hx = mix(x.id), hy = mix(y.id);
    return hx != hy ? hx < hy : x.id < y.id;
  });
  for (size_t i = 1; i < m_entries.size(); ++i)
    if (m_entries[i].id == m_entries[i - 1].id) {
      const Entry& a = m_entries[i - 1].origin.file < m_entries[i].origin.file ||
                               (m_entries[i - 1].origin.file == m_entries[i].origin.file &&
                                m_entries[i - 1].origin.line < m_entries[i].origin.line)
                           ? m_entries[i - 1] : m_entries[i];
      const Entry& b = &a == &m_entries[i] ? m_entries[i - 1] : m_entries[i];
      return Status::invalid_argument(where(b.origin) + ": read " + b.id.to_string() + " has a call already (at " +
                                      where(a.origin) + "; read ids must be unique across the calls)");
    }
  m_bits = 1;
  while ((size_t{1} << m_bits) * 4 < m_entries.size() && m_bits < 30) ++m_bits;
  m_range_start.assign((size_t{1} << m_bits) + 1, 0);
  for (const Entry& e : m_entries) ++m_range_start[(mix(e.id) >> (64 - m_bits)) + 1];
  for (size_t r = 1; r < m_range_start.size(); ++r) m_range_start[r] += m_range_start[r - 1];
  return Status::ok();
}

const BamCall* CallIndex::find(const pod5::ReadId& id) const {
  if (m_entries.empty()) return nullptr;
  const uint64_t r = mix(id) >> (64 - m_bits);
  for (uint32_t i = m_range_start[r]; i < m_range_start[r + 1]; ++i)
    if (m_entries[i].id == id) return &m_entries[i].call;
  return nullptr;
}

Result<BamCalls> read_bam_calls(const BamCallsSource& source) {
  if (source.classifications.empty() == source.pod5_inputs.empty())
    return Status::usage("bam-demux takes its calls from --classifications CSV... or from --pod5 IN... "
                         "(their .p5s sidecars), one of the two");
  Builder b;
  for (const auto& path : source.classifications) ESCPOD_RETURN_IF_ERROR(read_csv(b, path));
  if (!source.pod5_inputs.empty()) ESCPOD_RETURN_IF_ERROR(read_sidecars(b, source));
  return b.take();
}

}  // namespace escpod::pipeline::detail
