// What FileReader reads at open: the footer's description, the tables' schemas, the reads
// batches' row counts, the dictionaries and the run infos (pod5/file_reader_parts.hpp); and the
// checks of rows decoded later against them.
#include <algorithm>

#include "pod5/file_reader_parts.hpp"

namespace escpod::pod5::detail {

namespace {

Status type_error(const std::string& path, const char* table, const std::string& column,
                  const std::string& expected, const arrow::DataType& found) {
  return Status::corrupt(path + ": " + table + " table column '" + column + "' has type " +
                         found.ToString() + ", expected " + expected);
}

int16_t intern(std::vector<std::string>& table, const std::string& value) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i] == value) return static_cast<int16_t>(i);
  table.push_back(value);
  return static_cast<int16_t>(table.size() - 1);
}

std::vector<std::pair<std::string, std::string>> map_entries(const arrow::MapArray& map,
                                                             int64_t row) {
  std::vector<std::pair<std::string, std::string>> out;
  if (map.IsNull(row)) return out;
  auto keys = std::static_pointer_cast<arrow::StringArray>(map.keys());
  auto items = std::static_pointer_cast<arrow::StringArray>(map.items());
  for (int32_t j = map.value_offset(row); j < map.value_offset(row) + map.value_length(row); ++j) {
    out.emplace_back(keys->GetString(j), items->IsNull(j) ? "" : items->GetString(j));
  }
  return out;
}

// Reads row `row` of a run-info struct/record (columns looked up by name through `get`).
template <typename Get>
Status run_info_from_columns(const Get& get, int64_t row, RunInfo* out, const std::string& ctx) {
  auto str = [&](const char* name, std::string* dst) -> Status {
    auto a = get(name);
    if (!a) return Status::corrupt(ctx + ": run info lacks '" + name + "'");
    if (a->type_id() != arrow::Type::STRING)
      return Status::corrupt(ctx + ": run info '" + name + "' is " + a->type()->ToString());
    auto& s = static_cast<const arrow::StringArray&>(*a);
    *dst = s.IsNull(row) ? "" : s.GetString(row);
    return Status::ok();
  };
  auto ts = [&](const char* name, int64_t* dst) -> Status {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::TIMESTAMP)
      return Status::corrupt(ctx + ": run info '" + name + "' missing or not a timestamp");
    auto unit = static_cast<const arrow::TimestampType&>(*a->type()).unit();
    int64_t v = static_cast<const arrow::TimestampArray&>(*a).Value(row);
    switch (unit) {
      case arrow::TimeUnit::SECOND: v *= 1000; break;
      case arrow::TimeUnit::MILLI: break;
      case arrow::TimeUnit::MICRO: v /= 1000; break;
      case arrow::TimeUnit::NANO: v /= 1000000; break;
    }
    *dst = v;
    return Status::ok();
  };
  auto map = [&](const char* name, std::vector<std::pair<std::string, std::string>>* dst) {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::MAP)
      return Status::corrupt(ctx + ": run info '" + std::string(name) + "' missing or not a map");
    *dst = map_entries(static_cast<const arrow::MapArray&>(*a), row);
    return Status::ok();
  };
  auto i16 = [&](const char* name, int16_t* dst) -> Status {
    auto a = get(name);
    if (!a || a->type_id() != arrow::Type::INT16)
      return Status::corrupt(ctx + ": run info '" + std::string(name) + "' missing or not int16");
    *dst = static_cast<const arrow::Int16Array&>(*a).Value(row);
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(str("acquisition_id", &out->acquisition_id));
  ESCPOD_RETURN_IF_ERROR(ts("acquisition_start_time", &out->acquisition_start_time_ms));
  ESCPOD_RETURN_IF_ERROR(i16("adc_max", &out->adc_max));
  ESCPOD_RETURN_IF_ERROR(i16("adc_min", &out->adc_min));
  ESCPOD_RETURN_IF_ERROR(map("context_tags", &out->context_tags));
  ESCPOD_RETURN_IF_ERROR(str("experiment_name", &out->experiment_name));
  ESCPOD_RETURN_IF_ERROR(str("flow_cell_id", &out->flow_cell_id));
  ESCPOD_RETURN_IF_ERROR(str("flow_cell_product_code", &out->flow_cell_product_code));
  ESCPOD_RETURN_IF_ERROR(str("protocol_name", &out->protocol_name));
  ESCPOD_RETURN_IF_ERROR(str("protocol_run_id", &out->protocol_run_id));
  ESCPOD_RETURN_IF_ERROR(ts("protocol_start_time", &out->protocol_start_time_ms));
  ESCPOD_RETURN_IF_ERROR(str("sample_id", &out->sample_id));
  {
    auto a = get("sample_rate");
    if (!a || a->type_id() != arrow::Type::UINT16)
      return Status::corrupt(ctx + ": run info 'sample_rate' missing or not uint16");
    out->sample_rate = static_cast<const arrow::UInt16Array&>(*a).Value(row);
  }
  ESCPOD_RETURN_IF_ERROR(str("sequencing_kit", &out->sequencing_kit));
  ESCPOD_RETURN_IF_ERROR(str("sequencer_position", &out->sequencer_position));
  ESCPOD_RETURN_IF_ERROR(str("sequencer_position_type", &out->sequencer_position_type));
  ESCPOD_RETURN_IF_ERROR(str("software", &out->software));
  ESCPOD_RETURN_IF_ERROR(str("system_name", &out->system_name));
  ESCPOD_RETURN_IF_ERROR(str("system_type", &out->system_type));
  ESCPOD_RETURN_IF_ERROR(map("tracking_id", &out->tracking_id));
  return Status::ok();
}

}  // namespace

