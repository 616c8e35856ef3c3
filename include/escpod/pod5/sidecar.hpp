// `.p5s` sidecars: per-read annotations kept beside a POD5 file (`reads.pod5` ->
// `reads.pod5.p5s`) instead of copying reads into per-label files. Format and rules:
// docs/formats.md §2; files are interchangeable with the Rust
// escapepod's (checked in tests/conformance/test_sidecar.py against its Python package).
//
// A sidecar is an Arrow IPC file holding one zstd-compressed table: one row per read of the POD5,
// sorted by read id bytes, with the read's locator (reads-table batch and row) and any number of
// annotation columns, each of one kind:
//   label  Dictionary(Int32 -> Utf8), null = unassigned; labels are never empty.
//   score  Float32, null = absent; NaN is refused.
// The schema metadata binds it to one POD5 (footer file identifier and byte size), checked from
// the IPC footer before any record batch is decoded; a sidecar that does not match its POD5 is
// refused with the provenance it records (source name, read count, writing program). An optional
// design table (`escapepod:design`) maps key annotations to derived label columns.
//
// Sidecar objects are plain values held in memory (about 24 bytes a read plus 4 a column); every
// method is const-thread-safe. Writing goes through update_sidecar(): an atomic, column-preserving
// read-modify-write (staged file + rename), so an interrupted write leaves the old sidecar.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/staged_file.hpp"
#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pod5 {

class FileReader;
struct FileInfo;

// `<pod5>.p5s`.
std::filesystem::path sidecar_path(const std::filesystem::path& pod5_path);

enum class AnnotationKind { kLabel, kScore };
std::string_view annotation_kind_name(AnnotationKind kind);  // "label" / "score"

// True for the index columns (`read_id`, `batch_idx`, `row_idx`), which no annotation may use.
bool is_reserved_sidecar_name(std::string_view name);

struct ReadLocator {
  uint32_t batch_idx = 0;  // reads-table batch
  uint32_t row_idx = 0;    // row in that batch
  friend bool operator==(const ReadLocator&, const ReadLocator&) = default;
};

// One annotation column, one entry per sidecar row (in the sidecar's read-id order).
struct AnnotationColumn {
  std::string name;
  AnnotationKind kind = AnnotationKind::kLabel;
  std::vector<std::string> labels;  // label kind: the distinct labels
  std::vector<int32_t> label_idx;   // label kind: index into labels, -1 = unassigned
  std::vector<float> scores;        // score kind: NaN = absent (a stored NaN is refused)
  bool derived = false;             // a design value column (rebuilt from the keys)

  // The text of row `row`: its label, or its score in shortest round-trip form; "" when absent.
  std::string text(size_t row) const;
  bool has_value(size_t row) const;
};

// Experimental design: rows of key labels (one per key column) then value labels (one per
// value column). Value columns are label columns derived by looking up each read's keys.
struct SidecarDesign {
  std::vector<std::string> key_columns;
  std::vector<std::string> value_columns;
  std::vector<std::vector<std::string>> rows;
};

// Parses and validates a design JSON ({"key_columns":[..],"value_columns":[..],"rows":[[..]]}):
// at least one key and one value column, no reserved or repeated names, every row keys then
// values, no empty cell, no repeated key tuple. kInvalidArgument says which rule failed.
Result<SidecarDesign> parse_sidecar_design(std::string_view json);
std::string design_to_json(const SidecarDesign& design);
class Sidecar {
 public:
  // The sidecar of `pod5` (at sidecar_path(pod5.path())): kNotFound when none exists; kCorrupt
  // when it is damaged or does not match the POD5 (the message names the file, the problem and
  // the sidecar's provenance). Identity is checked before any record batch is decoded; the
  // whole table is then validated (types, sorted unique ids, row count = the POD5's reads, no
  // empty label, no NaN score, derived columns equal to their design).
  static Result<Sidecar> open(const FileReader& pod5);
  // As open(), for a sidecar at `path` checked against `pod5`'s identity.
  static Result<Sidecar> open_at(const std::filesystem::path& path, const FileInfo& pod5);
  // A fresh sidecar of `pod5` with its index and no annotation column (reads every reads batch
  // on up to n_threads threads). kInvalidArgument when a read id occurs twice in the POD5.
  static Result<Sidecar> build_index(const FileReader& pod5, int n_threads);

  const std::filesystem::path& path() const { return m_path; }
  const std::string& file_identifier() const { return m_file_identifier; }
  uint64_t pod5_size() const { return m_pod5_size; }
  // "from "reads.pod5", 180 reads, written by escpod 0.1.0" (descriptive, never compared).
  std::string provenance() const;
  int version() const;  // 1, or 2 when a score column exists

