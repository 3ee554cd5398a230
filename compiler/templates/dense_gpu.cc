// dense.cuda and dense.rocm: matmul and batch_matmul on GPUs. A block of threads_m x threads_n
// threads computes a tile of C; each thread a tile_m x tile_n register tile of it,
// accumulated in registers (cache_write computed at the thread loop). Tiles that do not
// divide C shift inwards (two blocks then write the same values to the overlap) or, for
// extents smaller than a tile, are guarded.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class DenseGpu final : public GpuTemplate {
 public:
  explicit DenseGpu(const std::string& kind) : GpuTemplate("dense." + kind, 1, {"matmul", "batch_matmul"}, kind) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"threads_m", KnobType::Int, "threads per block along the rows of C (threadIdx.y)", 1024, {}, kSplit},
        {"threads_n", KnobType::Int, "threads per block along the columns of C (threadIdx.x)", 1024, {}, kSplit},
        {"tile_m", KnobType::Int, "rows of C per thread (register tile, unrolled)", 16, {}, kSplit},
        {"tile_n", KnobType::Int, "columns of C per thread (register tile, vectorized)", 16, {}, kSplit},
        {"unroll_k", KnobType::Int, "unroll factor of the reduction loop (with shared: the K tile staged)", 64, {},
         kSplit},
        {"vectorize", KnobType::Bool, "vectorize each thread's columns (vector loads and stores)", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"shared", KnobType::Bool,
         "stage the block's tiles of A and B (unroll_k deep) in shared memory, copied by all its threads", 0, {}},
    };
    return k;
  }

  std::vector<json> int_candidates(const OpGraph& g, const Target&, const KnobDef& k) const override {
    std::string name = k.name;
    size_t d = batch_dim(g);
    int64_t extent = name == "unroll_k" ? g.acc->reduce_axes[0].extent
                                        : out_extent(g, name == "threads_m" || name == "tile_m" ? d : d + 1);
    return gpu_candidates(k, extent);
  }

  // 16 x 16 threads of 4 x 4 outputs (a 64 x 64 tile per block), narrower where C is: the
  // block tile never exceeds the extent, so tails shift inwards instead of being guarded (a
  // guard on the vectorized columns leaves them scalar). Skinny outputs (M=1) give the column
  // threads what the rows cannot use, up to 256.
  json default_config(const OpGraph& g, const Target&) const override {
    size_t d = batch_dim(g);
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1);
    int64_t tm = std::min<int64_t>(m, 4), tn = std::min<int64_t>(n, 4);
    int64_t thm = threads_for(m, tm, 16);
    return {{"threads_m", thm}, {"threads_n", threads_for(n, tn, std::max<int64_t>(16, 256 / thm))}, {"tile_m", tm},
            {"tile_n", tn}, {"unroll_k", std::min<int64_t>(4, g.acc->reduce_axes[0].extent)}, {"vectorize", true},
            {"unroll", true}, {"shared", false}};
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    bool batch = batch_dim(g) == 1;
    int64_t thm = c["threads_m"], thn = c["threads_n"], tm = c["tile_m"], tn = c["tile_n"], uk = c["unroll_k"];
    bool vec = c["vectorize"], unroll = c["unroll"];
    auto [acc, out] = acc_and_writer(s, g);
    const auto& oax = out->op()->axes;
    size_t d = batch ? 1 : 0;
    auto [bi, i1] = out->split(oax[d].var, thm * tm);
    auto [ty, ri] = out->split(i1, tm);
    auto [bj, j1] = out->split(oax[d + 1].var, thn * tn);
    auto [tx, rj] = out->split(j1, tn);
    std::vector<Expr> order;
    if (batch) order.push_back(oax[0].var);
    order.insert(order.end(), {bi, bj, ty, tx, ri, rj});
    out->reorder(order);
    if (batch) out->bind(oax[0].var, "blockIdx.z");
    out->bind(bi, "blockIdx.y");
    out->bind(bj, "blockIdx.x");
    out->bind(ty, "threadIdx.y");
    out->bind(tx, "threadIdx.x");
    if (unroll) out->unroll(ri);
    if (vec) out->vectorize(rj);
    acc->compute_at(*out, tx);

    Expr ko = schedule_dense_acc(*acc, batch, uk, vec, unroll);
    if (c["shared"].get<bool>()) {
      // Per step of K: the block's rows of A and columns of B, unroll_k deep.
      for (const ir::Tensor& in : {g.inputs[0], g.inputs[1]}) stage_shared(s, in->name, *acc, ko, thm, thn);
    }
  }

 protected:
  // The block's tiles of A (rows x unroll_k) and B (unroll_k x columns), each at most the
  // whole matrix.
  int64_t shared_bytes(const OpGraph& g, const json& c) const override {
    size_t d = batch_dim(g);
    int64_t rows = std::min(c["threads_m"].get<int64_t>() * c["tile_m"].get<int64_t>(), out_extent(g, d));
    int64_t cols = std::min(c["threads_n"].get<int64_t>() * c["tile_n"].get<int64_t>(), out_extent(g, d + 1));
    int64_t depth = std::min(c["unroll_k"].get<int64_t>(), g.acc->reduce_axes[0].extent);
    return (rows + cols) * depth * 4;
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_cuda() { return std::make_unique<DenseGpu>("cuda"); }
std::unique_ptr<ScheduleTemplate> make_dense_rocm() { return std::make_unique<DenseGpu>("rocm"); }

}  // namespace tf::templates
