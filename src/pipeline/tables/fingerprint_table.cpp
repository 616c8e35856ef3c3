#include "escpod/pipeline/tables/fingerprint_table.hpp"

#include <arrow/api.h>
#include <arrow/io/api.h>
#include <fmt/format.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "escpod/arrow_bridge/status.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pipeline/tables/barcode_labels.hpp"
#include "pipeline/ops/csv_text.hpp"

namespace escpod::pipeline {

using detail::LineReader;
using detail::parse_double;
using detail::split_csv;
using arrow_bridge::from_arrow;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Index k of a column named `<prefix>k`, or -1.
long indexed_column(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return -1;
  const auto tail = name.substr(prefix.size());
  size_t k = 0;
  const auto r = std::from_chars(tail.data(), tail.data() + tail.size(), k);
  if (tail.empty() || r.ec != std::errc() || r.ptr != tail.data() + tail.size()) return -1;
  return static_cast<long>(k);
}

// fp_k column positions for k < n_features from the header names; the error names what is
// missing. Warns when the table has more fp_ columns than the model takes.
Result<std::vector<size_t>> feature_columns(const std::vector<std::string>& names,
                                            size_t n_features, const std::string& file,
                                            const std::string& model) {
  std::vector<size_t> col(n_features, SIZE_MAX);
  size_t n_fp = 0;
  for (size_t c = 0; c < names.size(); ++c) {
    const long k = indexed_column(names[c], "fp_");
    if (k < 0) continue;
    ++n_fp;
    if (static_cast<size_t>(k) < n_features) col[static_cast<size_t>(k)] = c;
  }
  for (size_t k = 0; k < n_features; ++k) {
    if (col[k] == SIZE_MAX) {
      return Status::invalid_argument(
          fmt::format("{}: no column fp_{}: the model {} takes {} fingerprint values, the table has {}",
                      file, k, model, n_features, n_fp));
    }
  }
  if (n_fp != n_features) {
    log::warn("{}: {} fingerprint columns, the model takes {}; using fp_0..fp_{}", file, n_fp,
              n_features, n_features - 1);
  }
  return col;
}

// ---- CSV ------------------------------------------------------------------------------------

class CsvWriter final : public FingerprintTableWriter {
 public:
  CsvWriter(std::ostream& out, size_t n, bool dwell, std::string what)
      : m_out(out), m_n(n), m_dwell(dwell), m_what(std::move(what)) {}

  Status header() {
    m_line = "read_id";
    for (size_t k = 0; k < m_n; ++k) fmt::format_to(std::back_inserter(m_line), ",fp_{}", k);
    if (m_dwell)
      for (size_t k = 0; k < m_n; ++k) fmt::format_to(std::back_inserter(m_line), ",dwell_{}", k);
    m_line += '\n';
    return write_line();
  }

  Status add(const pod5::ReadId& id, std::span<const double> features,
             std::span<const double> dwells) override {
    char text[36];
    id.format_to(text);
    m_line.assign(text, 36);
    for (double v : features) fmt::format_to(std::back_inserter(m_line), ",{:.6f}", v);
    if (m_dwell)
      for (double v : dwells) fmt::format_to(std::back_inserter(m_line), ",{:.6f}", v);
    m_line += '\n';
    return write_line();
  }

  Status finish() override {
    m_out.flush();
    return m_out ? Status::ok() : Status::io_error("cannot write " + m_what);
  }

 private:
  Status write_line() {
    m_out.write(m_line.data(), static_cast<std::streamsize>(m_line.size()));
    return m_out ? Status::ok() : Status::io_error("cannot write " + m_what);
  }

