// model_compiler: a whole model (after the graph passes) -> one shared library and its sidecar.
//
// What it promises:
//   - One kernel per fused group (graph/fusion.h). A group anchored by a Conv, MatMul or Gemm
//     that a workload expresses (graph/tasks.h) is compiled by that workload's schedule
//     template, with the config the lookup gives (tuned, or the default), its bias and Relu
//     as the template's epilogue; the group's other elementwise nodes follow in a second
//     kernel. Every other group, and anchors no workload expresses, become one generic
//     kernel of tensor expressions (graph/node_te.h) under a default schedule: producers
//     inlined into their consumer, reductions computed first, the outer loops parallel and
//     the innermost vectorized where it divides. A group with several outputs is compiled
//     node by node.
//   - Intermediates live at offsets of one workspace planned by liveness (graph/memory_plan.h);
//     model inputs and outputs are the caller's buffers; float constants are embedded.
//   - The library exports the C ABI of compiler/model_entry.h; `out + ".json"` names every
//     kernel, its nodes, its workload and config and where the config came from.
//   - Nothing is written unless everything compiled: a node no kernel can compute is a
//     UserError naming it, before any file exists.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/lower.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "graph/graph.h"
#include "graph/memory_budget.h"
#include "graph/memory_plan.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"

namespace tf::graph {

// The config a tuned kernel uses: null config means the template's default.
struct KernelConfig {
  nlohmann::json config;
  std::string source = "default";  // default, tuned (exact|same-arch|nearest-shape)
  nlohmann::json tuned_from;
};
using ConfigLookup = std::function<KernelConfig(const Workload&, const Target&)>;

struct ModelKernel {
  std::string function;            // the exported symbol
  std::vector<std::string> nodes;  // graph nodes it computes
  std::string workload;            // canonical spec; empty for a generic kernel
  std::string template_name;       // the schedule template, or "generic"
  std::vector<std::string> args;   // value names in call order, the output last
  KernelConfig config;
  // The function of an earlier kernel whose code is this one's but for the name (a repeated
  // layer): the model calls that one, and this one is not generated. Empty otherwise.
  std::string same_code_as;
  // GPU targets: the kernels one call launches and their grids (compiler/gpu.h GpuPlan).
  nlohmann::json launch;
  int bucket = 0;  // a library of shape buckets: the bucket it computes
};


struct CompiledModel {
  Target target;
  // A GPU target whose kernels this library runs serially on the CPU (compile_model's
  // emulate_gpu), or "".
  std::string emulates;
  // Emulated: the kernels of warp-level products (tensor cores) it runs as generic kernels of
  // the same rounding instead (a serialized grid has no warps).
  int emulated_products = 0;
  // A GPU library: how many code modules hold its kernels (0 for CPU and emulated libraries).
  int64_t device_modules = 0;
  std::vector<ModelKernel> kernels;
  MemoryPlan memory;
  // Concats with no kernel: their inputs' kernels write into their outputs (graph/memory_plan.h).
  std::vector<InPlaceConcat> in_place;
  int64_t constant_bytes = 0;  // embedded (once for buckets that share them)
  nlohmann::json inputs, outputs;  // bucket 0's
  // Bucket 0's slices of axis 0 run one at a time (graph/image_loop.h; 1: the batch at once),
  // on up to image_slots threads, each with a workspace slot of one image.
  int64_t images = 1;
  int64_t image_slots = 1;
  // A library of shape buckets: each bucket's inputs, outputs, workspace and in-place Concats
  // (bucket 0's are also the fields above; memory.arena_bytes is the largest bucket's).
  // Empty for a library of one set of sizes.
  struct Bucket {
    nlohmann::json inputs, outputs;
    int64_t workspace_bytes = 0;
    nlohmann::json in_place;
    // Slices of axis 0 a call runs one at a time (graph/image_loop.h); 1: the whole batch at once.
    int64_t images = 1;
    // Fewer rows of axis 0 may run this bucket padded (pad_batch).
    bool padded = false;
  };
  std::vector<Bucket> buckets;
  // Compiled with pad_batch: fewer rows of axis 0 run a larger bucket padded (Bucket::padded).
  bool pad_batch = false;
  // Lowering passes skipped in every kernel (compile --model --skip-pass: what a pass gains,
  // measured on a whole model); empty for a normal build.
  std::vector<std::string> skipped_passes;
  // Bucket 0's Graph::import_warnings (a declared output size import did not keep).
  std::vector<std::string> import_warnings;
  // Kernels with a tuned template (a workload), and those of them whose config is the
  // default (not tuned).
  int tunable() const;
  int untuned() const;
  nlohmann::json sidecar(const std::string& model) const;
};

// Compiles `g` for `target` (a CPU target) into `out` (and `out + ".json"`). `lookup` gives
// each tunable kernel its config.
// Refuses (UserError naming the node, or the total) a value past `memory_budget` bytes, or a
// model whose run would hold more than that in inputs, outputs and workspace
// (graph/memory_budget.h), before generating anything.
// The channel block of the layout pass for target `t`: its vector width on CPUs, 0 elsewhere
// (graph::PassOptions::channel_block).
int64_t channel_block(const Target& t);

// The graph of an .onnx file after the passes at `opt_level`, without the passes `disable`
// names, for a target whose vector width is `block` (channel_block): what compile --model
// compiles. UserError for a file that does not import or a pass name that does not exist.
// `precision`: the products' precision (--precision; PassOptions::precision), on tensor cores
// where `tensor_cores` (a CUDA target: tensor_cores(t)). `bind`: sizes for its dynamic input
// dimensions (graph/onnx_import.h). `external_data`: whether initializers stored outside the
// file are read from its directory (not for a file a service keeps among other users' files).
Graph load_model(const std::string& path, int opt_level, const std::vector<std::string>& disable,
                 int64_t block, Precision precision = Precision::Float32, bool tensor_cores = false,
                 const InputBinding& bind = {}, bool external_data = true);

// Whether --precision runs a model's products on `t`'s tensor cores (cuda targets).
bool tensor_cores(const Target& t);

//
// With `emulate_gpu` (target a GPU: cuda, rocm), every kernel is scheduled for the GPU (its
// templates, a 1-D grid for generic kernels), checked as the GPU would take it (UserError
// otherwise), and run serially, its grid as loops (compiler/gpu.h serialize_gpu_bindings),
// in a library for this machine: the GPU path's kernels and memory plan checked on a CPU.
// A kernel of warp-level products (tensor cores: --precision tf32, fp16, bf16), which needs a
// warp's lanes at once, is lowered as a generic kernel of the same function instead, its
// operands rounded as the tensor cores round them (compiler/operators.h with_operands_rounded;
// CompiledModel::emulated_products counts them).
CompiledModel compile_model(const Graph& g, const Target& target, const ConfigLookup& lookup,
                            const std::string& out, const std::string& model_name,
                            int64_t memory_budget = default_memory_budget(), bool emulate_gpu = false);

// One library of shape buckets: the same model imported at several sets of sizes
// (`buckets`, bucket 0 first; the same inputs and outputs but for their sizes), each compiled
// as above with kernels of its own (named tf_b<bucket>_k...; the same code shared across
// buckets), one entry point choosing the bucket by the inputs' shapes (compiler/model_entry.h;
// a GPU library's: one launch plan per bucket, runtime/gpu_model/plan.h).
// `pad_batch` (compile --pad-batch): calls with fewer rows of axis 0 than a bucket's may run
// it padded (EntrySpec::padded), for every bucket of more than one row; UserError, naming the
// bucket and why, where the model does not keep those rows apart (graph/image_loop.h), or no
// bucket has more than one.
// `lowering`: every kernel's lowering options (compiler/lower.h; compile --model --skip-pass),
// checked before anything is compiled (UserError naming a pass that is not one).
// UserError for more than kMaxShapeBuckets.
CompiledModel compile_model(const std::vector<const Graph*>& buckets, const Target& target,
                            const ConfigLookup& lookup, const std::string& out,
                            const std::string& model_name,
                            int64_t memory_budget = default_memory_budget(),
                            bool emulate_gpu = false, bool pad_batch = false,
                            const LowerOptions& lowering = {});

}  // namespace tf::graph
