// Where the tests' inputs and scratch space live, fixed when the build is configured.
// The paths are compiled into one generated file (test_paths.cpp.in), not passed to every test
// as -D definitions: objects that embed a checkout's absolute paths would never be shared by
// ccache between two checkouts (CI's fresh clone and the one that filled the cache).
#pragma once

namespace escpod::test {
const char* shared_data_dir();  // CMake variable ESCPOD_SHARED_DATA
const char* test_tmp_dir();     // <build folder>/test-tmp
const char* source_dir();       // the checkout's root
}  // namespace escpod::test
