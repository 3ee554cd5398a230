// schedule_ops: the first lowering pass, from a Schedule to a loop nest.
//
// Each stage becomes one loop per leaf variable in its order, with the root axes recovered
// from the leaves (a split gives `outer*factor + inner`, a fuse gives `/` and `%`). Where a
// loop can run past its axis (a factor that does not divide the extent) the store is
// guarded, so any schedule computes the same values. A reduction stage gets an init nest
// right before its outermost reduction loop.
//
// Bound inference: a stage computed at loop `v` of its consumer gets a buffer that covers
// exactly what one iteration of `v` reads (interval arithmetic over the consumer's inner
// loops), allocated inside `v`. Root stages other than the output are allocated on the heap
// around the rest of the function. Reads of inlined stages are replaced by their bodies.
//
// The result still has no vector types: vectorize_loops and unroll_loops come later.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace tf::ir {

// Lowers `sch` into a function named `name` whose arguments are `inputs` followed by the
// schedule's output.
LoweredFunc schedule_to_loops(Schedule& sch, const std::vector<Tensor>& inputs,
                              const std::string& name);

// Local buffers up to this many bytes live on the stack; larger ones on the heap.
constexpr int64_t kMaxStackBytes = 64 * 1024;

}  // namespace tf::ir
