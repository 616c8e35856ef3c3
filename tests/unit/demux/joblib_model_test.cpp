// WarpDemuX's own model files (joblib pickles): the strict pickle reader, the model built from
// them against our JSON copies (RNA004, bit for bit) and against scikit-learn (RNA002 golden),
// the signal-processing config pairing, and the refusals.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "demux/pickle.hpp"
#include "escpod/demux/head.hpp"
#include "escpod/demux/model_file.hpp"
#include "test_data.hpp"

namespace escpod::demux {
namespace {

namespace fs = std::filesystem;
using detail::PickleValue;

const char* const kRna004[] = {"WDX4_rna004_v1_0", "WDX4b_rna004_v1_0", "WDX4c_rna004_v1_0", "WDX6_rna004_v1_0",
                               "WDX10_rna004_v1_0"};
const char* const kRna002[] = {"WDX4_rna002_v0_4_4",  "WDX6_rna002_v0_4_4",  "WDX8_rna002_v0_4_4",
                               "WDX10_rna002_v0_4_4", "WDX12_rna002_v0_4_4", "WDX-DPC_rna002_v0_4_4"};

fs::path joblib_path(const std::string& chemistry, const std::string& stem) {
  return test::shared_data("warpdemux/joblib/" + chemistry + "/" + stem + ".joblib");
}

ModelFile load_ok(const fs::path& p, const ModelLoadOptions& o = {}) {
  auto m = load_model_file(p, o);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? std::move(m).value() : ModelFile{};
}

// The 200 query fingerprints of a golden file (RNA004, 25 values each).
std::vector<std::vector<double>> golden_queries(const std::string& stem) {
  std::ifstream in(test::shared_data("warpdemux/golden_" + stem + ".json"));
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<double>> out;
  for (const auto& q : j["queries"]) out.push_back(q["fingerprint"].get<std::vector<double>>());
  return out;
}

// ---- a stream writer for hand-made pickles --------------------------------------------------------

struct Stream {
  std::string bytes = std::string("\x80\x04", 2);
  Stream& op(char c) { bytes += c; return *this; }
  Stream& u8(uint8_t v) { bytes += static_cast<char>(v); return *this; }
  Stream& str(const std::string& s) { op('\x8c').u8(static_cast<uint8_t>(s.size())); bytes += s; return *this; }
  Stream& global(const std::string& module, const std::string& name) { return str(module).str(name).op('\x93'); }
  Stream& i1(uint8_t v) { return op('K').u8(v); }
  Stream& raw(const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); return *this; }
  // A NumpyArrayWrapper of `shape` (float64, `order`), without alignment padding; the caller
  // appends the data.
  Stream& wrapper(std::initializer_list<uint8_t> shape, char order, const std::string& code = "f8",
                  const std::string& byte_order = "<") {
    global("joblib.numpy_pickle", "NumpyArrayWrapper").op(')').op('\x81').op('}').op('(');
    str("subclass").global("numpy", "ndarray");
    str("shape").op('(');
    for (uint8_t d : shape) i1(d);
    op('t');
    str("order").str(std::string(1, order));
    str("dtype").global("numpy", "dtype").str(code).op('\x89').op('\x88').op('\x87').op('R');
    op('(').i1(3).str(byte_order).op('N').op('N').op('N').op('J').raw("\xff\xff\xff\xff", 4);
    op('J').raw("\xff\xff\xff\xff", 4).i1(0).op('t').op('b');
    str("allow_mmap").op('\x88');
    return op('u').op('b');
  }
};

Result<detail::Pickle> read(const Stream& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.bytes.data());
  return detail::read_joblib_pickle({p, s.bytes.size()}, "t.joblib");
}

void expect_refused(const Stream& s, const std::string& words) {
  auto r = read(s);
  ASSERT_FALSE(r.is_ok()) << "accepted: " << words;
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("byte offset"), std::string::npos) << r.status().message();
}

