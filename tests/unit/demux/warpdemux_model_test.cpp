#include "escpod/demux/warpdemux_model.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "alloc_counter.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

WarpDemuxModel load_or_die(const std::string& stem) {
  auto r = WarpDemuxModel::load(test::shared_data("warpdemux/" + stem + ".json"));
  if (!r.is_ok()) {
    ADD_FAILURE() << r.status().to_string();
    std::abort();
  }
  return std::move(r).value();
}

struct Deviations {
  double decision = 0, pairwise = 0, proba = 0, proba_f64 = 0, confidence = 0;
  size_t labels_wrong = 0, index_wrong = 0, n_noise_calls = 0;
};

Deviations run_golden(const std::string& stem, size_t expected_minus_one,
                      DtwPrecision dtw = DtwPrecision::kFloat64) {
  const WarpDemuxModel model = load_or_die(stem);
  const json g = read_json(test::shared_data("warpdemux/golden_" + stem + ".json"));
  const auto& tol = g["suggested_tolerances"];
  const double tol_dec = tol["decision_abs"].get<double>();
  const double tol_p = tol["proba_abs"].get<double>();
  const double tol_c = tol["confidence_abs"].get<double>();
  auto scratch = model.make_scratch();
  Classification c, c64;
  Deviations dev;
  size_t n = 0;
  for (const json& q : g["queries"]) {
    const auto fp = q["fingerprint"].get<std::vector<double>>();
    model.classify(fp, scratch, c, KernelPrecision::kModelDefault, dtw);
    const auto dec = q["decision"].get<std::vector<double>>();
    const auto pw = q["pairwise_prob"].get<std::vector<double>>();
    for (size_t i = 0; i < dec.size(); ++i) {
      dev.decision = std::max(dev.decision, std::fabs(scratch.decision[i] - dec[i]));
      dev.pairwise = std::max(dev.pairwise, std::fabs(scratch.pairwise[i] - pw[i]));
    }
    const auto proba = q["proba"].get<std::vector<double>>();
    EXPECT_EQ(c.probabilities.size(), proba.size());
    for (size_t i = 0; i < proba.size(); ++i)
      dev.proba = std::max(dev.proba, std::fabs(c.probabilities[i] - proba[i]));
    dev.confidence = std::max(dev.confidence, std::fabs(c.confidence - q["confidence"].get<double>()));
    if (c.class_index != q["pred_index"].get<int>()) ++dev.index_wrong;
    if (c.label != q["predicted_barcode"].get<int>()) ++dev.labels_wrong;
    EXPECT_EQ(c.best_label, q["predicted_barcode_unthresholded"].get<int>()) << "query " << n;
    EXPECT_DOUBLE_EQ(c.threshold, q["threshold"].get<double>()) << "query " << n;
    if (c.label == kUnclassifiedLabel) {
      ++dev.n_noise_calls;
      EXPECT_FALSE(c.reason().empty());
    }
    // The same read through the double-precision kernel matches `proba_f64`.
    model.classify(fp, scratch, c64, KernelPrecision::kFloat64, dtw);
    const auto p64 = q["proba_f64"].get<std::vector<double>>();
    for (size_t i = 0; i < p64.size(); ++i)
      dev.proba_f64 = std::max(dev.proba_f64, std::fabs(c64.probabilities[i] - p64[i]));
    EXPECT_EQ(c64.label, c.label) << "query " << n;
    ++n;
  }
  EXPECT_EQ(n, 200u);
  EXPECT_LE(dev.decision, tol_dec) << stem;
  EXPECT_LE(dev.pairwise, tol_p) << stem;
  EXPECT_LE(dev.proba, tol_p) << stem;
  EXPECT_LE(dev.proba_f64, tol_p) << stem;
  EXPECT_LE(dev.confidence, tol_c) << stem;
  EXPECT_EQ(dev.index_wrong, 0u) << stem;
  EXPECT_EQ(dev.labels_wrong, 0u) << stem;
  EXPECT_EQ(dev.n_noise_calls, expected_minus_one) << stem;
  std::printf(
      "[golden] %s, DTW %s: 200 queries, max |decision| dev %.3g, |pairwise| %.3g, |proba| %.3g, "
      "|proba_f64| %.3g, |confidence| %.3g; pred_index wrong %zu, labels wrong %zu, -1 calls %zu\n",
      stem.c_str(), dtw_precision_name(dtw), dev.decision, dev.pairwise, dev.proba, dev.proba_f64, dev.confidence,
      dev.index_wrong, dev.labels_wrong, dev.n_noise_calls);
  return dev;
}

