// verify: checks the invariants later passes and the code generator rely on.
//
// After lowering: no tensor-expression nodes remain, every variable is bound by an enclosing
// loop or let (or is a loop variable), every load and store names an argument or an
// enclosing allocation, and every vectorized loop has been rewritten. A violation is a bug
// in a pass, so it trips TF_CHECK with the pass name.
#pragma once

#include <string>

#include "compiler/ir.h"

namespace tf::ir {

// `vectors_lowered`: whether vectorize_loops has run (then no vectorized loop may remain).
void verify(const LoweredFunc& f, const std::string& after_pass, bool vectors_lowered);

}  // namespace tf::ir
