// CTC-CRF model folders: the four real SeqTagger models load with the documented configuration,
// the strict state_dict reader sees exactly their tensors and refuses damaged archives, and the
// encoder's batched and single runs agree and allocate nothing after the first call. (Scores
// against a reference implementation: tests/conformance/test_crf_model.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>

#include "alloc_counter.hpp"
#include "escpod/demux/crf_model.hpp"
#include "escpod/nn/torch_state_dict.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

struct Expected {
  const char* folder;
  size_t n_refs;
  bool standardise;
  std::optional<double> min_baseq;
};

void PrintTo(const Expected& e, std::ostream* os) { *os << e.folder; }

class SeqTaggerModels : public ::testing::TestWithParam<Expected> {};

TEST_P(SeqTaggerModels, LoadWithTheDocumentedConfiguration) {
  const Expected e = GetParam();
  auto m = load_crf_model(test::shared_data(std::string("seqtagger/") + e.folder));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->kind, CrfModelKind::kSeqTagger);
  const CrfConfig& c = m->config;
  EXPECT_EQ(c.chunk, 2000);
  EXPECT_EQ(c.stride, 10);
  EXPECT_EQ(c.state_len, 4);
  EXPECT_EQ(c.n_base, 4);
  EXPECT_EQ(c.alphabet, "NACGT");
  EXPECT_EQ(c.n_states(), 256);
  EXPECT_EQ(c.n_scores(), 1280);
  EXPECT_EQ(c.steps(2000), 200);
  EXPECT_EQ(c.steps(2001), 201);
  EXPECT_FLOAT_EQ(c.scale, 5.0f);
  EXPECT_FLOAT_EQ(c.blank_score, 2.0f);
  EXPECT_EQ(c.standardise, e.standardise);
  if (e.standardise) {
    EXPECT_DOUBLE_EQ(c.mean, 80.8758975922949);
    EXPECT_DOUBLE_EQ(c.stdev, 17.26975967138176);
    EXPECT_EQ(c.max_chunk, 6000);
    EXPECT_EQ(c.step, 500);
  } else {
    EXPECT_FALSE(c.max_chunk.has_value());
  }
  EXPECT_EQ(c.min_baseq, e.min_baseq);
  ASSERT_EQ(m->references.size(), e.n_refs);
  EXPECT_EQ(m->references[0].name, "Barcode_1");
  EXPECT_EQ(m->encoder_file.extension(), ".tar");
}

INSTANTIATE_TEST_SUITE_P(All, SeqTaggerModels,
                         ::testing::Values(Expected{"b04_RNA004", 4, false, std::nullopt},
                                           Expected{"b07_RNA004_tRNA", 7, true, 50.0},
                                           Expected{"b13_RNA004_mRNA", 13, true, 60.0},
                                           Expected{"b96_RNA004", 96, false, std::nullopt}),
                         [](const ::testing::TestParamInfo<Expected>& i) { return std::string(i.param.folder); });

TEST(CrfModel, FirstBarcodesAreReadFromTheFasta) {
  auto m = load_crf_model(test::shared_data("seqtagger/b04_RNA004"));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->references[0].sequence, "GGCTTCTTCTTGCTCTTAGG");
  EXPECT_EQ(m->references[1].sequence, "GTGATTCTCGTCTTTCTGCG");
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TorchStateDict, ReadsExactlyTheEncoderTensors) {
  auto sd = nn::load_torch_state_dict(test::shared_data("seqtagger/b04_RNA004/weights_39.tar"));
  ASSERT_TRUE(sd.is_ok()) << sd.status().message();
  ASSERT_EQ(sd->tensors.size(), 28u);  // 3 convs x 2, 5 LSTMs x 4, linear x 2
  EXPECT_EQ(sd->tensors.front().name, "encoder.0.conv.weight");
  EXPECT_EQ(sd->tensors.front().shape, (std::vector<int64_t>{4, 1, 5}));
  const nn::TorchTensor* lin = sd->find("encoder.9.linear.weight");
  ASSERT_NE(lin, nullptr);
  EXPECT_EQ(lin->shape, (std::vector<int64_t>{1024, 96}));
  EXPECT_EQ(lin->values.size(), 1024u * 96u);
  const nn::TorchTensor* bhh = sd->find("encoder.4.rnn.bias_hh_l0");
  ASSERT_NE(bhh, nullptr);
  for (float v : bhh->values) EXPECT_EQ(v, 0.0f);  // documented: every bias_hh in these files is zero
  double sum = 0;
  for (float v : lin->values) sum += std::abs(v);
  EXPECT_GT(sum, 1.0);
}

