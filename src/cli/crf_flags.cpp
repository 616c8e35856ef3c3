#include "cli/crf_flags.hpp"

#include <optional>

namespace escpod::cli {

namespace {
constexpr const char* kCrfGroup = "CTC-CRF head (model folders)";
}  // namespace

std::vector<std::string> given_crf_flags(const CLI::App* sub) {
  std::vector<std::string> given;
  for (const CLI::Option* o : sub->get_options())
    if (o->get_group() == kCrfGroup && o->count() > 0) given.push_back(o->get_name());
  return given;
}

void add_crf_flags(CLI::App* sub, CrfCliFlags& o) {
  const char* g = kCrfGroup;
  sub->add_option("--decoder", o.decoder,
                  "posterior or beam (default: posterior for bundles, beam for SeqTagger)")->group(g);
  sub->add_option("--crf-window", o.window,
                  "SeqTagger window: before-boundary (v1 default) or rolling-start (v2 default)")->group(g);
  sub->add_option("--crf-norm", o.norm, "SeqTagger v1 med/MAD span: window (default) or prefix")->group(g);
  sub->add_option("--barcodes", o.barcodes,
                  "CSV of references (name,sequence: what the model emits) instead of the model's")->group(g);
  sub->add_option("--min-margin", o.min_margin, "Edit-distance margin gate (default 0: keep ties)")->group(g);
  sub->add_option("--min-baseq", o.min_baseq,
                  "Mean base-quality gate, beam only (default: the model's min_baseQ, else 60)")->group(g);
  sub->add_option("--min-mean-post", o.min_mean_post, "Mean posterior gate (default 0.95)")->group(g);
  sub->add_flag("--ref-scores", o.ref_scores, "Lattice columns crf_logp, crf_margin, crf_best")->group(g);
  sub->add_option("--min-crf-margin", o.min_crf_margin,
                  "Lattice margin gate in nats (implies --ref-scores)")->group(g);
  sub->add_option("--min-crf-prob", o.min_crf_prob, "Lattice probability gate (implies --ref-scores)")->group(g);
  sub->add_option("--boundary-margin", o.boundary_margin, "Bundles: samples required beyond the chunk")->group(g);
  sub->add_option("--clamp-max-shift", o.clamp_max_shift, "Bundles: window clamping allowance")->group(g);
  sub->add_option("--crf-batch", o.window_batch,
                  "Windows per encoder call, 1..16: a SeqTagger v2 read's rolling windows (default 16: all of "
                  "them), or one window each of N reads for v1 models and bundles (default 4); calls do not "
                  "depend on it")->group(g);
  sub->add_option("--encoder-precision", o.precision,
                  "f32 (default; on CPUs with AMX the dense products run on the tile unit as exact bfloat16 "
                  "splits, within float32 rounding), f32-fma (float32 on the vector units only), or opt-in "
                  "reduced precision that moves the scores: bf16 (the LSTM products, the linear layer and the wide "
                  "convolution in bfloat16, on CPUs with AVX512_BF16 or AMX) "
                  "or int8 (LSTM recurrent weights, AVX-512 VNNI); f32 runs where the CPU lacks them. Call "
                  "agreement: bench/results/crf_encoder.md")
      ->check(CLI::IsMember({"f32", "f32-fma", "bf16", "int8"}))->group(g);
}

Result<demux::CrfHeadOptions> crf_head_options_from_flags(const CrfCliFlags& o) {
  auto c = demux::crf_head_options(o);
  if (!c.is_ok()) return Status::usage(c.status().message());  // bad flag values: exit status 2
  return c;
}

}  // namespace escpod::cli
