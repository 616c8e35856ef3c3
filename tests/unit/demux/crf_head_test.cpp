// The CTC-CRF head on synthetic prepared reads, with the real SeqTagger models: the window rules
// (v1: last chunk before the boundary, zero-padded; v2: rolling windows from the read start), no
// window -> kNoWindow with no columns, determinism, gates, and the columns per decoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "escpod/demux/crf_head.hpp"
#include "alloc_counter.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

// A signal that looks like nanopore current in picoamps: a random walk of levels with noise.
std::vector<float> synthetic_signal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 2.0f), jump(0.0f, 12.0f);
  std::vector<float> pa(n);
  float level = 80.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 9 == 0) level = std::clamp(level + jump(rng), 50.0f, 120.0f);
    pa[i] = level + noise(rng);
  }
  return pa;
}

LoadedHead load(const char* folder, const CrfHeadOptions& o = {}) {
  auto h = load_crf_head(test::shared_data(std::string("seqtagger/") + folder), o);
  EXPECT_TRUE(h.is_ok()) << h.status().message();
  return std::move(h).value();
}

// Classifies one read into `c`, a call slot that may hold an earlier read's call (as the engine's).
void classify_into(const Head& head, HeadScratch& scratch, std::span<const float> pa, int64_t adapter_end,
                   Classification& c) {
  PreparedRead r;
  r.pa = pa;
  r.num_samples = pa.size();
  r.adapter_end = adapter_end;
  head.classify(std::span<const PreparedRead>(&r, 1), scratch, std::span<Classification>(&c, 1));
}

Classification classify(const Head& head, HeadScratch& scratch, std::span<const float> pa, int64_t adapter_end) {
  Classification c;
  classify_into(head, scratch, pa, adapter_end, c);
  return c;
}

TEST(CrfHead, SeqTaggerV1DeclaresItsWindowColumnsAndLabels) {
  LoadedHead h = load("b04_RNA004");
  EXPECT_EQ(h.kind, "crf");
  ASSERT_TRUE(h.signal_processing.has_value());
  // A SeqTagger folder pins no detector: it runs with the LLR detector (no CNN file needed).
  EXPECT_FALSE(h.signal_processing->uses_cnn());
  const HeadInput in = h.head->input();
  EXPECT_EQ(in.kind, HeadInputKind::kSignalWindow);
  EXPECT_EQ(in.window_begin, -2000);
  EXPECT_EQ(in.window_end, 0);
  EXPECT_EQ(in.batch_size, 4u);  // one window per read: reads share encoder calls (--crf-batch)
  const std::vector<std::string> want = {"window_start", "edit_dist", "second_dist", "call_len",
                                         "mean_post", "gate", "baseq"};
  EXPECT_EQ(std::vector<std::string>(h.head->extra_columns().begin(), h.head->extra_columns().end()), want);
  EXPECT_EQ(std::vector<int32_t>(h.head->labels().begin(), h.head->labels().end()),
            (std::vector<int32_t>{1, 2, 3, 4}));
  // Outputs are named by reference (docs/demux.md §8.1), in labels() order.
  EXPECT_EQ(std::vector<std::string>(h.head->label_names().begin(), h.head->label_names().end()),
            (std::vector<std::string>{"Barcode_1", "Barcode_2", "Barcode_3", "Barcode_4"}));
}

// load_head finds the CRF head from the folder itself (nothing registered first), all four
// SeqTagger folders alike; a folder that holds neither file is an error naming it and what was
// looked for.
TEST(CrfHead, LoadHeadRecognisesTheFolderOrSaysWhatItLookedFor) {
  for (const char* folder : {"b04_RNA004", "b96_RNA004", "b13_RNA004_mRNA", "b07_RNA004_tRNA"}) {
    auto h = load_head(test::shared_data(std::string("seqtagger/") + folder), {});
    ASSERT_TRUE(h.is_ok()) << folder << ": " << h.status().message();
    EXPECT_EQ(h->kind, "crf") << folder;
    ASSERT_TRUE(h->signal_processing.has_value());
    EXPECT_FALSE(h->signal_processing->uses_cnn()) << folder;
  }
  const auto empty = test::scratch_dir("crf_no_model");
  auto none = load_head(empty, {});
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = none.status().message();
  EXPECT_NE(m.find(empty.string()), std::string::npos) << m;
  EXPECT_NE(m.find("crf: config.toml"), std::string::npos) << m;
  EXPECT_NE(m.find("metadata.json with format escapepod-crf-encoder/N"), std::string::npos) << m;
}

