// The read-id index: build, lookups equal to a plain scan, incremental updates, staleness,
// damage, spilling sorted runs, compaction, and find_reads with and without it.
#include "escpod/pod5/read_index.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "escpod/pipeline/ops/pod5_copy.hpp"
#include "escpod/pipeline/ops/read_lookup.hpp"
#include "escpod/pod5/file_writer.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/vbz.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {
namespace fs = std::filesystem;

using Place = std::tuple<std::string, uint32_t, uint32_t>;  // relative path, batch, row

const std::vector<std::string> kSharedFiles = {
    "pod5/multi_fast5_zip_v0.pod5",         "pod5/multi_fast5_zip_v1.pod5",
    "pod5/multi_fast5_zip_v2.pod5",         "pod5/multi_fast5_zip_v3.pod5",
    "escapepod/drna/yeast_trna_reads.pod5", "escapepod/charging/trna_reads.pod5",
    "warpdemux/sample/small_pod5_0.pod5",   "warpdemux/sample/small_pod5_1.pod5",
    "warpdemux/sample/small_pod5_2.pod5",   "warpdemux/sample/small_pod5_3.pod5"};

// Copies shared files into `dir` under their shared-data relative paths (sub-folders included).
void copy_in(const fs::path& dir, const std::vector<std::string>& rels) {
  for (const auto& rel : rels) {
    fs::create_directories((dir / rel).parent_path());
    fs::copy_file(test::shared_data(rel), dir / rel, fs::copy_options::overwrite_existing);
    fs::permissions(dir / rel, fs::perms::owner_write, fs::perm_options::add);
  }
}

// Every read of every *.pod5 under root, by a plain scan.
std::map<ReadId, std::set<Place>> scan(const fs::path& root) {
  std::map<ReadId, std::set<Place>> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".pod5") continue;
    auto reader = FileReader::open(entry.path());
    EXPECT_TRUE(reader.is_ok()) << reader.status().to_string();
    if (!reader.is_ok()) continue;
    const std::string rel = entry.path().lexically_relative(root).generic_string();
    for (size_t b = 0; b < (*reader)->n_read_batches(); ++b) {
      auto batch = (*reader)->read_batch(b);
      EXPECT_TRUE(batch.is_ok());
      for (size_t r = 0; r < batch->size(); ++r) {
        out[batch->read_id[r]].emplace(rel, static_cast<uint32_t>(b), static_cast<uint32_t>(r));
      }
    }
  }
  return out;
}

// Looks every scanned read up in the index and checks the places are exactly the scanned ones.
void expect_index_equals_scan(const fs::path& root) {
  auto index = ReadIndex::open(root);
  ASSERT_TRUE(index.is_ok()) << index.status().to_string();
  std::map<uint32_t, std::string> path_of;
  for (const auto& f : (*index)->files()) path_of[f.slot] = f.path;
  const auto truth = scan(root);
  ASSERT_FALSE(truth.empty());
  std::vector<IndexHit> hits;
  for (const auto& [id, places] : truth) {
    hits.clear();
    ASSERT_TRUE((*index)->lookup(id, &hits).is_ok());
    std::set<Place> got;
    for (const auto& h : hits) got.emplace(path_of.at(h.slot), h.batch, h.row);
    ASSERT_EQ(got, places) << id.to_string();
  }
  // An id in no file.
  hits.clear();
  ASSERT_TRUE((*index)->lookup(ReadId::random(), &hits).is_ok());
  EXPECT_TRUE(hits.empty());
}

IndexBuildReport build(const fs::path& root, IndexBuildOptions options = {}) {
  IndexBuildReport rep;
  Status s = build_read_index(root, options, &rep);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return rep;
}

TEST(ReadIndex, LookupEqualsScanForEverySharedFile) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, kSharedFiles);
  IndexBuildOptions options;
  options.n_threads = 2;
  auto rep = build(root, options);
  EXPECT_EQ(rep.n_files, kSharedFiles.size());
  EXPECT_EQ(rep.n_files_scanned, kSharedFiles.size());
  EXPECT_EQ(rep.n_segments, 1u);
  const auto truth = scan(root);
  uint64_t n_reads = 0;
  for (const auto& [id, places] : truth) n_reads += places.size();
  EXPECT_EQ(rep.n_reads, n_reads);
  // The four official files hold the same 10 reads: each of those ids is in four places.
  EXPECT_EQ(truth.begin()->second.size() >= 1, true);
  size_t in_four = 0;
  for (const auto& [id, places] : truth) in_four += places.size() == 4;
  EXPECT_EQ(in_four, 10u);
  expect_index_equals_scan(root);
}

