// The streaming classifier (pipeline/demux/live_classifier.hpp) against the fused run on the 200
// real RNA004 reads with WarpDemuX's WDX4 model: the whole read gives the fused run's call, however
// it is cut into chunks, early decisions are classified calls that mostly agree with it, and the
// per-read state stays bounded.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "escpod/pipeline/demux/demux.hpp"
#include "escpod/pipeline/demux/live_classifier.hpp"
#include "escpod/pod5/file_reader.hpp"
#include "escpod/pod5/vbz.hpp"
#include "test_data.hpp"

namespace escpod::pipeline {
namespace {

struct RawRead {
  std::string id;
  std::vector<int16_t> adc;
  float offset = 0.0f, scale = 1.0f;
};

// A set of real reads and a WarpDemuX model that fits them.
struct DataSet {
  const char* reads;
  const char* model;
  size_t n_reads;
  size_t n_barcode_calls;  // the fused run's barcode calls (not unclassified)
};
// RNA004: the 180 real reads (yeast tRNA, mostly unclassified by WDX4: few adapters validate)
// with the boundary CNN; RNA002: WarpDemuX's sample reads with its own WDX4 RNA002 model.
const DataSet kRna004{"escapepod/drna/yeast_trna_reads.pod5", "warpdemux/WDX4_rna004_v1_0.json", 180, 4};
const DataSet kRna002{"warpdemux/sample/small_pod5_0.pod5", "warpdemux/joblib/rna002/WDX4_rna002_v0_4_4.joblib",
                      200, 131};
// The CTC-CRF head (SeqTagger's b04 folder, LLR detector): a signal-window head, decided once its
// window is complete. Its default gates leave every one of these tRNA reads unclassified, so the
// set checks the window and the reasons, not barcode calls.
const DataSet kCrf{"escapepod/drna/yeast_trna_reads.pod5", "seqtagger/b04_RNA004", 180, 0};

std::filesystem::path wdx4() { return test::shared_data(kRna004.model); }

std::vector<RawRead> load_reads(const DataSet& set) {
  auto reader = pod5::FileReader::open(test::shared_data(set.reads));
  EXPECT_TRUE(reader.is_ok()) << reader.status().to_string();
  std::vector<RawRead> out;
  pod5::VbzCodec codec;
  for (size_t b = 0; b < (*reader)->n_read_batches(); ++b) {
    auto batch = (*reader)->read_batch(b);
    EXPECT_TRUE(batch.is_ok());
    for (size_t i = 0; i < batch->size(); ++i) {
      RawRead r{batch->read_id[i].to_string(), std::vector<int16_t>(batch->num_samples[i]),
                batch->calibration_offset[i], batch->calibration_scale[i]};
      EXPECT_TRUE((*reader)->read_signal(batch->rows_of(i), r.adc, codec).is_ok());
      out.push_back(std::move(r));
    }
  }
  return out;
}

struct FusedCall {
  std::string label, reason;
};

// read id -> the fused run's barcode and reason, from its classifications table.
std::map<std::string, FusedCall> fused_calls(const DataSet& set) {
  const auto dir = test::scratch_dir("fused");
  DemuxOptions o;
  o.model.path = test::shared_data(set.model);
  o.classifications_csv = dir / "calls.csv";
  DemuxReport report;
  const Status s = run_demux({test::shared_data(set.reads)}, o, &report);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  std::ifstream in(o.classifications_csv);
  std::string line;
  std::getline(in, line);  // header: read_id,barcode,confidence,adapter_start,adapter_end,detector,reason,...
  std::map<std::string, FusedCall> calls;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    calls[cells.at(0)] = {cells.at(1), cells.at(6)};
  }
  return calls;
}

LiveClassifier make_classifier(const DataSet& set, LiveOptions options = {}) {
  ModelSpec spec;
  spec.path = test::shared_data(set.model);
  auto c = LiveClassifier::create(spec, options);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return std::move(*c);
}

// Feeds `r` in chunks of `chunk` samples, `end` with the last one; stops at the first final
// decision unless `to_end`.
LiveDecision stream(const LiveClassifier& c, const RawRead& r, size_t chunk, LiveClassifier::Scratch& s) {
  LiveRead read = c.new_read(r.offset, r.scale);
  const std::span<const int16_t> all(r.adc);
  for (size_t at = 0;;) {
    const size_t n = std::min(chunk, all.size() - at);
    const bool end = at + n == all.size();
    const LiveDecision& d = c.feed(read, all.subspan(at, n), end, s);
    at += n;
    if (d.final() || end) return d;
  }
}

// The label a final decision routes to, as the fused table writes it.
std::string routed(const LiveDecision& d) { return d.state == LiveState::kDecided ? d.label : "unclassified"; }

class LiveClassifierTest : public ::testing::TestWithParam<const DataSet*> {
 protected:
  const DataSet& set() const { return *GetParam(); }
  const std::vector<RawRead>& reads() {
    auto& cached = cache()[GetParam()];
    if (cached.first.empty()) cached = {load_reads(set()), fused_calls(set())};
    return cached.first;
  }
  const FusedCall& fused(const std::string& id) { return cache()[GetParam()].second.at(id); }

