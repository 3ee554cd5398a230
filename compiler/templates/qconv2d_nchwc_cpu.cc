// qconv2d_nchwc.cpu: quantized NCHWc convolutions on CPUs (compiler/operators.cc
// build_qconv2d_nchwc). The data is quantized and padded once ("A.u8", a vector of a channel
// block at a time); the register tile is conv2d_nchwc.cpu's, tile_w output columns by tile_kb
// blocks of output channels, each block one vector of int32 accumulators: for each quad of
// four input channels, its four bytes are broadcast (one 32-bit load) and multiplied with the
// block's quad weights by one dot4_u8s8 (vpdpbusd with AVX512-VNNI or AVX-VNNI).
// conv2d_nchwc_bf16.cpu schedules conv2d_nchwc_bf16 the same way: the data converted to pairs
// of bfloat16 ("A.bf"), one word broadcast per pair, one dot2_bf16 (vdpbf16ps) per block;
// conv2d_nchwc_fp16.cpu likewise over float16 pairs ("A.h", dot2_f16).
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

// The data stage `converted` (A.u8, A.bf: [n][c][h][w][block values or words]) made once, then
// conv2d_nchwc.cpu's register tile over words of channels.
class WordConv2dNchwcCpu final : public NchwcConvTemplate {
 public:
  WordConv2dNchwcCpu(const char* name, const char* op, const char* converted,
                     std::vector<OperandTypes> types = {OperandTypes{}})
      : NchwcConvTemplate(name, 1, {op}, TargetKind::Llvm, std::move(types)), converted_(converted) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int, "output columns per register tile (unrolled)", 64, {}, kSplit},
        {"tile_kb", KnobType::Int, "output channel blocks per register tile (unrolled; each block vectorized)", 16, {},
         kSplit},
        {"reduce_order", KnobType::Choice,
         "reduction loop order: crs (input channel blocks, then the window, then a block's words) or rsc "
         "(the window outermost)",
         0, {"crs", "rsc"}, kReorder},
        {"vectorize", KnobType::Bool, "vectorize the output channel block (and the data's conversion)", 0, {}},
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

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    Stage& au8 = s.stage(converted_);
    const auto& q = au8.op()->axes;  // n, c, h, w, cb
    if (g.inputs[0]->dtype == ir::Type::uint8() && g.workload.get("pad") == 0) {
      au8.compute_inline();  // uint8 data, nothing to pad: the register tile reads it as it is
    } else {
      if (c["parallel"].get<bool>()) au8.parallel(au8.fuse(au8.fuse(q[0].var, q[1].var), q[2].var));
      if (c["vectorize"].get<bool>()) au8.vectorize(q[4].var);
    }
    auto [acc, out] = acc_and_writer(s, g);
    schedule_nchwc_tiles(*out, *acc, c, block_vectors(g, t, c));
  }

 private:
  const char* converted_;
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_qconv2d_nchwc_cpu() {
  // Float data quantized on entry, or uint8 data (then A.u8 only pads it, with the zero point).
  return std::make_unique<WordConv2dNchwcCpu>("qconv2d_nchwc.cpu", "qconv2d_nchwc", "A.u8", kQuantizedInputTypes);
}
std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_bf16_cpu() {
  return std::make_unique<WordConv2dNchwcCpu>("conv2d_nchwc_bf16.cpu", "conv2d_nchwc_bf16", "A.bf");
}
std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_fp16_cpu() {
  return std::make_unique<WordConv2dNchwcCpu>("conv2d_nchwc_fp16.cpu", "conv2d_nchwc_fp16", "A.h");
}

}  // namespace tf::templates
