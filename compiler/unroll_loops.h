// unroll_loops: replaces each loop marked unrolled by copies of its body, one per iteration.
#pragma once

#include "compiler/ir.h"

namespace tf::ir {

// Loops longer than this stay loops (marked serial) instead of bloating the code.
constexpr int64_t kMaxUnroll = 256;

// Unrolls every loop marked Unrolled whose extent is a constant of at most kMaxUnroll.
Stmt unroll_loops(const Stmt& s);

}  // namespace tf::ir
