// vectorize_loops: turns each loop marked vectorized into one iteration over vector lanes.
//
// The loop variable becomes Ramp(min, 1, extent) and every expression that depends on it a
// vector (an extent of 16 or more that is not a power of two becomes one vector per
// power-of-two chunk, largest first, then the rest: 56 lanes are 32 + 16 + 8, since LLVM
// handles such wide vectors element by element; an extent of 1 is a plain substitution); the
// simplifier then folds the ramps, so contiguous accesses become plain vector loads and stores. A
// loop that cannot be vectorized exactly (a store whose address does not vary with the lanes, a
// condition that differs between lanes, an allocation inside, an extent that is not constant) is
// unrolled, its lanes as scalar copies in order, where its extent is a constant of at most
// kMaxUnrolledLanes and its body holds no loop, allocation or barrier (a register tile's guarded
// columns in a tile that does not divide the output: a serial loop would index the tile, which then
// leaves the registers: on a GPU, local memory); else it is kept as a serial loop. Either way the
// reason is recorded.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir.h"

namespace tf::ir {

// The widest vector a loop becomes; a longer vectorized loop stays a serial loop.
constexpr int64_t kMaxVectorLanes = 64;
// The longest loop that could not be vectorized that is unrolled instead of kept serial.
constexpr int64_t kMaxUnrolledLanes = 16;

// `notes`, when given, receives one line per loop not vectorized, with the reason.
Stmt vectorize_loops(const Stmt& s, std::vector<std::string>* notes = nullptr);

// Marks every vectorized loop serial; what the pipeline runs when vectorize_loops is skipped.
Stmt devectorize_loops(const Stmt& s);

}  // namespace tf::ir