TEST(WarpDemuxModel, GoldenWDX4) { run_golden("WDX4_rna004_v1_0", 74); }
TEST(WarpDemuxModel, GoldenWDX10) { run_golden("WDX10_rna004_v1_0", 99); }
// The float32 DTW (the fast path) stays within the golden tolerances with exact labels.
TEST(WarpDemuxModel, GoldenWDX4Float32Dtw) {
  run_golden("WDX4_rna004_v1_0", 74, DtwPrecision::kFloat32);
}
TEST(WarpDemuxModel, GoldenWDX10Float32Dtw) {
  run_golden("WDX10_rna004_v1_0", 99, DtwPrecision::kFloat32);
}

TEST(WarpDemuxModel, LoadsAllFiveModels) {
  struct Expect {
    const char* stem;
    size_t n_classes, n_training;
    std::vector<int32_t> labels;
  };
  const Expect models[] = {
      {"WDX4_rna004_v1_0", 5, 851, {3, 4, 5, 7, -1}},
      {"WDX4b_rna004_v1_0", 5, 848, {4, 5, 7, 11, -1}},
      {"WDX4c_rna004_v1_0", 5, 812, {4, 5, 6, 11, -1}},
      {"WDX6_rna004_v1_0", 7, 1368, {4, 5, 6, 7, 11, 12, -1}},
      {"WDX10_rna004_v1_0", 11, 2601, {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1}},
  };
  for (const auto& e : models) {
    const WarpDemuxModel m = load_or_die(e.stem);
    EXPECT_EQ(m.name(), e.stem);
    EXPECT_EQ(m.n_classes(), e.n_classes);
    EXPECT_EQ(m.n_training(), e.n_training);
    EXPECT_EQ(m.n_support(), e.n_training);
    EXPECT_EQ(m.n_features(), 25u);
    EXPECT_EQ(std::vector<int32_t>(m.labels().begin(), m.labels().end()), e.labels);
    EXPECT_EQ(m.noise_index(), static_cast<int32_t>(e.n_classes - 1));
    EXPECT_EQ(m.dtw_params().window, 15u);
    EXPECT_EQ(m.dtw_params().penalty, 0.1);
    EXPECT_TRUE(m.has_platt());
    const std::string info = m.describe();
    EXPECT_NE(info.find(e.stem), std::string::npos);
    EXPECT_NE(info.find("noise"), std::string::npos);
  }
  const WarpDemuxModel wdx4 = load_or_die("WDX4_rna004_v1_0");
  EXPECT_EQ(std::vector<double>(wdx4.thresholds().begin(), wdx4.thresholds().end()),
            (std::vector<double>{0.17, 0.28, 0.23, 0.47, 1.01}));
  EXPECT_EQ(wdx4.output_columns()[0], "p03");
  EXPECT_EQ(wdx4.output_columns()[4], "p-1");
}