TEST(ReadIndex, SpillsSortedRunsWithinItsMemoryBound) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, {"warpdemux/sample/small_pod5_0.pod5", "warpdemux/sample/small_pod5_1.pod5",
                 "escapepod/drna/yeast_trna_reads.pod5"});
  IndexBuildOptions options;
  options.memory_bytes = 1;  // the floor: 64 records a run
  auto rep = build(root, options);
  EXPECT_GT(rep.n_reads, 5 * 64u);
  EXPECT_GE(rep.n_spilled_runs, rep.n_reads / 64 - 1);
  expect_index_equals_scan(root);
  // No run files are left behind.
  for (const auto& e : fs::directory_iterator(root / kReadIndexDirName)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "manifest" || name == "lock" || name.rfind("seg-", 0) == 0) << name;
  }
}

TEST(ReadIndex, IncrementalAddScansOnlyNewFiles) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, {"pod5/multi_fast5_zip_v3.pod5", "escapepod/drna/yeast_trna_reads.pod5"});
  auto first = build(root);
  EXPECT_EQ(first.n_files_scanned, 2u);
  copy_in(root, {"warpdemux/sample/small_pod5_2.pod5"});
  auto second = build(root);
  EXPECT_EQ(second.n_files_scanned, 1u);
  EXPECT_EQ(second.n_files_unchanged, 2u);
  EXPECT_EQ(second.n_files, 3u);
  EXPECT_EQ(second.n_segments, 2u);
  expect_index_equals_scan(root);
  auto third = build(root);  // nothing changed: nothing scanned
  EXPECT_EQ(third.n_files_scanned, 0u);
  EXPECT_EQ(third.n_reads_added, 0u);
  // A removed file drops out.
  fs::remove(root / "pod5/multi_fast5_zip_v3.pod5");
  auto fourth = build(root);
  EXPECT_EQ(fourth.n_files, 2u);
  EXPECT_EQ(fourth.n_files_removed, 1u);
  expect_index_equals_scan(root);
}

TEST(ReadIndex, CompactsWhenSegmentsPileUp) {
  const fs::path root = test::scratch_dir("data");
  bool compacted = false;
  for (size_t k = 0; k < kSharedFiles.size(); ++k) {
    copy_in(root, {kSharedFiles[k]});
    auto rep = build(root);
    EXPECT_LE(rep.n_segments, 8u);
    compacted = compacted || rep.compacted;
  }
  EXPECT_TRUE(compacted);
  expect_index_equals_scan(root);
}

TEST(ReadIndex, ChangedFileIsStaleUntilReindexed) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, {"pod5/multi_fast5_zip_v3.pod5", "escapepod/drna/yeast_trna_reads.pod5"});
  build(root);
  const fs::path changed = root / "escapepod/drna/yeast_trna_reads.pod5";
  {
    auto index = ReadIndex::open(root);
    ASSERT_TRUE(index.is_ok());
    EXPECT_NE((*index)->fresh_entry(changed), nullptr);
    // Touched: same bytes, new mtime.
    fs::last_write_time(changed, fs::last_write_time(changed) + std::chrono::seconds(5));
    EXPECT_EQ((*index)->fresh_entry(changed), nullptr);
    EXPECT_NE((*index)->fresh_entry(root / "pod5/multi_fast5_zip_v3.pod5"), nullptr);
  }
  // Rewritten with other reads: the update reads it again and the index follows.
  fs::copy_file(test::shared_data("escapepod/charging/trna_reads.pod5"), changed,
                fs::copy_options::overwrite_existing);
  auto rep = build(root);
  EXPECT_EQ(rep.n_files_scanned, 1u);
  EXPECT_EQ(rep.n_files_unchanged, 1u);
  expect_index_equals_scan(root);
}

