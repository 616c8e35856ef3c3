// A WarpDemuX joblib model into our JSON layout (joblib_model.hpp): the pickle's DTW_SVM fields
// and scikit-learn's fitted SVC state, checked by their pickle names, become the fields
// ModelBuilder::dtw_svm reads (docs/formats.md lists the correspondence).
#include "joblib_model.hpp"

#include <zlib.h>

#include <array>
#include <cstring>
#include <fstream>
#include <numeric>

#include "demux/pickle.hpp"

namespace escpod::demux::detail {

namespace fs = std::filesystem;

namespace {

using Type = PickleValue::Type;

// ---- the file's bytes ---------------------------------------------------------------------------

struct Magic {
  std::array<uint8_t, 4> bytes;
  size_t n;
  const char* name;
};
// Compressors joblib.dump(compress=...) can use that this build does not undo.
constexpr Magic kUnreadCompressors[] = {
    {{0x04, 0x22, 0x4d, 0x18}, 4, "lz4"},
    {{'B', 'Z', 'h', 0}, 3, "bz2"},
    {{0xfd, '7', 'z', 'X'}, 4, "xz"},
    {{0x5d, 0x00, 0x00, 0}, 3, "lzma"},
};

bool starts_with(std::span<const uint8_t> head, const uint8_t* bytes, size_t n) {
  return head.size() >= n && std::memcmp(head.data(), bytes, n) == 0;
}
bool is_zlib(std::span<const uint8_t> h) {
  return h.size() >= 2 && h[0] == 0x78 && ((h[0] << 8) | h[1]) % 31 == 0;
}
bool is_gzip(std::span<const uint8_t> h) { return h.size() >= 2 && h[0] == 0x1f && h[1] == 0x8b; }

Result<std::vector<uint8_t>> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path.string() + ": cannot open");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::io_error(path.string() + ": read error");
  return bytes;
}

// zlib or gzip (windowBits 15 + 32 detects which), to the end of the stream.
Result<std::vector<uint8_t>> inflate_all(const std::vector<uint8_t>& in, const fs::path& path) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Status::internal("zlib inflateInit2 failed");
  std::vector<uint8_t> out;
  std::array<uint8_t, 1 << 16> chunk{};
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = chunk.data();
    z.avail_out = chunk.size();
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      return Status::corrupt(path.string() + ": the compressed joblib stream is damaged or cut short (zlib: " +
                             (z.msg ? z.msg : std::to_string(rc)) + ")");
    }
    out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - z.avail_out));
    if (rc != Z_STREAM_END && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return Status::corrupt(path.string() + ": the compressed joblib stream is cut short");
    }
  }
  inflateEnd(&z);
  return out;
}

// ---- checked access to the pickle's values ------------------------------------------------------

class Fields {
 public:
  explicit Fields(std::string file) : m_file(std::move(file)) {}

  Status error(const std::string& what) const {
    return Status::corrupt(m_file + ": " + what);
  }
  Result<const PickleValue*> member(const PickleValue& obj, const char* key, const char* owner) const {
    const PickleValue* v = obj.field(key);
    if (v == nullptr) return error(std::string(owner) + " has no field '" + key + "'");
    return v;
  }
  Result<int64_t> integer(const PickleValue& v, const std::string& what) const {
    if (v.type == Type::kInt) return v.integer;
    return error(what + " must be an integer, found " + v.type_name());
  }
  Result<double> number(const PickleValue& v, const std::string& what) const {
    if (v.type == Type::kFloat) return v.number;
    if (v.type == Type::kInt) return static_cast<double>(v.integer);
    return error(what + " must be a number, found " + v.type_name());
  }
  Result<bool> boolean(const PickleValue& v, const std::string& what) const {
    if (v.type == Type::kBool) return v.boolean;
    return error(what + " must be True or False, found " + v.type_name());
  }
  Result<std::string> string(const PickleValue& v, const std::string& what) const {
    if (v.type == Type::kStr) return v.text;
    return error(what + " must be a string, found " + v.type_name());
  }
  // An array of `ndim` dimensions whose elements are of `kinds` ("f" floats, "iu" integers).
  Result<const PickleValue*> array(const PickleValue& v, const std::string& what, size_t ndim,
                                   std::string_view kinds) const {
    if (v.type != Type::kArray) return error(what + " must be a numpy array, found " + v.type_name());
    if (v.shape.size() != ndim)
      return error(what + " must have " + std::to_string(ndim) + " dimension(s), found " + std::to_string(v.shape.size()));
    if (kinds.find(v.kind) == std::string_view::npos)
      return error(what + " has dtype " + v.text + ", expected " + (kinds == "f" ? "float" : "integer") + " values");
    return &v;
  }

