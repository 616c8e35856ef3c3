// bam-demux (bam_demux.hpp): a census pass over the BAM (checks it whole, learns which read
// groups and labels the header must declare), then a writing pass that tags each record and
// routes it to the tagged BAM and/or its label's BAM through bounded per-label buffers.
#include "escpod/pipeline/tables/bam_demux.hpp"

#include <htslib/bgzf.h>
#include <htslib/kstring.h>
#include <htslib/sam.h>
#include <htslib/thread_pool.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <set>
#include <unordered_set>

#include "escpod/core/log.hpp"
#include "pipeline/ops/bam_records.hpp"
#include "pipeline/tables/bam_calls.hpp"

namespace escpod::pipeline {
namespace {

namespace fs = std::filesystem;
using detail::BamCall;
using detail::BamCalls;
using detail::Header;
using detail::HtsFile;
using detail::Record;

constexpr const char* kNoCall = "no call";
constexpr const char* kDuplexDisagree = "duplex parents disagree";
constexpr size_t kMaxOpenLabelFiles = 64;
// A BGZF writer on the thread pool holds ~1-2 MB of blocks in flight, one without ~130 KB: label
// files share the pool only when there are few of them (a run's barcodes), so the memory of -d
// stays bounded whatever the number of labels.
constexpr size_t kMaxThreadedLabelFiles = 16;
constexpr size_t kLabelFlushBytes = 4u << 20;  // a label's buffer is written out at this size

// ---- the join -------------------------------------------------------------------------------------

struct Verdict {
  uint32_t label = BamCalls::kUnclassified;
  const BamCall* call = nullptr;  // the call behind it (duplex: the first parent's)
  float confidence = 0.0f;
  bool has_confidence = false;
  const char* reason = nullptr;   // why the join left it unclassified
};

// The label of a record whose read ids are `ids` (one, or a duplex record's parents).
Verdict join(const BamCalls& calls, const std::vector<pod5::ReadId>& ids, std::vector<pod5::ReadId>* missing) {
  Verdict v;
  for (size_t i = 0; i < ids.size(); ++i) {
    const BamCall* found = calls.by_read.find(ids[i]);
    if (found == nullptr) {
      if (missing) missing->push_back(ids[i]);
      v = Verdict{};
      v.reason = kNoCall;
      continue;
    }
    const BamCall& c = *found;
    if (v.reason == kNoCall) continue;
    if (i == 0) {
      v.label = c.label;
      v.call = &c;
      v.has_confidence = c.has_confidence;
      v.confidence = c.confidence;
    } else if (c.label != v.label) {
      v.label = BamCalls::kUnclassified;
      v.reason = kDuplexDisagree;
    } else {
      v.has_confidence = v.has_confidence && c.has_confidence;
      v.confidence = std::min(v.confidence, c.confidence);
    }
  }
  if (v.reason) {
    v.label = BamCalls::kUnclassified;
    v.has_confidence = false;
  }
  return v;
}

// A record's read group: its RG:Z value, "" when it has none.
std::string_view read_group(const bam1_t* b) {
  const uint8_t* rg = bam_aux_get(b, "RG");
  if (rg == nullptr || *rg != 'Z') return {};
  return reinterpret_cast<const char*>(rg + 1);
}

std::string barcoded_group(std::string_view group, const std::string& label) {
  return group.empty() ? label : std::string(group) + "_" + label;
}

// ---- the census pass ------------------------------------------------------------------------------

// What the census learns: counts, and the (read group, label) pairs the header must declare.
struct Census {
  std::set<std::pair<std::string, uint32_t>> barcoded_groups;
  std::vector<uint64_t> records_per_label;
  std::vector<pod5::ReadId> reads_without_call;  // sorted and unique after the census
  bool sorted_by_coordinate = false;
};

bool header_says_coordinate(sam_hdr_t* h) {
  kstring_t so = KS_INITIALIZE;
  const bool sorted = sam_hdr_find_tag_hd(h, "SO", &so) == 0 && so.s && std::strcmp(so.s, "coordinate") == 0;
  ks_free(&so);
  return sorted;
}

// Reads every record of an opened file, calling `each(record, read ids, verdict, from_parent)`.
template <typename Each>
Status for_each_record(const fs::path& bam, detail::OpenedAlignments& in, const BamCalls& calls,
                       std::vector<pod5::ReadId>* missing, Each&& each) {
  Record b(bam_init1());
  if (!b) return Status::internal("out of memory allocating a BAM record");
  std::vector<pod5::ReadId> ids;
  uint64_t n = 0;
  while (true) {
    const int rc = sam_read1(in.file.get(), in.header.get(), b.get());
    if (rc == -1) break;
    if (rc < -1)
      return Status::corrupt(bam.string() + ": damaged or truncated BAM after record " + std::to_string(n));
    ++n;
    if ((n & 0xffff) == 0 && interrupted()) return Status::cancelled("interrupted");
    bool from_parent = false;
    ESCPOD_RETURN_IF_ERROR(detail::record_read_ids(bam, n, b.get(), ids, &from_parent));
    if (missing) missing->clear();
    const Verdict v = join(calls, ids, missing);
    ESCPOD_RETURN_IF_ERROR(each(b.get(), ids, v, from_parent));
  }
  // A block that failed to decode on a worker thread may surface only at close.
  if (hts_close(in.file.release()) != 0)
    return Status::corrupt(bam.string() + ": damaged or truncated BAM (error at close after " + std::to_string(n) +
                           " records)");
  return Status::ok();
}

Result<Census> census(const fs::path& bam, const BamDemuxOptions& o, const BamCalls& calls, BamDemuxReport& rep) {
  detail::OpenAlignmentsOptions oo;
  oo.n_threads = o.n_threads;
  oo.reference = o.reference;
  oo.all_fields = false;
  ESCPOD_ASSIGN_OR_RETURN(detail::OpenedAlignments in, detail::open_alignments(bam, oo));
  Census c;
  c.sorted_by_coordinate = header_says_coordinate(in.header.get());
  c.records_per_label.assign(calls.labels.size(), 0);
  std::vector<pod5::ReadId> missing;
  std::string last_group;
  uint32_t last_label = BamCalls::kUnclassified;
  ESCPOD_RETURN_IF_ERROR(for_each_record(
      bam, in, calls, &missing, [&](const bam1_t* b, const std::vector<pod5::ReadId>& ids, const Verdict& v, bool parent) {
        ++rep.n_records;
        ++c.records_per_label[v.label];
        if (parent) ++rep.n_parent_ids;
        if (ids.size() > 1) ++rep.n_duplex;
        if (v.reason) ++rep.unclassified_reasons[v.reason];
        c.reads_without_call.insert(c.reads_without_call.end(), missing.begin(), missing.end());
        for (const auto& id : ids)
          if (const BamCall* call = calls.by_read.find(id)) call->seen = true;
        if (v.label != BamCalls::kUnclassified) {
          // Records of a run share a few read groups: a set insert only when the pair changes.
          const std::string_view group = read_group(b);
          if (group != last_group || v.label != last_label) {
            last_group.assign(group);
            last_label = v.label;
            c.barcoded_groups.emplace(last_group, v.label);
          }
        }
        return Status::ok();
      }));
  std::sort(c.reads_without_call.begin(), c.reads_without_call.end());
  c.reads_without_call.erase(std::unique(c.reads_without_call.begin(), c.reads_without_call.end()),
                             c.reads_without_call.end());
  return c;
}

// ---- the header -----------------------------------------------------------------------------------

// The @RG line of a barcoded group: the original's fields (when the input declares it) under the
// new ID, with BC:<label>.
std::string barcoded_group_line(sam_hdr_t* in, const std::string& group, const std::string& label) {
  std::string line = "@RG\tID:" + barcoded_group(group, label);
  kstring_t ks = KS_INITIALIZE;
  if (!group.empty() && sam_hdr_find_line_id(in, "RG", "ID", group.c_str(), &ks) == 0 && ks.s) {
    std::string_view rest(ks.s, ks.l);
    size_t pos = 0;
    while (pos != std::string_view::npos) {
      const size_t next = rest.find('\t', pos);
      const std::string_view field = rest.substr(pos, next == std::string_view::npos ? next : next - pos);
      if (!field.starts_with("@RG") && !field.starts_with("ID:") && !field.starts_with("BC:"))
        line += "\t" + std::string(field);
      pos = next == std::string_view::npos ? next : next + 1;
    }
  }
  ks_free(&ks);
  return line + "\tBC:" + label + "\n";
}

Result<Header> output_header(sam_hdr_t* in, const Census& c, const BamCalls& calls, const BamDemuxOptions& o) {
  Header h(sam_hdr_dup(in));
  if (!h) return Status::internal("cannot copy the BAM header");
  for (const auto& [group, label] : c.barcoded_groups) {
    const std::string new_id = barcoded_group(group, calls.labels[label]);
    if (sam_hdr_find_line_id(h.get(), "RG", "ID", new_id.c_str(), nullptr) == 0) continue;  // declared already
    const std::string line = barcoded_group_line(in, group, calls.labels[label]);
    if (sam_hdr_add_lines(h.get(), line.c_str(), line.size()) != 0)
      return Status::internal("cannot add the header line " + line);
  }
  if (sam_hdr_add_pg(h.get(), "escpod", "VN", o.version.c_str(), "CL", o.command_line.c_str(), nullptr) != 0)
    return Status::internal("cannot add the @PG line");
  return h;
}

// ---- the outputs ----------------------------------------------------------------------------------

// One BAM being written: staged, opened for writing or (reopened) appending.
struct BamOutput {
  fs::path final_path;
  std::optional<StagedFile> staged;
  HtsFile file;
  bool started = false;  // the header is written
  bool threaded = true;  // compressed on the shared thread pool
  uint64_t records = 0;
};

class Writers {
 public:
  Writers(const BamDemuxOptions& o, sam_hdr_t* header, htsThreadPool* pool) : m_o(o), m_header(header), m_pool(pool) {}

