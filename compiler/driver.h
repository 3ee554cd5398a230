// The compiler's front door: workload + target + config -> lowered kernel -> files.
//
// This is what `tunefarm compile`, `run` and `describe` call, what the tuner's build worker
// calls for each candidate config (tuner/builder.cc), and, through compile_op_graph, what a
// whole model's compile calls for each tunable kernel (graph/model_compiler.cc).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "compiler/gpu.h"
#include "compiler/lower.h"
#include "compiler/operators.h"
#include "compiler/target.h"

namespace tf {

enum class EmitKind { SharedLibrary, Object, Asm, LLVM, LoopIR };

// Parses so, obj, asm, llvm, loop-ir; throws UserError otherwise.
EmitKind parse_emit_kind(const std::string& s);

struct CompiledKernel {
  OpGraph graph;
  Target target;
  std::string name;            // the exported function
  nlohmann::json config;       // complete: every knob
  std::string config_source;   // default, given, tuned (exact|same-arch|nearest-shape)
  nlohmann::json tuned_from;   // for tuned configs: tier, workload, target, median_s
  LowerResult lowered;
  std::optional<GpuPlan> gpu;  // GPU targets: every kernel the call launches, workspaces
  // GPU targets: the first kernel's grid and block sizes; null elsewhere.
  const GpuLaunch* launch() const { return gpu ? &gpu->kernels.front().launch : nullptr; }
  // Inputs passed packed (OpGraph::prepacked): the kernel's argument is their pack_layout.
  std::vector<ir::Schedule::Packing> packed;
};

// Lowers the workload under `config` (null: the default config for the target).
CompiledKernel compile_kernel(const Workload& w, const Target& t, const nlohmann::json& config,
                              const std::string& config_source, const std::string& name,
                              const LowerOptions& options = {});

// The same for an operator graph built by the caller: build_op's, with a richer epilogue
// (OpGraph::tail) and its extra inputs after the usual ones.
CompiledKernel compile_op_graph(OpGraph g, const Target& t, const nlohmann::json& config,
                                const std::string& config_source, const std::string& name,
                                const LowerOptions& options = {});

// compile_op_graph in two steps, for callers that lower many kernels at once (a model's, on
// all cores: graph/model_compiler.cc): everything before the lowering (the name checked, the
// config completed, the schedule applied, the inputs it packs: `kernel` but its `lowered` and
// `gpu`), then the lowering, which reads nothing but `p` and `options` and may run on another
// thread.
struct PreparedKernel {
  CompiledKernel kernel;
  ir::Schedule schedule;
  std::vector<ir::Tensor> args;  // the lowered function's, the packed inputs as packed
};
PreparedKernel prepare_op_graph(OpGraph g, const Target& t, const nlohmann::json& config,
                                const std::string& config_source, const std::string& name);
CompiledKernel lower_prepared(PreparedKernel p, const LowerOptions& options = {});

// Writes the requested output to `out_path`. For a shared library it also writes
// `out_path + ".json"`, the sidecar describing the kernel's arguments and config. On GPU
// targets the "shared library" is the module a board's runtime loads: PTX text for cuda (the
// driver compiles it), a .hsaco code object for rocm; its sidecar adds the launch
// configuration. cuda has no object output (UserError).
void write_kernel(const CompiledKernel& k, EmitKind kind, const std::string& out_path);

// The text of a text output (loop IR, LLVM IR, assembly), e.g. for stdout.
std::string kernel_text(const CompiledKernel& k, EmitKind kind);

// Arguments (name, shape, dtype, role) in call order, as in the sidecar's "args".
nlohmann::json describe_args(const OpGraph& g);

// The sidecar: workload, target, function, args, flops, config and where it came from; for
// GPU kernels also "module" (ptx or hsaco) and "launch" (grid, block, shared memory; for a
// function of several kernels also "then", the later kernels' function names and launches,
// and "workspace_elements", the sizes of the buffers passed after the arguments).
nlohmann::json kernel_metadata(const CompiledKernel& k);

}  // namespace tf
