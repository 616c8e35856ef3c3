// Scalar reference kernels (written from the ONNX operator definitions, double accumulation) and
// the data-movement steps both backends use.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "nn/plan.hpp"

namespace escpod::nn::detail {

std::string describe_post_ops(const std::vector<PostOp>& ops) {
  std::string s;
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::kRelu: s += "+relu"; break;
      case PostOp::Kind::kSigmoid: s += "+sigmoid"; break;
      case PostOp::Kind::kTanh: s += "+tanh"; break;
      case PostOp::Kind::kSilu: s += "+silu"; break;
      case PostOp::Kind::kLinear: s += fmt::format("+linear({},{})", op.alpha, op.beta); break;
    }
  }
  return s;
}

namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

float apply_post_ops(const std::vector<PostOp>& ops, float v) {
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::kRelu: v = relu(v); break;
      case PostOp::Kind::kSigmoid: v = sigmoid(v); break;
      case PostOp::Kind::kTanh: v = std::tanh(v); break;
      case PostOp::Kind::kSilu: v = v * sigmoid(v); break;
      case PostOp::Kind::kLinear: v = op.alpha * v + op.beta; break;
    }
  }
  return v;
}

namespace {

class RefConv final : public Step {
 public:
  explicit RefConv(ConvParams p) : m_p(std::move(p)) {}
  void run(const ExecContext& ctx, StepState*) const override {
    const ConvParams& p = m_p;
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    for (int64_t n = 0; n < p.n; ++n) {
      for (int64_t oc = 0; oc < p.oc; ++oc) {
        for (int64_t ow = 0; ow < p.ow; ++ow) {
          double acc = p.bias ? p.bias[oc] : 0.0;
          for (int64_t ic = 0; ic < p.ic; ++ic) {
            const float* xr = x + (n * p.ic + ic) * p.iw;
            for (int64_t kk = 0; kk < p.k; ++kk) {
              int64_t ix;
              if (!p.transposed) {
                ix = ow * p.stride - p.pad_l + kk * p.dilation;
              } else {
                // ow = ix * stride - pad_l + kk * dilation
                const int64_t num = ow + p.pad_l - kk * p.dilation;
                if (num < 0 || num % p.stride != 0) continue;
                ix = num / p.stride;
              }
              if (ix < 0 || ix >= p.iw) continue;
              const float w = p.transposed ? p.weights[(ic * p.oc + oc) * p.k + kk]
                                           : p.weights[(oc * p.ic + ic) * p.k + kk];
              acc += static_cast<double>(w) * xr[ix];
            }
          }
          y[(n * p.oc + oc) * p.ow + ow] = apply_post_ops(p.post_ops, static_cast<float>(acc));
        }
      }
    }
  }

 private:
  ConvParams m_p;
};

class RefMatMul final : public Step {
 public:
  explicit RefMatMul(MatMulParams p) : m_p(std::move(p)) {}
  void run(const ExecContext& ctx, StepState*) const override {
    const MatMulParams& p = m_p;
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = p.bias ? p.bias[j] : 0.0;
        for (int64_t kk = 0; kk < p.k; ++kk) acc += static_cast<double>(x[i * p.k + kk]) * p.weights[kk * p.n + j];
        y[i * p.n + j] = apply_post_ops(p.post_ops, static_cast<float>(acc));
      }
    }
  }

 private:
  MatMulParams m_p;
};

