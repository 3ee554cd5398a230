// partition_loops: peels the shifted last tile off a loop.
//
// A split with the shift-inwards tail strategy indexes with `min(v*f, E - f)`. For every
// iteration but the last that is just `v*f`, but the min hides it: a packed operand is no
// longer read in aligned panels, and LLVM cannot prove contiguity. This pass rewrites
//   for (v, 0, n) body      as      for (v, 0, n - 1) body;  body[v := n - 1]
// when the body holds such a min that the range [0, n - 2] of v proves equal to its first
// operand; the simplifier then removes the mins from both copies.
#pragma once

#include "compiler/ir.h"

namespace tf::ir {

Stmt partition_loops(const Stmt& s);

}  // namespace tf::ir
