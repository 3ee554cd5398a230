// depthwise_conv2d.cuda and depthwise_conv2d.rocm: depthwise convolutions (NCHW) on GPUs, as
// direct convolutions (the other convolutions are implicit GEMMs: conv2d_gpu.cc). Blocks over
// (batch x row, channel tiles, column tiles), a block of threads_k x threads_w threads over
// register tiles of tile_k channels x tile_w columns, the reduction accumulated per thread.
// Padding is read through a select (a padded copy would be a stage outside the grid). (Until
// dense v2 this template, conv2d.cuda.v1, scheduled every convolution; the code for NCHW and
// NHWC stays, unregistered for them.)
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

// The output axes a GPU convolution tiles: channels, columns, and the row (fused with the
// batch into blockIdx.z).
struct ConvAxes {
  size_t k, w, h;
};
ConvAxes conv_axes(const OpGraph& g) {
  return g.workload.op == "conv2d_nhwc" ? ConvAxes{3, 2, 1} : ConvAxes{1, 3, 2};
}

class DepthwiseConv2dGpu final : public GpuTemplate {
 public:
  explicit DepthwiseConv2dGpu(TargetKind kind)
      : GpuTemplate(std::string("depthwise_conv2d.").append(kind_name(kind)), 2,
                    {"depthwise_conv2d_nchw"}, kind) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"threads_k", KnobType::Int, "threads per block along the output channels (threadIdx.y)", 1024, {}, kSplit},
        {"threads_w", KnobType::Int, "threads per block along the output columns (threadIdx.x)", 1024, {}, kSplit},
        {"tile_k", KnobType::Int, "output channels per thread (register tile)", 16, {}, kSplit},
        {"tile_w", KnobType::Int, "output columns per thread (register tile)", 16, {}, kSplit},
        {"unroll", KnobType::Bool, "unroll the filter window (the register tile always is)", 0, {}},
        {"shared", KnobType::Bool,
         "stage the block's weights in shared memory (per input channel; depthwise: the whole window), copied by "
         "all its threads",
         0, {}},
    };
    return k;
  }

  std::vector<json> int_candidates(const OpGraph& g, const Target&, const KnobDef& k) const override {
    ConvAxes ax = conv_axes(g);
    return gpu_candidates(k, out_extent(g, std::string(k.name).back() == 'k' ? ax.k : ax.w));
  }

  // 4 channels x 2 columns per thread, up to 32 threads along the row and 256 in all; the
  // filter window a loop (v1's default, which unrolled the tile only: the same code).
  json default_config(const OpGraph& g, const Target&) const override {
    ConvAxes ax = conv_axes(g);
    int64_t k = out_extent(g, ax.k), w = out_extent(g, ax.w);
    int64_t tk = std::min<int64_t>(k, 4), tw = std::min<int64_t>(w, 2);
    int64_t thw = threads_for(w, tw, 32);
    return {{"threads_k", threads_for(k, tk, std::max<int64_t>(1, 256 / thw))},
            {"threads_w", thw},
            {"tile_k", tk},
            {"tile_w", tw},
            {"unroll", false},
            {"shared", false}};
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    int64_t thk = c["threads_k"], thw = c["threads_w"], tk = c["tile_k"], tw = c["tile_w"];
    bool unroll = c["unroll"];
    if (g.pad) s.stage(g.pad->name).compute_inline();
    auto [acc, out] = acc_and_writer(s, g);
    ConvAxes ax = conv_axes(g);
    const auto& o = out->op()->axes;
    auto [bk, k1] = out->split(o[ax.k].var, thk * tk);
    auto [ty, rk] = out->split(k1, tk);
    auto [bw, w1] = out->split(o[ax.w].var, thw * tw);
    auto [tx, rw] = out->split(w1, tw);
    out->reorder({o[0].var, o[ax.h].var, bk, bw, ty, tx, rk, rw});
    Expr rows = out->fuse(o[0].var, o[ax.h].var);
    out->bind(rows, "blockIdx.z");
    out->bind(bk, "blockIdx.y");
    out->bind(bw, "blockIdx.x");
    out->bind(ty, "threadIdx.y");
    out->bind(tx, "threadIdx.x");
    // The register tile always unrolled: a loop over it would index the tile, which would then
    // live in local memory (until v2, unroll=false did that: 16 to 128 bytes of stack). `unroll`
    // unrolls the filter window.
    out->unroll(rk);
    out->unroll(rw);
    acc->compute_at(*out, tx);
    const auto& a = acc->op()->axes;
    std::vector<Expr> order = {a[0].var, a[ax.h].var};
    for (const ir::IterVar& r : acc->op()->reduce_axes) order.push_back(r.var);
    order.insert(order.end(), {a[ax.k].var, a[ax.w].var});
    acc->reorder(order);
    acc->unroll(a[ax.k].var);
    acc->unroll(a[ax.w].var);
    if (unroll) {
      for (const ir::IterVar& r : acc->op()->reduce_axes) acc->unroll(r.var);
    }
    if (c["shared"].get<bool>()) {
      // The weights of the block's channels, shared by its threads_w columns of threads: per
      // input channel (R x S each), or for depthwise (one channel per output channel) the whole
      // window at once. The input is not staged: its region reaches into the padding.
      const auto& r = acc->op()->reduce_axes;
      stage_shared(s, g.inputs[1]->name, *acc, r.size() == 3 ? r[0].var : a[ax.h].var, thk, thw);
    }
  }

 protected:
  // The block's channels' weights: R x S per channel (depthwise) or per input channel step.
  // Weights are [K][C][R][S], [C][1][R][S] (depthwise) or [R][S][C][K] (NHWC).
  int64_t shared_bytes(const OpGraph& g, const json& c) const override {
    const std::vector<int64_t>& w = g.inputs[1]->shape;
    bool nhwc = g.workload.op == "conv2d_nhwc";
    int64_t channels = std::min(c["threads_k"].get<int64_t>() * c["tile_k"].get<int64_t>(), nhwc ? w[3] : w[0]);
    int64_t window = nhwc ? w[0] * w[1] : w[2] * w[3];
    return channels * window * 4;
  }
  // The filter window: R x S taps (the input channel loop of NCHW and NHWC too).
  int64_t unrolled_steps(const OpGraph& g, const json&) const override {
    int64_t steps = 1;
    for (const ir::IterVar& r : g.acc->reduce_axes) steps *= r.extent;
    return steps;
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_depthwise_conv2d_cuda() { return std::make_unique<DepthwiseConv2dGpu>(TargetKind::Cuda); }
std::unique_ptr<ScheduleTemplate> make_depthwise_conv2d_rocm() { return std::make_unique<DepthwiseConv2dGpu>(TargetKind::Rocm); }

}  // namespace tf::templates
