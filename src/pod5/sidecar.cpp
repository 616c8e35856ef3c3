#include "escpod/pod5/sidecar.hpp"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/api.h>
#include <arrow/util/compression.h>

#include <algorithm>
#include <cstring>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "escpod/pod5/file_reader.hpp"
#include "pod5/arrow_types.hpp"

namespace escpod::pod5 {
namespace {

constexpr std::string_view kVersionKey = "escapepod:p5s_version";
constexpr std::string_view kIdentifierKey = "escapepod:file_identifier";
constexpr std::string_view kSizeKey = "escapepod:pod5_size";
constexpr std::string_view kDesignKey = "escapepod:design";
constexpr std::string_view kSourceKey = "escapepod:source_name";
constexpr std::string_view kReadCountKey = "escapepod:read_count";
constexpr std::string_view kWriterKey = "escapepod:writer";
// Ours: "<writer>|<16 hex digits>", a hash of the logical content (index and every column).
// Checked only when <writer> equals escapepod:writer, i.e. the file is as the program that wrote
// the hash left it (another program rewriting the file and keeping the key stamps its own
// writer). Zstd frames carry no checksum, so this is what catches damage that still decodes.
constexpr std::string_view kHashKey = "escpod:content_hash";

bool is_known_key(std::string_view k) {
  return k == kVersionKey || k == kIdentifierKey || k == kSizeKey || k == kDesignKey ||
         k == kSourceKey || k == kReadCountKey || k == kWriterKey || k == kHashKey;
}

// FNV-1a, 64 bits.
class ContentHash {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) m_h = (m_h ^ p[i]) * 0x100000001b3ull;
  }
  template <class T>
  void add_value(T v) { add(&v, sizeof v); }
  void add_text(std::string_view s) {
    add_value<uint64_t>(s.size());
    add(s.data(), s.size());
  }
  uint64_t value() const { return m_h; }

 private:
  uint64_t m_h = 0xcbf29ce484222325ull;
};

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

Result<std::string> read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return Status::not_found("no sidecar " + path.string());
    return Status::io_error("cannot open " + path.string());
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::io_error("cannot read " + path.string());
  return bytes;
}

// The POD5's file name: the sidecar's without ".p5s".
std::string source_name_of(const std::filesystem::path& sidecar) {
  std::string name = sidecar.filename().string();
  if (name.size() > 4 && name.ends_with(".p5s")) name.resize(name.size() - 4);
  return name;
}

std::string fmt_hex(uint64_t v) {
  char buf[17];
  for (int i = 15; i >= 0; --i, v >>= 4) buf[i] = "0123456789abcdef"[v & 15];
  buf[16] = 0;
  return buf;
}

std::shared_ptr<arrow::DataType> label_type() { return arrow::dictionary(arrow::int32(), arrow::utf8()); }

}  // namespace

std::filesystem::path sidecar_path(const std::filesystem::path& pod5_path) {
  std::filesystem::path p = pod5_path;
  p += ".p5s";
  return p;
}

std::string_view annotation_kind_name(AnnotationKind kind) {
  return kind == AnnotationKind::kLabel ? "label" : "score";
}

bool is_reserved_sidecar_name(std::string_view name) {
  return name == "read_id" || name == "batch_idx" || name == "row_idx";
}

bool AnnotationColumn::has_value(size_t row) const {
  return kind == AnnotationKind::kLabel ? label_idx[row] >= 0 : !std::isnan(scores[row]);
}

std::string AnnotationColumn::text(size_t row) const {
  if (!has_value(row)) return {};
  if (kind == AnnotationKind::kLabel) return labels[static_cast<size_t>(label_idx[row])];
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, scores[row]);
  return std::string(buf, p);
}

// ---- design ----------------------------------------------------------------------------------

namespace {

Status validate_design(const SidecarDesign& d) {
  if (d.key_columns.empty()) return Status::invalid_argument("design: no key column");
  if (d.value_columns.empty()) return Status::invalid_argument("design: no value column");
  std::set<std::string> seen;
  for (const auto* names : {&d.key_columns, &d.value_columns}) {
    for (const auto& n : *names) {
      if (n.empty()) return Status::invalid_argument("design: empty column name");
      if (is_reserved_sidecar_name(n)) {
        return Status::invalid_argument("design: column name '" + n + "' is reserved (read_id, batch_idx, row_idx)");
      }
      if (!seen.insert(n).second) return Status::invalid_argument("design: column '" + n + "' named twice");
    }
  }
  const size_t width = d.key_columns.size() + d.value_columns.size();
  std::set<std::vector<std::string>> keys;
  for (size_t r = 0; r < d.rows.size(); ++r) {
    const auto& row = d.rows[r];
    if (row.size() != width) {
      return Status::invalid_argument("design row " + std::to_string(r + 1) + ": " + std::to_string(row.size()) +
                                      " cells, expected " + std::to_string(width) + " (keys then values)");
    }
    for (const auto& cell : row) {
      if (cell.empty()) return Status::invalid_argument("design row " + std::to_string(r + 1) + ": empty cell");
    }
    std::vector<std::string> key(row.begin(), row.begin() + static_cast<long>(d.key_columns.size()));
    if (!keys.insert(key).second) {
      return Status::invalid_argument("design row " + std::to_string(r + 1) + ": key repeated");
    }
  }
  return Status::ok();
}

}  // namespace