void TablesAtOpen::apply_options(const OpenOptions& options) {
  validated_at_open = options.validate_all_batches;
  if (options.layout && !options.validate_all_batches) {
    given_layout = options.layout;
    read_rows_source = signal_rows_source = "the given batch layout";
    given_signal_first.reserve(options.layout->signal_batch_rows.size() + 1);
    given_signal_first.push_back(0);
    for (uint32_t rows : options.layout->signal_batch_rows) {
      given_signal_first.push_back(given_signal_first.back() + rows);
    }
  }
}

void TablesAtOpen::adopt_footer(const Footer& footer) {
  info.file_identifier = footer.file_identifier;
  info.software = footer.software;
  info.pod5_version = footer.pod5_version;
  info.warnings = footer.warnings;
  info.reads_table = {footer.reads.offset, footer.reads.length};
  info.run_info_table = {footer.run_info.offset, footer.run_info.length};
  info.signal_table = {footer.signal.offset, footer.signal.length};
}

Status TablesAtOpen::check_metadata(const arrow::Schema& schema, const char* what) {
  auto md = schema.metadata();
  if (!md) return Status::corrupt(where() + ": " + what + " table schema has no MINKNOW metadata");
  auto id = md->Get("MINKNOW:file_identifier");
  if (!id.ok()) {
    return Status::corrupt(where() + ": " + what + " table lacks MINKNOW:file_identifier");
  }
  if (*id != info.file_identifier) {
    info.warnings.push_back(std::string(what) + " table file identifier " + *id +
                            " differs from the footer's " + info.file_identifier);
  }
  return Status::ok();
}

Status TablesAtOpen::check_signal_schema(const arrow::Schema& schema) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "signal"));
  id_col = schema.GetFieldIndex("read_id");
  sig_col = schema.GetFieldIndex("signal");
  n_col = schema.GetFieldIndex("samples");
  if (id_col < 0 || sig_col < 0 || n_col < 0) {
    return Status::corrupt(where() + ": signal table lacks read_id, signal or samples");
  }
  const auto& id_field = *schema.field(id_col);
  const auto* id_storage = id_field.type()->id() == arrow::Type::EXTENSION
      ? static_cast<const arrow::ExtensionType&>(*id_field.type()).storage_type().get()
      : id_field.type().get();
  if (extension_name(id_field) != "minknow.uuid" ||
      !id_storage->Equals(*arrow::fixed_size_binary(16))) {
    return type_error(where(), "signal", "read_id", "minknow.uuid", *id_field.type());
  }
  const auto& sig_field = *schema.field(sig_col);
  if (extension_name(sig_field) == "minknow.vbz") {
    info.is_vbz = true;
  } else if (sig_field.type()->id() == arrow::Type::LARGE_LIST &&
             static_cast<const arrow::LargeListType&>(*sig_field.type()).value_type()->id() ==
                 arrow::Type::INT16) {
    info.is_vbz = false;
  } else {
    return type_error(where(), "signal", "signal", "minknow.vbz or large_list<int16>",
                      *sig_field.type());
  }
  if (schema.field(n_col)->type()->id() != arrow::Type::UINT32) {
    return type_error(where(), "signal", "samples", "uint32", *schema.field(n_col)->type());
  }
  return Status::ok();
}

