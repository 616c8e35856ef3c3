// Small text helpers shared by the layers' user-facing messages.
#pragma once

#include <cstddef>
#include <string_view>

namespace escpod {

// Levenshtein distance (insertions, deletions and substitutions of one byte each): how close a
// mistyped name is to a known one, for "did you mean" hints (unknown commands, config keys).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace escpod
