// CTC-CRF model folders: SeqTagger/bonito (config.toml + weights_N.tar + barcodes.fa, encoder
// built in memory on the nn engine) and escapepod CRF bundles (metadata.json + ONNX encoder).
#include "escpod/demux/crf_model.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "escpod/nn/graph_builder.hpp"
#include "escpod/nn/torch_state_dict.hpp"

namespace escpod::demux {
namespace fs = std::filesystem;
using nlohmann::json;

int64_t CrfConfig::n_states() const {
  int64_t s = 1;
  for (int i = 0; i < state_len; ++i) s *= n_base;
  return s;
}
int64_t CrfConfig::n_scores() const { return n_states() * (n_base + 1); }
int64_t CrfConfig::steps(int64_t window) const { return stride > 0 ? (window + stride - 1) / stride : 0; }

namespace {

// Longest window a model may declare (samples): far above any CRF chunk in use (2000-6000), low
// enough that the load-time zero-window run cannot be made to allocate gigabytes.
constexpr int64_t kMaxChunk = 1'000'000;

Result<std::string> read_text(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::not_found(fmt::format("{}: no such file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(fmt::format("{}: cannot open", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reference sequences must be spelt in the model's bases (case-insensitive) and be at least
// state_len long (the lattice scorer needs that many bases to leave position 0).
Status check_references(const std::vector<CrfReference>& refs, const CrfConfig& c, const std::string& where) {
  std::set<std::string> names;
  const std::string bases = c.alphabet.substr(1);
  for (const CrfReference& r : refs) {
    if (r.name.empty()) return Status::corrupt(fmt::format("{}: a reference has an empty name", where));
    if (!names.insert(r.name).second) return Status::corrupt(fmt::format("{}: reference name '{}' appears twice", where, r.name));
    if (static_cast<int>(r.sequence.size()) < c.state_len) {
      return Status::corrupt(fmt::format("{}: reference '{}' is shorter than state_len {}", where, r.name, c.state_len));
    }
    for (char ch : r.sequence) {
      const char up = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (bases.find(up) == std::string::npos) {
        return Status::corrupt(fmt::format("{}: reference '{}' has symbol '{}' outside the alphabet {}", where, r.name, ch, bases));
      }
    }
  }
  return Status::ok();
}

// Zero-window run: the encoder must map [1, 1, chunk] to [T, 1, n_scores], T = ceil(chunk / stride).
Status check_encoder_shape(const nn::Model& model, const CrfConfig& c, const std::string& where) {
  const std::array<int64_t, 3> in_shape{1, 1, c.chunk};
  auto shape = model.output_shape(in_shape);
  if (!shape.is_ok()) return Status::corrupt(fmt::format("{}: encoder cannot run a window of {}: {}", where, c.chunk, shape.status().message()));
  const std::vector<int64_t> want{c.steps(c.chunk), 1, c.n_scores()};
  if (*shape != want) {
    return Status::corrupt(fmt::format("{}: encoder maps [1, 1, {}] to [{}], expected [{}] (T = chunk / stride, {} scores)", where,
                                       c.chunk, fmt::join(*shape, ", "), fmt::join(want, ", "), c.n_scores()));
  }
  std::vector<float> zeros(static_cast<size_t>(c.chunk), 0.0f);
  std::vector<float> out(static_cast<size_t>(want[0] * want[2]));
  nn::Workspace ws(1);
  ESCPOD_RETURN_IF_ERROR(model.run(ws, zeros, in_shape, out));
  for (float v : out) {
    if (!std::isfinite(v)) return Status::corrupt(fmt::format("{}: encoder output on a zero window is not finite", where));
  }
  return Status::ok();
}

// ---- SeqTagger / bonito ------------------------------------------------------------------------

Result<std::vector<CrfReference>> read_fasta(const fs::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(std::string text, read_text(path));
  std::vector<CrfReference> refs;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line[0] == '>') {
      const size_t end = line.find_first_of(" \t");
      refs.push_back(CrfReference{line.substr(1, end == std::string::npos ? std::string::npos : end - 1), ""});
    } else if (refs.empty()) {
      return Status::corrupt(fmt::format("{}:{}: sequence before the first '>' header", path.string(), line_no));
    } else {
      refs.back().sequence += line;
    }
  }
  if (refs.empty()) return Status::corrupt(fmt::format("{}: no sequences", path.string()));
  return refs;
}

// The N of a file named exactly `weights_N.tar` (N: 1 to 9 decimal digits), or -1.
long long weights_epoch(std::string_view name) {
  constexpr std::string_view kPrefix = "weights_", kSuffix = ".tar";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) {
    return -1;
  }
  const std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 9) return -1;
  long long n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

// bonito's convention: the folder's weights_N.tar with the largest N (the last epoch saved).
Result<fs::path> find_weights(const fs::path& dir) {
  fs::path best;
  long long best_n = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const long long n = weights_epoch(e.path().filename().string());
    if (n > best_n) {
      best_n = n;
      best = e.path();
    }
  }
  if (best_n < 0) return Status::not_found(fmt::format("{}: no weights_N.tar in the model folder", dir.string()));
  return best;
}

template <typename T>
Result<T> toml_get(const toml::table& t, std::string_view path, const std::string& where) {
  auto v = t.at_path(path).value<T>();
  if (!v) return Status::corrupt(fmt::format("{}: missing or mistyped '{}'", where, path));
  return *v;
}

Result<CrfConfig> parse_bonito_config(const fs::path& path) {
  const std::string where = path.string();
  toml::table t;
  try {
    t = toml::parse_file(where);
  } catch (const toml::parse_error& e) {
    return Status::corrupt(fmt::format("{}:{}: {}", where, e.source().begin.line, e.description()));
  }
  ESCPOD_ASSIGN_OR_RETURN(std::string package, toml_get<std::string>(t, "model.package", where));
  if (package != "bonito.crf") return Status::unsupported(fmt::format("{}: model.package '{}' (only bonito.crf)", where, package));
  ESCPOD_ASSIGN_OR_RETURN(std::string rnn, toml_get<std::string>(t, "encoder.rnn_type", where));
  ESCPOD_ASSIGN_OR_RETURN(std::string act, toml_get<std::string>(t, "encoder.activation", where));
  if (rnn != "lstm" || act != "swish") {
    return Status::unsupported(fmt::format("{}: encoder rnn_type '{}' / activation '{}' (only lstm / swish)", where, rnn, act));
  }
  ESCPOD_ASSIGN_OR_RETURN(int64_t features, toml_get<int64_t>(t, "input.features", where));
  if (features != 1) return Status::unsupported(fmt::format("{}: input.features {} (only 1)", where, features));
  CrfConfig c;
  const toml::array* labels = t.at_path("labels.labels").as_array();
  if (!labels || labels->size() < 2) return Status::corrupt(fmt::format("{}: missing labels.labels", where));
  for (const auto& l : *labels) {
    auto s = l.value<std::string>();
    if (!s || s->size() != 1) return Status::corrupt(fmt::format("{}: labels must be single characters", where));
    c.alphabet += *s;
  }
  c.n_base = static_cast<int>(c.alphabet.size()) - 1;
  ESCPOD_ASSIGN_OR_RETURN(c.stride, toml_get<int64_t>(t, "encoder.stride", where));
  ESCPOD_ASSIGN_OR_RETURN(double scale, toml_get<double>(t, "encoder.scale", where));
  ESCPOD_ASSIGN_OR_RETURN(double blank, toml_get<double>(t, "encoder.blank_score", where));
  c.scale = static_cast<float>(scale);
  c.blank_score = static_cast<float>(blank);
  ESCPOD_ASSIGN_OR_RETURN(int64_t state_len, toml_get<int64_t>(t, "global_norm.state_len", where));
  c.state_len = static_cast<int>(state_len);
  ESCPOD_ASSIGN_OR_RETURN(c.chunk, toml_get<int64_t>(t, "basecaller.chunksize", where));
  if (c.stride < 1 || c.chunk < 1 || c.chunk > kMaxChunk || c.state_len < 1 || c.state_len > 8) {
    return Status::corrupt(fmt::format("{}: stride {}, chunksize {}, state_len {} out of range", where, c.stride, c.chunk, c.state_len));
  }
  if (auto v = t.at_path("basecaller.max_chunksize").value<int64_t>()) c.max_chunk = *v;
  if (auto v = t.at_path("basecaller.step").value<int64_t>()) c.step = *v;
  if (auto v = t.at_path("basecaller.min_baseQ").value<double>()) c.min_baseq = *v;
  if (t.at_path("standardisation").is_table() && t.at_path("standardisation.standardise").value<int64_t>().value_or(0) == 1) {
    c.standardise = true;
    ESCPOD_ASSIGN_OR_RETURN(c.mean, toml_get<double>(t, "standardisation.mean", where));
    ESCPOD_ASSIGN_OR_RETURN(c.stdev, toml_get<double>(t, "standardisation.stdev", where));
    if (!(c.stdev > 0.0) || !std::isfinite(c.mean)) return Status::corrupt(fmt::format("{}: bad standardisation constants", where));
  }
  return c;
}

// Names and shapes the bonito encoder's state_dict must hold, checked exactly.
class StateDictView {
 public:
  StateDictView(const nn::TorchStateDict& sd) : m_sd(sd) {}
  Result<nn::FloatTensor> take(const std::string& name, std::vector<int64_t> shape) {
    const nn::TorchTensor* t = m_sd.find(name);
    if (!t) return Status::corrupt(fmt::format("{}: state_dict has no '{}'", m_sd.source, name));
    if (!shape.empty() && t->shape != shape) {
      return Status::corrupt(fmt::format("{}: '{}' has shape [{}], expected [{}]", m_sd.source, name, fmt::join(t->shape, ", "),
                                         fmt::join(shape, ", ")));
    }
    m_used.insert(name);
    return nn::FloatTensor{t->shape, t->values};
  }
  const nn::TorchTensor* peek(const std::string& name) const { return m_sd.find(name); }
  Status all_used() const {
    for (const nn::TorchTensor& t : m_sd.tensors) {
      if (!m_used.count(t.name)) return Status::unsupported(fmt::format("{}: unexpected state_dict entry '{}'", m_sd.source, t.name));
    }
    return Status::ok();
  }

