#include "escpod/pod5/read_index.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "escpod/core/executor.hpp"
#include "escpod/core/parallel.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <mutex>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

#include <zlib.h>

#include "escpod/core/log.hpp"
#include "escpod/core/progress.hpp"
#include "escpod/core/staged_file.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/inputs.hpp"
#include "pod5/container.hpp"
#include "pod5/ipc_layout.hpp"

namespace escpod::pod5 {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the index format is little-endian");

namespace {

constexpr char kMagic[8] = {'E', 'S', 'C', 'P', 'I', 'D', 'X', 0};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr uint32_t kMaxBucketBits = 24;
constexpr size_t kTargetBucketRecords = 128;
constexpr size_t kMaxSegments = 8;
constexpr const char* kManifestMagic = "escpod-read-index 2";
constexpr const char* kManifestMagicV1 = "escpod-read-index 1";  // no batch layouts: still read

struct Rec {
  std::array<uint8_t, 16> id;
  uint32_t slot, batch, row;
};
static_assert(sizeof(Rec) == 28);
constexpr uint32_t kRecordBytes = sizeof(Rec);

bool rec_less(const Rec& a, const Rec& b) {
  if (int c = std::memcmp(a.id.data(), b.id.data(), 16); c != 0) return c < 0;
  if (a.slot != b.slot) return a.slot < b.slot;
  if (a.batch != b.batch) return a.batch < b.batch;
  return a.row < b.row;
}

uint32_t bucket_of(const uint8_t* id, uint32_t bits) {
  if (bits == 0) return 0;
  const uint32_t top = (uint32_t{id[0]} << 24) | (uint32_t{id[1]} << 16) | (uint32_t{id[2]} << 8) | id[3];
  return top >> (32 - bits);
}

uint32_t bits_for(uint64_t n_records) {
  uint32_t bits = 0;
  while (bits < kMaxBucketBits && (n_records >> bits) > kTargetBucketRecords) ++bits;
  return bits;
}

// CRC-32 (IEEE 802.3, reflected) through zlib: each lookup checks one bucket (~3.5 KB), and
// zlib's is several times faster than a byte-at-a-time table (perf: the table version was the
// largest part of a lookup's own CPU).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}
uint32_t crc32(const void* data, size_t n) { return crc32_update(0, data, n); }

size_t segment_bytes(uint64_t n, uint32_t bits) {
  const size_t b = size_t{1} << bits;
  return kHeaderBytes + 8 * (b + 1) + 4 * b + static_cast<size_t>(n) * kRecordBytes;
}

// ---- segments -----------------------------------------------------------------------------

// A read-only mapping of one segment file, its header checked.
class SegmentMap {
 public:
  static Result<std::unique_ptr<SegmentMap>> open(const fs::path& path) {
    auto s = std::unique_ptr<SegmentMap>(new SegmentMap);
    s->m_path = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::corrupt(path.string() + ": index segment missing: " + std::strerror(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderBytes)) {
      ::close(fd);
      return Status::corrupt(path.string() + ": index segment shorter than its header");
    }
    s->m_size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, s->m_size, PROT_READ, MAP_SHARED, fd, 0);
    s->m_fd = fd;  // kept: lookups read their bucket with pread
    if (p == MAP_FAILED) return Status::io_error(path.string() + ": cannot map the index segment");
    s->m_base = static_cast<const uint8_t*>(p);
    uint32_t version, rec_bytes, hcrc;
    std::memcpy(&version, s->m_base + 8, 4);
    std::memcpy(&rec_bytes, s->m_base + 12, 4);
    std::memcpy(&s->m_n, s->m_base + 16, 8);
    std::memcpy(&s->m_bits, s->m_base + 24, 4);
    std::memcpy(&hcrc, s->m_base + 28, 4);
    if (std::memcmp(s->m_base, kMagic, 8) != 0 || crc32(s->m_base, 28) != hcrc) {
      return Status::corrupt(path.string() + ": index segment header damaged");
    }
    if (version != kVersion || rec_bytes != kRecordBytes || s->m_bits > kMaxBucketBits) {
      return Status::unsupported(path.string() + ": index segment version " + std::to_string(version) +
                                 " (record " + std::to_string(rec_bytes) + " bytes) not supported");
    }
    if (s->m_n > (uint64_t{1} << 40) || segment_bytes(s->m_n, s->m_bits) != s->m_size) {
      return Status::corrupt(path.string() + ": index segment is " + std::to_string(s->m_size) +
                             " bytes, its header says " + std::to_string(segment_bytes(s->m_n, s->m_bits)));
    }
    const size_t buckets = size_t{1} << s->m_bits;
    s->m_first = s->m_base + kHeaderBytes;
    s->m_crcs = s->m_first + 8 * (buckets + 1);
    s->m_records = s->m_crcs + 4 * buckets;
    return s;
  }
  ~SegmentMap() {
    if (m_base) ::munmap(const_cast<uint8_t*>(m_base), m_size);
    if (m_fd >= 0) ::close(m_fd);
  }
  uint64_t n_records() const { return m_n; }
  uint32_t bits() const { return m_bits; }
  const fs::path& path() const { return m_path; }
  Rec record(uint64_t i) const {
    Rec r;
    std::memcpy(&r, m_records + i * kRecordBytes, kRecordBytes);
    return r;
  }
  // Records [lo, hi) of bucket b, after checking its bounds and checksum.
  Status bucket(uint32_t b, uint64_t* lo, uint64_t* hi) const {
    std::memcpy(lo, m_first + 8 * size_t{b}, 8);
    std::memcpy(hi, m_first + 8 * (size_t{b} + 1), 8);
    uint32_t want;
    std::memcpy(&want, m_crcs + 4 * size_t{b}, 4);
    ESCPOD_RETURN_IF_ERROR(check_bounds(b, *lo, *hi));
    return check_sum(b, m_records + *lo * kRecordBytes, *hi - *lo, want);
  }
  // Bucket b's records into *out, read with pread and checked (bounds, checksum): a lookup
  // touches one bucket, and faulting in its pages and the bucket tables' through the mapping
  // (each fault mapping ~16 pages to tear down later) costs more (bench/results/index.md,
  // Session 9).
  Status read_bucket(uint32_t b, std::vector<Rec>* out) const {
    uint64_t range[2];
    uint32_t want;
    ESCPOD_RETURN_IF_ERROR(pread_at(range, 16, static_cast<size_t>(m_first - m_base) + 8 * size_t{b}));
    ESCPOD_RETURN_IF_ERROR(pread_at(&want, 4, static_cast<size_t>(m_crcs - m_base) + 4 * size_t{b}));
    ESCPOD_RETURN_IF_ERROR(check_bounds(b, range[0], range[1]));
    out->resize(static_cast<size_t>(range[1] - range[0]));
    ESCPOD_RETURN_IF_ERROR(pread_at(out->data(), out->size() * kRecordBytes,
                                    static_cast<size_t>(m_records - m_base) + range[0] * kRecordBytes));
    return check_sum(b, out->data(), out->size(), want);
  }
  // Checks every bucket (used before a segment is merged into another).
  Status verify() const {
    uint64_t end = 0;
    for (uint32_t b = 0; b < (uint32_t{1} << m_bits); ++b) {
      uint64_t lo, hi;
      ESCPOD_RETURN_IF_ERROR(bucket(b, &lo, &hi));
      if (lo != end) return Status::corrupt(m_path.string() + ": index buckets not contiguous at " + std::to_string(b));
      end = hi;
    }
    if (end != m_n) return Status::corrupt(m_path.string() + ": index buckets do not cover the records");
    return Status::ok();
  }

