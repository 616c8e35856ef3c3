// The one barcode-label parser and the label tables built on it: good labels, noise labels, and
// every bad form an error naming the file, the line and the label.
#include "escpod/pipeline/tables/barcode_labels.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "escpod/pipeline/tables/fingerprint_table.hpp"
#include "test_data.hpp"

namespace escpod {
namespace {

namespace fs = std::filesystem;

constexpr const char* kId1 = "00000000-0000-4000-8000-000000000001";
constexpr const char* kId2 = "00000000-0000-4000-8000-000000000002";
constexpr const char* kId3 = "00000000-0000-4000-8000-000000000003";

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

int32_t label_of(std::string_view text) {
  auto r = pipeline::parse_barcode_label(text, "t.csv:2");
  EXPECT_TRUE(r.is_ok()) << text << ": " << r.status().to_string();
  return r.is_ok() ? *r : -999;
}

TEST(BarcodeLabel, ReadsBarcodesInEveryDocumentedSpelling) {
  EXPECT_EQ(label_of("BC04"), 4);
  EXPECT_EQ(label_of("bc4"), 4);
  EXPECT_EQ(label_of("Barcode04"), 4);
  EXPECT_EQ(label_of("demo01"), 1);
  EXPECT_EQ(label_of("nb_12"), 12);
  EXPECT_EQ(label_of("4"), 4);
  EXPECT_EQ(label_of("004"), 4);
  EXPECT_EQ(label_of("BC999"), 999);
  EXPECT_EQ(label_of("BC1"), 1);
}

TEST(BarcodeLabel, ReadsOnlyExplicitNoiseLabelsAsNoise) {
  EXPECT_EQ(label_of("noise"), pipeline::kNoiseLabel);
  EXPECT_EQ(label_of("NOISE"), pipeline::kNoiseLabel);
  EXPECT_EQ(label_of("unclassified"), pipeline::kNoiseLabel);
  EXPECT_EQ(label_of("Unclassified"), pipeline::kNoiseLabel);
  EXPECT_EQ(label_of("-1"), pipeline::kNoiseLabel);
}

TEST(BarcodeLabel, EveryOtherFormIsAnErrorNamingFileLineAndLabel) {
  for (const char* bad : {"", "BC", "BC4x", "BC-4", "4.0", "0", "BC00", "BC1000", "-2", "noisy",
                          "unclassifed", "BC 4", "B4C", "99999999999999999999", "+4", "x-1"}) {
    auto r = pipeline::parse_barcode_label(bad, "labels.csv:7");
    ASSERT_FALSE(r.is_ok()) << "'" << bad << "' was read as " << *r;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind("labels.csv:7: label '" + std::string(bad) + "' is not a barcode", 0), 0u) << m;
    EXPECT_NE(m.find("noise"), std::string::npos) << m;
  }
}

TEST(BarcodeLabel, NamesRoundTripThroughTheParser) {
  for (int32_t label : {1, 4, 12, 96, 999, pipeline::kNoiseLabel}) {
    EXPECT_EQ(label_of(pipeline::label_name(label)), label) << pipeline::label_name(label);
  }
  EXPECT_EQ(pipeline::label_name(4), "BC04");
  EXPECT_EQ(pipeline::label_name(123), "BC123");
  EXPECT_EQ(pipeline::label_name(-1), "unclassified");
}

TEST(TrainingLabels, ReadsEveryRowStrictly) {
  const fs::path dir = test::scratch_dir("training_labels");
  write_file(dir / "ok.csv", std::string("#read_id,barcode,adapter_start\n# a comment\n") + kId1 +
                                 ",BC04,1\n\n" + kId2 + ",noise,2\n" + kId3 + ",demo02,3\n");
  auto ok = pipeline::read_training_labels(dir / "ok.csv");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, (std::map<std::string, int32_t>{{kId1, 4}, {kId2, -1}, {kId3, 2}}));

  // A typo is an error naming file, line and label, not a noise read.
  write_file(dir / "typo.csv", std::string("read_id,barcode\n") + kId1 + ",BC04\n" + kId2 + ",BC4O\n");
  auto typo = pipeline::read_training_labels(dir / "typo.csv");
  ASSERT_FALSE(typo.is_ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find((dir / "typo.csv").string() + ":3: label 'BC4O'"), std::string::npos)
      << typo.status().message();

  // An empty label is not noise either.
  write_file(dir / "empty.csv", std::string("read_id,barcode\n") + kId1 + ",\n");
  auto empty = pipeline::read_training_labels(dir / "empty.csv");
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("empty.csv:2: label ''"), std::string::npos) << empty.status().message();

  write_file(dir / "twice.csv", std::string("read_id,barcode\n") + kId1 + ",BC01\n" + kId1 + ",BC01\n");
  auto twice = pipeline::read_training_labels(dir / "twice.csv");
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("twice.csv:3: read " + std::string(kId1) + " is listed twice"),
            std::string::npos)
      << twice.status().message();

  write_file(dir / "bad_id.csv", "read_id,barcode\nnot-a-uuid,BC01\n");
  auto bad_id = pipeline::read_training_labels(dir / "bad_id.csv");
  ASSERT_FALSE(bad_id.is_ok());
  EXPECT_NE(bad_id.status().message().find("bad_id.csv:2"), std::string::npos) << bad_id.status().message();

  write_file(dir / "no_col.csv", std::string("read_id,label\n") + kId1 + ",BC01\n");
  auto no_col = pipeline::read_training_labels(dir / "no_col.csv");
  ASSERT_FALSE(no_col.is_ok());
  EXPECT_NE(no_col.status().message().find("read_id and barcode"), std::string::npos);

  write_file(dir / "header_only.csv", "read_id,barcode\n");
  auto none = pipeline::read_training_labels(dir / "header_only.csv");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no labelled reads"), std::string::npos);
}