 private:
  const nn::TorchStateDict& m_sd;
  std::set<std::string> m_used;
};

// conv(1->C0, k) swish, conv(C0->C1, k) swish, conv(C1->F, winlen, stride) swish: shapes are taken
// from the weights (bonito's "fast" models: 4, 16, F), padding k / 2 as bonito's Convolution.
Result<nn::GraphBuilder::Value> add_convs(nn::GraphBuilder& b, StateDictView& sd, const CrfConfig& c, int64_t& channels) {
  nn::GraphBuilder::Value x = b.input();
  channels = 1;
  for (int i = 0; i < 3; ++i) {
    const std::string p = fmt::format("encoder.{}.conv.", i);
    const nn::TorchTensor* w = sd.peek(p + "weight");
    if (!w || w->shape.size() != 3) return Status::corrupt(fmt::format("state_dict has no 3-d '{}weight'", p));
    const int64_t oc = w->shape[0], k = w->shape[2];
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor weight, sd.take(p + "weight", {oc, channels, k}));
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor bias, sd.take(p + "bias", {oc}));
    const int64_t stride = i == 2 ? c.stride : 1;
    x = b.silu(b.conv1d(x, std::move(weight), std::move(bias), stride, k / 2, k / 2));
    channels = oc;
  }
  return x;
}

