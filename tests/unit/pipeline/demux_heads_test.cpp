// The fused demultiplexer drives any demux::Head: the shipped heads, and a head kind registered
// from outside the library (here a test head that asks for a signal window in batches of 4), with
// the model file parsed once per run.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "escpod/demux/head.hpp"
#include "escpod/pipeline/demux/demux.hpp"
#include "test_data.hpp"

namespace escpod {
namespace {

constexpr int64_t kWindowBegin = -200;
constexpr int64_t kWindowEnd = 100;
constexpr size_t kBatch = 4;

// Reads the test head classified (the head itself ends with the run).
std::atomic<size_t> g_head_calls{0};
std::atomic<int> g_heads_loaded{0};

// Calls every read with a window BC01; columns: the window's length and start, the read's place in
// its batch.
class WindowHead final : public demux::Head {
 public:
  std::string_view name() const override { return "window-test"; }
  demux::HeadInput input() const override {
    demux::HeadInput in;
    in.kind = demux::HeadInputKind::kSignalWindow;
    in.window_begin = kWindowBegin;
    in.window_end = kWindowEnd;
    in.batch_size = kBatch;
    return in;
  }
  std::span<const std::string> extra_columns() const override { return m_columns; }
  std::span<const int32_t> labels() const override { return m_labels; }
  std::string describe() const override { return "window test head\n"; }
  std::unique_ptr<demux::HeadScratch> make_scratch() const override {
    return std::make_unique<demux::HeadScratch>();
  }
  void classify(std::span<const demux::PreparedRead> reads, demux::HeadScratch&,
                std::span<demux::Classification> calls) const override {
    EXPECT_EQ(reads.size(), calls.size());
    EXPECT_LE(reads.size(), kBatch);
    for (size_t i = 0; i < reads.size(); ++i) {
      const demux::PreparedRead& r = reads[i];
      EXPECT_TRUE(r.fingerprint.empty());
      // The window is the pa span's [adapter_end + begin, adapter_end + end), clipped.
      EXPECT_EQ(r.window.data(), r.pa.data() + r.window_start);
      EXPECT_EQ(r.window_start, std::max<int64_t>(0, r.adapter_end + kWindowBegin));
      demux::Classification& c = calls[i];
      c.status = demux::CallStatus::kClassified;
      c.label = c.best_label = 1;
      c.class_index = 0;
      c.confidence = 1.0;
      c.probabilities.assign({static_cast<double>(r.window.size()), static_cast<double>(r.window_start),
                              static_cast<double>(i)});
    }
    g_head_calls.fetch_add(reads.size());
  }

 private:
  std::vector<std::string> m_columns{"window_len", "window_start", "batch_pos"};
  std::vector<int32_t> m_labels{1};
};

void register_window_head() {
  demux::HeadKind kind;
  kind.name = "window-test";
  kind.claims = [](const std::filesystem::path& p) {
    return std::filesystem::exists(p / "window_head.txt");
  };
  kind.load = [](const std::filesystem::path&, const demux::HeadOptions&) -> Result<demux::LoadedHead> {
    demux::LoadedHead h;
    h.head = std::make_unique<WindowHead>();
    ++g_heads_loaded;
    h.signal_processing = demux::SignalProcessing::rna004(false);  // LLR: no CNN file needed
    h.kind = "window-test";
    return h;
  };
  demux::register_head_kind(std::move(kind));
}

// Labels 1, 2, 7 (named alpha, beta, gamma when `named`, else the engine's BC01, BC02, BC07);
// calls every read BC01 with columns: `best` (kClassName) = the read's place in its batch, so
// 3 is no class; `none` (kClassName) = NaN; `pos` (a number) = the place again.
class ClassColumnHead final : public demux::Head {
 public:
  explicit ClassColumnHead(bool named) {
    if (named) m_names = {"alpha", "beta", "gamma"};
  }
  std::string_view name() const override { return "class-column-test"; }
  demux::HeadInput input() const override {
    demux::HeadInput in;
    in.kind = demux::HeadInputKind::kSignalWindow;
    in.window_begin = kWindowBegin;
    in.batch_size = kBatch;
    return in;
  }
  std::span<const std::string> extra_columns() const override { return m_columns; }
  std::span<const demux::ColumnKind> extra_column_kinds() const override { return m_kinds; }
  std::span<const int32_t> labels() const override { return m_labels; }
  std::span<const std::string> label_names() const override { return m_names; }
  std::string describe() const override { return "class column test head\n"; }
  std::unique_ptr<demux::HeadScratch> make_scratch() const override {
    return std::make_unique<demux::HeadScratch>();
  }
  void classify(std::span<const demux::PreparedRead> reads, demux::HeadScratch&,
                std::span<demux::Classification> calls) const override {
    for (size_t i = 0; i < reads.size(); ++i) {
      demux::Classification& c = calls[i];
      c.status = demux::CallStatus::kClassified;
      c.label = c.best_label = 1;
      c.class_index = 0;
      c.probabilities.assign({static_cast<double>(i), std::nan(""), static_cast<double>(i)});
    }
  }

