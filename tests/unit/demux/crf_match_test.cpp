#include "escpod/demux/crf_match.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "alloc_counter.hpp"

namespace escpod::demux {
namespace {

std::string random_seq(std::mt19937& rng, size_t len, int n_symbols = 4) {
  static const char kSym[] = "ACGT";
  std::uniform_int_distribution<int> u(0, n_symbols - 1);
  std::string s(len, 'A');
  for (char& c : s) c = kSym[u(rng)];
  return s;
}

// A noisy copy: substitutions, insertions and deletions at rate `rate`.
std::string mutate(std::mt19937& rng, const std::string& s, double rate) {
  std::uniform_real_distribution<double> u(0, 1);
  std::string out;
  for (char c : s) {
    const double r = u(rng);
    if (r < rate / 3) continue;                                   // deletion
    if (r < 2 * rate / 3) out += random_seq(rng, 1);              // substitution
    else out += c;
    if (r > 1 - rate / 3) out += random_seq(rng, 1);              // insertion
  }
  return out;
}

// The rule of docs/demux.md §7.5 applied to plain-DP distances of every reference.
BarcodeMatch expected_match(const std::vector<BarcodeRef>& refs, const std::string& call) {
  int32_t best = INT32_MAX, second = INT32_MAX, idx = -1;
  for (size_t r = 0; r < refs.size(); ++r) {
    const int32_t d = edit_distance_dp(refs[r].sequence, call);
    if (d < best) {
      second = best;
      best = d;
      idx = static_cast<int32_t>(r);
    } else if (d < second) {
      second = d;
    }
  }
  BarcodeMatch m;
  m.best_idx = idx;
  m.best_dist = best;
  m.second_dist = refs.size() > 1 ? second : -1;
  return m;
}

// 100,000 random (panel, call) cases against plain DP on every kernel this CPU runs: panels of
// 1..24 references of 1..70 bases (some over 64: the scalar multi-word path), two-letter panels
// and calls (many exact ties), empty calls, calls copied from or mutated from a reference.
TEST(CrfMatch, EqualsPlainDpOnRandomCases) {
  std::mt19937 rng(20261201);
  const std::vector<CrfBackend> kernels = {CrfBackend::kScalar, CrfBackend::kAvx2, CrfBackend::kAvx512};
  size_t cases = 0, ties = 0, empties = 0, singles = 0, long_panels = 0;
  for (int panel_i = 0; panel_i < 1000; ++panel_i) {
    std::uniform_int_distribution<int> n_refs_d(1, 24);
    const int n_refs = panel_i % 10 == 0 ? 1 : n_refs_d(rng);
    const int n_symbols = panel_i % 3 == 0 ? 2 : 4;
    const bool allow_long = panel_i % 7 == 0;
    std::uniform_int_distribution<int> len_d(1, allow_long ? 70 : 40);
    std::vector<BarcodeRef> refs;
    for (int r = 0; r < n_refs; ++r)
      refs.push_back({"bc" + std::to_string(r), random_seq(rng, static_cast<size_t>(len_d(rng)), n_symbols)});
    bool has_long = false;
    for (const auto& r : refs) has_long = has_long || r.sequence.size() > 64;
    long_panels += has_long;
    std::vector<BarcodePanel> panels;
    for (const CrfBackend k : kernels) {
      auto p = BarcodePanel::create(refs, PanelForm::kAsGiven, k);
      if (p.is_ok()) panels.push_back(std::move(p).value());
    }
    ASSERT_FALSE(panels.empty());
    for (int call_i = 0; call_i < 100; ++call_i) {
      std::string call;
      std::uniform_int_distribution<size_t> pick(0, refs.size() - 1);
      switch (call_i % 5) {
        case 0: call = ""; break;
        case 1: call = refs[pick(rng)].sequence; break;
        case 2: call = mutate(rng, refs[pick(rng)].sequence, 0.2); break;
        case 3: call = random_seq(rng, static_cast<size_t>(len_d(rng)), n_symbols); break;
        default: call = mutate(rng, refs[pick(rng)].sequence, 0.5) + "N"; break;
      }
      const BarcodeMatch want = expected_match(refs, call);
      for (const BarcodePanel& p : panels) {
        const BarcodeMatch got = p.match(call);
        ASSERT_EQ(got.best_idx, want.best_idx) << crf_backend_name(p.kernel()) << " panel " << panel_i << " call '"
                                               << call << "'";
        ASSERT_EQ(got.best_dist, want.best_dist) << crf_backend_name(p.kernel()) << " panel " << panel_i;
        ASSERT_EQ(got.second_dist, want.second_dist) << crf_backend_name(p.kernel()) << " panel " << panel_i;
      }
      ++cases;
      ties += want.has_second() && want.margin() == 0;
      empties += call.empty();
      singles += refs.size() == 1;
    }
  }
  std::printf("[crf_match] %zu cases: %zu exact ties, %zu empty calls, %zu single-reference, %zu long panels\n", cases,
              ties, empties, singles, long_panels);
  EXPECT_EQ(cases, 100000u);
  EXPECT_GT(ties, 1000u);
  EXPECT_GT(empties, 1000u);
  EXPECT_GT(singles, 1000u);
  EXPECT_GT(long_panels, 10u);
}

TEST(CrfMatch, MyersEqualsDpAtAnyLengthAndCap) {
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::uniform_int_distribution<int> len(0, 200);
    const std::string ref = random_seq(rng, static_cast<size_t>(len(rng)) + 1);
    const std::string text = i % 2 ? mutate(rng, ref, 0.3) : random_seq(rng, static_cast<size_t>(len(rng)));
    const int32_t d = edit_distance_dp(ref, text);
    ASSERT_EQ(edit_distance_myers(ref, text), d) << ref << " / " << text;
    const int32_t cap = i % 40;
    const int32_t capped = edit_distance_myers(ref, text, cap);
    if (d <= cap) ASSERT_EQ(capped, d);
    else ASSERT_GT(capped, cap);
  }
}

TEST(CrfMatch, TiesKeepTheLowerIndexAndSingleReferenceHasNoSecond) {
  auto p = BarcodePanel::create({{"a", "ACGTACGT"}, {"b", "ACGTACGA"}, {"c", "ACGTACGT"}});
  // "c" duplicates "a"'s sequence under another name: allowed (names are unique).
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  BarcodeMatch m = p->match("ACGTACGT");
  EXPECT_EQ(m.best_idx, 0);
  EXPECT_EQ(m.best_dist, 0);
  EXPECT_EQ(m.second_dist, 0);
  EXPECT_EQ(m.margin(), 0);
  m = p->match("ACGTACGC");  // one substitution from all three
  EXPECT_EQ(m.best_idx, 0);
  EXPECT_EQ(m.margin(), 0);
  EXPECT_EQ(p->min_pairwise_distance(), 0);

  auto one = BarcodePanel::create({{"only", "GGGTTT"}});
  ASSERT_TRUE(one.is_ok());
  m = one->match("");
  EXPECT_EQ(m.best_idx, 0);
  EXPECT_EQ(m.best_dist, 6);
  EXPECT_FALSE(m.has_second());
  EXPECT_EQ(m.second_dist, -1);
  EXPECT_EQ(m.margin(), -1);
  EXPECT_EQ(one->min_pairwise_distance(), -1);
}

TEST(CrfMatch, ValidatesReferences) {
  EXPECT_FALSE(BarcodePanel::create({}).is_ok());
  auto dup = BarcodePanel::create({{"x", "ACGT"}, {"x", "TTTT"}});
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos);
  auto bad = BarcodePanel::create({{"x", "ACGT"}, {"y", "ACNT"}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'N' at position 2"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("(y)"), std::string::npos);
  EXPECT_FALSE(BarcodePanel::create({{"x", ""}}).is_ok());
  auto lower = BarcodePanel::create({{"x", "acgt"}});
  ASSERT_TRUE(lower.is_ok());
  EXPECT_EQ(lower->match("ACGT").form, PanelForm::kAsGiven);
  EXPECT_EQ(lower->ref(0).sequence, "ACGT");
  EXPECT_EQ(lower->match("ACGT").best_dist, 0);
  EXPECT_EQ(lower->match("acgt").best_dist, 0);
}

TEST(CrfMatch, SeqTaggerEmittedFormIsReversedWithoutLastStateLenBases) {
  const std::vector<BarcodeRef> refs = {{"Barcode_1", "ACGTAAGGCC"}, {"Barcode_2", "TTTTTGCA"}};
  auto emitted = seqtagger_emitted_form(refs, 4);
  ASSERT_TRUE(emitted.is_ok());
  EXPECT_EQ((*emitted)[0].sequence, "CCGGAA");  // reversed CCGGAATGCA, first 10 - 4
  EXPECT_EQ((*emitted)[1].sequence, "ACGT");    // reversed ACGTTTTT, first 8 - 4
  EXPECT_EQ((*emitted)[0].name, "Barcode_1");
  auto p = BarcodePanel::create(std::move(emitted).value(), PanelForm::kSeqTaggerEmitted);
  ASSERT_TRUE(p.is_ok());
  EXPECT_STREQ(panel_form_name(p->form()), "seqtagger_emitted");
  EXPECT_EQ(p->match("CCGGAA").best_idx, 0);
  EXPECT_EQ(p->match("CCGGAA").form, PanelForm::kSeqTaggerEmitted);
  auto short_ref = seqtagger_emitted_form(std::vector<BarcodeRef>{{"s", "ACGT"}}, 4);
  ASSERT_FALSE(short_ref.is_ok());
  EXPECT_NE(short_ref.status().message().find("(s)"), std::string::npos);
}

TEST(CrfMatch, MatchAllocatesNothing) {
  std::mt19937 rng(3);
  std::vector<BarcodeRef> refs;
  for (int r = 0; r < 96; ++r) refs.push_back({"bc" + std::to_string(r), random_seq(rng, 30)});
  auto p = BarcodePanel::create(refs);
  ASSERT_TRUE(p.is_ok());
  const std::string call = mutate(rng, refs[40].sequence, 0.1);
  const size_t before = test::allocation_count();
  const BarcodeMatch m = p->match(call);
  EXPECT_EQ(test::allocation_count() - before, 0u);
  EXPECT_EQ(m.best_idx, 40);
}

}  // namespace
}  // namespace escpod::demux
