// escpod simulate: the read simulator (signal layer) and the run around it (pipeline layer).
#include "escpod/pipeline/simulate/simulate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "escpod/pod5/file_reader.hpp"
#include "escpod/signal/calibration.hpp"
#include "escpod/signal/simulator.hpp"
#include "test_data.hpp"

namespace escpod {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRealTable = "escapepod/kmer_models/rna004_9mer_levels_v1.txt.gz";
constexpr const char* kRealRna004 = "escapepod/drna/yeast_trna_reads.pod5";
constexpr const char* kRealRna002 = "warpdemux/sample/small_pod5_0.pod5";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

struct ReadData {
  pod5::ReadRecord record;
  std::vector<int16_t> adc;
};

struct PodData {
  std::vector<pod5::RunInfo> run_infos;
  std::vector<ReadData> reads;
};

PodData read_pod5(const fs::path& path, size_t max_reads = SIZE_MAX) {
  PodData out;
  auto reader = pod5::FileReader::open(path);
  EXPECT_TRUE(reader.is_ok()) << reader.status().to_string();
  if (!reader.is_ok()) return out;
  out.run_infos = (*reader)->run_infos();
  pod5::VbzCodec codec;
  for (size_t b = 0; b < (*reader)->n_read_batches() && out.reads.size() < max_reads; ++b) {
    auto batch = (*reader)->read_batch(b);
    EXPECT_TRUE(batch.is_ok()) << batch.status().to_string();
    if (!batch.is_ok()) return out;
    for (size_t i = 0; i < batch->size() && out.reads.size() < max_reads; ++i) {
      ReadData rd;
      rd.record = (*reader)->record(*batch, i);
      rd.adc.resize(rd.record.num_samples);
      const Status st = (*reader)->read_signal(batch->rows_of(i), rd.adc, codec);
      EXPECT_TRUE(st.is_ok()) << st.to_string();
      out.reads.push_back(std::move(rd));
    }
  }
  return out;
}

std::vector<float> to_pa(const ReadData& r) {
  std::vector<float> pa(r.adc.size());
  signal::calibrate_to_pa(r.adc, {r.record.calibration_offset, r.record.calibration_scale}, pa);
  return pa;
}

struct TruthRow {
  std::string read_id, barcode, transcript;
  uint64_t adapter_start, adapter_end, barcode_start, barcode_end, polya_start, polya_end,
      transcript_start, num_samples;
};

struct Truth {
  std::string header;
  std::vector<std::string> comments;
  std::vector<TruthRow> rows;
};

Truth parse_truth(const fs::path& p) {
  Truth t;
  std::istringstream in(slurp(p));
  std::string line;
  std::getline(in, t.header);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      t.comments.push_back(line);
      continue;
    }
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) f.push_back(cell);
    EXPECT_EQ(f.size(), 11u) << line;
    if (f.size() != 11) continue;
    TruthRow r;
    r.read_id = f[0];
    r.barcode = f[1];
    r.adapter_start = std::stoull(f[2]);
    r.adapter_end = std::stoull(f[3]);
    r.barcode_start = std::stoull(f[4]);
    r.barcode_end = std::stoull(f[5]);
    r.polya_start = std::stoull(f[6]);
    r.polya_end = std::stoull(f[7]);
    r.transcript_start = std::stoull(f[8]);
    r.num_samples = std::stoull(f[9]);
    r.transcript = f[10];
    t.rows.push_back(r);
  }
  return t;
}

pipeline::SimulateOptions small_options(uint64_t n) {
  pipeline::SimulateOptions o;
  o.n_reads = n;
  o.seed = 42;
  o.kmer_model = "synthetic:6";
  o.barcodes = "synthetic:4";
  o.transcript_length_mean = 80;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Statistics used by the realism comparison.

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
  const double hi = v[n / 2];
  if (n % 2 == 1) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2)));
}

double mad(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = std::abs(v[i] - m);
  return median(d);
}

// White-noise sd estimated from first differences (robust to level steps):
// MAD(diff) / 0.6745 / sqrt(2).
double diff_noise(const std::vector<double>& v) {
  std::vector<double> d(v.size() - 1);
  for (size_t i = 0; i + 1 < v.size(); ++i) d[i] = v[i + 1] - v[i];
  return mad(d) / 0.6744897501960817 / std::sqrt(2.0);
}