TEST(CallLabels, ReadsBarcodeOrTheLegacyColumnName) {
  const fs::path dir = test::scratch_dir("call_labels");
  write_file(dir / "fused.csv", std::string("read_id,barcode,confidence\n") + kId1 + ",BC02,0.9\n" + kId2 +
                                    ",unclassified,0\n");
  write_file(dir / "legacy.csv", std::string("read_id,predicted_barcode,confidence\n") + kId1 + ",BC02,0.9\n" +
                                     kId2 + ",unclassified,0\n");
  auto a = pipeline::read_call_labels(dir / "fused.csv");
  auto b = pipeline::read_call_labels(dir / "legacy.csv");
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].second, "BC02");
  EXPECT_EQ((*a)[1].second, "unclassified");
  EXPECT_EQ(*a, *b);
  write_file(dir / "neither.csv", std::string("read_id,label\n") + kId1 + ",BC02\n");
  auto c = pipeline::read_call_labels(dir / "neither.csv");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("barcode or predicted_barcode"), std::string::npos) << c.status().message();
}

TEST(LabelledFingerprints, WriteThenReadGivesTheSameTable) {
  const fs::path dir = test::scratch_dir("labelled_fps");
  pipeline::LabelledFingerprints t;
  t.n_features = 2;
  t.read_ids = {kId1, kId2};
  t.features = {0.5, -1.25, 2.0, 3.0000004};
  t.labels = {4, pipeline::kNoiseLabel};
  std::ostringstream out;
  ASSERT_TRUE(pipeline::write_labelled_fingerprints(out, t, "mem").is_ok());
  EXPECT_EQ(out.str(), std::string("read_id,fp_0,fp_1,barcode\n") + kId1 + ",0.500000,-1.250000,BC04\n" + kId2 +
                           ",2.000000,3.000000,unclassified\n");
  write_file(dir / "t.csv", out.str());
  auto back = pipeline::read_labelled_fingerprints(dir / "t.csv");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->n_features, 2u);
  EXPECT_EQ(back->read_ids, t.read_ids);
  EXPECT_EQ(back->labels, t.labels);
  EXPECT_EQ(back->features, (std::vector<double>{0.5, -1.25, 2.0, 3.0}));
}

TEST(LabelledFingerprints, ColumnsInAnyOrderAndNoReadId) {
  const fs::path dir = test::scratch_dir("labelled_fps_order");
  write_file(dir / "t.csv", "barcode,fp_1,fp_0\n4,1,2\nnoise,3,4\n");
  auto t = pipeline::read_labelled_fingerprints(dir / "t.csv");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->features, (std::vector<double>{2, 1, 4, 3}));
  EXPECT_EQ(t->labels, (std::vector<int32_t>{4, -1}));
  EXPECT_EQ(t->read_ids, (std::vector<std::string>{"", ""}));
}

TEST(LabelledFingerprints, BadTablesAreErrorsNamingFileAndLine) {
  const fs::path dir = test::scratch_dir("labelled_fps_bad");
  struct Case {
    const char* text;
    const char* expect;
  };
  for (const Case& c : {
           Case{"read_id,fp_0,fp_1,barcode\nr,1,2,BC4x\n", "t.csv:2: label 'BC4x' is not a barcode"},
           Case{"read_id,fp_0,fp_1,barcode\nr,1,2,\n", "t.csv:2: label ''"},
           Case{"read_id,fp_0,fp_1,barcode\nr,1,x,BC01\n", "t.csv:2: fp_1 'x' is not a number"},
           Case{"read_id,fp_0,fp_1,barcode\nr,1,2\n", "t.csv:2: 3 fields, the header has 4"},
           Case{"read_id,fp_0,fp_2,barcode\nr,1,2,BC01\n", "fp_0 .. fp_1 without gaps"},
           Case{"read_id,fp_0,fp_0,barcode\nr,1,2,BC01\n", "column fp_0 appears twice"},
           Case{"read_id,fp_0,fp_1\nr,1,2\n", "no `barcode` column"},
           Case{"read_id,barcode\nr,BC01\n", "no fp_0, fp_1, ... columns"},
           Case{"read_id,fp_0,barcode\n", "no data rows"},
           Case{"", "empty file"},
       }) {
    write_file(dir / "t.csv", c.text);
    auto t = pipeline::read_labelled_fingerprints(dir / "t.csv");
    ASSERT_FALSE(t.is_ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace escpod
