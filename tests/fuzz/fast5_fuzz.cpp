// libFuzzer target for the FAST5 reader (convert fast5). The first input byte picks what the
// rest feeds:
//   0: decode_signal of a VBZ-filter chunk (the HDF5 VBZ plugin's filter, called by us outside
//      HDF5) for a sample count taken from the next 2 bytes; 1: the same for a deflate chunk;
//   2: parse_iso8601_ms (run-info start times);
//   3 (only with ESCPOD_FUZZ_HDF5=1 in the environment): a whole FAST5 file: Fast5File::open
//      and read() of every read, then decode_signal.
// Mode 3 is off by default because it finds bugs in libhdf5 itself within seconds (Debian's
// 1.10.8: a heap overflow in H5Aget_type -> H5T_copy_reopen from a one-byte change to the test
// FAST5's datatype message), which we cannot fix or guard against from outside; run it by hand
// to look for crashes whose stacks are in our code. Damaged whole files are covered by the
// conformance tests (truncations, missing attributes/datasets, damaged chunks).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "escpod/fast5/fast5_file.hpp"

using namespace escpod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  static const bool whole_files = std::getenv("ESCPOD_FUZZ_HDF5") != nullptr;
  const uint8_t mode = static_cast<uint8_t>(data[0] % (whole_files ? 4 : 3));
  const size_t n_samples = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
  std::vector<int16_t> out;
  if (mode <= 1) {
    fast5::StoredSignal s;
    s.coding = mode == 0 ? fast5::SignalCoding::kVbz : fast5::SignalCoding::kDeflate;
    s.n_samples = n_samples;
    s.decoded_bytes = 2 * n_samples;
    s.filter_params = {0, 2, 1, 1};
    s.bytes.assign(data + 3, data + size);
    (void)fast5::decode_signal(s, out, "fuzz");
    return 0;
  }
  if (mode == 2) {
    (void)fast5::parse_iso8601_ms(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
  }
  static const std::string path = "/dev/shm/escpod_fast5_fuzz_" + std::to_string(getpid()) + ".fast5";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data + 1, 1, size - 1, f);
    std::fclose(f);
  } else {
    return 0;
  }
  auto file = fast5::Fast5File::open(path);
  if (file.is_ok()) {
    fast5::Fast5Read read;
    for (size_t i = 0; i < file.value()->n_reads() && i < 64; ++i) {
      if (!file.value()->read(i, read).is_ok()) break;
      (void)fast5::decode_signal(read.signal, out, "fuzz");
    }
  }
  return 0;
}
