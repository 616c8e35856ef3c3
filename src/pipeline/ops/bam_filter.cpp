#include "escpod/pipeline/ops/bam_filter.hpp"

#include <htslib/bgzf.h>
#include <htslib/hts.h>
#include <htslib/sam.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"
#include "pipeline/ops/bam_records.hpp"

namespace escpod::pipeline {
namespace {

namespace fs = std::filesystem;

using detail::Header;
using detail::HtsFile;
using detail::Index;
using detail::Iterator;
using detail::Record;
using detail::quiet_htslib;
using detail::record_read_ids;

// Contig names for an error message: the first few and how many there are.
std::string some_contigs(const sam_hdr_t* h) {
  const int n = sam_hdr_nref(h);
  std::string s;
  for (int i = 0; i < n && i < 5; ++i) {
    if (!s.empty()) s += ", ";
    s += sam_hdr_tid2name(h, i);
  }
  if (n > 5) s += ", ... (" + std::to_string(n) + " in all)";
  return n == 0 ? "none: the header has no @SQ lines" : s;
}

// Where htslib looks for a local index of a BAM (the ones we name in messages).
std::vector<fs::path> index_candidates(const fs::path& bam_path, bool is_cram) {
  std::vector<fs::path> c;
  if (is_cram) {
    c.push_back(bam_path.string() + ".crai");
    return c;
  }
  c.push_back(bam_path.string() + ".bai");
  c.push_back(bam_path.string() + ".csi");
  if (bam_path.extension() == ".bam") c.push_back(fs::path(bam_path).replace_extension(".bai"));
  return c;
}

// htslib's own warning about an index older than its BAM is silenced with its other messages.
void warn_if_stale(const fs::path& bam_path, const std::vector<fs::path>& candidates) {
  std::error_code ec;
  const auto bam_time = fs::last_write_time(bam_path, ec);
  if (ec) return;
  for (const auto& c : candidates) {
    const auto idx_time = fs::last_write_time(c, ec);
    if (ec) continue;  // not there: htslib took the next name
    if (idx_time < bam_time) {
      log::warn("the index {} is older than {}: region results may be wrong (re-index it)",
                c.string(), bam_path.string());
    }
    return;
  }
}

// Writes <bam>.bai through a staging file renamed into place, so a reader never sees a partial
// index. A racing writer's index (already there when we commit) is as good as ours.
Result<fs::path> build_bai(const fs::path& bam_path, int n_threads) {
  const fs::path bai = bam_path.string() + ".bai";
  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(bai, /*overwrite=*/false));
  const int rc = sam_index_build3(bam_path.c_str(), staged.staging_path().c_str(), 0, n_threads);
  if (rc != 0) {
    if (interrupted()) return Status::cancelled("interrupted");
    switch (rc) {
      case -2: return Status::io_error("cannot open " + bam_path.string() + " to index it");
      case -3: return Status::unsupported(bam_path.string() + " is not in a format that can be indexed");
      case -4: return Status::io_error("cannot write the index " + staged.staging_path().string());
      default:
        return Status::corrupt("cannot index " + bam_path.string() +
                               " (is it sorted by coordinate? `samtools sort` sorts it)");
    }
  }
  Status s = staged.commit(FsyncMode::kNone);
  if (s.code() == StatusCode::kAlreadyExists) return bai;
  ESCPOD_RETURN_IF_ERROR(s);
  return bai;
}

// Indexing an unsorted BAM fails (and htslib 1.16 leaks its header doing so): only a BAM whose
// header says SO:coordinate is indexed.
bool sorted_by_coordinate(sam_hdr_t* h) {
  kstring_t so = KS_INITIALIZE;
  const bool sorted = sam_hdr_find_tag_hd(h, "SO", &so) == 0 && so.s && std::strcmp(so.s, "coordinate") == 0;
  ks_free(&so);
  return sorted;
}

// The region as a contig and a 0-based half-open range.
struct Region {
  int tid = -1;
  hts_pos_t beg = 0, end = 0;
};

Result<Region> parse_region(const fs::path& bam_path, sam_hdr_t* h, const std::string& text) {
  Region r;
  const char* rest = sam_parse_region(h, text.c_str(), &r.tid, &r.beg, &r.end, 0);
  if (rest == nullptr || *rest != '\0') {
    if (r.tid == -1 || r.tid == -2) {
      return Status::usage("--region '" + text + "': no such contig in " + bam_path.string() +
                                      " (contigs: " + some_contigs(h) + ")");
    }
    return Status::usage("--region '" + text +
                                    "': not a region (expected chr, chr:start or chr:start-end, "
                                    "1-based inclusive)");
  }
  if (r.beg >= r.end) {
    return Status::usage("--region '" + text + "': empty range (start after end)");
  }
  return r;
}

// The index of the alignment file `fp` (at bam_path) for a --region query, into `idx`: loaded;
// else, under BamIndexPolicy::kBuildIfMissing, built beside a coordinate-sorted BAM
// (sel.index_built). Left null (with a warning) when the file must be scanned instead; kCorrupt
// when an index exists but cannot be read.
Status load_region_index(htsFile* fp, sam_hdr_t* hdr, const fs::path& bam_path, const BamSelectOptions& options,
                         bool is_bam, bool is_cram, Index& idx, BamSelection& sel) {
  idx.reset(sam_index_load3(fp, bam_path.c_str(), nullptr, HTS_IDX_SILENT_FAIL));
  std::error_code ec;
  if (idx) {
    warn_if_stale(bam_path, index_candidates(bam_path, is_cram));
    return Status::ok();
  }
  for (const auto& c : index_candidates(bam_path, is_cram)) {
    if (fs::exists(c, ec)) {
      return Status::corrupt("the index " + c.string() + " of " + bam_path.string() +
                             " cannot be read (damaged? delete it to have it rebuilt)");
    }
  }
  if (options.index == BamIndexPolicy::kBuildIfMissing && is_bam && !sorted_by_coordinate(hdr)) {
    log::warn("{} is not sorted by coordinate (its @HD SO tag); reading the whole BAM for --region",
              bam_path.string());
  } else if (options.index == BamIndexPolicy::kBuildIfMissing && is_bam) {
    auto built = build_bai(bam_path, options.n_threads);
    if (built.is_ok()) {
      idx.reset(sam_index_load2(fp, bam_path.c_str(), built->c_str()));
      if (!idx) return Status::corrupt("cannot read back the index " + built->string() + " just written");
      sel.index_built = *built;
      log::info("indexed {} into {}", bam_path.string(), built->string());
    } else if (built.status().code() == StatusCode::kCancelled) {
      return built.status();
    } else {
      log::warn("{}; reading the whole BAM for --region instead", built.status().message());
    }
  }
  return Status::ok();
}

// Every record of `fp` (those `itr` yields, when given) that meets `criteria`: its read ids
// (the parent's for a split read), each once, into sel.read_ids, with the counts. Without an
// iterator a region (`region`, when has_region) is applied here as htslib's iterator would.
Status read_selected_records(htsFile* fp, sam_hdr_t* hdr, hts_itr_t* itr, const fs::path& bam_path,
                             const BamCriteria& criteria, bool has_region, const Region& region, BamSelection& sel) {
  Record b(bam_init1());
  if (!b) return Status::internal("out of memory allocating a BAM record");
  std::unordered_set<pod5::ReadId, pod5::ReadIdHash> seen;
  std::vector<pod5::ReadId> ids;
  while (true) {
    const int rc = itr ? sam_itr_next(fp, itr, b.get()) : sam_read1(fp, hdr, b.get());
    if (rc == -1) break;
    if (rc < -1) {
      return Status::corrupt(bam_path.string() + ": damaged or truncated BAM after record " +
                             std::to_string(sel.n_records));
    }
    ++sel.n_records;
    if ((sel.n_records & 0xffff) == 0 && interrupted()) return Status::cancelled("interrupted");
    const bam1_core_t& c = b->core;
    if (criteria.mapped_only && (c.flag & BAM_FUNMAP)) continue;
    if (criteria.min_mapq && c.qual < *criteria.min_mapq) continue;
    if (has_region && !itr) {
      // The overlap test htslib's iterator applies (unmapped and CIGAR-less records span 1 base).
      if (c.tid != region.tid || c.pos >= region.end || bam_endpos(b.get()) <= region.beg) continue;
    }
    bool from_parent = false;
    ESCPOD_RETURN_IF_ERROR(record_read_ids(bam_path, sel.n_records, b.get(), ids, &from_parent));
    ++sel.n_records_selected;
    if (from_parent) ++sel.n_parent_ids;
    for (const auto& id : ids)
      if (seen.insert(id).second) sel.read_ids.push_back(id);
  }
  return Status::ok();
}

}  // namespace