Result<SidecarDesign> parse_sidecar_design(std::string_view text) {
  SidecarDesign d;
  try {
    auto j = nlohmann::json::parse(text);
    for (const auto& [key, value] : j.items()) {
      if (key != "key_columns" && key != "value_columns" && key != "rows") {
        return Status::invalid_argument("design: unknown key '" + key + "'");
      }
    }
    d.key_columns = j.at("key_columns").get<std::vector<std::string>>();
    d.value_columns = j.at("value_columns").get<std::vector<std::string>>();
    d.rows = j.at("rows").get<std::vector<std::vector<std::string>>>();
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("design: not a valid design JSON: ") + e.what());
  }
  ESCPOD_RETURN_IF_ERROR(validate_design(d));
  return d;
}

std::string design_to_json(const SidecarDesign& d) {
  nlohmann::ordered_json j;
  j["key_columns"] = d.key_columns;
  j["value_columns"] = d.value_columns;
  j["rows"] = d.rows;
  return j.dump();
}

// ---- reading ---------------------------------------------------------------------------------

std::string Sidecar::content_hash() const {
  ContentHash h;
  h.add_value<uint64_t>(m_ids.size());
  for (size_t i = 0; i < m_ids.size(); ++i) {
    h.add(m_ids[i].bytes.data(), 16);
    h.add_value(m_locators[i].batch_idx);
    h.add_value(m_locators[i].row_idx);
  }
  for (const auto& c : m_columns) {
    if (c.derived) continue;  // rebuilt from the keys and the design
    h.add_text(c.name);
    h.add_value<uint8_t>(c.kind == AnnotationKind::kLabel ? 1 : 2);
    for (size_t r = 0; r < m_ids.size(); ++r) {
      if (c.kind == AnnotationKind::kLabel) {
        if (c.label_idx[r] < 0) {
          h.add_value<uint64_t>(UINT64_MAX);
        } else {
          h.add_text(c.labels[static_cast<size_t>(c.label_idx[r])]);
        }
      } else {
        uint32_t bits;
        std::memcpy(&bits, &c.scores[r], 4);
        h.add_value(std::isnan(c.scores[r]) ? UINT32_MAX : bits);
      }
    }
  }
  return fmt_hex(h.value());
}

std::string Sidecar::provenance() const {
  std::string s = "from \"" + (m_source_name.empty() ? std::string("?") : m_source_name) + "\"";
  if (m_recorded_read_count) s += ", " + std::to_string(*m_recorded_read_count) + " reads";
  s += ", written by " + (m_writer.empty() ? std::string("an unknown program") : m_writer);
  return s;
}

int Sidecar::version() const {
  for (const auto& c : m_columns)
    if (c.kind == AnnotationKind::kScore) return 2;
  return 1;
}

std::optional<size_t> Sidecar::row_of(const ReadId& id) const {
  auto it = std::lower_bound(m_ids.begin(), m_ids.end(), id);
  if (it == m_ids.end() || *it != id) return std::nullopt;
  return static_cast<size_t>(it - m_ids.begin());
}

const AnnotationColumn* Sidecar::find(std::string_view name) const {
  for (const auto& c : m_columns)
    if (c.name == name) return &c;
  return nullptr;
}

Result<const AnnotationColumn*> Sidecar::column(std::string_view name, AnnotationKind kind) const {
  const AnnotationColumn* c = find(name);
  if (!c) {
    std::string names;
    for (const auto& col : m_columns) names += (names.empty() ? "" : ", ") + col.name;
    return Status::not_found(m_path.string() + " has no column '" + std::string(name) + "' (columns: " +
                             (names.empty() ? "none" : names) + ")");
  }
  if (c->kind != kind) {
    return Status::invalid_argument("'" + std::string(name) + "' in " + m_path.string() + " is a " +
                                    std::string(annotation_kind_name(c->kind)) + " column, not a " +
                                    std::string(annotation_kind_name(kind)) + " column");
  }
  return c;
}

