// Dynamic time warping distance with the exact semantics WarpDemuX gets from dtaidistance 2.3.13
// (C implementation, `distance(use_c=True, window=W, penalty=P)`); specified in
// docs/demux.md §5.1:
//
//   D[i][j] = (a_i - b_j)^2 + min(D[i-1][j-1], D[i-1][j] + P^2, D[i][j-1] + P^2),
//   D[-1][-1] = 0, every other out-of-grid cell +inf, result sqrt(D[n-1][m-1]), IEEE double,
//   no fused multiply-add (the build passes -ffp-contract=off).
//
// The penalty is given in distance units and its square is charged per vertical/horizontal step.
// Band: row i may use columns j in [i - max(0, n - m) - W + 1, i + max(0, m - n) + W), i.e. for
// equal lengths |i - j| <= W - 1 (W = 1 is the Euclidean distance; W = 0 means no band).
// NOTE the Rust escapepod uses a band one cell wider (|i - j| <= W); for WarpDemuX models that
// moves probabilities by up to 0.017. To get escapepod's band, pass window + 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <vector>

namespace escpod::demux {

namespace detail {
// Storage that starts on a cache line, so that no 32-byte SIMD access straddles two lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
};
}  // namespace detail

// Arithmetic of the DTW distances a classifier uses. kFloat64 is dtaidistance's bit for bit;
// kFloat32 is DtwBank::distances_to_f32 (about 2x faster, within a few float32 ulps).
enum class DtwPrecision : uint8_t { kFloat64, kFloat32 };
const char* dtw_precision_name(DtwPrecision p);

struct DtwParams {
  size_t window = 0;     // band parameter W as above; 0 = unbanded
  double penalty = 0.0;  // P, in distance units (squared when charged)
};

// Doubles of scratch dtw_distance needs for a second series of length m.
inline size_t dtw_scratch_size(size_t m) { return 2 * (m + 1); }

// DTW distance between a (length n) and b (length m). Returns +inf if either is empty; NaN inputs
// propagate (callers validate). `scratch` must hold at least dtw_scratch_size(b.size()) doubles;
// its contents are clobbered. Symmetric in (a, b) up to the band definition (which is symmetric).
// Thread safety: pure function; reentrant.
double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params,
                    std::span<double> scratch);

// Convenience form that allocates its scratch (tests, one-off use; not for per-read loops).
double dtw_distance(std::span<const double> a, std::span<const double> b, const DtwParams& params);

// Instruction sets DtwBank can run on (kAvx2 means AVX2 with FMA). Every one performs, per lane,
// operations that give exactly the values of dtw_distance (IEEE double, a < b ? a : b minima, no
// contraction of the product into its sum), so all give the same distances bit for bit; they
// differ only in how many references one step covers.
enum class DtwIsa { kSse2, kAvx2, kAvx512 };

// The DtwIsa to use here: AVX2 where the CPU has it (AVX-512 measured slower on Zen 4), else SSE2.
// ESCPOD_DTW_ISA=sse2|avx2|avx512 asks for one; a value the CPU cannot run falls back to the
// widest it can.
DtwIsa dtw_best_isa();
const char* dtw_isa_name(DtwIsa isa);
// Whether this CPU can run `isa` (tests run every supported one).
bool dtw_isa_supported(DtwIsa isa);

// A set of equal-length reference series laid out for computing many distances from one query at
// once: blocks of lanes() references, interleaved so that one SIMD step advances the same DTW cell
// of every reference in the block (independent vectors per step: 4 x 2 lanes with SSE2, 8 x 4 with
// AVX2, 8 x 8 with AVX-512). Every result equals dtw_distance bit for bit. Immutable after
// construction; share it between threads.
class DtwBank {
 public:
  DtwBank() = default;
  // `rows` is n_rows x length, row-major. Precondition: rows.size() == n_rows * length.
  DtwBank(std::span<const double> rows, size_t n_rows, size_t length, DtwIsa isa = dtw_best_isa());

  size_t n_rows() const { return m_n_rows; }
  size_t length() const { return m_length; }
  DtwIsa isa() const { return m_isa; }
  size_t lanes() const { return m_lanes; }

  // Doubles of scratch distances_to() needs.
  size_t scratch_size() const { return 2 * (m_length + 1) * m_lanes + 8; }

  // out[r] = dtw_distance(query, row r, params) for every row. Preconditions (asserted):
  // query.size() == length(), out.size() == n_rows(), scratch.size() >= scratch_size().
  // Reentrant: the bank is only read.
  void distances_to(std::span<const double> query, const DtwParams& params,
                    std::span<double> scratch, std::span<double> out) const;

  // The fast approximation: the same recurrence in float32 (query and references rounded to
  // float, (q - r)^2 + best fused), 64 references per step on AVX2+FMA, else a portable loop
  // with identical results. Relative deviation from distances_to() is a few float32 ulps (the
  // tests bound it at 2e-6); WarpDemuX rounds the distances to float32 before its kernel anyway.
  // About twice as fast as distances_to() on AVX2. Reentrant.
  size_t scratch_size_f32() const;
  void distances_to_f32(std::span<const double> query, const DtwParams& params,
                        std::span<float> scratch, std::span<double> out) const;
  // Whether distances_to_f32 runs the AVX2+FMA kernel (else the portable one).
  bool f32_uses_simd() const;

 private:
  // Checks the preconditions shared by distances_to and distances_to_f32; for a bank of empty
  // series fills `out` with +inf and returns true.
  bool nothing_to_compute(std::span<const double> query, std::span<double> out) const;

  size_t m_n_rows = 0;
  size_t m_length = 0;
  DtwIsa m_isa = DtwIsa::kSse2;
  size_t m_lanes = 8;
  // Blocks of m_lanes rows; in block b, value j of lane l is at
  // [b * length * lanes + j * lanes + l]. The last block is padded with zero rows.
  std::vector<double, detail::CacheLineAllocator<double>> m_interleaved;
  // The same rows as float32 in blocks of 64 (distances_to_f32).
  std::vector<float, detail::CacheLineAllocator<float>> m_interleaved_f32;
};

}  // namespace escpod::demux
