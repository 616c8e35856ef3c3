// The DTW-SVM and GBM heads and the head registry (head.hpp).
#include <cstdio>
#include <mutex>
#include <vector>

#include "escpod/demux/head.hpp"

#include "escpod/demux/crf_head.hpp"  // the CRF head's folders, built into load_head

namespace escpod::demux {

namespace {

std::string label_column(int32_t label) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "p%02d", static_cast<int>(label));
  return buf;
}

// WarpDemuX DTW-kernel SVM on the barcode fingerprint, one read per call.
class DtwSvmHead final : public Head {
 public:
  DtwSvmHead(WarpDemuxModel model, DtwPrecision dtw) : m_model(std::move(model)), m_dtw(dtw) {
    m_columns.assign(m_model.output_columns().begin(), m_model.output_columns().end());
  }

  std::string_view name() const override { return "DTW-SVM"; }
  // The model checks the length itself: a mismatch is kInvalidInput.
  HeadInput input() const override { return HeadInput{}; }
  std::span<const std::string> extra_columns() const override { return m_columns; }
  std::span<const int32_t> labels() const override { return m_model.labels(); }
  std::string describe() const override { return m_model.describe(); }

  std::unique_ptr<HeadScratch> make_scratch() const override {
    auto s = std::make_unique<Scratch>();
    s->model = m_model.make_scratch();
    return s;
  }

  void classify(std::span<const PreparedRead> reads, HeadScratch& scratch,
                std::span<Classification> calls) const override {
    auto& s = static_cast<Scratch&>(scratch);
    for (size_t i = 0; i < reads.size(); ++i) {
      m_model.classify(reads[i].fingerprint, s.model, calls[i], KernelPrecision::kModelDefault, m_dtw);
    }
  }

 private:
  struct Scratch final : HeadScratch {
    WarpDemuxModel::Scratch model;
  };
  WarpDemuxModel m_model;
  DtwPrecision m_dtw;
  std::vector<std::string> m_columns;
};

// Gradient-boosted trees on the barcode fingerprint (its n_features values), one read per call.
class GbmHead final : public Head {
 public:
  explicit GbmHead(GbmModel model) : m_model(std::move(model)) {
    for (int32_t l : m_model.labels()) m_columns.push_back(l < 0 ? "p-1" : label_column(l));
  }

  std::string_view name() const override { return "GBM"; }
  HeadInput input() const override {
    HeadInput in;
    in.fingerprint_length = m_model.n_features();
    return in;
  }
  std::span<const std::string> extra_columns() const override { return m_columns; }
  std::span<const int32_t> labels() const override { return m_model.labels(); }
  std::string describe() const override { return m_model.describe(); }

  std::unique_ptr<HeadScratch> make_scratch() const override { return std::make_unique<HeadScratch>(); }

  void classify(std::span<const PreparedRead> reads, HeadScratch&,
                std::span<Classification> calls) const override {
    for (size_t i = 0; i < reads.size(); ++i) m_model.classify(reads[i].fingerprint, calls[i]);
  }

 private:
  GbmModel m_model;
  std::vector<std::string> m_columns;
};