TEST(WarpDemuxModel, BadFingerprintsAreUnclassifiedWithReason) {
  const WarpDemuxModel m = load_or_die("WDX4_rna004_v1_0");
  auto s = m.make_scratch();
  Classification c;
  std::vector<double> fp(25, 0.5);
  fp[3] = std::numeric_limits<double>::quiet_NaN();
  m.classify(fp, s, c);
  EXPECT_EQ(c.status, CallStatus::kInvalidInput);
  EXPECT_EQ(c.label, kUnclassifiedLabel);
  EXPECT_TRUE(c.probabilities.empty());
  EXPECT_EQ(c.reason(), "invalid fingerprint");
  fp[3] = std::numeric_limits<double>::infinity();
  m.classify(fp, s, c);
  EXPECT_EQ(c.status, CallStatus::kInvalidInput);
  m.classify(std::vector<double>(24, 0.0), s, c);
  EXPECT_EQ(c.status, CallStatus::kInvalidInput);
  m.classify({}, s, c);
  EXPECT_EQ(c.status, CallStatus::kInvalidInput);
  // Extreme but finite values still classify (kernel underflows to 0).
  m.classify(std::vector<double>(25, 1e6), s, c);
  EXPECT_NE(c.status, CallStatus::kInvalidInput);
  double sum = 0;
  for (double p : c.probabilities) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

TEST(WarpDemuxModel, ThresholdAndNoiseSemantics) {
  const WarpDemuxModel m = load_or_die("WDX4_rna004_v1_0");
  const json g = read_json(test::shared_data("warpdemux/golden_WDX4_rna004_v1_0.json"));
  auto s = m.make_scratch();
  Classification c;
  size_t below = 0, noise = 0, classified = 0;
  for (const json& q : g["queries"]) {
    m.classify(q["fingerprint"].get<std::vector<double>>(), s, c);
    switch (c.status) {
      case CallStatus::kClassified:
        ++classified;
        EXPECT_GE(c.confidence, c.threshold);
        EXPECT_EQ(c.label, c.best_label);
        break;
      case CallStatus::kBelowThreshold:
        ++below;
        EXPECT_LT(c.confidence, c.threshold);
        EXPECT_EQ(c.label, kUnclassifiedLabel);
        EXPECT_NE(c.best_label, kUnclassifiedLabel);
        break;
      case CallStatus::kNoise:
        ++noise;
        EXPECT_EQ(c.class_index, m.noise_index());
        EXPECT_EQ(c.label, kUnclassifiedLabel);
        break;
      default: ADD_FAILURE() << "unexpected status";
    }
  }
  EXPECT_EQ(below + noise, 74u);
  EXPECT_GT(below, 0u);
  EXPECT_GT(noise, 0u);
  std::printf("[golden] WDX4 calls: %zu classified, %zu below threshold, %zu noise class\n",
              classified, below, noise);
}

TEST(WarpDemuxModel, NoAllocationPerReadAfterWarmUp) {
  const WarpDemuxModel m = load_or_die("WDX10_rna004_v1_0");
  const json g = read_json(test::shared_data("warpdemux/golden_WDX10_rna004_v1_0.json"));
  std::vector<std::vector<double>> fps;
  for (const json& q : g["queries"]) fps.push_back(q["fingerprint"].get<std::vector<double>>());
  auto s = m.make_scratch();
  Classification c;
  m.classify(fps[0], s, c);  // warm-up sizes out.probabilities
  const size_t before = test::allocation_count();
  for (const auto& fp : fps) m.classify(fp, s, c);
  EXPECT_EQ(test::allocation_count() - before, 0u);
}

TEST(WarpDemuxModel, ConcurrentClassifyIsReentrant) {
  const WarpDemuxModel m = load_or_die("WDX4_rna004_v1_0");
  const json g = read_json(test::shared_data("warpdemux/golden_WDX4_rna004_v1_0.json"));
  std::vector<std::vector<double>> fps;
  for (const json& q : g["queries"]) fps.push_back(q["fingerprint"].get<std::vector<double>>());
  auto run = [&](std::vector<double>& probs) {
    auto s = m.make_scratch();
    Classification c;
    for (const auto& fp : fps) {
      m.classify(fp, s, c);
      probs.insert(probs.end(), c.probabilities.begin(), c.probabilities.end());
    }
  };
  std::vector<double> a, b, serial;
  std::thread t1(run, std::ref(a)), t2(run, std::ref(b));
  t1.join();
  t2.join();
  run(serial);
  EXPECT_EQ(a, serial);
  EXPECT_EQ(b, serial);
}

// ---- load-time validation ----------------------------------------------------------------

class ModelValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    m_base = read_json(test::shared_data("warpdemux/WDX4_rna004_v1_0.json"));
    m_dir = test::scratch_dir("models");
  }
  // Writes `model` and loads it; returns the error message (empty when it loaded).
  std::string load_error(const json& model, const std::string& name = "bad.json") {
    const auto path = m_dir / name;
    std::ofstream(path) << model.dump();
    auto r = WarpDemuxModel::load(path);
    if (r.is_ok()) return "";
    EXPECT_NE(r.status().message().find(path.string()), std::string::npos)
        << "message must name the file: " << r.status().message();
    return r.status().message();
  }
  json m_base;
  std::filesystem::path m_dir;
};

