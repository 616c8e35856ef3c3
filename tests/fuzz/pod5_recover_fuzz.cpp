// libFuzzer target for the recovery scanner: arbitrary bytes as a damaged POD5 and a killed
// writer's two side files, scanned (open_damaged) and read through the way `escpod recover`
// does (every salvaged reads row checked for complete signal). Must never crash, hang or read
// out of bounds; errors are fine. Input layout: two little-endian uint32 lengths (reads side
// file, run-info side file), then the main file, then the two side files (lengths clamped).
// Seed it with cut real files: -max_len=2000000 shared/data/pod5/*.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "escpod/pod5/recover.hpp"

using namespace escpod;

namespace {

// An in-memory file reachable by path; reused across runs.
std::string fill(int fd, const uint8_t* data, size_t size) {
  if (fd < 0 || ftruncate(fd, 0) != 0) return {};
  size_t written = 0;
  while (written < size) {
    ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) return {};
    written += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int main_fd = memfd_create("recover-main", 0);
  static const int reads_fd = memfd_create("recover-reads", 0);
  static const int run_fd = memfd_create("recover-run", 0);
  uint32_t n_reads = 0, n_run = 0;
  if (size >= 8) {
    std::memcpy(&n_reads, data, 4);
    std::memcpy(&n_run, data + 4, 4);
    data += 8;
    size -= 8;
  }
  const size_t reads_len = std::min<size_t>(n_reads, size);
  const size_t run_len = std::min<size_t>(n_run, size - reads_len);
  const size_t main_len = size - reads_len - run_len;
  const std::string main_path = fill(main_fd, data, main_len);
  const std::string reads_path = fill(reads_fd, data + main_len, reads_len);
  const std::string run_path = fill(run_fd, data + main_len + reads_len, run_len);
  if (main_path.empty() || reads_path.empty() || run_path.empty()) return 0;
  auto damaged = pod5::open_damaged(main_path, reads_len ? reads_path : "", run_len ? run_path : "");
  if (!damaged.is_ok()) return 0;
  const pod5::FileReader& file = *damaged->reader;
  pod5::VbzCodec codec;
  std::vector<int16_t> samples;
  for (size_t b = 0; b < file.n_read_batches(); ++b) {
    auto batch = file.read_batch(b);
    if (!batch.is_ok()) continue;
    for (size_t i = 0; i < batch->size(); ++i) {
      (void)file.record(*batch, i);
      (void)pod5::check_read_signal(file, *batch, i, codec, samples);
    }
  }
  return 0;
}