struct RegionStats {
  double median = 0, mad = 0, noise = 0;
};

RegionStats region_stats(const std::vector<float>& pa, size_t a, size_t b) {
  std::vector<double> v(pa.begin() + static_cast<std::ptrdiff_t>(a), pa.begin() + static_cast<std::ptrdiff_t>(b));
  return {median(v), mad(v), diff_noise(v)};
}

// Median over reads of each statistic.
RegionStats summarise(const std::vector<RegionStats>& s) {
  std::vector<double> m, d, n;
  for (const auto& x : s) {
    m.push_back(x.median);
    d.push_back(x.mad);
    n.push_back(x.noise);
  }
  return {median(m), median(d), median(n)};
}

// Poly(A) of a real (RNA002) read without a basecaller: in 150-sample windows of the first
// 15,000 samples, the longest run of windows that are flat (sd < 6 pA) and lie within 6 pA of the
// run's first window and above 1.2x the median of the samples before the run (skipping the first
// 300). Returns {adapter-side median, poly(A) median, poly(A) median window sd}; empty if no run of
// at least 5 windows.
std::optional<std::array<double, 3>> find_polya(const std::vector<float>& pa) {
  constexpr size_t kW = 150;
  const size_t n = std::min<size_t>(pa.size(), 15000) / kW;
  std::vector<double> wm(n), ws(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> v(pa.begin() + static_cast<std::ptrdiff_t>(i * kW),
                          pa.begin() + static_cast<std::ptrdiff_t>((i + 1) * kW));
    wm[i] = median(v);
    double mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(kW);
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    ws[i] = std::sqrt(ss / static_cast<double>(kW));
  }
  size_t best_start = 0, best_len = 0;
  for (size_t s = 3; s < n; ++s) {
    if (ws[s] >= 6) continue;
    size_t e = s;
    while (e < n && ws[e] < 6 && std::abs(wm[e] - wm[s]) < 6) ++e;
    if (e - s > best_len) {
      std::vector<double> before(pa.begin() + 300, pa.begin() + static_cast<std::ptrdiff_t>(s * kW));
      if (before.size() > 600 && wm[s] > 1.2 * median(before)) {
        best_len = e - s;
        best_start = s;
      }
    }
  }
  if (best_len < 5) return std::nullopt;
  std::vector<double> before(pa.begin() + 300, pa.begin() + static_cast<std::ptrdiff_t>(best_start * kW));
  std::vector<double> run(wm.begin() + static_cast<std::ptrdiff_t>(best_start),
                          wm.begin() + static_cast<std::ptrdiff_t>(best_start + best_len));
  std::vector<double> sds(ws.begin() + static_cast<std::ptrdiff_t>(best_start),
                          ws.begin() + static_cast<std::ptrdiff_t>(best_start + best_len));
  return std::array<double, 3>{median(before), median(run), median(sds)};
}

// ---------------------------------------------------------------------------------------------

TEST(SimulatorSignal, SyntheticTableIsDeterministicAndStandardised) {
  auto a = signal::KmerTable::synthetic(9);
  auto b = signal::KmerTable::synthetic(9);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(b.is_ok());
  EXPECT_TRUE(a->is_synthetic());
  EXPECT_EQ(a->label(), "synthetic:9");
  EXPECT_TRUE(a->check_complete().is_ok());
  ASSERT_EQ(a->size(), size_t{1} << 18);
  std::vector<double> levels(a->size());
  for (uint64_t c = 0; c < a->size(); ++c) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a->level_of_code(c)), std::bit_cast<uint32_t>(b->level_of_code(c)));
    levels[c] = a->level_of_code(c);
  }
  EXPECT_NEAR(median(levels), 0.0, 1e-3);
  EXPECT_NEAR(mad(levels), 0.6745, 1e-3);  // like the real ONT tables
  auto c = signal::KmerTable::synthetic(5);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->size(), 1024u);
  EXPECT_FALSE(signal::KmerTable::synthetic(0).is_ok());
  EXPECT_FALSE(signal::KmerTable::synthetic(13).is_ok());
}