TEST(ReadIndex, DamageIsDetectedNeverAnswered) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, {"warpdemux/sample/small_pod5_0.pod5", "pod5/multi_fast5_zip_v3.pod5"});
  build(root);
  const fs::path dir = root / kReadIndexDirName;
  fs::path seg;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("seg-", 0) == 0) seg = e.path();
  ASSERT_FALSE(seg.empty());
  const auto truth = scan(root);

  // A flipped byte among the records: the bucket holding it fails its checksum on lookup.
  const auto size = fs::file_size(seg);
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 20));
    char c;
    f.seekg(static_cast<std::streamoff>(size - 20));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(size - 20));
    f.put(static_cast<char>(c ^ 0x40));
  }
  {
    auto index = ReadIndex::open(root);
    ASSERT_TRUE(index.is_ok());
    size_t n_corrupt = 0;
    std::vector<IndexHit> hits;
    for (const auto& [id, places] : truth) {
      hits.clear();
      Status s = (*index)->lookup(id, &hits);
      if (!s.is_ok()) {
        EXPECT_EQ(s.code(), StatusCode::kCorrupt);
        ++n_corrupt;
      }
    }
    EXPECT_GE(n_corrupt, 1u);
  }
  // find_reads falls back to scanning: the right reads all the same.
  {
    std::vector<fs::path> inputs = {root / "warpdemux/sample/small_pod5_0.pod5", root / "pod5/multi_fast5_zip_v3.pod5"};
    std::vector<ReadId> ids;
    for (const auto& [id, places] : truth) ids.push_back(id);
    std::vector<ReadId> missing;
    auto found = pipeline::find_reads(inputs, ids, true, &missing);
    ASSERT_TRUE(found.is_ok()) << found.status().to_string();
    EXPECT_TRUE(missing.empty());
    ASSERT_EQ(found->size(), ids.size());
    for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ((*found)[k].batch.read_id[0], ids[k]);
  }
  // A truncated segment: the index does not open.
  fs::resize_file(seg, size - 28);
  auto truncated = ReadIndex::open(root);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorrupt);
  // A damaged manifest: refused, and the next update rebuilds the whole index.
  {
    std::ofstream f(dir / "manifest", std::ios::app);
    f << "file 99 1 1 x 1 1 seg-000000.idx bogus.pod5\n";
  }
  auto damaged = ReadIndex::open(root);
  ASSERT_FALSE(damaged.is_ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorrupt);
  auto rep = build(root);
  EXPECT_EQ(rep.n_files_scanned, 2u);
  expect_index_equals_scan(root);
}

TEST(ReadIndex, FindReadsSameWithAndWithoutIndex) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, {"warpdemux/sample/small_pod5_1.pod5", "pod5/multi_fast5_zip_v1.pod5", "pod5/multi_fast5_zip_v3.pod5"});
  std::vector<fs::path> inputs = {root / "pod5/multi_fast5_zip_v3.pod5", root / "warpdemux/sample/small_pod5_1.pod5",
                                  root / "pod5/multi_fast5_zip_v1.pod5"};
  const auto truth = scan(root);
  std::vector<ReadId> ids;
  size_t k = 0;
  for (const auto& [id, places] : truth)
    if (k++ % 7 == 0) ids.push_back(id);
  ids.push_back(ReadId::random());  // in no file
  std::vector<ReadId> missing_plain, missing_indexed;
  auto plain = pipeline::find_reads(inputs, ids, true, &missing_plain);  // no index yet
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  build(root);
  auto plan = pipeline::plan_id_lookup(inputs, ids, true, 1);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->n_indexed, 3u);
  auto indexed = pipeline::find_reads(inputs, ids, true, &missing_indexed);
  ASSERT_TRUE(indexed.is_ok()) << indexed.status().to_string();
  ASSERT_EQ(plain->size(), ids.size() - 1);
  ASSERT_EQ(indexed->size(), plain->size());
  EXPECT_EQ(missing_plain, missing_indexed);
  ASSERT_EQ(missing_plain.size(), 1u);
  for (size_t i = 0; i < plain->size(); ++i) {
    const auto& a = (*plain)[i];
    const auto& b = (*indexed)[i];
    EXPECT_EQ(a.file->path(), b.file->path());  // the first file in input order holding it
    EXPECT_EQ(a.batch.read_id[0], b.batch.read_id[0]);
    EXPECT_EQ(a.batch.first_read_idx, b.batch.first_read_idx);
    EXPECT_EQ(a.batch.num_samples[0], b.batch.num_samples[0]);
    EXPECT_EQ(a.batch.signal_rows, b.batch.signal_rows);
    EXPECT_EQ(a.batch.channel[0], b.batch.channel[0]);
  }
}

