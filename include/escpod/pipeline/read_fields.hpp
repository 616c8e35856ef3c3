// Read fields by name and their text form: the columns of `escpod view`, `inspect read`, and
// the grouping keys of `subset --columns`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "escpod/pod5/file_reader.hpp"

namespace escpod::pipeline {

struct ReadField {
  std::string_view name;
  std::string_view help;
  // Appends the field of row i to out; fails only for fields that decode signal.
  Status (*append)(const pod5::FileReader& file, const pod5::ReadBatch& batch, size_t i, std::string& out);
};

const std::vector<ReadField>& all_read_fields();
// The fields `view` prints without --include.
const std::vector<std::string_view>& default_view_fields();
const ReadField* find_read_field(std::string_view name);

}  // namespace escpod::pipeline
