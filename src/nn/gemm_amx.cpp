// Float32 products as split bfloat16 tile products (gemm_amx.hpp).
//
// Layouts. A block of 32 rows of x is split into scratch as [32 rows][3 terms][kp] bfloat16
// (kp = k rounded up to 32, zeros beyond k). The weights are packed once as [n / 32 column
// blocks][3 terms][kp / 2 pairs of k][32 columns][2]: the tile unit's B operand is 16 rows of
// (k, k + 1) pairs, and one 128-byte row of the packing holds both tile columns of a block.
// Tiles: 0-3 the 32 x 32 float32 output block (rows 0-15 / 16-31 x columns 0-15 / 16-31),
// 4-5 the two row halves of one x term, 6-7 the two column halves of one w term.
//
// Order of work. For each block of 32 rows, for each block of 32 columns, per k-step of 32: the
// six products load each x term once and each w term once per x term that uses it (x0 with w0,
// w1, w2; x1 with w0, w1; x2 with w0): 18 tile loads for 24 tile products. Between groups of
// four tile products the vector ports split the next row block into the other scratch buffer
// (SplitCursor) and run the caller's side work, a little at a time, so the tile unit is never
// left waiting for a whole block's conversion. (It is not free work: tile products and AVX-512
// arithmetic share the core's execution resources - 24 FMAs take 12 cycles, one tile product
// 19, both 29 - so what interleaving saves is the tile unit's idle time, not the vector time.)
#include "nn/gemm_amx.hpp"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "nn/gemm_bf16.hpp"
#include "nn/plan.hpp"

// GCC 12's AVX-512 intrinsic headers trip this warning inside their own inline functions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace escpod::nn::detail {
namespace {

constexpr int64_t kBlock = 32;  // rows and columns of an output block (2 x 2 tiles)
constexpr int64_t kStep = 32;   // k per tile product (16 pairs)
constexpr int kTerms = 3;

constexpr int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
constexpr std::size_t align64(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// Linux's arch_prctl request for the AMX tile data state (asm/prctl.h, xfeature 18).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

float widen(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint16_t narrow(float f) {
  uint16_t h;
  convert_to_bf16(&f, &h, 1);
  return h;
}

// v = v0 + v1 + v2 (the vector form is split_vector below).
void split3(float v, uint16_t (&t)[kTerms]) {
  t[0] = narrow(v);
  const float r1 = v - widen(t[0]);
  t[1] = narrow(r1);
  t[2] = narrow(r1 - widen(t[1]));
}

using Packed = std::shared_ptr<const uint16_t>;

float weight_at(const float* w, AmxF32Gemm::Layout layout, int64_t k, int64_t n, int64_t conv_ic, int64_t kk, int64_t j) {
  switch (layout) {
    case AmxF32Gemm::Layout::kKN: return w[kk * n + j];
    case AmxF32Gemm::Layout::kNK: return w[j * k + kk];
    case AmxF32Gemm::Layout::kConvOIW: {
      const int64_t taps = k / conv_ic, tap = kk / conv_ic, c = kk % conv_ic;
      return w[(j * conv_ic + c) * taps + tap];
    }
  }
  return 0.0f;
}

Packed pack_weights(int64_t k, int64_t kp, int64_t n, const float* w, AmxF32Gemm::Layout layout, int64_t conv_ic) {
  const size_t elems = static_cast<size_t>(kTerms * kp * n);
  auto* p = static_cast<uint16_t*>(std::aligned_alloc(64, align64(elems * sizeof(uint16_t))));
  if (p == nullptr) throw std::bad_alloc();
  std::fill(p, p + elems, uint16_t{0});
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < n; ++j) {
      uint16_t t[kTerms];
      split3(weight_at(w, layout, k, n, conv_ic, kk, j), t);
      const int64_t block = j / kBlock, col = j % kBlock;
      for (int q = 0; q < kTerms; ++q) {
        p[(((block * kTerms + q) * (kp / 2) + kk / 2) * kBlock + col) * 2 + kk % 2] = t[q];
      }
    }
  }
  return Packed(p, [](const uint16_t* q) { std::free(const_cast<uint16_t*>(q)); });
}

// One packing per (weights, layout), shared by every plan of the model (batch sizes, workers).
Packed shared_packing(int64_t k, int64_t kp, int64_t n, const float* w, AmxF32Gemm::Layout layout, int64_t conv_ic) {
  struct Entry {
    const float* w;
    AmxF32Gemm::Layout layout;
    int64_t k, n;
    std::weak_ptr<const uint16_t> packed;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.w == w && e.layout == layout && e.k == k && e.n == n) {
      if (Packed p = e.packed.lock()) return p;
    }
  }
  Packed p = pack_weights(k, kp, n, w, layout, conv_ic);
  std::erase_if(cache, [](const Entry& e) { return e.packed.expired(); });
  cache.push_back(Entry{w, layout, k, n, p});
  return p;
}

