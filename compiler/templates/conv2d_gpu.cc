// conv2d.cuda and conv2d.rocm (v2): convolutions (NCHW and NHWC) on GPUs as implicit GEMMs on
// the hierarchy of the dense template (compiler/templates/gpu_gemm.h). The template schedules
// another definition of the same function (schedule_graph):
//
//   NCHW   acc[n][k][p] = sum_q weight[k][q] * col[n][q][p]      (M = K, N = OH*OW)
//   NHWC   acc[n][p][k] = sum_q col[n][p][q] * weight[q][k]      (M = OH*OW, N = K)
//   out    = epilogue(acc) at p = oh*OW + ow, in the workload's layout
//
// where q runs over the reduction (c, r, s for NCHW, whose weights [K][C][R][S] are then a
// [K][C*R*S] matrix; r, s, c for NHWC, whose weights [R][S][C][K] are a [R*S*C][K] one) and
// col is the im2col matrix: col[n][q][p] = data at (c, oh*stride + r*dilation - pad,
// ow*stride + s*dilation - pad), 0 in the padding. col is never stored: each step of the
// reduction computes the block's block_k x block_n tile of it into shared memory (the index
// arithmetic in the shared-memory load, the padding a predicate), as the dense template
// copies a tile of B. 1x1 convolutions are plain GEMMs this way. Depthwise convolutions stay
// direct (depthwise_conv2d_gpu.cc).
//
// Grouped (NCHW, group=G: ResNeXt, RegNet) the GEMMs are one per image and group, as batches:
//   acc[n*G + g][kk][p] = sum_q weight[g][kk][q] * col[n*G + g][q][p]
// with q over the group's C/G channels and window, weight [K][C/G][R][S] read as [G][K/G][q],
// and the output k = g*K/G + kk (the writer's rows split by K/G: batch (n, g), rows kk).
#include "compiler/operator_table.h"
#include "compiler/operators.h"
#include "compiler/templates/gpu_gemm.h"