namespace {

// Errors about a sidecar being opened: kCorrupt naming the file, the problem and the sidecar's
// provenance (as far as its metadata has been read).
struct CorruptSidecar {
  const std::string& where;
  const Sidecar& sc;
  Status operator()(const std::string& what) const {
    return Status::corrupt(where + ": " + what + " (" + sc.provenance() + ")");
  }
};

// Where a sidecar's index columns are, and its annotation columns, in schema order.
struct SidecarColumns {
  int id_col = -1, batch_col = -1, row_col = -1;
  std::vector<int> annotation_cols;
};

std::optional<std::string> metadata_value(const arrow::KeyValueMetadata& md, std::string_view key) {
  auto v = md.Get(std::string(key));
  if (!v.ok()) return std::nullopt;
  return *v;
}

// The file identifier and POD5 size the sidecar was written for, checked against `pod5`'s.
Result<std::pair<std::string, uint64_t>> sidecar_owner(const arrow::KeyValueMetadata& md, const std::string& where,
                                                       const FileInfo& pod5, const Sidecar& sc) {
  auto ident = metadata_value(md, kIdentifierKey);
  auto size_text = metadata_value(md, kSizeKey);
  std::optional<uint64_t> size = size_text ? parse_u64(*size_text) : std::nullopt;
  if (!ident || !size) {
    return Status::corrupt(where + ": no valid " + std::string(!ident ? kIdentifierKey : kSizeKey) + " (" +
                           sc.provenance() + ")");
  }
  if (*ident != pod5.file_identifier || *size != pod5.file_size) {
    return Status::corrupt(where + " does not belong to " + pod5.path.string() + " (sidecar: file identifier " +
                           *ident + ", " + std::to_string(*size) + " bytes; POD5: " + pod5.file_identifier +
                           ", " + std::to_string(pod5.file_size) + " bytes): the POD5 changed or the sidecar "
                           "was copied from another file (" + sc.provenance() +
                           "); remove it and annotate again");
  }
  return std::make_pair(std::move(*ident), *size);
}

// The schema's columns, types checked before any batch is read: the index columns, then one
// empty annotation column appended to `columns` per other column.
Result<SidecarColumns> check_sidecar_schema(const arrow::Schema& schema, const CorruptSidecar& bad,
                                            std::vector<AnnotationColumn>& columns) {
  SidecarColumns out;
  out.id_col = schema.GetFieldIndex("read_id");
  out.batch_col = schema.GetFieldIndex("batch_idx");
  out.row_col = schema.GetFieldIndex("row_idx");
  if (out.id_col < 0 || out.batch_col < 0 || out.row_col < 0) {
    return bad("needs the columns read_id, batch_idx and row_idx");
  }
  {
    const auto& f = *schema.field(out.id_col);
    auto storage = f.type()->id() == arrow::Type::EXTENSION
                       ? static_cast<const arrow::ExtensionType&>(*f.type()).storage_type()
                       : f.type();
    if (detail::extension_name(f) != "minknow.uuid" || !storage->Equals(arrow::fixed_size_binary(16))) {
      return bad("read_id is " + f.type()->ToString() + ", expected FixedSizeBinary(16) minknow.uuid");
    }
  }
  for (int c : {out.batch_col, out.row_col}) {
    if (schema.field(c)->type()->id() != arrow::Type::UINT32) {
      return bad(schema.field(c)->name() + " is " + schema.field(c)->type()->ToString() + ", expected uint32");
    }
  }
  std::set<std::string> names;
  for (int c = 0; c < schema.num_fields(); ++c) {
    const auto& f = *schema.field(c);
    if (!names.insert(f.name()).second) return bad("column '" + f.name() + "' appears twice");
    if (c == out.id_col || c == out.batch_col || c == out.row_col) continue;
    if (f.type()->Equals(label_type())) {
      columns.push_back({f.name(), AnnotationKind::kLabel, {}, {}, {}, false});
    } else if (f.type()->id() == arrow::Type::FLOAT) {
      columns.push_back({f.name(), AnnotationKind::kScore, {}, {}, {}, false});
    } else {
      return bad("column '" + f.name() + "' is " + f.type()->ToString() +
                 ", expected dictionary<int32, utf8> (label) or float32 (score)");
    }
    out.annotation_cols.push_back(c);
  }
  return out;
}

// Appends one batch's scores (`arr`, whose rows are the last of `ids`) to `col`: null is absent,
// a stored NaN is refused.
Status append_scores(const std::shared_ptr<arrow::Array>& arr, const std::vector<ReadId>& ids,
                     const CorruptSidecar& bad, AnnotationColumn& col) {
  auto f = std::static_pointer_cast<arrow::FloatArray>(arr);
  for (int64_t i = 0; i < f->length(); ++i) {
    if (f->IsNull(i)) {
      col.scores.push_back(std::numeric_limits<float>::quiet_NaN());
    } else if (std::isnan(f->Value(i))) {
      return bad("NaN score in '" + col.name + "' for read " +
                 ids[ids.size() - static_cast<size_t>(f->length() - i)].to_string());
    } else {
      col.scores.push_back(f->Value(i));
    }
  }
  return Status::ok();
}

// Appends one batch's labels (`arr`, whose rows are the last of `ids`) to `col`: null is
// unassigned, an empty label is refused. Dictionaries may differ between batches: each batch's
// entries are mapped to the column's labels (`dict_index`: label -> index in col.labels).
Status append_labels(const std::shared_ptr<arrow::Array>& arr, const std::vector<ReadId>& ids,
                     const CorruptSidecar& bad, std::unordered_map<std::string, int32_t>& dict_index,
                     AnnotationColumn& col) {
  auto d = std::static_pointer_cast<arrow::DictionaryArray>(arr);
  auto indices = std::static_pointer_cast<arrow::Int32Array>(d->indices());
  auto dict = std::static_pointer_cast<arrow::StringArray>(d->dictionary());
  std::vector<int32_t> remap(static_cast<size_t>(dict->length()), -1);
  for (int64_t i = 0; i < d->length(); ++i) {
    if (d->IsNull(i)) {
      col.label_idx.push_back(-1);
      continue;
    }
    const int32_t j = indices->Value(i);
    if (remap[static_cast<size_t>(j)] < 0) {
      std::string label(dict->GetView(j));
      if (label.empty()) {
        return bad("empty label in '" + col.name + "' for read " +
                   ids[ids.size() - static_cast<size_t>(d->length() - i)].to_string());
      }
      auto [it, inserted] = dict_index.emplace(label, static_cast<int32_t>(col.labels.size()));
      if (inserted) col.labels.push_back(label);
      remap[static_cast<size_t>(j)] = it->second;
    }
    col.label_idx.push_back(remap[static_cast<size_t>(j)]);
  }
  return Status::ok();
}

// Every record batch's rows, validated: the read index into `ids` and `locators`, the
// annotation values into `columns` (one per layout.annotation_cols entry).
Status read_sidecar_rows(arrow::ipc::RecordBatchFileReader& reader, const SidecarColumns& layout,
                         const CorruptSidecar& bad, std::vector<ReadId>& ids, std::vector<ReadLocator>& locators,
                         std::vector<AnnotationColumn>& columns) {
  std::vector<std::unordered_map<std::string, int32_t>> dict_index(columns.size());
  for (int b = 0; b < reader.num_record_batches(); ++b) {
    auto batch = reader.ReadRecordBatch(b);
    if (!batch.ok()) return bad("record batch " + std::to_string(b) + ": " + batch.status().message());
    auto st = (*batch)->ValidateFull();
    if (!st.ok()) return bad("record batch " + std::to_string(b) + ": " + st.message());
    const auto& rb = **batch;
    auto id_values = std::static_pointer_cast<arrow::FixedSizeBinaryArray>(detail::storage_of(rb.column(layout.id_col)));
    auto bidx = std::static_pointer_cast<arrow::UInt32Array>(rb.column(layout.batch_col));
    auto ridx = std::static_pointer_cast<arrow::UInt32Array>(rb.column(layout.row_col));
    if (id_values->null_count() || bidx->null_count() || ridx->null_count()) return bad("null in the read index");
    for (int64_t i = 0; i < rb.num_rows(); ++i) {
      ReadId id;
      std::memcpy(id.bytes.data(), id_values->GetValue(i), 16);
      ids.push_back(id);
      locators.push_back({bidx->Value(i), ridx->Value(i)});
    }
    for (size_t k = 0; k < layout.annotation_cols.size(); ++k) {
      auto& col = columns[k];
      const auto& arr = rb.column(layout.annotation_cols[k]);
      if (col.kind == AnnotationKind::kScore) {
        ESCPOD_RETURN_IF_ERROR(append_scores(arr, ids, bad, col));
      } else {
        ESCPOD_RETURN_IF_ERROR(append_labels(arr, ids, bad, dict_index[k], col));
      }
    }
  }
  return Status::ok();
}

// The read index sorted and unique, one row per read of the POD5.
Status check_read_index(const std::vector<ReadId>& ids, const FileInfo& pod5, const CorruptSidecar& bad) {
  for (size_t i = 1; i < ids.size(); ++i) {
    if (!(ids[i - 1] < ids[i])) {
      return bad("read ids not sorted and unique at row " + std::to_string(i) + " (" + ids[i].to_string() + ")");
    }
  }
  if (ids.size() != pod5.n_reads) {
    return bad("indexes " + std::to_string(ids.size()) + " reads but " + pod5.path.string() + " holds " +
               std::to_string(pod5.n_reads));
  }
  return Status::ok();
}

}  // namespace