 private:
  std::vector<std::string> m_columns{"best", "none", "pos"};
  std::vector<demux::ColumnKind> m_kinds{demux::ColumnKind::kClassName, demux::ColumnKind::kClassName,
                                         demux::ColumnKind::kNumber};
  std::vector<int32_t> m_labels{1, 2, 7};
  std::vector<std::string> m_names;
};

void register_class_column_head() {
  demux::HeadKind kind;
  kind.name = "class-column-test";
  kind.claims = [](const std::filesystem::path& p) { return std::filesystem::exists(p / "class_head.txt"); };
  kind.load = [](const std::filesystem::path& p, const demux::HeadOptions&) -> Result<demux::LoadedHead> {
    demux::LoadedHead h;
    h.head = std::make_unique<ClassColumnHead>(std::filesystem::exists(p / "named"));
    h.signal_processing = demux::SignalProcessing::rna004(false);
    h.kind = "class-column-test";
    return h;
  };
  demux::register_head_kind(std::move(kind));
}

std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

TEST(DemuxHeads, RegisteredWindowHeadPlugsInWithBatches) {
  register_window_head();
  const auto dir = test::scratch_dir("window");
  const auto model = dir / "window_model";
  std::filesystem::create_directories(model);
  std::ofstream(model / "window_head.txt") << "test head\n";
  pipeline::DemuxOptions o;
  o.model.path = model;
  o.classifications_csv = dir / "calls.csv";
  o.n_threads = 2;
  pipeline::DemuxReport rep;
  const Status s =
      pipeline::run_demux({test::shared_data("warpdemux/sample/small_pod5_0.pod5")}, o, &rep);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(g_heads_loaded.load(), 1);
  const auto rows = read_csv(o.classifications_csv);
  ASSERT_GT(rows.size(), 10u);
  const std::vector<std::string> header = {"read_id", "barcode", "confidence", "adapter_start",
                                           "adapter_end", "detector", "reason", "window_len",
                                           "window_start", "batch_pos"};
  EXPECT_EQ(rows[0], header);
  EXPECT_EQ(rows.size() - 1, rep.n_reads);
  size_t called = 0, last_in_batch = 0;
  for (size_t r = 1; r < rows.size(); ++r) {
    ASSERT_EQ(rows[r].size(), header.size()) << r;
    if (rows[r][1] != "BC01") {
      EXPECT_EQ(rows[r][1], "unclassified");
      EXPECT_FALSE(rows[r][6].empty());  // a reason
      EXPECT_TRUE(rows[r][7].empty());   // no head columns
      continue;
    }
    ++called;
    const int64_t adapter_end = std::stoll(rows[r][4]);
    const int64_t start = std::stoll(rows[r][8].substr(0, rows[r][8].find('.')));
    const int64_t len = std::stoll(rows[r][7].substr(0, rows[r][7].find('.')));
    EXPECT_EQ(start, std::max<int64_t>(0, adapter_end + kWindowBegin)) << r;
    EXPECT_GT(len, 0) << r;
    EXPECT_LE(len, kWindowEnd - kWindowBegin) << r;
    if (rows[r][9].rfind("3", 0) == 0) ++last_in_batch;
  }
  EXPECT_EQ(called, g_head_calls.load());
  EXPECT_EQ(rep.reads_per_label["BC01"], called);
  EXPECT_GT(called, 2 * kBatch);
  EXPECT_GT(last_in_batch, 0u);  // full batches of 4 reached the head
}

// A kClassName column is written as the class's output name (the head's, else BCnn); a value
// that is no class index (3 of 3 classes, NaN) leaves the cell empty; number columns unchanged.
TEST(DemuxHeads, ClassNameColumnsAreWrittenAsTheLabelsOutputNames) {
  register_class_column_head();
  for (const bool named : {true, false}) {
    const auto dir = test::scratch_dir(named ? "class_named" : "class_unnamed");
    const auto model = dir / "model";
    std::filesystem::create_directories(model);
    std::ofstream(model / "class_head.txt") << "test head\n";
    if (named) std::ofstream(model / "named") << "\n";
    pipeline::DemuxOptions o;
    o.model.path = model;
    o.classifications_csv = dir / "calls.csv";
    o.n_threads = 1;
    ASSERT_TRUE(pipeline::run_demux({test::shared_data("warpdemux/sample/small_pod5_0.pod5")}, o, nullptr).is_ok());
    const auto rows = read_csv(o.classifications_csv);
    ASSERT_GT(rows.size(), 10u);
    ASSERT_EQ(rows[0].size(), 10u);
    EXPECT_EQ(rows[0][7], "best");
    const std::vector<std::string> names =
        named ? std::vector<std::string>{"alpha", "beta", "gamma"} : std::vector<std::string>{"BC01", "BC02", "BC07"};
    std::vector<size_t> seen(4, 0);
    for (size_t r = 1; r < rows.size(); ++r) {
      ASSERT_EQ(rows[r].size(), 10u) << r;
      if (rows[r][1] == "unclassified") continue;
      EXPECT_EQ(rows[r][1], names[0]);
      const auto pos = static_cast<size_t>(std::stoul(rows[r][9]));
      ASSERT_LT(pos, 4u);
      ++seen[pos];
      EXPECT_EQ(rows[r][7], pos < 3 ? names[pos] : std::string()) << r;
      EXPECT_EQ(rows[r][8], "") << r;  // NaN: no class
      EXPECT_EQ(rows[r][9], std::to_string(pos) + ".000000") << r;
    }
    for (size_t pos = 0; pos < 4; ++pos) EXPECT_GT(seen[pos], 0u) << pos;  // every case was written
  }
}

TEST(DemuxHeads, ShippedModelsAreParsedOncePerRun) {
  const auto dir = test::scratch_dir("once");
  const auto input = test::shared_data("warpdemux/sample/small_pod5_0.pod5");
  for (const char* model : {"warpdemux/WDX4_rna004_v1_0.json", "escapepod/gbm/model.json"}) {
    pipeline::DemuxOptions o;
    o.model.path = test::shared_data(model);
    o.model.detector = pipeline::DetectorChoice::kLlr;  // no CNN file needed
    o.classifications_csv = dir / "calls.csv";
    o.writer.overwrite = true;
    const uint64_t before = demux::detail::model_json_parse_count();
    pipeline::DemuxReport rep;
    const Status s = pipeline::run_demux({input}, o, &rep);
    ASSERT_TRUE(s.is_ok()) << model << ": " << s.to_string();
    EXPECT_EQ(demux::detail::model_json_parse_count() - before, 1u) << model;
    EXPECT_GT(rep.n_reads, 100u);
    const uint64_t described = demux::detail::model_json_parse_count();
    auto info = pipeline::describe_demux_model({o.model.path, {}, {}, {}});
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(demux::detail::model_json_parse_count() - described, 1u) << model;
  }
}

TEST(DemuxHeads, GbmHeadReportsAFingerprintOfTheWrongLength) {
  // escapepod's GBM test model takes 6 features; the RNA004 fingerprint has 25.
  const auto dir = test::scratch_dir("gbm");
  pipeline::DemuxOptions o;
  o.model.path = test::shared_data("escapepod/gbm/model.json");
  o.model.detector = pipeline::DetectorChoice::kLlr;
  pipeline::DemuxReport rep;
  ASSERT_TRUE(pipeline::run_demux({test::shared_data("warpdemux/sample/small_pod5_0.pod5")}, o, &rep).is_ok());
  EXPECT_EQ(rep.reads_per_label["unclassified"], rep.n_reads);
  uint64_t wrong_length = 0;
  for (const auto& [why, n] : rep.unclassified_reasons)
    if (why.find("GBM model expects 6 features, the fingerprint has 25") != std::string::npos) wrong_length += n;
  EXPECT_GT(wrong_length, 0u);
}

}  // namespace
}  // namespace escpod