Result<BamSelection> select_bam_reads(const fs::path& bam_path, const BamCriteria& criteria,
                                      const BamSelectOptions& options) {
  quiet_htslib();
  if (criteria.min_mapq && (*criteria.min_mapq < 0 || *criteria.min_mapq > 255)) {
    return Status::usage("--quality must be a MAPQ in 0-255, not " +
                                    std::to_string(*criteria.min_mapq));
  }
  detail::OpenAlignmentsOptions oo;
  oo.n_threads = options.n_threads;
  oo.all_fields = false;  // selection reads names, flags, positions and tags only
  ESCPOD_ASSIGN_OR_RETURN(detail::OpenedAlignments opened, detail::open_alignments(bam_path, oo));
  HtsFile fp = std::move(opened.file);
  Header hdr = std::move(opened.header);
  const bool is_bam = opened.is_bam;
  const bool is_cram = opened.is_cram;

  BamSelection sel;
  Region region;
  Index idx;
  Iterator itr;
  const bool has_region = !criteria.region.empty();
  if (has_region) {
    ESCPOD_ASSIGN_OR_RETURN(region, parse_region(bam_path, hdr.get(), criteria.region));
    ESCPOD_RETURN_IF_ERROR(load_region_index(fp.get(), hdr.get(), bam_path, options, is_bam, is_cram, idx, sel));
    if (idx) {
      itr.reset(sam_itr_queryi(idx.get(), region.tid, region.beg, region.end));
      if (!itr) return Status::corrupt(bam_path.string() + ": cannot query its index for " + criteria.region);
    } else {
      sel.scanned_without_index = true;
    }
  }
  ESCPOD_RETURN_IF_ERROR(read_selected_records(fp.get(), hdr.get(), itr.get(), bam_path, criteria, has_region, region,
                                               sel));
  // A block that failed to decode on a worker thread may surface only here.
  itr.reset();
  if (hts_close(fp.release()) != 0) {
    return Status::corrupt(bam_path.string() + ": damaged or truncated BAM (error at close after " +
                           std::to_string(sel.n_records) + " records)");
  }
  return sel;
}