Result<Sidecar> Sidecar::open(const FileReader& pod5) { return open_at(sidecar_path(pod5.path()), pod5.info()); }

Result<Sidecar> Sidecar::open_at(const std::filesystem::path& path, const FileInfo& pod5) {
  detail::register_extension_types();
  const std::string where = path.string();
  ESCPOD_ASSIGN_OR_RETURN(std::string bytes, read_whole_file(path));
  auto buffer = std::make_shared<arrow::Buffer>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int64_t>(bytes.size()));
  auto opened = arrow::ipc::RecordBatchFileReader::Open(std::make_shared<arrow::io::BufferReader>(buffer));
  if (!opened.ok()) return Status::corrupt(where + ": not a readable sidecar (Arrow IPC file): " + opened.status().message());
  auto reader = *opened;
  const auto schema = reader->schema();
  Sidecar sc;
  sc.m_path = path;
  // Identity first: from the footer's schema, before any batch is read.
  auto md = schema->metadata();
  if (!md) return Status::corrupt(where + ": no escapepod metadata (not a .p5s sidecar)");
  auto version = metadata_value(*md, kVersionKey);
  if (!version) return Status::corrupt(where + ": no " + std::string(kVersionKey) + " (not a .p5s sidecar)");
  sc.m_source_name = metadata_value(*md, kSourceKey).value_or("");
  sc.m_writer = metadata_value(*md, kWriterKey).value_or("");
  if (auto n = metadata_value(*md, kReadCountKey)) sc.m_recorded_read_count = parse_u64(*n);
  if (*version != "1" && *version != "2") {
    return Status::unsupported(where + ": .p5s version " + *version + " is not supported (this escpod reads 1 and 2; " +
                               sc.provenance() + ")");
  }
  ESCPOD_ASSIGN_OR_RETURN(auto owner, sidecar_owner(*md, where, pod5, sc));
  sc.m_file_identifier = std::move(owner.first);
  sc.m_pod5_size = owner.second;
  for (int64_t k = 0; k < md->size(); ++k) {
    if (!is_known_key(md->key(k))) sc.m_other_metadata.emplace_back(md->key(k), md->value(k));
  }
  // Columns: types checked from the schema, still before any batch.
  const CorruptSidecar bad{where, sc};
  ESCPOD_ASSIGN_OR_RETURN(const SidecarColumns layout, check_sidecar_schema(*schema, bad, sc.m_columns));
  if (auto design = metadata_value(*md, kDesignKey)) {
    auto d = parse_sidecar_design(*design);
    if (!d.is_ok()) return bad(d.status().message());
    sc.m_design = std::move(*d);
  }
  ESCPOD_RETURN_IF_ERROR(read_sidecar_rows(*reader, layout, bad, sc.m_ids, sc.m_locators, sc.m_columns));
  ESCPOD_RETURN_IF_ERROR(check_read_index(sc.m_ids, pod5, bad));
  if (sc.m_design) {
    for (auto& col : sc.m_columns) {
      if (std::find(sc.m_design->value_columns.begin(), sc.m_design->value_columns.end(), col.name) !=
          sc.m_design->value_columns.end()) {
        if (col.kind != AnnotationKind::kLabel) return bad("design value column '" + col.name + "' is a score column");
        col.derived = true;
      }
    }
    ESCPOD_RETURN_IF_ERROR(sc.complete_derived().with_context(where));
  }
  if (auto hash = metadata_value(*md, kHashKey)) {
    const auto bar = hash->rfind('|');
    if (bar != std::string::npos && hash->substr(0, bar) == sc.m_writer &&
        hash->substr(bar + 1) != sc.content_hash()) {
      return bad("content does not match its hash (damaged after it was written)");
    }
  }
  return sc;
}