TEST(CrfHead, V1WindowEndsAtTheBoundaryAndIsZeroPaddedWhenShort) {
  LoadedHead h = load("b04_RNA004");
  auto scratch = h.head->make_scratch();
  const std::vector<float> pa = synthetic_signal(5000, 1);
  Classification c = classify(*h.head, *scratch, pa, 3000);
  ASSERT_EQ(c.probabilities.size(), 7u);
  EXPECT_EQ(c.probabilities[0], 1000.0);  // window [1000, 3000)
  EXPECT_GE(c.class_index, 0);
  EXPECT_EQ(c.best_label, c.class_index + 1);
  c = classify(*h.head, *scratch, pa, 1500);
  ASSERT_EQ(c.probabilities.size(), 7u);
  EXPECT_EQ(c.probabilities[0], -500.0);  // 500 zeros, then [0, 1500)
}

TEST(CrfHead, NoUsableWindowIsNoWindowWithNoColumns) {
  LoadedHead h = load("b04_RNA004");
  auto scratch = h.head->make_scratch();
  const std::vector<float> pa = synthetic_signal(5000, 2);
  for (int64_t adapter_end : {int64_t{0}, int64_t{5001}, int64_t{-3}}) {
    const Classification c = classify(*h.head, *scratch, pa, adapter_end);
    EXPECT_EQ(c.status, CallStatus::kNoWindow) << adapter_end;
    EXPECT_EQ(c.reason(), "no usable barcode window");
    EXPECT_EQ(c.label, kUnclassifiedLabel);
    EXPECT_TRUE(c.probabilities.empty());
  }
  const std::vector<float> flat(5000, 80.0f);  // MAD 0: med/MAD normalisation impossible
  EXPECT_EQ(classify(*h.head, *scratch, flat, 3000).status, CallStatus::kNoWindow);
}

TEST(CrfHead, CallsAreDeterministicAcrossScratchesAndRepeats) {
  LoadedHead h = load("b96_RNA004");
  auto a = h.head->make_scratch();
  auto b = h.head->make_scratch();
  const std::vector<float> pa = synthetic_signal(6000, 3);
  const Classification first = classify(*h.head, *a, pa, 4000);
  classify(*h.head, *a, synthetic_signal(6000, 4), 2500);  // state left in the scratch
  const Classification again = classify(*h.head, *a, pa, 4000);
  const Classification other = classify(*h.head, *b, pa, 4000);
  EXPECT_EQ(first.probabilities, again.probabilities);
  EXPECT_EQ(first.probabilities, other.probabilities);
  EXPECT_EQ(first.class_index, other.class_index);
}

TEST(CrfHead, V2RollingWindowsStartOnTheStepGridWithinMaxChunk) {
  LoadedHead h = load("b13_RNA004_mRNA");
  auto scratch = h.head->make_scratch();
  for (uint32_t seed = 5; seed < 8; ++seed) {
    const Classification c = classify(*h.head, *scratch, synthetic_signal(9000, seed), 8000);
    ASSERT_FALSE(c.probabilities.empty());
    const double start = c.probabilities[0];
    EXPECT_GE(start, 0.0);
    EXPECT_LE(start, 4000.0);  // the last window [4000, 6000) ends at max_chunksize
    EXPECT_EQ(std::fmod(start, 500.0), 0.0);
  }
  // Fewer decoded samples than one chunk: no window (v2 does not pad).
  EXPECT_EQ(classify(*h.head, *scratch, synthetic_signal(1500, 9), 1000).status, CallStatus::kNoWindow);
}

