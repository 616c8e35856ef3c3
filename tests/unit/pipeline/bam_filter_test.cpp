// bam-filter's library half: which reads a BAM's records select (pi parent ids, duplex names,
// --mapped, --quality, --region with a built index or a scan), its errors, and the copy of the
// selected POD5 reads with the ids the POD5 lacks reported.
#include "escpod/pipeline/ops/bam_filter.hpp"

#include <gtest/gtest.h>
#include <htslib/sam.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "escpod/pod5/file_reader.hpp"
#include "test_data.hpp"

namespace escpod {
namespace {

namespace fs = std::filesystem;
using pipeline::BamCriteria;
using pipeline::BamIndexPolicy;
using pipeline::BamSelectOptions;
using pipeline::select_bam_reads;

constexpr const char* kRealBam = "escapepod/drna/yeast_trna_mappings.bam";
constexpr const char* kRealPod5 = "escapepod/drna/yeast_trna_reads.pod5";

// Read ids of the synthetic records: A..E plain names, P the parent of a split read (whose own
// name S is not in any POD5), D1;D2 a duplex pair.
const char* kA = "0a000000-0000-4000-8000-00000000000a";
const char* kB = "0b000000-0000-4000-8000-00000000000b";
const char* kC = "0c000000-0000-4000-8000-00000000000c";
const char* kD = "0d000000-0000-4000-8000-00000000000d";
const char* kE = "0e000000-0000-4000-8000-00000000000e";
const char* kP = "1a000000-0000-4000-8000-00000000001a";
const char* kS = "1b000000-0000-4000-8000-00000000001b";
const char* kD1 = "2a000000-0000-4000-8000-00000000002a";
const char* kD2 = "2b000000-0000-4000-8000-00000000002b";

const char* kHeader = "@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:1000\n@SQ\tSN:chr2\tLN:500\n";

// A SAM line: name, flag, contig, 1-based pos, MAPQ, CIGAR, then optional tags.
std::string sam(const std::string& name, int flag, const std::string& rname, int pos, int mapq,
                const std::string& cigar, const std::string& tags = "") {
  std::ostringstream s;
  s << name << '\t' << flag << '\t' << rname << '\t' << pos << '\t' << mapq << '\t' << cigar
    << "\t*\t0\t0\t*\t*" << (tags.empty() ? "" : "\t" + tags);
  return s.str();
}

// Writes `lines` (SAM text) as a BGZF BAM with htslib.
void write_bam(const fs::path& path, const std::string& header, const std::vector<std::string>& lines) {
  samFile* out = sam_open(path.c_str(), "wb");
  ASSERT_NE(out, nullptr) << path;
  sam_hdr_t* h = sam_hdr_parse(header.size(), header.c_str());
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(sam_hdr_write(out, h), 0);
  bam1_t* b = bam_init1();
  for (const auto& line : lines) {
    std::string text = line;
    kstring_t ks = {text.size(), text.size() + 1, text.data()};
    ASSERT_GE(sam_parse1(&ks, h, b), 0) << line;
    ASSERT_GE(sam_write1(out, h, b), 0);
  }
  bam_destroy1(b);
  sam_hdr_destroy(h);
  ASSERT_EQ(sam_close(out), 0);
}

// Coordinate-sorted records covering: chr1 [9,59) A q30, [99,109) B q5 (secondary C of it at
// [150,160) q0), [199,211) split read S->P q60, an unmapped read D placed at chr1:300; chr2
// [4,54) the duplex pair q12; E unplaced and unmapped.
std::vector<std::string> synthetic_records() {
  return {
      sam(kA, 0, "chr1", 10, 30, "50M"),
      sam(kB, 16, "chr1", 100, 5, "10M"),
      sam(kC, 256, "chr1", 150, 0, "10M"),
      sam(kS, 0, "chr1", 200, 60, "5M2D5M", std::string("pi:Z:") + kP),
      sam(kD, 4, "chr1", 300, 0, "*"),
      sam(std::string(kD1) + ";" + kD2, 0, "chr2", 5, 12, "50M", "dx:i:1"),
      sam(kE, 4, "*", 0, 0, "*"),
  };
}

std::vector<std::string> ids_text(const std::vector<pod5::ReadId>& ids) {
  std::vector<std::string> out;
  for (const auto& id : ids) out.push_back(id.to_string());
  return out;
}

std::vector<std::string> select_ids(const fs::path& bam, const BamCriteria& c,
                                    BamIndexPolicy policy = BamIndexPolicy::kBuildIfMissing) {
  BamSelectOptions o;
  o.index = policy;
  auto sel = select_bam_reads(bam, c, o);
  EXPECT_TRUE(sel.is_ok()) << sel.status().message();
  return sel.is_ok() ? ids_text(sel->read_ids) : std::vector<std::string>{};
}

BamCriteria region(const std::string& r) {
  BamCriteria c;
  c.region = r;
  return c;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(BamSelect, ParentIdsDuplexNamesAndNoCriterion) {
  auto dir = test::scratch_dir("bam");
  write_bam(dir / "r.bam", kHeader, synthetic_records());
  BamSelectOptions o;
  auto sel = select_bam_reads(dir / "r.bam", BamCriteria{}, o);
  ASSERT_TRUE(sel.is_ok()) << sel.status().message();
  // The split read stands for its parent, never its own name; both duplex halves are selected.
  EXPECT_EQ(ids_text(sel->read_ids), (std::vector<std::string>{kA, kB, kC, kP, kD, kD1, kD2, kE}));
  EXPECT_EQ(sel->n_records, 7u);
  EXPECT_EQ(sel->n_records_selected, 7u);
  EXPECT_EQ(sel->n_parent_ids, 1u);
  EXPECT_TRUE(sel->index_built.empty());
}

TEST(BamSelect, MappedAndQuality) {
  auto dir = test::scratch_dir("bam");
  write_bam(dir / "r.bam", kHeader, synthetic_records());
  BamCriteria mapped;
  mapped.mapped_only = true;
  EXPECT_EQ(select_ids(dir / "r.bam", mapped), (std::vector<std::string>{kA, kB, kC, kP, kD1, kD2}));
  BamCriteria q;
  q.min_mapq = 12;  // inclusive, as samtools view -q
  EXPECT_EQ(select_ids(dir / "r.bam", q), (std::vector<std::string>{kA, kP, kD1, kD2}));
  q.min_mapq = 0;  // every record, unmapped ones too (their MAPQ is 0)
  EXPECT_EQ(select_ids(dir / "r.bam", q).size(), 8u);
  q.min_mapq = 61;
  EXPECT_TRUE(select_ids(dir / "r.bam", q).empty());
  q.min_mapq = 256;
  EXPECT_EQ(select_bam_reads(dir / "r.bam", q, {}).status().code(), StatusCode::kUsage);
}

TEST(BamSelect, RegionBuildsTheIndexAtomicallyAndAgreesWithAScan) {
  auto dir = test::scratch_dir("bam");
  write_bam(dir / "r.bam", kHeader, synthetic_records());
  fs::create_directories(dir / "scan");
  fs::copy_file(dir / "r.bam", dir / "scan" / "r.bam");
  const fs::path scan_bam = dir / "scan" / "r.bam";

  BamSelectOptions o;
  auto sel = select_bam_reads(dir / "r.bam", region("chr1:100-200"), o);
  ASSERT_TRUE(sel.is_ok()) << sel.status().message();
  EXPECT_EQ(sel->index_built, dir / "r.bam.bai");
  EXPECT_FALSE(sel->scanned_without_index);
  // Only the BAM and its finished index: no staging file left behind.
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"r.bam", "r.bam.bai", "scan"}));