  std::ostream& m_out;
  size_t m_n;
  bool m_dwell;
  std::string m_what;
  std::string m_line;
};

class CsvReader final : public FingerprintTableReader {
 public:
  static Result<std::unique_ptr<FingerprintTableReader>> open(const std::filesystem::path& path,
                                                              size_t n_features,
                                                              const std::string& model) {
    auto r = std::make_unique<CsvReader>();
    r->m_file = path.string();
    r->m_d = n_features;
    ESCPOD_ASSIGN_OR_RETURN(r->m_in, LineReader::open(path));
    std::string line;
    if (!r->m_in.next(line)) {
      if (!r->m_in.error().empty()) return Status::io_error(r->m_file + ": " + r->m_in.error());
      return Status::invalid_argument(r->m_file + ": empty fingerprint table (needs a header)");
    }
    if (!line.empty() && line[0] == '#') line.erase(0, 1);
    split_csv(line, r->m_cells, r->m_storage);
    const std::vector<std::string> names(r->m_cells.begin(), r->m_cells.end());
    const auto id = std::find(names.begin(), names.end(), "read_id");
    if (id == names.end()) return Status::invalid_argument(r->m_file + ": header has no read_id column");
    r->m_id_col = static_cast<size_t>(id - names.begin());
    ESCPOD_ASSIGN_OR_RETURN(r->m_fp_col, feature_columns(names, n_features, r->m_file, model));
    r->m_need = std::max(r->m_id_col, *std::max_element(r->m_fp_col.begin(), r->m_fp_col.end()));
    return std::unique_ptr<FingerprintTableReader>(std::move(r));
  }

  Result<size_t> next(size_t max_rows, std::vector<pod5::ReadId>& ids,
                      std::vector<double>& x) override {
    ids.clear();
    x.clear();
    while (ids.size() < max_rows && m_in.next(m_line)) {
      if (m_line.empty() || m_line[0] == '#') continue;
      const std::string where = m_file + " line " + std::to_string(m_in.line_no());
      split_csv(m_line, m_cells, m_storage);
      if (m_cells.size() <= m_need) return Status::invalid_argument(where + ": too few columns");
      auto id = pod5::ReadId::parse(m_cells[m_id_col]);
      if (!id.is_ok()) return id.status().with_context(where);
      ids.push_back(*id);
      for (size_t k = 0; k < m_d; ++k) {
        double v = 0;
        const std::string_view cell = m_cells[m_fp_col[k]];
        if (!parse_double(cell, v)) {
          if (cell.empty() || cell == "nan" || cell == "NaN" || cell == "inf" || cell == "-inf") {
            v = kNaN;
          } else {
            return Status::invalid_argument(fmt::format("{}: bad number '{}' in fp_{}", where, cell, k));
          }
        }
        x.push_back(v);
      }
    }
    if (!m_in.error().empty()) return Status::io_error(m_file + ": " + m_in.error());
    return ids.size();
  }

 private:
  std::string m_file;
  size_t m_d = 0;
  LineReader m_in;
  std::string m_line, m_storage;
  std::vector<std::string_view> m_cells;
  size_t m_id_col = 0, m_need = 0;
  std::vector<size_t> m_fp_col;
};

// ---- Parquet --------------------------------------------------------------------------------

// Arrow output over a std::ostream (a staged file or stdout): Parquet is written sequentially.
class OstreamOutput final : public arrow::io::OutputStream {
 public:
  explicit OstreamOutput(std::ostream& out) : m_out(out) {}
  arrow::Status Write(const void* data, int64_t nbytes) override {
    m_out.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
    if (!m_out) return arrow::Status::IOError("write failed");
    m_pos += nbytes;
    return arrow::Status::OK();
  }
  arrow::Status Flush() override {
    m_out.flush();
    return m_out ? arrow::Status::OK() : arrow::Status::IOError("flush failed");
  }
  arrow::Status Close() override {
    m_closed = true;
    return Flush();
  }
  arrow::Result<int64_t> Tell() const override { return m_pos; }
  bool closed() const override { return m_closed; }