TEST(TorchStateDict, RefusesDamagedArchives) {
  const std::string good = read_file(test::shared_data("seqtagger/b04_RNA004/weights_39.tar"));
  ASSERT_FALSE(good.empty());
  // A flipped byte inside a tensor storage: the CRC catches it.
  std::string flipped = good;
  const size_t at = good.find("weights_39/data/11");  // first occurrence: its local header
  ASSERT_NE(at, std::string::npos);
  flipped[at + 200] = static_cast<char>(flipped[at + 200] ^ 0x5a);
  auto r = nn::parse_torch_state_dict(flipped, "flipped");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("CRC mismatch"), std::string::npos) << r.status().message();
  // Truncated: the end-of-central-directory record is gone.
  auto t = nn::parse_torch_state_dict(std::string_view(good).substr(0, good.size() / 2), "truncated");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
  auto e = nn::parse_torch_state_dict("", "empty");
  EXPECT_FALSE(e.is_ok());
}

TEST(CrfModel, ReportsFoldersOfNeitherKind) {
  const auto dir = test::scratch_dir("empty");
  auto m = load_crf_model(dir);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("neither metadata.json"), std::string::npos) << m.status().message();
  EXPECT_FALSE(is_crf_model_dir(dir));
  EXPECT_TRUE(is_crf_model_dir(test::shared_data("seqtagger/b96_RNA004")));
  EXPECT_FALSE(load_crf_model(dir / "missing").is_ok());
}

TEST(CrfEncoder, BatchedRunEqualsSingleRuns) {
  auto m = load_crf_model(test::shared_data("seqtagger/b13_RNA004_mRNA"));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  CrfEncoder enc(*m, 1);
  const size_t n = 2000, batch = 3;
  const int64_t T = enc.steps(n), S = enc.n_scores();
  ASSERT_EQ(T, 200);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> windows(batch * n);
  for (float& v : windows) v = dist(rng);
  std::vector<float> batched(static_cast<size_t>(T) * batch * static_cast<size_t>(S));
  ASSERT_TRUE(enc.run_batch(windows.data(), batch, n, batched.data()).is_ok());
  std::vector<float> single(static_cast<size_t>(T * S));
  for (size_t b = 0; b < batch; ++b) {
    ASSERT_TRUE(enc.run(windows.data() + b * n, n, single.data()).is_ok());
    float worst = 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t s = 0; s < S; ++s) {
        const float want = batched[static_cast<size_t>((t * static_cast<int64_t>(batch) + static_cast<int64_t>(b)) * S + s)];
        worst = std::max(worst, std::abs(single[static_cast<size_t>(t * S + s)] - want));
      }
    }
    EXPECT_LE(worst, 1e-4f) << "window " << b;  // summation order may differ with batch size
  }
  for (int64_t s = 0; s < S; s += 5) EXPECT_EQ(single[static_cast<size_t>(s)], 2.0f);  // stay scores
  // Windows of another length re-plan; zero-length input is refused.
  std::vector<float> longer(static_cast<size_t>(enc.steps(2345) * S));
  std::vector<float> w2(2345, 0.5f);
  EXPECT_TRUE(enc.run(w2.data(), w2.size(), longer.data()).is_ok());
  EXPECT_FALSE(enc.run(w2.data(), 0, longer.data()).is_ok());
}

// The encoder wrapper adds no allocation per window: proved on the reference backend, whose steps
// are all ours (oneDNN's execute() allocates its argument map; nn_test bounds that separately).
TEST(CrfEncoder, SteadyStateRunsDoNotAllocate) {
  CrfLoadOptions o;
  o.encoder.backend = nn::Backend::kReference;
  auto m = load_crf_model(test::shared_data("seqtagger/b04_RNA004"), o);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  CrfEncoder enc(*m, 1);
  std::vector<float> window(2000, 0.25f), scores(static_cast<size_t>(enc.steps(2000) * enc.n_scores()));
  ASSERT_TRUE(enc.run(window.data(), window.size(), scores.data()).is_ok());  // plan, bind, arena
  const size_t before = test::allocation_count();
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(enc.run(window.data(), window.size(), scores.data()).is_ok());
  EXPECT_EQ(test::allocation_count(), before);
}

}  // namespace
}  // namespace escpod::demux
