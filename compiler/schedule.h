// Schedules: how to loop over a tensor expression, separate from what it computes.
//
// A Schedule has one Stage per compute operation. A stage starts with one loop per axis
// (spatial axes, then reduction axes) and is reshaped by primitives:
//   split / tile / fuse / reorder          change the loop nest
//   vectorize / unroll / parallel          annotate one loop
//   tensorize                              replace a loop nest by a warp-level product
//   bind                                   run a loop as a GPU grid axis (blockIdx.x, threadIdx.y...)
//   compute_at / compute_inline / compute_root   place the stage relative to its consumer
//   prefetch                               ask the caches for what a later iteration reads
//   cache_write                            accumulate a reduction in a local buffer, then store
//   pack                                   copy an input into a blocked layout first
//   cache_read                             copy an input tile into GPU shared memory first
// Lowering (compiler/schedule_ops.h) turns the result into loop IR. Extents that a split
// factor does not divide are handled with guards, so every schedule computes the same values.
//
// Operations are looked up by name during lowering, so primitives that replace an operation
// (cache_write, pack) keep consumers valid by keeping names unique.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/te.h"

namespace tf::ir {

struct Relation {
  enum class Kind { Split, Fuse };
  Kind kind;
  // Split: parent -> (outer, inner) with `factor` (or `nparts` outer iterations).
  // Fuse: (outer, inner) -> fused.
  Expr parent, outer, inner, fused;
  int64_t factor = 0;
  int64_t nparts = 0;
};

class Stage {
 public:
  enum class Attach { Root, Inline, At };

  Stage(Tensor op);

  const Tensor& op() const { return op_; }
  const std::string& name() const { return op_->name; }

  // The variable of the loop named `name` (a root axis or one made by split/fuse).
  Expr axis(const std::string& name) const;

  // Splits `var` into an outer and an inner loop; the inner one runs `factor` times.
  std::pair<Expr, Expr> split(const Expr& var, int64_t factor);
  // Splits `var` into `nparts` outer iterations.
  std::pair<Expr, Expr> split_nparts(const Expr& var, int64_t nparts);
  // Splits x and y and orders the loops (x.outer, y.outer, x.inner, y.inner).
  std::vector<Expr> tile(const Expr& x, const Expr& y, int64_t fx, int64_t fy);
  // Fuses two adjacent loops, outer first, into one.
  Expr fuse(const Expr& outer, const Expr& inner);
  // Puts the given loops in this order, at the positions they occupy now.
  void reorder(const std::vector<Expr>& order);
  void vectorize(const Expr& var);
  void unroll(const Expr& var);
  void parallel(const Expr& var);
  // parallel(fused) for a loop made by fuse(outer, inner), whose threads take slices of
  // `inner` for every iteration of `outer` rather than runs of the fused range: a chunk then
  // reads the data its slice indexes (a convolution's input positions) for all of its outer
  // iterations (the output-channel tiles) while that data is in its core's cache, where runs
  // of the fused range have each thread read all of it once per outer iteration. A single
  // thread runs the same loops in the same order either way (ir::For::parallel_inner).
  void parallel_slices(const Expr& fused);
  // The inner loop of parallel_slices(var); null when `var` is not so marked.
  Expr sliced_inner(const Expr& var) const;
  // Runs the loop as the GPU grid axis `tag` (blockIdx.x/y/z, threadIdx.x/y/z): each block or
  // thread of that axis runs one iteration. Only GPU targets generate code for it.
  void bind(const Expr& var, const std::string& tag);

  // Computes this stage inside the loop `var` of its only consumer `consumer`; its buffer then
  // covers just the region one iteration of that loop needs.
  void compute_at(Stage& consumer, const Expr& var);
  void compute_inline();
  void compute_root();

  // Where the stage's buffer lives when computed at a loop: Local (the default: registers or
  // stack) or Shared (GPU shared memory: see Schedule::cache_read).
  MemScope scope() const { return scope_; }

