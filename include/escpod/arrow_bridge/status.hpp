// arrow::Status to escpod::Status, for the code that talks to Arrow C++ (pod5's tables, the
// pipeline's Parquet fingerprint tables). Not a layer: its include root comes with the
// escpod::arrow target (cmake/EscpodDependencies.cmake), so only targets that link Arrow see it,
// and Arrow types stay out of every layer's public headers.
#pragma once

#include <arrow/status.h>

#include <string>

#include "escpod/core/status.hpp"

namespace escpod::arrow_bridge {

// OK stays OK. Otherwise the message is prefixed with `context` (a file, a table); I/O errors
// stay I/O errors, "not implemented" becomes unsupported, and everything else means the data
// was not what it claimed to be (corrupt).
inline Status from_arrow(const arrow::Status& s, const std::string& context) {
  if (s.ok()) return Status::ok();
  if (s.IsIOError()) return Status::io_error(context + ": " + s.message());
  if (s.IsNotImplemented()) return Status::unsupported(context + ": " + s.message());
  return Status::corrupt(context + ": " + s.message());
}

}  // namespace escpod::arrow_bridge
