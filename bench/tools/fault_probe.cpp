// What random access to a mapped file costs against pread, on this machine: N touches of one
// byte at random pages of a mapping (each a page fault that maps the pages around it too), the
// munmap of what they mapped, and N 64-byte preads at random pages. Run it on a file already in
// the page cache (run it twice; the first run includes reading the file):
//   build/bench/tools/fault_probe bench/data/reads200k_3.pod5 2000
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE N\n", argv[0]);
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY);
  const off_t size = fd < 0 ? -1 : ::lseek(fd, 0, SEEK_END);
  const long n = std::atol(argv[2]);
  if (size < 4096 || n <= 0) {
    std::fprintf(stderr, "%s: cannot read it, or shorter than a page\n", argv[1]);
    return 1;
  }
  const auto pages = static_cast<uint64_t>(size / 4096);
  std::mt19937_64 rng(1);
  unsigned sum = 0;

  auto t0 = std::chrono::steady_clock::now();
  const auto* map = static_cast<const unsigned char*>(::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0));
  if (map == MAP_FAILED) return 1;
  for (long i = 0; i < n; ++i) sum += map[(rng() % pages) * 4096];
  const double touch_us = us_since(t0);
  t0 = std::chrono::steady_clock::now();
  ::munmap(const_cast<unsigned char*>(map), static_cast<size_t>(size));
  const double unmap_us = us_since(t0);

  std::vector<unsigned char> buf(64);
  t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    if (::pread(fd, buf.data(), buf.size(), static_cast<off_t>((rng() % pages) * 4096)) > 0) sum += buf[0];
  }
  const double pread_us = us_since(t0);
  std::printf("touch %.2f us each, munmap %.2f us per touch, 64-byte pread %.2f us each (checksum %u)\n",
              touch_us / static_cast<double>(n), unmap_us / static_cast<double>(n),
              pread_us / static_cast<double>(n), sum);
  ::close(fd);
  return 0;
}
