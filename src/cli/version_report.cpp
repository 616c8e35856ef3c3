// `escpod --version`: the version, the CPU, the kernels each path chose on it and the versions
// of the libraries loaded (a user and a bug report can tell which build, wheel or system library
// ran), as one block of text.
#include "cli/version_report.hpp"

#include <cpuid.h>
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "escpod/pipeline/ops/bam_filter.hpp"
#include "escpod/pod5/library_versions.hpp"
#include "escpod/pod5/vbz.hpp"
#ifdef ESCPOD_HAVE_DEMUX
#include "escpod/demux/dtw.hpp"
#include "escpod/demux/train_svm.hpp"
#endif
#ifdef ESCPOD_HAVE_FAST5
#include "escpod/fast5/fast5_file.hpp"
#endif
#ifdef ESCPOD_HAVE_NN
#include "escpod/nn/model.hpp"
#endif

namespace escpod::cli {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

// The vector extensions the kernels choose between, from CPUID (leaf 7).
std::string cpu_features() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  std::string out;
  auto add = [&](bool on, const char* name) {
    out += (out.empty() ? "" : " ");
    out += name;
    out += on ? "+" : "-";
  };
  add(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "AVX2/FMA");
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    add(b & (1u << 16), "AVX-512F");
    add(c & (1u << 11), "AVX512-VNNI");
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    add(__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5)), "AVX512-BF16");
    add((d & (1u << 24)) && (d & (1u << 22)), "AMX-BF16");
  }
  return out;
}

}  // namespace

std::string version_report(const std::string& version) {
  std::string s = "escpod " + version + "\n";
  s += "cpu: " + cpu_model() + " (" + cpu_features() + ")\n";
#ifdef ESCPOD_HAVE_NN
  s += nn::kernel_report();
#endif
#ifdef ESCPOD_HAVE_DEMUX
  s += fmt::format("demux: DTW float32 on {} (ESCPOD_DTW_ISA caps it)\n",
                   demux::dtw_isa_name(demux::dtw_best_isa()));
#endif
  s += fmt::format("pod5: VBZ svb16 decoder {}\n", pod5::detail::svb16_decoder_name());
  s += "libraries: " + pod5::library_versions();
#ifdef ESCPOD_HAVE_FAST5
  s += ", " + fast5::hdf5_version();
#endif
  s += fmt::format(", htslib {}", pipeline::htslib_version());
#ifdef ESCPOD_HAVE_DEMUX
  s += fmt::format(", libsvm {}", demux::libsvm_runtime_version());
#endif
  return s;  // CLI11 ends the line
}

}  // namespace escpod::cli
