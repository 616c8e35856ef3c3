#include "escpod/pod5/records.hpp"

namespace escpod::pod5 {

int end_reason_index(std::string_view name) {
  for (size_t i = 0; i < kEndReasonNames.size(); ++i)
    if (kEndReasonNames[i] == name) return static_cast<int>(i);
  return -1;
}

bool end_reason_forced_default(std::string_view name) {
  return !(name == "unknown" || name == "signal_positive" || name == "signal_negative");
}

}  // namespace escpod::pod5
