// The read-id index: build, lookups equal to a plain scan, incremental updates, staleness,
// damage, spilling sorted runs, compaction, and find_reads with and without it.
#include "escpod/pod5/read_index.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "escpod/pipeline/ops/read_lookup.hpp"
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

}  // namespace
}  // namespace escpod::pod5