class RefLstm final : public Step {
 public:
  explicit RefLstm(LstmParams p) : m_p(std::move(p)) {}
  std::size_t scratch_bytes() const override {
    return static_cast<std::size_t>(2 * m_p.n * m_p.h + 4 * m_p.h) * sizeof(float);
  }
  void run(const ExecContext& ctx, StepState*) const override {
    const LstmParams& p = m_p;
    const float* x = resolve(ctx, p.src);
    float* y = resolve(ctx, p.dst);
    float* h = static_cast<float*>(ctx.scratchpad);
    float* c = h + p.n * p.h;
    float* g = c + p.n * p.h;
    std::fill(h, h + 2 * p.n * p.h, 0.0f);
    const int64_t H = p.h;
    for (int64_t step = 0; step < p.t; ++step) {
      const int64_t t = p.reverse ? p.t - 1 - step : step;
      for (int64_t n = 0; n < p.n; ++n) {
        const float* xt = x + (t * p.n + n) * p.c;
        float* hn = h + n * H;
        float* cn = c + n * H;
        for (int64_t r = 0; r < 4 * H; ++r) {
          double acc = p.bias[r];
          for (int64_t k = 0; k < p.c; ++k) acc += static_cast<double>(p.w[r * p.c + k]) * xt[k];
          for (int64_t k = 0; k < H; ++k) acc += static_cast<double>(p.r[r * H + k]) * hn[k];
          g[r] = static_cast<float>(acc);
        }
        // ONNX gate order: input, output, forget, cell.
        for (int64_t k = 0; k < H; ++k) {
          const float i = sigmoid(g[k]);
          const float o = sigmoid(g[H + k]);
          const float f = sigmoid(g[2 * H + k]);
          const float cc = std::tanh(g[3 * H + k]);
          cn[k] = f * cn[k] + i * cc;
          hn[k] = o * std::tanh(cn[k]);
        }
        std::memcpy(y + (t * p.n + n) * H, hn, static_cast<std::size_t>(H) * sizeof(float));
      }
    }
  }

 private:
  LstmParams m_p;
};

class Eltwise final : public Step {
 public:
  Eltwise(int64_t n, std::vector<PostOp> ops, Loc src, Loc dst)
      : m_n(n), m_ops(std::move(ops)), m_src(src), m_dst(dst) {}
  void run(const ExecContext& ctx, StepState*) const override {
    const float* x = resolve(ctx, m_src);
    float* y = resolve(ctx, m_dst);
    for (int64_t i = 0; i < m_n; ++i) y[i] = apply_post_ops(m_ops, x[i]);
  }

 private:
  int64_t m_n;
  std::vector<PostOp> m_ops;
  Loc m_src, m_dst;
};

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t d = out.size(); d-- > 0;) {
    strides[d] = shape[d] == 1 ? 0 : s;
    s *= shape[d];
  }
  return strides;
}

