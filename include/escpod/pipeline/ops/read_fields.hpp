// Read fields by name and their text form: the columns of `escpod view`, `inspect read`, and
// the grouping keys of `subset --columns`.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
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

// Writes one line per read of `files` (in order; only ids in `wanted` when it is not null) with
// `fields` joined by `separator`, handing text to `write` batch by batch. Batches are formatted
// on up to n_threads threads and handed over in input order, so the text is identical for any
// thread count; a few batches are in flight at most. `write` returns false when its consumer has
// gone away (a closed pipe): the table then ends quietly. Errors: unreadable files or batches.
// `sidecar_columns` are annotation columns of the files' .p5s sidecars, printed after `fields`
// (an empty cell where a file has no sidecar, its sidecar no such column, or the read no value);
// a damaged or foreign sidecar is an error.
Status write_read_table(const std::vector<std::filesystem::path>& files,
                        const std::vector<const ReadField*>& fields, const std::string& separator,
                        const std::unordered_set<pod5::ReadId, pod5::ReadIdHash>* wanted,
                        int n_threads, const std::function<bool(std::string_view)>& write,
                        const std::vector<std::string>& sidecar_columns = {});

}  // namespace escpod::pipeline