Result<nn::Model> build_bonito_encoder(const nn::TorchStateDict& state, const CrfConfig& c, const std::string& label,
                                       const nn::LoadOptions& lo) {
  StateDictView sd(state);
  nn::GraphBuilder b(label, "escapepod (bonito crf encoder built from a PyTorch state_dict)", {-1, 1, -1},
                     {"batch", "", "samples"});
  int64_t f = 0;
  ESCPOD_ASSIGN_OR_RETURN(nn::GraphBuilder::Value x, add_convs(b, sd, c, f));
  x = b.transpose(x, {2, 0, 1});  // [N, F, T] -> [T, N, F] (bonito's Permute, index 3)
  int layer = 4;
  for (bool reverse = true; sd.peek(fmt::format("encoder.{}.rnn.weight_ih_l0", layer)); reverse = !reverse, ++layer) {
    const std::string p = fmt::format("encoder.{}.rnn.", layer);
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor wi, sd.take(p + "weight_ih_l0", {4 * f, f}));
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor wh, sd.take(p + "weight_hh_l0", {4 * f, f}));
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor bi, sd.take(p + "bias_ih_l0", {4 * f}));
    ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor bh, sd.take(p + "bias_hh_l0", {4 * f}));
    x = b.lstm(x, wi, wh, bi, bh, reverse, nn::LstmGates::kPyTorch);
  }
  if (layer == 4) return Status::corrupt(fmt::format("{}: no LSTM layers (encoder.4.rnn.*)", state.source));
  const int64_t moves = c.n_states() * c.n_base;
  const std::string p = fmt::format("encoder.{}.linear.", layer);
  ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor w, sd.take(p + "weight", {moves, f}));
  ESCPOD_ASSIGN_OR_RETURN(nn::FloatTensor bias, sd.take(p + "bias", {moves}));
  ESCPOD_RETURN_IF_ERROR(sd.all_used());
  x = b.scale(b.tanh(b.linear(x, w, bias)), c.scale);
  // Blank insertion: [T, N, S*B] -> [T, N, S, B] -> pad one blank in front -> [T, N, S*(B+1)].
  x = b.reshape(x, {0, 0, c.n_states(), c.n_base});
  x = b.pad(x, {0, 0, 0, 1, 0, 0, 0, 0}, c.blank_score);
  x = b.reshape(x, {0, 0, c.n_scores()});
  b.describe_output("scores", {-1, -1, c.n_scores()}, {"steps", "batch", ""});
  const std::array<int64_t, 3> probe{1, 1, c.chunk};
  return b.finish(x, lo, probe);
}

