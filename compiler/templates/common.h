// What the schedule templates share: the stages every operator graph has (compiler/operators.h)
// and how they are tiled, split candidates, and the CPU and GPU constraint rules. Only the
// templates include this; everything else goes through compiler/schedule_templates.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/operators.h"
#include "compiler/schedule.h"
#include "compiler/schedule_templates.h"
#include "compiler/target.h"

namespace tf::templates {

using json = nlohmann::json;
using ir::Expr;
using ir::Schedule;
using ir::Stage;

constexpr KnobKind kSplit = KnobKind::Split;
constexpr KnobKind kReorder = KnobKind::Reorder;

inline int64_t out_extent(const OpGraph& g, size_t dim) { return g.output->shape[dim]; }

// The most statements (vector or scalar) an unrolled register tile may have before the
// tuner stops proposing it: larger ones take seconds to compile and are never the fastest.
// Measured over 145 random matmul 512^3 configs (AVX-512): the 17 above 1024 statements all
// ran at 57 GFLOPS or less (the best: 380) and took 82% of the compile time, up to 34 s each.
constexpr int64_t kMaxTileStatements = 1024;

// The stage that accumulates the reduction (made with cache_write when the reduction is the
// output) and the stage that writes the output. A `layout` reorders the accumulator's
// dimensions (see Schedule::cache_write); the reduction then always gets a local stage, and
// with an epilogue the reduction's own stage is inlined into it.
std::pair<Stage*, Stage*> acc_and_writer(Schedule& s, const OpGraph& g, const std::vector<size_t>& layout = {});

// Packs `input` for the template (the stage to schedule), or, when the caller passes it
// packed already (OpGraph::prepacked), only reads that layout (no stage: nullptr).
Stage* pack_input(Schedule& s, const OpGraph& g, const std::string& input, size_t dim, int64_t block);

// The accumulating stage of a dense template (axes: `batch_axes` leading ones, rows, columns):
// K split by `uk` (the outer loop returned), then the register tile's rows (unrolled) and
// columns (vectorized) innermost.
Expr schedule_dense_acc(Stage& acc, size_t batch_axes, int64_t uk, bool vec, bool unroll);

// A dense template's output and accumulator for config `c` (tile_m, tile_n, unroll_k, order,
// vectorize, unroll, parallel): the output tiled tile_m rows (unrolled) x tile_n columns
// (vectorized), the tile loops in `order`, the outer one parallel (fused with the batch axes),
// and the accumulator computed at the inner tile loop (schedule_dense_acc).
void schedule_dense_tiles(Stage& out, Stage& acc, size_t batch_axes, const json& c);

// The axis a split knob tiles: its extent, and whether the tile is vectorized (then its
// candidates are multiples of the vector width) or a row count of a register tile.
struct SplitAxis {
  int64_t extent = 1;
  bool vector = false;
  bool rows = false;
};

// Factors worth trying for an axis: powers of two, the divisors of the extent (no tail),
// multiples of the vector width (vector axes) or every count up to 16 (register rows), and
// the extent itself, all at most the extent and the knob's bound.
std::vector<int64_t> split_candidates(const SplitAxis& a, int64_t max, int64_t lanes);

// A CPU template: its split knobs' candidates come from the axis each tiles, and its configs
// are pruned by the size of their register tile.
class CpuTemplate : public ScheduleTemplate {
 public:
  using ScheduleTemplate::ScheduleTemplate;
  std::vector<json> int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const final;
  // A register tile that needs more vector registers than the target has (it would spill),
  // or an unrolled body past kMaxTileStatements.
  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const final;

 protected:
  // The axis the split knob `knob` tiles on target `t`.
  virtual SplitAxis split_axis(const OpGraph& g, const Target& t, const std::string& knob) const = 0;
  // The register tile of config `c`: `rows` (unrolled) x `width` (vectorized, in elements)
  // accumulators, unrolled `reduce` deep; or a refusal of its own in `why`.
  struct Tile {
    int64_t rows = 1, width = 1, reduce = 1;
    std::string why;
    // Vector registers the tile keeps live besides its accumulators; -1: one row of loaded
    // vectors and one broadcast.
    int64_t operands = -1;
  };
  virtual Tile register_tile(const OpGraph& g, const Target& t, const json& c) const = 0;
  // The knobs every CPU template ends with (vectorize, unroll, parallel: all on).
  static void default_annotations(json& c);
};

// A blocked (NCHWc) convolution's output and accumulator for config `c` (tile_w, tile_kb,
// reduce_order, vectorize, unroll, parallel): the output tiled tile_kb channel blocks x tile_w
// columns (unrolled), each block vectorized, batch, channel tiles and rows on all threads; the
// accumulator at the column tile, its reduction (channel blocks, window, then the block's
// inner reduction axis) in reduce_order. conv2d_nchwc.cpu and qconv2d_nchwc.cpu. `flat`: the
// output's rows and columns are tiled as one run of positions (tile_w of them), the
// accumulator's positions one axis (conv2d_nchwc.cpu's 1x1 convolutions). `vectors`: the
// weight vectors of one channel block (block_vectors). `slice_positions`: the threads take
// slices of the positions (rows, or the flat run's tiles) for every channel tile
// (Stage::parallel_slices) instead of runs of channel tiles (slices_positions says when).
// `chunk_positions` > 0: the flat run in chunks of about that many positions (whole tiles),
// outside the channel tiles, so that each channel tile reads a chunk of the input from the
// cache rather than the whole input from memory (conv2d_nchwc.cpu says when).
// `prefetch_weights`: the name of the weights input, which each step of the outermost
// reduction loop then also prefetches as the next output-channel tile reads it at that step
// (Stage::prefetch; empty: no prefetching).
void schedule_nchwc_tiles(Stage& out, Stage& acc, const json& c, int64_t vectors, bool flat = false,
                          bool slice_positions = false, int64_t chunk_positions = 0,
                          const std::string& prefetch_weights = "");

// Whether a blocked convolution's threads should take slices of its positions rather than
// runs of its output-channel tiles (schedule_nchwc_tiles): where its input is larger than its
// weights. Each channel tile reads the whole input; run by channel tiles, every thread reads
// it all once per tile, which past its core's cache comes from further out each time (and
// half of it was written by the other cores); by slices, a thread reads its slice once into
// its own cache for all tiles, and the weights, the smaller operand, are what it reads again.
// ResNet-50 at 2 threads on a 2-core Zen 5: the reducing 1x1 layers at 28 x 28 and 56 x 56
// 1.7-1.9x faster, layers with more weights than input 1.1-1.5x slower if sliced (they are not).
// One thread runs the same loops either way.
bool slices_positions(const OpGraph& g);

// The vectors (or, unvectorized, the scalars) one output channel block of a blocked
// convolution's register tile takes on target `t`.
int64_t block_vectors(const OpGraph& g, const Target& t, const json& c);

// The split knobs and register tile of the blocked convolution templates (those scheduled by
// schedule_nchwc_tiles): tile_w and tile_kb tile unrolled rows of the register tile; each
// channel block is its own vectors (blocks narrower than a vector waste lanes).
class NchwcConvTemplate : public CpuTemplate {
 public:
  using CpuTemplate::CpuTemplate;

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target& t, const std::string& knob) const override;
  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override;
};