 private:
  SegmentMap() = default;
  // Bucket b's stored bounds [lo, hi) within the segment's records.
  Status check_bounds(uint32_t b, uint64_t lo, uint64_t hi) const {
    if (lo > hi || hi > m_n) return damaged(b, "bounds");
    return Status::ok();
  }
  // The n records of bucket b at `records` against its stored checksum.
  Status check_sum(uint32_t b, const void* records, uint64_t n, uint32_t want) const {
    if (crc32(records, static_cast<size_t>(n) * kRecordBytes) != want) return damaged(b, "checksum");
    return Status::ok();
  }
  Status damaged(uint32_t b, const char* what) const {
    return Status::corrupt(m_path.string() + ": index bucket " + std::to_string(b) + " damaged (" + what + ")");
  }
  Status pread_at(void* dst, size_t n, size_t offset) const {
    return detail::pread_exact(m_fd, dst, n, offset, m_path.string() + ": index segment");
  }
  fs::path m_path;
  int m_fd = -1;
  const uint8_t* m_base = nullptr;
  size_t m_size = 0;
  uint64_t m_n = 0;
  uint32_t m_bits = 0;
  const uint8_t* m_first = nullptr;
  const uint8_t* m_crcs = nullptr;
  const uint8_t* m_records = nullptr;
};

// Writes `n` sorted records, pushed one at a time, as a segment (staged, renamed in place on
// finish()). Memory: the bucket tables (12 bytes per ~128 records).
class SegmentWriter {
 public:
  static Result<std::unique_ptr<SegmentWriter>> create(const fs::path& path, uint64_t n) {
    auto w = std::unique_ptr<SegmentWriter>(new SegmentWriter);
    ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(path, true));
    w->m_staged.emplace(std::move(staged));
    w->m_path = path;
    w->m_n = n;
    w->m_bits = bits_for(n);
    const size_t buckets = size_t{1} << w->m_bits;
    w->m_first.assign(buckets + 1, 0);
    w->m_crcs.assign(buckets, 0);
    w->m_file = std::fopen(w->m_staged->staging_path().c_str(), "wb");
    if (!w->m_file) return Status::io_error(w->m_staged->staging_path().string() + ": " + std::strerror(errno));
    w->m_buffer.resize(1 << 20);
    std::setvbuf(w->m_file, w->m_buffer.data(), _IOFBF, w->m_buffer.size());
    const size_t tables = kHeaderBytes + 8 * (buckets + 1) + 4 * buckets;
    w->m_ok = std::fseek(w->m_file, static_cast<long>(tables), SEEK_SET) == 0;
    return w;
  }
  ~SegmentWriter() {
    if (m_file) std::fclose(m_file);
  }
  void add(const Rec& r) {
    const uint32_t b = bucket_of(r.id.data(), m_bits);
    while (m_cur < b) m_first[++m_cur] = m_written;  // buckets before b end here
    m_crcs[b] = crc32_update(m_crcs[b], &r, kRecordBytes);
    m_ok = m_ok && std::fwrite(&r, kRecordBytes, 1, m_file) == 1;
    ++m_written;
  }
  Status finish() {
    const size_t buckets = m_crcs.size();
    while (m_cur < buckets) m_first[++m_cur] = m_written;
    if (m_written != m_n) {
      return Status::internal(m_path.string() + ": " + std::to_string(m_written) + " records written, " +
                              std::to_string(m_n) + " expected");
    }
    std::array<uint8_t, kHeaderBytes> header{};
    std::memcpy(header.data(), kMagic, 8);
    std::memcpy(header.data() + 8, &kVersion, 4);
    std::memcpy(header.data() + 12, &kRecordBytes, 4);
    std::memcpy(header.data() + 16, &m_n, 8);
    std::memcpy(header.data() + 24, &m_bits, 4);
    const uint32_t hcrc = crc32(header.data(), 28);
    std::memcpy(header.data() + 28, &hcrc, 4);
    bool ok = m_ok && std::fseek(m_file, 0, SEEK_SET) == 0 &&
              std::fwrite(header.data(), header.size(), 1, m_file) == 1 &&
              std::fwrite(m_first.data(), 8, m_first.size(), m_file) == m_first.size() &&
              std::fwrite(m_crcs.data(), 4, m_crcs.size(), m_file) == m_crcs.size();
    ok = (std::fclose(m_file) == 0) && ok;
    m_file = nullptr;
    if (!ok) return Status::io_error(m_staged->staging_path().string() + ": write failed (disk full?)");
    return m_staged->commit(FsyncMode::kFile);
  }

