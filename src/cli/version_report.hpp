// `escpod --version`: version, CPU, the kernels chosen on it and the libraries loaded.
#pragma once

#include <string>

namespace escpod::cli {
std::string version_report(const std::string& version);
}  // namespace escpod::cli
