// Fuzzes schedule configs (--config text) against a few workloads: bounded JSON parsing, then
// completion and application of the config, for a CPU target and (every other input) a CUDA
// one (the GPU templates: the GEMM hierarchy, shared tiles, pipelines, implicit-GEMM graphs, the
// tensor-core templates).
// Refusal is UserError or a JSON parse error; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/schedule_templates.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "base/json_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tf::Target cpu = tf::parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  static const tf::Target cuda = tf::parse_target("cuda -arch=sm_90");
  static const std::vector<tf::OpGraph> graphs = [] {
    std::vector<tf::OpGraph> g;
    for (const char* w : {"matmul(M=33,N=17,K=9)", "batch_matmul(B=2,M=5,N=7,K=3,epilogue=bias)",
                          "conv2d_nchw(N=1,C=3,H=9,W=9,K=4,R=3,S=3,pad=1)", "conv2d_nhwc(N=1,H=7,W=7,C=2,K=5,R=3,S=3)",
                          "depthwise_conv2d_nchw(N=1,C=3,H=8,W=8,R=3,S=3,stride=2,pad=1)",
                          // The tensor-core templates (CUDA; the CPU refuses them by name).
                          "matmul(M=33,N=17,K=9,precision=fp16)", "conv2d_nchw(N=1,C=3,H=9,W=9,K=4,R=3,S=3,pad=1,precision=tf32)"}) {
      g.push_back(tf::build_op(tf::parse_workload(w)));
    }
    return g;
  }();
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json config;
  try {
    config = tf::parse_json_bounded(text);
  } catch (const nlohmann::json::parse_error&) {
    return 0;
  } catch (const tf::JsonRefused&) {
    return 0;
  }
  const tf::OpGraph& g = graphs[size % graphs.size()];
  const tf::Target& target = (size / graphs.size()) % 2 == 1 ? cuda : cpu;
  try {
    nlohmann::json complete = tf::complete_config(g, target, config);
    (void)complete.dump();
    tf::apply_config(g, target, complete);
  } catch (const tf::UserError&) {
  }
  return 0;
}