Status TablesAtOpen::expect_column(const arrow::Schema& schema, const char* name,
                                   const std::shared_ptr<arrow::DataType>& type, bool required) const {
  auto it = col.find(name);
  if (it == col.end()) {
    return required ? Status::corrupt(where() + ": reads table lacks column '" + name + "'")
                    : Status::ok();
  }
  const auto& found = schema.field(it->second)->type();
  if (!found->Equals(*type)) return type_error(where(), "reads", name, type->ToString(), *found);
  return Status::ok();
}

Status TablesAtOpen::check_reads_schema(const arrow::Schema& schema) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "reads"));
  for (int i = 0; i < schema.num_fields(); ++i) col[schema.field(i)->name()] = i;
  ESCPOD_RETURN_IF_ERROR(check_common_read_columns(schema));
  legacy_struct_columns = col.count("pore") > 0;
  return legacy_struct_columns ? check_legacy_read_columns(schema) : check_dictionary_read_columns(schema);
}

// read_id and the signal row list are common to every version, and so are the V0 and (optional:
// absent in V0) the V1 fields.
Status TablesAtOpen::check_common_read_columns(const arrow::Schema& schema) {
  const auto& id_field = *schema.field(col.count("read_id") ? col["read_id"] : 0);
  if (!col.count("read_id") || extension_name(id_field) != "minknow.uuid") {
    return Status::corrupt(where() + ": reads table lacks a minknow.uuid 'read_id' column");
  }
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "signal", arrow::list(arrow::uint64()), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "read_number", arrow::uint32(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "start", arrow::uint64(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "median_before", arrow::float32(), true));
  // V1 fields (optional: absent in V0).
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "num_minknow_events", arrow::uint64(), false));
  for (const char* f : {"tracked_scaling_scale", "tracked_scaling_shift", "predicted_scaling_scale",
                        "predicted_scaling_shift", "time_since_mux_change"}) {
    ESCPOD_RETURN_IF_ERROR(expect_column(schema, f, arrow::float32(), false));
  }
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "num_reads_since_mux_change", arrow::uint32(), false));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "num_samples", arrow::uint64(), false));
  for (const char* f : {"open_pore_level", "expected_open_pore_level", "selected_read_level"}) {
    ESCPOD_RETURN_IF_ERROR(expect_column(schema, f, arrow::float32(), false));
  }
  return Status::ok();
}

// V0-V2: pore, calibration, end_reason and run_info are dictionaries of structs.
Status TablesAtOpen::check_legacy_read_columns(const arrow::Schema& schema) {
  for (const char* f : {"pore", "calibration", "end_reason", "run_info"}) {
    auto it = col.find(f);
    if (it == col.end()) return Status::corrupt(where() + ": V0-V2 reads table lacks '" + f + "'");
    const auto& type = *schema.field(it->second)->type();
    if (type.id() != arrow::Type::DICTIONARY ||
        static_cast<const arrow::DictionaryType&>(type).value_type()->id() != arrow::Type::STRUCT) {
      return type_error(where(), "reads", f, "dictionary<struct>", type);
    }
  }
  info.read_table_version = col.count("num_samples")          ? ReadTableVersion::kV2
                            : col.count("num_minknow_events") ? ReadTableVersion::kV1
                                                              : ReadTableVersion::kV0;
  return Status::ok();
}

