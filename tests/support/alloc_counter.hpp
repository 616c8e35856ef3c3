// Counts global operator new calls in this test binary, so tests can assert that a per-read path
// allocates nothing after warm-up (docs/architecture.md §3.2).
#pragma once

#include <cstddef>

namespace escpod::test {
size_t allocation_count();
}