TEST_F(ModelValidation, UntouchedCopyLoads) { EXPECT_EQ(load_error(m_base), ""); }

TEST_F(ModelValidation, RejectsInconsistentModels) {
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* expect;  // substring of the message
  };
  const std::vector<Case> cases = {
      {"short dual_coef row", [](json& j) { j["dual_coef"][2].erase(0); }, "dual_coef[2]"},
      {"dual_coef rows", [](json& j) { j["dual_coef"].erase(0); }, "dual_coef"},
      {"support index", [](json& j) { j["support_indices"][5] = 100000; }, "support_indices[5]"},
      {"negative support index", [](json& j) { j["support_indices"][0] = -1; }, "support_indices[0]"},
      {"support grouping", [](json& j) { std::swap(j["support_indices"][0], j["support_indices"][850]); },
       "grouped by class"},
      {"n_support sum", [](json& j) { j["n_support"][0] = 1; }, "n_support"},
      {"intercept length", [](json& j) { j["intercept"].erase(0); }, "intercept"},
      {"prob_a length", [](json& j) { j["prob_a"].push_back(1.0); }, "prob_a"},
      {"prob_b missing", [](json& j) { j.erase("prob_b"); }, "prob_a and prob_b"},
      {"label not in classes", [](json& j) { j["training_labels"][3] = 99; }, "training_labels[3]"},
      {"class index disagrees", [](json& j) { j["training_class_index"][0] = 4; },
       "training_class_index[0]"},
      {"ragged fingerprint", [](json& j) { j["training_fingerprints"][7].erase(0); },
       "training_fingerprints[7]"},
      {"non-numeric value", [](json& j) { j["training_fingerprints"][1][2] = "x"; },
       "training_fingerprints[1][2]"},
      {"label mapper gap", [](json& j) { j["label_mapper"].erase("2"); }, "label_mapper"},
      {"thresholds length", [](json& j) { j["thresholds"].erase(0); }, "thresholds"},
      {"gamma", [](json& j) { j["kernel_params"]["gamma"] = 0.0; }, "gamma"},
      {"power", [](json& j) { j["kernel_params"]["power"] = -1.0; }, "power"},
      {"window negative", [](json& j) { j["window"] = -3; j["dtw"]["window"] = -3; }, "window"},
      {"window disagrees", [](json& j) { j["window"] = 16; }, "disagree"},
      {"penalty type", [](json& j) { j["penalty"] = "big"; }, "penalty"},
      {"classes duplicated", [](json& j) { j["classes"][1] = j["classes"][0]; }, "twice"},
      {"one class", [](json& j) { j["classes"] = json::array({2}); }, "at least 2"},
      {"n_classes", [](json& j) { j["n_classes"] = 6; }, "n_classes"},
      {"n_features", [](json& j) { j["n_features"] = 24; }, "training_fingerprints[0]"},
      {"noise without -1", [](json& j) { j["label_mapper"]["4"] = 99; }, "noise_class"},
      {"missing classes", [](json& j) { j.erase("classes"); }, "classes"},
      {"wrong format", [](json& j) { j["format"] = "something-else"; }, "format"},
      {"future version", [](json& j) { j["format_version"] = 2; }, "format_version"},
      {"gbm file", [](json& j) { j["model_type"] = "gbm"; }, "GBM"},
  };
  for (const auto& c : cases) {
    json j = m_base;
    c.mutate(j);
    const std::string msg = load_error(j);
    EXPECT_NE(msg, "") << c.what << ": loaded although invalid";
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
  }
}