 private:
  using Entry = std::pair<std::vector<RawRead>, std::map<std::string, FusedCall>>;
  static std::map<const DataSet*, Entry>& cache() {
    static std::map<const DataSet*, Entry> c;
    return c;
  }
};

TEST_P(LiveClassifierTest, TheWholeReadInOneFeedIsTheFusedRunsCall) {
  ASSERT_EQ(reads().size(), set().n_reads);
  const LiveClassifier c = make_classifier(set());
  auto s = c.make_scratch();
  size_t n_barcode = 0;
  for (const RawRead& r : reads()) {
    LiveRead read = c.new_read(r.offset, r.scale);
    const LiveDecision& d = c.feed(read, r.adc, /*end=*/true, s);
    ASSERT_TRUE(d.final()) << r.id;
    EXPECT_FALSE(d.early) << r.id;
    EXPECT_EQ(routed(d), fused(r.id).label) << r.id;
    EXPECT_EQ(d.reason, fused(r.id).reason) << r.id;
    EXPECT_EQ(d.samples_seen, r.adc.size());
    if (d.barcode >= 0) {
      ++n_barcode;
      EXPECT_EQ(c.barcode_names()[static_cast<size_t>(d.barcode)], d.label);
    }
  }
  EXPECT_EQ(n_barcode, set().n_barcode_calls);  // the fused run's count: the check is not vacuous
}

TEST_P(LiveClassifierTest, ChunkedWithoutEarlyAttemptsIsTheFusedRunsCallForAnyChunkSize) {
  LiveOptions o;
  o.first_attempt = uint64_t{1} << 40;  // only the decisive point or the end decides
  if (&set() != &kRna004) o.decide_by = uint64_t{1} << 40;  // the LLR-only detector reads whole reads
  const LiveClassifier c = make_classifier(set(), o);
  auto s = c.make_scratch();
  for (size_t chunk : {size_t{1} << 30, size_t{4000}, size_t{401}}) {
    for (const RawRead& r : reads()) {
      const LiveDecision d = stream(c, r, chunk, s);
      ASSERT_TRUE(d.final()) << r.id;
      EXPECT_EQ(routed(d), fused(r.id).label) << r.id << " chunk " << chunk;
      EXPECT_EQ(d.reason, fused(r.id).reason) << r.id << " chunk " << chunk;
      EXPECT_LE(d.samples_seen, std::min<uint64_t>(c.decisive_samples() + chunk, r.adc.size()));
    }
  }
}

TEST_P(LiveClassifierTest, EarlyDecisionsAreConfidentCallsThatMostlyAgreeWithTheWholeRead) {
  LiveOptions o;
  o.min_confidence = 0.2;
  const LiveClassifier c = make_classifier(set(), o);
  auto s = c.make_scratch();
  size_t n_early = 0, n_agree = 0;
  for (const RawRead& r : reads()) {
    const LiveDecision d = stream(c, r, 400, s);
    ASSERT_TRUE(d.final()) << r.id;
    if (!d.early) {
      EXPECT_EQ(routed(d), fused(r.id).label) << r.id;
      continue;
    }
    ++n_early;
    EXPECT_EQ(d.state, LiveState::kDecided);
    EXPECT_GE(d.barcode, 0);
    EXPECT_GE(d.confidence, 0.2);
    EXPECT_LT(d.samples_seen, c.decisive_samples());
    EXPECT_LE(static_cast<uint64_t>(d.adapter_end) + 100, d.samples_seen);
    n_agree += d.label == fused(r.id).label ? 1 : 0;
  }
  RecordProperty("early", static_cast<int>(n_early));
  RecordProperty("agree", static_cast<int>(n_agree));
  if (&set() == &kRna002) {
    EXPECT_GT(n_early, 60u);
    EXPECT_GE(static_cast<double>(n_agree), 0.9 * static_cast<double>(n_early))
        << n_agree << " of " << n_early << " early decisions agree";
  }
}

TEST_P(LiveClassifierTest, StateIsBoundedAndFinalDecisionsStay) {
  const LiveClassifier c = make_classifier(set());
  auto s = c.make_scratch();
  const RawRead* longest = &reads().front();
  for (const RawRead& r : reads()) if (r.adc.size() > longest->adc.size()) longest = &r;
  ASSERT_GT(longest->adc.size(), c.decisive_samples() + 2000);
  LiveRead read = c.new_read(longest->offset, longest->scale);
  const std::span<const int16_t> all(longest->adc);
  LiveDecision first;
  for (size_t at = 0; at < all.size(); at += 500) {
    const LiveDecision& d = c.feed(read, all.subspan(at, std::min<size_t>(500, all.size() - at)), false, s);
    if (d.final() && !first.final()) first = d;
    EXPECT_LE(read.state_bytes(), sizeof(LiveRead) + (c.decisive_samples() + 500) * sizeof(int16_t));
  }
  ASSERT_TRUE(first.final());
  EXPECT_EQ(read.decision().label, first.label);
  EXPECT_EQ(read.decision().samples_seen, first.samples_seen);  // later feeds change nothing
}

INSTANTIATE_TEST_SUITE_P(RealReads, LiveClassifierTest, ::testing::Values(&kRna004, &kRna002, &kCrf),
                         [](const auto& p) {
                           return p.param == &kRna004 ? "Rna004" : p.param == &kRna002 ? "Rna002" : "CrfB04";
                         });

// One classifier shared by threads, each with its own scratch and reads (how a read-until client
// feeds channels in parallel): every decision equals the one-thread decision. Run under TSan in CI.
TEST(LiveClassifierThreads, TwoThreadsFeedingTheirOwnReadsDecideAsOneThread) {
  const std::vector<RawRead> reads = load_reads(kRna002);
  LiveOptions o;
  o.min_confidence = 0.2;
  const LiveClassifier c = make_classifier(kRna002, o);
  std::vector<LiveDecision> alone(reads.size()), shared(reads.size());
  auto s = c.make_scratch();
  for (size_t i = 0; i < reads.size(); ++i) alone[i] = stream(c, reads[i], 900, s);
  auto work = [&](size_t first) {
    auto scratch = c.make_scratch();
    for (size_t i = first; i < reads.size(); i += 2) shared[i] = stream(c, reads[i], 900, scratch);
  };
  std::thread other(work, size_t{1});
  work(0);
  other.join();
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_EQ(shared[i].label, alone[i].label) << reads[i].id;
    EXPECT_EQ(shared[i].samples_seen, alone[i].samples_seen) << reads[i].id;
    EXPECT_EQ(shared[i].state, alone[i].state) << reads[i].id;
  }
}