 private:
  std::ostream& m_out;
  int64_t m_pos = 0;
  bool m_closed = false;
};

class ParquetWriter final : public FingerprintTableWriter {
 public:
  static Result<std::unique_ptr<FingerprintTableWriter>> open(std::ostream& out, size_t n, bool dwell,
                                                              const std::string& what) {
    auto w = std::unique_ptr<ParquetWriter>(new ParquetWriter(n, dwell, what));
    arrow::FieldVector fields{arrow::field("read_id", arrow::utf8(), false)};
    for (size_t k = 0; k < n; ++k) fields.push_back(arrow::field(fmt::format("fp_{}", k), arrow::float64()));
    if (dwell)
      for (size_t k = 0; k < n; ++k)
        fields.push_back(arrow::field(fmt::format("dwell_{}", k), arrow::float64()));
    w->m_schema = arrow::schema(fields);
    auto props = parquet::WriterProperties::Builder()
                     .compression(arrow::Compression::ZSTD)
                     ->max_row_group_length(static_cast<int64_t>(kParquetRowGroup))
                     ->build();
    auto opened = parquet::arrow::FileWriter::Open(*w->m_schema, arrow::default_memory_pool(),
                                                   std::make_shared<OstreamOutput>(out), props);
    if (!opened.ok()) return from_arrow(opened.status(), "cannot write " + what);
    w->m_writer = std::move(*opened);
    w->m_columns.resize(fields.size() - 1);
    return std::unique_ptr<FingerprintTableWriter>(std::move(w));
  }

  Status add(const pod5::ReadId& id, std::span<const double> features,
             std::span<const double> dwells) override {
    char text[36];
    id.format_to(text);
    m_ids.append(text, 36);
    m_id_offsets.push_back(static_cast<int32_t>(m_ids.size()));
    for (size_t k = 0; k < m_n; ++k) m_columns[k].push_back(features[k]);
    if (m_dwell)
      for (size_t k = 0; k < m_n; ++k) m_columns[m_n + k].push_back(dwells[k]);
    if (m_id_offsets.size() - 1 >= kParquetRowGroup) return flush();
    return Status::ok();
  }

  Status finish() override {
    ESCPOD_RETURN_IF_ERROR(flush());
    return from_arrow(m_writer->Close(), "cannot write " + m_what);
  }

 private:
  ParquetWriter(size_t n, bool dwell, std::string what)
      : m_n(n), m_dwell(dwell), m_what(std::move(what)) {
    m_id_offsets.push_back(0);
  }

  // One record batch (= one row group) from the buffered rows; the buffers are reused.
  Status flush() {
    const int64_t rows = static_cast<int64_t>(m_id_offsets.size() - 1);
    if (rows == 0) return Status::ok();
    arrow::ArrayVector arrays;
    arrays.push_back(std::make_shared<arrow::StringArray>(
        rows, arrow::Buffer::Wrap(m_id_offsets), arrow::Buffer::Wrap(m_ids.data(), m_ids.size())));
    for (const auto& c : m_columns)
      arrays.push_back(std::make_shared<arrow::DoubleArray>(rows, arrow::Buffer::Wrap(c)));
    const auto batch = arrow::RecordBatch::Make(m_schema, rows, arrays);
    ESCPOD_RETURN_IF_ERROR(from_arrow(m_writer->WriteRecordBatch(*batch), "cannot write " + m_what));
    ESCPOD_RETURN_IF_ERROR(from_arrow(m_writer->NewBufferedRowGroup(), "cannot write " + m_what));
    m_ids.clear();
    m_id_offsets.assign(1, 0);
    for (auto& c : m_columns) c.clear();
    return Status::ok();
  }