Result<CrfModel> load_seqtagger(const fs::path& dir, const CrfLoadOptions& options) {
  CrfModel m;
  m.kind = CrfModelKind::kSeqTagger;
  m.path = dir;
  m.format = "bonito.crf";
  m.info_json = "{}";
  ESCPOD_ASSIGN_OR_RETURN(m.config, parse_bonito_config(dir / "config.toml"));
  ESCPOD_ASSIGN_OR_RETURN(m.references, read_fasta(dir / "barcodes.fa"));
  ESCPOD_RETURN_IF_ERROR(check_references(m.references, m.config, (dir / "barcodes.fa").string()));
  ESCPOD_ASSIGN_OR_RETURN(m.encoder_file, find_weights(dir));
  ESCPOD_ASSIGN_OR_RETURN(nn::TorchStateDict sd, nn::load_torch_state_dict(m.encoder_file));
  ESCPOD_ASSIGN_OR_RETURN(nn::Model model, build_bonito_encoder(sd, m.config, m.encoder_file.string(), options.encoder));
  m.encoder = std::make_shared<const nn::Model>(std::move(model));
  ESCPOD_RETURN_IF_ERROR(check_encoder_shape(*m.encoder, m.config, m.encoder_file.string()));
  return m;
}

// ---- escapepod bundles -------------------------------------------------------------------------

Result<std::string> file_sha256_hex(const fs::path& path) {
  ESCPOD_ASSIGN_OR_RETURN(std::string bytes, read_text(path));
  return sha256_hex(bytes);
}

// A file named by the bundle: relative, inside the folder.
Result<fs::path> bundle_file(const fs::path& dir, const std::string& rel, const std::string& key, const std::string& where) {
  const fs::path p(rel);
  if (rel.empty() || p.is_absolute() || std::find(p.begin(), p.end(), fs::path("..")) != p.end()) {
    return Status::corrupt(fmt::format("{}: {} '{}' must be a relative path inside the bundle", where, key, rel));
  }
  std::error_code ec;
  if (!fs::is_regular_file(dir / p, ec)) return Status::not_found(fmt::format("{}: {} '{}' does not exist", where, key, rel));
  return dir / p;
}

template <typename T>
Result<T> json_get(const json& j, const char* key, const std::string& where, const std::string& path) {
  if (!j.contains(key)) return Status::corrupt(fmt::format("{}: missing '{}'", where, path));
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    return Status::corrupt(fmt::format("{}: '{}' has the wrong type", where, path));
  }
}

