// Memory planning (planner_ir.hpp): storage roots, last uses and first-fit arena blocks.
#include <algorithm>
#include <vector>

#include "nn/planner_ir.hpp"

namespace escpod::nn::detail {
namespace {

constexpr size_t kAlignFloats = 16;  // 64-byte aligned buffers

std::vector<RtNode*> live_nodes(PlanIr& ir) {
  std::vector<RtNode*> order;
  for (RtNode& r : ir.nodes) {
    if (!r.dead) order.push_back(&r);
  }
  return order;
}

// Storage root of each value: aliases share their source's storage.
std::vector<int> storage_roots(const PlanIr& ir, const std::vector<RtNode*>& order) {
  std::vector<int> root(ir.values.size());
  for (size_t i = 0; i < root.size(); ++i) root[i] = static_cast<int>(i);
  for (const RtNode* r : order) {
    if (r->kind == RtKind::kAlias) root[static_cast<size_t>(r->out)] = root[static_cast<size_t>(r->in[0])];
  }
  return root;
}

// The output must be written by a step: when it is the input itself, a copy is appended.
void ensure_output_written(PlanIr& ir, int input_root, ArenaAssignment& a) {
  if (a.root[static_cast<size_t>(ir.output)] != input_root) return;
  RtNode copy;
  copy.kind = RtKind::kCopy;
  copy.label = "output copy";
  copy.in = {ir.output};
  copy.copy.out_shape = ir.shape_of(ir.output);
  copy.copy.src_strides = strides_of(copy.copy.out_shape);
  copy.out = ir.new_value(ir.shape_of(ir.output));
  a.root.push_back(copy.out);
  ir.nwc.push_back(false);
  ir.nodes.push_back(std::move(copy));
  a.order = live_nodes(ir);  // ir.nodes may have reallocated
  ir.output = ir.nodes.back().out;
}

// Last reading step of each root value, -1 when never read.
std::vector<int> last_uses(const ArenaAssignment& a, size_t n_values) {
  std::vector<int> last_use(n_values, -1);
  for (size_t s = 0; s < a.order.size(); ++s) {
    for (int v : a.order[s]->in) {
      if (v >= 0) last_use[static_cast<size_t>(a.root[static_cast<size_t>(v)])] = static_cast<int>(s);
    }
  }
  return last_use;
}

// First-fit allocation over the arena: a value gets the lowest offset that fits between the
// blocks still live at its step.
void place_in_arena(const PlanIr& ir, int out_root, ArenaAssignment& a) {
  struct Block {
    size_t offset, size;
    int root;
  };
  const std::vector<int> last_use = last_uses(a, ir.values.size());
  std::vector<Block> live;
  for (size_t s = 0; s < a.order.size(); ++s) {
    const RtNode* r = a.order[s];
    if (r->kind == RtKind::kAlias) continue;
    // Free blocks whose last use was before this step.
    live.erase(std::remove_if(live.begin(), live.end(), [&](const Block& b) {
      return last_use[static_cast<size_t>(b.root)] < static_cast<int>(s);
    }), live.end());
    const int v = r->out;
    const int rv = a.root[static_cast<size_t>(v)];
    if (rv == out_root) continue;
    const size_t need = (static_cast<size_t>(numel(ir.shape_of(v))) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    std::sort(live.begin(), live.end(), [](const Block& x, const Block& y) { return x.offset < y.offset; });
    size_t at = 0;
    for (const Block& b : live) {
      if (at + need <= b.offset) break;
      at = std::max(at, b.offset + b.size);
    }
    live.push_back(Block{at, need, rv});
    a.loc[static_cast<size_t>(rv)] = Loc{Loc::Kind::kArena, at};
    a.arena_floats = std::max(a.arena_floats, at + need);
  }
}

}  // namespace

ArenaAssignment assign_arena(PlanIr& ir, int input) {
  ArenaAssignment a;
  a.order = live_nodes(ir);
  a.root = storage_roots(ir, a.order);
  const int input_root = input;
  ensure_output_written(ir, input_root, a);
  const int out_root = a.root[static_cast<size_t>(ir.output)];
  a.loc.assign(ir.values.size(), Loc{});
  a.loc[static_cast<size_t>(input_root)] = Loc{Loc::Kind::kInput, 0};
  a.loc[static_cast<size_t>(out_root)] = Loc{Loc::Kind::kOutput, 0};
  place_in_arena(ir, out_root, a);
  return a;
}

}  // namespace escpod::nn::detail