// V3+: string dictionaries and the pore and calibration fields as columns of their own.
Status TablesAtOpen::check_dictionary_read_columns(const arrow::Schema& schema) {
  auto dict_type = arrow::dictionary(arrow::int16(), arrow::utf8());
  for (const char* f : {"pore_type", "end_reason", "run_info"}) {
    ESCPOD_RETURN_IF_ERROR(expect_column(schema, f, dict_type, true));
  }
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "well", arrow::uint8(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "calibration_offset", arrow::float32(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "calibration_scale", arrow::float32(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "end_reason_forced", arrow::boolean(), true));
  ESCPOD_RETURN_IF_ERROR(expect_column(schema, "channel_32bit", arrow::uint32(), false));
  auto ch = col.find("channel");
  if (ch == col.end()) return Status::corrupt(where() + ": reads table lacks column 'channel'");
  const auto& ch_type = *schema.field(ch->second)->type();
  if (ch_type.id() != arrow::Type::UINT16 && ch_type.id() != arrow::Type::UINT32) {
    return type_error(where(), "reads", "channel", "uint16 or uint32", ch_type);
  }
  info.read_table_version = col.count("channel_32bit")              ? ReadTableVersion::kV7
                            : ch_type.id() == arrow::Type::UINT32   ? ReadTableVersion::kV6
                            : col.count("expected_open_pore_level") ? ReadTableVersion::kV5
                            : col.count("open_pore_level")          ? ReadTableVersion::kV4
                                                                    : ReadTableVersion::kV3;
  return Status::ok();
}

// A layout given at open must have as many batches as the file's tables (their IPC footers).
Status TablesAtOpen::check_given_layout(const BatchLayout& layout, int n_read_batches, size_t n_signal) const {
  if (layout.read_batch_rows.size() != static_cast<size_t>(n_read_batches) ||
      layout.signal_batch_rows.size() != n_signal) {
    return Status::corrupt(where() + ": has " + std::to_string(n_read_batches) + " reads and " +
                           std::to_string(n_signal) + " signal batches, the given layout (" +
                           std::string(read_rows_source) + ") " + std::to_string(layout.read_batch_rows.size()) +
                           " and " + std::to_string(layout.signal_batch_rows.size()));
  }
  return Status::ok();
}

// The last batch holds the complete dictionaries the string tables come from: always checked
// (without validate_all_batches only its dictionaries: the batch is checked when decoded).
Status TablesAtOpen::validate_at_open(const arrow::RecordBatch& rb, bool last, const std::string& ctx) const {
  if (validated_at_open) {
    ESCPOD_RETURN_IF_ERROR(from_arrow(rb.ValidateFull(), ctx));
  } else if (last) {
    for (const auto& column : rb.columns()) {
      if (column->type_id() != arrow::Type::DICTIONARY) continue;
      const auto& values = static_cast<const arrow::DictionaryArray&>(*column).dictionary();
      ESCPOD_RETURN_IF_ERROR(from_arrow(values->ValidateFull(), ctx + " dictionary"));
    }
  }
  return Status::ok();
}
Status TablesAtOpen::load_run_info(const arrow::Schema& schema, int n_batches,
                                   const BatchSource& get_batch) {
  ESCPOD_RETURN_IF_ERROR(check_metadata(schema, "run info"));
  for (int b = 0; b < n_batches; ++b) {
    auto batch = get_batch(b);
    const std::string ctx = where() + ": run info batch " + std::to_string(b);
    if (!batch.ok()) return from_arrow(batch.status(), ctx);
    ESCPOD_RETURN_IF_ERROR(from_arrow((*batch)->ValidateFull(), ctx));
    const auto& rb = **batch;
    auto get = [&rb](const char* name) { return rb.GetColumnByName(name); };
    for (int64_t r = 0; r < rb.num_rows(); ++r) {
      RunInfo ri;
      ESCPOD_RETURN_IF_ERROR(run_info_from_columns(get, r, &ri, ctx));
      add_run_info_row(std::move(ri));
    }
  }
  return Status::ok();
}

// V3+: string dictionaries. Arrow's file reader applies every dictionary (deltas included) up
// front, so the last batch's dictionary is the complete one and earlier indices stay valid.
Status TablesAtOpen::load_dictionaries() {
  if (read_batches.empty()) return Status::ok();
  const auto& last = *read_batches.back();
  auto strings = [&](const char* name, std::vector<std::string>& out) {
    auto d = std::static_pointer_cast<arrow::DictionaryArray>(last.column(col.at(name)));
    auto values = std::static_pointer_cast<arrow::StringArray>(d->dictionary());
    out.clear();
    for (int64_t i = 0; i < values->length(); ++i) out.push_back(values->GetString(i));
  };
  strings("pore_type", pore_types);
  strings("end_reason", end_reasons);
  strings("run_info", run_info_ids);
  return Status::ok();
}

// V0-V2: pore, calibration, end_reason and run_info are dictionaries of structs; derive our
// columns per dictionary entry once, and the run infos from the run_info structs.
Status TablesAtOpen::load_legacy_dictionaries() {
  if (read_batches.empty()) return Status::ok();
  const auto& last = *read_batches.back();
  const std::string ctx = where() + ": reads table";
  auto struct_dict = [&](const char* name) {
    auto d = std::static_pointer_cast<arrow::DictionaryArray>(last.column(col.at(name)));
    return std::static_pointer_cast<arrow::StructArray>(d->dictionary());
  };
  auto field = [&](const std::shared_ptr<arrow::StructArray>& s, const char* f,
                   arrow::Type::type type) -> Result<std::shared_ptr<arrow::Array>> {
    auto a = s->GetFieldByName(f);
    if (!a || a->type_id() != type) {
      return Status::corrupt(ctx + ": struct field '" + f + "' missing or of the wrong type");
    }
    return a;
  };
  {
    auto pore = struct_dict("pore");
    ESCPOD_ASSIGN_OR_RETURN(auto channel, field(pore, "channel", arrow::Type::UINT16));
    ESCPOD_ASSIGN_OR_RETURN(auto well, field(pore, "well", arrow::Type::UINT8));
    ESCPOD_ASSIGN_OR_RETURN(auto type, field(pore, "pore_type", arrow::Type::STRING));
    for (int64_t i = 0; i < pore->length(); ++i) {
      dict.pore_channel.push_back(static_cast<const arrow::UInt16Array&>(*channel).Value(i));
      dict.pore_well.push_back(static_cast<const arrow::UInt8Array&>(*well).Value(i));
      dict.pore_type.push_back(
          intern(pore_types, static_cast<const arrow::StringArray&>(*type).GetString(i)));
    }
  }
  {
    auto calib = struct_dict("calibration");
    ESCPOD_ASSIGN_OR_RETURN(auto offset, field(calib, "offset", arrow::Type::FLOAT));
    ESCPOD_ASSIGN_OR_RETURN(auto scale, field(calib, "scale", arrow::Type::FLOAT));
    for (int64_t i = 0; i < calib->length(); ++i) {
      dict.calib_offset.push_back(static_cast<const arrow::FloatArray&>(*offset).Value(i));
      dict.calib_scale.push_back(static_cast<const arrow::FloatArray&>(*scale).Value(i));
    }
  }
  {
    auto end = struct_dict("end_reason");
    ESCPOD_ASSIGN_OR_RETURN(auto name, field(end, "name", arrow::Type::STRING));
    ESCPOD_ASSIGN_OR_RETURN(auto forced, field(end, "forced", arrow::Type::BOOL));
    for (int64_t i = 0; i < end->length(); ++i) {
      dict.end_reason.push_back(
          intern(end_reasons, static_cast<const arrow::StringArray&>(*name).GetString(i)));
      dict.end_forced.push_back(static_cast<const arrow::BooleanArray&>(*forced).Value(i));
    }
  }
  {
    auto runs = struct_dict("run_info");
    auto get = [&runs](const char* name) { return runs->GetFieldByName(name); };
    for (int64_t i = 0; i < runs->length(); ++i) {
      RunInfo ri;
      ESCPOD_RETURN_IF_ERROR(run_info_from_columns(get, i, &ri, ctx));
      dict.run_info.push_back(intern(run_info_ids, ri.acquisition_id));
      add_run_info_row(std::move(ri));
    }
  }
  return Status::ok();
}

void TablesAtOpen::add_run_info_row(RunInfo&& ri) {
  ++info.n_run_info_rows;
  if (std::none_of(run_infos.begin(), run_infos.end(),
                   [&](const RunInfo& x) { return x.acquisition_id == ri.acquisition_id; })) {
    run_infos.push_back(std::move(ri));
  }
}

void TablesAtOpen::warn_missing_run_infos() {
  for (const auto& id : run_info_ids) {
    if (!std::any_of(run_infos.begin(), run_infos.end(),
                     [&](const RunInfo& r) { return r.acquisition_id == id; })) {
      info.warnings.push_back("reads refer to run info '" + id + "' missing from the run info table");
    }
  }
}

Status TablesAtOpen::dictionary_indices(const arrow::RecordBatch& rb, size_t batch_idx, size_t first_row,
                                        const char* name, size_t dict_size, std::vector<int16_t>& dst) const {
  const auto rows = static_cast<size_t>(rb.num_rows());
  auto d = std::static_pointer_cast<arrow::DictionaryArray>(rb.column(col.at(name)));
  auto idx = std::static_pointer_cast<arrow::Int16Array>(d->indices());
  dst.resize(rows);
  for (size_t i = 0; i < rows; ++i) dst[i] = idx->Value(static_cast<int64_t>(i));
  return check_index_range(batch_idx, first_row, name, dst, dict_size);
}
Status TablesAtOpen::check_index_range(size_t batch_idx, size_t first_row, const char* name,
                                       std::span<const int16_t> idx, size_t dict_size) const {
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] < 0 || static_cast<size_t>(idx[i]) >= dict_size) {
      return Status::corrupt(where() + ": reads batch " + std::to_string(batch_idx) + " row " +
                             std::to_string(first_row + i) +
                             ": " + name + " index " + std::to_string(idx[i]) + " outside its dictionary");
    }
  }
  return Status::ok();
}

