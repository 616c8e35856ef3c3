// Layout assignment (planner_ir.hpp). Channels-last activations (optimised backend): every
// convolution writes [N, W, C], the layout oneDNN's direct (brgemm) kernels want, except one
// writing the graph output with a kernel as fast either way (conv_writes_plain_cheaply).
// Convolutions and strided copies read either layout, and any other consumer (or a graph output
// in [N, W, C]) gets a converting copy inserted. A 1-channel input is the same bytes in both
// layouts.
#include <algorithm>
#include <vector>

#include "nn/planner_ir.hpp"

namespace escpod::nn::detail {
namespace {

// Builds the nodes in their new order, with converting copies inserted before their readers
// (one per value and direction, shared by every reader).
class LayoutPass {
 public:
  explicit LayoutPass(PlanIr& ir)
      : m_ir(ir), m_to_plain(ir.values.size(), -1), m_to_nwc(ir.values.size(), -1) {}

  void run() {
    for (RtNode& r : m_ir.nodes) {
      if (r.dead) continue;
      if (flat_over_nwc(r)) {
        m_ir.nwc[static_cast<size_t>(r.out)] = true;
        m_out.push_back(std::move(r));
        continue;
      }
      for (int& v : r.in) {
        if (v < 0) continue;
        if (is_nwc(v) && r.kind != RtKind::kConv && !copy_reads_any_layout(r)) v = nwc_to_plain(v);
        if (!is_nwc(v) && r.kind == RtKind::kConv && r.conv.ic > 1) v = plain_to_nwc(v);
      }
      if (r.kind == RtKind::kConv && !writes_output_plain(r)) m_ir.nwc[static_cast<size_t>(r.out)] = true;
      m_out.push_back(std::move(r));
    }
    if (is_nwc(m_ir.output)) m_ir.output = nwc_to_plain(m_ir.output);
    m_ir.nodes = std::move(m_out);
  }

 private:
  bool is_nwc(int v) const { return m_ir.nwc[static_cast<size_t>(v)]; }

  // A convolution writing the graph output writes it plain where its kernel does so as cheaply,
  // sparing the converting copy (a pass over the output) that would follow.
  bool writes_output_plain(const RtNode& r) const {
    return r.out == m_ir.output && conv_writes_plain_cheaply(r.conv);
  }

  // Element-wise nodes over same-shape operands do not care about layout: when all their runtime
  // inputs are channels-last, so is their output.
  bool flat_over_nwc(const RtNode& r) const {
    const bool flat = (r.kind == RtKind::kEltwise) ||
                      (r.kind == RtKind::kBinary && r.in[0] >= 0 && r.in[1] >= 0 &&
                       r.bin.a_shape == r.bin.out_shape && r.bin.b_shape == r.bin.out_shape);
    if (!flat || m_ir.shape_of(r.out).size() != 3) return false;
    bool all = true;
    for (int v : r.in) all = all && v >= 0 && is_nwc(v);
    return all;
  }

  // A strided copy in layout-independent form (every output axis mapped to a source axis).
  static bool copy_reads_any_layout(const RtNode& r) {
    return r.kind == RtKind::kCopy && !r.copy_axis.empty() &&
           std::find(r.copy_axis.begin(), r.copy_axis.end(), -1) == r.copy_axis.end();
  }

  void grow() {
    m_ir.nwc.resize(m_ir.values.size(), false);
    m_to_plain.resize(m_ir.values.size(), -1);
    m_to_nwc.resize(m_ir.values.size(), -1);
  }

  int nwc_to_plain(int v) {
    if (m_to_plain[static_cast<size_t>(v)] >= 0) return m_to_plain[static_cast<size_t>(v)];
    const Shape sh = m_ir.shape_of(v);
    RtNode c;
    c.kind = RtKind::kCopy;
    c.label = "layout nwc->ncw";
    c.in = {v};
    c.copy.out_shape = sh;
    c.copy.src_strides = strides_of(sh);
    c.copy_axis = {0, 1, 2};
    c.copy_step = {1, 1, 1};
    c.copy_first = {0, 0, 0};
    c.out = m_ir.new_value(sh);
    grow();
    m_to_plain[static_cast<size_t>(v)] = c.out;
    m_out.push_back(std::move(c));
    return m_out.back().out;
  }

  int plain_to_nwc(int v) {
    if (m_to_nwc[static_cast<size_t>(v)] >= 0) return m_to_nwc[static_cast<size_t>(v)];
    const Shape sh = m_ir.shape_of(v);
    RtNode c;
    c.kind = RtKind::kCopy;
    c.label = "layout ncw->nwc";
    c.in = {v};
    c.copy.out_shape = {sh[0], sh[2], sh[1]};
    c.copy.src_strides = {sh[1] * sh[2], 1, sh[2]};
    c.out = m_ir.new_value(sh);
    grow();
    m_ir.nwc[static_cast<size_t>(c.out)] = true;
    m_to_nwc[static_cast<size_t>(v)] = c.out;
    m_out.push_back(std::move(c));
    return m_out.back().out;
  }

  PlanIr& m_ir;
  std::vector<RtNode> m_out;
  std::vector<int> m_to_plain, m_to_nwc;  // per value: its converted copy, -1 when none yet
};

}  // namespace

void assign_layouts(PlanIr& ir, Backend backend) {
  ir.nwc.assign(ir.values.size(), false);
  if (backend != Backend::kOptimised) return;
  LayoutPass(ir).run();
}

}  // namespace escpod::nn::detail