// A v2 read's rolling windows go through the encoder together (CrfHeadOptions::max_window_batch):
// every column (window start, distances, mean posterior, baseq, lattice scores) is the same as
// with one window per call, for a full read (nine windows: one batch of 9, or 4 + 4 + 1, where the
// best window's scores are copied out of the batch output before the next call) and shorter reads
// (2 and 5 windows); and alternating window counts allocate nothing once each has run.
TEST(CrfHead, BatchedRollingWindowsGiveTheCallsOfOneWindowPerCall) {
  for (CrfDecoderChoice decoder : {CrfDecoderChoice::kBeam, CrfDecoderChoice::kPosterior}) {
    CrfHeadOptions o;
    o.decoder = decoder;
    o.ref_scores = true;
    o.min_baseq = 0.0;
    o.min_mean_post = 0.0;
    o.max_window_batch = 1;
    LoadedHead single = load("b13_RNA004_mRNA", o);
    o.max_window_batch = 4;
    LoadedHead four = load("b13_RNA004_mRNA", o);
    o.max_window_batch = 16;
    LoadedHead all = load("b13_RNA004_mRNA", o);
    auto s1 = single.head->make_scratch(), s4 = four.head->make_scratch(), s16 = all.head->make_scratch();
    int compared = 0;
    for (uint32_t seed = 20; seed < 26; ++seed) {
      for (size_t len : {size_t{9000}, size_t{4200}, size_t{2600}}) {
        const std::vector<float> pa = synthetic_signal(len, seed);
        const Classification a = classify(*single.head, *s1, pa, 1000);
        const Classification b = classify(*four.head, *s4, pa, 1000);
        const Classification c = classify(*all.head, *s16, pa, 1000);
        ASSERT_EQ(a.status, CallStatus::kClassified) << seed << " " << len;
        EXPECT_EQ(b.probabilities, a.probabilities) << seed << " " << len << " " << crf_decoder_name(decoder);
        EXPECT_EQ(c.probabilities, a.probabilities) << seed << " " << len << " " << crf_decoder_name(decoder);
        EXPECT_EQ(crf_read_call(*s16, 0)->sequence, crf_read_call(*s1, 0)->sequence);
        ++compared;
      }
    }
    EXPECT_EQ(compared, 18);
  }
  CrfHeadOptions ref;
  ref.load.encoder.backend = nn::Backend::kReference;
  LoadedHead h = load("b13_RNA004_mRNA", ref);
  auto scratch = h.head->make_scratch();
  const std::vector<float> full = synthetic_signal(9000, 30), two = synthetic_signal(2600, 31);
  Classification c;
  classify_into(*h.head, *scratch, full, 1000, c);
  classify_into(*h.head, *scratch, two, 1000, c);
  const size_t before = test::allocation_count();
  classify_into(*h.head, *scratch, full, 1000, c);
  classify_into(*h.head, *scratch, two, 1000, c);
  EXPECT_EQ(test::allocation_count(), before);
  CrfHeadOptions bad;
  bad.max_window_batch = 17;
  auto refused = load_crf_head(test::shared_data("seqtagger/b13_RNA004_mRNA"), bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("1..16"), std::string::npos) << refused.status().message();
}