namespace tf::templates {
namespace {

using ir::Tensor;

struct ConvDims {
  int64_t n, c, h, w, k, r, s, stride, pad, dilation, oh, ow;
  bool nhwc;
  int64_t group = 1;
  int64_t cg() const { return c / group; }  // channels of a group
  int64_t kg() const { return k / group; }  // filters of a group
};

ConvDims conv_dims(const OpGraph& g) {
  const Workload& w = g.workload;
  ConvDims d{w.get("N"), w.get("C"), w.get("H"), w.get("W"), w.get("K"), w.get("R"), w.get("S"),
             w.get("stride"), w.get("pad"), w.get("dilation"), 0, 0, w.op == "conv2d_nhwc"};
  d.oh = conv_out(d.h, d.r, d.stride, d.pad, d.dilation);
  d.ow = conv_out(d.w, d.s, d.stride, d.pad, d.dilation);
  if (w.has("group")) d.group = w.get("group");
  return d;
}

// The grouped NCHW convolution as batches of GEMMs (above).
OpGraph grouped_gemm_graph(const OpGraph& g, const ConvDims& d) {
  const int64_t G = d.group, p = d.oh * d.ow, q = d.cg() * d.r * d.s;
  const Tensor& data = g.inputs[0];
  Tensor weight = ir::placeholder(g.inputs[1]->name, {G, d.kg(), q}, g.inputs[1]->dtype);
  ir::IterVar red = ir::reduce_axis(q, "q");
  Tensor col =
      ir::compute("col", {d.n * G, q, p}, {"b", "q", "p"}, [&](const std::vector<Expr>& ax) {
        Expr n = ax[0] / G, c = ax[0] % G * d.cg() + ax[1] / (d.r * d.s);
        Expr rr = ax[1] / d.s % d.r, ss = ax[1] % d.s;
        Expr h = ax[2] / d.ow * d.stride + rr * d.dilation - d.pad;
        Expr x = ax[2] % d.ow * d.stride + ss * d.dilation - d.pad;
        Expr v = widened(g.workload.types, ir::read(data, {n, c, h, x}));
        if (d.pad == 0) return v;
        Expr inside = ir::logical_and(ir::logical_and(h >= 0, h < Expr(d.h)),
                                      ir::logical_and(x >= 0, x < Expr(d.w)));
        return ir::select(inside, v, ir::f32(0.0));
      });
  Tensor acc = ir::compute("acc", {d.n * G, d.kg(), p}, {"b", "k", "p"},
                           [&](const std::vector<Expr>& ax) {
                             return ir::sum(widened(g.workload.types, ir::read(weight, {ax[0] % G, ax[1], red.var})) *
                                                ir::read(col, {ax[0], red.var, ax[2]}),
                                            {red});
                           },
                           {red});
  const ir::Tensor& old = g.acc;
  ir::Tensor view = ir::compute(
      old == g.output ? g.output->name : "acc_view", old->shape, {"n", "k", "oh", "ow"},
      [&](const std::vector<Expr>& ax) {
        return ir::read(acc, {ax[0] * G + ax[1] / d.kg(), ax[1] % d.kg(), ax[2] * d.ow + ax[3]});
      });
  OpGraph r = with_reads_replaced(g, old, view);
  r.inputs[1] = weight;
  r.acc = acc;
  r.pad = nullptr;
  return r;
}

}  // namespace

OpGraph conv_gemm_graph(const OpGraph& g, const std::string& template_id) {
  if (!g.prepacked.empty()) {
    throw UserError(str(template_id, ": prepacked weights are not implemented on GPUs (", g.workload.canonical(), ")"));
  }
  ConvDims d = conv_dims(g);
  if (d.group > 1) return grouped_gemm_graph(g, d);
  const int64_t p = d.oh * d.ow, q = d.c * d.r * d.s;
  const Tensor& data = g.inputs[0];
  // The weights as the GEMM's matrix: the same elements (16-bit ones with weight_dtype, read
  // widened), in the same order.
  Tensor weight = ir::placeholder(g.inputs[1]->name, d.nhwc ? std::vector<int64_t>{q, d.k} : std::vector<int64_t>{d.k, q},
                                  g.inputs[1]->dtype);
  auto weight_at = [&](const Expr& row, const Expr& col) {
    return widened(g.workload.types, ir::read(weight, {row, col}));
  };
  // im2col: the input element a reduction index q meets at output position pos.
  auto im2col = [&, d](const Expr& n, const Expr& qi, const Expr& pos) {
    Expr c, rr, ss;
    if (d.nhwc) {
      rr = qi / (d.s * d.c);
      ss = qi / d.c % d.s;
      c = qi % d.c;
    } else {
      c = qi / (d.r * d.s);
      rr = qi / d.s % d.r;
      ss = qi % d.s;
    }
    Expr h = pos / d.ow * d.stride + rr * d.dilation - d.pad;
    Expr x = pos % d.ow * d.stride + ss * d.dilation - d.pad;
    // 16-bit data (dtype=float16 | bfloat16) widened: the im2col matrix is float32 values.
    Expr v = widened(g.workload.types, d.nhwc ? ir::read(data, {n, h, x, c}) : ir::read(data, {n, c, h, x}));
    if (d.pad == 0) return v;
    Expr inside = ir::logical_and(ir::logical_and(h >= 0, h < Expr(d.h)), ir::logical_and(x >= 0, x < Expr(d.w)));
    return ir::select(inside, v, ir::f32(0.0));
  };
  ir::IterVar red = ir::reduce_axis(q, "q");
  Tensor col, acc;
  if (d.nhwc) {
    col = ir::compute("col", {d.n, p, q}, {"n", "p", "q"},
                      [&](const std::vector<Expr>& ax) { return im2col(ax[0], ax[2], ax[1]); });
    acc = ir::compute("acc", {d.n, p, d.k}, {"n", "p", "k"}, [&](const std::vector<Expr>& ax) {
      return ir::sum(ir::read(col, {ax[0], ax[1], red.var}) * weight_at(red.var, ax[2]), {red});
    }, {red});
  } else {
    col = ir::compute("col", {d.n, q, p}, {"n", "q", "p"},
                      [&](const std::vector<Expr>& ax) { return im2col(ax[0], ax[1], ax[2]); });
    acc = ir::compute("acc", {d.n, d.k, p}, {"n", "k", "p"}, [&](const std::vector<Expr>& ax) {
      return ir::sum(weight_at(ax[1], red.var) * ir::read(col, {ax[0], red.var, ax[2]}), {red});
    }, {red});
  }
  // The GEMM's result in the workload's layout (p = oh*OW + ow), read where the direct
  // reduction was: the epilogue and any fused elementwise tail keep their definitions.
  const ir::Tensor& old = g.acc;
  std::vector<std::string> names = d.nhwc ? std::vector<std::string>{"n", "oh", "ow", "k"}
                                          : std::vector<std::string>{"n", "k", "oh", "ow"};
  ir::Tensor view = ir::compute(old == g.output ? g.output->name : "acc_view", old->shape, names,
                                [&](const std::vector<Expr>& ax) {
                                  Expr k = d.nhwc ? ax[3] : ax[1];
                                  Expr pos = d.nhwc ? ax[1] * d.ow + ax[2] : ax[2] * d.ow + ax[3];
                                  return d.nhwc ? ir::read(acc, {ax[0], pos, k}) : ir::read(acc, {ax[0], k, pos});
                                });
  OpGraph r = with_reads_replaced(g, old, view);
  r.inputs[1] = weight;
  r.acc = acc;
  r.pad = nullptr;
  return r;
}

GemmShape conv_gemm_shape(const OpGraph& g) {
  ConvDims d = conv_dims(g);
  int64_t p = d.oh * d.ow, q = d.cg() * d.r * d.s;
  // Grouped: a block's rows stay within one group's filters (GemmShape::max_block_m).
  return d.nhwc ? GemmShape{d.n, p, d.k, q}
                : GemmShape{d.n * d.group, d.kg(), p, q, d.group > 1 ? d.kg() : 0};
}

namespace {

class Conv2dGpu final : public GemmTemplate {
 public:
  explicit Conv2dGpu(TargetKind kind)
      : GemmTemplate(std::string("conv2d.").append(kind_name(kind)), 4,
                     {"conv2d_nchw", "conv2d_nhwc"}, kind) {}