  // Keeps this stage's buffer in GPU shared memory (TVM's set_scope("shared")): computed at a
  // loop of a kernel (compute_at), its region is what the whole block needs there, computed
  // cooperatively as a cache_read_shared copy is (e.g. an im2col tile that a GEMM reads).
  // A reduction accumulates in its buffer, so it is refused unless `one_thread_reduces`: the
  // caller binds it so that one thread accumulates each element (a block's combination of
  // partial results, split by 1 and bound to threadIdx.x), which the block's other threads
  // read after the barrier that follows a shared stage.
  void set_scope_shared(bool one_thread_reduces = false);

  // Shared stages (Schedule::cache_read_shared, set_scope_shared) only. How the buffer is laid out: `order`
  // lists the tensor's dimensions from the outermost in memory to the innermost (a
  // permutation; e.g. {1, 0} keeps a tile of A[M][K] K-major, so that a thread's rows at one
  // k are contiguous), and each row of the innermost dimension gets `pad` unused elements
  // after it (shifting the rows across shared-memory banks). With `core_matrices`, the two
  // innermost stored dimensions (rows r, then columns c: a tensor-core operand's K-major tile)
  // are held as 8 x 8 core matrices, each 64 consecutive elements (row r % 8 at 8 (r % 8)),
  // each followed by `pad` unused elements (whole 16 bytes): the matrix of rows 8i.. and
  // columns 8j.. at (64 + pad) (i C / 8 + j) for C the columns rounded up to 8 (rows likewise).
  // Hopper's wgmma reads such tiles by descriptor (compiler/ir.h kWgmmaF16: its no-swizzle
  // layout, leading byte offset 2 (64 + pad) for 16-bit elements, stride byte offset C / 8
  // times that); the pad spreads the rows a warp copies over the banks.
  void storage_layout(std::vector<size_t> order, int64_t pad = 0, bool core_matrices = false);
  // Elements of a `rows` x `cols` tile so laid out (both rounded up to 8, each matrix padded).
  static int64_t core_matrix_elements(int64_t rows, int64_t cols, int64_t pad) {
    return (rows + 7) / 8 * ((cols + 7) / 8) * (64 + pad);
  }
  const std::vector<size_t>& storage_order() const { return storage_order_; }
  int64_t storage_pad() const { return storage_pad_; }
  bool storage_core_matrices() const { return storage_core_matrices_; }
  // Shared stages computed at a loop only: `n` buffers (2 to kMaxBuffers), the tile of iteration
  // i+n-1 copied while iteration i computes on tile i, one barrier per iteration instead of two
  // (TVM's double_buffer for n = 2; CUTLASS's multistage pipelines). On sm_80 and later the
  // copies are asynchronous (cp.async): the thread goes on computing while n-1 tiles arrive.
  // With `reads_in_flight` 1, the tile's readers are asynchronous too (warpgroup-level
  // products, which the lowering waits for one iteration late: Barrier::Kind::AsyncReads), so
  // iteration i's reads may run on while iteration i+1 copies and computes: the copy runs one
  // tile less ahead (tile i+n-2, into the buffer iteration i-2 read), and n must be 3 or more.
  void multi_buffer(int n, int reads_in_flight = 0);
  // Enough for a GEMM of a short K to have all its tiles in flight at once (cuBLAS's Hopper
  // kernels for a BERT layer's 128-row GEMMs keep 13 K chunks of 64 in flight).
  static constexpr int kMaxBuffers = 16;
  void double_buffer() { multi_buffer(2); }
  int buffers() const { return buffers_; }
  int reads_in_flight() const { return reads_in_flight_; }

  // Splits of this stage that do not divide their extent guard their last tile (Halide's
  // GuardWithIf) instead of shifting it inwards to overlap the previous one (the default for
  // stages that are not reductions): for tiles whose position must stay a multiple of the
  // factor, as a tensorized accumulator's warp tiles must.
  void guard_tails() { guard_tails_ = true; }
  bool guards_tails() const { return guard_tails_; }

