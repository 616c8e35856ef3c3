// Stand-alone `escpod model ...` for benchmarking the nn engine before (or without) the full CLI:
// the same register_model() and plumbing as src/cli/main.cpp, nothing else registered.
#include <cstdio>

#include "cli/command.hpp"
#include "escpod/core/log.hpp"

namespace escpod::cli {
CommandBody* selected_body();
}

int main(int argc, char** argv) {
  using namespace escpod;
  CLI::App app{"escpod-nn: the nn engine's model commands"};
  app.require_subcommand(1);
  cli::GlobalOptions global;
  cli::register_model(app, global);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  cli::CommandBody* body = cli::selected_body();
  if (body == nullptr) return 2;
  Status status = (*body)();
  if (status.is_ok()) return 0;
  log::error("{}", status.message());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}
