#include "escpod/signal/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace escpod::signal {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

SimRng::SimRng(uint64_t seed, uint64_t stream) {
  // Mix seed and stream through two splitmix rounds so neighbouring (seed, stream) pairs give
  // unrelated states; xoshiro's state must not be all zero (splitmix outputs never are, jointly).
  uint64_t s = seed;
  uint64_t mixed = splitmix64(s) ^ (stream * 0xd1b54a32d192ed03ULL);
  uint64_t t = mixed;
  for (auto& w : m_s) w = splitmix64(t);
}

uint64_t SimRng::next() {
  const uint64_t result = rotl(m_s[1] * 5, 7) * 9;
  const uint64_t t = m_s[1] << 17;
  m_s[2] ^= m_s[0];
  m_s[3] ^= m_s[1];
  m_s[1] ^= m_s[2];
  m_s[0] ^= m_s[3];
  m_s[2] ^= t;
  m_s[3] = rotl(m_s[3], 45);
  return result;
}

double SimRng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

uint64_t SimRng::below(uint64_t n) {
  // Lemire-style rejection on the top bits would need 128-bit products; plain rejection is enough.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  for (;;) {
    const uint64_t x = next();
    if (x < limit) return x % n;
  }
}

double SimRng::normal() {
  if (m_has_spare) {
    m_has_spare = false;
    return m_spare;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  m_spare = r * std::sin(a);
  m_has_spare = true;
  return r * std::cos(a);
}

float SimRng::fast_normal() {
  const uint64_t x = next();
  const uint32_t sum = static_cast<uint32_t>(x & 0xffff) + static_cast<uint32_t>((x >> 16) & 0xffff) +
                       static_cast<uint32_t>((x >> 32) & 0xffff) + static_cast<uint32_t>(x >> 48);
  // Sum of four U(0,1) has mean 2 and variance 1/3.
  constexpr float kInv = 1.0f / 65536.0f;
  constexpr float kSqrt3 = 1.7320508075688772f;
  return ((static_cast<float>(sum) + 2.0f) * kInv - 2.0f) * kSqrt3;
}

int base_code(char c) {
  switch (c) {
    case 'A': case 'a': return 0;
    case 'C': case 'c': return 1;
    case 'G': case 'g': return 2;
    case 'T': case 't': case 'U': case 'u': return 3;
    default: return -1;
  }
}

Result<KmerTable> KmerTable::create(int k, std::string label, bool synthetic) {
  if (k < 1 || k > 12) {
    return Status::invalid_argument("k-mer length must be in [1, 12], not " + std::to_string(k));
  }
  KmerTable t;
  t.m_k = k;
  t.m_label = std::move(label);
  t.m_synthetic = synthetic;
  t.m_levels.assign(size_t{1} << (2 * k), std::numeric_limits<float>::quiet_NaN());
  return t;
}

Result<KmerTable> KmerTable::synthetic(int k) {
  ESCPOD_ASSIGN_OR_RETURN(KmerTable t, create(k, "synthetic:" + std::to_string(k), true));
  // Per-position, per-base contributions with weights falling off from the centre (a pore reads
  // several bases at once, the central ones most), from a fixed seed; plus a small hashed term.
  SimRng rng(0x5eed5eedULL, static_cast<uint64_t>(k));
  std::vector<double> contrib(static_cast<size_t>(k) * 4);
  const int c = k / 2;
  for (int p = 0; p < k; ++p) {
    const double w = std::exp(-0.5 * std::abs(p - c));
    for (int b = 0; b < 4; ++b) contrib[static_cast<size_t>(p * 4 + b)] = w * rng.normal();
  }
  std::vector<double> raw(t.m_levels.size());
  for (uint64_t code = 0; code < raw.size(); ++code) {
    double v = 0.0;
    for (int p = 0; p < k; ++p) {
      const auto b = static_cast<int>((code >> (2 * (k - 1 - p))) & 3u);
      v += contrib[static_cast<size_t>(p * 4 + b)];
    }
    uint64_t h = code ^ 0xabcdef12345ULL;
    v += 0.15 * (static_cast<double>(splitmix64(h) >> 11) * 0x1.0p-53 - 0.5);
    raw[code] = v;
  }
  std::vector<double> sorted = raw;
  auto median_of = [](std::vector<double>& v) {
    const size_t n = v.size();
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
    double hi = v[n / 2];
    if (n % 2 == 1) return hi;
    const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2));
    return 0.5 * (lo + hi);
  };
  const double med = median_of(sorted);
  for (size_t i = 0; i < raw.size(); ++i) sorted[i] = std::abs(raw[i] - med);
  double mad = median_of(sorted);
  if (!(mad > 0.0)) mad = 1.0;
  for (size_t i = 0; i < raw.size(); ++i) {
    t.m_levels[i] = static_cast<float>((raw[i] - med) / mad * 0.6744897501960817);
  }
  return t;
}

