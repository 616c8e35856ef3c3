#pragma once
// The versions of the libraries the POD5 layer runs on, as loaded at run time (escpod --version).
#include <string>

namespace escpod::pod5 {

// "Arrow 22.0.0, zstd 1.5.4, zlib 1.2.13, oneTBB 2021.8.0": each library's own report of its
// version, so a wheel's bundled copy or a system's shared library says which it is.
std::string library_versions();

}  // namespace escpod::pod5