struct Registry {
  std::mutex mutex;
  std::vector<HeadKind> kinds;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Result<LoadedHead> make_head(ModelFile&& file, const HeadOptions& options) {
  LoadedHead out;
  out.signal_processing = std::move(file.signal_processing);
  out.settings_source = std::move(file.settings_source);
  out.barcode_names = std::move(file.barcode_names);
  if (file.kind == ModelKind::kGbm && file.gbm) {
    out.head = std::make_unique<GbmHead>(std::move(*file.gbm));
    out.kind = "gbm";
    // escapepod's GBM JSON records no signal processing: the RNA004 defaults apply.
    if (!out.signal_processing) {
      out.signal_processing = SignalProcessing::rna004(true);
      out.default_settings = true;
    }
  } else if (file.kind == ModelKind::kDtwSvm && file.dtw_svm) {
    out.head = std::make_unique<DtwSvmHead>(std::move(*file.dtw_svm), options.dtw);
    out.kind = "dtw-svm";
  } else {
    return Status::invalid_argument(file.path.string() + ": the " + model_kind_name(file.kind) +
                                    " classifier was not loaded (load it with load_model_file)");
  }
  return out;
}

void register_head_kind(HeadKind kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (HeadKind& k : r.kinds) {
    if (k.name == kind.name) {
      k = std::move(kind);
      return;
    }
  }
  r.kinds.push_back(std::move(kind));
}

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The CRF head's options given for a model of another kind (`kind_name`): a usage error naming them.
Status refuse_crf_options(const HeadOptions& o, const std::filesystem::path& model, std::string_view kind_name) {
  if (o.crf_options_given.empty()) return Status::ok();
  const bool one = o.crf_options_given.size() == 1;
  return Status::usage(joined(o.crf_options_given) + (one ? " applies" : " apply") + " to CTC-CRF model folders; " +
                       model.string() + " is a " + std::string(kind_name) + " model, which would ignore " +
                       (one ? "it" : "them"));
}

// --dtw-precision given for a model whose head is not a DTW-SVM (`kind_name`): a usage error.
Status refuse_dtw_precision(const HeadOptions& o, const std::filesystem::path& model, std::string_view kind_name) {
  if (!o.dtw_precision_given || kind_name == "DTW-SVM") return Status::ok();
  return Status::usage("--dtw-precision applies to DTW-SVM models; " + model.string() + " is a " +
                       std::string(kind_name) + " model, which would ignore it");
}

}  // namespace

Result<LoadedHead> load_head(const std::filesystem::path& model, const HeadOptions& options) {
  std::function<Result<LoadedHead>(const std::filesystem::path&, const HeadOptions&)> load;
  // "kind: what" of every kind, for the error below
  std::string looked_for = std::string("crf: ") + kCrfModelLooksFor;
  if (auto folder = probe_crf_model_dir(model)) {
    ESCPOD_RETURN_IF_ERROR(refuse_dtw_precision(options, model, "CTC-CRF"));
    load = [probed = std::move(*folder)](const std::filesystem::path&, const HeadOptions& o) {
      return load_crf_head(probed, o.crf ? *o.crf : CrfHeadOptions{});
    };
  }
  if (!load) {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const HeadKind& k : r.kinds) {
      if (k.claims && k.claims(model)) {
        load = k.load;
        break;
      }
      if (!k.looks_for.empty()) looked_for += (looked_for.empty() ? "" : "; ") + k.name + ": " + k.looks_for;
    }
  }
  if (load) {
    if (!options.model_file.warpdemux_config.empty())
      return Status::usage("--config " + options.model_file.warpdemux_config.string() +
                                      " pairs a WarpDemuX joblib model with its signal-processing config, but " +
                                      model.string() + " is not one");
    return load(model, options);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec)) {
    return Status::invalid_argument(
        model.string() + ": a folder, and no head kind recognises it as its model (looked for " +
        (looked_for.empty() ? std::string("nothing: no head kind that reads model folders is registered")
                            : looked_for) +
        "; DTW-SVM and GBM models are JSON files, not folders)");
  }
  // A model file (DTW-SVM or GBM): CRF options are refused before it is read.
  ESCPOD_RETURN_IF_ERROR(refuse_crf_options(options, model, "DTW-SVM or GBM"));
  ESCPOD_ASSIGN_OR_RETURN(ModelFile file, load_model_file(model, options.model_file));
  ESCPOD_ASSIGN_OR_RETURN(LoadedHead head, make_head(std::move(file), options));
  ESCPOD_RETURN_IF_ERROR(refuse_dtw_precision(options, model, head.head->name()));
  return head;
}

}  // namespace escpod::demux