Status KmerTable::set(std::string_view kmer, float level) {
  if (kmer.size() != static_cast<size_t>(m_k)) {
    return Status::invalid_argument("k-mer '" + std::string(kmer) + "' has length " +
                                    std::to_string(kmer.size()) + ", the table's k is " +
                                    std::to_string(m_k));
  }
  uint64_t code = 0;
  for (char ch : kmer) {
    const int b = base_code(ch);
    if (b < 0) return Status::invalid_argument("k-mer '" + std::string(kmer) + "' is not ACGTU");
    code = (code << 2) | static_cast<uint64_t>(b);
  }
  if (!std::isfinite(level)) {
    return Status::invalid_argument("k-mer '" + std::string(kmer) + "' has a non-finite level");
  }
  m_levels[code] = level;
  return Status::ok();
}

Status KmerTable::check_complete() const {
  size_t missing = 0;
  uint64_t first = 0;
  for (uint64_t code = 0; code < m_levels.size(); ++code) {
    if (std::isnan(m_levels[code])) {
      if (missing++ == 0) first = code;
    }
  }
  if (missing == 0) return Status::ok();
  std::string name(static_cast<size_t>(m_k), 'A');
  for (int p = 0; p < m_k; ++p) name[static_cast<size_t>(p)] = "ACGT"[(first >> (2 * (m_k - 1 - p))) & 3u];
  return Status::invalid_argument("k-mer table " + m_label + " lacks " + std::to_string(missing) +
                                  " of " + std::to_string(m_levels.size()) + " " +
                                  std::to_string(m_k) + "-mers (e.g. " + name + ")");
}

float KmerTable::level(std::string_view kmer) const {
  if (kmer.size() != static_cast<size_t>(m_k)) return std::numeric_limits<float>::quiet_NaN();
  uint64_t code = 0;
  for (char ch : kmer) {
    const int b = base_code(ch);
    if (b < 0) return std::numeric_limits<float>::quiet_NaN();
    code = (code << 2) | static_cast<uint64_t>(b);
  }
  return m_levels[code];
}

void KmerTable::molecule_levels(std::string_view molecule, std::span<float> out) const {
  const size_t n = molecule.size();
  const auto k = static_cast<size_t>(m_k);
  if (n == 0) return;
  if (n < k) {
    // Shorter than one k-mer: pad with A on the right.
    std::string padded(molecule);
    padded.resize(k, 'A');
    const float v = level(padded);
    for (size_t i = 0; i < n; ++i) out[i] = std::isnan(v) ? 0.0f : v;
    return;
  }
  // Codes of every full window, rolling.
  const uint64_t mask = (uint64_t{1} << (2 * k)) - 1;
  const size_t n_windows = n - k + 1;
  const auto c = static_cast<size_t>(centre());
  uint64_t code = 0;
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    int b = base_code(molecule[i]);
    if (b < 0) b = 0;
    code = ((code << 2) | static_cast<uint64_t>(b)) & mask;
    if (i + 1 >= k) {
      // window w = [i+1-k, i] is centred on base w + c
      const float v = m_levels[code];
      const size_t base = w + c;
      out[base] = v;
      if (w == 0) {
        for (size_t j = 0; j < c; ++j) out[j] = v;  // clamp at the 5' end
      }
      if (w + 1 == n_windows) {
        for (size_t j = base + 1; j < n; ++j) out[j] = v;  // clamp at the 3' end
      }
      ++w;
    }
  }
}

