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

// The budget of unrolled_loops() for one kernel: loops that unrolling copies (a serial loop
// inside an unrolled one) cost LLVM far more than straight-line code (its loop analyses grow
// faster than linearly with the loops of a function). Measured on matmul 256^3 with
// vectorize off (tile_n's loop serial inside tile_m x unroll_k copies): 64 loops compile in
// 0.4 s, 256 in 2.4 s, 512 in 6 s, 1024 in 21 s, 4096 in over 150 s.
constexpr int64_t kMaxUnrolledLoops = 512;

// The loops of `s` once unrolled: each serial or parallel loop counts once for every copy the
// unrolled loops around it make.
int64_t unrolled_loops(const Stmt& s);

// The straight-line size of `s` once unrolled and vectorized: each Store counts once for
// every copy the unrolled loops (of constant extent up to kMaxUnroll) and vectorized loops
// around it make; serial and parallel loops contribute their body once.
int64_t unrolled_size(const Stmt& s);

// Unrolls every loop marked Unrolled whose extent is a constant of at most kMaxUnroll.
// Throws UserError when the result would exceed kMaxUnrolledSize or kMaxUnrolledLoops.
Stmt unroll_loops(const Stmt& s);

}  // namespace tf::ir
