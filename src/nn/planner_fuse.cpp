// Fusion (planner_ir.hpp): rules applied one at a time, first match in node order, until none
// applies; a fused node is marked dead, never removed, so node indices stay valid.
#include <vector>

#include "nn/planner_ir.hpp"

namespace escpod::nn::detail {
namespace {

class Fusion {
 public:
  Fusion(PlanIr& ir, Backend backend) : m_ir(ir), m_backend(backend) {}

  void run() {
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t i = 0; i < m_ir.nodes.size() && !changed; ++i) {
        if (m_ir.nodes[i].dead) continue;
        changed = fuse_silu(i) || fuse_bias(i) || fuse_eltwise(i) || fuse_lstm_flips(i) || fuse_post_ops_into_pad(i) ||
                  fuse_blank_pad_into_matmul(i);
      }
    }
  }

 private:
  RtNode& node(int idx) { return m_ir.nodes[static_cast<size_t>(idx)]; }

  std::vector<int> consumers(int id) const {
    std::vector<int> c;
    for (size_t i = 0; i < m_ir.nodes.size(); ++i) {
      if (m_ir.nodes[i].dead) continue;
      for (int v : m_ir.nodes[i].in) {
        if (v == id) {
          c.push_back(static_cast<int>(i));
          break;
        }
      }
    }
    return c;
  }
  int producer(int id) const {
    for (size_t i = 0; i < m_ir.nodes.size(); ++i) {
      if (!m_ir.nodes[i].dead && m_ir.nodes[i].out == id) return static_cast<int>(i);
    }
    return -1;
  }
  bool single_use(int id) const { return id != m_ir.output && consumers(id).size() == 1; }

  static bool accepts_post_ops(const RtNode& r) {
    return r.kind == RtKind::kConv || r.kind == RtKind::kMatMul || r.kind == RtKind::kEltwise ||
           r.kind == RtKind::kBinary;
  }
  static std::vector<PostOp>& post_ops_of(RtNode& r) {
    switch (r.kind) {
      case RtKind::kConv: return r.conv.post_ops;
      case RtKind::kMatMul: return r.mm.post_ops;
      case RtKind::kBinary: return r.bin.post_ops;
      default: return r.post;
    }
  }
  const float* add_vectors(const float* a, const float* b, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (a ? a[i] : 0.0f) + b[i];
    return m_ir.own(Tensor::floats({n}, std::move(v)))->f32.data();
  }

  // x * sigmoid(x) -> silu(x)
  bool fuse_silu(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (!(r.kind == RtKind::kBinary && r.bin.kind == BinaryParams::Kind::kMul && r.in.size() == 2 &&
          r.in[0] >= 0 && r.in[1] >= 0 && r.bin.post_ops.empty())) {
      return false;
    }
    for (int side = 0; side < 2; ++side) {
      const int s = r.in[static_cast<size_t>(side)], other = r.in[static_cast<size_t>(1 - side)];
      const int pi = producer(s);
      if (pi < 0) continue;
      RtNode& sg = node(pi);
      if (sg.kind == RtKind::kEltwise && sg.post.size() == 1 && sg.post[0].kind == PostOp::Kind::kSigmoid &&
          sg.in[0] == other && single_use(s)) {
        sg.dead = true;
        r.kind = RtKind::kEltwise;
        r.in = {other};
        r.post = {PostOp{PostOp::Kind::kSilu, 1.0f, 0.0f}};
        return true;
      }
    }
    return false;
  }

  // Constant bias row after a MatMul, per-channel bias after a Conv.
  bool fuse_bias(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (!(r.kind == RtKind::kBinary && r.bin.kind == BinaryParams::Kind::kAdd && r.bin.post_ops.empty())) {
      return false;
    }
    const bool a_rt = r.in[0] >= 0;
    const int src = a_rt ? r.in[0] : r.in[1];
    const float* c = a_rt ? r.bin.b_const : r.bin.a_const;
    const Shape& cs = a_rt ? r.bin.b_shape : r.bin.a_shape;
    const int pi = c ? producer(src) : -1;
    if (pi < 0 || !single_use(src)) return false;
    RtNode& p = node(pi);
    if (p.kind == RtKind::kMatMul && p.mm.post_ops.empty() && numel(cs) == p.mm.n && cs.back() == p.mm.n) {
      p.mm.bias = add_vectors(p.mm.bias, c, p.mm.n);
    } else if (p.kind == RtKind::kConv && p.conv.post_ops.empty() && cs.size() == 3 && numel(cs) == p.conv.oc &&
               cs[1] == p.conv.oc) {
      p.conv.bias = add_vectors(p.conv.bias, c, p.conv.oc);
    } else {
      return false;
    }
    p.out = r.out;
    r.dead = true;
    return true;
  }

  // Element-wise ops into their producer.
  bool fuse_eltwise(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (r.kind != RtKind::kEltwise) return false;
    const int pi = producer(r.in[0]);
    if (pi < 0 || !single_use(r.in[0]) || !accepts_post_ops(node(pi))) return false;
    RtNode& p = node(pi);
    auto& ops = post_ops_of(p);
    ops.insert(ops.end(), r.post.begin(), r.post.end());
    p.out = r.out;
    r.dead = true;
    return true;
  }