class Binary final : public Step {
 public:
  explicit Binary(BinaryParams p) : m_p(std::move(p)) {
    m_sa = broadcast_strides(m_p.a_shape, m_p.out_shape);
    m_sb = broadcast_strides(m_p.b_shape, m_p.out_shape);
    m_flat = m_p.a_shape == m_p.out_shape && m_p.b_shape == m_p.out_shape;
    m_total = 1;
    for (int64_t d : m_p.out_shape) m_total *= d;
  }
  void run(const ExecContext& ctx, StepState*) const override {
    const float* a = m_p.a_const ? m_p.a_const : resolve(ctx, m_p.a);
    const float* b = m_p.b_const ? m_p.b_const : resolve(ctx, m_p.b);
    float* y = resolve(ctx, m_p.dst);
    const bool add = m_p.kind == BinaryParams::Kind::kAdd;
    if (m_flat && m_p.post_ops.size() <= 1 &&
        (m_p.post_ops.empty() || m_p.post_ops[0].kind == PostOp::Kind::kRelu)) {
      // The common residual case, kept simple enough to vectorise.
      const bool relu = !m_p.post_ops.empty();
      if (add) {
        for (int64_t i = 0; i < m_total; ++i) {
          const float v = a[i] + b[i];
          y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
      } else {
        for (int64_t i = 0; i < m_total; ++i) {
          const float v = a[i] * b[i];
          y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
      }
      return;
    }
    if (m_flat) {
      for (int64_t i = 0; i < m_total; ++i) {
        const float v = add ? a[i] + b[i] : a[i] * b[i];
        y[i] = m_p.post_ops.empty() ? v : apply_post_ops(m_p.post_ops, v);
      }
      return;
    }
    const size_t rank = m_p.out_shape.size();
    int64_t idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < m_total; ++i) {
      const float v = add ? a[ia] + b[ib] : a[ia] * b[ib];
      y[i] = m_p.post_ops.empty() ? v : apply_post_ops(m_p.post_ops, v);
      for (size_t d = rank; d-- > 0;) {
        ++idx[d];
        ia += m_sa[d];
        ib += m_sb[d];
        if (idx[d] < m_p.out_shape[d]) break;
        ia -= m_sa[d] * idx[d];
        ib -= m_sb[d] * idx[d];
        idx[d] = 0;
      }
    }
  }

 private:
  BinaryParams m_p;
  std::vector<int64_t> m_sa, m_sb;
  bool m_flat = false;
  int64_t m_total = 0;
};

class StridedCopy final : public Step {
 public:
  explicit StridedCopy(StridedCopyParams p) : m_p(std::move(p)) {
    m_total = 1;
    for (int64_t d : m_p.out_shape) m_total *= d;
    // Merge the innermost axis into a contiguous run when its stride is 1.
    const size_t rank = m_p.out_shape.size();
    m_run = (rank > 0 && m_p.src_strides[rank - 1] == 1) ? m_p.out_shape[rank - 1] : 1;
  }
  void run(const ExecContext& ctx, StepState*) const override {
    const float* x = m_p.src_const ? m_p.src_const : resolve(ctx, m_p.src);
    float* y = resolve(ctx, m_p.dst);
    const size_t rank = m_p.out_shape.size();
    if (rank == 0) {
      y[0] = x[m_p.src_start];
      return;
    }
    const size_t outer_rank = m_run > 1 ? rank - 1 : rank;
    int64_t idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t src = m_p.src_start;
    const int64_t n_outer = m_total / m_run;
    for (int64_t i = 0; i < n_outer; ++i) {
      if (m_run > 1) {
        std::memcpy(y + i * m_run, x + src, static_cast<size_t>(m_run) * sizeof(float));
      } else {
        y[i] = x[src];
      }
      for (size_t d = outer_rank; d-- > 0;) {
        ++idx[d];
        src += m_p.src_strides[d];
        if (idx[d] < m_p.out_shape[d]) break;
        src -= m_p.src_strides[d] * idx[d];
        idx[d] = 0;
      }
    }
  }

 private:
  StridedCopyParams m_p;
  int64_t m_total = 0;
  int64_t m_run = 1;
};

class Pad final : public Step {
 public:
  explicit Pad(PadParams p) : m_p(std::move(p)), m_place(m_p) {
    m_out_total = 1;
    for (int64_t d : m_p.out_shape) m_out_total *= d;
    const size_t rank = m_p.in_shape.size();
    m_last_axis_only = rank > 0 && m_p.in_shape.back() > 0;  // an empty row: the general path fills
    for (size_t d = 0; d + 1 < rank; ++d) {
      m_last_axis_only = m_last_axis_only && m_p.in_shape[d] == m_p.out_shape[d];
    }
    if (m_last_axis_only) {
      m_before = m_p.pads_begin.back();
      m_after = m_p.out_shape.back() - m_p.in_shape.back() - m_before;
    }
  }
  void run(const ExecContext& ctx, StepState*) const override {
    float* y = resolve(ctx, m_p.dst);
    if (m_last_axis_only) {
      pad_rows(resolve(ctx, m_p.src), y);
      return;
    }
    // (The planner moves post-ops here only for a pad of the innermost axis alone.)
    std::fill(y, y + m_out_total, m_p.value);
    m_place.copy_block(m_p, resolve(ctx, m_p.src), y);
  }