TEST_F(ModelValidation, FileErrors) {
  auto r = WarpDemuxModel::load(m_dir / "missing.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  const auto bad = m_dir / "garbage.json";
  std::ofstream(bad) << "{\"classes\": [1, 2";
  r = WarpDemuxModel::load(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("garbage.json"), std::string::npos);
  std::ofstream(bad, std::ios::trunc) << "[1, 2, 3]";
  r = WarpDemuxModel::load(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
}

TEST_F(ModelValidation, EscapepodSchemaWithoutOptionalFields) {
  // The Rust escapepod's minimal DtwSvmModel: no n_support (derived from labels), no
  // training_class_index, no Platt parameters (pairwise sigmoid votes), no kernel dtype (double).
  json j = m_base;
  for (const char* key : {"n_support", "training_class_index", "prob_a", "prob_b", "kernel", "dtw",
                          "format", "format_version", "n_features", "n_training", "barcodes"})
    j.erase(key);
  const auto path = m_dir / "escapepod.json";
  std::ofstream(path) << j.dump();
  auto r = WarpDemuxModel::load(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const WarpDemuxModel& m = r.value();
  EXPECT_FALSE(m.has_platt());
  // Same SVM, so the same decision values as the full model with a double kernel; the
  // probabilities are the escapepod pairwise-sigmoid votes: sum 1, each in [0, 1].
  const WarpDemuxModel full = load_or_die("WDX4_rna004_v1_0");
  auto s = m.make_scratch();
  auto s_full = full.make_scratch();
  Classification c, c_full;
  const auto fp = m_base["training_fingerprints"][100].get<std::vector<double>>();
  m.classify(fp, s, c);
  full.classify(fp, s_full, c_full, KernelPrecision::kFloat64);
  EXPECT_EQ(s.decision, s_full.decision);
  double sum = 0;
  for (double p : c.probabilities) {
    EXPECT_GE(p, 0.0);
    EXPECT_LE(p, 1.0);
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NE(c.status, CallStatus::kInvalidInput);
}

// The decision values are computed several pairs at a time; each must equal libsvm's
// pair-at-a-time sum bit for bit (same terms, same order), recomputed here from the JSON.
TEST(WarpDemuxModel, DecisionValuesEqualPairAtATimeSums) {
  const std::string stem = "WDX10_rna004_v1_0";  // 11 classes: full and partial lane groups
  const WarpDemuxModel m = load_or_die(stem);
  const json j = read_json(test::shared_data("warpdemux/" + stem + ".json"));
  const json g = read_json(test::shared_data("warpdemux/golden_" + stem + ".json"));
  const auto sup = j["support_indices"].get<std::vector<size_t>>();
  const auto n_support = j["n_support"].get<std::vector<size_t>>();
  const auto dual = j["dual_coef"].get<std::vector<std::vector<double>>>();
  const auto intercept = j["intercept"].get<std::vector<double>>();
  const size_t k = n_support.size();
  std::vector<size_t> start(k + 1, 0);
  for (size_t c = 0; c < k; ++c) start[c + 1] = start[c] + n_support[c];
  auto s = m.make_scratch();
  Classification c;
  size_t n_checked = 0;
  for (const json& q : g["queries"]) {
    m.classify(q["fingerprint"].get<std::vector<double>>(), s, c);
    size_t pair = 0;
    for (size_t a = 0; a < k; ++a) {
      for (size_t b = a + 1; b < k; ++b, ++pair) {
        double sum = 0.0;
        for (size_t sv = start[a]; sv < start[a + 1]; ++sv) sum += dual[b - 1][sv] * s.kernel[sup[sv]];
        for (size_t sv = start[b]; sv < start[b + 1]; ++sv) sum += dual[a][sv] * s.kernel[sup[sv]];
        ASSERT_EQ(s.decision[pair], sum - (-intercept[pair])) << "pair " << pair;
        ++n_checked;
      }
    }
  }
  EXPECT_EQ(n_checked, g["queries"].size() * k * (k - 1) / 2);
}

}  // namespace
}  // namespace escpod::demux
