// gpu_reduction: reductions with few outputs over long rows, spread over a GPU's threads.
//
// A GPU's default schedule (graph/model_compiler.cc) runs one thread per output element, so
// a reduction with few outputs and a long reduction leaves the GPU nearly idle, each thread
// looping over its whole row (a LayerNorm's mean over BERT's 768 features: 128 threads, one
// block, for 132 multiprocessors). GpuReductionSplitter rebuilds such a reduction one of two
// ways:
//
//  - A block per output (its row): `name_acc` gives each of the block's threads every
//    threads-th element of the flattened reduction axes (thread t reads t, t + threads, ...:
//    neighbouring threads read neighbouring elements; up to 16 of them unrolled, their loads
//    in flight at once), accumulated in a register and kept in shared memory by
//    `name_shared`; then a tree in shared memory, `name_treeH`, each level's thread j < H
//    combining elements j, j + H, ..., j + 7H of the one before (fan-in 8: a barrier a level,
//    one level for 32 to 128 threads), and the block's first thread combines the last H <= 16
//    (deterministic: no atomics; two barriers from the partial results to the result where a
//    tree of halving levels took log2(threads)). One kernel, as before;
//    schedule_block_reduction gives it its schedule.
//  - Outputs of rank 0 (no row to give a block) and rows too long for one block: split as
//    split-K splits a GEMM: `name_part` reduces `parts` slices of the flattened reduction
//    axes per output element (a kernel of outputs x parts threads), and `name` reduces the
//    slices in order. Both are stages at root, so kernels of their own (compiler/gpu.h
//    split_gpu_program), the slices a workspace. Each such split adds a kernel to the call:
//    at most `budget` of them.
//
// Either way, the elements past the end of the reduction (a tail) contribute the combiner's
// identity, and the rebuilt stage keeps the reduction's name, shape and result.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "compiler/schedule.h"
#include "compiler/te_rebuild.h"

namespace tf {

class GpuReductionSplitter : public ir::StageRebuilder {
 public:
  // `threads`: about how many threads fill the GPU (reductions with at least as many outputs
  // stay one thread per output); `budget`: how many kernels splits may add.
  GpuReductionSplitter(int64_t threads, int budget) : threads_(threads), budget_(budget) {}

  // A reduction computed by a block per output: its per-thread accumulation, the stage that
  // keeps it in shared memory, and the block's threads.
  struct BlockReduction {
    ir::Tensor acc, shared;
    std::vector<ir::Tensor> tree;  // the levels after `shared`: threads/2, ..., 2 elements
    int64_t threads = 0;
  };
  // The block reduction whose combining stage is `op`, or null.
  const BlockReduction* block_reduction(const ir::Operation* op) const;
  // Whether `op` is a block reduction's accumulation or shared stage (scheduled with it).
  bool is_block_part(const ir::Operation* op) const { return parts_.count(op) > 0; }

  // A block has 32 to 128 threads (a power of two), each reducing at least 8 elements and at
  // most 256: longer rows are split instead. The tree's levels combine kTreeFanIn values each
  // until at most kMaxFirstThread are left, which the first thread combines: with 32 to 128
  // threads, one level (to 4, 8 or 16 values).
  static constexpr int64_t kMinBlockThreads = 32, kMaxBlockThreads = 128, kMaxPerThread = 256;
  static constexpr int64_t kTreeFanIn = 8, kMaxFirstThread = 16;

 protected:
  ir::Tensor finish(ir::Tensor rebuilt) override;

 private:
  ir::Tensor block_reduce(const ir::Tensor& op, int64_t threads);

  int64_t threads_;
  int budget_;
  std::map<const ir::Operation*, BlockReduction> blocks_;
  std::set<const ir::Operation*> parts_;
};

// A block reduction's schedule: the outputs of `r` (its combining stage) fused, a block each;
// the accumulation in the block's threads, a register each, kept in shared memory at the
// block's loop; the tree's levels in shared memory; the last combination in the block's
// first thread.
void schedule_block_reduction(ir::Schedule& sch, ir::Stage& r, const GpuReductionSplitter::BlockReduction& b);
// The parts of block reduction `b` (its tree, shared partial results and accumulation)
// computed for `r` at r's loop `at`, each level at the loop of the one that reads it (its
// innermost spatial loop), bound to the threads it has. `rank`: r's outputs' rank.
void schedule_block_parts(ir::Schedule& sch, ir::Stage& r, const ir::Expr& at,
                          const GpuReductionSplitter::BlockReduction& b, size_t rank);

}  // namespace tf