// Files opened for random access (batches validated and signal batches loaded on first use)
// read exactly as files opened the usual way: every field, row slices and every sample.
TEST(ReadIndex, LazyOpenReadsTheSameAsEagerOpen) {
  for (const auto& rel : kSharedFiles) {
    const fs::path path = test::shared_data(rel);
    auto eager = FileReader::open(path);
    auto lazy = FileReader::open(path, OpenOptions{.validate_all_batches = false});
    ASSERT_TRUE(eager.is_ok() && lazy.is_ok()) << rel;
    const FileReader& e = **eager;
    const FileReader& l = **lazy;
    ASSERT_EQ(e.n_read_batches(), l.n_read_batches());
    VbzCodec codec;
    std::vector<int16_t> a, b;
    for (size_t k = 0; k < e.n_read_batches(); ++k) {
      auto be = e.read_batch(k);
      ASSERT_TRUE(be.is_ok());
      // Rows from the end first: the lazy reader's signal batches load out of order.
      for (size_t i = be->size(); i-- > 0;) {
        auto one = l.read_batch_rows(k, i, 1);
        ASSERT_TRUE(one.is_ok()) << one.status().to_string();
        ASSERT_EQ(one->read_id[0], be->read_id[i]);
        ASSERT_EQ(one->first_read_idx, be->first_read_idx + i);
        ASSERT_EQ(one->num_samples[0], be->num_samples[i]) << rel;
        ASSERT_EQ(one->channel[0], be->channel[i]);
        ASSERT_EQ(one->end_reason_idx[0], be->end_reason_idx[i]);
        ASSERT_EQ(std::vector<uint64_t>(one->rows_of(0).begin(), one->rows_of(0).end()),
                  std::vector<uint64_t>(be->rows_of(i).begin(), be->rows_of(i).end()));
        a.resize(be->num_samples[i]);
        b.resize(be->num_samples[i]);
        ASSERT_TRUE(e.read_signal(be->rows_of(i), a, codec).is_ok());
        ASSERT_TRUE(l.read_signal(one->rows_of(0), b, codec).is_ok());
        ASSERT_EQ(a, b) << rel << " read " << be->read_id[i].to_string();
      }
      auto ids = l.read_batch_ids(k);
      ASSERT_TRUE(ids.is_ok());
      EXPECT_EQ(*ids, be->read_id);
    }
    auto se = e.signal_table_info();
    auto sl = l.signal_table_info();
    ASSERT_TRUE(se.is_ok() && sl.is_ok());
    EXPECT_EQ(se->n_rows, sl->n_rows);
    EXPECT_EQ(se->n_batches, sl->n_batches);
    EXPECT_EQ(se->n_samples, sl->n_samples);
    EXPECT_EQ(se->uniform, sl->uniform);
  }
}

// CRC-32 (IEEE, reflected), bit by bit: an independent check of the manifest's end line.
uint32_t crc32_bitwise(const std::string& text) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : text) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

// The manifest's lines before its end line.
std::vector<std::string> manifest_lines(const fs::path& root) {
  std::ifstream in(root / kReadIndexDirName / "manifest");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("end ", 0) != 0) lines.push_back(line);
  return lines;
}

// Writes `lines` as the manifest, with a correct checksum line.
void write_manifest(const fs::path& root, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  char end[32];
  std::snprintf(end, sizeof end, "end %08x\n", crc32_bitwise(text));
  std::ofstream(root / kReadIndexDirName / "manifest", std::ios::binary | std::ios::trunc) << text << end;
}

// Field k (0-based, space-separated) of a manifest line.
std::string field(const std::string& line, size_t k) {
  std::istringstream f(line);
  std::string w;
  for (size_t i = 0; i <= k; ++i) f >> w;
  return w;
}

TEST(ReadIndex, BatchLayoutCoding) {
  EXPECT_EQ(encode_batch_layout({{1000, 1000, 371}, {100, 100, 100, 37}}), "2x1000,1x371/3x100,1x37");
  EXPECT_EQ(encode_batch_layout({}), "-/-");
  EXPECT_EQ(encode_batch_layout({{5}, {1, 2, 2, 1}}), "1x5/1x1,2x2,1x1");
  IndexedFile e;
  e.path = "a.pod5";
  e.size = 1 << 20;
  e.n_batches = 3;
  e.n_reads = 2371;
  e.layout = "2x1000,1x371/3x100,1x37";
  auto d = decode_batch_layout(e);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->read_batch_rows, (std::vector<uint32_t>{1000, 1000, 371}));
  EXPECT_EQ(d->signal_batch_rows, (std::vector<uint32_t>{100, 100, 100, 37}));
  // Layouts that disagree with their entry or cannot be read are refused, naming the file.
  for (const char* bad : {"2x1000,1x370/3x100", "3x1000/-", "2x1000,1x371", "2x1000,1x371/0x5",
                          "2x1000,1x371/3x", "2x1000,1x371/99999999999x100", "2x1000;1x371/-", ""}) {
    e.layout = bad;
    auto r = decode_batch_layout(e);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), *bad ? StatusCode::kCorrupt : StatusCode::kNotFound) << bad;
    EXPECT_NE(r.status().message().find("a.pod5"), std::string::npos) << r.status().message();
  }
}