  struct Case {
    std::string region;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"chr1", {kA, kB, kC, kP, kD}},
      {"chr1:100-200", {kB, kC, kP}},  // [99,200): S starts at 199
      {"chr1:100-199", {kB, kC}},
      {"chr1:59-99", {kA}},            // A ends at 59 (1-based), B starts at 100
      {"chr1:60-99", {}},
      {"chr1:300", {kD}},              // to the contig's end; an unmapped record placed there
      {"chr1:1,000-1,000", {}},
      {"{chr2}:1-10", {kD1, kD2}},
      {"chr2", {kD1, kD2}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(select_ids(dir / "r.bam", region(c.region)), c.want) << c.region;
    EXPECT_EQ(select_ids(scan_bam, region(c.region), BamIndexPolicy::kScanIfMissing), c.want)
        << c.region << " (scan)";
  }
  // The scan wrote nothing.
  EXPECT_EQ(files_in(dir / "scan"), (std::vector<std::string>{"r.bam"}));

  // Criteria combine (AND), the second query reusing the index built above.
  BamCriteria c = region("chr1");
  c.mapped_only = true;
  c.min_mapq = 5;
  BamSelectOptions again;
  auto sel2 = select_bam_reads(dir / "r.bam", c, again);
  ASSERT_TRUE(sel2.is_ok());
  EXPECT_EQ(ids_text(sel2->read_ids), (std::vector<std::string>{kA, kB, kP}));
  EXPECT_TRUE(sel2->index_built.empty());
}

