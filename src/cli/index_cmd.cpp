// escpod index: build or update the read-id index of folders of POD5 files.
#include <set>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"
#include "escpod/pod5/read_index.hpp"

namespace escpod::cli {
namespace {

struct IndexCliOptions {
  std::vector<std::string> inputs;
  bool rebuild = false;
  size_t memory_mib = 256;
};

Status run_index(const IndexCliOptions& opts, const GlobalOptions& global) {
  // A folder is indexed as itself; a file's folder is indexed (the index covers whole folders).
  std::vector<std::filesystem::path> roots;
  std::set<std::filesystem::path> seen;
  for (const auto& in : opts.inputs) {
    std::error_code ec;
    const std::filesystem::path p(in);
    if (!std::filesystem::exists(p, ec)) return Status::not_found(in + ": no such file or folder");
    auto root = std::filesystem::is_directory(p, ec) ? p : std::filesystem::absolute(p).parent_path();
    root = std::filesystem::weakly_canonical(root, ec);
    if (seen.insert(root).second) roots.push_back(root);
  }
  pod5::IndexBuildOptions bo;
  bo.rebuild = opts.rebuild;
  bo.memory_bytes = opts.memory_mib << 20;
  bo.n_threads = resolve_threads(global);
  for (const auto& root : roots) {
    pod5::IndexBuildReport rep;
    ESCPOD_RETURN_IF_ERROR(pod5::build_read_index(root, bo, &rep));
    log::info("{}: {} files, {} reads indexed ({} files scanned, {} reads added, {} unchanged, {} "
              "dropped; {} segment{}{})",
              (root / pod5::kReadIndexDirName).string(), rep.n_files, rep.n_reads, rep.n_files_scanned,
              rep.n_reads_added, rep.n_files_unchanged, rep.n_files_removed, rep.n_segments,
              rep.n_segments == 1 ? "" : "s", rep.compacted ? ", compacted" : "");
  }
  return Status::ok();
}

}  // namespace

void register_index(CLI::App& app, GlobalOptions& global) {
  auto opts = std::make_shared<IndexCliOptions>();
  auto* sub = app.add_subcommand(
      "index",
      "Build or update the read-id index of a folder of POD5 files (every *.pod5 below it),\n"
      "stored in DIR/.escpod-index. Only new and changed files are read; `filter --ids` and\n"
      "`inspect read` then open only the files and rows holding the wanted reads. A FILE\n"
      "argument indexes its folder.\n"
      "  escpod index runs/\n"
      "  escpod filter runs/ --ids wanted.txt -o wanted.pod5   # uses runs/.escpod-index\n"
      "  escpod inspect read runs/ 0000173c-bf67-44e7-9a9c-1ad0bc728e74");
  sub->add_option("inputs", opts->inputs, "Folders (or files, whose folder is indexed)")->required();
  sub->add_flag("--rebuild", opts->rebuild, "Ignore the existing index and read every file again");
  auto* memory = sub->add_option("--memory-mib", opts->memory_mib,
                                 "MiB of index records held while building before sorted runs spill to disk")
                     ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  add_deprecated_alias(sub, "--memory", memory, opts->memory_mib);
  add_common_flags(sub, global);
  set_body(sub, [opts, &global] { return run_index(*opts, global); });
}

}  // namespace escpod::cli
