// early_loads: a GPU block's reads of inputs that wait behind its barriers for nothing are
// issued before them.
//
// A kernel of rows (compiler/model_codegen.cc schedule_rows_gpu: a LayerNorm, a softmax)
// reduces each row in its block (partial results, barriers, a tree in shared memory), then
// computes the row's outputs in a loop bound to threadIdx.x that may read inputs the reductions
// never read (a LayerNorm's scale and bias). Left there, those loads start only after the last
// barrier: one more trip to memory at the end of the kernel, since neither LLVM nor ptxas moves
// a load across a barrier. This pass moves them to the top of the block's body.
//
// For each loop bound to threadIdx.x that comes after a block barrier in the straight-line code
// of a block (the body of the loops bound to blockIdx, through blocks, allocations and lets),
// with no store to memory outside the kernel's own buffers before it (an input may alias an
// output), the scalar loads in its body that
//   - read an input of the kernel that nothing before the loop reads (the argument buffers in
//     `inputs`, none of which the kernel writes),
//   - are evaluated whenever the statement holding them runs (not in a select's branches), and
//     sit in straight-line code or under branches (no loop, no barrier in the body),
//   - index by expressions of the loop's variable and of variables defined outside the block's
//     body alone (no load in them), the branches' conditions likewise,
// are done instead by a copy of the loop (its extent: the same threads) at the top of the
// block's body, under the same conditions, each into a register of its own (element k of a
// local buffer `<input>.early`), which the loop then reads. Equal loads share one. At most
// kMaxEarlyValues values a thread (they stay live across the reductions).
//
// Serialized emulation (compiler/gpu.h serialize_gpu_bindings) gives such a buffer, allocated in
// a block but outside its threads' loops, a copy per thread.
#pragma once

#include <set>
#include <string>

#include "compiler/ir.h"

namespace tf::ir {

constexpr int kMaxEarlyValues = 32;

Stmt early_loads(const Stmt& s, const std::set<std::string>& inputs);

}  // namespace tf::ir
