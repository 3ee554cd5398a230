// conv2d_tc.cuda (v1): convolutions (conv2d_nchw, conv2d_nhwc) with precision=tf32, fp16 or bf16
// on tensor cores: the implicit GEMM of conv2d.cuda (compiler/templates/conv2d_gpu.cc:
// NCHW acc[n][k][p] = sum_q weight[k][q] * col[n][q][p], NHWC acc[n][p][k] = sum_q col[n][p][q] *
// weight[q][k]) scheduled as dense_tc.cuda schedules a batch_matmul (tensor_core_gemm.h): the
// images are the batch, the weights (an input) are staged in shared memory with `shared`, the
// im2col operand is gathered from the data by each lane where its fragment needs it (inlined:
// the padding a select that does not load), through L1.
#include "compiler/templates/tensor_core_gemm.h"

namespace tf::templates {
namespace {

class Conv2dTensorCore final : public TensorCoreGemm {
 public:
  Conv2dTensorCore() : TensorCoreGemm("conv2d_tc.cuda", 2, {"conv2d_nchw", "conv2d_nhwc"}) {}

 protected:
  GemmShape gemm_shape(const OpGraph& g) const override { return conv_gemm_shape(g); }
  OpGraph gemm_graph(const OpGraph& g) const override { return conv_gemm_graph(g, id()); }
  // NCHW: A is the weights; NHWC: B is.
  std::pair<bool, bool> inputs_ab(const OpGraph& g) const override {
    const bool nhwc = g.workload.op == "conv2d_nhwc";
    return {!nhwc, nhwc};
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