TEST(SimulatorSignal, RngStreamsAreIndependentAndReproducible) {
  signal::SimRng a(7, 3), b(7, 3), c(7, 4), d(8, 3);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    EXPECT_NE(x, c.next());
    EXPECT_NE(x, d.next());
  }
  // fast_normal has unit variance and zero mean.
  signal::SimRng r(1, 1);
  double s = 0, s2 = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double z = r.fast_normal();
    s += z;
    s2 += z * z;
  }
  EXPECT_NEAR(s / kN, 0.0, 0.01);
  EXPECT_NEAR(s2 / kN, 1.0, 0.02);
}

TEST(SimulatorSignal, ReadLayoutAndLevels) {
  auto table = signal::KmerTable::synthetic(6);
  ASSERT_TRUE(table.is_ok());
  signal::SimParams p;
  p.read_offset_sd_pa = 0;
  p.read_scale_log_sigma = 0;
  p.drift_sd_pa_per_10k = 0;
  signal::ReadSpec spec;
  const std::string tx(200, 'C');
  spec.adapter = signal::default_adapter_sequence();
  spec.barcode = "ACGTACGTACGTACGTACGT";
  spec.polya_length = 80;
  spec.transcript = tx;
  spec.calibration = {-247.0f, 0.1462070643901825f};
  signal::SimRng rng(1, 0);
  signal::SimulatedRead out;
  ASSERT_TRUE(signal::simulate_read(*table, p, spec, rng, out).is_ok());
  const auto& L = out.layout;
  EXPECT_LT(L.adapter_start, L.barcode_start);
  EXPECT_LT(L.barcode_start, L.barcode_end);
  EXPECT_EQ(L.barcode_end, L.adapter_end);
  EXPECT_EQ(L.adapter_end, L.polya_start);
  EXPECT_LT(L.polya_start, L.polya_end);
  EXPECT_EQ(L.polya_end, L.transcript_start);
  EXPECT_LT(L.transcript_start, L.num_samples);
  EXPECT_EQ(out.adc.size(), L.num_samples);
  // ~30.8 samples per base on average.
  const double per_base = static_cast<double>(L.num_samples - L.adapter_start) /
                          static_cast<double>(spec.adapter.size() + 20 + 80 + 200);
  EXPECT_GT(per_base, 15.0);
  EXPECT_LT(per_base, 60.0);
  std::vector<float> pa(out.adc.size());
  signal::calibrate_to_pa(out.adc, spec.calibration, pa);
  // Open pore, then poly(A) at its level.
  if (L.adapter_start > 5) {
    std::vector<double> op(pa.begin(), pa.begin() + static_cast<std::ptrdiff_t>(L.adapter_start));
    EXPECT_NEAR(median(op), p.open_pore_pa, 25.0);
  }
  std::vector<double> pol(pa.begin() + static_cast<std::ptrdiff_t>(L.polya_start),
                          pa.begin() + static_cast<std::ptrdiff_t>(L.polya_end));
  EXPECT_NEAR(median(pol), p.polya_pa, 4.0);
  // A homopolymer transcript is flat: its MAD is mostly noise.
  std::vector<double> t(pa.begin() + static_cast<std::ptrdiff_t>(L.transcript_start + 200), pa.end());
  EXPECT_LT(mad(t), 4.0);
  // Same RNG state => same read.
  signal::SimRng rng2(1, 0);
  signal::SimulatedRead out2;
  ASSERT_TRUE(signal::simulate_read(*table, p, spec, rng2, out2).is_ok());
  EXPECT_EQ(out.adc, out2.adc);
  // Bad inputs.
  spec.transcript = "";
  EXPECT_EQ(signal::simulate_read(*table, p, spec, rng, out).code(), StatusCode::kInvalidArgument);
}

TEST(SimulatorSignal, DigitisationInvertsCalibration) {
  const signal::Calibration c{-247.0f, 0.1462070643901825f};
  for (int adc = 0; adc <= 2047; adc += 7) {
    const float pa = signal::adc_to_pa(static_cast<int16_t>(adc), c);
    EXPECT_EQ(signal::pa_to_adc(pa, c, 0, 2047), adc);
  }
  EXPECT_EQ(signal::pa_to_adc(-1000.0f, c, 0, 2047), 0);
  EXPECT_EQ(signal::pa_to_adc(1000.0f, c, 0, 2047), 2047);
}