TEST(Pickle, ReadsArraysInEitherOrderAndByteOrder) {
  const double c_values[] = {1, 2, 3, 4, 5, 6};
  Stream c;
  c.wrapper({2, 3}, 'C').raw(c_values, sizeof c_values).op('.');
  auto rc = read(c);
  ASSERT_TRUE(rc.is_ok()) << rc.status().to_string();
  ASSERT_EQ(rc->root->type, PickleValue::Type::kArray);
  EXPECT_EQ(rc->root->shape, (std::vector<size_t>{2, 3}));
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rc->root->element_double(i), c_values[i]);

  // Fortran order: the bytes of the transpose; read back in C order.
  const double f_values[] = {1, 4, 2, 5, 3, 6};
  Stream f;
  f.wrapper({2, 3}, 'F').raw(f_values, sizeof f_values).op('.');
  auto rf = read(f);
  ASSERT_TRUE(rf.is_ok()) << rf.status().to_string();
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rf->root->element_double(i), c_values[i]) << i;

  // Big-endian int32.
  const uint8_t be[] = {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};
  Stream b;
  b.wrapper({2}, 'C', "i4", ">").raw(be, sizeof be).op('.');
  auto rb = read(b);
  ASSERT_TRUE(rb.is_ok()) << rb.status().to_string();
  EXPECT_EQ(rb->root->element_int(0), 258);
  EXPECT_EQ(rb->root->element_int(1), -2);
}

TEST(Pickle, RefusesWhatAModelFileNeverHolds) {
  Stream forbidden;
  forbidden.global("os", "system").str("echo hi").op('\x85').op('R').op('.');
  expect_refused(forbidden, "forbidden global 'os.system'");
  Stream builtins;
  builtins.global("builtins", "eval").op('.');
  expect_refused(builtins, "forbidden global 'builtins.eval'");
  Stream unknown;
  unknown.op('\xff');
  expect_refused(unknown, "opcode 0xff");
  Stream persistent;  // BINPERSID: a persistent id would call back into the loader
  persistent.str("x").op('Q').op('.');
  expect_refused(persistent, "opcode 0x51");
  Stream reduce_ndarray;  // REDUCE of an allowed class that is not a constructor here
  reduce_ndarray.global("numpy", "ndarray").op(')').op('R').op('.');
  expect_refused(reduce_ndarray, "REDUCE of numpy.ndarray");
  Stream object_dtype;
  object_dtype.wrapper({1}, 'C', "O8").op('.');
  expect_refused(object_dtype, "numpy dtype 'O8'");
  Stream no_stop;
  no_stop.i1(1);
  expect_refused(no_stop, "ends before its STOP");
  Stream memo;
  memo.op('h').u8(7).op('.');
  expect_refused(memo, "memo entry 7 fetched before it was stored");
}

TEST(Pickle, RefusesAnArrayLongerThanTheBytesThatFollow) {
  const double three[] = {1, 2, 3};
  Stream s;
  s.wrapper({10}, 'C').raw(three, sizeof three).op('.');
  expect_refused(s, "array of shape (10,) (f8) needs 80 bytes but the file has 25 left");
}

// ---- the shipped model files ----------------------------------------------------------------------

TEST(JoblibModel, EveryShippedModelLoadsWithItsConfig) {
  for (const char* stem : kRna004) {
    const ModelFile m = load_ok(joblib_path("rna004", stem));
    EXPECT_EQ(m.format, ModelFormat::kJoblib);
    ASSERT_TRUE(m.dtw_svm.has_value()) << stem;
    EXPECT_EQ(m.chemistry, "RNA004");
    EXPECT_EQ(m.signal_processing_config_name, "rna004_130bps@v1.0");
    EXPECT_NE(m.settings_source.find("rna004_130bps@v1.0.toml"), std::string::npos) << m.settings_source;
  }
  for (const char* stem : kRna002) {
    const ModelFile m = load_ok(joblib_path("rna002", stem));
    ASSERT_TRUE(m.dtw_svm.has_value()) << stem;
    EXPECT_EQ(m.chemistry, "RNA002");
    EXPECT_EQ(m.signal_processing_config_name, "rna002_70bps@v1.0");
    // The registry names v1.0; the file beside it is v0.4.4.
    EXPECT_NE(m.settings_source.find("rna002_70bps@v0.4.4.toml"), std::string::npos) << m.settings_source;
    EXPECT_NE(m.settings_source.find("version differs"), std::string::npos) << m.settings_source;
  }
  const ModelFile dpc = load_ok(joblib_path("rna002", "WDX-DPC_rna002_v0_4_4"));
  EXPECT_EQ(dpc.barcode_names, (std::vector<std::string>{"dpc1", "dpc2", "dpc3", "dpc4"}));
  const ModelFile w12 = load_ok(joblib_path("rna002", "WDX12_rna002_v0_4_4"));
  EXPECT_EQ(w12.dtw_svm->n_classes(), 13u);
  EXPECT_EQ(w12.dtw_svm->n_training(), 3617u);
}