Result<ReadLocator> Sidecar::locate(const FileReader& pod5, const ReadId& id) const {
  auto row = row_of(id);
  if (!row) return Status::not_found("read " + id.to_string() + " is not in " + m_path.string());
  const ReadLocator loc = m_locators[*row];
  auto where = [&] {
    return m_path.string() + ": read " + id.to_string() + " locator (batch " + std::to_string(loc.batch_idx) +
           ", row " + std::to_string(loc.row_idx) + ")";
  };
  if (loc.batch_idx >= pod5.n_read_batches()) {
    return Status::corrupt(where() + " is past the POD5's " + std::to_string(pod5.n_read_batches()) + " reads batches");
  }
  ESCPOD_ASSIGN_OR_RETURN(ReadBatch batch, pod5.read_batch(loc.batch_idx));
  if (loc.row_idx >= batch.size()) {
    return Status::corrupt(where() + " is past the batch's " + std::to_string(batch.size()) + " rows");
  }
  if (batch.read_id[loc.row_idx] != id) {
    return Status::corrupt(where() + " holds read " + batch.read_id[loc.row_idx].to_string() + " instead");
  }
  return loc;
}

Status Sidecar::verify_index(const FileReader& pod5, int n_threads) const {
  return pod5.for_each_batch(n_threads, [&](const ReadBatch& b) -> Status {
    for (size_t i = 0; i < b.size(); ++i) {
      const ReadLocator here{static_cast<uint32_t>(b.batch_idx), static_cast<uint32_t>(i)};
      auto row = row_of(b.read_id[i]);
      if (!row) {
        return Status::corrupt(m_path.string() + " has no row for read " + b.read_id[i].to_string() +
                               " of the POD5 (damaged sidecar, " + provenance() + ")");
      }
      if (!(m_locators[*row] == here)) {
        return Status::corrupt(m_path.string() + ": read " + b.read_id[i].to_string() + " is at batch " +
                               std::to_string(here.batch_idx) + " row " + std::to_string(here.row_idx) +
                               " of the POD5, the sidecar says batch " + std::to_string(m_locators[*row].batch_idx) +
                               " row " + std::to_string(m_locators[*row].row_idx) + " (damaged sidecar, " +
                               provenance() + ")");
      }
    }
    return Status::ok();
  });
}

Result<Sidecar> Sidecar::build_index(const FileReader& pod5, int n_threads) {
  const auto& info = pod5.info();
  std::vector<std::pair<ReadId, ReadLocator>> rows;
  rows.reserve(info.n_reads);
  std::mutex mu;
  ESCPOD_RETURN_IF_ERROR(pod5.for_each_batch(n_threads, [&](const ReadBatch& b) -> Status {
    if (b.batch_idx > UINT32_MAX) return Status::unsupported(info.path.string() + ": too many reads batches for a sidecar");
    std::vector<std::pair<ReadId, ReadLocator>> local;
    local.reserve(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      local.push_back({b.read_id[i], {static_cast<uint32_t>(b.batch_idx), static_cast<uint32_t>(i)}});
    }
    std::lock_guard<std::mutex> lock(mu);
    rows.insert(rows.end(), local.begin(), local.end());
    return Status::ok();
  }));
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Sidecar sc;
  sc.m_path = sidecar_path(info.path);
  sc.m_file_identifier = info.file_identifier;
  sc.m_pod5_size = info.file_size;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i].first == rows[i - 1].first) {
      return Status::invalid_argument(info.path.string() + ": read " + rows[i].first.to_string() +
                                      " occurs twice; a sidecar needs unique read ids");
    }
    sc.m_ids.push_back(rows[i].first);
    sc.m_locators.push_back(rows[i].second);
  }
  return sc;
}

// ---- editing ---------------------------------------------------------------------------------

namespace {

bool names_value_column(const std::optional<SidecarDesign>& d, const std::string& name) {
  return d && std::find(d->value_columns.begin(), d->value_columns.end(), name) != d->value_columns.end();
}

}  // namespace

