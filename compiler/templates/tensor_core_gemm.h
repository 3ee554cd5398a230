// The tensor-core GEMM that dense_tc.cuda and conv2d_tc.cuda share
// (compiler/templates/dense_tc_gpu.cc tells the whole story): a GEMM of float32 operands at
// precision=tf32, fp16 or bf16, one warp-level product (mma.sync) per 16 x 8 tile of C and step of
// K, over permuted accumulator coordinates, the operands that are inputs staged in shared memory
// and pipelined.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/templates/gpu_gemm.h"

namespace tf::templates {

// Which of the GEMM's operands are given in 16 bits (dtype=float16, bfloat16; weight_dtype for
// the operand that is the weights): their tiles are copies of them, as half_tiles makes of a
// float32 operand.
struct Given16 {
  bool a = false, b = false;
  bool operator[](bool is_b) const { return is_b ? b : a; }
};

class TensorCoreGemm : public ScheduleTemplate {
 public:
  TensorCoreGemm(std::string name, int version, std::vector<std::string> ops,
                 std::vector<OperandTypes> types = kTensorCoreTypes);

  const std::vector<KnobDef>& knobs() const final;
  std::vector<json> int_candidates(const OpGraph& g, const Target& t, const KnobDef& k) const final;
  json default_config(const OpGraph& g, const Target& t) const final;
  std::vector<json> seed_configs(const OpGraph& g, const Target& t) const final;
  std::string check_constraints(const OpGraph& g, const Target& t, const json& c) const final;
  OpGraph schedule_graph(const OpGraph& g, const Target& t, const json& c) const final;
  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const final;

 protected:
  // The GEMM's extents (batches, M, N, K), from the workload.
  virtual GemmShape gemm_shape(const OpGraph& g) const = 0;
  // The GEMM the template computes: a reduction `acc` ([batch][M][N] or [M][N]) over one axis
  // of a product a * b, the output reading it (through views the template inlines); `g` itself
  // by default.
  virtual OpGraph gemm_graph(const OpGraph& g) const { return g; }
  // Whether A and B are read straight from inputs (then staged in shared memory with `shared`),
  // not computed (an im2col matrix, inlined).
  virtual std::pair<bool, bool> inputs_ab(const OpGraph& g) const = 0;
  // Whether the defaults are those of A and B read as matrices (timed with both read from
  // inputs): both inputs by default; a model's views of them too (dense_tc), so that reading
  // an operand through views changes the kernel count, not its tiles.
  virtual bool matrix_operands(const OpGraph& g) const {
    const auto [a, b] = inputs_ab(g);
    return a && b;
  }
  // Whether A is the weights (weight_dtype's operand; B by default, as in a matmul).
  virtual bool weights_are_a(const OpGraph&) const { return false; }
  // K's elements per outer index of K (a convolution's R x S filter taps per channel, 1 for a
  // GEMM): K chunks of a multiple of it decode each element's (channel, tap) of the im2col tile
  // once a kernel (the chunk's start a whole channel), not in every iteration.
  virtual int64_t k_taps(const OpGraph&) const { return 1; }
  // The output stage's loops as the GEMM's batch (null when none), rows and columns, fusing
  // its axes where a GEMM axis is several of them.
  virtual void output_axes(Stage& out, const OpGraph& g, Expr& batch, Expr& rows,
                           Expr& cols) const = 0;

 private:
  int64_t depth(const OpGraph& g) const;
  // The extent of K each part covers (split_k: K / parts rounded up to whole iterations; the
  // last part's steps past K read zeros), or K rounded up to whole iterations.
  int64_t part_depth(const OpGraph& g, const json& c) const;
  // Seeds of 6 to 12 buffers for GEMMs of operands read from inputs (seed_configs).
  std::vector<json> deep_pipelines(const OpGraph& g, const Target& t) const;
  int64_t shared_bytes(const OpGraph& g, const json& c) const;
  std::string wgmma_constraints(const OpGraph& g, const Target& t, const json& c) const;
  Given16 given_16_bits(const OpGraph& g) const;
};

}  // namespace tf::templates