  Result<BamOutput*> add(const fs::path& final_path, bool threaded) {
    auto out = std::make_unique<BamOutput>();
    out->final_path = final_path;
    out->threaded = threaded;
    ESCPOD_ASSIGN_OR_RETURN(StagedFile s, StagedFile::create(final_path, m_o.overwrite));
    out->staged.emplace(std::move(s));
    m_outputs.push_back(std::move(out));
    return m_outputs.back().get();
  }
  // `out` open for writing (at most kMaxOpenLabelFiles label files open: the least recently used
  // is closed, and reopened to append when it is written again).
  Status open(BamOutput& out, bool keep_open_always) {
    if (out.file) {
      touch(&out);
      return Status::ok();
    }
    if (!keep_open_always && m_open.size() >= kMaxOpenLabelFiles) ESCPOD_RETURN_IF_ERROR(close(*m_open.back()));
    const std::string path = out.staged->staging_path().string();
    out.file.reset(sam_open(path.c_str(), out.started ? "ab" : "wb"));
    if (!out.file) return Status::io_error("cannot write " + path);
    if (m_pool && out.threaded) (void)hts_set_opt(out.file.get(), HTS_OPT_THREAD_POOL, m_pool);
    if (!out.started) {
      if (sam_hdr_write(out.file.get(), m_header) != 0) return Status::io_error("cannot write " + path + ": disk full?");
      out.started = true;
    }
    if (!keep_open_always) m_open.push_front(&out);
    return Status::ok();
  }
  Status write(BamOutput& out, const bam1_t* b) {
    if (sam_write1(out.file.get(), m_header, b) < 0)
      return Status::io_error("cannot write " + out.staged->staging_path().string() + ": disk full?");
    ++out.records;
    return Status::ok();
  }
  Status close(BamOutput& out) {
    m_open.remove(&out);
    if (out.file && hts_close(out.file.release()) != 0)
      return Status::io_error("cannot write " + out.staged->staging_path().string() + ": disk full?");
    return Status::ok();
  }
  // Closes every output, indexes them when the input is sorted by coordinate, renames all into
  // place.
  Status finish(bool index, BamDemuxReport& rep) {
    for (auto& out : m_outputs) ESCPOD_RETURN_IF_ERROR(close(*out));
    std::vector<StagedFile> indexes;
    if (index) {
      for (auto& out : m_outputs) {
        ESCPOD_ASSIGN_OR_RETURN(StagedFile bai, StagedFile::create(out->final_path.string() + ".bai", m_o.overwrite));
        if (sam_index_build3(out->staged->staging_path().c_str(), bai.staging_path().c_str(), 0, m_o.n_threads) != 0)
          return Status::internal("cannot index " + out->staged->staging_path().string());
        indexes.push_back(std::move(bai));
      }
    }
    for (size_t i = 0; i < m_outputs.size(); ++i) {
      ESCPOD_RETURN_IF_ERROR(m_outputs[i]->staged->commit(m_o.fsync));
      rep.written.push_back(m_outputs[i]->final_path);
      if (index) {
        ESCPOD_RETURN_IF_ERROR(indexes[i].commit(m_o.fsync));
        rep.written.push_back(m_outputs[i]->final_path.string() + ".bai");
      }
    }
    return Status::ok();
  }