Status Sidecar::set_labels(const std::string& name, const std::vector<std::pair<size_t, std::string>>& values) {
  if (name.empty()) return Status::invalid_argument("annotation name is empty");
  if (is_reserved_sidecar_name(name)) {
    return Status::invalid_argument("'" + name + "' is reserved for the sidecar's index (read_id, batch_idx, row_idx)");
  }
  if (names_value_column(m_design, name)) {
    return Status::invalid_argument("'" + name + "' is derived from the design (write its key columns instead)");
  }
  const AnnotationColumn* old = find(name);
  if (old && old->kind != AnnotationKind::kLabel) {
    return Status::invalid_argument("'" + name + "' is a score column in " + m_path.string() +
                                    "; a label column cannot share its name");
  }
  AnnotationColumn col{name, AnnotationKind::kLabel, {}, std::vector<int32_t>(m_ids.size(), -1), {}, false};
  std::unordered_map<std::string, int32_t> index;
  for (const auto& [row, label] : values) {
    if (label.empty()) {
      return Status::invalid_argument("empty label for read " + m_ids[row].to_string() + " in '" + name +
                                      "' (leave unassigned reads out instead)");
    }
    auto [it, inserted] = index.emplace(label, static_cast<int32_t>(col.labels.size()));
    if (inserted) col.labels.push_back(label);
    col.label_idx[row] = it->second;
  }
  if (old) {
    *const_cast<AnnotationColumn*>(old) = std::move(col);
  } else {
    m_columns.push_back(std::move(col));
  }
  return derive_design_columns();
}

Status Sidecar::set_scores(const std::string& name, const std::vector<std::pair<size_t, float>>& values) {
  if (name.empty()) return Status::invalid_argument("score name is empty");
  if (is_reserved_sidecar_name(name)) {
    return Status::invalid_argument("'" + name + "' is reserved for the sidecar's index (read_id, batch_idx, row_idx)");
  }
  if (names_value_column(m_design, name)) {
    return Status::invalid_argument("'" + name + "' is derived from the design and cannot be written");
  }
  if (m_design && std::find(m_design->key_columns.begin(), m_design->key_columns.end(), name) !=
                      m_design->key_columns.end()) {
    return Status::invalid_argument("'" + name + "' is a design key column; it must hold labels");
  }
  const AnnotationColumn* old = find(name);
  if (old && old->kind != AnnotationKind::kScore) {
    return Status::invalid_argument("'" + name + "' is a label column in " + m_path.string() +
                                    "; a score column cannot share its name");
  }
  AnnotationColumn col{name, AnnotationKind::kScore, {}, {},
                       std::vector<float>(m_ids.size(), std::numeric_limits<float>::quiet_NaN()), false};
  for (const auto& [row, v] : values) {
    if (std::isnan(v)) {
      return Status::invalid_argument("NaN score for read " + m_ids[row].to_string() + " in '" + name +
                                      "' (leave unscored reads out instead)");
    }
    col.scores[row] = v;
  }
  if (old) {
    *const_cast<AnnotationColumn*>(old) = std::move(col);
  } else {
    m_columns.push_back(std::move(col));
  }
  return Status::ok();
}

Status Sidecar::set_design(SidecarDesign design) {
  ESCPOD_RETURN_IF_ERROR(validate_design(design));
  // Value columns of the old design go; the new ones must not clash with ordinary columns.
  if (m_design) {
    std::erase_if(m_columns, [](const AnnotationColumn& c) { return c.derived; });
  }
  for (const auto& v : design.value_columns) {
    if (find(v)) {
      return Status::invalid_argument("design value column '" + v + "' is already an annotation in " +
                                      m_path.string() + "; value columns are derived, choose another name");
    }
  }
  for (const auto& k : design.key_columns) {
    const AnnotationColumn* c = find(k);
    if (c && c->kind != AnnotationKind::kLabel) {
      return Status::invalid_argument("design key column '" + k + "' is a score column; keys must be labels");
    }
  }
  m_design = std::move(design);
  return derive_design_columns();
}

namespace {

// Value labels per row of the design, from the key columns; -1 where any key is unassigned or no
// design row matches. One vector per value column, labels in design order.
std::vector<AnnotationColumn> derive(const SidecarDesign& d, const std::vector<AnnotationColumn>& columns,
                                     size_t n_rows) {
  std::vector<const AnnotationColumn*> keys;
  for (const auto& k : d.key_columns) {
    const AnnotationColumn* found = nullptr;
    for (const auto& c : columns)
      if (c.name == k && c.kind == AnnotationKind::kLabel) found = &c;
    keys.push_back(found);
  }
  const size_t nk = d.key_columns.size();
  std::vector<AnnotationColumn> out;
  std::vector<std::unordered_map<std::string, int32_t>> index(d.value_columns.size());
  for (size_t v = 0; v < d.value_columns.size(); ++v) {
    out.push_back({d.value_columns[v], AnnotationKind::kLabel, {}, std::vector<int32_t>(n_rows, -1), {}, true});
  }
  std::map<std::vector<std::string>, size_t> by_key;
  for (size_t r = 0; r < d.rows.size(); ++r) {
    by_key.emplace(std::vector<std::string>(d.rows[r].begin(), d.rows[r].begin() + static_cast<long>(nk)), r);
  }
  std::vector<std::string> key(nk);
  for (size_t row = 0; row < n_rows; ++row) {
    bool complete = true;
    for (size_t k = 0; k < nk && complete; ++k) {
      if (!keys[k] || keys[k]->label_idx[row] < 0) {
        complete = false;
      } else {
        key[k] = keys[k]->labels[static_cast<size_t>(keys[k]->label_idx[row])];
      }
    }
    if (!complete) continue;
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    for (size_t v = 0; v < out.size(); ++v) {
      const std::string& label = d.rows[it->second][nk + v];
      auto [pos, inserted] = index[v].emplace(label, static_cast<int32_t>(out[v].labels.size()));
      if (inserted) out[v].labels.push_back(label);
      out[v].label_idx[row] = pos->second;
    }
  }
  return out;
}

}  // namespace