 private:
  // Only the innermost axis grows (the CRF head's blank column: [T, N, S, 4] -> [T, N, S, 5]):
  // every output row is written once, padding and data in one pass, instead of a fill of the
  // whole output followed by a strided copy (two passes over it, the second through the general
  // odometer).
  void pad_rows(const float* x, float* y) const {
    const int64_t run = m_place.run, rows = m_place.rows, before = m_before, after = m_after;
    const float v = m_p.value;
    if (!m_p.post_ops.empty()) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < before; ++j) *y++ = v;
        for (int64_t j = 0; j < run; ++j) *y++ = apply_post_ops(m_p.post_ops, x[j]);
        for (int64_t j = 0; j < after; ++j) *y++ = v;
        x += run;
      }
      return;
    }
    if (run == 4 && before == 1 && after == 0) {  // bonito's CRF scores: blank, then 4 bases
      for (int64_t i = 0; i < rows; ++i, x += 4, y += 5) {
        y[0] = v;
        std::memcpy(y + 1, x, 4 * sizeof(float));  // one 16-byte move
      }
      return;
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < before; ++j) *y++ = v;
      for (int64_t j = 0; j < run; ++j) *y++ = x[j];
      for (int64_t j = 0; j < after; ++j) *y++ = v;
      x += run;
    }
  }

  PadParams m_p;
  PadPlacement m_place;
  int64_t m_out_total = 0;
  bool m_last_axis_only = false;  // every axis but the innermost keeps its size
  int64_t m_before = 0, m_after = 0;
};

}  // namespace

PadPlacement::PadPlacement(const PadParams& p) {
  const size_t rank = p.out_shape.size();
  out_strides.assign(rank, 1);
  for (size_t d = rank; d-- > 1;) out_strides[d - 1] = out_strides[d] * p.out_shape[d];
  for (size_t d = 0; d < rank; ++d) base += p.pads_begin[d] * out_strides[d];
  int64_t in_total = 1;
  for (int64_t d : p.in_shape) in_total *= d;
  run = p.in_shape.empty() ? 1 : p.in_shape.back();
  rows = run == 0 ? 0 : in_total / run;
}

void PadPlacement::copy_block(const PadParams& p, const float* src, float* dst) const {
  const size_t rank = p.in_shape.size();
  int64_t idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t at = base;
  for (int64_t i = 0; i < rows; ++i) {
    if (run < 16) {
      for (int64_t j = 0; j < run; ++j) dst[at + j] = src[i * run + j];  // short rows: no memcpy call
    } else {
      std::memcpy(dst + at, src + i * run, static_cast<size_t>(run) * sizeof(float));
    }
    // Odometer over the outer input axes (innermost outer axis first); rank 0 has none.
    for (size_t d = rank == 0 ? 0 : rank - 1; d-- > 0;) {
      ++idx[d];
      at += out_strides[d];
      if (idx[d] < p.in_shape[d]) break;
      at -= out_strides[d] * idx[d];
      idx[d] = 0;
    }
  }
}

std::unique_ptr<Step> make_ref_conv(ConvParams p) { return std::make_unique<RefConv>(std::move(p)); }
std::unique_ptr<Step> make_ref_matmul(MatMulParams p) { return std::make_unique<RefMatMul>(std::move(p)); }
std::unique_ptr<Step> make_ref_lstm(LstmParams p) { return std::make_unique<RefLstm>(std::move(p)); }
std::unique_ptr<Step> make_eltwise(int64_t n, std::vector<PostOp> ops, Loc src, Loc dst) {
  return std::make_unique<Eltwise>(n, std::move(ops), src, dst);
}
std::unique_ptr<Step> make_binary(BinaryParams p) { return std::make_unique<Binary>(std::move(p)); }
std::unique_ptr<Step> make_strided_copy(StridedCopyParams p) {
  return std::make_unique<StridedCopy>(std::move(p));
}
std::unique_ptr<Step> make_pad(PadParams p) { return std::make_unique<Pad>(std::move(p)); }

}  // namespace escpod::nn::detail