Status TablesAtOpen::check_dictionary_indices(const ReadBatch& batch, size_t batch_idx) const {
  const size_t first_row = batch.first_read_idx - read_batch_first[batch_idx];
  ESCPOD_RETURN_IF_ERROR(check_index_range(batch_idx, first_row, "pore_type", batch.pore_type_idx, pore_types.size()));
  ESCPOD_RETURN_IF_ERROR(check_index_range(batch_idx, first_row, "end_reason", batch.end_reason_idx, end_reasons.size()));
  return check_index_range(batch_idx, first_row, "run_info", batch.run_info_idx, run_info_ids.size());
}

Status TablesAtOpen::check_row_range(size_t batch_idx, size_t first_row, size_t n_rows) const {
  const size_t n_batch = batch_idx < read_batches.size() ? batch_rows_of(batch_idx) : 0;
  if (batch_idx >= read_batches.size() || first_row > n_batch || n_rows > n_batch - first_row) {
    return Status::invalid_argument(where() + ": rows " + std::to_string(first_row) + "+" + std::to_string(n_rows) +
                                    " of reads batch " + std::to_string(batch_idx) + " (" + std::to_string(n_batch) +
                                    " rows, " + std::to_string(read_batches.size()) + " batches)");
  }
  return Status::ok();
}