// The manifest stores each file's batch layout, equal to what a full open of the file finds.
TEST(ReadIndex, ManifestStoresEachFilesBatchLayout) {
  const fs::path root = test::scratch_dir("data");
  copy_in(root, kSharedFiles);
  build(root);
  const auto lines = manifest_lines(root);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "escpod-read-index 2");
  auto index = ReadIndex::open(root);
  ASSERT_TRUE(index.is_ok()) << index.status().to_string();
  ASSERT_EQ((*index)->files().size(), kSharedFiles.size());
  for (const auto& entry : (*index)->files()) {
    auto eager = FileReader::open(root / entry.path);
    ASSERT_TRUE(eager.is_ok());
    auto truth = (*eager)->batch_layout();
    ASSERT_TRUE(truth.is_ok()) << truth.status().to_string();
    auto sig = (*eager)->signal_table_info();
    ASSERT_TRUE(sig.is_ok());
    EXPECT_EQ(truth->signal_batch_rows.size(), sig->n_batches) << entry.path;
    EXPECT_EQ(truth->read_batch_rows.size(), (*eager)->n_read_batches()) << entry.path;
    auto stored = decode_batch_layout(entry);
    ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
    EXPECT_EQ(*stored, *truth) << entry.path << ": " << entry.layout;
    EXPECT_EQ(entry.layout, encode_batch_layout(*truth));
  }
}

// Reads every row of `l` one at a time (from the end) and checks it against `e`, fields and signal.
void expect_same_reads(const FileReader& e, const FileReader& l, const std::string& rel) {
  ASSERT_EQ(e.n_read_batches(), l.n_read_batches()) << rel;
  VbzCodec codec;
  std::vector<int16_t> a, b;
  for (size_t k = 0; k < e.n_read_batches(); ++k) {
    auto be = e.read_batch(k);
    ASSERT_TRUE(be.is_ok());
    for (size_t i = be->size(); i-- > 0;) {
      auto one = l.read_batch_rows(k, i, 1);
      ASSERT_TRUE(one.is_ok()) << one.status().to_string();
      ASSERT_EQ(one->read_id[0], be->read_id[i]);
      ASSERT_EQ(one->first_read_idx, be->first_read_idx + i);
      ASSERT_EQ(one->num_samples[0], be->num_samples[i]) << rel;
      ASSERT_EQ(one->run_info_idx[0], be->run_info_idx[i]);
      a.resize(be->num_samples[i]);
      b.resize(be->num_samples[i]);
      ASSERT_TRUE(e.read_signal(be->rows_of(i), a, codec).is_ok());
      ASSERT_TRUE(l.read_signal(one->rows_of(0), b, codec).is_ok());
      ASSERT_EQ(a, b) << rel << " read " << be->read_id[i].to_string();
    }
  }
}

// Copies `src` to `dst` in reads batches of 50 rows and signal batches of 30.
void write_small_batches(const fs::path& src, const fs::path& dst) {
  auto reader = FileReader::open(src);
  ASSERT_TRUE(reader.is_ok());
  WriterOptions options;
  options.read_batch_rows = 50;
  options.signal_batch_rows = 30;
  auto writer = FileWriter::create(dst, options);
  ASSERT_TRUE(writer.is_ok()) << writer.status().to_string();
  for (const auto& ri : (*reader)->run_infos()) ASSERT_TRUE((*writer)->add_run_info(ri).is_ok());
  pipeline::CopyScratch scratch;
  for (size_t b = 0; b < (*reader)->n_read_batches(); ++b) {
    auto batch = (*reader)->read_batch(b);
    ASSERT_TRUE(batch.is_ok());
    for (size_t i = 0; i < batch->size(); ++i) {
      ASSERT_TRUE(pipeline::copy_read(**reader, *batch, i, **writer, scratch, nullptr).is_ok());
    }
  }
  ASSERT_TRUE((*writer)->close().is_ok());
}

