// The lowering pass behind Stage::tensorize: each marked reduction loop, with the two loops of
// extent 2 inside it, becomes one warp-level product (compiler/ir.h kMmaTF32, kMmaF16,
// kMmaBF16) that reads each lane's fragments of A and B and its four accumulators, and stores
// the four results back.
//
//   for k in 0..8            // the marked loop: the product's depth
//     for h in 0..2          // rows g, g + 8 (the accumulator's stride 2)
//       for p in 0..2        // columns 2t, 2t + 1 (stride 1)
//         acc[i(h, p)] = acc[i(h, p)] + a(h, k) * b(p, k)
// becomes
//   acc[ramp(i(0, 0), 1, 4)] = mma_m16n8k8_tf32(a(0, t), a(1, t), a(0, t + 4), a(1, t + 4),
//                                               b'(t), b'(t + 4), acc[i(0, 0)] ... acc[i(0, 0) +
//                                               3])
// where a lane's operand of A is the a of its own row at the fragment's k, and its operand of
// B is the b of the lane whose columns hold the fragment's column g: b with the thread index
// moved to lane g / 2 of the same warp and p = g % 2 (so b must not depend on the lane's g).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/ir.h"

namespace tf::ir {

struct TensorizeMark {
  std::string stage;
  Expr var;
  std::string intrinsic;
};

// Replaces every marked loop of `s` (simplified first, so the nest has no guards it does not
// need); a nest that is not of the form above is a UserError naming the stage, the loop and
// what differs.
//
// Marked with a warpgroup-level product (kWgmmaF16, kWgmmaBF16), the loop of depth 16 holds,
// inside it, the warpgroup's 8-column tiles (accumulator stride 4; absent for one tile), the
// rows g, g + 8 (stride 2) and the columns 2t, 2t + 1 (stride 1), around the same update, its
// factors 16-bit values of two shared buffers (a select against +0 around one is dropped unless
// its condition uses k). The pass proves, for every warpgroup of the block (the thread index
// 128 q + l, q taken in turn, every other variable symbolic), that row r and k of A and column n
// and k of B lie at r / 8 SBO + k / 8 LBO + r % 8 * 8 + k % 8 elements from the warpgroup's first
// one (core matrices: compiler/ir.h kWgmmaF16), the same offsets for all warpgroups, 16-byte
// aligned and inside the buffer, and the accumulators at 4 j + 2 h + p; then the nest becomes
// one call on the two first elements with those byte offsets.
//
// A 16-bit product (kMmaF16, kMmaBF16) whose fragment of A (or B) is four (two) pairs of
// consecutive 16-bit values of one shared buffer, each value widened (f16_to_float,
// bf16_to_float) alone or under a select against +0 (a tile's guard), reads that fragment by
// one ldmatrix (compiler/ir.h kLdMatrix: x4 for A, x2 for B) where the pass proves, lane by
// lane, that pair j of lane (g, t) is word t of a 16-byte aligned row inside the buffer that
// lane 8 j + g can supply (the row of lane 4 g's pair; the thread index taken apart as
// 32 w + 4 g + t, every other variable an enclosing loop's, left symbolic; no index read from
// memory), and the values' guards, if any, select
// from the fragment afterwards (the rows are read whole; a row that may lie past the buffer, in
// a tile trimmed to the matrix, is one the guards discard, and its lanes read the buffer's last
// row instead); otherwise its pairs are read as they are. A TF32 product (kMmaTF32) whose
// operands of A (B) are float32 values of one shared buffer, each its own 32-bit word, reads
// them by one ldmatrix x4 (x2) where the same proof holds with a word a value (operand j of
// lane (g, t) at word t of a 16-byte row that lane 8 j + g can supply; not transposed: .trans
// moves 16-bit halves), each operand then word_float of the fragment (compiler/ir.h kWordFloat).
Stmt tensorize(const Stmt& s, const std::vector<TensorizeMark>& marks);

// After unrolling: each run of warpgroup-level products into one accumulator (consecutive
// stores of kWgmmaF16 / kWgmmaBF16 calls to the same elements, as an unrolled K chunk leaves
// them) is followed by the accumulators' kWgmmaWait, so that the products are issued back to
// back and waited for once before anything else reads them (compiler/ir.h). In a pipelined
// loop that keeps its reads in flight (Barrier::Kind::AsyncReads marks, Stage::multi_buffer),
// an iteration's products are waited for at its end with themselves still pending (so they run
// on beside the next iteration's copies), and all of them after the loop; the marks go.
Stmt insert_wgmma_waits(const Stmt& s);

// After unrolling: in each block of statements, two distinct two-matrix fragment loads (ldmatrix
// x2: B's fragments of two column tiles, or of two steps of K) of the same shared buffer become
// one four-matrix load (x4, CUTLASS's pairing of B tiles), its lanes 0-15 supplying the first's
// rows and 16-31 the second's; the products read words 0-1 and 2-3 of it. The pair's load is put
// before the first statement that let either, and each of those statements reads it instead;
// only where the loads' rows depend on nothing but the thread index and enclosing loops, and
// no statement from the first to the last that let either writes their buffer, synchronizes
// or prefetches. Loads are paired in the order they first appear; an odd one out stays as it is.
Stmt pair_fragment_loads(const Stmt& s);

// A 16-bit product's operand that widens a value held in 16 bits: `widen` (kF16ToFloat or
// kBF16ToFloat) of a scalar, alone or under a select against +0 (the padding), whose condition
// goes to `cond`. Null for any other operand.
const Call* held_16_bits(const Expr& e, const char* widen, Expr& cond);
// A TF32 product's operand held as a float32 Load, alone or under a select against +0 (its
// condition to `cond`); null for any other operand.
const Load* held_32_bits(const Expr& e, Expr& cond);

}  // namespace tf::ir
