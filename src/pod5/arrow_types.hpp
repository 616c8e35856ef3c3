// Arrow schemas of the POD5 tables and the two extension types (minknow.uuid, minknow.vbz).
// Internal: Arrow stays out of the layers' public headers (include/escpod/<layer>).
#pragma once

#include <arrow/api.h>

#include <memory>
#include <string>

#include "escpod/arrow_bridge/status.hpp"
#include "escpod/core/status.hpp"

namespace escpod::pod5::detail {

// minknow.uuid: FixedSizeBinary(16); minknow.vbz: LargeBinary. Both with empty metadata.
std::shared_ptr<arrow::DataType> uuid_type();
std::shared_ptr<arrow::DataType> vbz_type();
// Registers both with Arrow (once per process) so IPC reading yields extension arrays. First makes
// Arrow's shared types (singletons, fingerprints) behind a static of ours, so that TSan sees them
// ordered before use on other threads (arrow_types.cpp); every entry point that opens or creates
// Arrow data calls this first. Thread-safe.
void register_extension_types();

// The storage array behind an extension array (or the array itself).
std::shared_ptr<arrow::Array> storage_of(const std::shared_ptr<arrow::Array>& array);
// Extension name of a field: from its type if registered, else from its field metadata.
std::string extension_name(const arrow::Field& field);

// Schemas we write (the newest official layout, V7 reads table), with MINKNOW:* metadata.
std::shared_ptr<arrow::Schema> signal_schema(bool vbz, const std::string& file_identifier,
                                             const std::string& software,
                                             const std::string& pod5_version);
std::shared_ptr<arrow::Schema> reads_schema(const std::string& file_identifier,
                                            const std::string& software,
                                            const std::string& pod5_version);
std::shared_ptr<arrow::Schema> run_info_schema(const std::string& file_identifier,
                                               const std::string& software,
                                               const std::string& pod5_version);

// Converts an arrow::Status into ours, with context (shared with the pipeline's Parquet code).
using arrow_bridge::from_arrow;

}  // namespace escpod::pod5::detail