// What decode_rows relies on, without ValidateFull's walk over every column (and each dictionary
// again) for a one-row slice (measured: a third of the decoding cost of pulling reads by id).
// Validate() checks every buffer is large enough for the rows; decode_rows checks the dictionary
// indices; here, the signal row lists' offsets.
Status TablesAtOpen::check_slice(const arrow::RecordBatch& rb, size_t batch_idx) const {
  if (validated_at_open) return Status::ok();
  const std::string ctx = where() + ": reads batch " + std::to_string(batch_idx);
  ESCPOD_RETURN_IF_ERROR(from_arrow(rb.Validate(), ctx));
  const auto& list = static_cast<const arrow::ListArray&>(*column(rb, "signal"));
  const int32_t* offs = list.raw_value_offsets();
  const int64_t n_values = list.values()->length();
  for (int64_t i = 0; i < rb.num_rows(); ++i) {
    if (offs[i] < 0 || offs[i] > offs[i + 1] || offs[i + 1] > n_values) {
      return Status::corrupt(ctx + " row " + std::to_string(i) + ": signal row list offsets " +
                             std::to_string(offs[i]) + ".." + std::to_string(offs[i + 1]) + " outside " +
                             std::to_string(n_values) + " values");
    }
  }
  return Status::ok();
}
}  // namespace escpod::pod5::detail