void random_sequence(SimRng& rng, size_t n, std::string& out) {
  out.resize(n);
  size_t i = 0;
  while (i < n) {
    uint64_t x = rng.next();
    for (int j = 0; j < 32 && i < n; ++j, ++i) {
      out[i] = "ACGT"[x & 3u];
      x >>= 2;
    }
  }
}

const std::string& default_adapter_sequence() {
  static const std::string kAdapter = [] {
    SimRng rng(0xada97e5ULL, 0);
    std::string s;
    random_sequence(rng, 52, s);
    return s;
  }();
  return kAdapter;
}

int16_t pa_to_adc(float pa, Calibration c, int16_t lo, int16_t hi) {
  const float v = std::nearbyint(pa / c.scale - c.offset);
  if (!(v >= static_cast<float>(lo))) return lo;  // NaN too
  if (v > static_cast<float>(hi)) return hi;
  return static_cast<int16_t>(v);
}

namespace {

Status check_params(const SimParams& p, const ReadSpec& spec) {
  if (spec.adapter.empty()) return Status::invalid_argument("simulate: empty adapter sequence");
  if (spec.transcript.empty()) return Status::invalid_argument("simulate: empty transcript");
  if (!(spec.calibration.scale > 0.0f) || !std::isfinite(spec.calibration.offset)) {
    return Status::invalid_argument("simulate: calibration scale must be positive");
  }
  if (!(p.sample_rate_hz > 0.0) || !(p.bases_per_second > 0.0)) {
    return Status::invalid_argument("simulate: sample rate and bases per second must be positive");
  }
  if (p.adc_min >= p.adc_max) return Status::invalid_argument("simulate: adc_min >= adc_max");
  if (p.dwell_log_sigma < 0 || p.read_speed_log_sigma < 0 || p.noise_pa < 0 ||
      p.open_pore_mean_samples < 0) {
    return Status::invalid_argument("simulate: negative spread parameter");
  }
  return Status::ok();
}

// What varies from read to read, drawn first and always in this order (reproducibility depends
// on it).
struct ReadDraws {
  double speed, read_offset, read_scale, slope, noise_sd, open_pore;
  uint64_t open_len;
};

ReadDraws draw_read(const SimParams& p, SimRng& rng) {
  ReadDraws d{};
  d.speed = std::exp(p.read_speed_log_sigma * rng.normal());
  d.read_offset = p.read_offset_sd_pa * rng.normal();
  d.read_scale = std::exp(p.read_scale_log_sigma * rng.normal());
  d.slope = p.drift_sd_pa_per_10k * rng.normal() / 10000.0;
  d.noise_sd = std::max(0.3 * p.noise_pa, p.noise_pa + p.noise_read_sd_pa * rng.normal());
  d.open_pore = p.open_pore_pa + p.open_pore_sd_pa * rng.normal();
  d.open_len = static_cast<uint64_t>(std::floor(rng.uniform() * (2.0 * p.open_pore_mean_samples + 1.0)));
  return d;
}

// Molecule 5'->3': transcript, poly(A), barcode, adapter.
void build_molecule(const ReadSpec& spec, std::string& mol) {
  mol.clear();
  mol.reserve(spec.transcript.size() + spec.polya_length + spec.barcode.size() + spec.adapter.size());
  mol.append(spec.transcript);
  mol.append(spec.polya_length, 'A');
  mol.append(spec.barcode);
  mol.append(spec.adapter);
}

// Base levels in pA, in molecule order: the table's levels shifted and scaled per region, and
// poly(A) a flat level with a random-walk wander, walked in signal order (3' first).
void base_levels(const KmerTable& table, const SimParams& p, const ReadSpec& spec, SimRng& rng,
                 SimulatedRead& out) {
  const size_t n = out.molecule.size();
  out.levels.resize(n);
  table.molecule_levels(out.molecule, out.levels);
  const size_t pa_lo = spec.transcript.size(), pa_hi = pa_lo + spec.polya_length;  // poly(A) bases
  for (size_t b = 0; b < n; ++b) {
    const float lv = out.levels[b];
    if (b < pa_lo) {
      out.levels[b] = static_cast<float>(p.transcript_shift_pa + p.transcript_scale_pa * lv);
    } else if (b >= pa_hi) {
      out.levels[b] = static_cast<float>(p.adapter_shift_pa + p.adapter_scale_pa * lv);
    }
  }
  double wander = 0.0;
  for (size_t b = pa_hi; b-- > pa_lo;) {
    wander += p.polya_wander_pa * rng.normal();
    out.levels[b] = static_cast<float>(p.polya_pa + wander);
  }
}

// Dwell per base, in signal order (index j = n - 1 - b); returns their sum.
uint64_t draw_dwells(const SimParams& p, double speed, SimRng& rng, SimulatedRead& out) {
  const size_t n = out.molecule.size();
  const double mean_dwell = p.sample_rate_hz / p.bases_per_second / speed;
  const double mu = std::log(mean_dwell) - 0.5 * p.dwell_log_sigma * p.dwell_log_sigma;
  out.dwell.resize(n);
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const double d = std::exp(mu + p.dwell_log_sigma * rng.normal());
    const double r = std::nearbyint(d);
    const auto dw = static_cast<uint32_t>(std::clamp(r, static_cast<double>(p.min_dwell), 1.0e6));
    out.dwell[j] = dw;
    total += dw;
  }
  return total;
}