Status Sidecar::derive_design_columns() {
  if (!m_design) return Status::ok();
  std::erase_if(m_columns, [](const AnnotationColumn& c) { return c.derived; });
  for (auto& c : derive(*m_design, m_columns, m_ids.size())) m_columns.push_back(std::move(c));
  return Status::ok();
}

Status Sidecar::complete_derived() {
  for (const auto& want : derive(*m_design, m_columns, m_ids.size())) {
    const AnnotationColumn* have = find(want.name);
    if (!have) continue;  // a design whose value column was not materialised: derived on demand
    for (size_t row = 0; row < m_ids.size(); ++row) {
      if (have->text(row) != want.text(row)) {
        return Status::corrupt("design value column '" + want.name + "' holds '" + have->text(row) +
                               "' for read " + m_ids[row].to_string() + " but its keys give '" + want.text(row) +
                               "' (" + provenance() + ")");
      }
    }
  }
  // Materialise value columns the file left out, so lookups see them.
  for (auto& c : derive(*m_design, m_columns, m_ids.size())) {
    if (!find(c.name)) m_columns.push_back(std::move(c));
  }
  return Status::ok();
}

// ---- writing ---------------------------------------------------------------------------------

namespace {

// The index columns (read_id, batch_idx, row_idx) of `ids` and `locators`, appended to `arrays`.
arrow::Status append_index_arrays(const std::vector<ReadId>& ids, const std::vector<ReadLocator>& locators,
                                  std::vector<std::shared_ptr<arrow::Array>>& arrays) {
  const auto n = static_cast<int64_t>(ids.size());
  arrow::FixedSizeBinaryBuilder id_builder(arrow::fixed_size_binary(16));
  arrow::UInt32Builder bidx, ridx;
  ARROW_RETURN_NOT_OK(id_builder.Reserve(n));
  ARROW_RETURN_NOT_OK(bidx.Reserve(n));
  ARROW_RETURN_NOT_OK(ridx.Reserve(n));
  for (size_t i = 0; i < ids.size(); ++i) {
    id_builder.UnsafeAppend(ids[i].bytes.data());
    bidx.UnsafeAppend(locators[i].batch_idx);
    ridx.UnsafeAppend(locators[i].row_idx);
  }
  std::shared_ptr<arrow::Array> a;
  ARROW_RETURN_NOT_OK(id_builder.Finish(&a));
  arrays.push_back(std::make_shared<arrow::ExtensionArray>(detail::uuid_type(), a));
  ARROW_RETURN_NOT_OK(bidx.Finish(&a));
  arrays.push_back(a);
  ARROW_RETURN_NOT_OK(ridx.Finish(&a));
  arrays.push_back(a);
  return arrow::Status::OK();
}

// A score column of n rows as a float32 array (absent scores null).
arrow::Result<std::shared_ptr<arrow::Array>> score_array(const AnnotationColumn& col, int64_t n) {
  arrow::FloatBuilder b;
  ARROW_RETURN_NOT_OK(b.Reserve(n));
  for (float v : col.scores) {
    if (std::isnan(v)) {
      b.UnsafeAppendNull();
    } else {
      b.UnsafeAppend(v);
    }
  }
  std::shared_ptr<arrow::Array> a;
  ARROW_RETURN_NOT_OK(b.Finish(&a));
  return a;
}

// A label column of n rows as a dictionary<int32, utf8> array (unassigned rows null).
arrow::Result<std::shared_ptr<arrow::Array>> label_array(const AnnotationColumn& col, int64_t n) {
  arrow::Int32Builder idx;
  arrow::StringBuilder dict;
  ARROW_RETURN_NOT_OK(idx.Reserve(n));
  for (int32_t v : col.label_idx) {
    if (v < 0) {
      idx.UnsafeAppendNull();
    } else {
      idx.UnsafeAppend(v);
    }
  }
  for (const auto& l : col.labels) ARROW_RETURN_NOT_OK(dict.Append(l));
  std::shared_ptr<arrow::Array> indices, values;
  ARROW_RETURN_NOT_OK(idx.Finish(&indices));
  ARROW_RETURN_NOT_OK(dict.Finish(&values));
  return arrow::DictionaryArray::FromArrays(label_type(), indices, values);
}

// Writes `batch` as a ZSTD-compressed Arrow IPC file at `path`.
arrow::Status write_ipc_file(const std::filesystem::path& path, const std::shared_ptr<arrow::Schema>& schema,
                             const arrow::RecordBatch& batch) {
  ARROW_ASSIGN_OR_RAISE(auto out, arrow::io::FileOutputStream::Open(path.string()));
  auto options = arrow::ipc::IpcWriteOptions::Defaults();
  ARROW_ASSIGN_OR_RAISE(auto codec, arrow::util::Codec::Create(arrow::Compression::ZSTD));
  options.codec = std::shared_ptr<arrow::util::Codec>(std::move(codec));
  ARROW_ASSIGN_OR_RAISE(auto w, arrow::ipc::MakeFileWriter(out, schema, options));
  ARROW_RETURN_NOT_OK(w->WriteRecordBatch(batch));
  ARROW_RETURN_NOT_OK(w->Close());
  return out->Close();
}

}  // namespace

