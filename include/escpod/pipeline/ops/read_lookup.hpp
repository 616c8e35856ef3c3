// Random access to reads by id across many POD5 files, through the read-id index
// (pod5/read_index.hpp) where one covers an input, else by scanning that input's read ids.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <unordered_map>
#include <span>
#include <vector>

#include "escpod/core/executor.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pipeline/ops/read_signals.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/read_id.hpp"
#include "escpod/pod5/read_id_map.hpp"
#include "escpod/pod5/read_index.hpp"

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

// The read-id index stored under `root` (ReadIndex::find_root), or nullptr: no root, or an index
// that cannot be opened (logged as a warning, and not used).
std::unique_ptr<pod5::ReadIndex> open_usable_index(const std::filesystem::path& root);

// Opens `path` for random access: each reads batch validated when first decoded, signal batches
// loaded on first use, rows read straight from the file (FileReader::read_batch_rows). Takes the
// batch layout a verified entry of `index` (the index of the folder holding the file, or nullptr)
// stores for it, so that opening reads no batch metadata; a layout that does not describe the
// file is dropped and the file opened without it (its own errors are then the file's).
Result<std::unique_ptr<pod5::FileReader>> open_for_random_access(const std::filesystem::path& path,
                                                                 const pod5::ReadIndex* index);

// Where one read lies in a set of files.
struct ReadLocation {
  uint32_t file = 0;
  uint32_t batch = 0;
  uint32_t row = 0;
};

// Where read ids are in a set of files already open, built once for many lookups (the Python
// package's DatasetReader and Reader). With use_index, a file under a folder holding a read-id
// index (`escpod index`, pod5/read_index.hpp) whose entry is verified (size, mtime, and the open
// file's identifier) is looked up there; every other file's read-id column is scanned (ids only, batches
// in parallel) into a hash map. A damaged index is not used (its files are scanned, with a log
// line). No other column is decoded to build it: batches are decoded when signals are asked
// for. Lookups keep caches: one thread at a time.
class ReadLocator {
 public:
  // `files` in lookup order: the first file holding an id wins.
  static Result<std::unique_ptr<ReadLocator>> build(std::vector<std::shared_ptr<const pod5::FileReader>> files,
                                                    bool use_index, Executor& executor);
  ReadLocator(const ReadLocator&) = delete;
  ReadLocator& operator=(const ReadLocator&) = delete;

  const std::vector<std::shared_ptr<const pod5::FileReader>>& files() const { return m_files; }
  size_t n_reads() const;
  // Ids held more than once: exact over the scanned files; in files an index covers, only those
  // lookups found so far (complete() says whether every file was scanned).
  size_t n_duplicates() const { return m_n_duplicates + m_n_duplicates_seen; }
  bool complete() const { return m_n_indexed == 0; }
  size_t n_indexed_files() const { return m_n_indexed; }

  // The first place holding `id` in file order, or nullopt. A row an index names is checked
  // against the id it holds: an index that does not describe its file is kCorrupt, naming it,
  // rather than an answer with another read.
  Result<std::optional<ReadLocation>> locate(const pod5::ReadId& id);
  // locate() for many ids, the index look-ups in parallel on `executor`.
  Result<std::vector<std::optional<ReadLocation>>> locate_all(std::span<const pod5::ReadId> ids,
                                                              Executor& executor);
  // The reads ids[i] at where[i] (as locate_all found them), as a list to decode: each row read
  // alone, in parallel, where its file reads rows straight from the file and its batch is not
  // decoded already, else taken from its batch (decoded once and kept).
  Result<ReadSignalList> signals_at(std::span<const pod5::ReadId> ids, std::span<const ReadLocation> where,
                                    Executor& executor);

 private:
  struct Persistent {
    std::unique_ptr<pod5::ReadIndex> index;
    std::unordered_map<uint32_t, uint32_t> file_of_slot;
  };
  struct Found;

  explicit ReadLocator(std::vector<std::shared_ptr<const pod5::FileReader>> files);
  void open_read_indexes();
  Status scan_ids(Executor& executor);
  std::pair<uint32_t, uint32_t> file_batch(size_t global_batch) const;
  Status find_places(const pod5::ReadId& id, std::vector<pod5::IndexHit>& hits, bool check_rows, Found* out);
  void count_places(const Found& found);
  bool has_row(const ReadLocation& loc) const;
  Status check_indexed_row(const ReadLocation& loc, const pod5::ReadId& id);
  Result<std::vector<pod5::ReadBatch>> read_rows_alone(std::span<const ReadLocation> where, Executor& executor);
  Result<const pod5::ReadBatch*> batch(uint32_t file, uint32_t batch_idx);

  std::vector<std::shared_ptr<const pod5::FileReader>> m_files;
  std::vector<size_t> m_first_batch;                        // per file + 1: global batch numbers
  std::vector<std::unique_ptr<const pod5::ReadBatch>> m_batches;  // decoded on demand
  std::vector<std::vector<pod5::ReadId>> m_batch_ids;       // per global batch (scanned or checked)
  std::vector<bool> m_indexed;                              // per file: an index covers it
  size_t m_n_indexed = 0;
  std::vector<Persistent> m_persistent;
  std::vector<pod5::IndexHit> m_hits;                       // locate() scratch
  pod5::ReadIdMap<ReadLocation> m_map;                      // the scanned files' ids
  size_t m_n_duplicates = 0;       // in the scanned files
  size_t m_n_duplicates_seen = 0;  // ids found in more than one place by lookups using an index
};

}  // namespace escpod::pipeline