TEST(BamSelect, UnsortedBamFallsBackToAScan) {
  auto dir = test::scratch_dir("bam");
  auto recs = synthetic_records();
  std::swap(recs[0], recs[3]);  // out of coordinate order, and its header says so
  write_bam(dir / "u.bam", "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:1000\n@SQ\tSN:chr2\tLN:500\n", recs);
  BamSelectOptions o;
  auto sel = select_bam_reads(dir / "u.bam", region("chr1:1-120"), o);
  ASSERT_TRUE(sel.is_ok()) << sel.status().message();
  EXPECT_TRUE(sel->scanned_without_index);
  EXPECT_TRUE(sel->index_built.empty());
  EXPECT_EQ(ids_text(sel->read_ids), (std::vector<std::string>{kB, kA}));  // file order
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"u.bam"}));
}

void expect_error(const fs::path& bam, const BamCriteria& c, StatusCode code,
                  const std::vector<std::string>& parts) {
  auto sel = select_bam_reads(bam, c, {});
  ASSERT_FALSE(sel.is_ok()) << bam;
  EXPECT_EQ(sel.status().code(), code) << sel.status().message();
  for (const auto& p : parts) {
    EXPECT_NE(sel.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << sel.status().message();
  }
}

TEST(BamSelect, ErrorsNameTheFileAndTheProblem) {
  auto dir = test::scratch_dir("bam");
  write_bam(dir / "r.bam", kHeader, synthetic_records());
  const std::string bam = (dir / "r.bam").string();

  expect_error(dir / "none.bam", {}, StatusCode::kNotFound, {"none.bam", "does not exist"});
  expect_error(dir, {}, StatusCode::kInvalidArgument, {"is a directory"});
  {
    std::ofstream(dir / "text.bam") << "this is not a BAM file\nat all\n";
    expect_error(dir / "text.bam", {}, StatusCode::kCorrupt, {"text.bam", "not a BAM"});
  }
  expect_error(dir / "r.bam", region("chr3:1-10"), StatusCode::kUsage,
               {"chr3:1-10", "no such contig", bam, "chr1, chr2"});
  expect_error(dir / "r.bam", region("chr1:abc"), StatusCode::kUsage, {"chr1:abc", "not a region"});
  expect_error(dir / "r.bam", region("chr1:200-100"), StatusCode::kUsage, {"chr1:200-100"});
  // Nothing was indexed by the refused queries.
  EXPECT_FALSE(fs::exists(dir / "r.bam.bai"));

  write_bam(dir / "name.bam", kHeader, {sam(kA, 0, "chr1", 10, 30, "5M"), sam("read_7", 0, "chr1", 20, 30, "5M")});
  expect_error(dir / "name.bam", {}, StatusCode::kInvalidArgument,
               {"name.bam record 2 (read_7)", "read name 'read_7' is not a POD5 read id"});
  write_bam(dir / "pi.bam", kHeader, {sam(kS, 0, "chr1", 10, 30, "5M", "pi:Z:nonsense")});
  expect_error(dir / "pi.bam", {}, StatusCode::kInvalidArgument, {"pi.bam record 1", "pi tag 'nonsense'"});
  write_bam(dir / "pii.bam", kHeader, {sam(kS, 0, "chr1", 10, 30, "5M", "pi:i:7")});
  expect_error(dir / "pii.bam", {}, StatusCode::kInvalidArgument, {"pi tag is not a string"});

  // A damaged index is named, not silently replaced.
  fs::copy_file(dir / "r.bam", dir / "d.bam");
  std::ofstream(dir / "d.bam.bai") << "garbage";
  expect_error(dir / "d.bam", region("chr1"), StatusCode::kCorrupt, {"d.bam.bai", "cannot be read"});

  // A truncated BAM: header fine, records cut short.
  const auto size = fs::file_size(dir / "r.bam");
  fs::copy_file(dir / "r.bam", dir / "t.bam");
  fs::resize_file(dir / "t.bam", size - 40);
  expect_error(dir / "t.bam", {}, StatusCode::kCorrupt, {"t.bam", "truncated"});
}

TEST(BamSelect, RealRna004Bam) {
  const auto bam = test::shared_data(kRealBam);
  auto dir = test::scratch_dir("real");
  fs::copy_file(bam, dir / "m.bam");  // without its index: the query below builds one
  BamSelectOptions o;
  o.n_threads = 2;
  auto all = select_bam_reads(dir / "m.bam", {}, o);
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  EXPECT_EQ(all->n_records, 180u);
  EXPECT_EQ(all->read_ids.size(), 180u);
  BamCriteria q;
  q.min_mapq = 46;  // the README's BAM has MAPQ 46, 52 and 53 once each above 30
  auto high = select_bam_reads(dir / "m.bam", q, o);
  ASSERT_TRUE(high.is_ok());
  EXPECT_EQ(high->read_ids.size(), 3u);
  auto ala = select_bam_reads(dir / "m.bam", region("tRNA-Ala-AGC-1-1-uncharged"), o);
  ASSERT_TRUE(ala.is_ok()) << ala.status().message();
  EXPECT_EQ(ala->read_ids.size(), 60u);
  EXPECT_EQ(ala->index_built, dir / "m.bam.bai");
}

TEST(BamFilterFiles, CopiesTheSelectedReadsAndListsTheMissingOnes) {
  const auto real_bam = test::shared_data(kRealBam);
  const auto pod5_path = test::shared_data(kRealPod5);
  BamCriteria q;
  q.min_mapq = 46;
  auto high = select_bam_reads(real_bam, q, {});
  ASSERT_TRUE(high.is_ok());
  ASSERT_EQ(high->read_ids.size(), 3u);
  const std::string r0 = high->read_ids[0].to_string(), r1 = high->read_ids[1].to_string(),
                    r2 = high->read_ids[2].to_string();

  // r0 directly; r1 through a split read's pi tag; r2 and a read absent from the POD5 as a
  // duplex pair; another absent read plainly.
  auto dir = test::scratch_dir("copy");
  const char* kAbsent = "3c000000-0000-4000-8000-00000000003c";
  write_bam(dir / "s.bam", kHeader,
            {sam(r0, 0, "chr1", 10, 30, "5M"), sam(kS, 0, "chr1", 20, 30, "5M", "pi:Z:" + r1),
             sam(r2 + ";" + kD1, 0, "chr1", 30, 30, "5M"), sam(kAbsent, 4, "*", 0, 0, "*")});
  pipeline::BamFilterOptions o;
  o.missing_ids_output = dir / "missing.txt";
  pipeline::BamFilterReport rep;
  const fs::path out = dir / "out.pod5";
  Status s = pipeline::bam_filter_files(dir / "s.bam", {pod5_path, pod5_path}, out, {}, o, &rep);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(rep.selection.read_ids.size(), 5u);
  EXPECT_EQ(rep.filter.copied.n_reads, 3u);  // once each although the input is given twice
  EXPECT_EQ(ids_text(rep.filter.missing_ids), (std::vector<std::string>{kD1, kAbsent}));
  std::ifstream in(dir / "missing.txt");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), std::string(kD1) + "\n" + kAbsent + "\n");

  auto reader = pod5::FileReader::open(out);
  ASSERT_TRUE(reader.is_ok()) << reader.status().message();
  EXPECT_EQ((*reader)->info().n_reads, 3u);

  // An existing missing-ids file is refused before anything is written.
  const fs::path out2 = dir / "out2.pod5";
  s = pipeline::bam_filter_files(dir / "s.bam", {pod5_path}, out2, {}, o, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.message();
  EXPECT_FALSE(fs::exists(out2));
  // A BAM error leaves no output either.
  s = pipeline::bam_filter_files(dir / "s.bam", {pod5_path}, out2, region("nope"), {}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUsage);
  EXPECT_FALSE(fs::exists(out2));
}

}  // namespace
}  // namespace escpod
