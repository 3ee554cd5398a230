// merge_barriers: a block barrier (__syncthreads) right after another, with nothing the
// threads do between them, is dropped: the first already made every thread wait and published
// every shared-memory write before it, and the second would only wait again.
//
// Lowering puts a barrier before and after each shared stage's nest (compiler/schedule_ops.cc:
// no thread still reads the buffer's previous contents, then every thread sees the copy), so
// consecutive stages at one loop leave pairs of barriers back to back, and nested shared stages
// (a block reduction's partial results, its tree, its result) runs of them at the top of a
// kernel: a LayerNorm's kernel had 28 barriers, 13 of them right after another.
//
// A barrier before anything else the kernel does (the first of a block reduction's, at the top
// of the loop bound to blockIdx, whose each iteration is one block's whole run) waits for
// nothing either, and is dropped too.
//
// "Right after" is in straight-line code: across the structure of statements (blocks and
// allocations, which do nothing at run time), lets whose values read no memory and into loops
// bound to blockIdx (a block runs its iteration once), not across other loops or branches (a
// barrier at the start of a loop's body follows the end of the previous iteration, and one in a
// branch may not be reached by every thread). Only Barrier::Kind::Block;
// the asynchronous copies' commits and waits and every other statement are kept, and a barrier
// after any of them is kept too.
#pragma once

#include "compiler/ir.h"

namespace tf::ir {

Stmt merge_barriers(const Stmt& s);

}  // namespace tf::ir
