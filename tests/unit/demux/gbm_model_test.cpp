#include "escpod/demux/gbm_model.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_data.hpp"

namespace escpod::demux {
namespace {

std::vector<std::vector<double>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<double> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}

TEST(GbmModel, MatchesSklearnFixture) {
  auto r = GbmModel::load(test::shared_data("escapepod/gbm/model.json"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GbmModel& m = r.value();
  EXPECT_EQ(m.n_classes(), 4u);
  EXPECT_EQ(m.n_features(), 6u);
  EXPECT_EQ(m.n_iterations(), 25u);
  EXPECT_EQ(std::vector<int32_t>(m.labels().begin(), m.labels().end()),
            (std::vector<int32_t>{1, 2, 3, 4}));
  const auto inputs = read_csv(test::shared_data("escapepod/gbm/inputs.csv"));
  const auto expected = read_csv(test::shared_data("escapepod/gbm/expected_probs.csv"));
  ASSERT_EQ(inputs.size(), 12u);
  ASSERT_EQ(expected.size(), 12u);
  double max_dev = 0, max_sum_dev = 0;
  Classification c;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<double> p(4);
    ASSERT_TRUE(m.predict_proba(inputs[i], p).is_ok());
    double sum = 0;
    size_t best = 0;
    for (size_t k = 0; k < 4; ++k) {
      max_dev = std::max(max_dev, std::fabs(p[k] - expected[i][k]));
      sum += p[k];
      if (expected[i][k] > expected[i][best]) best = k;
    }
    max_sum_dev = std::max(max_sum_dev, std::fabs(sum - 1.0));
    m.classify(inputs[i], c);
    EXPECT_EQ(c.class_index, static_cast<int32_t>(best));
    EXPECT_EQ(c.label, m.labels()[best]);  // no thresholds in the fixture
    EXPECT_TRUE(c.is_classified());
  }
  EXPECT_LE(max_dev, 1e-5);
  EXPECT_LE(max_sum_dev, 1e-9);
  std::printf("[gbm] 12 fixture rows: max |p - sklearn| = %.3g, max |sum - 1| = %.3g\n", max_dev,
              max_sum_dev);
}

TEST(GbmModel, WrongFeatureCountIsPerReadAndNaNIsMissing) {
  auto r = GbmModel::load(test::shared_data("escapepod/gbm/model.json"));
  ASSERT_TRUE(r.is_ok());
  const GbmModel& m = r.value();
  std::vector<double> p(4);
  EXPECT_EQ(m.predict_proba(std::vector<double>(5, 0.0), p).code(), StatusCode::kInvalidArgument);
  Classification c;
  m.classify(std::vector<double>(7, 0.0), c);
  EXPECT_EQ(c.status, CallStatus::kInvalidInput);
  std::vector<double> x(6, std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(m.predict_proba(x, p).is_ok());
  double sum = 0;
  for (double v : p) {
    EXPECT_TRUE(std::isfinite(v));
    sum += v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(GbmModel, RejectsBrokenTrees) {
  std::ifstream in(test::shared_data("escapepod/gbm/model.json"));
  const nlohmann::json base = nlohmann::json::parse(in);
  const auto dir = test::scratch_dir("gbm");
  auto error_of = [&](const nlohmann::json& j) {
    const auto path = dir / "bad_gbm.json";
    std::ofstream(path) << j.dump();
    auto r = GbmModel::load(path);
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(error_of(base), "");
  nlohmann::json j = base;
  j["trees"][3][1][0]["left"] = 0;  // a cycle
  EXPECT_NE(error_of(j).find("trees[3][1][0].left"), std::string::npos) << error_of(j);
  j = base;
  j["trees"][0][0][0]["feature"] = 6;
  EXPECT_NE(error_of(j).find("feature"), std::string::npos);
  j = base;
  j["trees"][2].erase(0);
  EXPECT_NE(error_of(j).find("trees[2]"), std::string::npos);
  j = base;
  j["baseline"].erase(0);
  EXPECT_NE(error_of(j).find("baseline"), std::string::npos);
  j = base;
  j["label_mapper"].erase("3");
  EXPECT_NE(error_of(j).find("label_mapper"), std::string::npos);
  j = base;
  j["head"] = "sigmoid";
  EXPECT_NE(error_of(j).find("sigmoid"), std::string::npos);
  j = base;
  j["thresholds"] = {0.1, 0.2};
  EXPECT_NE(error_of(j).find("thresholds"), std::string::npos);
}

TEST(DecisionRule, TiesConfidenceAndThresholds) {
  const std::vector<int32_t> labels = {3, 4, -1};
  Classification c;
  c.probabilities = {0.4, 0.4, 0.2};
  apply_decision_rule(labels, {}, 2, TieRule::kFirstMax, c);
  EXPECT_EQ(c.class_index, 0);
  EXPECT_EQ(c.confidence, 0.0);
  apply_decision_rule(labels, {}, 2, TieRule::kLastMax, c);
  EXPECT_EQ(c.class_index, 1);
  c.probabilities = {0.7, 0.2, 0.1};
  const std::vector<double> th = {0.6, 0.1, 1.01};
  c.detail = "below threshold: an earlier head's detail";  // the rule overwrites every field
  apply_decision_rule(labels, th, 2, TieRule::kFirstMax, c);
  EXPECT_EQ(c.status, CallStatus::kBelowThreshold);  // 0.5 < 0.6
  EXPECT_TRUE(c.detail.empty());
  EXPECT_EQ(c.reason(), "below threshold");
  EXPECT_EQ(c.label, -1);
  EXPECT_EQ(c.best_label, 3);
  c.probabilities = {0.85, 0.1, 0.05};
  apply_decision_rule(labels, th, 2, TieRule::kFirstMax, c);
  EXPECT_EQ(c.status, CallStatus::kClassified);
  EXPECT_EQ(c.label, 3);
  c.probabilities = {0.1, 0.1, 0.8};
  apply_decision_rule(labels, th, 2, TieRule::kFirstMax, c);
  EXPECT_EQ(c.status, CallStatus::kNoise);
  EXPECT_EQ(c.label, -1);
  c.probabilities = {1.0};
  apply_decision_rule(std::vector<int32_t>{7}, {}, -1, TieRule::kFirstMax, c);
  EXPECT_EQ(c.confidence, 1.0);
  EXPECT_EQ(c.label, 7);
}

}  // namespace
}  // namespace escpod::demux