TEST(SimulateInputs, RealKmerTableLoads) {
  auto t = pipeline::load_kmer_table(test::shared_data(kRealTable).string());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->k(), 9);
  EXPECT_FALSE(t->is_synthetic());
  EXPECT_NEAR(t->level("AAAAAAAAA"), 0.95838, 1e-5);
  EXPECT_NEAR(t->level("AAAAAAAAU"), t->level("AAAAAAAAT"), 0.0);
}

TEST(SimulateInputs, KmerTableErrors) {
  const fs::path dir = test::scratch_dir("kmer");
  auto missing = pipeline::load_kmer_table((dir / "nope.txt.gz").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.txt.gz"), std::string::npos);

  write_file(dir / "incomplete.txt", "kmer\tlevel\nAA\t0.1\nAC\t0.2\n");
  auto inc = pipeline::load_kmer_table((dir / "incomplete.txt").string());
  ASSERT_FALSE(inc.is_ok());
  EXPECT_NE(inc.status().message().find("lacks 14 of 16"), std::string::npos) << inc.status().message();

  write_file(dir / "badlevel.txt", "AA\t0.1\nAC\tx\n");
  auto bad = pipeline::load_kmer_table((dir / "badlevel.txt").string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("badlevel.txt:2"), std::string::npos) << bad.status().message();

  write_file(dir / "mixed.txt", "AA\t0.1\nACG\t0.2\n");
  auto mixed = pipeline::load_kmer_table((dir / "mixed.txt").string());
  ASSERT_FALSE(mixed.is_ok());
  EXPECT_NE(mixed.status().message().find("mixed.txt:2"), std::string::npos) << mixed.status().message();

  // A complete table with a comment, a header and spaces loads.
  std::string text = "# comment\nkmer level\n";
  for (const char* k : {"A", "C", "G", "T"}) text += std::string(k) + " 0.5\n";
  write_file(dir / "ok.txt", text);
  auto ok = pipeline::load_kmer_table((dir / "ok.txt").string());
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->k(), 1);

  EXPECT_FALSE(pipeline::load_kmer_table("synthetic:x").is_ok());
  EXPECT_FALSE(pipeline::load_kmer_table("synthetic:0").is_ok());
}