 private:
  void touch(BamOutput* out) {
    auto it = std::find(m_open.begin(), m_open.end(), out);
    if (it != m_open.end()) m_open.splice(m_open.begin(), m_open, it);
  }
  const BamDemuxOptions& m_o;
  sam_hdr_t* m_header;
  htsThreadPool* m_pool;
  std::vector<std::unique_ptr<BamOutput>> m_outputs;
  std::list<BamOutput*> m_open;  // label files open now, most recently used first
};

// Records waiting for their label's file: whole bam1_t images (core, then data), written out when
// the label's buffer or all buffers together reach their bounds.
class LabelBuffers {
 public:
  LabelBuffers(Writers& w, std::vector<BamOutput*> outputs, int64_t budget)
      : m_writers(w), m_outputs(std::move(outputs)), m_pending(m_outputs.size()), m_budget(static_cast<size_t>(budget)) {}

  Status add(uint32_t label, const bam1_t* b) {
    std::string& buf = m_pending[label];
    const size_t before = buf.size();
    buf.append(reinterpret_cast<const char*>(&b->core), sizeof b->core);
    const uint32_t l_data = static_cast<uint32_t>(b->l_data);
    buf.append(reinterpret_cast<const char*>(&l_data), sizeof l_data);
    buf.append(reinterpret_cast<const char*>(b->data), l_data);
    m_total += buf.size() - before;
    if (buf.size() >= kLabelFlushBytes) return flush(label);
    while (m_total > m_budget) ESCPOD_RETURN_IF_ERROR(flush(largest()));
    return Status::ok();
  }
  Status flush_all() {
    for (uint32_t l = 0; l < m_pending.size(); ++l) ESCPOD_RETURN_IF_ERROR(flush(l));
    return Status::ok();
  }