  size_t m_n;
  bool m_dwell;
  std::string m_what;
  std::shared_ptr<arrow::Schema> m_schema;
  std::unique_ptr<parquet::arrow::FileWriter> m_writer;
  std::string m_ids;
  std::vector<int32_t> m_id_offsets;
  std::vector<std::vector<double>> m_columns;
};

class ParquetReader final : public FingerprintTableReader {
 public:
  static Result<std::unique_ptr<FingerprintTableReader>> open(const std::filesystem::path& path,
                                                              size_t n_features,
                                                              const std::string& model) {
    auto r = std::make_unique<ParquetReader>();
    r->m_file = path.string();
    r->m_d = n_features;
    auto file = arrow::io::ReadableFile::Open(r->m_file);
    if (!file.ok()) return Status::not_found(r->m_file + ": cannot open: " + file.status().message());
    auto reader = parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
    if (!reader.ok()) return from_arrow(reader.status(), r->m_file + ": not a readable Parquet file");
    r->m_reader = std::move(*reader);
    std::shared_ptr<arrow::Schema> schema;
    ESCPOD_RETURN_IF_ERROR(from_arrow(r->m_reader->GetSchema(&schema), r->m_file));
    const auto names = schema->field_names();
    const auto id = std::find(names.begin(), names.end(), "read_id");
    if (id == names.end()) return Status::invalid_argument(r->m_file + ": no read_id column");
    const int id_col = static_cast<int>(id - names.begin());
    const auto& id_type = schema->field(id_col)->type();
    if (!arrow::is_base_binary_like(id_type->id())) {
      return Status::invalid_argument(r->m_file + ": read_id is " + id_type->ToString() + ", not a string");
    }
    ESCPOD_ASSIGN_OR_RETURN(const std::vector<size_t> fp_col,
                            feature_columns(names, n_features, r->m_file, model));
    // Read only the columns we use, in the order read_id, fp_0.., as doubles.
    r->m_read_cols.push_back(id_col);
    for (size_t c : fp_col) {
      const auto& t = schema->field(static_cast<int>(c))->type();
      if (!arrow::is_floating(t->id()) && !arrow::is_integer(t->id())) {
        return Status::invalid_argument(fmt::format("{}: column {} is {}, not a number", r->m_file,
                                                    names[c], t->ToString()));
      }
      r->m_read_cols.push_back(static_cast<int>(c));
    }
    return std::unique_ptr<FingerprintTableReader>(std::move(r));
  }

  Result<size_t> next(size_t max_rows, std::vector<pod5::ReadId>& ids,
                      std::vector<double>& x) override {
    ids.clear();
    x.clear();
    while (ids.size() < max_rows) {
      if (!m_table || m_row >= m_table->num_rows()) {
        if (m_group >= m_reader->num_row_groups()) break;
        std::shared_ptr<arrow::Table> t;
        ESCPOD_RETURN_IF_ERROR(from_arrow(m_reader->ReadRowGroup(m_group, m_read_cols, &t),
                                          fmt::format("{}: row group {}", m_file, m_group)));
        ++m_group;
        m_row = 0;
        if (t->num_rows() == 0) {
          m_table.reset();
          continue;
        }
        ESCPOD_ASSIGN_OR_RETURN(m_table, prepare(t));
        continue;
      }
      const int64_t take = std::min<int64_t>(m_table->num_rows() - m_row,
                                             static_cast<int64_t>(max_rows - ids.size()));
      const size_t first = ids.size();
      ids.resize(first + static_cast<size_t>(take));
      x.resize(ids.size() * m_d);
      for (int64_t i = 0; i < take; ++i) {
        const int64_t row = m_row + i;
        const std::string_view text = id_at(row);
        auto id = pod5::ReadId::parse(text);
        if (!id.is_ok()) return id.status().with_context(fmt::format("{} row {}", m_file, m_rows_before + row));
        ids[first + static_cast<size_t>(i)] = *id;
        for (size_t k = 0; k < m_d; ++k) {
          const auto& col = m_features[k];
          x[(first + static_cast<size_t>(i)) * m_d + k] = col->IsNull(row) ? kNaN : col->Value(row);
        }
      }
      m_row += take;
      if (m_row >= m_table->num_rows()) m_rows_before += m_table->num_rows();
    }
    return ids.size();
  }

 private:
  // Combines a row group's chunks and casts the features to float64.
  Result<std::shared_ptr<arrow::Table>> prepare(const std::shared_ptr<arrow::Table>& t) {
    auto combined = t->CombineChunks();
    if (!combined.ok()) return from_arrow(combined.status(), m_file);
    std::shared_ptr<arrow::Table> table = *combined;
    m_ids = table->column(0)->chunk(0);
    m_features.clear();
    for (size_t k = 0; k < m_d; ++k) {
      auto arr = table->column(static_cast<int>(k + 1))->chunk(0);
      if (arr->type_id() != arrow::Type::DOUBLE) {
        ESCPOD_ASSIGN_OR_RETURN(arr, to_double(*arr));
      }
      m_features.push_back(std::static_pointer_cast<arrow::DoubleArray>(arr));
    }
    return table;
  }