Status Sidecar::write(const std::filesystem::path& path, FsyncMode fsync, const std::string& writer) const {
  detail::register_extension_types();
  const std::string where = path.string();
  auto fail = [&](const arrow::Status& s) { return detail::from_arrow(s, "writing sidecar " + where); };
  const int64_t n = static_cast<int64_t>(m_ids.size());
  std::vector<std::shared_ptr<arrow::Field>> fields = {
      arrow::field("read_id", detail::uuid_type(), false), arrow::field("batch_idx", arrow::uint32(), false),
      arrow::field("row_idx", arrow::uint32(), false)};
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  if (auto s = append_index_arrays(m_ids, m_locators, arrays); !s.ok()) return fail(s);
  for (const auto& col : m_columns) {
    const bool score = col.kind == AnnotationKind::kScore;
    auto a = score ? score_array(col, n) : label_array(col, n);
    if (!a.ok()) return fail(a.status());
    fields.push_back(arrow::field(col.name, score ? arrow::float32() : label_type(), true));
    arrays.push_back(*std::move(a));
  }
  std::vector<std::string> keys = {std::string(kVersionKey), std::string(kIdentifierKey), std::string(kSizeKey),
                                   std::string(kSourceKey), std::string(kReadCountKey), std::string(kWriterKey)};
  std::vector<std::string> values = {std::to_string(version()), m_file_identifier, std::to_string(m_pod5_size),
                                     source_name_of(path),
                                     std::to_string(m_ids.size()), writer};
  if (m_design) {
    keys.emplace_back(kDesignKey);
    values.push_back(design_to_json(*m_design));
  }
  keys.emplace_back(kHashKey);
  values.push_back(writer + "|" + content_hash());
  for (const auto& [k, v] : m_other_metadata) {
    keys.push_back(k);
    values.push_back(v);
  }
  auto schema = arrow::schema(fields, arrow::key_value_metadata(keys, values));
  auto batch = arrow::RecordBatch::Make(schema, n, arrays);

  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(path, /*overwrite=*/true));
  if (auto s = write_ipc_file(staged.staging_path(), schema, *batch); !s.ok()) return fail(s);
  return staged.commit(fsync);
}

// ---- read-modify-write -----------------------------------------------------------------------

Status update_sidecar(const FileReader& pod5, const std::vector<AnnotationUpdate>& updates,
                      const SidecarUpdateOptions& options, SidecarUpdateReport* report) {
  SidecarUpdateReport local;
  SidecarUpdateReport& rep = report ? *report : local;
  rep = SidecarUpdateReport{};
  auto existing = Sidecar::open(pod5);
  Sidecar sc;
  if (existing.is_ok()) {
    // A damaged index is never carried into a new file.
    ESCPOD_RETURN_IF_ERROR(existing->verify_index(pod5, options.n_threads));
    sc = std::move(*existing);
  } else if (existing.status().code() == StatusCode::kNotFound) {
    ESCPOD_ASSIGN_OR_RETURN(sc, Sidecar::build_index(pod5, options.n_threads));
    rep.index_built = true;
  } else {
    return existing.status();
  }
  if (options.design) ESCPOD_RETURN_IF_ERROR(sc.set_design(*options.design));
  std::set<std::string> written;
  for (const auto& u : updates) {
    if (!written.insert(u.name).second) {
      return Status::invalid_argument("column '" + u.name + "' given twice in one sidecar write");
    }
    std::vector<uint8_t> seen(sc.n_reads(), 0);
    auto dup = [&](const ReadId& id) {
      return Status::invalid_argument("read " + id.to_string() + " given twice for '" + u.name + "'");
    };
    uint64_t n = 0;
    if (u.kind == AnnotationKind::kLabel) {
      std::vector<std::pair<size_t, std::string>> rows;
      for (const auto& [id, label] : u.labels) {
        auto row = sc.row_of(id);
        if (!row) {
          ++rep.n_not_in_file;
          continue;
        }
        if (seen[*row]++) return dup(id);
        rows.emplace_back(*row, label);
      }
      n = rows.size();
      ESCPOD_RETURN_IF_ERROR(sc.set_labels(u.name, rows).with_context(sc.path().string()));
    } else {
      std::vector<std::pair<size_t, float>> rows;
      for (const auto& [id, v] : u.scores) {
        auto row = sc.row_of(id);
        if (!row) {
          ++rep.n_not_in_file;
          continue;
        }
        if (seen[*row]++) return dup(id);
        rows.emplace_back(*row, v);
      }
      n = rows.size();
      ESCPOD_RETURN_IF_ERROR(sc.set_scores(u.name, rows).with_context(sc.path().string()));
    }
    rep.n_assigned[u.name] = n;
  }
  return sc.write(sidecar_path(pod5.path()), options.fsync, options.writer);
}

}  // namespace escpod::pod5