// Register tiles of full vectors of `lanes` (`vectors` of them when the extent allows), or a
// tile of exactly the extent when it is narrower than one vector.
int64_t vector_tile(int64_t extent, int64_t vectors, int64_t lanes);

// The padded copy of an NCHW input (or NCHWc: `blocked`), computed at root in parallel and
// vectorized, or inlined (inline_pad).
void schedule_pad(Schedule& s, const OpGraph& g, const json& c, int lanes, bool blocked = false);

// A GPU template: thread counts and register tiles as knobs (threads_*, tile_*), pruned by
// the block's thread limit, registers per thread, shared memory and unrolled size.
class GpuTemplate : public ScheduleTemplate {
 public:
  using ScheduleTemplate::ScheduleTemplate;
  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const final;

 protected:
  // Bytes of shared memory a block of config `c` stages (0 without shared=true).
  virtual int64_t shared_bytes(const OpGraph& g, const json& c) const = 0;
  // The copies of the register tile that `unroll` makes (the unrolled loops around it).
  virtual int64_t unrolled_steps(const OpGraph& g, const json& c) const = 0;
  // Powers of two for thread counts (warps and wavefronts come in them), small register
  // tiles, unroll factors that are powers of two; none past `extent`, the extent it splits.
  static std::vector<json> gpu_candidates(const KnobDef& k, int64_t extent);
  // Per block: threads with `tile` outputs each along `extent`, doubled while twice the
  // block still fits the extent, up to `most`.
  static int64_t threads_for(int64_t extent, int64_t tile, int64_t most);
};

// Stages `input` in shared memory at loop `at` of `reader`: the region one iteration needs
// for the whole block, copied cooperatively by the block's threads_y x threads_x threads,
// consecutive threads taking consecutive elements (coalesced reads).
void stage_shared(Schedule& s, const std::string& input, Stage& reader, const Expr& at, int64_t threads_y,
                  int64_t threads_x);

}  // namespace tf::templates

namespace tf::templates {

// The output's row dimension of a dense workload: 1 for batch_matmul ([B][M][N]), else 0.
inline size_t batch_dim(const OpGraph& g) { return g.workload.op == "batch_matmul" ? 1 : 0; }

}  // namespace tf::templates

namespace tf::templates {

// `g` with its output and fused tail rebuilt (same names, axes and bodies) to read `by` where
// they read `old` (of the same shape); `by` itself may be the output.
OpGraph with_reads_replaced(const OpGraph& g, const ir::Tensor& old, const ir::Tensor& by);

// `g` computing its reduction as `acc` (another definition, e.g. over permuted or flattened
// axes): a view in the old reduction's shape and axis names, `at` giving its element at the
// old indices, is read wherever the old reduction was; the view is named as the output when
// the reduction was the output, else <reduction>_<suffix>. The result's acc is `acc`.
OpGraph with_reduction_viewed(const OpGraph& g, const ir::Tensor& acc, const std::string& suffix,
                              const std::function<Expr(const std::vector<Expr>&)>& at);

// The default register tile of an NCHWc (blocked) convolution: {channel blocks, output
// columns}. Depthwise tiles take one block. `positions`: the extent tile_w tiles when not
// the output's columns (a flat 1x1 convolution's OH x OW).
std::pair<int64_t, int64_t> blocked_tile(const OpGraph& g, const Target& t, bool depthwise, int64_t positions = 0);

// Whether a grouped NCHWc convolution's output blocks each read input channels no other
// block reads from the same start (a block holds whole groups, is exactly one group, or
// straddles groups): false when ungrouped.
bool blocks_read_own_channels(const OpGraph& g);

}  // namespace tf::templates
