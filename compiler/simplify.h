// The simplifier and the constant range analysis it is built on.
//
// Integer expressions are normalized into linear form (sum of coefficient * atom, plus a
// constant), which cancels terms like `(io*4 + ii) - io*4`. Division and modulo by a positive
// constant use the ranges of the loop variables in scope, so `(jo*32 + ji)/32` becomes `jo`
// when 0 <= ji < 32. Vector expressions fold Ramp/Broadcast arithmetic, so a vectorized
// index stays a Ramp the code generator can turn into one contiguous load.
//
// The simplifier never changes what a program computes; floating-point arithmetic is left
// alone apart from broadcasting.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "compiler/ir.h"

namespace tf::ir {

// An inclusive range of integer values.
struct Interval {
  int64_t lo, hi;
};

// Known ranges of variables, by variable node.
using RangeMap = std::map<const ExprNode*, Interval>;

// The range of an integer expression (per lane, for vectors), or nullopt when unknown.
std::optional<Interval> const_bounds(const Expr& e, const RangeMap& ranges);

Expr simplify(const Expr& e, const RangeMap& ranges = {});

// The multiple that every value of the integer expression `e` is of, from its constants'
// factors (0: only the value 0; 1 when nothing is known).
int64_t known_multiple(const Expr& e);

// A vector index whose lanes differ from its first by constants (a Ramp divided and scaled:
// the channels of a group, lane k reading (k / g) * g + i): the first lane's index, scalar, and
// each lane's offset from it. nullopt where a lane's offset is not a constant, or the index
// holds vector values other than Ramps and Broadcasts (loads, calls).
struct LaneOffsets {
  Expr first;
  std::vector<int64_t> offsets;
};
std::optional<LaneOffsets> lane_offsets(const Expr& index);

// Simplifies a statement; loop variables get their ranges from the loops that bind them.
// Loops of extent 1 are replaced by their body, loops of extent 0 and branches that are
// never taken are removed.
Stmt simplify(const Stmt& s, const RangeMap& ranges = {});

}  // namespace tf::ir