TEST(LiveClassifier, TheRna004CnnDecidesBy13000Samples) {
  const LiveClassifier c = make_classifier(kRna004);
  EXPECT_EQ(c.decisive_samples(), 13000u);  // max(11,500-sample prefix, 13,000 short-read rule)
}

TEST(LiveClassifier, AReadWithoutSignalIsUndecidableAtItsEnd) {
  const LiveClassifier c = make_classifier(kRna004);
  auto s = c.make_scratch();
  LiveRead read = c.new_read(0.0f, 1.0f);
  EXPECT_EQ(c.feed(read, {}, false, s).state, LiveState::kNeedMore);
  const LiveDecision& d = c.feed(read, {}, true, s);
  EXPECT_EQ(d.state, LiveState::kUndecidable);
  EXPECT_EQ(d.reason, "read has no signal");
  EXPECT_EQ(live_state_name(d.state), "undecidable");
}

TEST(LiveClassifier, BadOptionsAreUsageErrors) {
  ModelSpec spec;
  spec.path = wdx4();
  LiveOptions o;
  o.attempt_every = 0;
  auto a = LiveClassifier::create(spec, o);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUsage);
  EXPECT_NE(a.status().message().find("--attempt-every"), std::string::npos);
  o = {};
  o.min_confidence = 1.5;
  auto b = LiveClassifier::create(spec, o);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("--min-confidence"), std::string::npos);
  o = {};
  o.decide_by = 30000;  // the CNN's calls are final by 13,000 samples: the value would be ignored
  auto c = LiveClassifier::create(spec, o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUsage);
  EXPECT_NE(c.status().message().find("--decide-by would be ignored"), std::string::npos);
  auto none = LiveClassifier::create(ModelSpec{}, LiveOptions{});
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUsage);
}

}  // namespace
}  // namespace escpod::pipeline
