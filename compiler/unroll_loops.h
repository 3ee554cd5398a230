// unroll_loops: replaces each loop marked unrolled by copies of its body, one per iteration.
#pragma once

#include "compiler/ir.h"

namespace tf::ir {

// Loops longer than this stay loops (marked serial) instead of bloating the code.
constexpr int64_t kMaxUnroll = 256;

// The budget of unrolled_size() for one kernel. Past it, LLVM's compile time and memory grow
// out of bounds: measured on matmul 512^3 (tile_m x tile_n x unroll_k, unroll on), 32x64x32
// (65,536) compiles in 1 s, 64x32x64 (131,072) in 6 s, 16x128x32 (65,536, wide vectors) in
// 20 s, 32x128x32 (131,072) in 115 s and 64x256x64 (1,048,576) in over 300 s at 320 MB.
constexpr int64_t kMaxUnrolledSize = int64_t{1} << 17;

// Unrolling a loop whose body holds loops (a serial loop inside an unrolled tile) or branches
// (the guards of tiles that do not divide a shape) copies them, and LLVM's time grows faster
// than linearly with a function's loops and blocks: matmul 256^3 with vectorize off (tile_n's
// loop serial inside tile_m x unroll_k copies) took 0.4 s with 64 loops, 2.4 s with 256 and
// over 150 s with 4,096; depthwise 3x3 stride 2 with vectorize off (the channel loop inside
// tile_w copies) 4.2 s with tile_w 14, 15 s with 28, 83 s with 56; matmul 97x131x67 with
// tile_m 64 x unroll_k 64, vectorize off, 9.4 s for 7,808 guarded statements, and with
// tile_m 15 x unroll_k 16 x 64 lanes 7.6 s for 960 guarded vector statements (a branch counts
// once per 16 lanes it guards). So when
// unrolling everything would leave a function more than kMaxUnrolledLoops loops or
// kMaxUnrolledBranches branches, an unrolled loop whose copies would hold more than
// kMaxCopiedLoops loops or kMaxCopiedBranches branches stays a loop (inner loops first). The
// schedule computes the same either way; kernels within the first bounds (every template's
// default config) are unrolled as before.
constexpr int64_t kMaxUnrolledLoops = 64;
constexpr int64_t kMaxUnrolledBranches = 1024;
constexpr int64_t kMaxCopiedLoops = 8;
constexpr int64_t kMaxCopiedBranches = 256;

// The straight-line size of `s` once unrolled and vectorized: each Store counts once for
// every copy the unrolled loops (those unroll_loops unrolls) and vectorized loops around it
// make; serial and parallel loops contribute their body once.
int64_t unrolled_size(const Stmt& s);

// Loop `f`'s body (or `body`, its body already rewritten) once per iteration, in order, the loop
// variable replaced by each iteration's value: its `n` iterations (a constant extent) unrolled.
Stmt unrolled_copies(const For& f, const Stmt& body, int64_t n);

// Unrolls every loop marked Unrolled whose extent is a constant of at most kMaxUnroll (and,
// past the function's bounds above, whose copies hold at most kMaxCopiedLoops loops and
// kMaxCopiedBranches branches); the others become serial loops.
// Throws UserError when the result would exceed kMaxUnrolledSize.
Stmt unroll_loops(const Stmt& s);

}  // namespace tf::ir