// A file opened with its batch layout given reads exactly as one opened the usual way; a layout
// that does not describe the file is an error naming the file, never a wrong read.
TEST(ReadIndex, OpenWithGivenLayout) {
  for (const auto& rel : kSharedFiles) {
    const fs::path path = test::shared_data(rel);
    auto eager = FileReader::open(path);
    ASSERT_TRUE(eager.is_ok()) << rel;
    auto layout = (*eager)->batch_layout();
    ASSERT_TRUE(layout.is_ok());
    auto given = FileReader::open(path, OpenOptions{.validate_all_batches = false, .layout = &*layout});
    ASSERT_TRUE(given.is_ok()) << rel << ": " << given.status().to_string();
    expect_same_reads(**eager, **given, rel);
    auto again = (*given)->batch_layout();
    ASSERT_TRUE(again.is_ok());
    EXPECT_EQ(*again, *layout);
    EXPECT_EQ((*given)->info().n_reads, (*eager)->info().n_reads);
    auto se = (*eager)->signal_table_info();
    auto sg = (*given)->signal_table_info();
    ASSERT_TRUE(se.is_ok() && sg.is_ok());
    EXPECT_EQ(se->n_rows, sg->n_rows);
    EXPECT_EQ(se->n_samples, sg->n_samples);
    EXPECT_EQ(se->uniform, sg->uniform);

    // One batch too many: refused at open.
    BatchLayout extra = *layout;
    extra.signal_batch_rows.push_back(1);
    auto refused = FileReader::open(path, OpenOptions{.validate_all_batches = false, .layout = &extra});
    ASSERT_FALSE(refused.is_ok()) << rel;
    EXPECT_EQ(refused.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(refused.status().message().find(path.string()), std::string::npos);
  }
  // A wrong row count: the batch it belongs to is refused when loaded (a file with several
  // reads batches: the shared files have one each).
  const fs::path path = test::scratch_dir("small_batches") / "reads.pod5";
  write_small_batches(test::shared_data("escapepod/drna/yeast_trna_reads.pod5"), path);
  auto eager = FileReader::open(path);
  ASSERT_TRUE(eager.is_ok());
  auto layout = (*eager)->batch_layout();
  ASSERT_TRUE(layout.is_ok());
  ASSERT_EQ(layout->read_batch_rows, (std::vector<uint32_t>{50, 50, 50, 30}));
  ASSERT_GE(layout->signal_batch_rows.size(), 6u);
  EXPECT_EQ(layout->signal_batch_rows[0], 30u);
  {
    auto given = FileReader::open(path, OpenOptions{.validate_all_batches = false, .layout = &*layout});
    ASSERT_TRUE(given.is_ok());
    expect_same_reads(**eager, **given, "small batches");
  }
  BatchLayout wrong_reads = *layout;
  wrong_reads.read_batch_rows[0] -= 1;
  auto r = FileReader::open(path, OpenOptions{.validate_all_batches = false, .layout = &wrong_reads});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();  // batch 0 is not read at open
  auto b0 = (*r)->read_batch(0);
  ASSERT_FALSE(b0.is_ok());
  EXPECT_EQ(b0.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(b0.status().message().find("reads batch 0 holds"), std::string::npos) << b0.status().message();
  BatchLayout wrong_signal = *layout;
  wrong_signal.signal_batch_rows[0] += 1;
  auto s = FileReader::open(path, OpenOptions{.validate_all_batches = false, .layout = &wrong_signal});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  // Decoding a read checks its signal rows: batch 0 itself does not hold the rows said...
  auto first = (*s)->read_batch_rows(0, 0, 1);
  ASSERT_FALSE(first.is_ok());
  EXPECT_EQ(first.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(first.status().message().find("signal batch 0 holds 30 rows"), std::string::npos)
      << first.status().message();
  // ...and the later batches are shifted by one row: their chunks belong to other reads.
  auto later = (*s)->read_batch_rows(2, 0, 1);
  ASSERT_FALSE(later.is_ok());
  EXPECT_EQ(later.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(later.status().message().find("belongs to another read"), std::string::npos) << later.status().message();
  EXPECT_NE(later.status().message().find(path.string()), std::string::npos);
}

// An index written before batch layouts were stored (manifest version 1) is still used, and the
// next update reads its files again to add their layouts.
TEST(ReadIndex, Version1ManifestIsReadThenUpgraded) {
  const fs::path root = test::scratch_dir("data");
  const std::vector<std::string> rels = {"warpdemux/sample/small_pod5_0.pod5", "pod5/multi_fast5_zip_v1.pod5",
                                         "escapepod/drna/yeast_trna_reads.pod5"};
  copy_in(root, rels);
  build(root);
  std::vector<std::string> v1;
  for (const auto& line : manifest_lines(root)) {
    if (line.rfind("escpod-read-index", 0) == 0) {
      v1.push_back("escpod-read-index 1");
    } else if (line.rfind("file ", 0) == 0) {
      // Drop the layout (field 8): "file SLOT SIZE MTIME ID READS BATCHES SEGMENT LAYOUT PATH".
      std::string out = line;
      const std::string layout = field(line, 8);
      out.erase(out.find(" " + layout + " "), layout.size() + 1);
      v1.push_back(out);
    } else {
      v1.push_back(line);
    }
  }
  write_manifest(root, v1);
  {
    auto index = ReadIndex::open(root);
    ASSERT_TRUE(index.is_ok()) << index.status().to_string();
    ASSERT_EQ((*index)->files().size(), rels.size());
    for (const auto& e : (*index)->files()) {
      EXPECT_TRUE(e.layout.empty());
      EXPECT_NE(rels.end(), std::find(rels.begin(), rels.end(), e.path)) << e.path;
    }
  }
  expect_index_equals_scan(root);
  std::vector<fs::path> inputs;
  for (const auto& rel : rels) inputs.push_back(root / rel);
  const auto truth = scan(root);
  std::vector<ReadId> ids;
  size_t k = 0;
  for (const auto& [id, places] : truth)
    if (k++ % 5 == 0) ids.push_back(id);
  auto plan = pipeline::plan_id_lookup(inputs, ids, true, 1);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->n_indexed, rels.size());
  std::vector<ReadId> missing;
  auto found = pipeline::find_reads(inputs, ids, true, &missing);
  ASSERT_TRUE(found.is_ok()) << found.status().to_string();
  EXPECT_TRUE(missing.empty());
  ASSERT_EQ(found->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*found)[i].batch.read_id[0], ids[i]);
  // The update reads every file again (nothing else changed) and writes version 2.
  auto rep = build(root);
  EXPECT_EQ(rep.n_files_scanned, rels.size());
  EXPECT_EQ(rep.n_files_unchanged, 0u);
  EXPECT_EQ(manifest_lines(root).front(), "escpod-read-index 2");
  auto index = ReadIndex::open(root);
  ASSERT_TRUE(index.is_ok());
  for (const auto& e : (*index)->files()) EXPECT_TRUE(decode_batch_layout(e).is_ok()) << e.path;
  expect_index_equals_scan(root);
}

// Inputs the index places none of the ids in are not opened; a stored layout that does not
// describe its file (an index edited or damaged with a valid checksum) never yields wrong reads.
TEST(ReadIndex, LookupOpensOnlyFilesHoldingIdsAndSurvivesWrongLayouts) {
  const fs::path root = test::scratch_dir("data");
  const std::vector<std::string> rels = {"warpdemux/sample/small_pod5_0.pod5", "warpdemux/sample/small_pod5_1.pod5",
                                         "escapepod/drna/yeast_trna_reads.pod5"};
  copy_in(root, rels);
  build(root);
  std::vector<fs::path> inputs;
  for (const auto& rel : rels) inputs.push_back(root / rel);
  auto reader = FileReader::open(inputs[2]);
  ASSERT_TRUE(reader.is_ok());
  std::vector<ReadId> ids;
  for (size_t b = 0; b < (*reader)->n_read_batches(); ++b) {
    auto batch = (*reader)->read_batch(b);
    ASSERT_TRUE(batch.is_ok());
    for (size_t r = 0; r < batch->size(); r += 37) ids.push_back(batch->read_id[r]);
  }
  ASSERT_GE(ids.size(), 3u);
  auto plan = pipeline::plan_id_lookup(inputs, ids, true, 1);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->n_indexed, 3u);
  EXPECT_EQ(plan->n_not_opened, 2u);
  ASSERT_EQ(plan->readers.size(), 1u);
  EXPECT_EQ(plan->input_of, (std::vector<size_t>{2}));
  EXPECT_EQ(plan->readers[0]->path(), inputs[2]);
  size_t n_rows = 0;
  for (const auto& sl : plan->slices) {
    EXPECT_EQ(sl.file, 0u);
    n_rows += sl.n_rows;
  }
  EXPECT_EQ(n_rows, ids.size());

  // Wrong layouts for the file holding the ids: too few signal batches (refused at open, then
  // opened without it), and a wrong first signal row count (every read's rows shifted).
  const auto good = manifest_lines(root);
  BatchLayout truth;
  {
    auto index = ReadIndex::open(root);
    ASSERT_TRUE(index.is_ok());
    for (const auto& e : (*index)->files())
      if (e.path == rels[2]) truth = *decode_batch_layout(e);
    ASSERT_GE(truth.signal_batch_rows.size(), 2u);
  }
  BatchLayout too_few = truth, shifted = truth;
  too_few.signal_batch_rows.pop_back();
  shifted.signal_batch_rows[0] -= 1;
  shifted.signal_batch_rows.back() += 1;  // the same rows in all: only their split differs
  for (const BatchLayout* wrong : {&too_few, &shifted}) {
    std::vector<std::string> lines = good;
    for (auto& line : lines) {
      if (line.rfind("file ", 0) != 0 || line.find(rels[2]) == std::string::npos) continue;
      const std::string layout = field(line, 8);
      line.replace(line.find(layout), layout.size(), encode_batch_layout(*wrong));
    }
    write_manifest(root, lines);
    auto index = ReadIndex::open(root);
    ASSERT_TRUE(index.is_ok()) << index.status().to_string();
    std::vector<ReadId> missing;
    auto found = pipeline::find_reads(inputs, ids, true, &missing);
    if (wrong == &too_few) {
      // Refused at open: the file is opened again without the layout, and answers right.
      ASSERT_TRUE(found.is_ok()) << found.status().to_string();
      EXPECT_TRUE(missing.empty());
      ASSERT_EQ(found->size(), ids.size());
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*found)[i].batch.read_id[0], ids[i]);
    } else {
      // Row counts shifted: each read's signal rows would land on other reads' chunks. Refused
      // loudly, naming the file, never answered with wrong signal.
      ASSERT_FALSE(found.is_ok());
      EXPECT_EQ(found.status().code(), StatusCode::kCorrupt) << found.status().to_string();
      EXPECT_NE(found.status().message().find(inputs[2].string()), std::string::npos) << found.status().message();
    }
  }
}

