// Naming a CRF call: unit-cost edit distance (Levenshtein: substitution, insertion and deletion
// all cost 1) of the called sequence against every reference of a barcode panel, with the
// runner-up rule of docs/demux.md §7.5.
//
// Algorithm: Myers' bit-parallel edit distance (Hyyro's formulation, global alignment) with the
// panel's references in 64-bit lanes, 8 references per AVX-512 vector (4 per AVX2 vector), so a
// call costs one pass over its bases per 8 references; references longer than 64 bases use the
// multi-word scalar form. bench/results/crf_decode.md compares it with edlib and WFA.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "escpod/core/status.hpp"
#include "escpod/demux/crf_decode.hpp"

namespace escpod::demux {

struct BarcodeRef {
  std::string name;
  std::string sequence;  // what the model emits for this barcode (see PanelForm)
};

// Which form of the barcodes a panel holds. kAsGiven: the sequences as supplied (escapepod
// bundles and --barcodes CSVs already hold the emitted form). kSeqTaggerEmitted: SeqTagger's
// barcodes.fa transformed by seqtagger_emitted_form (its models emit each barcode reversed and
// without its last state_len bases).
enum class PanelForm : uint8_t { kAsGiven, kSeqTaggerEmitted };
// "as_given" or "seqtagger_emitted" (for logs and output headers).
const char* panel_form_name(PanelForm form);

// SeqTagger's emitted form of each reference: the first len - state_len symbols of the reversed
// sequence (measured, docs/demux.md §7.8). invalid_argument naming the reference when a
// sequence has no more than state_len symbols or state_len < 0. Names are kept.
Result<std::vector<BarcodeRef>> seqtagger_emitted_form(std::span<const BarcodeRef> refs, int state_len);

// Outcome of matching one call against a panel (docs/demux.md §7.5): iterating the
// references in panel order with best = second = +inf, a reference replaces best when strictly
// closer (best moves to second), else replaces second when strictly below it. Exact ties keep the
// lower index and give margin 0.
struct BarcodeMatch {
  int32_t best_idx = -1;     // index into the panel
  int32_t best_dist = 0;     // its edit distance
  int32_t second_dist = -1;  // runner-up distance; -1 with a single-reference panel
  PanelForm form = PanelForm::kAsGiven;  // the form of the references the call was matched to
  bool has_second() const { return second_dist >= 0; }
  int32_t margin() const { return has_second() ? second_dist - best_dist : -1; }  // -1: absent
};

// An immutable panel of references prepared for matching. Thread-safe after creation (match is
// const and uses no shared scratch); copyable.
class BarcodePanel {
 public:
  // Validates as docs/formats.md §3.5: at least one reference, unique names, sequences
  // non-empty and made of A, C, G, T only (case-insensitive; stored upper-cased). Errors are
  // invalid_argument naming the reference (index and name) and the offending symbol.
  // `backend` picks the kernel (kAuto: the widest this CPU runs; a vector backend the CPU lacks is
  // invalid_argument); panels with a reference over 64 bases always use the scalar kernel.
  static Result<BarcodePanel> create(std::vector<BarcodeRef> refs, PanelForm form = PanelForm::kAsGiven,
                                     CrfBackend backend = CrfBackend::kAuto);

  // Best and runner-up references for `call` (any symbols; those outside ACGT match nothing,
  // case-insensitive). An empty call is at distance len(ref) from each reference. Distances that
  // cannot beat the running runner-up are abandoned early (the result is identical to computing
  // them all). No allocation.
  BarcodeMatch match(std::string_view call) const;

  size_t size() const { return m_refs.size(); }
  const BarcodeRef& ref(size_t idx) const { return m_refs[idx]; }
  const std::vector<BarcodeRef>& refs() const { return m_refs; }
  PanelForm form() const { return m_form; }
  // Smallest edit distance between two references of the panel (-1 with one reference); a
  // panel whose references are close cannot separate noisy calls (log it at start-up).
  int32_t min_pairwise_distance() const { return m_min_pairwise; }

  // The kernel a match uses (kScalar, kAvx2 or kAvx512).
  CrfBackend kernel() const { return m_kernel; }

 private:
  BarcodePanel() = default;
  std::vector<BarcodeRef> m_refs;
  PanelForm m_form = PanelForm::kAsGiven;
  int32_t m_min_pairwise = -1;
  bool m_all_short = true;               // every reference <= 64 bases (vector kernels apply)
  std::vector<uint64_t> m_group_words;   // per group of 8: peq[5][8], high bit[8], length[8]
  std::vector<std::vector<uint64_t>> m_peq;  // per reference: peq[5][n_words] (scalar path)
  CrfBackend m_kernel = CrfBackend::kScalar;
};

// Plain dynamic-programming Levenshtein distance (the reference the fast kernels are tested
// against; allocates one row). Symbols compared as given (case-sensitive).
int32_t edit_distance_dp(std::string_view a, std::string_view b);

// Myers bit-parallel distance of one reference (any length) to a text, abandoned once the result
// must exceed max_dist (then returns a value > max_dist, not necessarily exact). Case-insensitive
// ACGT; other symbols match nothing. Allocates (tests and benchmarks; the panel precomputes).
int32_t edit_distance_myers(std::string_view ref, std::string_view text, int32_t max_dist = INT32_MAX);

}  // namespace escpod::demux
