// libFuzzer target for the strict pickle reader of WarpDemuX's joblib model files
// (src/demux/pickle.hpp). Checks, beyond "no crash, no sanitizer report, no hang": a stream it
// accepts yields a tree whose every value can be walked (arrays hold shape-many elements), and a
// refusal is always kCorrupt with a message that names the stream and a byte offset.
// Corpus: the shipped model files (.ci/run seeds it from shared/data/warpdemux/joblib).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_set>

#include "demux/pickle.hpp"

namespace {

using escpod::demux::detail::PickleValue;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Touches every value reachable from `v` once (memo references can share subtrees and make
// containers hold themselves).
size_t walk(const PickleValue* v, std::unordered_set<const PickleValue*>& seen) {
  if (v == nullptr || !seen.insert(v).second) return 0;
  size_t n = 1 + v->type_name().size();
  if (v->type == PickleValue::Type::kArray) {
    size_t count = 1;
    for (size_t d : v->shape) count *= d;
    check(count == v->size());
    for (size_t i = 0; i < v->size(); ++i) n += v->element_double(i) == v->element_double(i) ? 1 : 0;
  }
  for (const PickleValue* item : v->items) n += walk(item, seen);
  for (const auto& [k, x] : v->fields) n += walk(k, seen) + walk(x, seen);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = escpod::demux::detail::read_joblib_pickle(std::span<const uint8_t>(data, size), "fuzz.joblib");
  if (!r.is_ok()) {
    const std::string& m = r.status().message();
    check(r.status().code() == escpod::StatusCode::kCorrupt);
    check(m.rfind("fuzz.joblib: ", 0) == 0 && m.find("byte offset") != std::string::npos);
    return 0;
  }
  check(r->root != nullptr);
  std::unordered_set<const PickleValue*> seen;
  volatile size_t sink = walk(r->root, seen);
  (void)sink;
  return 0;
}
