// escpod view: one TSV row per read, chosen fields, straight from the reads tables.
#include <fmt/format.h>

#include <memory>
#include <unordered_set>

#include "cli/command.hpp"
#include "cli/output.hpp"
#include "escpod/pipeline/ops/annotations.hpp"
#include "escpod/pipeline/ops/read_fields.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/inputs.hpp"

namespace escpod::cli {
using pipeline::all_read_fields;
using pipeline::default_view_fields;
using pipeline::find_read_field;
using pipeline::ReadField;

namespace {

struct ViewOptions {
  std::vector<std::string> inputs;
  std::string include, exclude, ids_path, separator = "\t";
  OutputFlags output;
  bool no_header = false;
  bool list_fields = false;
};

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(", ", start);
    if (end == std::string::npos) end = text.size();
    if (end > start) names.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

std::string field_list() {
  std::string s;
  for (const auto& f : all_read_fields()) s += fmt::format("  {:<28} {}\n", f.name, f.help);
  return s;
}

Status run_view(const ViewOptions& opts, int n_threads_wanted) {
  if (opts.list_fields) {
    fmt::print("{}", field_list());
    return Status::ok();
  }
  if (opts.inputs.empty()) return Status::usage("view needs at least one FILE or DIR");
  std::vector<const ReadField*> fields;
  std::vector<std::string> names;
  if (opts.include.empty()) {
    for (auto n : default_view_fields()) names.emplace_back(n);
  } else {
    names = split_names(opts.include);
  }
  auto excluded = split_names(opts.exclude);
  for (const auto& n : excluded) {
    if (!find_read_field(n)) {
      return Status::usage("--exclude: unknown field '" + n + "'; fields are:\n" + field_list());
    }
  }
  std::vector<std::string> sidecar_columns;  // not built-in: looked up in the sidecars
  for (const auto& n : names) {
    const ReadField* f = find_read_field(n);
    if (std::find(excluded.begin(), excluded.end(), n) != excluded.end()) continue;
    if (f) {
      fields.push_back(f);
    } else if (std::find(sidecar_columns.begin(), sidecar_columns.end(), n) == sidecar_columns.end()) {
      sidecar_columns.push_back(n);
    }
  }
  if (fields.empty() && sidecar_columns.empty()) return Status::usage("no fields left to print");

  std::unordered_set<pod5::ReadId, pod5::ReadIdHash> wanted;
  const bool select = !opts.ids_path.empty();
  if (select) {
    ESCPOD_ASSIGN_OR_RETURN(auto ids, pod5::read_id_list(opts.ids_path));
    wanted.insert(ids.begin(), ids.end());
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  if (!sidecar_columns.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto known, pipeline::sidecar_column_names(files));
    for (const auto& n : sidecar_columns) {
      if (std::find(known.begin(), known.end(), n) != known.end()) continue;
      std::string annotations;
      for (const auto& k : known) annotations += " " + k;
      return Status::usage("--include: unknown field '" + n + "', and no sidecar column of the inputs "
                                      "has that name (sidecar columns:" +
                                      (known.empty() ? std::string(" none") : annotations) + "); fields are:\n" +
                                      field_list());
    }
  }
  ESCPOD_ASSIGN_OR_RETURN(Output out, open_output(opts.output));
  if (!opts.no_header) {
    std::string& s = out.buffer();
    for (size_t k = 0; k < fields.size(); ++k) {
      if (k) s += opts.separator;
      s += fields[k]->name;
    }
    for (size_t k = 0; k < sidecar_columns.size(); ++k) {
      if (k || !fields.empty()) s += opts.separator;
      s += sidecar_columns[k];
    }
    s += '\n';
  }
  out.flush();
  ESCPOD_RETURN_IF_ERROR(pipeline::write_read_table(
      files, fields, opts.separator, select ? &wanted : nullptr, n_threads_wanted,
      [&out](std::string_view text) {
        out.write(text);
        return !out.closed();
      },
      sidecar_columns));
  return out.finish();
}

}  // namespace

void register_view(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<ViewOptions>();
  auto* sub = app.add_subcommand(
      "view",
      "Print one row per read (TSV) with the chosen fields.\n"
      "  escpod view reads.pod5 | head\n"
      "  escpod view runs/ --include read_id,num_samples,end_reason --ids wanted.txt\n"
      "  escpod view reads.pod5 --include read_id,barcode      (annotations of reads.pod5.p5s)\n"
      "Default fields: read_id channel well read_number start_sample num_samples end_reason.\n"
      "--list-fields shows them all. An --include name that is not a field is a sidecar column\n"
      "(label or score), printed after the fields; empty where a read has no value.\n"
      "-i is --ids in every escpod command (as in `pod5 filter -i`); `pod5 view -i` is --include,\n"
      "which escpod spells out.");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories (walked for *.pod5)");
  sub->add_option("--include", opts->include, "Comma-separated fields to print, in order");
  sub->add_option("-x,--exclude", opts->exclude, "Comma-separated fields to leave out");
  sub->add_option("-i,--ids", opts->ids_path, "Only reads whose ids are listed in this file ('-' = stdin)");
  sub->add_option("-s,--separator", opts->separator, "Column separator (default TAB)");
  sub->add_flag("-H,--no-header", opts->no_header, "Do not print the header line");
  sub->add_flag("--list-fields", opts->list_fields, "List the fields and exit");
  add_output_flags(sub, opts->output);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_view(*opts, resolve_threads(global)); });
}

}  // namespace escpod::cli
