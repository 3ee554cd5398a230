// qconv2d_nchwc.cpu: quantized NCHWc convolutions on CPUs (compiler/operators.cc
// build_qconv2d_nchwc). The data is quantized and padded once ("A.u8", a vector of a channel
// block at a time); the register tile is conv2d_nchwc.cpu's, tile_w output columns by tile_kb
// blocks of output channels, each block one vector of int32 accumulators: for each quad of
// four input channels, its four bytes are broadcast (one 32-bit load) and multiplied with the
// block's quad weights by one dot4_u8s8 (vpdpbusd with AVX512-VNNI or AVX-VNNI).
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class QConv2dNchwcCpu final : public CpuTemplate {
 public:
  QConv2dNchwcCpu() : CpuTemplate("qconv2d_nchwc.cpu", 1, {"qconv2d_nchwc"}, TargetKind::Llvm) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
        {"tile_kb", KnobType::Int, "output channel blocks per register tile (unrolled; each block vectorized)", 16, {},
         kSplit},
        {"reduce_order", KnobType::Choice,
         "reduction loop order: crs (input channel blocks, then the window, then a block's quads) or rsc "
         "(the window outermost)",
         0, {"crs", "rsc"}, kReorder},
        {"vectorize", KnobType::Bool, "vectorize the output channel block (and the quantization)", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loops (batch, channel tiles, rows) on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    auto [kb, tw] = blocked_tile(g, t, /*depthwise=*/false);
    json c;
    c["tile_w"] = tw;
    c["tile_kb"] = kb;
    c["reduce_order"] = "crs";
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    int64_t tw = c["tile_w"], tkb = c["tile_kb"];
    bool vec = c["vectorize"], unroll = c["unroll"], par = c["parallel"];
    Stage& au8 = s.stage("A.u8");
    const auto& q = au8.op()->axes;  // n, c, h, w, cb
    if (par) au8.parallel(au8.fuse(au8.fuse(q[0].var, q[1].var), q[2].var));
    if (vec) au8.vectorize(q[4].var);
    auto [acc, out] = acc_and_writer(s, g);
    const auto& o = out->op()->axes;  // n, ko, oh, ow, kb
    auto [koo, koi] = out->split(o[1].var, tkb);
    auto [wo, wi] = out->split(o[3].var, tw);
    out->reorder({o[0].var, koo, o[2].var, wo, koi, wi, o[4].var});
    if (vec) out->vectorize(o[4].var);
    if (unroll) {
      out->unroll(koi);
      out->unroll(wi);
    }
    if (par) out->parallel(out->fuse(out->fuse(o[0].var, koo), o[2].var));
    acc->compute_at(*out, wo);
    const auto& a = acc->op()->axes;         // n, ko, oh, ow, kb
    const auto& r = acc->op()->reduce_axes;  // rco, rr, rs, rcq
    std::vector<Expr> order = {a[0].var, a[2].var};
    if (c["reduce_order"].get<std::string>() == "crs")
      order.insert(order.end(), {r[0].var, r[1].var, r[2].var});
    else
      order.insert(order.end(), {r[1].var, r[2].var, r[0].var});
    order.insert(order.end(), {r[3].var, a[1].var, a[3].var, a[4].var});
    acc->reorder(order);
    if (vec) acc->vectorize(a[4].var);
    if (unroll) {
      acc->unroll(a[1].var);
      acc->unroll(a[3].var);
    }
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const std::string& knob) const override {
    return {out_extent(g, knob == "tile_kb" ? 1 : 3), false, true};
  }

  Tile register_tile(const OpGraph& g, const Target& t, const json& c) const override {
    const int64_t lanes = t.vector_lanes(), block = out_extent(g, 4);
    bool vec = c["vectorize"];
    return {c["tile_w"], c["tile_kb"].get<int64_t>() * (vec ? ((block + lanes - 1) / lanes) * lanes : block), 1, ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_qconv2d_nchwc_cpu() { return std::make_unique<QConv2dNchwcCpu>(); }

}  // namespace tf::templates
