// The report's files, shared by `escpod report` and `escpod demux --report`.
#pragma once

#include <filesystem>
#include <string>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/tables/report.hpp"

namespace escpod::cli {

// Where a report goes: FILE.html, FILE.json and FILE_<section>_mqc.json (FILE: the HTML path
// without its .html extension).
struct ReportPaths {
  std::filesystem::path html, json, mqc_prefix;
};
ReportPaths report_paths(const std::string& html);

// Collects the report's numbers and writes its files, each staged and renamed into place.
Status write_run_report(const ReportPaths& paths, const pipeline::ReportOptions& options, bool overwrite,
                        FsyncMode fsync);

}  // namespace escpod::cli