#define ESCPOD_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16,avx512bw,avx512vl,avx512dq")))

ESCPOD_AMX_TARGET inline __m512 widen16(__m256bh h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i&>(h)), 16));
}
ESCPOD_AMX_TARGET inline void store16(uint16_t* dst, __m256bh h) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), reinterpret_cast<__m256i&>(h));
}

// One vector of 16 floats of x (lanes past k read as zero) -> its three terms at t, t + kp,
// t + 2 kp.
ESCPOD_AMX_TARGET inline void split_vector(const float* x, int64_t col, int64_t k, int64_t kp, uint16_t* t) {
  const __mmask16 lanes = col + 16 <= k ? __mmask16{0xffff} : col < k ? static_cast<__mmask16>((1u << (k - col)) - 1u) : __mmask16{0};
  const __m512 v = _mm512_maskz_loadu_ps(lanes, x + col);
  const __m256bh t0 = _mm512_cvtneps_pbh(v);
  const __m512 r1 = _mm512_sub_ps(v, widen16(t0));
  const __m256bh t1 = _mm512_cvtneps_pbh(r1);
  const __m256bh t2 = _mm512_cvtneps_pbh(_mm512_sub_ps(r1, widen16(t1)));
  store16(t + col, t0);
  store16(t + kp + col, t1);
  store16(t + 2 * kp + col, t2);
}

// Splits a block of rows (row r of x at x + r * ldx -> its terms at a + r * 3 kp) a few vectors
// at a time, so the work can sit between the tile products of the previous block. (Split a row
// block at a time between blocks, the conversion of one block held the tile unit idle: 0.44
// against 0.21 ms at k 512, n 96.)
struct SplitCursor {
  const float* x = nullptr;
  int64_t ldx = 0, k = 0, kp = 0, rows = 0;
  uint16_t* a = nullptr;
  int64_t row = 0, col = 0;

  ESCPOD_AMX_TARGET void advance(int64_t vectors) {
    for (; vectors > 0 && row < rows; --vectors) {
      split_vector(x + row * ldx, col, k, kp, a + row * kTerms * kp);
      col += 16;
      if (col == kp) {
        col = 0;
        ++row;
      }
    }
  }
  // The rest, then a compiler barrier: GCC's tile-load intrinsics declare no memory input, so
  // without it the split's stores could be scheduled after the tile loads that read them.
  ESCPOD_AMX_TARGET void finish() {
    advance(rows * kp / 16);
    asm volatile("" ::: "memory");
  }
};

// v[i] -> its three terms at planes + q * plane + i, i < n (lanes up to n rounded to 16 written,
// zeros past n).
ESCPOD_AMX_TARGET void split_planes(const float* v, int64_t n, uint16_t* planes, int64_t plane) {
  for (int64_t i = 0; i < n; i += 16) split_vector(v, i, n, plane, planes);
}

