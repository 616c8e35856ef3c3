// Replaces the global operator new/delete with counting versions over malloc/free, kept in its own
// file so the compiler never sees a new/free pair inline.
// The replacement operators below pair malloc with free by design; GCC 12 with ASan at -O2
// cannot see that and warns about a mismatch.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_news{0};
}

long escpod_test_new_count() { return g_news.load(std::memory_order_relaxed); }

void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
