// libFuzzer target for the POD5 file opener: arbitrary bytes as a file, opened and read through
// (every reads batch, every read's signal up to a cap). Must never crash, hang or read out of
// bounds; errors are fine. Seed it with the real files: -max_len=2000000 shared/data/pod5/*.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "escpod/pod5/file_reader.hpp"

using namespace escpod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An in-memory file, opened by path like any other.
  static const int fd = memfd_create("pod5-fuzz", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0) return 0;
  size_t written = 0;
  while (written < size) {
    ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) return 0;
    written += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = pod5::FileReader::open(path);
  if (!file.is_ok()) return 0;
  pod5::VbzCodec codec;
  std::vector<int16_t> samples;
  for (size_t b = 0; b < (*file)->n_read_batches(); ++b) {
    auto batch = (*file)->read_batch(b);
    if (!batch.is_ok()) continue;
    for (size_t i = 0; i < batch->size(); ++i) {
      (void)(*file)->record(*batch, i);
      auto stored = (*file)->count_samples(batch->rows_of(i));
      if (!stored.is_ok() || *stored > (1u << 22)) continue;
      samples.resize(*stored);
      (void)(*file)->read_signal(batch->rows_of(i), samples, codec);
    }
  }
  return 0;
}