Status parse_bundle_crf(const json& j, CrfConfig& c, const std::string& where) {
  if (!j.contains("standardisation") || !j.contains("signal") || !j.contains("crf")) {
    return Status::corrupt(fmt::format("{}: needs 'standardisation', 'signal' and 'crf'", where));
  }
  ESCPOD_ASSIGN_OR_RETURN(c.mean, json_get<double>(j["standardisation"], "mean", where, "standardisation.mean"));
  ESCPOD_ASSIGN_OR_RETURN(c.stdev, json_get<double>(j["standardisation"], "stdev", where, "standardisation.stdev"));
  if (!std::isfinite(c.mean) || !(c.stdev > 0.0) || !std::isfinite(c.stdev)) {
    return Status::corrupt(fmt::format("{}: standardisation needs a finite mean and a positive stdev", where));
  }
  c.standardise = true;
  ESCPOD_ASSIGN_OR_RETURN(c.chunk, json_get<int64_t>(j["signal"], "chunk", where, "signal.chunk"));
  ESCPOD_ASSIGN_OR_RETURN(c.stride, json_get<int64_t>(j["signal"], "stride", where, "signal.stride"));
  if (c.chunk < 1 || c.chunk > kMaxChunk || c.stride < 1 || c.chunk % c.stride != 0) {
    return Status::corrupt(fmt::format("{}: signal.chunk {} must be a positive multiple of signal.stride {} (at most {})", where,
                                       c.chunk, c.stride, kMaxChunk));
  }
  ESCPOD_ASSIGN_OR_RETURN(int64_t state_len, json_get<int64_t>(j["crf"], "state_len", where, "crf.state_len"));
  ESCPOD_ASSIGN_OR_RETURN(int64_t n_base, json_get<int64_t>(j["crf"], "n_base", where, "crf.n_base"));
  ESCPOD_ASSIGN_OR_RETURN(std::vector<std::string> alphabet, json_get<std::vector<std::string>>(j["crf"], "alphabet", where, "crf.alphabet"));
  if (state_len < 1 || state_len > 8 || n_base < 1 || n_base > 8) {
    return Status::corrupt(fmt::format("{}: crf.state_len {} / crf.n_base {} out of range", where, state_len, n_base));
  }
  if (static_cast<int64_t>(alphabet.size()) != n_base + 1) {
    return Status::corrupt(fmt::format("{}: crf.alphabet has {} symbols, n_base + 1 = {} expected", where, alphabet.size(), n_base + 1));
  }
  for (const std::string& s : alphabet) {
    if (s.size() != 1) return Status::corrupt(fmt::format("{}: crf.alphabet symbols must be single characters", where));
    c.alphabet += s;
  }
  c.state_len = static_cast<int>(state_len);
  c.n_base = static_cast<int>(n_base);
  return Status::ok();
}

