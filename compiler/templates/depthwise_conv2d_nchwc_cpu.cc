// depthwise_conv2d_nchwc.cpu: NCHWc (blocked) depthwise convolutions on CPUs: tile_w output
// columns of one channel block; every load (input, weight) one contiguous vector at any
// stride. Groups of width g > 1 (each output lane summing the g input lanes of its group in
// the same block): per window tap and column, the block's input vector loaded once and each
// group's channel i spread over the group's lanes (a shuffle: the code generator loads the
// aligned vector and shuffles it, compiler/codegen_llvm_internal.h), times g weight vectors
// kept in registers for the tile's columns (the g loop unrolled inside the column's).
#include "compiler/templates/common.h"

#include <algorithm>

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

  // A group's input channels (the workload's width; qdepthwise_conv2d_nchwc has none: 1).
  static int64_t width(const OpGraph& g) { return g.workload.has("width") ? g.workload.get("width") : 1; }

  json default_config(const OpGraph& g, const Target& t) const override {
    json c;
    // Groups keep their g weight vectors live beside the columns' accumulators and the loaded
    // inputs and their shuffles: columns for half the registers left. Zen 5, 1 thread,
    // ResNeXt's 128-channel 56x56 layer (groups of 4) 0.164 ms at 14 columns, 0.193 at 19,
    // 0.220 at 24; its 256-channel 28x28 one (groups of 8) 0.214 at 14, 0.377 at 19.
    // A tile that divides the row where one of at least half that size does (a shifted last
    // tile costs its overlap: RegNetY's 208-channel 14x14 layer 0.045 ms in tiles of 7 or
    // 14, 0.075 in tiles of 12).
    const int64_t gw = width(g), ow = blocked_tile(g, t, /*depthwise=*/true).second;
    int64_t tw = ow;
    if (gw > 1) {
      const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(ow, (vector_registers(t) - gw) / 2));
      const int64_t row = out_extent(g, 3);
      tw = cap;
      for (int64_t d = cap; d * 2 >= cap && d >= 1; --d) {
        if (row % d == 0) {
          tw = d;
          break;
        }
      }
    }
    c["tile_w"] = tw;
    // The padded copy costs more than the selects (MobileNet-v2 layers, AVX2: 1.0-2.3x with
    // selects). Not for groups: a select's masked load of shuffled lanes is a gather (the
    // 128-channel layer above 0.45 ms against 0.16 from the copy).
    c["inline_pad"] = gw == 1;
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
    const auto& r = acc->op()->reduce_axes;  // rr, rs (and ri: a group's channels)
    if (r.size() == 3) {
      acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var, r[2].var, a[4].var});
    } else {
      acc->reorder({a[0].var, a[1].var, a[2].var, r[0].var, r[1].var, a[3].var, a[4].var});
    }
    if (vec) acc->vectorize(a[4].var);
    if (unroll) {
      acc->unroll(a[3].var);
      // Groups: the g weight vectors of one tap stay live over the columns; unrolling the
      // window's columns too would keep 3g.
      acc->unroll(r.size() == 3 ? r[2].var : r[1].var);
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