 private:
  SegmentWriter() = default;
  std::optional<StagedFile> m_staged;
  fs::path m_path;
  FILE* m_file = nullptr;
  std::vector<char> m_buffer;
  uint64_t m_n = 0, m_written = 0;
  uint32_t m_bits = 0, m_cur = 0;
  std::vector<uint64_t> m_first;
  std::vector<uint32_t> m_crcs;
  bool m_ok = true;
};

// ---- building: sorted runs spilled to disk, merged k ways ---------------------------------

// Reads records back from a spilled run, 1 MiB at a time.
class RunCursor {
 public:
  explicit RunCursor(const fs::path& path) : m_file(std::fopen(path.c_str(), "rb")), m_buffer(1 << 20) {
    if (m_file) std::setvbuf(m_file, m_buffer.data(), _IOFBF, m_buffer.size());
  }
  ~RunCursor() {
    if (m_file) std::fclose(m_file);
  }
  RunCursor(const RunCursor&) = delete;
  RunCursor& operator=(const RunCursor&) = delete;
  bool ok() const { return m_file != nullptr; }
  bool next(Rec* r) { return m_file && std::fread(r, kRecordBytes, 1, m_file) == 1; }

 private:
  FILE* m_file;
  std::vector<char> m_buffer;
};

// Collects records, holding at most `cap` in memory: beyond that, sorted runs go to scratch files
// beside the index. Not thread-safe (callers serialise add()).
class RunSorter {
 public:
  RunSorter(fs::path near, size_t cap) : m_near(std::move(near)), m_cap(std::max<size_t>(cap, 64)) {}
  Status add(std::span<const Rec> recs) {
    for (const Rec& r : recs) {
      m_buffer.push_back(r);
      ++m_total;
      if (m_buffer.size() >= m_cap) ESCPOD_RETURN_IF_ERROR(spill());
    }
    return Status::ok();
  }
  uint64_t total() const { return m_total; }
  size_t n_runs() const { return m_runs.size(); }
  // Streams every record added, sorted, to `sink`.
  Status merge(const std::function<Status(const Rec&)>& sink) {
    std::sort(m_buffer.begin(), m_buffer.end(), rec_less);
    if (m_runs.empty()) {
      for (const Rec& r : m_buffer) ESCPOD_RETURN_IF_ERROR(sink(r));
      return Status::ok();
    }
    std::vector<std::unique_ptr<RunCursor>> cursors;
    for (const auto& run : m_runs) {
      cursors.push_back(std::make_unique<RunCursor>(run.path()));
      if (!cursors.back()->ok()) return Status::io_error(run.path().string() + ": cannot read back");
    }
    // Source k == cursors.size() is the in-memory tail.
    size_t mem_pos = 0;
    auto pull = [&](size_t k, Rec* r) {
      if (k < cursors.size()) return cursors[k]->next(r);
      if (mem_pos == m_buffer.size()) return false;
      *r = m_buffer[mem_pos++];
      return true;
    };
    using Item = std::pair<Rec, size_t>;
    auto greater = [](const Item& a, const Item& b) { return rec_less(b.first, a.first); };
    std::priority_queue<Item, std::vector<Item>, decltype(greater)> heap(greater);
    for (size_t k = 0; k <= cursors.size(); ++k) {
      Rec r;
      if (pull(k, &r)) heap.emplace(r, k);
    }
    uint64_t n = 0;
    while (!heap.empty()) {
      auto [r, k] = heap.top();
      heap.pop();
      ESCPOD_RETURN_IF_ERROR(sink(r));
      ++n;
      Rec nr;
      if (pull(k, &nr)) heap.emplace(nr, k);
    }
    if (n != m_total) {
      return Status::io_error("index build: " + std::to_string(n) + " records read back from sorted runs, " +
                              std::to_string(m_total) + " written");
    }
    return Status::ok();
  }