 private:
  std::string m_file;
};

Json vector_json(const PickleValue& a, size_t begin, size_t n) {
  Json out = Json::array();
  for (size_t i = begin; i < begin + n; ++i) {
    if (a.kind == 'f') out.push_back(a.element_double(i));
    else out.push_back(a.element_int(i));
  }
  return out;
}
Json matrix_json(const PickleValue& a) {
  Json out = Json::array();
  for (size_t r = 0; r < a.shape[0]; ++r) out.push_back(vector_json(a, r * a.shape[1], a.shape[1]));
  return out;
}

// ---- the model's parts --------------------------------------------------------------------------

// The fitted SVC: its kind must be the one WarpDemuX trains (precomputed kernel, probabilities).
Status check_svc_kind(const PickleValue& svc, const Fields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* kernel, f.member(svc, "kernel", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(std::string k, f.string(*kernel, "SVC.kernel"));
  if (k != "precomputed")
    return f.error("SVC.kernel is '" + k + "'; WarpDemuX models use the precomputed DTW kernel");
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* prob, f.member(svc, "probability", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(bool has_prob, f.boolean(*prob, "SVC.probability"));
  if (!has_prob) return f.error("SVC.probability is False: the model was trained without probability estimates");
  if (const PickleValue* sparse = svc.field("_sparse"); sparse && sparse->type == Type::kBool && sparse->boolean)
    return f.error("SVC._sparse is True (sparse training data is not a WarpDemuX model)");
  return Status::ok();
}

// The SVC hyper-parameters, for the record (`svc` in our layout).
Json svc_record(const PickleValue& svc) {
  Json out = Json::object();
  for (const char* key : {"kernel", "C", "class_weight", "probability", "random_state", "tol", "shrinking",
                          "decision_function_shape", "break_ties", "fit_status_", "_sklearn_version"}) {
    const PickleValue* v = svc.field(key);
    if (v == nullptr) continue;
    switch (v->type) {
      case Type::kStr: out[key] = v->text; break;
      case Type::kInt: out[key] = v->integer; break;
      case Type::kFloat: out[key] = v->number; break;
      case Type::kBool: out[key] = v->boolean; break;
      default: break;
    }
  }
  return out;
}

// Support vectors (the training rows they are), their classes and counts, the libsvm pairwise
// parameters: the rows are kept in support-vector order, so support_indices is 0..n_sv-1.
Status put_svm(Json& j, const PickleValue& svc, const PickleValue& train_x, const Fields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* classes_v, f.member(svc, "classes_", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* classes, f.array(*classes_v, "SVC.classes_", 1, "iu"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* support_v, f.member(svc, "support_", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* support, f.array(*support_v, "SVC.support_", 1, "iu"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* counts_v, f.member(svc, "_n_support", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* counts, f.array(*counts_v, "SVC._n_support", 1, "iu"));
  const size_t k = classes->size(), n_sv = support->size(), n_train = train_x.shape[0];
  if (counts->size() != k) return f.error("SVC._n_support has " + std::to_string(counts->size()) +
                                          " entries for " + std::to_string(k) + " classes");
  Json rows = Json::array(), labels = Json::array();
  size_t sv = 0;
  for (size_t c = 0; c < k; ++c) {
    const int64_t count = counts->element_int(c);
    if (count < 0 || static_cast<size_t>(count) > n_sv - sv)
      return f.error("SVC._n_support does not add up to the " + std::to_string(n_sv) + " support vectors");
    for (int64_t i = 0; i < count; ++i, ++sv) {
      const int64_t row = support->element_int(sv);
      if (row < 0 || static_cast<size_t>(row) >= n_train)
        return f.error("SVC.support_[" + std::to_string(sv) + "] = " + std::to_string(row) +
                       " is outside the " + std::to_string(n_train) + " training fingerprints (_X)");
      rows.push_back(vector_json(train_x, static_cast<size_t>(row) * train_x.shape[1], train_x.shape[1]));
      labels.push_back(classes->element_int(c));
    }
  }
  if (sv != n_sv) return f.error("SVC._n_support does not add up to the " + std::to_string(n_sv) + " support vectors");
  std::vector<int64_t> identity(n_sv);
  std::iota(identity.begin(), identity.end(), 0);
  j["classes"] = vector_json(*classes, 0, k);
  j["n_features"] = train_x.shape[1];
  j["n_training"] = n_sv;
  j["training_fingerprints"] = std::move(rows);
  j["training_labels"] = std::move(labels);
  j["support_indices"] = identity;
  j["n_support"] = vector_json(*counts, 0, k);
  // libsvm's own coefficients and intercepts (scikit-learn negates the public ones of a binary
  // model; the underscored ones are what it hands libsvm to predict).
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* dual_v, f.member(svc, "_dual_coef_", "the SVC"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* dual, f.array(*dual_v, "SVC._dual_coef_", 2, "f"));
  if (dual->shape[1] != n_sv) return f.error("SVC._dual_coef_ has " + std::to_string(dual->shape[1]) +
                                             " columns for " + std::to_string(n_sv) + " support vectors");
  j["dual_coef"] = matrix_json(*dual);
  for (const auto& [key, name] : {std::pair{"_intercept_", "intercept"}, {"_probA", "prob_a"}, {"_probB", "prob_b"}}) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* v, f.member(svc, key, "the SVC"));
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* a, f.array(*v, std::string("SVC.") + key, 1, "f"));
    j[name] = vector_json(*a, 0, a->size());
  }
  return Status::ok();
}

// label_mapper (class index -> barcode number, -1 noise), noise_class and thresholds.
Status put_labels(Json& j, const PickleValue& model, size_t k, const Fields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* mapper, f.member(model, "label_mapper", "DTW_SVM"));
  if (mapper->type != Type::kDict) return f.error("DTW_SVM.label_mapper must be a dict, found " + mapper->type_name());
  Json lm = Json::object(), barcodes = Json::array();
  for (const auto& [key, value] : mapper->fields) {
    if (key->type != Type::kInt || key->integer < 0 || static_cast<size_t>(key->integer) >= k)
      return f.error("DTW_SVM.label_mapper key " + (key->type == Type::kInt ? std::to_string(key->integer) : key->type_name()) +
                     " is not a class index (0.." + std::to_string(k - 1) + ")");
    if (value->type != Type::kInt)
      return f.error("DTW_SVM.label_mapper[" + std::to_string(key->integer) + "] is a " + value->type_name() +
                     ", not a barcode number (-1 for noise)");
    lm[std::to_string(key->integer)] = value->integer;
  }
  for (size_t c = 0; c < k; ++c) {
    auto it = lm.find(std::to_string(c));
    if (it != lm.end() && it->get<int64_t>() != -1) barcodes.push_back(*it);
  }
  j["label_mapper"] = std::move(lm);
  j["barcodes"] = std::move(barcodes);
  if (const PickleValue* noise = model.field("noise_class")) {
    ESCPOD_ASSIGN_OR_RETURN(bool b, f.boolean(*noise, "DTW_SVM.noise_class"));
    j["noise_class"] = b;
  }
  if (const PickleValue* th = model.field("thresholds"); th && th->type != Type::kNone) {
    ESCPOD_ASSIGN_OR_RETURN(const PickleValue* a, f.array(*th, "DTW_SVM.thresholds", 1, "f"));
    j["thresholds"] = vector_json(*a, 0, a->size());
  }
  return Status::ok();
}

// DTW window and penalty, kernel exp(-gamma d^pwr_dist) evaluated in float32 as WarpDemuX does.
Status put_kernel(Json& j, const PickleValue& model, const Fields& f) {
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* window, f.member(model, "window", "DTW_SVM"));
  ESCPOD_ASSIGN_OR_RETURN(j["window"], f.integer(*window, "DTW_SVM.window"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* penalty, f.member(model, "penalty", "DTW_SVM"));
  ESCPOD_ASSIGN_OR_RETURN(j["penalty"], f.number(*penalty, "DTW_SVM.penalty"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* gamma, f.member(model, "gamma", "DTW_SVM"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* power, f.member(model, "pwr_dist", "DTW_SVM"));
  Json kp = Json::object();
  ESCPOD_ASSIGN_OR_RETURN(kp["gamma"], f.number(*gamma, "DTW_SVM.gamma"));
  ESCPOD_ASSIGN_OR_RETURN(kp["power"], f.number(*power, "DTW_SVM.pwr_dist"));
  j["kernel_params"] = std::move(kp);
  j["kernel"] = Json{{"distance_dtype", "float32"}};
  if (const PickleValue* block = model.field("block_size"); block && block->type == Type::kInt)
    j["block_size"] = block->integer;
  return Status::ok();
}

}  // namespace

bool looks_like_joblib(std::span<const uint8_t> head) {
  if (head.size() >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) return true;
  if (is_zlib(head) || is_gzip(head) || (head.size() >= 2 && head[0] == 'Z' && head[1] == 'F')) return true;
  for (const Magic& m : kUnreadCompressors)
    if (starts_with(head, m.bytes.data(), m.n)) return true;
  return false;
}

Result<std::vector<uint8_t>> read_joblib_bytes(const fs::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path));
  return joblib_pickle_bytes(std::move(bytes), path);
}

Result<std::vector<uint8_t>> joblib_pickle_bytes(std::vector<uint8_t> bytes, const fs::path& path) {
  for (const Magic& m : kUnreadCompressors)
    if (starts_with(bytes, m.bytes.data(), m.n))
      return Status::unsupported(path.string() + ": a joblib file compressed with " + m.name +
                                 ", which this build does not read; re-save it uncompressed (joblib.dump(model, "
                                 "path)) or with zlib (compress=('zlib', 3))");
  if (bytes.size() >= 2 && bytes[0] == 'Z' && bytes[1] == 'F')
    return Status::unsupported(path.string() + ": a joblib file in the pre-0.10 compressed layout; re-save it "
                               "with a current joblib");
  if (is_zlib(bytes) || is_gzip(bytes)) return inflate_all(bytes, path);
  return bytes;
}

Result<Json> dtw_svm_json_from_joblib(std::span<const uint8_t> bytes, const fs::path& path,
                                      const WarpDemuxPairing& pairing) {
  const std::string file = path.string();
  ESCPOD_ASSIGN_OR_RETURN(Pickle p, read_joblib_pickle(bytes, file));
  const Fields f(file);
  const PickleValue& model = *p.root;
  if (model.type != Type::kObject || model.text != "warpdemux.models.dtw_svm.DTW_SVM")
    return f.error("the pickle holds a " + model.type_name() + ", not a WarpDemuX DTW_SVM model");
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* svc, f.member(model, "model", "DTW_SVM"));
  if (svc->type != Type::kObject || svc->text != "sklearn.svm._classes.SVC")
    return f.error("DTW_SVM.model is a " + svc->type_name() + ", not a scikit-learn SVC");
  ESCPOD_RETURN_IF_ERROR(check_svc_kind(*svc, f));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* x_v, f.member(model, "_X", "DTW_SVM"));
  ESCPOD_ASSIGN_OR_RETURN(const PickleValue* train_x, f.array(*x_v, "DTW_SVM._X (training fingerprints)", 2, "f"));

  Json j = Json::object();
  j["format"] = "escapepod-wdx-dtw-svm";
  j["format_version"] = 1;
  j["version"] = "1.0";
  j["model_name"] = path.stem().string();
  std::string sklearn = "unknown";
  if (const PickleValue* v = svc->field("_sklearn_version"); v && v->type == Type::kStr) sklearn = v->text;
  j["source"] = Json{{"description", "WarpDemuX model file " + path.filename().string() + " (joblib, pickle protocol " +
                                         std::to_string(p.protocol) + ", scikit-learn " + sklearn + ")"}};
  j["chemistry"] = pairing.chemistry;
  j["signal_processing_config_name"] = pairing.config_name;
  ESCPOD_RETURN_IF_ERROR(put_svm(j, *svc, *train_x, f));
  ESCPOD_RETURN_IF_ERROR(put_labels(j, model, j["classes"].size(), f));
  ESCPOD_RETURN_IF_ERROR(put_kernel(j, model, f));
  j["use_kernel_weighted"] = false;
  j["svc"] = svc_record(*svc);
  j["signal_processing"] = pairing.block;
  return j;
}

}  // namespace escpod::demux::detail