// Where each region lands in the signal (the adapter enters the pore first).
ReadLayout read_layout(const ReadSpec& spec, std::span<const uint32_t> dwell, uint64_t open_len,
                       uint64_t num_samples) {
  const size_t n_ad = spec.adapter.size(), n_bc = spec.barcode.size(), n_pa = spec.polya_length;
  auto sum_dwell = [&](size_t j0, size_t j1) {
    uint64_t s = 0;
    for (size_t j = j0; j < j1; ++j) s += dwell[j];
    return s;
  };
  ReadLayout L;
  L.adapter_start = open_len;
  L.barcode_start = L.adapter_start + sum_dwell(0, n_ad);
  L.barcode_end = L.barcode_start + sum_dwell(n_ad, n_ad + n_bc);
  L.adapter_end = L.barcode_end;
  L.polya_start = L.barcode_end;
  L.polya_end = L.polya_start + sum_dwell(n_ad + n_bc, n_ad + n_bc + n_pa);
  L.transcript_start = L.polya_end;
  L.num_samples = num_samples;
  return L;
}

// The ADC samples: open pore, then each base's level for its dwell, with the read's offset,
// scale, drift and noise.
void emit_samples(const SimParams& p, const ReadSpec& spec, const ReadDraws& d, SimRng& rng,
                  SimulatedRead& out) {
  out.adc.resize(out.layout.num_samples);
  out.open_pore_pa = static_cast<float>(d.open_pore);
  const Calibration cal = spec.calibration;
  const auto nsd = static_cast<float>(d.noise_sd);
  uint64_t t = 0;
  auto emit = [&](double level_pa, uint64_t count) {
    const double base = d.read_offset + d.read_scale * level_pa;
    for (uint64_t i = 0; i < count; ++i, ++t) {
      const float pa = static_cast<float>(base + d.slope * static_cast<double>(t)) + nsd * rng.fast_normal();
      out.adc[t] = pa_to_adc(pa, cal, p.adc_min, p.adc_max);
    }
  };
  // The open pore is not subject to the read's offset (the read has not started yet) but to the
  // same noise; emit() adds read_offset, so subtract it back out.
  emit((d.open_pore - d.read_offset) / d.read_scale, d.open_len);
  const size_t n = out.molecule.size();
  for (size_t j = 0; j < n; ++j) emit(out.levels[n - 1 - j], out.dwell[j]);
}

}  // namespace

Status simulate_read(const KmerTable& table, const SimParams& p, const ReadSpec& spec, SimRng& rng,
                     SimulatedRead& out) {
  ESCPOD_RETURN_IF_ERROR(check_params(p, spec));
  const ReadDraws d = draw_read(p, rng);
  build_molecule(spec, out.molecule);
  base_levels(table, p, spec, rng, out);
  const uint64_t total = d.open_len + draw_dwells(p, d.speed, rng, out);
  out.layout = read_layout(spec, out.dwell, d.open_len, total);
  emit_samples(p, spec, d, rng, out);
  return Status::ok();
}

}  // namespace escpod::signal