// One-window placements (SeqTagger v1, bundles) batch the windows of the reads of one classify()
// call: every read's call equals its call alone, whatever the batch and wherever the reads
// without a window fall in it, at both decoders.
TEST(CrfHead, ReadsSharingAnEncoderCallGetTheCallsOfOneReadPerCall) {
  std::vector<std::vector<float>> signals;
  std::vector<PreparedRead> reads;
  for (uint32_t seed = 40; seed < 51; ++seed) signals.push_back(synthetic_signal(3000 + 400 * (seed % 4), seed));
  for (size_t i = 0; i < signals.size(); ++i) {
    PreparedRead r;
    r.pa = signals[i];
    r.num_samples = signals[i].size();
    r.adapter_end = i % 5 == 3 ? 0 : 2500 + 100 * static_cast<int64_t>(i);  // reads 3 and 8: no window
    reads.push_back(r);
  }
  for (CrfDecoderChoice decoder : {CrfDecoderChoice::kBeam, CrfDecoderChoice::kPosterior}) {
    CrfHeadOptions o;
    o.decoder = decoder;
    o.max_window_batch = 1;
    LoadedHead single = load("b04_RNA004", o);
    auto s1 = single.head->make_scratch();
    std::vector<Classification> want(reads.size());
    std::vector<std::string> want_seq(reads.size()), want_ref(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) {
      single.head->classify(std::span<const PreparedRead>(&reads[i], 1), *s1, std::span<Classification>(&want[i], 1));
      if (auto c = crf_read_call(*s1, 0)) {
        want_seq[i] = c->sequence;
        want_ref[i] = c->reference;
      }
    }
    EXPECT_EQ(want[3].status, CallStatus::kNoWindow);
    EXPECT_EQ(want[8].status, CallStatus::kNoWindow);
    for (int32_t batch : {4, 16}) {
      o.max_window_batch = batch;
      LoadedHead batched = load("b04_RNA004", o);
      EXPECT_EQ(batched.head->input().batch_size, static_cast<size_t>(batch));
      auto s = batched.head->make_scratch();
      std::vector<Classification> got(reads.size());
      batched.head->classify(reads, *s, got);  // 11 reads: batches of 4 + 4 + 3, or one of 11
      for (size_t i = 0; i < reads.size(); ++i) {
        EXPECT_EQ(got[i].status, want[i].status) << i << " batch " << batch;
        EXPECT_EQ(got[i].label, want[i].label) << i;
        EXPECT_EQ(got[i].probabilities, want[i].probabilities) << i << " batch " << batch << " "
                                                               << crf_decoder_name(decoder);
        // Each read's own call text (demux basecall's columns), not the call's last read's.
        const auto c = crf_read_call(*s, i);
        ASSERT_EQ(c.has_value(), want[i].status != CallStatus::kNoWindow) << i;
        if (c) {
          EXPECT_EQ(c->sequence, want_seq[i]) << i << " batch " << batch;
          EXPECT_EQ(c->reference, want_ref[i]) << i;
        }
      }
      EXPECT_FALSE(crf_read_call(*s, reads.size()).has_value());
    }
  }
}

TEST(CrfHead, GatesDecideTheStatusAndTheGateColumnNamesTheFirstFailure) {
  const std::vector<float> pa = synthetic_signal(5000, 10);
  CrfHeadOptions open;
  open.min_baseq = 0.0;
  open.min_mean_post = 0.0;
  LoadedHead loose = load("b04_RNA004", open);
  auto s1 = loose.head->make_scratch();
  const Classification pass = classify(*loose.head, *s1, pa, 3000);
  EXPECT_EQ(pass.status, CallStatus::kClassified);
  EXPECT_EQ(pass.label, pass.class_index + 1);
  EXPECT_EQ(pass.probabilities[5], 0.0);
  EXPECT_EQ(pass.reason(), "");
  EXPECT_EQ(pass.confidence, pass.probabilities[2] - pass.probabilities[1]);  // edit margin

  CrfHeadOptions strict = open;
  strict.min_baseq = 1000.0;  // no call reaches it
  LoadedHead gated = load("b04_RNA004", strict);
  auto s2 = gated.head->make_scratch();
  const Classification rejected = classify(*gated.head, *s2, pa, 3000);
  EXPECT_EQ(rejected.status, CallStatus::kBelowThreshold);
  EXPECT_EQ(rejected.label, kUnclassifiedLabel);
  EXPECT_EQ(rejected.class_index, pass.class_index);  // gates reject, never re-assign
  EXPECT_EQ(rejected.probabilities[5], 4.0);          // baseq gate
  EXPECT_EQ(rejected.reason(), "below threshold: gate --min-baseq");  // the reason names it
  // A call slot reused for a passing read forgets the earlier gate's reason.
  Classification reused = rejected;
  classify_into(*loose.head, *s1, pa, 3000, reused);
  EXPECT_EQ(reused.status, CallStatus::kClassified);
  EXPECT_EQ(reused.reason(), "");

  CrfHeadOptions post = open;
  post.decoder = CrfDecoderChoice::kPosterior;
  post.min_mean_post = 1.01;  // a posterior cannot exceed 1
  LoadedHead p = load("b04_RNA004", post);
  auto s3 = p.head->make_scratch();
  const Classification by_post = classify(*p.head, *s3, pa, 3000);
  EXPECT_EQ(by_post.status, CallStatus::kBelowThreshold);
  ASSERT_EQ(by_post.probabilities.size(), 6u);  // no baseq column with the posterior decoder
  EXPECT_EQ(by_post.probabilities[5], 5.0);
  EXPECT_EQ(by_post.reason(), "below threshold: gate --min-mean-post");
}