 private:
  uint32_t largest() const {
    return static_cast<uint32_t>(std::max_element(m_pending.begin(), m_pending.end(),
                                                  [](const std::string& a, const std::string& b) { return a.size() < b.size(); }) -
                                 m_pending.begin());
  }
  Status flush(uint32_t label) {
    std::string& buf = m_pending[label];
    if (buf.empty()) return Status::ok();
    BamOutput& out = *m_outputs[label];
    ESCPOD_RETURN_IF_ERROR(m_writers.open(out, /*keep_open_always=*/false));
    for (size_t pos = 0; pos < buf.size();) {
      std::memcpy(&m_scratch->core, buf.data() + pos, sizeof m_scratch->core);
      pos += sizeof m_scratch->core;
      uint32_t l_data = 0;
      std::memcpy(&l_data, buf.data() + pos, sizeof l_data);
      pos += sizeof l_data;
      if (m_scratch->m_data < l_data) {
        void* grown = std::realloc(m_scratch->data, l_data);
        if (grown == nullptr) return Status::internal("out of memory");
        m_scratch->data = static_cast<uint8_t*>(grown);
        m_scratch->m_data = l_data;
      }
      std::memcpy(m_scratch->data, buf.data() + pos, l_data);
      m_scratch->l_data = static_cast<int>(l_data);
      pos += l_data;
      ESCPOD_RETURN_IF_ERROR(m_writers.write(out, m_scratch.get()));
    }
    m_total -= buf.size();
    buf.clear();
    buf.shrink_to_fit();
    return Status::ok();
  }
  Writers& m_writers;
  std::vector<BamOutput*> m_outputs;  // per label; nullptr for labels without records
  std::vector<std::string> m_pending;
  size_t m_budget;
  size_t m_total = 0;
  Record m_scratch{bam_init1()};
};

// ---- the writing pass -----------------------------------------------------------------------------

// The documented tags of one record (docs/formats.md): BC, RG, ec, eh, er.
Status tag(bam1_t* b, const Verdict& v, const BamCalls& calls, std::string& group_scratch) {
  const std::string& label = calls.labels[v.label];
  bool ok = bam_aux_update_str(b, "BC", static_cast<int>(label.size() + 1), label.c_str()) == 0;
  if (v.label != BamCalls::kUnclassified) {
    const std::string_view group = read_group(b);
    group_scratch.assign(group);
    if (!group.empty()) group_scratch += '_';
    group_scratch += label;
    ok = ok && bam_aux_update_str(b, "RG", static_cast<int>(group_scratch.size() + 1), group_scratch.c_str()) == 0;
  }
  for (const char* t : {"ec", "eh", "er"})
    if (uint8_t* old = bam_aux_get(b, t)) ok = ok && bam_aux_del(b, old) == 0;
  if (v.has_confidence) ok = ok && bam_aux_update_float(b, "ec", v.confidence) == 0;
  if (v.call) {
    const std::string& src = calls.sources[v.call->source];
    ok = ok && bam_aux_update_str(b, "eh", static_cast<int>(src.size() + 1), src.c_str()) == 0;
  }
  if (v.reason) ok = ok && bam_aux_update_str(b, "er", static_cast<int>(std::strlen(v.reason) + 1), v.reason) == 0;
  return ok ? Status::ok() : Status::internal("cannot set a tag of record " + std::string(bam_get_qname(b)));
}

struct ThreadPool {
  htsThreadPool pool{nullptr, 0};
  explicit ThreadPool(int n) {
    if (n > 1) pool.pool = hts_tpool_init(n);
  }
  ~ThreadPool() {
    if (pool.pool) hts_tpool_destroy(pool.pool);
  }
  htsThreadPool* get() { return pool.pool ? &pool : nullptr; }
};

Status write_pass(const fs::path& bam, const BamDemuxOptions& o, const BamCalls& calls, const Census& c,
                  BamDemuxReport& rep) {
  // The pool first: the input and every output use it, so it must outlive them all (on an early
  // return too: an interrupted run closes its files on the way out).
  ThreadPool pool(o.n_threads);
  detail::OpenAlignmentsOptions oo;
  oo.reference = o.reference;
  ESCPOD_ASSIGN_OR_RETURN(detail::OpenedAlignments in, detail::open_alignments(bam, oo));
  ESCPOD_ASSIGN_OR_RETURN(Header header, output_header(in.header.get(), c, calls, o));
  if (pool.get()) (void)hts_set_opt(in.file.get(), HTS_OPT_THREAD_POOL, pool.get());
  Writers writers(o, header.get(), pool.get());
  BamOutput* all = nullptr;
  if (!o.output.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(all, writers.add(o.output, /*threaded=*/true));
    ESCPOD_RETURN_IF_ERROR(writers.open(*all, /*keep_open_always=*/true));
  }
  std::vector<BamOutput*> per_label(calls.labels.size(), nullptr);
  if (!o.out_dir.empty()) {
    const auto n_files = static_cast<size_t>(std::count_if(c.records_per_label.begin(), c.records_per_label.end(),
                                                           [](uint64_t n) { return n > 0; }));
    for (uint32_t l = 0; l < calls.labels.size(); ++l)
      if (c.records_per_label[l] > 0) {
        ESCPOD_ASSIGN_OR_RETURN(per_label[l], writers.add(o.out_dir / (o.prefix + "_" + calls.labels[l] + ".bam"),
                                                          n_files <= kMaxThreadedLabelFiles));
      }
  }
  LabelBuffers buffers(writers, per_label, o.memory_budget);
  std::string group;
  auto route = [&](bam1_t* b, const std::vector<pod5::ReadId>&, const Verdict& v, bool) -> Status {
    ESCPOD_RETURN_IF_ERROR(tag(b, v, calls, group));
    if (all) ESCPOD_RETURN_IF_ERROR(writers.write(*all, b));
    if (per_label[v.label]) ESCPOD_RETURN_IF_ERROR(buffers.add(v.label, b));
    return Status::ok();
  };
  ESCPOD_RETURN_IF_ERROR(for_each_record(bam, in, calls, nullptr, route));
  ESCPOD_RETURN_IF_ERROR(buffers.flush_all());
  return writers.finish(c.sorted_by_coordinate, rep);
}

// The read ids of records without a call, sorted, staged (committed with the outputs).
Result<StagedFile> write_missing_ids(const fs::path& path, const Census& c, const BamDemuxOptions& o) {
  ESCPOD_ASSIGN_OR_RETURN(StagedFile f, StagedFile::create(path, o.overwrite));
  const std::vector<pod5::ReadId>& ids = c.reads_without_call;
  std::FILE* out = std::fopen(f.staging_path().c_str(), "w");
  if (out == nullptr) return Status::io_error("cannot write " + f.staging_path().string());
  char text[37];
  text[36] = '\n';
  bool ok = true;
  for (const auto& id : ids) {
    id.format_to(text);
    ok = ok && std::fwrite(text, 1, sizeof text, out) == sizeof text;
  }
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) return Status::io_error("cannot write " + f.staging_path().string() + ": disk full?");
  return f;
}

void fill_counts(const BamCalls& calls, const Census& c, BamDemuxReport& rep) {
  rep.n_calls = calls.by_read.size();
  for (uint32_t l = 0; l < calls.labels.size(); ++l)
    if (c.records_per_label[l] > 0) rep.records_per_label[calls.labels[l]] = c.records_per_label[l];
  calls.by_read.for_each([&](const pod5::ReadId&, const BamCall& call) {
    if (call.seen) ++rep.reads_per_label[calls.labels[call.label]];
    else ++rep.n_calls_without_record;
  });
  rep.n_reads_without_call = c.reads_without_call.size();
}

}  // namespace