// The four tile products of a 2 x 2 block: C[i][j] += A[i] B[j].
[[gnu::always_inline]] inline void products_2x2() {
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

struct Geometry {
  int64_t k, kp, n, ldx, ldy;
  const uint16_t* packed;
  const float* bias;  // or null
};

// Where a row block's split terms are: term q of row r at a + q * term + r * row (uint16).
struct SplitRows {
  const uint16_t* a;
  int64_t term, row;
};

// One 32 x 32 output block over all of k: x's split rows, b = the column block's packing; the
// result is stored to out (row stride ldo floats). After each group of four tile products,
// `per_group` vectors of the next block are split.
ESCPOD_AMX_TARGET inline void output_block(const Geometry& g, const SplitRows& x, const uint16_t* b, int64_t jb,
                                           float* out, int64_t ldo, SplitCursor& next, int64_t per_group,
                                           const AmxSideWork& side) {
  const int64_t lda = x.row * 2;  // bytes per split row
  const int64_t term_stride = g.kp / 2 * kBlock * 2;  // uint16 per term of a column block's packing
  if (g.bias) {
    const float* bias = g.bias + jb * kBlock;  // every row of the tile: the same 16 biases
    _tile_loadd(0, bias, 0);
    _tile_loadd(1, bias + 16, 0);
    _tile_loadd(2, bias, 0);
    _tile_loadd(3, bias + 16, 0);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t a_half = 16 * x.row;  // uint16 from row 0 to row 16
  for (int64_t s = 0; s < g.kp / kStep; ++s) {
    const uint16_t* x0 = x.a + s * kStep;
    const uint16_t* w0 = b + s * 16 * kBlock * 2;
    for (int xt = 0; xt < kTerms; ++xt) {  // x term xt meets w terms 0 .. 2 - xt
      const uint16_t* xa = x0 + xt * x.term;
      _tile_loadd(4, xa, lda);
      _tile_loadd(5, xa + a_half, lda);
      for (int wt = 0; wt < kTerms - xt; ++wt) {
        const uint16_t* wb = w0 + wt * term_stride;
        _tile_loadd(6, wb, kBlock * 4);
        _tile_loadd(7, wb + 32, kBlock * 4);
        products_2x2();
        next.advance(per_group);
        if (side.step) side.step(side.ctx);
      }
    }
  }
  _tile_stored(0, out, ldo * 4);
  _tile_stored(1, out + 16, ldo * 4);
  _tile_stored(2, out + 16 * ldo, ldo * 4);
  _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
}

// Eight tiles of 16 rows x 64 bytes. As inline assembly with the whole configuration as its
// memory operand: GCC 12 can treat the stores before _tile_loadconfig as dead (in a function of
// their own it dropped the rows / colsb, leaving a zero configuration: #UD at the first tile
// instruction).
ESCPOD_AMX_TARGET inline void load_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// The 32 x 32 output blocks of one row block (r0, `valid` rows of it) from its split rows x; a
// short last row block is stored through `tail`.
ESCPOD_AMX_TARGET inline void row_block(const Geometry& g, const SplitRows& x, int64_t r0, int64_t valid, float* y,
                                        float* tail, SplitCursor& next, int64_t per_group, const AmxSideWork& side) {
  for (int64_t jb = 0; jb < g.n / kBlock; ++jb) {
    const uint16_t* bj = g.packed + jb * kTerms * (g.kp / 2) * kBlock * 2;
    if (valid == kBlock) {
      output_block(g, x, bj, jb, y + r0 * g.ldy + jb * kBlock, g.ldy, next, per_group, side);
    } else {
      output_block(g, x, bj, jb, tail, kBlock, next, per_group, side);
      for (int64_t r = 0; r < valid; ++r) {
        std::memcpy(y + (r0 + r) * g.ldy + jb * kBlock, tail + r * kBlock, kBlock * sizeof(float));
      }
    }
  }
}

ESCPOD_AMX_TARGET void run_blocks(const Geometry& g, int64_t rows, const float* x, float* y, char* scratch,
                                  const AmxSideWork& side) {
  load_tile_config();
  const size_t a_elems = static_cast<size_t>(kBlock * kTerms * g.kp);
  uint16_t* abuf[2] = {reinterpret_cast<uint16_t*>(scratch), reinterpret_cast<uint16_t*>(scratch) + a_elems};
  float* tail = reinterpret_cast<float*>(scratch + 2 * align64(a_elems * sizeof(uint16_t)));
  // Groups of four tile products per block of rows, and vectors to split per block.
  const int64_t groups = g.n / kBlock * (g.kp / kStep) * 6, vectors = kBlock * g.kp / 16;
  const int64_t per_group = (vectors + groups - 1) / groups;
  SplitCursor first{x, g.ldx, g.k, g.kp, std::min(kBlock, rows), abuf[0]};
  first.finish();
  for (int64_t r0 = 0, b = 0; r0 < rows; r0 += kBlock, ++b) {
    const int64_t next_rows = std::clamp<int64_t>(rows - r0 - kBlock, 0, kBlock);
    SplitCursor next{next_rows > 0 ? x + (r0 + kBlock) * g.ldx : nullptr, g.ldx, g.k, g.kp, next_rows, abuf[(b + 1) & 1]};
    const SplitRows split{abuf[b & 1], g.kp, kTerms * g.kp};
    row_block(g, split, r0, std::min(kBlock, rows - r0), y, tail, next, per_group, side);
    next.finish();
  }
  _tile_release();
}

// x already split into planes (AmxF32Gemm::split_to_planes): term q of row r at
// planes + q * plane + r * ld.
ESCPOD_AMX_TARGET void run_planes(const Geometry& g, int64_t rows, const uint16_t* planes, int64_t plane, int64_t ld,
                                  float* y, char* scratch) {
  load_tile_config();
  auto* tail = reinterpret_cast<float*>(scratch);
  SplitCursor none;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    row_block(g, SplitRows{planes + r0 * ld, plane, ld}, r0, std::min(kBlock, rows - r0), y, tail, none, 0, {});
  }
  _tile_release();
}

#undef ESCPOD_AMX_TARGET

}  // namespace

