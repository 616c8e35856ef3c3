#include "escpod/pod5/library_versions.hpp"

#include <arrow/config.h>
#include <fmt/format.h>
#include <oneapi/tbb/version.h>
#include <zlib.h>
#include <zstd.h>

namespace escpod::pod5 {

std::string library_versions() {
  return fmt::format("Arrow {}, zstd {}, zlib {}, oneTBB {}", arrow::GetBuildInfo().version_string,
                     ZSTD_versionString(), zlibVersion(), TBB_runtime_version());
}

}  // namespace escpod::pod5
