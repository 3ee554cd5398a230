// depthwise_conv2d_nchwc.cpu: NCHWc (blocked) depthwise convolutions on CPUs: tile_w output
// columns of one channel block; every load (input, weight) one contiguous vector at any
// stride.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class DepthwiseNchwcCpu final : public CpuTemplate {
 public:
  // qdepthwise_conv2d_nchwc (int8) too: its padded bytes ("A.u8") are widened in the product.
  DepthwiseNchwcCpu()
      : CpuTemplate("depthwise_conv2d_nchwc.cpu", 1, {"depthwise_conv2d_nchwc", "qdepthwise_conv2d_nchwc"},
                    TargetKind::Llvm, kQuantizedInputTypes) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"vectorize", KnobType::Bool, "vectorize the channel block", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile and the filter window", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loops (batch, channel blocks, rows) on all threads, each a slice of the rows", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    json c;
    c["tile_w"] = blocked_tile(g, t, /*depthwise=*/true).second;
    // The padded copy costs more than the selects (MobileNet-v2 layers, AVX2: 1.0-2.3x with
    // selects).
    c["inline_pad"] = true;
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    int64_t tw = c["tile_w"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    // Float data quantized on entry is quantized once (a division an element), not per tap.
    const bool quantizes = g.pad && g.pad->dtype == ir::Type::uint8() && g.inputs[0]->dtype != ir::Type::uint8();
    json pc = c;
    if (quantizes) pc["inline_pad"] = false;
    schedule_pad(s, g, pc, t.vector_lanes(), /*blocked=*/true);
    auto [acc, out] = acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, co, oh, ow, cb
    auto [wo, wi] = out->split(o[3].var, tw);
    out->reorder({o[0].var, o[1].var, o[2].var, wo, wi, o[4].var});
    if (vec) out->vectorize(o[4].var);
    if (unroll) out->unroll(wi);
    // Each thread a slice of the rows for every channel block, as the blocked convolutions
    // around it slice their positions: with the pool's threads taking their own chunks
    // first, a core reads the rows it wrote (MobileNet-v2, 2 threads: 1.01-1.03x).
    if (par) out->parallel_slices(out->fuse(out->fuse(o[0].var, o[1].var), o[2].var));
    acc->compute_at(*out, wo);
    const auto& a = acc->op()->axes;         // n, co, oh, ow, cb
    const auto& r = acc->op()->reduce_axes;  // rr, rs
    acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var, a[4].var});
    if (vec) acc->vectorize(a[4].var);
    if (unroll) {
      acc->unroll(a[3].var);
      acc->unroll(r[1].var);
    }
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string&) const override { return {out_extent(g, 3), false, true}; }

  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override {
    const int64_t lanes = t.vector_lanes(), block = out_extent(g, 4);
    bool vec = c["vectorize"];
    return {c["tile_w"], vec ? ((block + lanes - 1) / lanes) * lanes : block, 1, ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_depthwise_conv2d_nchwc_cpu() { return std::make_unique<DepthwiseNchwcCpu>(); }

}  // namespace tf::templates
