// Random access to reads by id across many POD5 files, through the read-id index
// (pod5/read_index.hpp) where one covers an input, else by scanning that input's read ids.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline {

// Where the reads with given ids are in `inputs`: the readers of the inputs that may hold them
// and the reads-table slices that do, in input order (file, batch, row).
struct IdLookupPlan {
  std::vector<std::unique_ptr<pod5::FileReader>> readers;  // the inputs opened, in input order
  std::vector<size_t> input_of;  // per reader: its index in `inputs`
  std::vector<ReadSlice> slices; // ReadSlice::file is an index into `readers`
  std::vector<bool> indexed;     // per reader: located through a fresh index (else scanned in full)
  size_t n_indexed = 0;          // inputs located through the index (opened or not)
  size_t n_not_opened = 0;       // of those, inputs the index places none of the ids in
};

// Plans pulling `ids` out of `inputs`. With use_index, an input below a folder holding a read-id
// index (ReadIndex::find_root) whose entry is fresh (size, mtime and footer file identifier
// match) is located through the index: it is not opened at all when the index places none of
// the ids in it, else opened with the batch layout the index stores (no reads batch but the last
// and no signal metadata read; batches validated when decoded) and contributes only the rows the
// index names (one slice per run of consecutive rows). Every other input is opened as usual and
// contributes all its batches. A stale or damaged index is never answered from: its inputs are
// scanned, with a log line. Without use_index: every batch of every input.
Result<IdLookupPlan> plan_id_lookup(const std::vector<std::filesystem::path>& inputs,
                                    const std::vector<pod5::ReadId>& ids, bool use_index,
                                    int n_threads);

// One read found by find_reads: its file and a one-row batch holding it.
struct FoundRead {
  std::shared_ptr<const pod5::FileReader> file;
  pod5::ReadBatch batch;  // batch.size() == 1
};

// The library's lookup by id: for each of `ids` (in the order given), the first read with that
// id in input order, or nothing when no input holds it (`missing` lists those, if given). Uses
// the read-id index as plan_id_lookup does; without one, scans only the id columns of each
// input and decodes just the rows found.
Result<std::vector<FoundRead>> find_reads(const std::vector<std::filesystem::path>& inputs,
                                          const std::vector<pod5::ReadId>& ids, bool use_index,
                                          std::vector<pod5::ReadId>* missing = nullptr);

}  // namespace escpod::pipeline
