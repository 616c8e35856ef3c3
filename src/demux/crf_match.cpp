#include "escpod/demux/crf_match.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <set>

#include "demux/crf_passes.hpp"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace escpod::demux {

const char* panel_form_name(PanelForm form) {
  return form == PanelForm::kSeqTaggerEmitted ? "seqtagger_emitted" : "as_given";
}

Result<std::vector<BarcodeRef>> seqtagger_emitted_form(std::span<const BarcodeRef> refs, int state_len) {
  if (state_len < 0) return Status::invalid_argument("seqtagger_emitted_form: negative state_len");
  std::vector<BarcodeRef> out;
  out.reserve(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::string& seq = refs[i].sequence;
    if (seq.size() <= static_cast<size_t>(state_len))
      return Status::invalid_argument("barcode " + std::to_string(i) + " (" + refs[i].name + "): " +
                                      std::to_string(seq.size()) + " bases, SeqTagger's emitted form needs more than " +
                                      "state_len = " + std::to_string(state_len));
    std::string rev(seq.rbegin(), seq.rend());
    rev.resize(seq.size() - static_cast<size_t>(state_len));
    out.push_back({refs[i].name, std::move(rev)});
  }
  return out;
}

namespace {

constexpr int kLanes = 8;                            // references per group
constexpr int kSymbols = 5;                          // A C G T, anything else
constexpr size_t kGroupWords = kSymbols * kLanes + 2 * kLanes;  // peq, high bit, length
constexpr int64_t kInactive = int64_t{1} << 40;      // score of an unused lane: never wins

int sym_code(char c) {
  switch (c) {
    case 'A': case 'a': return 0;
    case 'C': case 'c': return 1;
    case 'G': case 'g': return 2;
    case 'T': case 't': return 3;
    default: return 4;
  }
}

// Running best / runner-up (docs/demux.md §7.5). Distances are offered in panel order.
struct Selection {
  int32_t best = std::numeric_limits<int32_t>::max();
  int32_t second = std::numeric_limits<int32_t>::max();
  int32_t best_idx = -1;
  void offer(int64_t d, int32_t idx) {
    if (d < best) {
      second = best;
      best = static_cast<int32_t>(d);
      best_idx = idx;
    } else if (d < second) {
      second = static_cast<int32_t>(d);
    }
  }
  BarcodeMatch result(size_t n_refs) const {
    BarcodeMatch m;
    m.best_idx = best_idx;
    m.best_dist = best;
    m.second_dist = n_refs > 1 ? second : -1;
    return m;
  }
};

// One column of Myers/Hyyro for a 64-row block; hin/hout are the horizontal deltas (+1, 0, -1)
// entering at the top and leaving at the row marked by `high`.
inline int myers_block(uint64_t& pv, uint64_t& mv, uint64_t eq, int hin, uint64_t high) {
  const uint64_t xv = eq | mv;
  if (hin < 0) eq |= 1;
  const uint64_t xh = (((eq & pv) + pv) ^ pv) | eq;
  uint64_t ph = mv | ~(xh | pv);
  uint64_t mh = pv & xh;
  const int hout = (ph & high) ? 1 : ((mh & high) ? -1 : 0);
  ph <<= 1;
  mh <<= 1;
  if (hin < 0) mh |= 1;
  else if (hin > 0) ph |= 1;
  pv = mh | ~(xv | ph);
  mv = ph & xv;
  return hout;
}

// peq[sym * n_words + w]: bit i of word w set where ref[64 w + i] has symbol sym.
std::vector<uint64_t> build_peq(std::string_view ref) {
  const size_t n_words = (ref.size() + 63) / 64;
  std::vector<uint64_t> peq(kSymbols * n_words, 0);
  for (size_t i = 0; i < ref.size(); ++i) {
    const int s = sym_code(ref[i]);
    if (s < 4) peq[static_cast<size_t>(s) * n_words + i / 64] |= uint64_t{1} << (i % 64);
  }
  return peq;
}

// Global distance of a reference (length m, its peq) to `text`, abandoned (returns > cap) once
// the final value must exceed cap. Pv/Mv words live on the stack up to 16 words (1024 bases),
// beyond that in the heap.
int32_t myers_distance(const uint64_t* peq, size_t m, std::string_view text, int64_t cap) {
  const int64_t n = static_cast<int64_t>(text.size());
  if (std::abs(static_cast<int64_t>(m) - n) > cap) return static_cast<int32_t>(std::min<int64_t>(cap + 1, INT32_MAX));
  const size_t n_words = (m + 63) / 64;
  uint64_t stack_pv[16], stack_mv[16];
  std::vector<uint64_t> heap;
  uint64_t* pv = stack_pv;
  uint64_t* mv = stack_mv;
  if (n_words > 16) {
    heap.assign(2 * n_words, 0);
    pv = heap.data();
    mv = heap.data() + n_words;
  }
  for (size_t w = 0; w < n_words; ++w) {
    pv[w] = ~uint64_t{0};
    mv[w] = 0;
  }
  const uint64_t last_high = uint64_t{1} << ((m - 1) % 64);
  int64_t score = static_cast<int64_t>(m);
  for (int64_t j = 0; j < n; ++j) {
    const int s = sym_code(text[static_cast<size_t>(j)]);
    int h = 1;  // global alignment: the top row grows by one per column
    for (size_t w = 0; w < n_words; ++w) {
      const uint64_t high = w + 1 == n_words ? last_high : uint64_t{1} << 63;
      h = myers_block(pv[w], mv[w], peq[static_cast<size_t>(s) * n_words + w], h, high);
    }
    score += h;
    if (score - (n - j - 1) > cap) return static_cast<int32_t>(std::min<int64_t>(cap + 1, INT32_MAX));
  }
  return static_cast<int32_t>(score);
}

// Vector kernel: L references (64-bit lanes) of one group at a time.
template <int L>
struct Lanes {
  typedef uint64_t u __attribute__((vector_size(L * 8)));
  typedef int64_t i __attribute__((vector_size(L * 8)));
};

template <int L>
[[gnu::always_inline]] inline typename Lanes<L>::u load_u(const uint64_t* p) {
  typename Lanes<L>::u v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

// Distances of the lanes of one group (offset `lane0` within it) to the text, or false when
// every lane provably ends at or above `second` (abandoned: none can change the selection).
template <int L>
[[gnu::always_inline]] inline bool group_distances(const uint64_t* g, int lane0, std::string_view text,
                                                   int64_t second, int64_t* out) {
  using U = typename Lanes<L>::u;
  using I = typename Lanes<L>::i;
  const U high = load_u<L>(g + kSymbols * kLanes + lane0);
  I score = (I)load_u<L>(g + (kSymbols + 1) * kLanes + lane0);
  U pv = U{} - 1, mv = U{};
  const int64_t n = static_cast<int64_t>(text.size());
  for (int64_t j = 0; j < n; ++j) {
    U eq = load_u<L>(g + sym_code(text[static_cast<size_t>(j)]) * kLanes + lane0);
    const U xv = eq | mv;
    const U xh = (((eq & pv) + pv) ^ pv) | eq;
    U ph = mv | ~(xh | pv);
    U mh = pv & xh;
    score = score - (I)((ph & high) != 0) + (I)((mh & high) != 0);
    ph = (ph << 1) | 1;
    mh = mh << 1;
    pv = mh | ~(xv | ph);
    mv = ph & xv;
    if ((j & 3) == 3) {
      const I alive = (score - (n - j - 1)) < second;
      bool any = false;
      for (int l = 0; l < L; ++l) any |= alive[l] != 0;
      if (!any) return false;
    }
  }
  for (int l = 0; l < L; ++l) out[l] = score[l];
  return true;
}

template <int L>
[[gnu::always_inline]] inline BarcodeMatch match_groups(const uint64_t* words, size_t n_refs, std::string_view text) {
  Selection sel;
  const size_t n_groups = (n_refs + kLanes - 1) / kLanes;
  int64_t d[L];
  for (size_t gi = 0; gi < n_groups; ++gi) {
    const uint64_t* g = words + gi * kGroupWords;
    for (int lane0 = 0; lane0 < kLanes; lane0 += L) {
      const size_t first = gi * kLanes + static_cast<size_t>(lane0);
      if (first >= n_refs) break;
      if (!group_distances<L>(g, lane0, text, sel.second, d)) continue;
      const size_t count = std::min<size_t>(L, n_refs - first);
      for (size_t l = 0; l < count; ++l) sel.offer(d[l], static_cast<int32_t>(first + l));
    }
  }
  return sel.result(n_refs);
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2")))
BarcodeMatch match_avx512(const uint64_t* words, size_t n_refs, std::string_view text) {
  return match_groups<8>(words, n_refs, text);
}
__attribute__((target("avx2"))) BarcodeMatch match_avx2(const uint64_t* words, size_t n_refs, std::string_view text) {
  return match_groups<4>(words, n_refs, text);
}
#endif

bool acgt(char c) { return sym_code(c) < 4; }

}  // namespace

int32_t edit_distance_dp(std::string_view a, std::string_view b) {
  std::vector<int32_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int32_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int32_t diag = row[0];
    row[0] = static_cast<int32_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int32_t up = row[j];
      row[j] = std::min({up + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

int32_t edit_distance_myers(std::string_view ref, std::string_view text, int32_t max_dist) {
  if (ref.empty()) return static_cast<int32_t>(text.size());
  const std::vector<uint64_t> peq = build_peq(ref);
  return myers_distance(peq.data(), ref.size(), text, max_dist);
}

Result<BarcodePanel> BarcodePanel::create(std::vector<BarcodeRef> refs, PanelForm form, CrfBackend backend) {
  if (refs.empty()) return Status::invalid_argument("barcode panel: no references");
  std::set<std::string> names;
  for (size_t i = 0; i < refs.size(); ++i) {
    BarcodeRef& r = refs[i];
    const std::string where = "barcode " + std::to_string(i) + " (" + r.name + ")";
    if (!names.insert(r.name).second) return Status::invalid_argument(where + ": duplicate name");
    if (r.sequence.empty()) return Status::invalid_argument(where + ": empty sequence");
    for (size_t k = 0; k < r.sequence.size(); ++k) {
      if (!acgt(r.sequence[k]))
        return Status::invalid_argument(where + ": symbol '" + std::string(1, r.sequence[k]) + "' at position " +
                                        std::to_string(k) + " is not one of A, C, G, T");
      r.sequence[k] = static_cast<char>(std::toupper(static_cast<unsigned char>(r.sequence[k])));
    }
  }
  BarcodePanel p;
  p.m_form = form;
  p.m_refs = std::move(refs);
  const size_t n = p.m_refs.size();
  for (const BarcodeRef& r : p.m_refs) {
    p.m_all_short = p.m_all_short && r.sequence.size() <= 64;
    p.m_peq.push_back(build_peq(r.sequence));
  }
  // Groups of 8: peq words per symbol, the bit of the last row, the length (initial score).
  p.m_group_words.assign(((n + kLanes - 1) / kLanes) * kGroupWords, 0);
  for (size_t gi = 0; gi * kLanes < n; ++gi) {
    uint64_t* g = p.m_group_words.data() + gi * kGroupWords;
    for (int l = 0; l < kLanes; ++l) {
      const size_t r = gi * kLanes + static_cast<size_t>(l);
      if (r >= n || p.m_refs[r].sequence.size() > 64) {
        g[kSymbols * kLanes + l] = 1;
        g[(kSymbols + 1) * kLanes + l] = static_cast<uint64_t>(kInactive);
        continue;
      }
      for (int s = 0; s < kSymbols; ++s) g[s * kLanes + l] = p.m_peq[r][static_cast<size_t>(s)];
      g[kSymbols * kLanes + l] = uint64_t{1} << (p.m_refs[r].sequence.size() - 1);
      g[(kSymbols + 1) * kLanes + l] = p.m_refs[r].sequence.size();
    }
  }
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      const int32_t d = edit_distance_dp(p.m_refs[a].sequence, p.m_refs[b].sequence);
      p.m_min_pairwise = p.m_min_pairwise < 0 ? d : std::min(p.m_min_pairwise, d);
    }
  if (backend == CrfBackend::kAuto) backend = detail::crf_best_simd_backend();
  const CrfBackend best = detail::crf_best_simd_backend();
  const bool supported = backend == CrfBackend::kScalar || backend == best ||
                         (backend == CrfBackend::kAvx2 && best == CrfBackend::kAvx512);
  if (!supported)
    return Status::invalid_argument(std::string("barcode panel: kernel ") + crf_backend_name(backend) +
                                    " is not available on this CPU");
  p.m_kernel = p.m_all_short ? backend : CrfBackend::kScalar;
  return p;
}

BarcodeMatch BarcodePanel::match(std::string_view call) const {
  BarcodeMatch m;
#if defined(__x86_64__)
  if (m_kernel == CrfBackend::kAvx512) {
    m = match_avx512(m_group_words.data(), m_refs.size(), call);
  } else if (m_kernel == CrfBackend::kAvx2) {
    m = match_avx2(m_group_words.data(), m_refs.size(), call);
  } else
#endif
  {
    Selection sel;
    for (size_t r = 0; r < m_refs.size(); ++r) {
      const int64_t cap = sel.second == std::numeric_limits<int32_t>::max() ? INT32_MAX - 1 : sel.second - 1;
      sel.offer(myers_distance(m_peq[r].data(), m_refs[r].sequence.size(), call, cap), static_cast<int32_t>(r));
    }
    m = sel.result(m_refs.size());
  }
  m.form = m_form;
  return m;
}

}  // namespace escpod::demux