TEST(CrfHead, RefScoresAddLatticeColumnsAndDescribeNamesTheSources) {
  CrfHeadOptions o;
  o.ref_scores = true;
  LoadedHead h = load("b07_RNA004_tRNA", o);
  EXPECT_EQ(h.head->extra_columns().size(), 10u);
  auto scratch = h.head->make_scratch();
  const Classification c = classify(*h.head, *scratch, synthetic_signal(8000, 11), 7000);
  ASSERT_EQ(c.probabilities.size(), 10u);
  EXPECT_LT(c.probabilities[7], 0.0);  // log P(chosen reference | signal)
  // crf_best: a class index (0..6 for b07's seven references), which the engine writes as the
  // reference's name: the column is declared kClassName, and only that one.
  EXPECT_GE(c.probabilities[9], 0.0);
  EXPECT_LE(c.probabilities[9], 6.0);
  EXPECT_EQ(c.probabilities[9], std::floor(c.probabilities[9]));
  const auto kinds = h.head->extra_column_kinds();
  ASSERT_EQ(kinds.size(), 10u);
  for (size_t k = 0; k < kinds.size(); ++k) {
    EXPECT_EQ(kinds[k], k == 9 ? ColumnKind::kClassName : ColumnKind::kNumber) << h.head->extra_columns()[k];
  }
  const std::string text = h.head->describe();
  EXPECT_NE(text.find("min baseq 50 (the model's min_baseQ)"), std::string::npos) << text;
  EXPECT_NE(text.find("seqtagger_emitted"), std::string::npos);
}

// classify() allocates nothing once its scratch has held a read: proved on the encoder's reference
// backend (oneDNN's execute() allocates its argument map; nn_test bounds that separately), for
// the beam and posterior decoders, lattice scoring, the v1 (padded, med/MAD) and v2 (rolling)
// windows, and a read with no window.
TEST(CrfHead, SteadyStateClassifyDoesNotAllocate) {
  for (const char* folder : {"b04_RNA004", "b13_RNA004_mRNA"}) {
    for (CrfDecoderChoice decoder : {CrfDecoderChoice::kBeam, CrfDecoderChoice::kPosterior}) {
      CrfHeadOptions o;
      o.load.encoder.backend = nn::Backend::kReference;
      o.decoder = decoder;
      o.ref_scores = true;
      LoadedHead h = load(folder, o);
      auto scratch = h.head->make_scratch();
      const std::vector<float> a = synthetic_signal(4000, 12), b = synthetic_signal(4000, 13);
      classify(*h.head, *scratch, a, 3000);  // sizes the scratch and the call's columns
      PreparedRead r;
      r.pa = b;
      r.num_samples = b.size();
      Classification c;
      r.adapter_end = 3000;
      h.head->classify(std::span<const PreparedRead>(&r, 1), *scratch, std::span<Classification>(&c, 1));
      const size_t before = test::allocation_count();
      for (int64_t adapter_end : {int64_t{1200}, int64_t{0}, int64_t{4500}}) {
        r.adapter_end = adapter_end;
        h.head->classify(std::span<const PreparedRead>(&r, 1), *scratch, std::span<Classification>(&c, 1));
      }
      EXPECT_EQ(test::allocation_count(), before) << folder << " " << crf_decoder_name(decoder);
    }
  }
}

}  // namespace
}  // namespace escpod::demux