  // Replaces the reduction loop `var` and the two loops of extent 2 directly inside it by
  // one warp-level product `intrinsic` (compiler/ir.h kMmaTF32, kMmaF16, kMmaBF16) per
  // iteration of the loops around it (TVM's tensorize, for warp-collective instructions). The
  // nest must be the product's step: `var` over its depth K, one inner loop over the rows g and
  // g + 8 and the other over the columns 2t and 2t + 1 of a 16 x 8 tile of the accumulator
  // (lane l of the warp: g = l / 4, t = l % 4, the thread's index in its block modulo 32, x
  // fastest), holding those four values contiguously (rows' stride 2, columns' 1), its update
  // `acc += a * b` with `a` not depending on the column loop and `b` not on the row loop.
  // Lowering (compiler/tensorize.h) loads each lane's fragments by substituting, into a and b,
  // the places the instruction's layout gives them; a schedule that permutes the
  // accumulator's coordinates so that each lane's fragment elements are its own tile is what
  // makes this hold (compiler/templates/dense_tc_gpu.cc). Not every violation can be seen in
  // the IR: the emulated warps (tests) compute the product from the fragments as the hardware
  // does, so a wrong arrangement gives wrong results there.
  void tensorize(const Expr& var, const std::string& intrinsic);
  // The loops tensorize marked, with their products.
  const std::vector<std::pair<Expr, std::string>>& tensorized() const { return tensorized_; }

  // Software prefetching (Halide's prefetch): at the top of each iteration of leaf `at`, a
  // prefetch (ir::Prefetch) of every cache line of `input` that this iteration of `at` reads,
  // taken `offset` (> 0) iterations of loop `from` further on: `from` is `at` or a loop around
  // it, of this stage or of the stages it is computed at. Skipped where that iteration does
  // not exist. The lines are those of the box of elements the iteration reads (its bounds
  // inferred as compute_at's regions are), whose outer dimensions are looped over and whose
  // inner run is one range of lines. For data that a loop's next tile will read from memory
  // while this one computes from the caches (a convolution's next output-channel tile of
  // weights, which every position tile of that channel tile then reuses): the hardware's
  // prefetchers see only the stream being read now. A hint: results are the same without it.
  struct Prefetching {
    std::string input;
    Expr at, from;
    int64_t offset;
  };
  void prefetch(const std::string& input, const Expr& at, const Expr& from, int64_t offset);
  const std::vector<Prefetching>& prefetches() const { return prefetches_; }

  Attach attach() const { return attach_; }
  const Stage* attach_stage() const { return attach_stage_; }
  const Expr& attach_var() const { return attach_var_; }
  const std::vector<Expr>& leaves() const { return leaves_; }
  const std::vector<Relation>& relations() const { return relations_; }
  ForKind kind_of(const Expr& var) const;
  bool is_reduce_var(const Expr& var) const;
  std::string var_name(const Expr& var) const;

 private:
  friend class Schedule;
  void check_leaf(const Expr& var, const char* primitive) const;
  size_t leaf_index(const Expr& var, const char* primitive) const;
  Expr new_var(const std::string& name, bool reduce);
  // One of factor (inner extent) or nparts (outer extent) is set, the other is 0.
  std::pair<Expr, Expr> split_impl(const Expr& var, int64_t factor, int64_t nparts);

  Tensor op_;
  Attach attach_ = Attach::Root;
  MemScope scope_ = MemScope::Local;
  std::vector<size_t> storage_order_;
  int64_t storage_pad_ = 0;
  bool storage_core_matrices_ = false;
  int buffers_ = 1;
  int reads_in_flight_ = 0;
  bool guard_tails_ = false;
  const Stage* attach_stage_ = nullptr;
  Expr attach_var_;
  std::vector<Expr> leaves_;
  std::vector<Expr> all_vars_;
  std::vector<Relation> relations_;
  std::vector<std::pair<Expr, std::string>> tensorized_;
  std::vector<Prefetching> prefetches_;
  std::map<const ExprNode*, ForKind> kinds_;
  std::map<const ExprNode*, Expr> sliced_;  // parallel_slices: fused -> inner
  std::map<const ExprNode*, bool> reduce_;
};

class Schedule {
 public:
  // A schedule for every compute operation that `output` depends on.
  explicit Schedule(const Tensor& output);

  Stage& operator[](const Tensor& t);
  Stage& stage(const std::string& name);
  bool has_stage(const std::string& name) const;
  const Tensor& output() const { return output_; }
  // Stages in dependency order: every stage after the stages it reads.
  std::vector<Stage*> stages();
  // Inputs (placeholders) by name.
  const std::map<std::string, Tensor>& placeholders() const { return placeholders_; }

