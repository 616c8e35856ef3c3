// Opening alignment files and the read ids of records (bam_records.hpp).
#include "pipeline/ops/bam_records.hpp"

#include <htslib/bgzf.h>
#include <htslib/hts_log.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "escpod/core/log.hpp"

namespace escpod::pipeline::detail {

namespace fs = std::filesystem;

void quiet_htslib() {
  hts_set_log_level(log::enabled(log::Level::kDebug) ? HTS_LOG_WARNING : HTS_LOG_OFF);
}

namespace {

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

Result<OpenedAlignments> open_alignments(const fs::path& bam_path, const OpenAlignmentsOptions& options) {
  quiet_htslib();
  errno = 0;
  OpenedAlignments out;
  out.file.reset(sam_open(bam_path.c_str(), "r"));
  if (!out.file) return open_error(bam_path);
  htsFile* fp = out.file.get();
  const htsFormat* fmt = hts_get_format(fp);
  if (fmt->category != sequence_data ||
      (fmt->format != htsExactFormat::bam && fmt->format != sam && fmt->format != cram)) {
    char* desc = hts_format_description(fmt);
    std::string what = desc ? desc : "unknown";
    std::free(desc);
    return Status::corrupt(bam_path.string() + " is not a BAM file (it looks like: " + what + ")");
  }
  out.is_bam = fmt->format == htsExactFormat::bam;
  out.is_cram = fmt->format == cram;
  if (!out.is_cram && !options.reference.empty())
    return Status::usage("--reference " + options.reference.string() + " is for a CRAM input; " + bam_path.string() +
                         " is not CRAM");
  if (out.is_cram && !options.reference.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(options.reference, ec))
      return Status::not_found("--reference " + options.reference.string() + ": no such file");
    if (hts_set_fai_filename(fp, options.reference.c_str()) != 0)
      return Status::io_error("cannot use the reference " + options.reference.string() + " (no .fai and cannot index it?)");
  }
  if (out.is_cram && !options.all_fields) {
    // Only what selection reads; CRAM then needs no reference to decode sequences.
    (void)hts_set_opt(fp, CRAM_OPT_REQUIRED_FIELDS,
                      SAM_QNAME | SAM_FLAG | SAM_RNAME | SAM_POS | SAM_MAPQ | SAM_CIGAR | SAM_AUX);
  }
  // htslib 1.16's threaded BGZF reader hangs or reports a plain end of file on a truncated file:
  // the end-of-file marker and the header are read on this thread, threads come after.
  if (fp->is_bgzf && fmt->compression == bgzf && bgzf_check_EOF(fp->fp.bgzf) == 0) {
    return Status::corrupt(bam_path.string() + ": truncated BAM (no BGZF end-of-file marker)");
  }
  out.header.reset(sam_hdr_read(fp));
  if (!out.header) return Status::corrupt(bam_path.string() + ": cannot read the BAM header (damaged or not a BAM)");
  if (options.n_threads > 1) (void)hts_set_threads(fp, options.n_threads);
  return out;
}

std::string record_where(const fs::path& bam_path, uint64_t n_records, const bam1_t* b) {
  return bam_path.string() + " record " + std::to_string(n_records) + " (" + bam_get_qname(b) + ")";
}

Status record_read_ids(const fs::path& bam_path, uint64_t n_records, const bam1_t* b,
                       std::vector<pod5::ReadId>& out, bool* from_parent) {
  out.clear();
  *from_parent = false;
  std::string_view text;
  if (const uint8_t* pi = bam_aux_get(b, "pi")) {
    if (*pi != 'Z') {
      return Status::invalid_argument(record_where(bam_path, n_records, b) +
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
      return Status::invalid_argument(record_where(bam_path, n_records, b) + ": " +
                                      (*from_parent ? "pi tag '" : "read name '") +
                                      std::string(part) + "' is not a POD5 read id (a UUID)");
    }
    out.push_back(*id);
    if (cut == std::string_view::npos) break;
    text.remove_prefix(cut + 1);
  }
  return Status::ok();
}

}  // namespace escpod::pipeline::detail