// The RNA004 files hold the values of our JSON copies: the same settings and, on the golden
// queries, the same probabilities bit for bit.
TEST(JoblibModel, Rna004ModelsEqualTheirJsonCopiesBitForBit) {
  const auto queries = golden_queries("WDX4_rna004_v1_0");
  for (const char* stem : kRna004) {
    SCOPED_TRACE(stem);
    const ModelFile j = load_ok(joblib_path("rna004", stem));
    const ModelFile c = load_ok(test::shared_data(std::string("warpdemux/") + stem + ".json"));
    ASSERT_TRUE(j.dtw_svm && c.dtw_svm && j.signal_processing && c.signal_processing);
    EXPECT_TRUE(*j.signal_processing == *c.signal_processing);
    const WarpDemuxModel& a = *j.dtw_svm;
    const WarpDemuxModel& b = *c.dtw_svm;
    ASSERT_EQ(a.n_classes(), b.n_classes());
    EXPECT_EQ(a.n_training(), b.n_training());
    EXPECT_EQ(a.n_support(), b.n_support());
    EXPECT_TRUE(std::equal(a.labels().begin(), a.labels().end(), b.labels().begin(), b.labels().end()));
    EXPECT_TRUE(std::equal(a.thresholds().begin(), a.thresholds().end(), b.thresholds().begin(), b.thresholds().end()));
    EXPECT_EQ(a.dtw_params().window, b.dtw_params().window);
    EXPECT_EQ(a.dtw_params().penalty, b.dtw_params().penalty);
    EXPECT_EQ(a.name(), b.name());
    auto sa = a.make_scratch();
    auto sb = b.make_scratch();
    Classification ca, cb;
    for (size_t q = 0; q < queries.size(); ++q) {
      a.classify(queries[q], sa, ca);
      b.classify(queries[q], sb, cb);
      ASSERT_EQ(ca.probabilities.size(), cb.probabilities.size());
      for (size_t k = 0; k < ca.probabilities.size(); ++k)
        ASSERT_EQ(std::bit_cast<uint64_t>(ca.probabilities[k]), std::bit_cast<uint64_t>(cb.probabilities[k]))
            << "query " << q << " class " << k;
      ASSERT_EQ(ca.label, cb.label) << "query " << q;
    }
  }
}

// RNA002: scikit-learn's own predictions on the unpickled models (tests/fixtures/
// make_warpdemux_joblib_golden.py) on fingerprints our pipeline extracted from the RNA002 sample
// reads: labels identical, probabilities within 1e-6.
TEST(JoblibModel, Rna002ModelsAgreeWithScikitLearn) {
  std::ifstream in(fs::path(test::source_dir()) / "tests/data/warpdemux/joblib_rna002_golden.json");
  ASSERT_TRUE(in) << "tests/data/warpdemux/joblib_rna002_golden.json is missing";
  const auto golden = nlohmann::json::parse(in);
  const auto& reads = golden["reads"];
  ASSERT_GE(reads.size(), 100u);
  size_t n_models = 0;
  for (const auto& [stem, model] : golden["models"].items()) {
    SCOPED_TRACE(stem);
    ++n_models;
    const ModelFile m = load_ok(joblib_path("rna002", stem));
    ASSERT_TRUE(m.dtw_svm.has_value());
    auto scratch = m.dtw_svm->make_scratch();
    Classification call;
    const auto& queries = model["queries"];
    ASSERT_EQ(queries.size(), reads.size());
    // dtaidistance's arithmetic (float64 DTW) and the default float32 DTW.
    for (const DtwPrecision dtw : {DtwPrecision::kFloat64, DtwPrecision::kFloat32}) {
      double worst = 0.0;
      for (size_t r = 0; r < reads.size(); ++r) {
        ASSERT_EQ(queries[r]["read_id"], reads[r]["read_id"]);
        const auto fp = reads[r]["fingerprint"].get<std::vector<double>>();
        m.dtw_svm->classify(fp, scratch, call, KernelPrecision::kModelDefault, dtw);
        const auto proba = queries[r]["proba"].get<std::vector<double>>();
        ASSERT_EQ(call.probabilities.size(), proba.size());
        for (size_t k = 0; k < proba.size(); ++k) worst = std::max(worst, std::abs(call.probabilities[k] - proba[k]));
        EXPECT_EQ(call.label, queries[r]["label"].get<int>()) << reads[r]["read_id"];
      }
      std::printf("%s %s DTW: max |p - scikit-learn| = %.3g\n", stem.c_str(),
                  dtw == DtwPrecision::kFloat64 ? "float64" : "float32", worst);
      EXPECT_LE(worst, 1e-6);
    }
  }
  EXPECT_EQ(n_models, 6u);
}