  // Integer and float32 columns widened to float64 by hand (no arrow::compute dependency).
  Result<std::shared_ptr<arrow::Array>> to_double(const arrow::Array& a) {
    arrow::DoubleBuilder b;
    ESCPOD_RETURN_IF_ERROR(from_arrow(b.Reserve(a.length()), m_file));
    for (int64_t i = 0; i < a.length(); ++i) {
      if (a.IsNull(i)) {
        b.UnsafeAppendNull();
        continue;
      }
      auto scalar = a.GetScalar(i);
      if (!scalar.ok()) return from_arrow(scalar.status(), m_file);
      auto cast = (*scalar)->CastTo(arrow::float64());
      if (!cast.ok()) return from_arrow(cast.status(), m_file);
      b.UnsafeAppend(std::static_pointer_cast<arrow::DoubleScalar>(*cast)->value);
    }
    std::shared_ptr<arrow::Array> out;
    ESCPOD_RETURN_IF_ERROR(from_arrow(b.Finish(&out), m_file));
    return out;
  }

  std::string_view id_at(int64_t row) const {
    if (m_ids->type_id() == arrow::Type::LARGE_STRING || m_ids->type_id() == arrow::Type::LARGE_BINARY) {
      return static_cast<const arrow::LargeBinaryArray&>(*m_ids).GetView(row);
    }
    return static_cast<const arrow::BinaryArray&>(*m_ids).GetView(row);
  }

  std::string m_file;
  size_t m_d = 0;
  std::unique_ptr<parquet::arrow::FileReader> m_reader;
  std::vector<int> m_read_cols;
  int m_group = 0;
  std::shared_ptr<arrow::Table> m_table;
  int64_t m_row = 0, m_rows_before = 0;
  std::shared_ptr<arrow::Array> m_ids;
  std::vector<std::shared_ptr<arrow::DoubleArray>> m_features;
};

}  // namespace

FingerprintFormat fingerprint_format_of(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".parquet" ? FingerprintFormat::kParquet : FingerprintFormat::kCsv;
}

Result<std::unique_ptr<FingerprintTableWriter>> FingerprintTableWriter::open(
    FingerprintFormat format, std::ostream& out, size_t n_features, bool with_dwell,
    const std::string& what) {
  if (format == FingerprintFormat::kParquet) return ParquetWriter::open(out, n_features, with_dwell, what);
  auto w = std::make_unique<CsvWriter>(out, n_features, with_dwell, what);
  ESCPOD_RETURN_IF_ERROR(w->header());
  return std::unique_ptr<FingerprintTableWriter>(std::move(w));
}

Result<std::unique_ptr<FingerprintTableReader>> FingerprintTableReader::open(
    const std::filesystem::path& path, size_t n_features, const std::string& model) {
  if (fingerprint_format_of(path) == FingerprintFormat::kParquet) {
    return ParquetReader::open(path, n_features, model);
  }
  return CsvReader::open(path, n_features, model);
}

// ---- labelled fingerprints (training input) ---------------------------------------------------

