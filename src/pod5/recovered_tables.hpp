// What recovery salvaged from a damaged POD5 file, as Arrow objects: the input of
// FileReader::open_recovered. Internal to the pod5 layer (Arrow stays out of include/).
#pragma once

#include <arrow/api.h>
#include <arrow/io/file.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace escpod::pod5::detail {

struct RecoveredTables {
  std::filesystem::path path;  // the damaged file (named in errors)
  uint64_t file_size = 0;
  // Its mapping; signal batches point into it (their pages are released through it).
  std::shared_ptr<arrow::io::MemoryMappedFile> main;
  std::string file_identifier, software, pod5_version;  // from the tables' schema metadata
  // A null schema: the table was not found. Batches are complete, validated, in file order.
  std::shared_ptr<arrow::Schema> signal_schema, reads_schema, run_info_schema;
  std::vector<std::shared_ptr<arrow::RecordBatch>> signal, reads, run_info;
};

}  // namespace escpod::pod5::detail
