#include "cli/front.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "cli/command.hpp"

namespace escpod::cli {

int exec_full(char** argv, bool quiet_if_missing) {
  std::string path;
  if (const char* env = std::getenv("ESCPOD_FULL"); env && *env) {
    path = env;
  } else {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    path = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "escpod-full";
  }
  ::execv(path.c_str(), argv);
  if (quiet_if_missing) return kExitFailure;
  std::fprintf(stderr,
               "escpod: cannot run %s (%s): every command but the POD5 ones runs there; keep it "
               "beside escpod or name it in ESCPOD_FULL\n",
               path.c_str(), std::strerror(errno));
  return kExitFailure;
}

}  // namespace escpod::cli