namespace {

// Column positions of a labelled fingerprint table's header.
struct LabelledColumns {
  std::vector<size_t> fp;      // fp[k]: the column of fp_k
  size_t label = SIZE_MAX;     // the barcode column
  size_t read_id = SIZE_MAX;   // SIZE_MAX: no read_id column
};

Result<LabelledColumns> labelled_columns(const std::vector<std::string>& names, const std::string& file) {
  std::map<long, size_t> fp;  // fp index -> column, ordered to check 0..N-1
  LabelledColumns c;
  for (size_t col = 0; col < names.size(); ++col) {
    if (const long k = indexed_column(names[col], "fp_"); k >= 0) {
      if (!fp.emplace(k, col).second) {
        return Status::invalid_argument(file + ": column " + names[col] + " appears twice");
      }
    } else if (names[col] == kLabelColumn) {
      c.label = col;
    } else if (names[col] == "read_id") {
      c.read_id = col;
    }
  }
  if (fp.empty()) return Status::invalid_argument(file + ": no fp_0, fp_1, ... columns in the header");
  if (c.label == SIZE_MAX) {
    return Status::invalid_argument(file + ": no `barcode` column (training needs a label per read: "
                                           "BC04 or 4, noise/unclassified/-1 for the noise class)");
  }
  if (fp.rbegin()->first != static_cast<long>(fp.size()) - 1) {
    return Status::invalid_argument(fmt::format("{}: fingerprint columns must be fp_0 .. fp_{} without gaps",
                                                file, fp.size() - 1));
  }
  for (const auto& [k, col] : fp) c.fp.push_back(col);
  return c;
}

// Appends one data row's values and label to `t`; `where` is "file:line".
Status add_labelled_row(const std::vector<std::string_view>& cells, const LabelledColumns& c,
                        const std::string& where, LabelledFingerprints& t) {
  for (size_t k = 0; k < c.fp.size(); ++k) {
    double v = 0;
    if (!parse_double(cells[c.fp[k]], v)) {
      return Status::invalid_argument(fmt::format("{}: fp_{} '{}' is not a number", where, k, cells[c.fp[k]]));
    }
    t.features.push_back(v);
  }
  ESCPOD_ASSIGN_OR_RETURN(const int32_t label, parse_barcode_label(cells[c.label], where));
  t.labels.push_back(label);
  t.read_ids.emplace_back(c.read_id == SIZE_MAX ? std::string_view() : cells[c.read_id]);
  return Status::ok();
}

}  // namespace

Status write_labelled_fingerprints(std::ostream& out, const LabelledFingerprints& table,
                                   const std::string& what) {
  std::string line = "read_id";
  for (size_t k = 0; k < table.n_features; ++k) fmt::format_to(std::back_inserter(line), ",fp_{}", k);
  line += ",barcode\n";
  out << line;
  for (size_t r = 0; r < table.labels.size(); ++r) {
    line = table.read_ids[r];
    for (size_t k = 0; k < table.n_features; ++k) {
      fmt::format_to(std::back_inserter(line), ",{:.6f}", table.features[r * table.n_features + k]);
    }
    line += ',';
    line += label_name(table.labels[r]);
    line += '\n';
    out << line;
  }
  out.flush();
  return out ? Status::ok() : Status::io_error("cannot write " + what);
}

Result<LabelledFingerprints> read_labelled_fingerprints(const std::filesystem::path& path) {
  const std::string file = path.string();
  ESCPOD_ASSIGN_OR_RETURN(LineReader in, LineReader::open(path));
  std::string line, storage;
  std::vector<std::string_view> cells;
  if (!in.next(line)) {
    if (!in.error().empty()) return Status::io_error(file + ": " + in.error());
    return Status::invalid_argument(file + ": empty file");
  }
  if (!line.empty() && line[0] == '#') line.erase(0, 1);
  split_csv(line, cells, storage);
  const std::vector<std::string> names(cells.begin(), cells.end());
  ESCPOD_ASSIGN_OR_RETURN(const LabelledColumns columns, labelled_columns(names, file));
  LabelledFingerprints t;
  t.n_features = columns.fp.size();
  while (in.next(line)) {
    if (line.find_first_not_of(' ') == std::string::npos || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", file, in.line_no());
    split_csv(line, cells, storage);
    if (cells.size() != names.size()) {
      return Status::invalid_argument(fmt::format("{}: {} fields, the header has {}", where, cells.size(), names.size()));
    }
    ESCPOD_RETURN_IF_ERROR(add_labelled_row(cells, columns, where, t));
  }
  if (!in.error().empty()) return Status::io_error(file + ": " + in.error());
  if (t.labels.empty()) return Status::invalid_argument(file + ": no data rows");
  return t;
}

}  // namespace escpod::pipeline
