// Turning command-line inputs into a list of POD5 files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"

namespace escpod::pod5 {

// Expands `inputs` in the order given: a file is taken as it is (whatever its extension), a
// directory is walked recursively for `*.pod5` (sorted by path). Duplicates (same canonical
// path) are dropped, keeping the first. kNotFound names a missing input; an input set that
// yields no file is kInvalidArgument.
Result<std::vector<std::filesystem::path>> collect_pod5_inputs(const std::vector<std::string>& inputs);
// The same walk for files whose extension is `extension` (e.g. ".fast5"); `kind` names them in the
// error for an input set that yields none. Our staging files (.escpod-tmp-*) are never listed.
Result<std::vector<std::filesystem::path>> collect_inputs(const std::vector<std::string>& inputs,
                                                          std::string_view extension, std::string_view kind);

// The sizes of `paths` (0 where unknown), their sum added to *total (progress in bytes).
std::vector<uint64_t> file_sizes(const std::vector<std::filesystem::path>& paths, uint64_t* total);

}  // namespace escpod::pod5

#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

// Reads a list of read ids, one per line (dashes optional, any case; blank lines and text after
// '#' ignored; a CSV/TSV line uses its first field, and a header line `read_id` is skipped).
// "-" or "stdin" reads standard input. Errors name the file and line.
Result<std::vector<ReadId>> read_id_list(const std::string& path);

}  // namespace escpod::pod5