Status bam_filter_files(const fs::path& bam_path, const std::vector<fs::path>& inputs,
                        const fs::path& output, const BamCriteria& criteria,
                        const BamFilterOptions& options, BamFilterReport* report) {
  BamFilterReport local;
  BamFilterReport& rep = report ? *report : local;
  BamSelectOptions so;
  so.n_threads = options.n_threads;
  so.index = options.index;
  ESCPOD_ASSIGN_OR_RETURN(rep.selection, select_bam_reads(bam_path, criteria, so));
  std::optional<StagedFile> missing_file;
  if (!options.missing_ids_output.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(auto f, StagedFile::create(options.missing_ids_output, options.writer.overwrite));
    missing_file.emplace(std::move(f));
  }
  FilterCriteria fc;
  fc.ids = rep.selection.read_ids;
  FilterOptions fo;
  fo.writer = options.writer;
  fo.n_threads = options.n_threads;
  fo.missing_ok = true;
  ESCPOD_RETURN_IF_ERROR(filter_files(inputs, output, fc, fo, &rep.filter));
  if (missing_file) {
    std::FILE* f = std::fopen(missing_file->staging_path().c_str(), "w");
    if (f == nullptr) return Status::io_error("cannot write " + missing_file->staging_path().string());
    char text[37];
    text[36] = '\n';
    bool ok = true;
    for (const auto& id : rep.filter.missing_ids) {
      id.format_to(text);
      ok = ok && std::fwrite(text, 1, sizeof text, f) == sizeof text;
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return Status::io_error("cannot write " + missing_file->staging_path().string() + ": disk full?");
    ESCPOD_RETURN_IF_ERROR(missing_file->commit(options.writer.fsync));
  }
  return Status::ok();
}

const char* htslib_version() { return hts_version(); }

}  // namespace escpod::pipeline