TEST(SimulateInputs, BarcodeCsv) {
  auto ok = pipeline::parse_barcode_csv("id,Name, SEQUENCE \n\n1,bcA, acgu \n2,bcB,GGCC\n", "x.csv");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].name, "bcA");
  EXPECT_EQ((*ok)[0].sequence, "ACGT");
  EXPECT_EQ((*ok)[1].sequence, "GGCC");

  auto bad_seq = pipeline::parse_barcode_csv("name,sequence\nbc1,ACGT\nbc2,ACXT\n", "bc.csv");
  ASSERT_FALSE(bad_seq.is_ok());
  EXPECT_EQ(bad_seq.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_seq.status().message().find("bc.csv:3"), std::string::npos) << bad_seq.status().message();

  auto dup = pipeline::parse_barcode_csv("name,sequence\nbc1,ACGT\nbc1,AAAA\n", "bc.csv");
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("bc.csv:3"), std::string::npos);
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos);

  auto no_header = pipeline::parse_barcode_csv("bc1,ACGT\n", "bc.csv");
  ASSERT_FALSE(no_header.is_ok());
  EXPECT_NE(no_header.status().message().find("bc.csv:1"), std::string::npos);

  EXPECT_FALSE(pipeline::parse_barcode_csv("", "e.csv").is_ok());
  EXPECT_FALSE(pipeline::parse_barcode_csv("name,sequence\n", "e.csv").is_ok());
  auto empty_seq = pipeline::parse_barcode_csv("name,sequence\nbc1,\n", "bc.csv");
  ASSERT_FALSE(empty_seq.is_ok());
  EXPECT_NE(empty_seq.status().message().find("bc.csv:2"), std::string::npos);
  auto short_row = pipeline::parse_barcode_csv("name,sequence\nbc1\n", "bc.csv");
  ASSERT_FALSE(short_row.is_ok());
  EXPECT_NE(short_row.status().message().find("bc.csv:2"), std::string::npos);

  auto synth = pipeline::load_barcodes("synthetic:12");
  ASSERT_TRUE(synth.is_ok());
  ASSERT_EQ(synth->size(), 12u);
  EXPECT_EQ((*synth)[0].name, "bc01");
  for (size_t i = 0; i < synth->size(); ++i) {
    for (size_t j = i + 1; j < synth->size(); ++j) {
      int d = 0;
      for (size_t k = 0; k < 20; ++k) d += (*synth)[i].sequence[k] != (*synth)[j].sequence[k];
      EXPECT_GE(d, 8);
    }
  }
  auto synth4 = pipeline::load_barcodes("synthetic:4");
  ASSERT_TRUE(synth4.is_ok());
  EXPECT_EQ((*synth4)[3].sequence, (*synth)[3].sequence);  // deterministic, nested
  EXPECT_FALSE(pipeline::load_barcodes("synthetic:0").is_ok());
  EXPECT_FALSE(pipeline::load_barcodes("synthetic:385").is_ok());
  // A whole 384-well plate: names go on as bc100.. after bc99; the smaller sets are prefixes.
  auto plate = pipeline::load_barcodes("synthetic:384");
  ASSERT_TRUE(plate.is_ok());
  ASSERT_EQ(plate->size(), 384u);
  EXPECT_EQ((*plate)[11].sequence, (*synth)[11].sequence);
  EXPECT_EQ((*plate)[98].name, "bc99");
  EXPECT_EQ((*plate)[383].name, "bc384");
  EXPECT_EQ(pipeline::load_barcodes("/nonexistent/bc.csv").status().code(), StatusCode::kNotFound);
}

TEST(SimulateInputs, ShippedBarcodeSetParses) {
  const fs::path p = fs::path(escpod::test::source_dir()) / "data/barcodes/escpod_demo4.csv";
  auto bcs = pipeline::load_barcodes(p.string());
  ASSERT_TRUE(bcs.is_ok()) << bcs.status().to_string();
  EXPECT_EQ(bcs->size(), 4u);
}