  // flip -> LSTM -> (squeeze) -> flip  ==>  LSTM in the other direction.
  bool fuse_lstm_flips(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (r.kind != RtKind::kLstm) return false;
    const int pi = producer(r.in[0]);
    if (pi < 0 || node(pi).kind != RtKind::kCopy || !node(pi).axis0_reverse || !single_use(r.in[0])) return false;
    int tail = r.out;
    int alias_idx = -1;
    std::vector<int> c = consumers(tail);
    if (c.size() == 1 && node(c[0]).kind == RtKind::kAlias && tail != m_ir.output) {
      alias_idx = c[0];
      tail = node(c[0]).out;
      c = consumers(tail);
    }
    if (c.size() != 1 || tail == m_ir.output || node(c[0]).kind != RtKind::kCopy || !node(c[0]).axis0_reverse) {
      return false;
    }
    RtNode& pre = node(pi);
    RtNode& post = node(c[0]);
    r.in[0] = pre.in[0];
    r.lstm.reverse = !r.lstm.reverse;
    pre.dead = true;
    r.out = post.out;
    post.dead = true;
    if (alias_idx >= 0) node(alias_idx).dead = true;
    return true;
  }

  // The MatMul whose output reaches value `v` through single-use reshapes only (their nodes in
  // *aliases when given); -1 when there is none.
  int matmul_behind_aliases(int v, std::vector<int>* aliases = nullptr) const {
    int pi = producer(v);
    while (pi >= 0 && m_ir.nodes[static_cast<size_t>(pi)].kind == RtKind::kAlias && single_use(v)) {
      if (aliases) aliases->push_back(pi);
      v = m_ir.nodes[static_cast<size_t>(pi)].in[0];
      pi = producer(v);
    }
    const bool ok = pi >= 0 && single_use(v) && m_ir.nodes[static_cast<size_t>(pi)].kind == RtKind::kMatMul;
    return ok ? pi : -1;
  }

  // Bonito's CRF scores: MatMul+tanh+scale -> (reshapes) -> Pad of one blank before each run of
  // 4. The post-ops move to the Pad, which applies them to the values it copies. Element-wise ops
  // commute with the reshapes and the pad value is not transformed, so the result is the same
  // function. On the optimised backend the Pad then goes into the MatMul (next rule): oneDNN's
  // tanh post-op cost ~1.8 of 5.8 ms of the linear layer at batch 16 (bench/results/
  // crf_encoder.md Session 13). Other patterns keep oneDNN's (vectorised) post-ops.
  bool fuse_post_ops_into_pad(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (r.kind != RtKind::kPad || !r.pad.post_ops.empty() || !is_blank_pad(r.pad)) return false;
    const int pi = matmul_behind_aliases(r.in[0]);
    if (pi < 0) return false;
    std::vector<PostOp>& ops = node(pi).mm.post_ops;
    if (ops.size() != 2 || ops[0].kind != PostOp::Kind::kTanh || ops[1].kind != PostOp::Kind::kLinear) return false;
    r.pad.post_ops = std::move(ops);
    ops.clear();
    return true;
  }
  // Then, on the optimised backend, that Pad into the MatMul (MatMulParams::blank_pad): the
  // MatMul writes the padded rows block by block from L2, so its unpadded output ([T, N, 1024]
  // floats, 4.9 MB at batch 4) is never written to memory and read back.
  bool fuse_blank_pad_into_matmul(size_t i) {
    RtNode& r = m_ir.nodes[i];
    if (m_backend != Backend::kOptimised || r.kind != RtKind::kPad || r.pad.post_ops.size() != 2) return false;
    std::vector<int> chain;
    const int pi = matmul_behind_aliases(r.in[0], &chain);
    if (pi < 0 || !node(pi).mm.post_ops.empty() || node(pi).mm.n % 4 != 0) return false;
    RtNode& mm = node(pi);
    mm.mm.blank_pad = MatMulParams::BlankPad{r.pad.value, r.pad.post_ops[1].alpha, r.pad.post_ops[1].beta};
    mm.out = r.out;
    r.dead = true;
    for (int a : chain) node(a).dead = true;
    return true;
  }

  // [..., 4] -> [..., 5] with one value in front, every other axis unchanged.
  static bool is_blank_pad(const PadParams& p) {
    const size_t rank = p.in_shape.size();
    if (rank == 0 || p.out_shape.size() != rank || p.in_shape.back() != 4 || p.out_shape.back() != 5 ||
        p.pads_begin.back() != 1) {
      return false;
    }
    for (size_t d = 0; d + 1 < rank; ++d) {
      if (p.in_shape[d] != p.out_shape[d] || p.pads_begin[d] != 0) return false;
    }
    return true;
  }

  PlanIr& m_ir;
  Backend m_backend;
};

}  // namespace

void fuse(PlanIr& ir, Backend backend) { Fusion(ir, backend).run(); }

}  // namespace escpod::nn::detail