  // For a reduction stage `t`: a new stage `<t>.local` accumulates the reduction, and `t`
  // becomes a copy of it. Returns the new tensor; compute_at it into `t` to keep the
  // accumulators in registers. `layout`, when given, orders the local buffer's dimensions:
  // dimension i of `<t>.local` is axis layout[i] of `t` (so that the axis vectorized in the
  // local stage can be its innermost, contiguous one whatever `t`'s own layout).
  Tensor cache_write(const Tensor& t, const std::vector<size_t>& layout = {});

  // Copies input `input` into a blocked layout where dimension `dim` is split into
  // ceil(extent/block) blocks and the block offset becomes the innermost dimension; e.g.
  // B[K][N] with dim=1, block=16 becomes B.pack[N/16][K][16] (zero-filled past N). Every
  // reader of `input` reads the packed copy instead. Returns the packed tensor's stage.
  Stage& pack(const std::string& input, size_t dim, int64_t block);
  // The same layout, but the caller passes the packed copy (input `<input>.pack`, found in
  // placeholders()) instead of `input`: a compiled model packs constant weights once, at
  // compile time (pack_layout in compiler/operators.h computes it).
  void pack_given(const std::string& input, size_t dim, int64_t block);
  struct Packing {
    std::string input;
    size_t dim;
    int64_t block;
    bool given;
  };
  const std::vector<Packing>& packings() const { return packs_; }

  // A stage `<input>.shared` that copies input `input`; every reader reads the copy instead.
  // Computed at a loop of a GPU kernel (compute_at), its buffer lives in the block's shared
  // memory and covers what one iteration of that loop needs for the whole block (thread
  // indices relaxed), loaded cooperatively: bind its loops to the block's threadIdx axes and
  // each thread copies its part. Lowering puts a barrier before the copy (the previous tile
  // is no longer read) and after it (the tile is complete).
  Stage& cache_read_shared(const std::string& input);
  // cache_read_shared whose copy holds each value rounded to a 16-bit float (to nearest, ties to
  // even; bfloat16 if `bfloat16`, else IEEE float16), as its uint16 bits (ir::kFloatToF16 /
  // kFloatToBF16); every reader widens the copy back (kF16ToFloat / kBF16ToFloat, exact). Half
  // the shared memory and the bytes each read moves, for readers that round what they read to
  // that type anyway (a tensor-core product's operands). A float32 input only.
  Stage& cache_read_shared_16(const std::string& input, bool bfloat16);
  // The same for a computed stage `s` (not a reduction, float32): its values stored rounded to
  // 16-bit floats as uint16 bits, every reader widening them back (an im2col tile computed
  // into shared memory for a tensor-core product).
  void store_16_bits(Stage& s, bool bfloat16);

 private:
  void replace_reads(const std::string& name,
                     const std::function<Expr(const TensorRead*)>& rewrite);
  void set_op(Stage& s, Tensor op);
  Tensor packed_layout(const std::string& input, size_t dim, int64_t block, bool given);
  // cache_read_shared, the copy through `narrow` and its readers through `widen` (both null:
  // as is).
  Stage& cache_shared(const std::string& input, const char* narrow, const char* widen);

  Tensor output_;
  std::vector<std::unique_ptr<Stage>> stages_;  // in dependency order
  std::map<std::string, Tensor> placeholders_;
  std::vector<Packing> packs_;
};

// Loop `var` of stage `s` (`extent` iterations) unrolled: whole up to `whole` iterations (8
// for unroll_up_to_8), else its inner part of 8, 4 or 2 iterations (the most that divide it;
// none: left as it is). GPU codegen unrolls nothing the schedule does not
// (compiler/codegen_gpu.cc), and a thread's loads in an unrolled loop are in flight together
// instead of one after another. The loops that replace `var`, outermost first.
std::vector<Expr> unroll_up_to(Stage& s, const Expr& var, int64_t extent, int64_t whole);
inline std::vector<Expr> unroll_up_to_8(Stage& s, const Expr& var, int64_t extent) {
  return unroll_up_to(s, var, extent, 8);
}

}  // namespace tf::ir
