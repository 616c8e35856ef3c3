// escpod view: one TSV row per read, chosen fields, straight from the reads tables.
#include <fmt/format.h>

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <memory>
#include <unordered_set>

#include "cli/command.hpp"
#include "cli/output.hpp"
#include "escpod/pipeline/read_fields.hpp"
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
  std::string include, exclude, ids_path, output = "-", separator = "\t";
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
  if (opts.inputs.empty()) return Status::invalid_argument("view needs at least one FILE or DIR");
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
      return Status::invalid_argument("--exclude: unknown field '" + n + "'; fields are:\n" + field_list());
    }
  }
  for (const auto& n : names) {
    const ReadField* f = find_read_field(n);
    if (!f) return Status::invalid_argument("--include: unknown field '" + n + "'; fields are:\n" + field_list());
    if (std::find(excluded.begin(), excluded.end(), n) == excluded.end()) fields.push_back(f);
  }
  if (fields.empty()) return Status::invalid_argument("no fields left to print");

  std::unordered_set<pod5::ReadId, pod5::ReadIdHash> wanted;
  const bool select = !opts.ids_path.empty();
  if (select) {
    ESCPOD_ASSIGN_OR_RETURN(auto ids, pod5::read_id_list(opts.ids_path));
    wanted.insert(ids.begin(), ids.end());
  }
  ESCPOD_ASSIGN_OR_RETURN(auto files, pod5::collect_pod5_inputs(opts.inputs));
  ESCPOD_ASSIGN_OR_RETURN(Output out, Output::open(opts.output));
  if (!opts.no_header) {
    std::string& s = out.buffer();
    for (size_t k = 0; k < fields.size(); ++k) {
      if (k) s += opts.separator;
      s += fields[k]->name;
    }
    s += '\n';
  }
  out.flush();
  // Batches are formatted in parallel and written in input order (identical output for any
  // thread count); at most a few batches of text are in flight.
  struct Job {
    std::shared_ptr<const pod5::FileReader> file;
    size_t batch = 0;
    std::string text;
    Status status;
  };
  std::vector<std::shared_ptr<const pod5::FileReader>> opened;
  size_t file_idx = 0, batch_idx = 0;
  Status first_error;
  const int n_threads = std::max(1, n_threads_wanted);
  tbb::task_arena arena(n_threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        static_cast<size_t>(2 * n_threads + 2),
        tbb::make_filter<void, Job*>(tbb::filter_mode::serial_in_order,
                                     [&](tbb::flow_control& fc) -> Job* {
                                       while (true) {
                                         if (!first_error.is_ok() || out.closed() ||
                                             file_idx == files.size()) {
                                           fc.stop();
                                           return nullptr;
                                         }
                                         if (opened.size() == file_idx) {
                                           auto f = pod5::FileReader::open(files[file_idx]);
                                           if (!f.is_ok()) {
                                             first_error = f.status();
                                             continue;
                                           }
                                           opened.push_back(std::move(*f));
                                         }
                                         if (batch_idx == opened[file_idx]->n_read_batches()) {
                                           opened[file_idx].reset();  // unmaps once its jobs are done
                                           ++file_idx;
                                           batch_idx = 0;
                                           continue;
                                         }
                                         return new Job{opened[file_idx], batch_idx++, {}, {}};
                                       }
                                     }) &
            tbb::make_filter<Job*, Job*>(tbb::filter_mode::parallel,
                                         [&](Job* job) {
                                           auto batch = job->file->read_batch(job->batch);
                                           if (!batch.is_ok()) {
                                             job->status = batch.status();
                                             return job;
                                           }
                                           std::string& s = job->text;
                                           for (size_t i = 0; i < batch->size(); ++i) {
                                             if (select && !wanted.count(batch->read_id[i])) continue;
                                             for (size_t k = 0; k < fields.size(); ++k) {
                                               if (k) s += opts.separator;
                                               job->status = fields[k]->append(*job->file, *batch, i, s);
                                               if (!job->status.is_ok()) return job;
                                             }
                                             s += '\n';
                                           }
                                           return job;
                                         }) &
            tbb::make_filter<Job*, void>(tbb::filter_mode::serial_in_order, [&](Job* job) {
              std::unique_ptr<Job> owned(job);
              if (!job->status.is_ok()) {
                if (first_error.is_ok()) first_error = job->status;
                return;
              }
              if (!first_error.is_ok()) return;
              out.write(job->text);
            }));
  });
  ESCPOD_RETURN_IF_ERROR(first_error);
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
      "Default fields: read_id channel well read_number start_sample num_samples end_reason.\n"
      "--list-fields shows them all.");
  sub->add_option("inputs", opts->inputs, "POD5 files or directories (walked for *.pod5)");
  sub->add_option("-i,--include", opts->include, "Comma-separated fields to print, in order");
  sub->add_option("-x,--exclude", opts->exclude, "Comma-separated fields to leave out");
  sub->add_option("--ids", opts->ids_path, "Only reads whose ids are listed in this file ('-' = stdin)");
  sub->add_option("-s,--separator", opts->separator, "Column separator (default TAB)");
  sub->add_flag("-H,--no-header", opts->no_header, "Do not print the header line");
  sub->add_flag("--list-fields", opts->list_fields, "List the fields and exit");
  sub->add_option("-o,--output", opts->output, "Write to this file instead of stdout");
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_view(*opts, resolve_threads(global)); });
}

}  // namespace escpod::cli
