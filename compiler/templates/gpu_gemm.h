// The GPU GEMM hierarchy that dense.cuda/rocm and the implicit-GEMM convolutions share: a
// block of warps_m x warps_n warps computes a block_m x block_n tile of C; a warp's threads
// form a lanes_m x lanes_n grid; each thread a tile_m x tile_n register tile of outer
// products, over the reduction in block_k steps; the block's A and B tiles staged in shared
// memory (A K-major, rows padded), optionally double-buffered with cp.async (see
// compiler/templates/dense_gpu.cc for the full story).
#pragma once

#include <string>
#include <vector>

#include "compiler/templates/common.h"

namespace tf::templates {

struct GemmHierarchy {
  int64_t warp = 32, lanes_m = 1, lanes_n = 32, warps_m = 1, warps_n = 1, tile_m = 1, tile_n = 1, block_k = 1;
  int64_t threads() const { return warp * warps_m * warps_n; }
  int64_t block_m() const { return warps_m * lanes_m * tile_m; }
  int64_t block_n() const { return warps_n * lanes_n * tile_n; }
};

// A GEMM's extents: `batches` independent (M x K) * (K x N) products.
struct GemmShape {
  int64_t batches = 1, m = 1, n = 1, k = 1;
  // The most rows a block may take (0: no bound other than C's): a grouped convolution's rows
  // are a group's filters split off the output channels, and a block of more reaches, for bound
  // inference, into the next groups (its shared tiles would hold their filters and images).
  int64_t max_block_m = 0;
};

// The GEMM each part of a split-K schedule computes: `parts` times as many products, each
// over K / parts.
GemmShape split_shape(const GemmShape& g, int64_t parts);

// Split-K (`split_k` parts > 1): the graph `g` (its reduction `acc` over one axis of extent
// K, which `parts` divides; its axes (batch?, rows, cols)) redefined as
//   acc[s][...]      = the same sum over kk in [0, K/parts), at k = s * K/parts + kk
//   acc_partial[s][...] = acc[s][...]         (a workspace in global memory)
//   acc_sum[...]     = sum over s of acc_partial[s][...], s in order (deterministic)
// and the output (its epilogue and fused tail) reading acc_sum where it read acc; acc keeps
// the old reduction's name (<output>_acc where that was the output, which acc_sum then is). Lowered
// for a GPU, the partial sums and the final sum are two kernels one call launches in turn
// (compiler/gpu.h split_gpu_program).
OpGraph split_k_graph(const OpGraph& g, int64_t parts);

// `g` (its reduction `acc`, not yet split) with the output and fused tail reading the sum over
// the parts of `partial` ([parts][acc's axes...], a workspace), in order, where they read
// `acc`: the sum is `<acc>_sum` (`<acc>` being the name the split reduction takes), or the
// output itself when that was the reduction. `acc` is left to the caller.
OpGraph with_parts_summed(const OpGraph& g, const ir::Tensor& partial);

// The second kernel of a split-K call (a graph of with_parts_summed, its `acc` the split
// reduction): the output stage (the parts' sum and the epilogue) one element per thread, the
// parts in order.
void schedule_split_k_sum(Schedule& s, const OpGraph& g);

// Loops of a shared stage (the region one step of K needs for the whole block) as copies by
// all threads: the innermost dimension split by `lanes` and vectorized (4 floats or 8 halves:
// 128-bit loads, and with cp.async 128-bit copies, where the rows allow: `vec`), the rest fused
// and dealt to the threads, consecutive threads on consecutive vectors (coalesced). Returns the
// loop of rounds each thread runs (serial: a caller may unroll it).
Expr cooperative_copy(Stage& sh, int64_t threads_y, int64_t threads_x, bool vec, int64_t lanes = 4);
// The storage order of a GEMM operand ([M][K] or [batch][M][K]) kept as in memory.
std::vector<size_t> as_is(size_t rank);

// A convolution (conv2d_nchw, conv2d_nhwc) as an implicit GEMM (compiler/templates/conv2d_gpu.cc):
// acc[n][k][p] = sum_q weight[k][q] * col[n][q][p] (NCHW; NHWC: acc[n][p][k] = sum_q
// col[n][p][q] * weight[q][k]), col the im2col matrix (a stage), weight input 1 read as the
// GEMM's matrix, the output reading acc through `acc_view`. `template_id` names the template
// in refusals. And the GEMM's extents (batches = N).
OpGraph conv_gemm_graph(const OpGraph& g, const std::string& template_id);
GemmShape conv_gemm_shape(const OpGraph& g);

// Threads of a warp (wavefront): 32 on NVIDIA and AMD gfx10+, 64 on gfx9.
int64_t gpu_warp_size(const Target& t);

// The hierarchy's knobs, their candidates, defaults and constraints. A template that has
// other knobs as well lists these among them.
const std::vector<KnobDef>& gemm_knobs();
bool is_gemm_knob(const std::string& name);
std::vector<json> gemm_int_candidates(const std::string& knob, const GemmShape& g, const Target& t);
// Every gemm knob of `c` set to the default for the shape and target (a model of waves over
// the target's multiprocessors; see dense_gpu.cc), among the configs gemm_check takes.
void gemm_default(const GemmShape& g, const Target& t, json& c);
GemmHierarchy gemm_hierarchy(const Target& t, const json& c);
std::string gemm_check(const GemmShape& g, const Target& t, const json& c);

// What schedule_gemm schedules. `out` writes C: its loops `rows` (M) and `cols` (N), and
// `batch` (null when none) bound to blockIdx.z, are its only loops; `acc`, the reduction over
// `reduce`, is computed per thread. `a` ([batch][M][K] or [M][K]) and `b` ([batch][K][N] or
// [K][N]) are the operands acc reads: inputs (staged with cache_read_shared) or stages that
// compute them (kept in shared memory themselves: an im2col tile), with `a_contiguous` /
// `b_contiguous` saying whether their innermost dimension is contiguous in global memory (the
// copies are then vectorized).
struct GemmStages {
  Stage* acc = nullptr;
  Stage* out = nullptr;
  Expr batch, rows, cols;
  std::string a, b;
  bool a_input = true, b_input = true;
  bool a_contiguous = true, b_contiguous = true;
};

void schedule_gemm(Schedule& s, const GemmStages& st, const GemmShape& g, const Target& t, const json& c);

// A template on the hierarchy: its knobs, candidates, defaults and constraints are the
// hierarchy's, for the GEMM its operator is.
//
// The template defines the GEMM (gemm_graph: the workload's own graph or another definition
// of it, e.g. a convolution's implicit GEMM) and names its operands and output axes
// (gemm_stages); with split_k > 1 the hierarchy schedules the partial sums of
// split_k_graph and a second kernel sums them.
class GemmTemplate : public ScheduleTemplate {
 public:
  using ScheduleTemplate::ScheduleTemplate;
  const std::vector<KnobDef>& knobs() const final { return gemm_knobs(); }
  std::vector<json> int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const final;
  json default_config(const OpGraph& g, const Target& t) const final;
  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const final;
  OpGraph schedule_graph(const OpGraph& g, const Target& t, const json& c) const final;
  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const final;

 protected:
  // The GEMM's extents, from the workload (the same for every graph the template schedules).
  virtual GemmShape gemm_shape(const OpGraph& g) const = 0;
  // The definition the hierarchy schedules (before any split); `g` by default.
  virtual OpGraph gemm_graph(const OpGraph& g, const Target& t, const json& c) const;
  // The operands (a, b and their flags) of gemm_graph's reduction; may inline stages that
  // compute them when `c` does not stage them in shared memory.
  virtual GemmStages gemm_operands(Schedule& s, const OpGraph& g, const json& c) const = 0;
  // Without split-K: the accumulator and the stage writing C, with its batch, row and column
  // axes (st's operands already set).
  virtual void gemm_writer(Schedule& s, const OpGraph& g, GemmStages& st) const = 0;
};

}  // namespace tf::templates
