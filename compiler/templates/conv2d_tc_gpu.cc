// conv2d_tc.cuda (v2): convolutions (conv2d_nchw, conv2d_nhwc) with precision=tf32, fp16 or bf16
// on tensor cores: the implicit GEMM of conv2d.cuda (compiler/templates/conv2d_gpu.cc:
// NCHW acc[n][k][p] = sum_q weight[k][q] * col[n][q][p], NHWC acc[n][p][k] = sum_q col[n][p][q] *
// weight[q][k]) scheduled as dense_tc.cuda schedules a batch_matmul (tensor_core_gemm.h): the
// images are the batch; with `shared` the weights (an input) are copied into shared memory and
// the im2col tile is computed into it by all the block's threads (each element once per block;
// a 1x1 convolution's tile is a plain copy, cp.async), both pipelined by `stages`; without it
// each lane gathers its fragments from the data (the padding a select that does not load).
// split_k as in dense_tc.cuda: a batch-1 ResNet-50's 14 x 14 and 7 x 7 layers are 16-28 blocks
// of 64 x 32 without it. v1 gathered the im2col operand per lane even with `shared` (ResNet-50
// fp16 on an H200: 7.0 ms; v2 0.92 ms, PyTorch fp16 1.05).
// weight_dtype=float16 | bfloat16: the weights given in 16 bits (a model's, stored so at compile
// time). NCHW's A tile is then a copy of their rows (cp.async, 8 values a lane), NHWC's B tile a
// transposing copy through registers; read by ldmatrix either way. dtype=float16 | bfloat16:
// the data too (a value a model stores in 16 bits between kernels), widened as the im2col tile
// is computed and stored into it in 16 bits (exactly).
#include "compiler/templates/tensor_core_gemm.h"

namespace tf::templates {
namespace {

class Conv2dTensorCore final : public TensorCoreGemm {
 public:
  Conv2dTensorCore()
      : TensorCoreGemm("conv2d_tc.cuda", 2, {"conv2d_nchw", "conv2d_nhwc"},
                       {kTensorCoreTypes[0], kTensorCoreTypes[1], kTensorCoreTypes[2], k16BitTypes[0], k16BitTypes[1],
                        k16BitWeightTypes[0], k16BitWeightTypes[1]}) {}

 protected:
  GemmShape gemm_shape(const OpGraph& g) const override { return conv_gemm_shape(g); }
  OpGraph gemm_graph(const OpGraph& g) const override { return conv_gemm_graph(g, id()); }
  // NCHW: A is the weights; NHWC: B is.
  std::pair<bool, bool> inputs_ab(const OpGraph& g) const override {
    const bool nhwc = g.workload.op == "conv2d_nhwc";
    return {!nhwc, nhwc};
  }
  bool weights_are_a(const OpGraph& g) const override { return g.workload.op == "conv2d_nchw"; }
  // K runs over (channel, r, s), s innermost, in both layouts.
  int64_t k_taps(const OpGraph& g) const override {
    return g.workload.get("R") * g.workload.get("S");
  }
  void output_axes(Stage& out, const OpGraph& g, Expr& batch, Expr& rows,
                   Expr& cols) const override {
    const auto& o = out.op()->axes;
    batch = o[0].var;
    // NCHW [n][k][oh][ow]: rows k, columns oh*OW + ow; NHWC [n][oh][ow][k]: rows oh*OW + ow.
    if (g.workload.op == "conv2d_nhwc") {
      rows = out.fuse(o[1].var, o[2].var);
      cols = o[3].var;
    } else {
      rows = o[1].var;
      cols = out.fuse(o[2].var, o[3].var);
    }
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_tc_cuda() {
  return std::make_unique<Conv2dTensorCore>();
}

}  // namespace tf::templates