// ---- ReadLocator: lookups over files already open -------------------------------------------

std::vector<std::shared_ptr<const FileReader>> open_all(const std::vector<fs::path>& paths) {
  std::vector<std::shared_ptr<const FileReader>> out;
  for (const auto& p : paths) {
    auto r = FileReader::open(p);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (r.is_ok()) out.push_back(std::move(r).value());
  }
  return out;
}

// The places a ReadLocator gives, with and without the index, are find_reads' (the first file in
// the order given), for every read and for ids in no file; duplicates are counted (a file given
// twice holds every one of its ids twice); signals_at lists each read's own signal rows.
TEST(ReadIndex, LocatorAnswersAsFindReadsWithAndWithoutIndex) {
  const fs::path root = test::scratch_dir("locator");
  copy_in(root, {"warpdemux/sample/small_pod5_1.pod5", "pod5/multi_fast5_zip_v1.pod5", "pod5/multi_fast5_zip_v3.pod5"});
  const std::vector<fs::path> inputs = {root / "pod5/multi_fast5_zip_v3.pod5", root / "warpdemux/sample/small_pod5_1.pod5",
                                        root / "pod5/multi_fast5_zip_v1.pod5", root / "pod5/multi_fast5_zip_v3.pod5"};
  std::vector<ReadId> ids;
  size_t n_places = 0, n_held_twice = 0;  // in `inputs`, the v3 file counted twice
  for (const auto& [id, places] : scan(root)) {
    ids.push_back(id);
    size_t n = places.size();
    for (const auto& place : places) n += std::get<0>(place) == "pod5/multi_fast5_zip_v3.pod5";
    n_places += n;
    n_held_twice += n > 1;
  }
  ids.push_back(ReadId::random());
  std::vector<ReadId> missing;
  auto truth = pipeline::find_reads(inputs, ids, false, &missing);
  ASSERT_TRUE(truth.is_ok()) << truth.status().to_string();
  ASSERT_EQ(missing.size(), 1u);
  for (bool indexed : {false, true}) {
    SCOPED_TRACE(indexed ? "through the index" : "scanned");
    if (indexed) build(root);
    auto locator = pipeline::ReadLocator::build(open_all(inputs), indexed, Executor::for_threads(2));
    ASSERT_TRUE(locator.is_ok()) << locator.status().to_string();
    pipeline::ReadLocator& loc = **locator;
    EXPECT_EQ(loc.n_indexed_files(), indexed ? 4u : 0u);
    EXPECT_EQ(loc.complete(), !indexed);
    auto all = loc.locate_all(ids, Executor::for_threads(2));
    ASSERT_TRUE(all.is_ok()) << all.status().to_string();
    ASSERT_FALSE(all->back().has_value());
    std::vector<pipeline::ReadLocation> where;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      ASSERT_TRUE((*all)[i].has_value()) << ids[i].to_string();
      const pipeline::ReadLocation& w = *(*all)[i];
      EXPECT_EQ(loc.files()[w.file]->path(), (*truth)[i].file->path());
      auto one = loc.locate(ids[i]);
      ASSERT_TRUE(one.is_ok() && one->has_value());
      EXPECT_EQ(std::tie(w.file, w.batch, w.row), std::tie((**one).file, (**one).batch, (**one).row));
      where.push_back(w);
    }
    // Scanned: every place but each id's first, exactly. Through the index: the ids in more than
    // one place among those looked up (locate_all, then locate: twice each).
    EXPECT_EQ(loc.n_duplicates(), indexed ? 2 * n_held_twice : n_places - (ids.size() - 1));
    auto list = loc.signals_at(std::span(ids).first(where.size()), where, Executor::for_threads(2));
    ASSERT_TRUE(list.is_ok()) << list.status().to_string();
    ASSERT_EQ(list->size(), where.size());
    for (size_t i = 0; i < where.size(); ++i) {
      const auto& offsets = list->sample_offsets();
      ASSERT_EQ(offsets[i + 1] - offsets[i], (*truth)[i].batch.num_samples[0]) << ids[i].to_string();
    }
  }
}

}  // namespace
}  // namespace escpod::pod5
