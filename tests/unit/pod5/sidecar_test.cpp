// .p5s sidecars through the library: round trips, the write rules, the design table, locator
// checks and identity. Cross-tool checks (the Rust escapepod's reader) are in
// tests/conformance/test_sidecar.py.
#include "escpod/pod5/sidecar.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "escpod/pod5/file_reader.hpp"
#include "test_data.hpp"

namespace escpod::pod5 {
namespace {

namespace fs = std::filesystem;

class SidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::scratch_dir("sidecar");
    path = dir / "reads.pod5";
    fs::copy_file(test::shared_data("escapepod/drna/yeast_trna_reads.pod5"), path);
    fs::permissions(path, fs::perms::owner_write, fs::perm_options::add);
    auto r = FileReader::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    reader = std::move(*r);
  }
  fs::path dir, path;
  std::unique_ptr<FileReader> reader;
};

TEST_F(SidecarTest, IndexRoundTripsAndLocatesEveryRead) {
  EXPECT_EQ(Sidecar::open(*reader).status().code(), StatusCode::kNotFound);
  auto built = Sidecar::build_index(*reader, 2);
  ASSERT_TRUE(built.is_ok()) << built.status().to_string();
  ASSERT_EQ(built->n_reads(), 180u);
  ASSERT_TRUE(built->write(sidecar_path(path), FsyncMode::kNone, "test").is_ok());
  auto sc = Sidecar::open(*reader);
  ASSERT_TRUE(sc.is_ok()) << sc.status().to_string();
  EXPECT_EQ(sc->version(), 1);
  EXPECT_EQ(sc->provenance(), "from \"reads.pod5\", 180 reads, written by test");
  EXPECT_EQ(sc->read_ids(), built->read_ids());
  for (size_t b = 0; b < reader->n_read_batches(); ++b) {
    auto batch = reader->read_batch(b);
    ASSERT_TRUE(batch.is_ok());
    for (size_t i = 0; i < batch->size(); ++i) {
      auto loc = sc->locate(*reader, batch->read_id[i]);
      ASSERT_TRUE(loc.is_ok()) << loc.status().to_string();
      EXPECT_EQ(loc->batch_idx, b);
      EXPECT_EQ(loc->row_idx, i);
    }
  }
  EXPECT_EQ(sc->locate(*reader, ReadId::random()).status().code(), StatusCode::kNotFound);
}

TEST_F(SidecarTest, ColumnsAreWrittenTogetherAndKept) {
  auto sc = Sidecar::build_index(*reader, 1);
  ASSERT_TRUE(sc.is_ok());
  const auto ids = sc->read_ids();
  AnnotationUpdate labels{"barcode", AnnotationKind::kLabel, {}, {}};
  AnnotationUpdate scores{"qscore", AnnotationKind::kScore, {}, {}};
  for (size_t k = 0; k < ids.size(); k += 2) labels.labels.emplace_back(ids[k], k % 4 ? "BC01" : "BC02");
  for (size_t k = 0; k < ids.size(); k += 3) scores.scores.emplace_back(ids[k], static_cast<float>(k) * 0.5f);
  scores.scores.emplace_back(ReadId::random(), 1.0f);  // not in the file: counted, ignored
  SidecarUpdateReport rep;
  ASSERT_TRUE(update_sidecar(*reader, {labels, scores}, {}, &rep).is_ok());
  EXPECT_TRUE(rep.index_built);
  EXPECT_EQ(rep.n_assigned["barcode"], 90u);
  EXPECT_EQ(rep.n_assigned["qscore"], 60u);
  EXPECT_EQ(rep.n_not_in_file, 1u);
  // A later write of one column keeps the other.
  AnnotationUpdate relabel{"barcode", AnnotationKind::kLabel, {{ids[1], "BC03"}}, {}};
  ASSERT_TRUE(update_sidecar(*reader, {relabel}, {}, &rep).is_ok());
  EXPECT_FALSE(rep.index_built);
  auto back = Sidecar::open(*reader);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->version(), 2);
  auto bc = back->column("barcode", AnnotationKind::kLabel);
  auto q = back->column("qscore", AnnotationKind::kScore);
  ASSERT_TRUE(bc.is_ok() && q.is_ok());
  EXPECT_EQ((*bc)->text(1), "BC03");
  EXPECT_EQ((*bc)->text(0), "");
  EXPECT_FALSE((*bc)->has_value(2));
  EXPECT_EQ((*q)->text(3), "1.5");
  EXPECT_FALSE((*q)->has_value(1));
  // Reading one kind as the other names the actual kind.
  auto wrong = back->column("qscore", AnnotationKind::kLabel);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("is a score column, not a label column"), std::string::npos);
  EXPECT_EQ(back->column("nope", AnnotationKind::kLabel).status().code(), StatusCode::kNotFound);
}