Status check_bam_file(const fs::path& bam) {
  detail::OpenAlignmentsOptions oo;
  oo.all_fields = false;
  return detail::open_alignments(bam, oo).status();
}

Status bam_demux(const fs::path& bam, const BamDemuxOptions& o, BamDemuxReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  BamDemuxReport local;
  BamDemuxReport& rep = report ? *report : local;
  if (o.output.empty() && o.out_dir.empty())
    return Status::usage("bam-demux needs -o OUT.bam (every record, tagged) and/or -d DIR (one BAM per label)");
  ESCPOD_ASSIGN_OR_RETURN(const BamCalls calls, detail::read_bam_calls(o.calls));
  ESCPOD_ASSIGN_OR_RETURN(const Census c, census(bam, o, calls, rep));
  fill_counts(calls, c, rep);
  if (!o.out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec) return Status::io_error("cannot create " + o.out_dir.string() + ": " + ec.message());
  }
  std::optional<StagedFile> missing;
  if (!o.missing_ids_output.empty()) {
    ESCPOD_ASSIGN_OR_RETURN(StagedFile f, write_missing_ids(o.missing_ids_output, c, o));
    missing.emplace(std::move(f));
  }
  ESCPOD_RETURN_IF_ERROR(write_pass(bam, o, calls, c, rep));
  if (missing) ESCPOD_RETURN_IF_ERROR(missing->commit(o.fsync));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace escpod::pipeline