 private:
  Status spill() {
    std::sort(m_buffer.begin(), m_buffer.end(), rec_less);
    ESCPOD_ASSIGN_OR_RETURN(ScratchPath run, ScratchPath::create(m_near, ".run"));
    FILE* f = std::fopen(run.path().c_str(), "wb");
    if (!f) return Status::io_error(run.path().string() + ": " + std::strerror(errno));
    bool ok = std::fwrite(m_buffer.data(), kRecordBytes, m_buffer.size(), f) == m_buffer.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return Status::io_error(run.path().string() + ": write failed (disk full?)");
    m_runs.push_back(std::move(run));
    m_buffer.clear();
    return Status::ok();
  }
  fs::path m_near;
  size_t m_cap;
  std::vector<Rec> m_buffer;
  std::vector<ScratchPath> m_runs;
  uint64_t m_total = 0;
};

// ---- manifest ----------------------------------------------------------------------------

struct Manifest {
  uint32_t next_slot = 0;
  uint32_t next_segment = 0;
  std::map<std::string, uint64_t> segments;  // name -> records
  std::vector<IndexedFile> files;
};

Result<Manifest> read_manifest(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path.string() + ": no index manifest");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& why) { return Status::corrupt(path.string() + ": index manifest damaged: " + why); };
  const size_t end_pos = text.rfind("end ");
  if (end_pos == std::string::npos || (end_pos > 0 && text[end_pos - 1] != '\n') ||
      text.size() != end_pos + 13 || text.back() != '\n') {
    return bad("no end line, or text after it");
  }
  uint32_t want = 0;
  {
    std::istringstream e(text.substr(end_pos + 4));
    e >> std::hex >> want;
    if (!e) return bad("end line unreadable");
  }
  if (crc32(text.data(), end_pos) != want) return bad("checksum mismatch");
  Manifest m;
  std::istringstream lines(text.substr(0, end_pos));
  std::string line;
  if (!std::getline(lines, line) || (line != kManifestMagic && line != kManifestMagicV1)) {
    return bad("first line is not '" + std::string(kManifestMagic) + "' (rebuild it: `escpod index --rebuild`)");
  }
  const bool has_layouts = line == kManifestMagic;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string kind;
    f >> kind;
    if (kind == "next_slot") {
      f >> m.next_slot;
    } else if (kind == "next_segment") {
      f >> m.next_segment;
    } else if (kind == "segment") {
      std::string name;
      uint64_t n = 0;
      f >> name >> n;
      m.segments[name] = n;
    } else if (kind == "file") {
      IndexedFile e;
      f >> e.slot >> e.size >> e.mtime_ns >> e.file_identifier >> e.n_reads >> e.n_batches >> e.segment;
      if (has_layouts) f >> e.layout;
      f.get();  // the single space before the path
      std::getline(f, e.path);
      if (e.path.empty()) return bad("file line without a path");
      if (e.segment != "-" && !m.segments.count(e.segment)) return bad("file " + e.path + " names unknown segment " + e.segment);
      m.files.push_back(std::move(e));
    } else {
      return bad("unknown line '" + line + "'");
    }
    if (!f && !f.eof()) return bad("line '" + line + "'");
  }
  return m;
}

Status write_manifest(const fs::path& path, const Manifest& m) {
  std::string text = std::string(kManifestMagic) + "\n";
  text += "next_slot " + std::to_string(m.next_slot) + "\n";
  text += "next_segment " + std::to_string(m.next_segment) + "\n";
  for (const auto& [name, n] : m.segments) text += "segment " + name + " " + std::to_string(n) + "\n";
  for (const auto& e : m.files) {
    text += "file " + std::to_string(e.slot) + " " + std::to_string(e.size) + " " + std::to_string(e.mtime_ns) +
            " " + e.file_identifier + " " + std::to_string(e.n_reads) + " " + std::to_string(e.n_batches) + " " +
            e.segment + " " + e.layout + " " + e.path + "\n";
  }
  char end[32];
  std::snprintf(end, sizeof end, "end %08x\n", crc32(text.data(), text.size()));
  text += end;
  ESCPOD_ASSIGN_OR_RETURN(StagedFile staged, StagedFile::create(path, true));
  {
    std::ofstream out(staged.staging_path(), std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) return Status::io_error(staged.staging_path().string() + ": write failed");
  }
  return staged.commit(FsyncMode::kFile);
}

struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
Result<FileStat> stat_file(const fs::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return Status::not_found(p.string() + ": " + std::strerror(errno));
  return FileStat{static_cast<uint64_t>(st.st_size),
                  static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// Holds an exclusive flock on the index folder's lock file.
class IndexLock {
 public:
  static Result<IndexLock> take(const fs::path& dir) {
    IndexLock l;
    l.m_fd = ::open((dir / "lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (l.m_fd < 0) return Status::io_error((dir / "lock").string() + ": " + std::strerror(errno));
    if (::flock(l.m_fd, LOCK_EX | LOCK_NB) != 0) {
      return Status::io_error(dir.string() + ": another `escpod index` is updating this index");
    }
    return l;
  }
  IndexLock(IndexLock&& o) noexcept : m_fd(o.m_fd) { o.m_fd = -1; }
  IndexLock& operator=(IndexLock&&) = delete;
  ~IndexLock() {
    if (m_fd >= 0) ::close(m_fd);
  }

 private:
  IndexLock() = default;
  int m_fd = -1;
};

// Absolute and lexically normal, without a trailing separator; symlinks are kept as named, so
// that an index root and the files below it compare as paths.
fs::path normal_path(const fs::path& p) {
  fs::path out = fs::absolute(p).lexically_normal();
  if (out.filename().empty() && out.has_parent_path()) out = out.parent_path();
  return out;
}

std::string segment_name(uint32_t k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "seg-%06u.idx", k);
  return buf;
}

// One table's run-length coded row counts ("COUNTxROWS,..." or "-"), appended to `out`.
void encode_rows(const std::vector<uint32_t>& rows, std::string* out) {
  if (rows.empty()) {
    *out += '-';
    return;
  }
  for (size_t b = 0; b < rows.size();) {
    size_t run = 1;
    while (b + run < rows.size() && rows[b + run] == rows[b]) ++run;
    if (b > 0) *out += ',';
    *out += std::to_string(run) + "x" + std::to_string(rows[b]);
    b += run;
  }
}

// Parses an unsigned decimal at `pos` of `text` (at most `max`); false when absent or too large.
bool parse_count(std::string_view text, size_t* pos, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  const size_t start = *pos;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9') {
    const auto digit = static_cast<uint64_t>(text[*pos] - '0');
    if (digit > max || v > (max - digit) / 10) return false;
    v = v * 10 + digit;
    ++*pos;
  }
  *out = v;
  return *pos > start;
}

// The inverse of encode_rows; at most `max_batches` counts (a bound from the entry, so that a
// wrong layout cannot make the reader allocate without limit).
bool decode_rows(std::string_view text, uint64_t max_batches, std::vector<uint32_t>* rows) {
  if (text == "-") return true;
  size_t pos = 0;
  while (true) {
    uint64_t run = 0, n = 0;
    if (!parse_count(text, &pos, max_batches - rows->size(), &run) || run == 0 || pos == text.size() ||
        text[pos++] != 'x' || !parse_count(text, &pos, UINT32_MAX, &n)) {
      return false;
    }
    rows->insert(rows->end(), static_cast<size_t>(run), static_cast<uint32_t>(n));
    if (pos == text.size()) return true;
    if (text[pos++] != ',') return false;
  }
}

}  // namespace

std::string encode_batch_layout(const BatchLayout& layout) {
  std::string out;
  encode_rows(layout.read_batch_rows, &out);
  out += '/';
  encode_rows(layout.signal_batch_rows, &out);
  return out;
}

Result<BatchLayout> decode_batch_layout(const IndexedFile& entry) {
  if (entry.layout.empty()) return Status::not_found(entry.path + ": the index holds no batch layout for it");
  auto bad = [&](const std::string& why) {
    return Status::corrupt(entry.path + ": batch layout '" + entry.layout + "' in the index " + why);
  };
  const std::string_view text = entry.layout;
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return bad("lacks '/'");
  BatchLayout out;
  // Each signal batch takes far more than 64 bytes of the file (its IPC message header alone):
  // a bound that keeps a wrong layout from allocating without limit.
  if (!decode_rows(text.substr(0, slash), entry.n_batches, &out.read_batch_rows) ||
      !decode_rows(text.substr(slash + 1), entry.size / 64 + 1, &out.signal_batch_rows)) {
    return bad("is unreadable");
  }
  uint64_t n_reads = 0;
  for (uint32_t rows : out.read_batch_rows) n_reads += rows;
  if (out.read_batch_rows.size() != entry.n_batches || n_reads != entry.n_reads) {
    return bad("does not match its " + std::to_string(entry.n_batches) + " batches of " +
               std::to_string(entry.n_reads) + " reads");
  }
  return out;
}

// ---- build -------------------------------------------------------------------------------------

namespace {

// The files of one build to read: indices into the new manifest's files, and their paths.
struct ScanPlan {
  std::vector<size_t> to_scan;
  std::vector<fs::path> scan_paths;
};

// The previous index's manifest (empty when rebuilding, absent or unreadable).
Manifest read_previous_manifest(const fs::path& dir, bool rebuild) {
  Manifest old;
  if (!rebuild && fs::exists(dir / "manifest")) {
    auto m = read_manifest(dir / "manifest");
    if (m.is_ok()) {
      old = std::move(m).value();
    } else {
      log::warn("{}; rebuilding the index", m.status().message());
    }
  }
  return old;
}

// Segments of the previous index that still open; files in a damaged one are scanned again.
std::map<std::string, std::unique_ptr<SegmentMap>> open_previous_segments(const fs::path& dir, const Manifest& old) {
  std::map<std::string, std::unique_ptr<SegmentMap>> segs;
  for (const auto& [name, n] : old.segments) {
    auto s = SegmentMap::open(dir / name);
    if (s.is_ok() && (*s)->n_records() == n) {
      segs[name] = std::move(s).value();
    } else {
      log::warn("{}: {}; its files are indexed again", (dir / name).string(),
                s.is_ok() ? "record count differs from the manifest" : s.status().message());
    }
  }
  return segs;
}

// Every POD5 under `root` into the new manifest `m`: entries of the previous index `old` kept
// for files unchanged since (same size, time and identifier, segment still there), the others
// planned for reading into `plan` with a new slot each.
Status plan_index_files(const fs::path& root, const std::vector<fs::path>& paths, const Manifest& old,
                        const std::map<std::string, std::unique_ptr<SegmentMap>>& segs, Manifest& m,
                        ScanPlan& plan, IndexBuildReport& rep) {
  std::unordered_map<std::string, const IndexedFile*> old_by_path;
  for (const auto& e : old.files) old_by_path[e.path] = &e;
  std::set<std::string> kept_paths;
  for (const auto& p : paths) {
    IndexedFile e;
    e.path = normal_path(p).lexically_relative(root).generic_string();
    if (e.path.find_first_of("\n\r") != std::string::npos) {
      log::warn("{}: not indexed (a line break in its name)", p.string());
      continue;
    }
    ESCPOD_ASSIGN_OR_RETURN(FileStat st, stat_file(p));
    auto it = old_by_path.find(e.path);
    // An entry from a version-1 manifest lacks the batch layout: read again to add it.
    const bool has_layout = it != old_by_path.end() && !it->second->layout.empty();
    if (has_layout && it->second->size == st.size && it->second->mtime_ns == st.mtime_ns &&
        (it->second->segment == "-" || segs.count(it->second->segment))) {
      uint64_t size = 0;
      auto footer = detail::read_footer(p, &size);
      if (footer.is_ok() && footer->file_identifier == it->second->file_identifier) {
        m.files.push_back(*it->second);
        kept_paths.insert(e.path);
        ++rep.n_files_unchanged;
        continue;
      }
    }
    if (it != old_by_path.end()) {
      if (has_layout) {
        log::info("index: {} changed since it was indexed; indexing it again", e.path);
      } else {
        log::info("index: {} was indexed by an older escpod (no batch layout); indexing it again", e.path);
      }
    }
    e.slot = m.next_slot++;
    e.size = st.size;
    e.mtime_ns = st.mtime_ns;
    plan.to_scan.push_back(m.files.size());
    plan.scan_paths.push_back(p);
    m.files.push_back(std::move(e));
  }
  for (const auto& e : old.files)
    if (!kept_paths.count(e.path)) ++rep.n_files_removed;
  return Status::ok();
}

// Reads the file at `path` into its entry `e` (identifier, batch layout, read count) and its
// read ids into `sorter` (guarded by `mutex`). kIoError when it changed since it was planned.
Status scan_index_file(const fs::path& path, IndexedFile& e, RunSorter& sorter, std::mutex& mutex) {
  ESCPOD_ASSIGN_OR_RETURN(auto reader, FileReader::open(path, OpenOptions{.validate_all_batches = false}));
  ESCPOD_ASSIGN_OR_RETURN(FileStat st, stat_file(path));
  if (st.size != e.size || st.mtime_ns != e.mtime_ns) {
    return Status::io_error(path.string() + ": changed while it was being indexed");
  }
  e.file_identifier = reader->info().file_identifier;
  e.n_batches = reader->n_read_batches();
  ESCPOD_ASSIGN_OR_RETURN(BatchLayout layout, reader->batch_layout());
  e.layout = encode_batch_layout(layout);
  std::vector<Rec> recs;
  for (size_t b = 0; b < reader->n_read_batches(); ++b) {
    if (interrupted()) return Status::cancelled("interrupted");
    ESCPOD_ASSIGN_OR_RETURN(auto ids, reader->read_batch_ids(b));
    recs.resize(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) {
      recs[r].id = ids[r].bytes;
      recs[r].slot = e.slot;
      recs[r].batch = static_cast<uint32_t>(b);
      recs[r].row = static_cast<uint32_t>(r);
    }
    e.n_reads += ids.size();
    std::lock_guard guard(mutex);
    ESCPOD_RETURN_IF_ERROR(sorter.add(recs));
  }
  return Status::ok();
}

// Scans the planned files (of `sizes` bytes) on up to n_threads threads, counting each into
// `task`. The error returned is the first failing file's in scan order; files not yet started
// are skipped once one fails.
Status scan_index_files(const ScanPlan& plan, const std::vector<uint64_t>& sizes, progress::Task& task, Manifest& m,
                        RunSorter& sorter, int n_threads) {
  std::mutex mutex;  // guards `sorter`
  auto scan_and_count = [&](size_t k) {
    Status s = scan_index_file(plan.scan_paths[k], m.files[plan.to_scan[k]], sorter, mutex);
    task.add(1, sizes[k]);
    return s;
  };
  Executor& pool = Executor::for_threads(std::max(1, n_threads));
  return parallel_for(pool, plan.to_scan.size(), scan_and_count);
}

// The records sorted so far, as one new segment named in `m` (the scanned files without reads
// get no segment, "-").
Status write_new_segment(const fs::path& dir, RunSorter& sorter, const std::vector<size_t>& to_scan, Manifest& m) {
  if (sorter.total() == 0) {
    for (size_t k : to_scan) m.files[k].segment = "-";
    return Status::ok();
  }
  const std::string name = segment_name(m.next_segment++);
  ESCPOD_ASSIGN_OR_RETURN(auto writer, SegmentWriter::create(dir / name, sorter.total()));
  ESCPOD_RETURN_IF_ERROR(sorter.merge([&](const Rec& r) {
    writer->add(r);
    return Status::ok();
  }));
  ESCPOD_RETURN_IF_ERROR(writer->finish());
  m.segments[name] = sorter.total();
  for (size_t k : to_scan)
    if (m.files[k].n_reads > 0) m.files[k].segment = name; else m.files[k].segment = "-";
  return Status::ok();
}

// Merges every segment of `m` into one holding the `live` records of its files, dropping the
// records of slots no file uses any more.
Status merge_segments(const fs::path& dir, uint64_t live, Manifest& m) {
  std::vector<std::unique_ptr<SegmentMap>> inputs;
  for (const auto& [name, n] : m.segments) {
    auto opened = SegmentMap::open(dir / name);
    Status checked = opened.is_ok() ? (*opened)->verify() : opened.status();
    if (!checked.is_ok()) {
      return Status(checked.code(), checked.message() + " (while merging segments; `escpod index --rebuild` "
                                                        "reads every file again)");
    }
    inputs.push_back(std::move(opened).value());
  }
  std::set<uint32_t> live_slots;
  for (const auto& e : m.files) live_slots.insert(e.slot);
  std::vector<uint64_t> pos(inputs.size(), 0);
  using Item = std::pair<Rec, size_t>;
  auto greater = [](const Item& a, const Item& b) { return rec_less(b.first, a.first); };
  std::priority_queue<Item, std::vector<Item>, decltype(greater)> heap(greater);
  auto advance = [&](size_t k) {
    while (pos[k] < inputs[k]->n_records()) {
      Rec r = inputs[k]->record(pos[k]++);
      if (live_slots.count(r.slot)) {
        heap.emplace(r, k);
        return;
      }
    }
  };
  for (size_t k = 0; k < inputs.size(); ++k) advance(k);
  const std::string name = segment_name(m.next_segment++);
  ESCPOD_ASSIGN_OR_RETURN(auto writer, SegmentWriter::create(dir / name, live));
  while (!heap.empty()) {
    auto [top, k] = heap.top();
    heap.pop();
    writer->add(top);
    advance(k);
  }
  ESCPOD_RETURN_IF_ERROR(writer->finish());
  m.segments.clear();
  m.segments[name] = live;
  for (auto& e : m.files) e.segment = e.n_reads > 0 ? name : "-";
  return Status::ok();
}

}  // namespace

Status build_read_index(const fs::path& root_in, const IndexBuildOptions& options, IndexBuildReport* report) {
  std::error_code ec;
  const fs::path root = normal_path(root_in);
  if (!fs::is_directory(root, ec)) return Status::invalid_argument(root_in.string() + ": not a folder");
  const fs::path dir = root / kReadIndexDirName;
  fs::create_directories(dir, ec);
  if (ec) return Status::io_error(dir.string() + ": cannot create: " + ec.message());
  ESCPOD_ASSIGN_OR_RETURN(IndexLock lock, IndexLock::take(dir));
  IndexBuildReport local;
  IndexBuildReport& rep = report ? *report : local;
  rep = IndexBuildReport{};

  const Manifest old = read_previous_manifest(dir, options.rebuild);
  const std::map<std::string, std::unique_ptr<SegmentMap>> segs = open_previous_segments(dir, old);
  ESCPOD_ASSIGN_OR_RETURN(auto paths, collect_pod5_inputs({root.string()}));
  Manifest m;
  m.next_slot = old.next_slot;
  m.next_segment = old.next_segment;
  ScanPlan plan;
  ESCPOD_RETURN_IF_ERROR(plan_index_files(root, paths, old, segs, m, plan, rep));

  // Scan new and changed files into sorted runs.
  RunSorter sorter(dir / "run", std::max<size_t>(options.memory_bytes / kRecordBytes, 64));
  uint64_t scan_bytes = 0;
  const std::vector<uint64_t> scan_sizes = file_sizes(plan.scan_paths, &scan_bytes);
  progress::Task task(plan.to_scan.size(), scan_bytes, {.label = "index", .unit = "files"});
  ESCPOD_RETURN_IF_ERROR(scan_index_files(plan, scan_sizes, task, m, sorter, options.n_threads));
  rep.n_files_scanned = plan.to_scan.size();
  rep.n_spilled_runs = sorter.n_runs();
  rep.n_reads_added = sorter.total();
  ESCPOD_RETURN_IF_ERROR(write_new_segment(dir, sorter, plan.to_scan, m));
  // Old segments still holding a live file's records.
  for (const auto& e : m.files) {
    if (e.segment != "-" && !m.segments.count(e.segment)) m.segments[e.segment] = old.segments.at(e.segment);
  }

  // Compact: merge every segment into one when there are too many or most records are dead.
  uint64_t live = 0, stored = 0;
  for (const auto& e : m.files) live += e.n_reads;
  for (const auto& [name, n] : m.segments) stored += n;
  if (m.segments.size() > kMaxSegments || (m.segments.size() > 1 && stored - live > live)) {
    ESCPOD_RETURN_IF_ERROR(merge_segments(dir, live, m));
    rep.compacted = true;
  }
  ESCPOD_RETURN_IF_ERROR(write_manifest(dir / "manifest", m));
  // Segments no longer referenced go once the new manifest is in place.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("seg-", 0) == 0 && !m.segments.count(fname)) fs::remove(entry.path(), ec);
  }
  rep.n_files = m.files.size();
  rep.n_reads = live;
  rep.n_segments = m.segments.size();
  return Status::ok();
}

