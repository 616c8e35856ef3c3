#include "escpod/pipeline/ops/bam_filter.hpp"

#include <htslib/bgzf.h>
#include <htslib/hts.h>
#include <htslib/hts_log.h>
#include <htslib/sam.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "escpod/core/log.hpp"
#include "escpod/core/staged_file.hpp"

namespace escpod::pipeline {
namespace {

namespace fs = std::filesystem;

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
void quiet_htslib() {
  hts_set_log_level(log::enabled(log::Level::kDebug) ? HTS_LOG_WARNING : HTS_LOG_OFF);
}

std::string where(const fs::path& bam_path, uint64_t n_records, const bam1_t* b) {
  return bam_path.string() + " record " + std::to_string(n_records) + " (" + bam_get_qname(b) + ")";
}

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

// The read ids record `b` stands for: its pi tag, else its name (both halves of a duplex
// name "a;b").
Status record_read_ids(const fs::path& bam_path, uint64_t n_records, const bam1_t* b,
                       std::vector<pod5::ReadId>& out, bool* from_parent) {
  out.clear();
  *from_parent = false;
  std::string_view text;
  if (const uint8_t* pi = bam_aux_get(b, "pi")) {
    if (*pi != 'Z') {
      return Status::invalid_argument(where(bam_path, n_records, b) +
                                      ": pi tag is not a string (expected pi:Z:<parent read id>)");
    }
    text = reinterpret_cast<const char*>(pi + 1);
    *from_parent = true;
  } else {
    text = bam_get_qname(b);
  }
  while (true) {
    const size_t cut = text.find(';');
    std::string_view part = text.substr(0, cut);
    auto id = pod5::ReadId::parse(part);
    if (!id.is_ok()) {
      return Status::invalid_argument(where(bam_path, n_records, b) + ": " +
                                      (*from_parent ? "pi tag '" : "read name '") +
                                      std::string(part) + "' is not a POD5 read id (a UUID)");
    }
    out.push_back(*id);
    if (cut == std::string_view::npos) break;
    text.remove_prefix(cut + 1);
  }
  return Status::ok();
}

Status open_error(const fs::path& bam_path) {
  const int err = errno;
  std::error_code ec;
  if (!fs::exists(bam_path, ec)) return Status::not_found("BAM " + bam_path.string() + " does not exist");
  if (fs::is_directory(bam_path, ec)) return Status::invalid_argument("BAM " + bam_path.string() + " is a directory");
  if (err == ENOEXEC) {  // htslib's answer for a format it does not know
    return Status::corrupt(bam_path.string() + " is not a BAM file (htslib does not recognise its format)");
  }
  return Status::io_error("cannot open BAM " + bam_path.string() + ": " +
                          (err != 0 ? std::strerror(err) : "unknown error"));
}

}  // namespace

Result<BamSelection> select_bam_reads(const fs::path& bam_path, const BamCriteria& criteria,
                                      const BamSelectOptions& options) {
  quiet_htslib();
  if (criteria.min_mapq && (*criteria.min_mapq < 0 || *criteria.min_mapq > 255)) {
    return Status::usage("--quality must be a MAPQ in 0-255, not " +
                                    std::to_string(*criteria.min_mapq));
  }
  errno = 0;
  HtsFile fp(sam_open(bam_path.c_str(), "r"));
  if (!fp) return open_error(bam_path);
  const htsFormat* fmt = hts_get_format(fp.get());
  if (fmt->category != sequence_data ||
      (fmt->format != htsExactFormat::bam && fmt->format != sam && fmt->format != cram)) {
    char* desc = hts_format_description(fmt);
    std::string what = desc ? desc : "unknown";
    std::free(desc);
    return Status::corrupt(bam_path.string() + " is not a BAM file (it looks like: " + what + ")");
  }
  const bool is_bam = fmt->format == htsExactFormat::bam;
  const bool is_cram = fmt->format == cram;
  if (is_cram) {
    // Only what selection reads; CRAM then needs no reference to decode sequences.
    (void)hts_set_opt(fp.get(), CRAM_OPT_REQUIRED_FIELDS,
                      SAM_QNAME | SAM_FLAG | SAM_RNAME | SAM_POS | SAM_MAPQ | SAM_CIGAR | SAM_AUX);
  }
  // htslib 1.16's threaded BGZF reader hangs or reports a plain end of file on a truncated file:
  // the end-of-file marker and the header are read on this thread, threads come after.
  if (fp->is_bgzf && fmt->compression == bgzf && bgzf_check_EOF(fp->fp.bgzf) == 0) {
    return Status::corrupt(bam_path.string() + ": truncated BAM (no BGZF end-of-file marker)");
  }
  Header hdr(sam_hdr_read(fp.get()));
  if (!hdr) return Status::corrupt(bam_path.string() + ": cannot read the BAM header (damaged or not a BAM)");
  if (options.n_threads > 1) (void)hts_set_threads(fp.get(), options.n_threads);

  BamSelection sel;
  Region region;
  Index idx;
  Iterator itr;
  const bool has_region = !criteria.region.empty();
  if (has_region) {
    ESCPOD_ASSIGN_OR_RETURN(region, parse_region(bam_path, hdr.get(), criteria.region));
    idx.reset(sam_index_load3(fp.get(), bam_path.c_str(), nullptr, HTS_IDX_SILENT_FAIL));
    std::error_code ec;
    if (!idx) {
      for (const auto& c : index_candidates(bam_path, is_cram)) {
        if (fs::exists(c, ec)) {
          return Status::corrupt("the index " + c.string() + " of " + bam_path.string() +
                                 " cannot be read (damaged? delete it to have it rebuilt)");
        }
      }
      if (options.index == BamIndexPolicy::kBuildIfMissing && is_bam && !sorted_by_coordinate(hdr.get())) {
        log::warn("{} is not sorted by coordinate (its @HD SO tag); reading the whole BAM for --region",
                  bam_path.string());
      } else if (options.index == BamIndexPolicy::kBuildIfMissing && is_bam) {
        auto built = build_bai(bam_path, options.n_threads);
        if (built.is_ok()) {
          idx.reset(sam_index_load2(fp.get(), bam_path.c_str(), built->c_str()));
          if (!idx) return Status::corrupt("cannot read back the index " + built->string() + " just written");
          sel.index_built = *built;
          log::info("indexed {} into {}", bam_path.string(), built->string());
        } else if (built.status().code() == StatusCode::kCancelled) {
          return built.status();
        } else {
          log::warn("{}; reading the whole BAM for --region instead", built.status().message());
        }
      }
    } else {
      warn_if_stale(bam_path, index_candidates(bam_path, is_cram));
    }
    if (idx) {
      itr.reset(sam_itr_queryi(idx.get(), region.tid, region.beg, region.end));
      if (!itr) return Status::corrupt(bam_path.string() + ": cannot query its index for " + criteria.region);
    } else {
      sel.scanned_without_index = true;
    }
  }

  Record b(bam_init1());
  if (!b) return Status::internal("out of memory allocating a BAM record");
  std::unordered_set<pod5::ReadId, pod5::ReadIdHash> seen;
  std::vector<pod5::ReadId> ids;
  while (true) {
    const int rc = itr ? sam_itr_next(fp.get(), itr.get(), b.get()) : sam_read1(fp.get(), hdr.get(), b.get());
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

}  // namespace escpod::pipeline