Status parse_bundle_boundary(const json& j, const fs::path& dir, CrfBoundaryPin& b, bool verify, const std::string& where) {
  if (!j.contains("boundary")) return Status::ok();
  const json& bj = j["boundary"];
  if (bj.contains("margin")) {
    ESCPOD_ASSIGN_OR_RETURN(b.margin, json_get<int64_t>(bj, "margin", where, "boundary.margin"));
  }
  if (bj.contains("clamp_max_shift")) {
    ESCPOD_ASSIGN_OR_RETURN(b.clamp_max_shift, json_get<int64_t>(bj, "clamp_max_shift", where, "boundary.clamp_max_shift"));
  }
  if (b.margin < 0 || b.clamp_max_shift < 0) return Status::corrupt(fmt::format("{}: boundary margin / clamp_max_shift must be >= 0", where));
  if (!bj.contains("method")) return Status::ok();
  ESCPOD_ASSIGN_OR_RETURN(b.method, json_get<std::string>(bj, "method", where, "boundary.method"));
  if (b.method == "llr") return Status::ok();
  if (b.method != "cnn") return Status::corrupt(fmt::format("{}: boundary.method '{}' (cnn or llr)", where, b.method));
  ESCPOD_ASSIGN_OR_RETURN(std::string onnx, json_get<std::string>(bj, "onnx", where, "boundary.onnx"));
  ESCPOD_ASSIGN_OR_RETURN(b.model_id, json_get<std::string>(bj, "model_id", where, "boundary.model_id"));
  ESCPOD_ASSIGN_OR_RETURN(b.sha256, json_get<std::string>(bj, "sha256", where, "boundary.sha256"));
  const bool lower_hex = std::all_of(b.sha256.begin(), b.sha256.end(),
                                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  if (b.sha256.size() != 64 || !lower_hex) {
    return Status::corrupt(fmt::format("{}: boundary.sha256 must be 64 lowercase hex digits", where));
  }
  if (!bj.contains("input")) return Status::corrupt(fmt::format("{}: boundary.method cnn needs boundary.input", where));
  const json& in = bj["input"];
  ESCPOD_ASSIGN_OR_RETURN(b.min_obs_adapter, json_get<int64_t>(in, "min_obs_adapter", where, "boundary.input.min_obs_adapter"));
  ESCPOD_ASSIGN_OR_RETURN(b.max_obs_trace, json_get<int64_t>(in, "max_obs_trace", where, "boundary.input.max_obs_trace"));
  ESCPOD_ASSIGN_OR_RETURN(b.downscale_factor, json_get<int64_t>(in, "downscale_factor", where, "boundary.input.downscale_factor"));
  ESCPOD_ASSIGN_OR_RETURN(b.input_len, json_get<int64_t>(in, "input_len", where, "boundary.input.input_len"));
  ESCPOD_ASSIGN_OR_RETURN(b.pad_value, json_get<double>(in, "pad_value", where, "boundary.input.pad_value"));
  if (b.downscale_factor < 1 || b.max_obs_trace <= b.min_obs_adapter || b.min_obs_adapter < 0 ||
      b.input_len != (b.max_obs_trace - b.min_obs_adapter) / b.downscale_factor) {
    return Status::corrupt(fmt::format("{}: boundary.input.input_len {} != (max_obs_trace {} - min_obs_adapter {}) / downscale_factor {}",
                                       where, b.input_len, b.max_obs_trace, b.min_obs_adapter, b.downscale_factor));
  }
  ESCPOD_ASSIGN_OR_RETURN(b.onnx, bundle_file(dir, onnx, "boundary.onnx", where));
  if (verify) {
    ESCPOD_ASSIGN_OR_RETURN(std::string got, file_sha256_hex(b.onnx));
    if (got != b.sha256) {
      return Status::corrupt(fmt::format("{}: pinned boundary CNN {} has sha256 {}, the bundle pins {}", where, b.onnx.string(), got, b.sha256));
    }
  }
  return Status::ok();
}

Result<std::vector<CrfReference>> parse_bundle_barcodes(const json& j, const std::string& where) {
  std::vector<CrfReference> refs;
  if (!j.contains("barcodes")) return refs;
  if (!j["barcodes"].is_array()) return Status::corrupt(fmt::format("{}: 'barcodes' must be an array", where));
  for (const json& e : j["barcodes"]) {
    if (!e.is_object()) return Status::corrupt(fmt::format("{}: barcodes[] entries must be objects", where));
    CrfReference r;
    ESCPOD_ASSIGN_OR_RETURN(r.name, json_get<std::string>(e, "name", where, "barcodes[].name"));
    ESCPOD_ASSIGN_OR_RETURN(r.sequence, json_get<std::string>(e, "sequence", where, "barcodes[].sequence"));
    refs.push_back(std::move(r));
  }
  return refs;
}

Result<CrfModel> load_bundle(const fs::path& dir, const std::string& text, const CrfLoadOptions& options) {
  const fs::path meta = dir / "metadata.json";
  const std::string where = meta.string();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::corrupt(fmt::format("{}: not JSON: {}", where, e.what()));
  }
  if (!j.is_object()) return Status::corrupt(fmt::format("{}: not a JSON object", where));
  CrfModel m;
  m.kind = CrfModelKind::kBundle;
  m.path = dir;
  ESCPOD_ASSIGN_OR_RETURN(m.format, json_get<std::string>(j, "format", where, "format"));
  if (m.format != "escapepod-crf-encoder/1") {
    return Status::unsupported(fmt::format("{}: format '{}' (this build reads escapepod-crf-encoder/1)", where, m.format));
  }
  ESCPOD_RETURN_IF_ERROR(parse_bundle_crf(j, m.config, where));
  ESCPOD_ASSIGN_OR_RETURN(m.references, parse_bundle_barcodes(j, where));
  ESCPOD_RETURN_IF_ERROR(check_references(m.references, m.config, where));
  ESCPOD_RETURN_IF_ERROR(parse_bundle_boundary(j, dir, m.boundary, options.verify_boundary_pin, where));
  json info = json::object();
  for (const char* k : {"model", "metrics"}) {
    if (j.contains(k)) info[k] = j[k];
  }
  m.info_json = info.dump();
  std::string onnx = "crf_encoder.onnx";
  if (j.contains("onnx")) {
    ESCPOD_ASSIGN_OR_RETURN(onnx, json_get<std::string>(j, "onnx", where, "onnx"));
  }
  ESCPOD_ASSIGN_OR_RETURN(m.encoder_file, bundle_file(dir, onnx, "onnx", where));
  ESCPOD_ASSIGN_OR_RETURN(nn::Model model, nn::Model::load(m.encoder_file, options.encoder));
  m.encoder = std::make_shared<const nn::Model>(std::move(model));
  ESCPOD_RETURN_IF_ERROR(check_encoder_shape(*m.encoder, m.config, m.encoder_file.string()));
  return m;
}