TEST(JoblibModel, Rna002ConfigIsAdaptedsWithWarpDemuxsKeys) {
  const ModelFile m = load_ok(joblib_path("rna002", "WDX4_rna002_v0_4_4"));
  ASSERT_TRUE(m.signal_processing.has_value());
  const SignalProcessing& sp = *m.signal_processing;
  EXPECT_FALSE(sp.uses_cnn());                           // WarpDemuX: llr_detect = true
  EXPECT_TRUE(sp.boundaries.llr_detect);
  EXPECT_EQ(sp.boundaries.max_obs_trace, 15000);         // WarpDemuX's TOML
  EXPECT_EQ(sp.boundaries.min_obs_adapter, 2000);        // ADAPTed's RNA002 configuration
  EXPECT_EQ(sp.boundaries.max_obs_adapter, 12000);
  EXPECT_EQ(sp.boundaries.downscale_factor, 20);
  EXPECT_EQ(sp.boundaries.adapter_peak_width, 1500);
  EXPECT_EQ(sp.boundaries.pA_var_range.hi, 20.0);
  EXPECT_EQ(sp.fingerprint.max_min_gap, 15u);            // segmentation.min_obs_per_base
  EXPECT_EQ(sp.fingerprint.max_stat_width, 30u);         // segmentation.running_stat_width
  EXPECT_EQ(sp.fingerprint.barcode_num_events, 25u);
  EXPECT_EQ(m.dtw_svm->dtw_params().window, 15u);
}

// ---- pairing and refusals ----------------------------------------------------------------------

TEST(JoblibModel, ConfigIsFoundByNameOrGivenOrRefused) {
  const fs::path dir = test::scratch_dir("pairing");
  const fs::path alone = dir / "WDX4_rna002_v0_4_4.joblib";
  fs::copy_file(joblib_path("rna002", "WDX4_rna002_v0_4_4"), alone);
  auto missing = load_model_file(alone);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("--config"), std::string::npos) << missing.status().message();

  ModelLoadOptions given;
  given.warpdemux_config = test::shared_data("warpdemux/joblib/rna002/rna002_70bps@v0.4.4.toml");
  const ModelFile with = load_ok(alone, given);
  EXPECT_NE(with.settings_source.find("--config"), std::string::npos);
  const ModelFile beside = load_ok(joblib_path("rna002", "WDX4_rna002_v0_4_4"));
  EXPECT_TRUE(*with.signal_processing == *beside.signal_processing);

  // An RNA004 model alone: WarpDemuX 1.0's built-in RNA004 config.
  const fs::path alone4 = dir / "mine_rna004.joblib";
  fs::copy_file(joblib_path("rna004", "WDX4_rna004_v1_0"), alone4);
  const ModelFile builtin = load_ok(alone4);
  EXPECT_NE(builtin.settings_source.find("built in"), std::string::npos);
  EXPECT_TRUE(*builtin.signal_processing == SignalProcessing::rna004(true));

  // --config with a JSON model, or with a model folder: refused, not ignored.
  auto json = load_model_file(test::shared_data("warpdemux/WDX4_rna004_v1_0.json"), given);
  ASSERT_FALSE(json.is_ok());
  EXPECT_EQ(json.status().code(), StatusCode::kUsage);
  HeadOptions ho;
  ho.model_file = given;
  EXPECT_FALSE(load_head(test::shared_data("warpdemux/WDX4_rna004_v1_0.json"), ho).is_ok());
}