TEST(SimulateRun, RejectsBadOptions) {
  const fs::path dir = test::scratch_dir("bad");
  auto o = small_options(0);
  Status st = pipeline::simulate(dir / "a.pod5", o);
  EXPECT_EQ(st.code(), StatusCode::kUsage);
  EXPECT_NE(st.message().find("--reads"), std::string::npos);
  o = small_options(3);
  o.kmer_model = (dir / "missing.txt.gz").string();
  st = pipeline::simulate(dir / "a.pod5", o);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  write_file(dir / "bc.csv", "name,sequence\nbc1,ACGT\nbc2,AC-T\n");
  o = small_options(3);
  o.barcodes = (dir / "bc.csv").string();
  st = pipeline::simulate(dir / "a.pod5", o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bc.csv:3"), std::string::npos) << st.message();
  // Nothing was left behind.
  EXPECT_FALSE(fs::exists(dir / "a.pod5"));
  EXPECT_FALSE(fs::exists(dir / "a.truth.csv"));
  // An existing output is refused without overwrite.
  o = small_options(2);
  ASSERT_TRUE(pipeline::simulate(dir / "b.pod5", o).is_ok());
  EXPECT_EQ(pipeline::simulate(dir / "b.pod5", o).code(), StatusCode::kAlreadyExists);
  o.writer.overwrite = true;
  EXPECT_TRUE(pipeline::simulate(dir / "b.pod5", o).is_ok());
}

TEST(SimulateRun, IdenticalOutputForAnyThreadCount) {
  const fs::path dir = test::scratch_dir("det");
  auto o = small_options(300);
  o.writer.max_chunk_samples = 4000;  // several chunks per read
  o.n_threads = 1;
  ASSERT_TRUE(pipeline::simulate(dir / "t1.pod5", o).is_ok());
  o.n_threads = 2;
  ASSERT_TRUE(pipeline::simulate(dir / "t2.pod5", o).is_ok());
  o.n_threads = 5;
  ASSERT_TRUE(pipeline::simulate(dir / "t5.pod5", o).is_ok());
  const std::string truth1 = slurp(dir / "t1.truth.csv");
  EXPECT_EQ(truth1, slurp(dir / "t2.truth.csv"));
  EXPECT_EQ(truth1, slurp(dir / "t5.truth.csv"));
  const PodData a = read_pod5(dir / "t1.pod5"), b = read_pod5(dir / "t2.pod5"), c = read_pod5(dir / "t5.pod5");
  ASSERT_EQ(a.reads.size(), 300u);
  ASSERT_EQ(b.reads.size(), 300u);
  ASSERT_EQ(c.reads.size(), 300u);
  for (size_t i = 0; i < a.reads.size(); ++i) {
    EXPECT_EQ(a.reads[i].record.read_id, b.reads[i].record.read_id);
    EXPECT_EQ(a.reads[i].adc, b.reads[i].adc) << i;
    EXPECT_EQ(a.reads[i].adc, c.reads[i].adc) << i;
    EXPECT_EQ(a.reads[i].record.start_sample, c.reads[i].record.start_sample);
    EXPECT_EQ(a.reads[i].record.read_number, c.reads[i].record.read_number);
  }
  EXPECT_EQ(a.run_infos, c.run_infos);
  // Another seed gives other reads.
  o.seed = 43;
  ASSERT_TRUE(pipeline::simulate(dir / "s43.pod5", o).is_ok());
  EXPECT_NE(truth1, slurp(dir / "s43.truth.csv"));
}

TEST(SimulateRun, Pod5MatchesTruth) {
  const fs::path dir = test::scratch_dir("truth");
  auto o = small_options(200);
  o.n_threads = 2;
  o.barcodes = "synthetic:6";
  o.writer.vbz = false;  // the uncompressed path too
  pipeline::SimulateStats stats;
  ASSERT_TRUE(pipeline::simulate(dir / "sim.pod5", o, &stats).is_ok());
  EXPECT_EQ(stats.n_reads, 200u);
  EXPECT_TRUE(stats.kmer_synthetic);
  EXPECT_EQ(stats.truth_path, dir / "sim.truth.csv");
  const Truth truth = parse_truth(dir / "sim.truth.csv");
  EXPECT_EQ(truth.header,
            "read_id,barcode,adapter_start,adapter_end,barcode_start,barcode_end,polya_start,polya_end,"
            "transcript_start,num_samples,transcript");
  ASSERT_FALSE(truth.comments.empty());
  EXPECT_NE(truth.comments[0].find("synthetic:6 (SYNTHETIC"), std::string::npos) << truth.comments[0];
  const PodData pod = read_pod5(dir / "sim.pod5");
  ASSERT_EQ(pod.run_infos.size(), 1u);
  const pod5::RunInfo& ri = pod.run_infos[0];
  EXPECT_EQ(ri.sample_rate, 4000);
  EXPECT_EQ(ri.adc_min, 0);
  EXPECT_EQ(ri.adc_max, 2047);
  bool tagged = false;
  for (const auto& [k, v] : ri.context_tags) {
    if (k == "simulator_kmer_model") tagged = v.find("SYNTHETIC") != std::string::npos;
  }
  EXPECT_TRUE(tagged);
  ASSERT_EQ(truth.rows.size(), 200u);
  ASSERT_EQ(pod.reads.size(), 200u);
  std::set<std::string> seen_barcodes;
  uint64_t total = 0;
  for (size_t i = 0; i < truth.rows.size(); ++i) {
    const TruthRow& r = truth.rows[i];
    const ReadData& rd = pod.reads[i];
    EXPECT_EQ(r.read_id, rd.record.read_id.to_string());
    EXPECT_EQ(r.num_samples, rd.record.num_samples);
    EXPECT_EQ(r.num_samples, rd.adc.size());
    EXPECT_LE(r.adapter_start, r.barcode_start);
    EXPECT_LT(r.barcode_start, r.barcode_end);
    EXPECT_EQ(r.barcode_end, r.adapter_end);
    EXPECT_EQ(r.adapter_end, r.polya_start);
    EXPECT_LT(r.polya_start, r.polya_end);
    EXPECT_EQ(r.polya_end, r.transcript_start);
    EXPECT_LT(r.transcript_start, r.num_samples);
    EXPECT_GT(r.adapter_end - r.adapter_start, 1000u);  // ADAPTed's minimum adapter length
    EXPECT_EQ(r.transcript, "random");
    seen_barcodes.insert(r.barcode);
    const auto [lo, hi] = std::minmax_element(rd.adc.begin(), rd.adc.end());
    EXPECT_GE(*lo, ri.adc_min);
    EXPECT_LE(*hi, ri.adc_max);
    EXPECT_FLOAT_EQ(rd.record.calibration_scale, 0.1462070643901825f);
    EXPECT_EQ(rd.record.end_reason, "signal_positive");
    EXPECT_GE(rd.record.channel, 1u);
    EXPECT_LE(rd.record.channel, 512u);
    // The poly(A) is brighter than the adapter, as ADAPTed's plausibility check expects.
    const auto pa = to_pa(rd);
    const RegionStats ad = region_stats(pa, r.adapter_start, r.adapter_end);
    const RegionStats pl = region_stats(pa, r.polya_start, r.polya_end);
    EXPECT_GT(pl.median, 1.3 * ad.median) << i;
    total += r.num_samples;
  }
  EXPECT_EQ(seen_barcodes.size(), 6u);
  EXPECT_EQ(stats.n_samples, total);
}

TEST(SimulateRun, TranscriptsFromFasta) {
  const fs::path dir = test::scratch_dir("fasta");
  write_file(dir / "tx.fa", ">txA some description\nACGUACGUAC\nGGGCCCAAAUUU\n>txB\n" +
                                std::string(300, 'G') + "\n");
  auto o = small_options(40);
  o.transcripts = (dir / "tx.fa").string();
  ASSERT_TRUE(pipeline::simulate(dir / "f.pod5", o).is_ok());
  const Truth t = parse_truth(dir / "f.truth.csv");
  ASSERT_EQ(t.rows.size(), 40u);
  std::set<std::string> names;
  for (const auto& r : t.rows) names.insert(r.transcript);
  EXPECT_EQ(names, (std::set<std::string>{"txA", "txB"}));
  // txB (300 nt) reads last much longer than txA (22 nt).
  std::vector<double> la, lb;
  for (const auto& r : t.rows) {
    (r.transcript == "txA" ? la : lb).push_back(static_cast<double>(r.num_samples - r.transcript_start));
  }
  EXPECT_GT(median(lb), 5 * median(la));
  write_file(dir / "bad.fa", "ACGT\n");
  o.transcripts = (dir / "bad.fa").string();
  const Status st = pipeline::simulate(dir / "g.pod5", o);
  EXPECT_NE(st.message().find("bad.fa:1"), std::string::npos) << st.message();
}

// Realism: with the real RNA004 9-mer table, the simulated adapter and poly(A) look like real
// reads'. Adapter vs the real RNA004 reads (samples [200, 1200) of each read: every real read's
// adapter is longer than 1,250 samples per its Dorado `ts`, and the first ~200 are a low leader);
// poly(A) vs the real RNA002 WarpDemuX sample reads (the only real poly(A) here; compared as the
// poly(A)/adapter level ratio and the within-window sd, which carry over between chemistries).
// Numbers are printed; bench/results/simulate.md records them.
TEST(SimulateRealism, AdapterAndPolyAStatisticsMatchRealReads) {
  // Real RNA004 adapter.
  const PodData real4 = read_pod5(test::shared_data(kRealRna004));
  ASSERT_GT(real4.reads.size(), 100u);
  std::vector<RegionStats> real_ad;
  for (const auto& rd : real4.reads) {
    if (rd.adc.size() < 1300) continue;
    real_ad.push_back(region_stats(to_pa(rd), 200, 1200));
  }
  const RegionStats R = summarise(real_ad);

  // Real RNA002 poly(A).
  std::vector<double> real_ratio, real_pa_sd;
  const PodData real2 = read_pod5(test::shared_data(kRealRna002));
  for (const auto& rd : real2.reads) {
    if (auto f = find_polya(to_pa(rd))) {
      real_ratio.push_back((*f)[1] / (*f)[0]);
      real_pa_sd.push_back((*f)[2]);
    }
  }
  ASSERT_GT(real_ratio.size(), 50u);

  // Simulated, real table.
  const fs::path dir = test::scratch_dir("realism");
  pipeline::SimulateOptions o;
  o.n_reads = 300;
  o.seed = 2024;
  o.n_threads = 2;
  o.kmer_model = test::shared_data(kRealTable).string();
  o.barcodes = "synthetic:4";
  o.transcript_length_mean = 100;
  ASSERT_TRUE(pipeline::simulate(dir / "sim.pod5", o).is_ok());
  const Truth truth = parse_truth(dir / "sim.truth.csv");
  const PodData sim = read_pod5(dir / "sim.pod5");
  ASSERT_EQ(sim.reads.size(), truth.rows.size());
  std::vector<RegionStats> sim_ad;
  std::vector<double> sim_ratio, sim_pa_sd, sim_len;
  for (size_t i = 0; i < sim.reads.size(); ++i) {
    const auto& r = truth.rows[i];
    const auto pa = to_pa(sim.reads[i]);
    sim_ad.push_back(region_stats(pa, r.adapter_start + 200, r.adapter_start + 1200));
    sim_len.push_back(static_cast<double>(r.adapter_end - r.adapter_start));
    std::vector<double> ad(pa.begin() + static_cast<std::ptrdiff_t>(r.adapter_start + 300),
                           pa.begin() + static_cast<std::ptrdiff_t>(r.adapter_end));
    std::vector<double> pol(pa.begin() + static_cast<std::ptrdiff_t>(r.polya_start),
                            pa.begin() + static_cast<std::ptrdiff_t>(r.polya_end));
    sim_ratio.push_back(median(pol) / median(ad));
    // Window sd as in find_polya (150-sample windows).
    std::vector<double> sds;
    for (size_t w = 0; w + 150 <= pol.size(); w += 150) {
      double m = 0, ss = 0;
      for (size_t j = w; j < w + 150; ++j) m += pol[j];
      m /= 150;
      for (size_t j = w; j < w + 150; ++j) ss += (pol[j] - m) * (pol[j] - m);
      sds.push_back(std::sqrt(ss / 150));
    }
    if (!sds.empty()) sim_pa_sd.push_back(median(sds));
  }
  const RegionStats S = summarise(sim_ad);
  std::printf("adapter  real RNA004: median %.2f pA, MAD %.2f pA, noise %.2f pA (%zu reads)\n", R.median,
              R.mad, R.noise, real_ad.size());
  std::printf("adapter  simulated  : median %.2f pA, MAD %.2f pA, noise %.2f pA; length median %.0f\n",
              S.median, S.mad, S.noise, median(sim_len));
  std::printf("poly(A)  real RNA002: level/adapter %.3f, window sd %.2f pA (%zu reads)\n", median(real_ratio),
              median(real_pa_sd), real_ratio.size());
  std::printf("poly(A)  simulated  : level/adapter %.3f, window sd %.2f pA\n", median(sim_ratio),
              median(sim_pa_sd));
  // Tolerances: adapter level within 4 pA, spread and noise within 20%; poly(A) ratio within
  // 0.06, window sd within 35% (RNA002 samples at 3 kHz on another pore).
  EXPECT_NEAR(S.median, R.median, 4.0);
  EXPECT_NEAR(S.mad, R.mad, 0.2 * R.mad);
  EXPECT_NEAR(S.noise, R.noise, 0.2 * R.noise);
  EXPECT_NEAR(median(sim_ratio), median(real_ratio), 0.06);
  EXPECT_NEAR(median(sim_pa_sd), median(real_pa_sd), 0.35 * median(real_pa_sd));
  // Adapter length like the real ones (Dorado ts median 2,200 samples).
  EXPECT_NEAR(median(sim_len), 2200.0, 300.0);
}

}  // namespace
}  // namespace escpod
