// Typed model files (model_file.hpp) and the heads built from them (head.hpp).
#include "escpod/demux/model_file.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "escpod/demux/head.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

using nlohmann::ordered_json;

ordered_json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return ordered_json::parse(in);
}

std::filesystem::path write_json(const std::filesystem::path& dir, const std::string& name,
                                 const ordered_json& j) {
  const auto p = dir / name;
  std::ofstream(p) << j.dump();
  return p;
}

TEST(ModelFile, ShippedModelIsParsedOnceWithEveryPart) {
  const auto path = test::shared_data("warpdemux/WDX4_rna004_v1_0.json");
  const uint64_t before = detail::model_json_parse_count();
  auto m = load_model_file(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(detail::model_json_parse_count() - before, 1u);
  EXPECT_EQ(m->kind, ModelKind::kDtwSvm);
  EXPECT_EQ(m->chemistry, "RNA004");
  EXPECT_EQ(m->signal_processing_config_name, "rna004_130bps@v1.0");
  ASSERT_TRUE(m->signal_processing.has_value());
  ASSERT_TRUE(m->dtw_svm.has_value());
  EXPECT_FALSE(m->gbm.has_value());
  EXPECT_EQ(m->dtw_svm->n_classes(), 5u);
  const SignalProcessing& sp = *m->signal_processing;
  EXPECT_TRUE(sp.uses_cnn());
  EXPECT_EQ(sp.cnn_model_name, "rna004_130bps@v0.2.4.pth");
  EXPECT_EQ(sp.boundaries.sig_preload_size(), 11500);
  EXPECT_EQ(sp.fingerprint.barcode_num_events, 25u);
  EXPECT_EQ(sp.fingerprint.num_events, 110u);
  // The shipped block is the RNA004 default configuration, value for value.
  EXPECT_TRUE(sp == SignalProcessing::rna004(true));
}

TEST(ModelFile, GbmFileHasNoSettingsAndItsHeadUsesTheDefaults) {
  const auto path = test::shared_data("escapepod/gbm/model.json");
  const uint64_t before = detail::model_json_parse_count();
  auto h = load_head(path, {});
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(detail::model_json_parse_count() - before, 1u);
  EXPECT_EQ(h->kind, "gbm");
  EXPECT_TRUE(h->default_settings);
  ASSERT_TRUE(h->signal_processing.has_value());
  EXPECT_TRUE(*h->signal_processing == SignalProcessing::rna004(true));
  EXPECT_EQ(h->head->name(), "GBM");
  EXPECT_EQ(h->head->input().kind, HeadInputKind::kFingerprint);
  EXPECT_EQ(h->head->input().fingerprint_length, 6u);
  EXPECT_EQ(std::vector<std::string>(h->head->extra_columns().begin(), h->head->extra_columns().end()),
            std::vector<std::string>({"p01", "p02", "p03", "p04"}));
}

TEST(ModelFile, BothHeadsClassifyThroughTheInterfaceLikeTheirModels) {
  // DTW-SVM: the head's call equals WarpDemuxModel::classify's on the golden fingerprints.
  const auto wdx = test::shared_data("warpdemux/WDX4_rna004_v1_0.json");
  HeadOptions float64;
  float64.dtw = DtwPrecision::kFloat64;
  auto h = load_head(wdx, float64);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  auto model = WarpDemuxModel::load(wdx);
  ASSERT_TRUE(model.is_ok());
  EXPECT_EQ(h->head->name(), "DTW-SVM");
  EXPECT_EQ(h->head->input().batch_size, 1u);
  EXPECT_EQ(h->head->extra_columns().size(), model->n_classes());
  const auto golden = read_json(test::shared_data("warpdemux/golden_WDX4_rna004_v1_0.json"));
  auto head_scratch = h->head->make_scratch();
  auto model_scratch = model->make_scratch();
  size_t n = 0;
  for (const auto& q : golden["queries"]) {
    const auto fp = q["fingerprint"].get<std::vector<double>>();
    PreparedRead r;
    r.fingerprint = fp;
    Classification via_head, direct;
    h->head->classify({&r, 1}, *head_scratch, {&via_head, 1});
    model->classify(fp, model_scratch, direct, KernelPrecision::kModelDefault, DtwPrecision::kFloat64);
    ASSERT_EQ(via_head.label, direct.label);
    ASSERT_EQ(via_head.confidence, direct.confidence);
    ASSERT_EQ(via_head.probabilities, direct.probabilities);
    if (++n == 40) break;
  }
  EXPECT_EQ(n, 40u);

  // GBM: the head's call equals GbmModel::classify's.
  const auto gbm_path = test::shared_data("escapepod/gbm/model.json");
  auto g = load_head(gbm_path, {});
  ASSERT_TRUE(g.is_ok());
  auto gbm = GbmModel::load(gbm_path);
  ASSERT_TRUE(gbm.is_ok());
  auto gs = g->head->make_scratch();
  const std::vector<std::vector<double>> xs = {{0, 0, 0, 0, 0, 0}, {1, -2, 3, 0.5, 0, 9}, {-1, 1, -1, 1, -1, 1}};
  std::vector<PreparedRead> batch(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) batch[i].fingerprint = xs[i];
  std::vector<Classification> calls(xs.size());
  g->head->classify(batch, *gs, calls);
  for (size_t i = 0; i < xs.size(); ++i) {
    Classification direct;
    gbm->classify(xs[i], direct);
    EXPECT_EQ(calls[i].label, direct.label) << i;
    EXPECT_EQ(calls[i].probabilities, direct.probabilities) << i;
    EXPECT_EQ(calls[i].probabilities.size(), 4u);
  }
}

TEST(ModelFile, UnknownKindIsAnErrorThatSaysWhy) {
  const auto dir = test::scratch_dir("kind");
  struct Case {
    ordered_json j;
    StatusCode code;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {ordered_json{{"classes", {1, 2}}}, StatusCode::kCorrupt, "cannot tell the model kind"},
      {ordered_json{{"model_type", "crf"}}, StatusCode::kCorrupt, "model_type 'crf'"},
      {ordered_json{{"model_type", 3}}, StatusCode::kCorrupt, "model_type must be a string"},
      {ordered_json{{"format", "escapepod-adapted-boundary-cnn"}}, StatusCode::kUnsupported,
       "format 'escapepod-adapted-boundary-cnn' is not a demux model"},
      {ordered_json::array({1, 2}), StatusCode::kCorrupt, "top level must be a JSON object"},
  };
  for (const auto& c : cases) {
    const auto p = write_json(dir, "model.json", c.j);
    auto m = load_model_file(p);
    ASSERT_FALSE(m.is_ok()) << c.j.dump();
    EXPECT_EQ(m.status().code(), c.code) << m.status().to_string();
    EXPECT_NE(m.status().message().find(p.string()), std::string::npos) << m.status().to_string();
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().to_string();
    EXPECT_FALSE(load_head(p, {}).is_ok());
  }
  auto missing = load_model_file(dir / "absent.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  auto folder = load_head(dir, {});
  ASSERT_FALSE(folder.is_ok());
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.status().message().find("no head kind recognises it"), std::string::npos);
}

TEST(ModelFile, EveryBadSignalProcessingFieldNamesFileAndPath) {
  const auto dir = test::scratch_dir("fields");
  const ordered_json base = read_json(test::shared_data("warpdemux/WDX4_rna004_v1_0.json"));
  struct Case {
    std::string path;  // JSON path the message must name
    std::function<void(ordered_json&)> mutate;
    StatusCode code = StatusCode::kCorrupt;
  };
  auto set = [](const char* sec, const char* key, ordered_json v) {
    return [=](ordered_json& j) { j["signal_processing"][sec][key] = v; };
  };
  const std::vector<Case> cases = {
      {"signal_processing.core.min_obs_adapter", set("core", "min_obs_adapter", "a")},
      {"signal_processing.core.max_obs_adapter", set("core", "max_obs_adapter", 1.5)},
      {"signal_processing.core.min_obs_polya", set("core", "min_obs_polya", true)},
      {"signal_processing.core.downscale_factor", set("core", "downscale_factor", ordered_json::array())},
      {"signal_processing.core.max_obs_trace", set("core", "max_obs_trace", "x")},
      {"signal_processing.core.sig_norm_outlier_thresh", set("core", "sig_norm_outlier_thresh", "5")},
      {"signal_processing.cnn_boundaries.cnn_detect", set("cnn_boundaries", "cnn_detect", 1)},
      {"signal_processing.cnn_boundaries.model_name", set("cnn_boundaries", "model_name", 7)},
      {"signal_processing.cnn_boundaries.polya_cand_k", set("cnn_boundaries", "polya_cand_k", "5")},
      {"signal_processing.cnn_boundaries.fallback_to_llr", set("cnn_boundaries", "fallback_to_llr", "yes")},
      {"signal_processing.llr_boundaries.llr_detect", set("llr_boundaries", "llr_detect", 0)},
      {"signal_processing.llr_boundaries.adapter_peak_prominence",
       set("llr_boundaries", "adapter_peak_prominence", "1")},
      {"signal_processing.llr_boundaries.adapter_peak_width", set("llr_boundaries", "adapter_peak_width", 2.5)},
      {"signal_processing.mvs_polya.mvs_detect_check", set("mvs_polya", "mvs_detect_check", "on")},
      {"signal_processing.mvs_polya.pA_var_range", set("mvs_polya", "pA_var_range", ordered_json::array({1}))},
      {"signal_processing.mvs_polya.pA_mean_range[1]",
       set("mvs_polya", "pA_mean_range", ordered_json::array({nullptr, "a"}))},
      {"signal_processing.mvs_polya.median_shift_window", set("mvs_polya", "median_shift_window", "w")},
      {"signal_processing.real_range.local_range", set("real_range", "local_range", 3)},
      {"signal_processing.real_range.mean_window", set("real_range", "mean_window", nullptr)},
      {"signal_processing.sig_extract.padding", set("sig_extract", "padding", -1)},
      {"signal_processing.segmentation.num_events", set("segmentation", "num_events", "110")},
      {"signal_processing.segmentation.barcode_num_events", set("segmentation", "barcode_num_events", -25)},
      {"signal_processing.segmentation.running_stat_width", set("segmentation", "running_stat_width", 1.5)},
      {"signal_processing.derived.sig_preload_size", set("derived", "sig_preload_size", 16000)},
      {"signal_processing.mvs_polya.mvs_detect_overwrite", set("mvs_polya", "mvs_detect_overwrite", true),
       StatusCode::kUnsupported},
      {"signal_processing.med_shift.detect_med_shift", set("med_shift", "detect_med_shift", true),
       StatusCode::kUnsupported},
      {"signal_processing.rna_start_peak.detect_rna_start_peak",
       set("rna_start_peak", "detect_rna_start_peak", true), StatusCode::kUnsupported},
  };
  for (const auto& c : cases) {
    ordered_json j = base;
    c.mutate(j);
    const auto p = write_json(dir, "WDXbad.json", j);
    auto m = load_model_file(p);
    if (c.path == "signal_processing.real_range.mean_window") {
      // null = the key is absent: the default applies.
      EXPECT_TRUE(m.is_ok()) << m.status().to_string();
      continue;
    }
    ASSERT_FALSE(m.is_ok()) << c.path << ": loaded although invalid";
    EXPECT_EQ(m.status().code(), c.code) << m.status().to_string();
    EXPECT_EQ(m.status().message().rfind(p.string() + ": ", 0), 0u) << m.status().to_string();
    EXPECT_NE(m.status().message().find(c.path), std::string::npos) << m.status().to_string();
    // The settings-only reader gives the same error.
    EXPECT_EQ(load_model_settings(p).status().message(), m.status().message());
  }
}

TEST(SignalProcessing, RoundTripsValueForValueAndByteForByte) {
  const ordered_json model = read_json(test::shared_data("warpdemux/WDX4_rna004_v1_0.json"));
  const std::string block = model["signal_processing"].dump();
  auto sp = parse_signal_processing(block, "WDX4");
  ASSERT_TRUE(sp.is_ok()) << sp.status().to_string();
  // The shipped block comes back as it was: every key, in its order.
  EXPECT_EQ(serialize_signal_processing(*sp), block);

  // An edited copy keeps the unknown keys and carries the edits.
  SignalProcessing edited = *sp;
  edited.set_detector(false);
  edited.boundaries.max_obs_trace = 12000;
  edited.fingerprint.padding_samples = 80;
  const std::string text = serialize_signal_processing(edited);
  const auto j = ordered_json::parse(text);
  EXPECT_EQ(j["cnn_boundaries"]["cnn_detect"], false);
  EXPECT_EQ(j["llr_boundaries"]["llr_detect"], true);
  EXPECT_EQ(j["core"]["max_obs_trace"], 12000);
  EXPECT_EQ(j["sig_extract"]["padding"], 80);
  EXPECT_EQ(j["derived"]["sig_preload_size"], 13500);
  EXPECT_EQ(j["provenance"], model["signal_processing"]["provenance"]);
  auto again = parse_signal_processing(text, "edited");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*again == edited);
  EXPECT_FALSE(*again == *sp);
  EXPECT_EQ(serialize_signal_processing(*again), text);

  // Settings built in code: the compact block, which parses back to the same values.
  for (bool cnn : {true, false}) {
    const SignalProcessing d = SignalProcessing::rna004(cnn);
    const std::string compact = serialize_signal_processing(d);
    const auto c = ordered_json::parse(compact);
    EXPECT_EQ(c["cnn_boundaries"]["cnn_detect"], cnn);
    EXPECT_EQ(c["llr_boundaries"]["llr_detect"], !cnn);
    EXPECT_EQ(c["segmentation"]["barcode_num_events"], 25);
    EXPECT_FALSE(c.contains("mvs_polya"));  // at its defaults
    auto back = parse_signal_processing(compact, "compact");
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_TRUE(*back == d);
    EXPECT_EQ(back->uses_cnn(), cnn);
    EXPECT_EQ(serialize_signal_processing(*back), compact);
  }
  // A non-default key the compact block lacks is written.
  SignalProcessing wide = SignalProcessing::rna004(true);
  wide.boundaries.local_range.hi = 40.0;
  auto wide_back = parse_signal_processing(serialize_signal_processing(wide), "wide");
  ASSERT_TRUE(wide_back.is_ok());
  EXPECT_DOUBLE_EQ(wide_back->boundaries.local_range.hi, 40.0);
  EXPECT_TRUE(*wide_back == wide);
}

TEST(SignalProcessing, MalformedTextIsCorruptNamingTheSource) {
  auto r = parse_signal_processing("{", "--template x.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(r.status().message().rfind("--template x.json: ", 0), 0u);
  r = parse_signal_processing("[1]", "where");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("signal_processing must be a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace escpod::demux
