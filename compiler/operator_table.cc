#include "compiler/operator_table.h"

#include <initializer_list>

#include "base/error.h"
#include "compiler/winograd.h"

namespace tf {
namespace {

constexpr int64_t kReq = kRequiredKey;

// The product of `dims`, or nullopt when it overflows int64.
std::optional<int64_t> checked_product(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

Footprint matmul_footprint(const Workload& w) {
  auto g = [&](const char* k) { return w.get(k); };
  return {{{"A", checked_product({g("M"), g("K")})},
           {"B", checked_product({g("K"), g("N")})},
           {"C", checked_product({g("M"), g("N")})}},
          checked_product({2, g("M"), g("N"), g("K")})};
}

// B is K/4 int32 quads per column, as large as K floats; aq, scale and offset are small.
Footprint qmatmul_footprint(const Workload& w) {
  Footprint f = matmul_footprint(w);
  f.tensors.push_back({"A.q", checked_product({w.get("M"), w.get("K")})});
  return f;
}

Footprint batch_matmul_footprint(const Workload& w) {
  auto g = [&](const char* k) { return w.get(k); };
  return {{{"A", checked_product({g("B"), g("M"), g("K")})},
           {"B", checked_product({g("B"), g("K"), g("N")})},
           {"C", checked_product({g("B"), g("M"), g("N")})}},
          checked_product({2, g("B"), g("M"), g("N"), g("K")})};
}

// Convolutions of every layout: blocked layouts hold the same number of elements as NCHW (a
// grouped blocked one's weights span() / (C/G) times the grouped weights).
Footprint conv_footprint(const Workload& w, bool depthwise) {
  auto g = [&](const char* k) { return w.get(k); };
  int64_t oh = conv_out(g("H"), g("R"), g("stride"), g("pad"), g("dilation"));
  int64_t ow = conv_out(g("W"), g("S"), g("stride"), g("pad"), g("dilation"));
  int64_t k = depthwise ? g("C") : g("K");
  // Input channels each filter computes with (C/G grouped) and reads (a blocked group's span).
  const int64_t per_group = w.has("group") ? g("C") / g("group") : g("C");
  const int64_t reads = w.has("group") && w.has("oc_block") ? nchwc_groups(w).span() : per_group;
  const int64_t width = depthwise && w.has("width") ? g("width") : 1;  // depthwise_conv2d_nchwc's groups
  Footprint f;
  f.tensors = {{"data", checked_product({g("N"), g("C"), g("H"), g("W")})},
               {"data_pad", checked_product({g("N"), g("C"), g("H") + 2 * g("pad"), g("W") + 2 * g("pad")})},
               {"weight", checked_product({k, depthwise ? width : reads, g("R"), g("S")})},
               {"out", checked_product({g("N"), k, oh, ow})}};
  f.flops = depthwise ? checked_product({2, g("N"), g("C"), oh, ow, g("R"), g("S"), width})
                      : checked_product({2, g("N"), k, oh, ow, per_group, g("R"), g("S")});
  return f;
}
Footprint conv2d_footprint(const Workload& w) { return conv_footprint(w, false); }
Footprint depthwise_footprint(const Workload& w) { return conv_footprint(w, true); }

void check_const_b(const Workload& w, const std::string& spec) {
  if (w.get("const_b") > 1) throw UserError(str("workload '", spec, "': const_b=", w.get("const_b"), " is not 0 or 1"));
}

// trans_b=1: B given as [N][K] (K innermost, as ONNX Gemm's transB and a Linear layer's weight),
// for 16-bit operands, whose tensor-core tiles want K innermost.
void check_trans_b(const Workload& w, const std::string& spec) {
  const int64_t t = w.get("trans_b");
  if (t > 1) throw UserError(str("workload '", spec, "': trans_b=", t, " is not 0 or 1"));
  const bool b16 = w.types.weight == DType::Float16 || w.types.weight == DType::BFloat16;
  // TF32 products read float32 B given as [N][K] by ldmatrix, as they read A (dense_tc.cuda).
  const bool tf32 = w.types.is_float32() && w.types.precision == Precision::TF32;
  if (t == 1 && !b16 && !tf32) {
    throw UserError(
        str("workload '", spec, "': trans_b=1 (B given as N x K) on ", w.types.str(),
            " operands is not implemented yet (it is for float16 and bfloat16 weights, and float32 "
            "ones at precision=tf32)"));
  }
}

void check_matmul(const Workload& w, const std::string& spec) {
  check_const_b(w, spec);
  if (w.get("const_b") && !w.types.is_float32())
    throw UserError(str("workload '", spec, "': const_b=1 (a prepacked B) on ", w.types.str(), " operands is not implemented yet"));
  check_trans_b(w, spec);
}

// A convolution's output is not empty.
void check_conv(const Workload& w, const std::string& spec) {
  int64_t oh = conv_out(w.get("H"), w.get("R"), w.get("stride"), w.get("pad"), w.get("dilation"));
  int64_t ow = conv_out(w.get("W"), w.get("S"), w.get("stride"), w.get("pad"), w.get("dilation"));
  if (oh < 1 || ow < 1) {
    throw UserError(str("workload '", spec, "': output size ", oh, "x", ow, " is empty (H=", w.get("H"), " W=", w.get("W"),
                        " R=", w.get("R"), " S=", w.get("S"), " pad=", w.get("pad"), " dilation=", w.get("dilation"),
                        ")"));
  }
}

// A blocked layout splits channels into whole blocks.
void check_block(const Workload& w, const std::string& spec, const char* channels, const char* block) {
  if (w.get(channels) % w.get(block) != 0) {
    throw UserError(str("workload '", spec, "': ", block, "=", w.get(block), " does not divide ", channels, "=",
                        w.get(channels), " (the blocked layout holds whole blocks of channels)"));
  }
}
void check_conv_nchwc(const Workload& w, const std::string& spec) {
  check_conv(w, spec);
  check_block(w, spec, "C", "ic_block");
  check_block(w, spec, "K", "oc_block");
}

// group=G divides both channel counts (each group has C/G inputs and K/G filters); groups
// compute in float32.
void check_groups(const Workload& w, const std::string& spec) {
  const int64_t G = w.get("group");
  for (const char* key : {"C", "K"}) {
    if (w.get(key) % G != 0) {
      throw UserError(str("workload '", spec, "': group=", G, " does not divide ", key, "=", w.get(key),
                          " (each group has the same number of channels)"));
    }
  }
  if (G > 1 && !w.types.is_float32()) {
    throw UserError(str("workload '", spec, "': group=", G, " on ", w.types.str(),
                        " operands is not implemented yet (grouped convolutions compute in float32)"));
  }
  if (G > 1 && w.types.precision != Precision::Float32) {
    throw UserError(str("workload '", spec, "': group=", G, " at precision=", precision_name(w.types.precision),
                        " is not implemented yet (grouped convolutions compute in float32)"));
  }
}

void check_grouped_conv(const Workload& w, const std::string& spec) {
  check_conv(w, spec);
  check_groups(w, spec);
}

// A grouped blocked convolution: any blocks the channels take (NchwcGroups: a block that
// straddles two groups reads both).
void check_grouped_conv_nchwc(const Workload& w, const std::string& spec) {
  check_conv_nchwc(w, spec);
  check_groups(w, spec);
}
// Winograd: tiles of F(2x2,3x3) or F(4x4,3x3) (compiler/winograd.h), of each residue class
// of a dilated convolution.
void check_winograd(const Workload& w, const std::string& spec) {
  int64_t m = w.get("tile");
  if (!winograd_matrices(static_cast<int>(m))) {
    throw UserError(str("workload '", spec, "': tile=", m, " is not a Winograd output tile this compiler has (2 or 4)"));
  }
  const WinogradTiling t = winograd_tiling(w.get("H"), w.get("W"), w.get("pad"), w.get("dilation"), m);
  if (t.oh < 1 || t.ow < 1) {
    throw UserError(str("workload '", spec, "': output size ", t.oh, "x", t.ow, " is empty (H=", w.get("H"), " W=",
                        w.get("W"), " pad=", w.get("pad"), " dilation=", w.get("dilation"), ", a 3x3 window)"));
  }
  check_block(w, spec, "C", "ic_block");
  check_block(w, spec, "K", "oc_block");
}

Footprint winograd_footprint(const Workload& w) {
  auto g = [&](const char* k) { return w.get(k); };
  int64_t m = g("tile"), a = m + 2, d = g("dilation");
  const WinogradTiling t = winograd_tiling(g("H"), g("W"), g("pad"), d, m);
  std::optional<int64_t> tiles = checked_product({g("N"), t.nh, t.nw});
  Footprint f;
  f.tensors = {{"data", checked_product({g("N"), g("C"), g("H"), g("W")})},
               {"data_pad", checked_product({g("N"), g("C"), d * (t.per_h * m + 2), d * (t.per_w * m + 2)})},
               {"weight", checked_product({a, a, g("K"), g("C")})},
               {"winograd_V", tiles ? checked_product({a, a, *tiles, g("C")}) : std::nullopt},
               {"winograd_M", tiles ? checked_product({a, a, *tiles, g("K")}) : std::nullopt},
               {"out", checked_product({g("N"), g("K"), t.oh, t.ow})}};
  f.flops = checked_product({2, g("N"), g("K"), t.oh, t.ow, g("C"), 9});
  return f;
}

// The quads of qconv2d_nchwc are four channels of one input block.
void check_qconv_nchwc(const Workload& w, const std::string& spec) {
  check_conv_nchwc(w, spec);
  if (w.get("ic_block") % 4 != 0) {
    throw UserError(str("workload '", spec, "': ic_block=", w.get("ic_block"),
                        " is not a multiple of 4 (the weights are quads of four input channels of a block)"));
  }
}

void check_pairs_conv_nchwc(const Workload& w, const std::string& spec) {
  check_conv_nchwc(w, spec);
  if (w.get("ic_block") % 2 != 0) {
    throw UserError(str("workload '", spec, "': ic_block=", w.get("ic_block"),
                        " is odd (the weights are pairs of two input channels of a block)"));
  }
}

void check_depthwise_nchwc(const Workload& w, const std::string& spec) {
  check_conv(w, spec);
  check_block(w, spec, "C", "block");
  // A group's channels lie in one block (its lanes read each other's).
  if (w.has("width") && w.get("block") % w.get("width") != 0) {
    throw UserError(str("workload '", spec, "': width=", w.get("width"), " does not divide block=", w.get("block"),
                        " (a group's channels must lie in one block)"));
  }
}

// The keys of the blocked (NCHWc) convolutions: float32, int8, bfloat16 and float16 alike.
const std::vector<WorkloadKey> kNchwcConvKeys = {
    {"N", kReq, 1},   {"C", kReq, 1},   {"H", kReq, 1},        {"W", kReq, 1},
    {"K", kReq, 1},   {"R", kReq, 1},   {"S", kReq, 1},        {"stride", 1, 1},
    {"pad", 0, 0},    {"dilation", 1, 1}, {"ic_block", 8, 1}, {"oc_block", 8, 1}};

// conv2d_nchwc's: the blocked keys and the number of groups.
std::vector<WorkloadKey> with_group(std::vector<WorkloadKey> keys) {
  keys.push_back({"group", 1, 1, true});
  return keys;
}

// Lists of operand types, one after another (an operator's own, then kTensorCoreTypes).
std::vector<OperandTypes> types(std::initializer_list<std::vector<OperandTypes>> parts) {
  std::vector<OperandTypes> all;
  for (const std::vector<OperandTypes>& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

}  // namespace

// clang-format off: one row per operator, laid out by hand.
const std::vector<OperatorDef>& operator_table() {
  using namespace ops;  // NOLINT: the builders and references the rows name
  static const std::vector<OperatorDef> table = {
      // const_b=1: B is a constant of the caller (a model's weights), passed packed as the
      // template packs it (OpGraph::prepacked), so the kernel is timed as the model runs it.
      {"matmul",
       {{"M", kReq, 1}, {"N", kReq, 1}, {"K", kReq, 1}, {"const_b", 0, 0, true}, {"trans_b", 0, 0, true}},
       check_matmul, matmul_footprint, build_matmul, reference_matmul, "matmul(M=64,N=64,K=64)",
       types({{OperandTypes{}, OperandTypes{DType::Uint8, DType::Int8}}, kTensorCoreTypes, k16BitTypes,
              k16BitWeightTypes}),
       {"matmul(M=16,N=40,K=22,dtype=uint8,weight_dtype=int8)", "matmul(M=40,N=24,K=20,precision=tf32)",
        "matmul(M=40,N=24,K=20,precision=fp16)", "matmul(M=40,N=24,K=20,precision=bf16)",
        "matmul(M=40,N=24,K=20,dtype=float16)", "matmul(M=40,N=24,K=20,dtype=bfloat16,trans_b=1)",
        "matmul(M=40,N=24,K=20,weight_dtype=float16,trans_b=1)", "matmul(M=40,N=24,K=20,weight_dtype=bfloat16)"}},
      // A float A quantized to uint8 on entry times int8 B given as quads, scaled per column
      // (compiler/operators.cc build_qmatmul): a quantized model's DequantizeLinear -> MatMul
      // with the activations' QuantizeLinear folded in (graph/import_quantize.h).
      // dtype=uint8,weight_dtype=int8: A is given quantized, as uint8 (a model's value between
      // two int8 kernels, quantized in its producer's epilogue: graph/pass_int8_edges.cc).
      {"qmatmul",
       {{"M", kReq, 1}, {"N", kReq, 1}, {"K", kReq, 1}, {"const_b", 0, 0, true}},
       check_const_b, qmatmul_footprint, build_qmatmul, reference_qmatmul, "qmatmul(M=16,N=40,K=22)",
       kQuantizedInputTypes, {"qmatmul(M=16,N=40,K=22,dtype=uint8,weight_dtype=int8)"}, /*float_output=*/true},
      // Operands rounded to bfloat16, products summed in float32 (build_matmul_bf16): a float
      // A converted on entry, B given as pairs of bfloat16 in int32 words; a float model's
      // MatMul/Gemm with constant weights under --precision bf16 (graph/pass_auto_mixed_precision.cc).
      {"matmul_bf16",
       {{"M", kReq, 1}, {"N", kReq, 1}, {"K", kReq, 1}, {"const_b", 0, 0, true}},
       check_const_b, matmul_footprint, build_matmul_bf16, reference_matmul_bf16, "matmul_bf16(M=16,N=40,K=22)"},
      // The same in IEEE float16 (--precision fp16: stored in float16, computed in float32).
      {"matmul_fp16",
       {{"M", kReq, 1}, {"N", kReq, 1}, {"K", kReq, 1}, {"const_b", 0, 0, true}},
       check_const_b, matmul_footprint, build_matmul_fp16, reference_matmul_fp16, "matmul_fp16(M=16,N=40,K=22)"},
      {"batch_matmul",
       {{"B", kReq, 1}, {"M", kReq, 1}, {"N", kReq, 1}, {"K", kReq, 1}, {"trans_b", 0, 0, true}},
       check_trans_b, batch_matmul_footprint, build_batch_matmul, reference_batch_matmul, "batch_matmul(B=2,M=16,N=32,K=8)",
       types({{OperandTypes{}}, kTensorCoreTypes, k16BitTypes, k16BitWeightTypes}),
       {"batch_matmul(B=2,M=20,N=16,K=24,precision=tf32)", "batch_matmul(B=2,M=20,N=16,K=24,precision=fp16)",
        "batch_matmul(B=2,M=20,N=16,K=24,precision=bf16)", "batch_matmul(B=2,M=20,N=16,K=24,dtype=float16,trans_b=1)",
        "batch_matmul(B=2,M=20,N=16,K=24,dtype=bfloat16)", "batch_matmul(B=2,M=20,N=16,K=24,weight_dtype=float16)",
        "batch_matmul(B=2,M=20,N=16,K=24,weight_dtype=bfloat16,trans_b=1)"}},
      // group=G: a grouped convolution (ONNX Conv's group): weight [K][C/G][R][S].
      {"conv2d_nchw",
       {{"N", kReq, 1}, {"C", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"K", kReq, 1}, {"R", kReq, 1},
        {"S", kReq, 1}, {"stride", 1, 1}, {"pad", 0, 0}, {"dilation", 1, 1}, {"group", 1, 1, true}},
       check_grouped_conv, conv2d_footprint, build_conv2d_nchw, reference_conv2d_nchw, "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)",
       types({{OperandTypes{}}, kTensorCoreTypes, k16BitTypes, k16BitWeightTypes}),
       {"conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,precision=tf32)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,precision=fp16)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,precision=bf16)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,weight_dtype=float16)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,weight_dtype=bfloat16)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,dtype=float16)",
        "conv2d_nchw(N=1,C=6,H=9,W=7,K=20,R=3,S=3,pad=1,dtype=bfloat16)"}},
      {"conv2d_nhwc",
       {{"N", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"C", kReq, 1}, {"K", kReq, 1}, {"R", kReq, 1},
        {"S", kReq, 1}, {"stride", 1, 1}, {"pad", 0, 0}, {"dilation", 1, 1}},
       check_conv, conv2d_footprint, build_conv2d_nhwc, reference_conv2d_nhwc, "conv2d_nhwc(N=1,H=14,W=14,C=16,K=32,R=3,S=3,pad=1)",
       types({{OperandTypes{}}, kTensorCoreTypes, k16BitTypes, k16BitWeightTypes}),
       {"conv2d_nhwc(N=1,H=9,W=7,C=6,K=20,R=3,S=3,pad=1,precision=tf32)",
        "conv2d_nhwc(N=1,H=9,W=7,C=6,K=20,R=3,S=3,pad=1,precision=fp16)",
        "conv2d_nhwc(N=1,H=9,W=7,C=6,K=20,R=3,S=3,pad=1,precision=bf16)",
        "conv2d_nhwc(N=1,H=9,W=7,C=6,K=20,R=3,S=3,pad=1,weight_dtype=float16)",
        "conv2d_nhwc(N=1,H=9,W=7,C=6,K=20,R=3,S=3,pad=1,dtype=bfloat16)"}},
      {"depthwise_conv2d_nchw",
       {{"N", kReq, 1}, {"C", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"R", kReq, 1}, {"S", kReq, 1},
        {"stride", 1, 1}, {"pad", 0, 0}, {"dilation", 1, 1}},
       check_conv, depthwise_footprint, build_depthwise_conv2d_nchw, reference_depthwise_conv2d_nchw,
       "depthwise_conv2d_nchw(N=1,C=32,H=14,W=14,R=3,S=3,stride=2,pad=1)"},
      // Blocked (NCHWc) layouts: channels split into blocks that are the innermost dimension.
      // group=G: weight [K/ob][span/ib][R][S][ib][ob] (NchwcGroups).
      {"conv2d_nchwc", with_group(kNchwcConvKeys),
       check_grouped_conv_nchwc, conv2d_footprint, build_conv2d_nchwc, reference_conv2d_nchwc,
       "conv2d_nchwc(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=16)"},
      // A quantized model's Conv (graph/import_quantize.h): float data quantized to uint8 on
      // entry, int8 weights as quads of input channels, scaled per output channel.
      {"qconv2d_nchwc", kNchwcConvKeys,
       check_qconv_nchwc, conv2d_footprint, build_qconv2d_nchwc, reference_qconv2d_nchwc,
       "qconv2d_nchwc(N=1,C=16,H=9,W=11,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=16)", kQuantizedInputTypes,
       {"qconv2d_nchwc(N=1,C=16,H=9,W=11,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=16,dtype=uint8,weight_dtype=int8)"},
       /*float_output=*/true},
      // A float model's Conv at --precision bf16 (graph/pass_auto_mixed_precision.cc): data and
      // weights rounded to bfloat16, float32 sums; weights as pairs of input channels.
      {"conv2d_nchwc_bf16", kNchwcConvKeys,
       check_pairs_conv_nchwc, conv2d_footprint, build_conv2d_nchwc_bf16, reference_conv2d_nchwc_bf16,
       "conv2d_nchwc_bf16(N=1,C=16,H=9,W=11,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=16)"},
      {"conv2d_nchwc_fp16", kNchwcConvKeys,
       check_pairs_conv_nchwc, conv2d_footprint, build_conv2d_nchwc_fp16, reference_conv2d_nchwc_fp16,
       "conv2d_nchwc_fp16(N=1,C=16,H=9,W=11,K=32,R=3,S=3,pad=1,ic_block=8,oc_block=16)"},
      // width=g: groups of g channels in and out, each in one block (weight [C/b][g][R][S][b]).
      {"depthwise_conv2d_nchwc",
       {{"N", kReq, 1}, {"C", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"R", kReq, 1}, {"S", kReq, 1},
        {"stride", 1, 1}, {"pad", 0, 0}, {"dilation", 1, 1}, {"block", 8, 1}, {"width", 1, 1, true}},
       check_depthwise_nchwc, depthwise_footprint, build_depthwise_conv2d_nchwc, reference_depthwise_conv2d_nchwc,
       "depthwise_conv2d_nchwc(N=1,C=32,H=14,W=14,R=3,S=3,pad=1,block=16)"},
      // A quantized model's depthwise Conv (graph/import_quantize.h): uint8 data (given, or
      // float quantized on entry) times int8 weights, summed exactly, scaled per channel.
      {"qdepthwise_conv2d_nchwc",
       {{"N", kReq, 1}, {"C", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"R", kReq, 1}, {"S", kReq, 1},
        {"stride", 1, 1}, {"pad", 0, 0}, {"dilation", 1, 1}, {"block", 8, 1}},
       check_depthwise_nchwc, depthwise_footprint, build_qdepthwise_conv2d_nchwc, reference_qdepthwise_conv2d_nchwc,
       "qdepthwise_conv2d_nchwc(N=1,C=32,H=14,W=14,R=3,S=3,pad=1,block=16)", kQuantizedInputTypes,
       {"qdepthwise_conv2d_nchwc(N=1,C=32,H=9,W=7,R=3,S=3,stride=2,pad=1,block=16,dtype=uint8,weight_dtype=int8)"},
       /*float_output=*/true},
      // 3x3 stride-1 NCHWc convolutions (dilated or not) by Winograd's minimal filtering, the weights given
      // transformed (compiler/winograd.h): [a][a][K/oc_block][C][oc_block], a = tile + 2.
      {"conv2d_winograd_nchwc",
       {{"N", kReq, 1}, {"C", kReq, 1}, {"H", kReq, 1}, {"W", kReq, 1}, {"K", kReq, 1}, {"pad", 1, 0},
        {"ic_block", 8, 1}, {"oc_block", 8, 1}, {"tile", 4, 2}, {"dilation", 1, 1, true}},
       check_winograd, winograd_footprint, build_conv2d_winograd_nchwc, reference_conv2d_winograd_nchwc,
       "conv2d_winograd_nchwc(N=1,C=16,H=9,W=11,K=24,ic_block=8,oc_block=8)"},
  };
  return table;
}
// clang-format on

NchwcGroups::NchwcGroups(int64_t C, int64_t K, int64_t group, int64_t ob, int64_t ib)
    : C(C), K(K), group(group), ob(ob), ib(ib) {
  TF_CHECK(C > 0 && K > 0 && group > 0 && ob > 0 && ib > 0 && C % group == 0 && K % group == 0 && K % ob == 0 &&
               C % ib == 0,
           "grouped blocks of C=", C, " K=", K, " group=", group, " oc_block=", ob, " ic_block=", ib,
           " were not checked");
  // The input blocks from block ko's first group's first channel to its last group's last
  // (in 64 bits: K * C/G is bounded by the workload's footprint).
  for (int64_t ko = 0; ko < K / ob; ++ko) {
    const int64_t end = ((ko * ob + ob - 1) / filters() + 1) * channels();
    blocks_ = std::max(blocks_, (end + ib - 1) / ib - first_block(ko));
  }
}

ir::Expr NchwcGroups::start_block(const ir::Expr& ko) const {
  using ir::Expr;
  if (group == 1) return Expr(int64_t{0});
  if (exact()) return block_in_group() ? ko / (filters() / ob) * (channels() / ib) : ko * (span() / ib);
  return ir::min(ko * ob / filters() * channels() / ib, Expr(C / ib - blocks_));
}

NchwcGroups nchwc_groups(const Workload& w) {
  return {w.get("C"), w.get("K"), w.get("group"), w.get("oc_block"), w.get("ic_block")};
}

const OperatorDef* find_operator(const std::string& op) {
  for (const OperatorDef& d : operator_table()) {
    if (op == d.name) return &d;
  }
  return nullptr;
}

}  // namespace tf