TEST_F(SidecarTest, WriteRulesAreRefused) {
  auto sc = Sidecar::build_index(*reader, 1);
  ASSERT_TRUE(sc.is_ok());
  for (const char* reserved : {"read_id", "batch_idx", "row_idx"}) {
    EXPECT_EQ(sc->set_labels(reserved, {{0, "x"}}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(sc->set_scores(reserved, {{0, 1.0f}}).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(sc->set_labels("barcode", {{0, ""}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sc->set_scores("q", {{0, std::nanf("")}}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(sc->set_labels("barcode", {{0, "BC01"}}).is_ok());
  ASSERT_TRUE(sc->set_scores("q", {{0, 2.0f}}).is_ok());
  EXPECT_EQ(sc->set_scores("barcode", {{0, 1.0f}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sc->set_labels("q", {{0, "x"}}).code(), StatusCode::kInvalidArgument);
  const auto& ids = sc->read_ids();
  AnnotationUpdate dup{"barcode", AnnotationKind::kLabel, {{ids[0], "a"}, {ids[0], "b"}}, {}};
  EXPECT_EQ(update_sidecar(*reader, {dup}, {}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(sidecar_path(path)));
}

TEST_F(SidecarTest, DesignValuesAreDerivedFromTheKeys) {
  auto sc = Sidecar::build_index(*reader, 1);
  ASSERT_TRUE(sc.is_ok());
  ASSERT_TRUE(sc->set_labels("barcode", {{0, "BC01"}, {1, "BC02"}, {2, "BC09"}}).is_ok());
  ASSERT_TRUE(sc->set_labels("lane", {{0, "L1"}, {1, "L1"}, {2, "L1"}, {3, "L1"}}).is_ok());
  auto d = parse_sidecar_design(
      R"({"key_columns":["barcode","lane"],"value_columns":["sample"],"rows":[["BC01","L1","s1"],["BC02","L1","s2"]]})");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_TRUE(sc->set_design(*d).is_ok());
  const AnnotationColumn* sample = sc->find("sample");
  ASSERT_NE(sample, nullptr);
  EXPECT_TRUE(sample->derived);
  EXPECT_EQ(sample->text(0), "s1");
  EXPECT_EQ(sample->text(1), "s2");
  EXPECT_EQ(sample->text(2), "");  // BC09 has no design row
  EXPECT_EQ(sample->text(3), "");  // no barcode
  EXPECT_EQ(sc->set_labels("sample", {{0, "x"}}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(sc->set_labels("barcode", {{3, "BC02"}}).is_ok());
  EXPECT_EQ(sc->find("sample")->text(3), "s2");
  EXPECT_EQ(sc->find("sample")->text(0), "");
  ASSERT_TRUE(sc->write(sidecar_path(path), FsyncMode::kNone, "test").is_ok());
  auto back = Sidecar::open(*reader);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_TRUE(back->design().has_value());
  EXPECT_EQ(back->design()->key_columns, (std::vector<std::string>{"barcode", "lane"}));
  EXPECT_EQ(back->find("sample")->text(3), "s2");
  // Malformed designs.
  for (const char* bad : {R"({"key_columns":[],"value_columns":["v"],"rows":[]})",
                          R"({"key_columns":["k"],"value_columns":["k"],"rows":[]})",
                          R"({"key_columns":["k"],"value_columns":["v"],"rows":[["a"]]})",
                          R"({"key_columns":["k"],"value_columns":["v"],"rows":[["a","x"],["a","y"]]})",
                          R"({"key_columns":["k"],"value_columns":["v"],"rows":[["a",""]]})",
                          R"({"key_columns":["k"],"value_columns":["read_id"],"rows":[]})",
                          R"({"key_columns":["k"],"value_columns":["v"],"rows":[],"extra":1})", "not json"}) {
    EXPECT_EQ(parse_sidecar_design(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(SidecarTest, ASidecarOfAnotherFileIsRefusedWithItsProvenance) {
  auto sc = Sidecar::build_index(*reader, 1);
  ASSERT_TRUE(sc.is_ok());
  ASSERT_TRUE(sc->write(sidecar_path(path), FsyncMode::kNone, "escpod test").is_ok());
  // Another real POD5 (another identifier and size) with this file's sidecar copied beside it.
  const fs::path other = dir / "other.pod5";
  fs::copy_file(test::shared_data("escapepod/charging/trna_reads.pod5"), other);
  fs::permissions(other, fs::perms::owner_write, fs::perm_options::add);
  fs::copy_file(sidecar_path(path), sidecar_path(other));
  auto r = FileReader::open(other);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  auto stale = Sidecar::open(**r);
  ASSERT_FALSE(stale.is_ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(stale.status().message().find("does not belong to"), std::string::npos);
  EXPECT_NE(stale.status().message().find("from \"reads.pod5\", 180 reads, written by escpod test"),
            std::string::npos);
  // A write refuses it too, leaving it in place.
  AnnotationUpdate u{"barcode", AnnotationKind::kLabel, {{sc->read_ids()[0], "x"}}, {}};
  EXPECT_EQ(update_sidecar(**r, {u}, {}, nullptr).code(), StatusCode::kCorrupt);
  EXPECT_EQ(fs::file_size(sidecar_path(other)), fs::file_size(sidecar_path(path)));
}

}  // namespace
}  // namespace escpod::pod5
