// The planner's intermediate form for one input shape (internal to src/nn): every graph value with
// what is known of it (a constant, or a runtime tensor of known shape), and the runtime nodes the
// graph lowers to. build_plan (planner.cpp) runs the passes over it in this order:
//   lower_graph     shape propagation, folding of constant subgraphs, lowering (planner_lower.cpp)
//   fuse            activations, biases and SiLU into producers, flips into LSTM direction
//                   (planner_fuse.cpp)
//   assign_layouts  channels-last activations between convolutions (planner_layout.cpp)
//   assign_arena    storage of every runtime value: input, output or an arena block reused once
//                   its value is dead (planner_memory.cpp)
// and then creates one step per live node (kernel selection, planner.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nn/graph.hpp"
#include "nn/plan.hpp"
#include "nn/shape_ops.hpp"

namespace escpod::nn::detail {

inline constexpr size_t kMaxPlanRank = 8;  // PadPlacement and the strided kernels assume it

struct PlanValue {
  bool known = false;
  const Tensor* constant = nullptr;  // graph-owned or plan-owned
  Shape shape;                       // runtime shape
};

enum class RtKind { kConv, kMatMul, kLstm, kEltwise, kBinary, kCopy, kPad, kConcat, kAlias };

struct RtNode {
  RtKind kind = RtKind::kAlias;
  std::string label;             // ONNX node for messages
  std::vector<int> in;           // runtime value ids (main operand first)
  int out = -1;
  bool dead = false;
  ConvParams conv;
  MatMulParams mm;
  LstmParams lstm;
  std::vector<PostOp> post;      // kEltwise ops
  BinaryParams bin;              // a/b const pointers when constant
  StridedCopyParams copy;
  bool axis0_reverse = false;    // kCopy that fully reverses axis 0
  // kCopy from a runtime tensor: output axis i reads source axis copy_axis[i] with step
  // copy_step[i], starting at index copy_first[d] of source axis d (layout-independent form).
  std::vector<int64_t> copy_axis, copy_step, copy_first;
  PadParams pad;
  int64_t concat_axis = 0;
  std::vector<const float*> concat_consts;  // per input, null when runtime
  std::vector<Shape> concat_shapes;
};

struct PlanIr {
  std::vector<PlanValue> values;  // graph values first, then values the passes add
  std::vector<RtNode> nodes;      // execution order; dead nodes are skipped by later passes
  std::vector<bool> nwc;          // per value: stored channels-last (after assign_layouts)
  int output = -1;                // the value the plan writes to the caller's output
  std::vector<std::unique_ptr<Tensor>> owned;  // constants made for this shape

  const Tensor* const_of(int id) const {
    return id < 0 ? nullptr : values[static_cast<size_t>(id)].constant;
  }
  const Tensor* float_const(int id) const {
    const Tensor* t = const_of(id);
    return (t && t->dtype == DType::kFloat32) ? t : nullptr;
  }
  bool is_runtime(int id) const {
    return id >= 0 && values[static_cast<size_t>(id)].constant == nullptr;
  }
  const Shape& shape_of(int id) const { return values[static_cast<size_t>(id)].shape; }
  int new_value(Shape shape) {
    values.push_back(PlanValue{true, nullptr, std::move(shape)});
    return static_cast<int>(values.size()) - 1;
  }
  // Keeps `t` for the plan's lifetime; steps may point into it.
  const Tensor* own(Tensor t) {
    owned.push_back(std::make_unique<Tensor>(std::move(t)));
    return owned.back().get();
  }
};

// Fills `ir` from `graph` for `input_shape`. Fails (unsupported, naming the model file and the
// node) on an operator or attribute the runtime kernels do not cover.
Status lower_graph(const Graph& graph, std::span<const int64_t> input_shape, PlanIr& ir);

// Rewrites `ir.nodes` in place (dead nodes marked, never removed) until no rule applies.
void fuse(PlanIr& ir, Backend backend);

// Optimised backend: convolutions write channels-last and converting copies are inserted where a
// consumer needs the plain layout; fills ir.nwc (all false on the reference backend).
void assign_layouts(PlanIr& ir, Backend backend);

// Where every runtime value lives during a run.
struct ArenaAssignment {
  std::vector<RtNode*> order;  // live nodes, execution order
  std::vector<int> root;       // per value: the value whose storage it shares (aliases)
  std::vector<Loc> loc;        // per root value
  size_t arena_floats = 0;

  Loc loc_of(int v) const { return loc[static_cast<size_t>(root[static_cast<size_t>(v)])]; }
};

// Places the graph input in the caller's input, ir.output in the caller's output (adding a copy
// when the output is the input itself), and every other value first-fit in an arena whose blocks
// are reused after their last reader. Pointers in the result point into ir.nodes.
ArenaAssignment assign_arena(PlanIr& ir, int input);

}  // namespace escpod::nn::detail