bool amx_f32_available() {
  static const bool ok = [] {
    if (dnnl_isa_name() != "avx512_core_amx") return false;
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("amx-bf16") ||
        !__builtin_cpu_supports("amx-tile")) {
      return false;
    }
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

AmxF32Gemm::AmxF32Gemm(int64_t k, int64_t n, const float* w, Layout layout, const float* bias, int64_t conv_ic)
    : m_k(k), m_kp(round_up(k, kStep)), m_n(n), m_packed(shared_packing(k, m_kp, n, w, layout, conv_ic)) {
  if (bias) m_bias.assign(bias, bias + n);
}

std::size_t AmxF32Gemm::scratch_bytes() const {
  const std::size_t a_bytes = align64(static_cast<size_t>(kBlock * kTerms * m_kp) * sizeof(uint16_t));
  return 2 * a_bytes + static_cast<size_t>(kBlock * kBlock) * sizeof(float);
}

void AmxF32Gemm::run(int64_t rows, const float* x, int64_t ldx, float* y, int64_t ldy, void* scratch,
                     const AmxSideWork& side) const {
  if (rows <= 0) return;
  const Geometry g{m_k, m_kp, m_n, ldx, ldy, m_packed.get(), m_bias.empty() ? nullptr : m_bias.data()};
  run_blocks(g, rows, x, y, static_cast<char*>(scratch), side);
}

int64_t AmxF32Gemm::plane_elems(int64_t rows, int64_t ld) const {
  return round_up((round_up(rows, kBlock) - 1) * ld + m_kp, kStep);
}

void AmxF32Gemm::split_to_planes(const float* v, int64_t n, uint16_t* planes, int64_t plane) {
  split_planes(v, n, planes, plane);
}

void AmxF32Gemm::run_planes(int64_t rows, const uint16_t* planes, int64_t plane, int64_t ld, float* y, int64_t ldy,
                            void* scratch) const {
  if (rows <= 0) return;
  const Geometry g{m_k, m_kp, m_n, ld, ldy, m_packed.get(), m_bias.empty() ? nullptr : m_bias.data()};
  detail::run_planes(g, rows, planes, plane, ld, y, static_cast<char*>(scratch));
}

}  // namespace escpod::nn::detail