  size_t n_reads() const { return m_ids.size(); }
  const std::vector<ReadId>& read_ids() const { return m_ids; }  // sorted, unique
  ReadLocator locator(size_t row) const { return m_locators[row]; }
  // Sidecar row of `id` (binary search), or nullopt.
  std::optional<size_t> row_of(const ReadId& id) const;

  const std::vector<AnnotationColumn>& columns() const { return m_columns; }
  const AnnotationColumn* find(std::string_view name) const;
  // The column `name` of kind `kind`: kNotFound listing the columns there are; kInvalidArgument
  // naming the actual kind when it is the other kind.
  Result<const AnnotationColumn*> column(std::string_view name, AnnotationKind kind) const;
  const std::optional<SidecarDesign>& design() const { return m_design; }

  // The locator of `id` checked against `pod5` (the file this sidecar belongs to): batch within
  // the file, row within the batch, and the read id stored at that row equal to `id`. kNotFound
  // when the sidecar has no such read; kCorrupt (naming the sidecar, read and locator) when the
  // locator is out of bounds or points at another read. Decodes one reads batch.
  Result<ReadLocator> locate(const FileReader& pod5, const ReadId& id) const;

  // Checks the whole index against `pod5`: every read of every reads batch has a row whose
  // locator is where the read is (kCorrupt naming the first read that disagrees). Reads every
  // reads batch, on up to n_threads threads.
  Status verify_index(const FileReader& pod5, int n_threads) const;

  // In-memory edits (update_sidecar applies them and writes the result).
  // Replaces column `name` whole: rows of `values` name reads by sidecar row; reads not named are
  // unassigned. Refuses reserved names, design value columns, a name held by the other kind,
  // empty labels and NaN scores (kInvalidArgument naming the column and read).
  Status set_labels(const std::string& name, const std::vector<std::pair<size_t, std::string>>& values);
  Status set_scores(const std::string& name, const std::vector<std::pair<size_t, float>>& values);
  // Replaces the design and rebuilds its value columns; refuses value names already used by
  // ordinary columns and key names held by score columns.
  Status set_design(SidecarDesign design);

  // 16 hex digits hashing the read index and every non-derived column (what a later open checks
  // against `escpod:content_hash` when the file still carries the writer that stored it).
  std::string content_hash() const;

  // Writes this sidecar to a staging file beside `path` and renames it into place.
  Status write(const std::filesystem::path& path, FsyncMode fsync, const std::string& writer) const;

 private:
  Status derive_design_columns();
  Status complete_derived();
  std::filesystem::path m_path;
  std::string m_file_identifier;
  uint64_t m_pod5_size = 0;
  std::string m_source_name, m_writer;
  std::optional<uint64_t> m_recorded_read_count;
  std::vector<std::pair<std::string, std::string>> m_other_metadata;  // unknown keys, kept
  std::vector<ReadId> m_ids;
  std::vector<ReadLocator> m_locators;
  std::vector<AnnotationColumn> m_columns;
  std::optional<SidecarDesign> m_design;
};

// One column to write: labels or scores keyed by read id. Reads the POD5 does not hold are
// ignored (counted in the report).
struct AnnotationUpdate {
  std::string name;
  AnnotationKind kind = AnnotationKind::kLabel;
  std::vector<std::pair<ReadId, std::string>> labels;
  std::vector<std::pair<ReadId, float>> scores;
};

struct SidecarUpdateOptions {
  FsyncMode fsync = FsyncMode::kNone;
  int n_threads = 1;                   // building a missing index
  std::string writer = "escpod";       // recorded as escapepod:writer
  std::optional<SidecarDesign> design; // replaces the design when set
};

struct SidecarUpdateReport {
  bool index_built = false;           // there was no sidecar
  std::map<std::string, uint64_t> n_assigned;  // per column: reads of the POD5 given a value
  uint64_t n_not_in_file = 0;         // update rows naming reads the POD5 does not hold
};

// The read-modify-write: opens the sidecar of `pod5` (or builds the index when there is none),
// replaces the named columns (all in one write), keeps every other column, the design (unless
// options.design replaces it) and unknown metadata, re-derives design columns, and writes it
// atomically. A sidecar that does not match `pod5` or is damaged (including an index that
// disagrees with the POD5: verify_index) is refused (kCorrupt, with its provenance), never
// overwritten. Duplicate read ids within one update are refused.
Status update_sidecar(const FileReader& pod5, const std::vector<AnnotationUpdate>& updates,
                      const SidecarUpdateOptions& options, SidecarUpdateReport* report);

}  // namespace escpod::pod5
