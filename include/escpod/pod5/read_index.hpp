// A persistent read-id index over a folder of POD5 files: read id -> (file, reads batch, row),
// so that pulling a few reads out of thousands of files opens only the files and decodes only
// the rows that hold them.
//
// Layout, in `ROOT/.escpod-index/` (ROOT: the folder indexed; every *.pod5 below it, recursively):
//   manifest        text, one record a line (paths last, relative to ROOT, may hold spaces):
//                     escpod-read-index 2
//                     next_slot N
//                     segment NAME N_RECORDS
//                     file SLOT SIZE MTIME_NS FILE_IDENTIFIER N_READS N_BATCHES SEGMENT LAYOUT PATH
//                     end CRC32   (of every byte before this line; a damaged manifest is refused)
//                   LAYOUT: the file's batch row counts (BatchLayout), run-length coded: the reads
//                   table's, '/', the signal table's, each "COUNTxROWS" runs joined by ',' or
//                   "-" when empty (e.g. "20x1000/1999x100,1x37"); lookups open a file with it
//                   instead of reading every reads batch and signal batch header. Version 1
//                   manifests (no LAYOUT) are still read: their files open the slower way until
//                   the next `escpod index`, which reads them again.
//   seg-NNNNNN.idx  binary, little-endian, one sorted run of records:
//                     0  "ESCPIDX\0"   8  u32 version (1)   12 u32 record size (28)
//                     16 u64 n_records  24 u32 bucket_bits  28 u32 CRC32 of bytes 0..27
//                     32 u64 bucket_first[2^bits + 1]   (record index where each bucket starts)
//                        u32 bucket_crc[2^bits]         (CRC32 of each bucket's records)
//                        records: 16-byte read id, u32 file slot, u32 reads batch, u32 row;
//                        sorted by id bytes (then slot, batch, row). Bucket b holds the ids
//                        whose first `bits` bits equal b.
//   lock            flock()ed while an update runs (a second `escpod index` is refused).
// A file is known by a slot number, never reused: a changed or removed file's slot is dropped
// from the manifest, and records of slots the manifest does not list are ignored. Each update
// scans only new and changed files into one new segment; once there are more than 8 segments,
// or dead records outnumber live ones, all segments are merged into one (streaming k-way merge).
//
// Cost: 28 bytes a read on disk (+12 bytes a bucket of ~128 reads). A lookup maps the index,
// binary-searches one bucket per segment and checks that bucket's CRC, touching a few pages;
// opening reads only the manifest and segment headers. Building holds at most
// IndexBuildOptions::memory_bytes of records in memory (sorted runs spill to disk beside the
// index and are merged with a 1 MiB buffer each).
//
// Staleness: each file's size, modification time (ns) and footer file identifier are recorded.
// fresh_entry() trusts a file only when size and mtime still match; callers then check the file
// identifier after opening it. Anything that does not match is not used (callers scan such files
// in full), and a damaged manifest or segment is reported as kCorrupt, never answered from.
// Writes are staged and renamed into place (segments first, then the manifest), so a crash
// leaves the previous index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

inline constexpr const char* kReadIndexDirName = ".escpod-index";

struct IndexedFile {
  uint32_t slot = 0;
  std::string path;  // relative to the index root, generic format
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string file_identifier;
  uint64_t n_reads = 0;
  uint64_t n_batches = 0;
  std::string segment;
  std::string layout;  // the batch layout as stored (see above); empty from a version-1 manifest
};

// The manifest coding of a batch layout, and back. decode_batch_layout checks the layout against
// its entry (as many reads batches and reads as the entry says) and fails with kCorrupt naming
// the file when it does not match or cannot be read, or kNotFound when the entry has none.
std::string encode_batch_layout(const BatchLayout& layout);
Result<BatchLayout> decode_batch_layout(const IndexedFile& entry);

struct IndexBuildOptions {
  size_t memory_bytes = size_t{256} << 20;  // records held before a sorted run spills (>= 64 records)
  int n_threads = 1;                        // files scanned in parallel
  bool rebuild = false;                     // ignore the existing index, scan every file
};

struct IndexBuildReport {
  size_t n_files = 0;            // files indexed now
  size_t n_files_scanned = 0;    // new or changed, read this time
  size_t n_files_unchanged = 0;  // kept from the previous index
  size_t n_files_removed = 0;    // gone (or changed) since the previous index
  uint64_t n_reads = 0;          // reads indexed now
  uint64_t n_reads_added = 0;
  size_t n_segments = 0;
  bool compacted = false;
  size_t n_spilled_runs = 0;     // sorted runs written to disk while building
};

// Builds or updates the index of every *.pod5 file under `root` in `root/.escpod-index`.
// Files are opened without validating every batch up front; a file that cannot be read fails
// the update (naming the file) and leaves the previous index in place. A damaged previous
// index is rebuilt, with a warning.
Status build_read_index(const std::filesystem::path& root, const IndexBuildOptions& options,
                        IndexBuildReport* report);

// One place a read id is stored.
struct IndexHit {
  uint32_t slot = 0;
  uint32_t batch = 0;
  uint32_t row = 0;
};

// An opened index (read-only; thread-safe after open).
class ReadIndex {
 public:
  ~ReadIndex();
  ReadIndex(const ReadIndex&) = delete;
  ReadIndex& operator=(const ReadIndex&) = delete;

  // Opens the index stored in `root/.escpod-index`. kNotFound when there is none; kCorrupt
  // (naming the part) when the manifest or a segment header is damaged.
  static Result<std::unique_ptr<ReadIndex>> open(const std::filesystem::path& root);
  // The nearest folder at or above `file`'s folder holding an index ("" when none).
  static std::filesystem::path find_root(const std::filesystem::path& file);

  const std::filesystem::path& root() const;
  const std::vector<IndexedFile>& files() const;
  // The entry of `file` (any path naming a file under root()) when its size and mtime still
  // match the index; nullptr when it is not indexed or has changed (stale).
  const IndexedFile* fresh_entry(const std::filesystem::path& file) const;
  // fresh_entry's entry when, in addition, the file's footer still names the indexed file
  // identifier (one small read at the file's end; no table is opened): enough to trust that the
  // file holds none of the ids the index does not place in it. nullptr otherwise.
  const IndexedFile* verified_entry(const std::filesystem::path& file) const;
  // Appends every place `id` is stored in a file the manifest lists. kCorrupt when a bucket it
  // reads fails its checksum.
  Status lookup(const ReadId& id, std::vector<IndexHit>* out) const;

 private:
  struct Impl;
  explicit ReadIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace escpod::pod5