 protected:
  OpGraph gemm_graph(const OpGraph& g, const Target&, const json&) const override { return conv_gemm_graph(g, id()); }

  GemmStages gemm_operands(Schedule& s, const OpGraph& g, const json& c) const override {
    GemmStages st;
    if (g.workload.op == "conv2d_nhwc") {
      st.a = "col";
      st.a_input = false;
      st.a_contiguous = false;
      st.b = g.inputs[1]->name;
    } else {
      st.a = g.inputs[1]->name;
      st.b = "col";
      st.b_input = false;
      st.b_contiguous = false;
    }
    if (!c["shared"].get<bool>()) s.stage("col").compute_inline();
    if (s.has_stage("acc_view")) s.stage("acc_view").compute_inline();
    return st;
  }

  void gemm_writer(Schedule& s, const OpGraph& g, GemmStages& st) const override {
    Stage& out = s.stage(g.output->name);
    const auto& o = out.op()->axes;
    st.acc = &s.stage(g.acc->name);
    st.out = &out;
    st.batch = o[0].var;
    if (g.workload.op == "conv2d_nhwc") {
      st.rows = out.fuse(o[1].var, o[2].var);
      st.cols = o[3].var;
    } else {
      st.rows = o[1].var;
      st.cols = out.fuse(o[2].var, o[3].var);
      if (const ConvDims d = conv_dims(g); d.group > 1) {
        auto [group, rows] = out.split(o[1].var, d.kg());
        st.batch = out.fuse(o[0].var, group);
        st.rows = rows;
      }
    }
  }

  GemmShape gemm_shape(const OpGraph& g) const override { return conv_gemm_shape(g); }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_cuda() { return std::make_unique<Conv2dGpu>(TargetKind::Cuda); }
std::unique_ptr<ScheduleTemplate> make_conv2d_rocm() { return std::make_unique<Conv2dGpu>(TargetKind::Rocm); }

}  // namespace tf::templates