// metadata.json's text when it names a CRF bundle's format, else nullopt.
std::optional<std::string> bundle_metadata(const fs::path& dir) {
  auto text = read_text(dir / "metadata.json");
  if (!text.is_ok()) return std::nullopt;
  const json j = json::parse(*text, nullptr, false);
  const bool bundle = j.is_object() && j.contains("format") && j["format"].is_string() &&
                      j["format"].get<std::string>().rfind("escapepod-crf-encoder/", 0) == 0;
  return bundle ? std::optional<std::string>(std::move(text).value()) : std::nullopt;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  // EVP_Digest with SHA-256 fails only on allocation failure.
  if (EVP_Digest(bytes.data(), bytes.size(), md.data(), &len, EVP_sha256(), nullptr) != 1) return {};
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::optional<CrfModelFolder> probe_crf_model_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  if (auto meta = bundle_metadata(dir)) return CrfModelFolder{dir, std::move(meta)};
  if (fs::is_regular_file(dir / "config.toml", ec)) return CrfModelFolder{dir, std::nullopt};
  return std::nullopt;
}

bool is_crf_model_dir(const fs::path& dir) { return probe_crf_model_dir(dir).has_value(); }

Status parse_encoder_precision(std::string_view name, nn::LoadOptions& encoder) {
  encoder.bf16_gemm = name == "bf16";
  encoder.bf16_conv = name == "bf16";
  encoder.lstm_int8 = name == "int8";
  encoder.amx_f32 = name != "f32-fma";
  if (name == "f32" || name == "f32-fma" || encoder.bf16_gemm || encoder.lstm_int8) return Status::ok();
  return Status::invalid_argument("encoder precision '" + std::string(name) + "': expected f32, f32-fma, bf16 or int8");
}

Result<CrfModel> load_crf_model(const fs::path& dir, const CrfLoadOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::not_found(fmt::format("{}: not a model folder", dir.string()));
  if (fs::is_regular_file(dir / "metadata.json", ec)) {
    ESCPOD_ASSIGN_OR_RETURN(std::string text, read_text(dir / "metadata.json"));
    return load_bundle(dir, text, options);
  }
  if (fs::is_regular_file(dir / "config.toml", ec)) return load_seqtagger(dir, options);
  return Status::not_found(fmt::format("{}: neither metadata.json (escapepod CRF bundle) nor config.toml (SeqTagger/bonito) found",
                                       dir.string()));
}

Result<CrfModel> load_crf_model(const CrfModelFolder& folder, const CrfLoadOptions& options) {
  if (folder.bundle_metadata) return load_bundle(folder.dir, *folder.bundle_metadata, options);
  return load_seqtagger(folder.dir, options);
}

// ---- encoder -----------------------------------------------------------------------------------

CrfEncoder::CrfEncoder(const CrfModel& model, int n_threads)
    : m_model(model.encoder), m_config(model.config), m_kind(model.kind), m_n_scores(model.config.n_scores()),
      m_workspace(n_threads) {}

Status CrfEncoder::run(const float* window, size_t n, float* scores_out) { return run_batch(window, 1, n, scores_out); }

Status CrfEncoder::run_batch(const float* windows, size_t batch, size_t n, float* scores_out) {
  if (n == 0 || batch == 0) return Status::invalid_argument("CRF encoder: empty window or batch");
  if (m_kind == CrfModelKind::kBundle && static_cast<int64_t>(n) != m_config.chunk) {
    return Status::invalid_argument(fmt::format("CRF encoder: bundle windows are {} samples, got {}", m_config.chunk, n));
  }
  const std::array<int64_t, 3> shape{static_cast<int64_t>(batch), 1, static_cast<int64_t>(n)};
  const size_t out = static_cast<size_t>(steps(n)) * batch * static_cast<size_t>(m_n_scores);
  return m_model->run(m_workspace, std::span<const float>(windows, batch * n), shape, std::span<float>(scores_out, out));
}

}  // namespace escpod::demux
