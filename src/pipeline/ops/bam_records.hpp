// Internal: opening alignment files and reading what a record says about its read, shared by
// bam-filter (ops) and bam-demux (tables). htslib handles as owning pointers; errors name the
// file and the record.
#pragma once

#include <htslib/hts.h>
#include <htslib/sam.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/pod5/read_id.hpp"

namespace escpod::pipeline::detail {

struct HtsFileCloser {
  void operator()(htsFile* f) const { hts_close(f); }
};
struct HeaderFree {
  void operator()(sam_hdr_t* h) const { sam_hdr_destroy(h); }
};
struct RecordFree {
  void operator()(bam1_t* b) const { bam_destroy1(b); }
};
struct IndexFree {
  void operator()(hts_idx_t* i) const { hts_idx_destroy(i); }
};
struct IteratorFree {
  void operator()(hts_itr_t* i) const { hts_itr_destroy(i); }
};
using HtsFile = std::unique_ptr<htsFile, HtsFileCloser>;
using Header = std::unique_ptr<sam_hdr_t, HeaderFree>;
using Record = std::unique_ptr<bam1_t, RecordFree>;
using Index = std::unique_ptr<hts_idx_t, IndexFree>;
using Iterator = std::unique_ptr<hts_itr_t, IteratorFree>;

// htslib prints its own diagnostics to stderr; ours name the file instead, so it speaks only
// when escpod is verbose.
void quiet_htslib();

// An alignment file (BAM, SAM or CRAM) opened for reading, its header read.
struct OpenedAlignments {
  HtsFile file;
  Header header;
  bool is_bam = false, is_cram = false;
};

struct OpenAlignmentsOptions {
  int n_threads = 1;                  // BGZF decompression threads (after the header)
  std::filesystem::path reference;    // CRAM: the reference FASTA (empty: htslib's search)
  bool all_fields = true;             // false: CRAM decodes only what a read id needs
};

// Errors: kNotFound/kIoError the file cannot be opened; kCorrupt not an alignment file, no BGZF
// end-of-file marker (a file cut short), a header that cannot be read.
Result<OpenedAlignments> open_alignments(const std::filesystem::path& path, const OpenAlignmentsOptions& options);

// "<file> record <n> (<name>)" for messages.
std::string record_where(const std::filesystem::path& bam_path, uint64_t n_records, const bam1_t* b);

// The read ids record `b` stands for: its pi tag, else its name (both halves of a duplex name
// "a;b"). kInvalidArgument naming the record when one is not a read id (a UUID).
Status record_read_ids(const std::filesystem::path& bam_path, uint64_t n_records, const bam1_t* b,
                       std::vector<pod5::ReadId>& out, bool* from_parent);

}  // namespace escpod::pipeline::detail
