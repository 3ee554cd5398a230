// inline_budget: bounds on the expressions that inlining builds.
//
// compute_inline copies a stage's expression into every place its consumer reads it. A chain
// of n inlined stages is therefore an expression n levels deep, and every recursive walk of
// the IR (simplification, lowering, vectorization, code generation) descends a stack frame or
// more a level: a long enough chain exhausts the stack. A chain whose stages read their
// producer twice (LeakyRelu, Softsign, Selu: x > 0 ? x : a * x) is 2^n nodes to those walks.
// Callers that inline (a whole model's generic kernels) keep every expression within these
// bounds by computing some stages into buffers of their own instead (compute_root), as a
// compiler splits a kernel it cannot generate in one piece.
#pragma once

#include <cstdint>
#include <map>

#include "compiler/schedule.h"

namespace tf::ir {

// An expression's size as a walk of it sees it (a subexpression shared by two parents counts
// twice) and its depth in nodes.
struct ExprCost {
  int64_t nodes = 0;
  int64_t depth = 0;
};

// The bounds, measured: the largest expression among the ONNX node tests' and the torch test
// models' generic kernels is a cubic Resize's, 17,359 nodes 36 deep (the torch models' largest
// 2,959 nodes 31 deep); the recursive walks exhaust an 8 MiB stack near 10,000 levels; a chain
// of LeakyRelus at 2^15 nodes compiles in 4 s (2^16: 26 s, LLVM's share growing faster).
constexpr int64_t kMaxInlinedNodes = int64_t{1} << 15;
constexpr int64_t kMaxInlinedDepth = 256;

// A stage read more than once by one reader is inlined only while the copies add at most this
// many nodes: (reads - 1) x its nodes. Past it, it is computed once into a buffer.
constexpr int64_t kMaxDuplicatedNodes = 256;

inline bool within_inline_budget(const ExprCost& c) {
  return c.nodes <= kMaxInlinedNodes && c.depth <= kMaxInlinedDepth;
}

// The cost of `body` once the reads of the operations in `inlined` are replaced by their
// expressions, whose costs the map gives. Iterative; stops counting once past the bounds
// (the result is then over them, not exact).
ExprCost inlined_cost(const Expr& body, const std::map<const Operation*, ExprCost>& inlined);

// For a schedule whose stages are marked inline or root as the caller wants them: turns inline
// stages into root ones (computed into a buffer of their own, each before its readers) where
// inlining them would take a stage's expression past the bounds. Returns the stages it made
// root, in dependency order; the caller schedules their loops. A stage that a reader reads
// more than once is made root as soon as its copies would add more than kMaxDuplicatedNodes.
// Throws UserError naming the stage when its own expression, with nothing inlined, is past
// the bounds.
std::vector<Stage*> bound_inlining(Schedule& sch);

}  // namespace tf::ir
