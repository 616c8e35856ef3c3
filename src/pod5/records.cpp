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

uint64_t signal_hash(std::span<const int16_t> samples) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t hash = 0, power = 1;
  for (int16_t x : samples) {
    hash += (static_cast<uint64_t>(static_cast<uint16_t>(x)) + 1) * power;
    power *= kPrime;
  }
  return hash;
}

}  // namespace escpod::pod5