TEST(JoblibModel, DamagedOrForeignFilesAreRefusedNamingTheFile) {
  const fs::path dir = test::scratch_dir("damaged");
  const std::string bytes = test::file_bytes(joblib_path("rna004", "WDX4_rna004_v1_0"));
  ASSERT_GT(bytes.size(), 100000u);

  const fs::path cut = dir / "cut_rna004.joblib";
  test::write_file_bytes(cut, std::string_view(bytes).substr(0, bytes.size() / 2));
  auto r = load_model_file(cut);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find(cut.string()), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("cut short"), std::string::npos) << r.status().message();

  const fs::path lz4 = dir / "lz4_rna004.joblib";
  test::write_file_bytes(lz4, std::string("\x04\x22\x4d\x18", 4) + "rest");
  r = load_model_file(lz4);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("lz4"), std::string::npos) << r.status().message();

  const fs::path dict = dir / "dict_rna004.joblib";
  Stream s;
  s.op('}').op('.');
  test::write_file_bytes(dict, s.bytes);
  r = load_model_file(dict);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not a WarpDemuX DTW_SVM model"), std::string::npos) << r.status().message();
}

TEST(JoblibModel, ZlibCompressedFileGivesTheSameModel) {
  const fs::path dir = test::scratch_dir("zlib");
  const std::string bytes = test::file_bytes(joblib_path("rna004", "WDX4_rna004_v1_0"));
  std::vector<uint8_t> packed(compressBound(bytes.size()));
  uLongf n = packed.size();
  ASSERT_EQ(compress2(packed.data(), &n, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size(), 3), Z_OK);
  fs::create_directories(dir / "m");
  fs::copy_file(test::shared_data("warpdemux/joblib/rna004/config.toml"), dir / "m/config.toml");
  fs::copy_file(test::shared_data("warpdemux/joblib/rna004/rna004_130bps@v1.0.toml"), dir / "m/rna004_130bps@v1.0.toml");
  test::write_file_bytes(dir / "m/WDX4_rna004_v1_0.joblib",
                         std::string_view(reinterpret_cast<const char*>(packed.data()), n));
  const ModelFile z = load_ok(dir / "m/WDX4_rna004_v1_0.joblib");
  const ModelFile plain = load_ok(joblib_path("rna004", "WDX4_rna004_v1_0"));
  ASSERT_TRUE(z.dtw_svm && plain.dtw_svm);
  const auto queries = golden_queries("WDX4_rna004_v1_0");
  auto sa = z.dtw_svm->make_scratch();
  auto sb = plain.dtw_svm->make_scratch();
  Classification ca, cb;
  for (const auto& q : queries) {
    z.dtw_svm->classify(q, sa, ca);
    plain.dtw_svm->classify(q, sb, cb);
    ASSERT_EQ(ca.probabilities, cb.probabilities);
  }
}

TEST(JoblibModel, ExportedJsonIsTheSameModel) {
  const fs::path dir = test::scratch_dir("export");
  auto text = joblib_model_as_json(joblib_path("rna002", "WDX6_rna002_v0_4_4"));
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  std::ofstream(dir / "WDX6_rna002_v0_4_4.json") << *text;
  const ModelFile exported = load_ok(dir / "WDX6_rna002_v0_4_4.json");
  const ModelFile original = load_ok(joblib_path("rna002", "WDX6_rna002_v0_4_4"));
  ASSERT_TRUE(exported.dtw_svm && original.dtw_svm);
  EXPECT_EQ(exported.format, ModelFormat::kJson);
  EXPECT_EQ(exported.chemistry, "RNA002");
  EXPECT_TRUE(*exported.signal_processing == *original.signal_processing);
  const auto queries = golden_queries("WDX4_rna004_v1_0");
  auto sa = exported.dtw_svm->make_scratch();
  auto sb = original.dtw_svm->make_scratch();
  Classification ca, cb;
  for (const auto& q : queries) {
    exported.dtw_svm->classify(q, sa, ca);
    original.dtw_svm->classify(q, sb, cb);
    ASSERT_EQ(ca.probabilities, cb.probabilities);
    ASSERT_EQ(ca.label, cb.label);
  }
  EXPECT_FALSE(joblib_model_as_json(test::shared_data("warpdemux/WDX4_rna004_v1_0.json")).is_ok());
}

}  // namespace
}  // namespace escpod::demux
