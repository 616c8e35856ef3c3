// `escpod --version` (escpod-full): version, CPU, and the kernels chosen on it.
#pragma once

#include <string>

namespace escpod::cli {
std::string version_report(const std::string& version);
}  // namespace escpod::cli