// ---- lookup ------------------------------------------------------------------------------------

struct ReadIndex::Impl {
  fs::path root;
  Manifest manifest;
  std::vector<std::unique_ptr<SegmentMap>> segments;
  std::unordered_map<uint32_t, size_t> live_slots;       // slot -> manifest file
  std::unordered_map<std::string, size_t> by_path;       // relative path -> manifest file
};

ReadIndex::ReadIndex(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
ReadIndex::~ReadIndex() = default;

Result<std::unique_ptr<ReadIndex>> ReadIndex::open(const fs::path& root_in) {
  auto impl = std::make_unique<Impl>();
  impl->root = normal_path(root_in);
  const fs::path dir = impl->root / kReadIndexDirName;
  if (!fs::exists(dir / "manifest")) return Status::not_found(dir.string() + ": no read-id index");
  ESCPOD_ASSIGN_OR_RETURN(impl->manifest, read_manifest(dir / "manifest"));
  for (const auto& [name, n] : impl->manifest.segments) {
    ESCPOD_ASSIGN_OR_RETURN(auto s, SegmentMap::open(dir / name));
    if (s->n_records() != n) {
      return Status::corrupt((dir / name).string() + ": holds " + std::to_string(s->n_records()) +
                             " records, the manifest says " + std::to_string(n));
    }
    impl->segments.push_back(std::move(s));
  }
  for (size_t i = 0; i < impl->manifest.files.size(); ++i) {
    impl->live_slots[impl->manifest.files[i].slot] = i;
    impl->by_path[impl->manifest.files[i].path] = i;
  }
  return std::unique_ptr<ReadIndex>(new ReadIndex(std::move(impl)));
}

fs::path ReadIndex::find_root(const fs::path& file) {
  std::error_code ec;
  fs::path dir = normal_path(file).parent_path();
  while (!dir.empty()) {
    if (fs::exists(dir / kReadIndexDirName / "manifest", ec)) return dir;
    if (dir == dir.root_path()) break;
    dir = dir.parent_path();
  }
  return {};
}

const fs::path& ReadIndex::root() const { return m_impl->root; }
const std::vector<IndexedFile>& ReadIndex::files() const { return m_impl->manifest.files; }

const IndexedFile* ReadIndex::fresh_entry(const fs::path& file) const {
  const fs::path abs = normal_path(file);
  auto it = m_impl->by_path.find(abs.lexically_relative(m_impl->root).generic_string());
  if (it == m_impl->by_path.end()) return nullptr;
  const IndexedFile& e = m_impl->manifest.files[it->second];
  auto st = stat_file(abs);
  if (!st.is_ok() || st->size != e.size || st->mtime_ns != e.mtime_ns) return nullptr;
  return &e;
}

const IndexedFile* ReadIndex::verified_entry(const fs::path& file) const {
  const IndexedFile* e = fresh_entry(file);
  if (!e) return nullptr;
  uint64_t size = 0;
  auto footer = detail::read_footer(file, &size);
  return footer.is_ok() && footer->file_identifier == e->file_identifier ? e : nullptr;
}

Status ReadIndex::lookup(const ReadId& id, std::vector<IndexHit>* out) const {
  thread_local std::vector<Rec> bucket;
  for (const auto& seg : m_impl->segments) {
    ESCPOD_RETURN_IF_ERROR(seg->read_bucket(bucket_of(id.bytes.data(), seg->bits()), &bucket));
    // First record with this id (records of a bucket are sorted by id).
    auto it = std::lower_bound(bucket.begin(), bucket.end(), id, [](const Rec& r, const ReadId& want) {
      return std::memcmp(r.id.data(), want.bytes.data(), 16) < 0;
    });
    for (; it != bucket.end() && std::memcmp(it->id.data(), id.bytes.data(), 16) == 0; ++it) {
      if (m_impl->live_slots.count(it->slot)) out->push_back({it->slot, it->batch, it->row});
    }
  }
  return Status::ok();
}

}  // namespace escpod::pod5
