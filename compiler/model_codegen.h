// model_codegen: the compiler's back end for a whole model's library. graph/model_compiler.h
// decides what each kernel computes (a template's workload, or tensor expressions) and the
// model's entry point (compiler/model_entry.h: its plan of calls and buffers); this file turns that
// into one library on disk:
//   - a generic kernel's default schedule and lowering (lower_generic_kernel);
//   - for GPU targets, each kernel planned as the GPU will run it (its launches; UserError for
//     what the GPU cannot run), or, emulated, its grid as loops for this machine;
//   - kernels whose code is the same but for the name (a repeated layer, the time steps of an
//     unrolled recurrence) generated once: most of a compile is LLVM's;
//   - code generation on all cores, GPU device code (PTX for cuda, code objects for rocm: one
//     function, compiler/link.h gpu_device_module), the entry point's host code, one link;
//   - the library published atomically (base/file_io.h AtomicFile), its sidecar beside it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/gpu.h"
#include "compiler/ir.h"
#include "compiler/lower.h"
#include "compiler/model_entry.h"
#include "compiler/schedule.h"
#include "compiler/target.h"
#include "compiler/te.h"

namespace tf {

// The lowered function of a generic kernel computing `result` from `args` (graph/node_te.h's
// tensor expressions): producers inlined into their consumer (stages past the inline budget
// computed apart), reductions computed first, the outer loops parallel and the innermost
// vectorized where it divides (CPUs), or the spatial axes dealt to a 1-D grid (GPUs, long
// reductions spread over threads). `what` names the kernel's node in UserErrors; `options` are
// the lowering's (compiler/lower.h: passes skipped).
ir::LoweredFunc lower_generic_kernel(ir::Tensor result, const std::vector<ir::Tensor>& args,
                                     const Target& target, const std::string& function,
                                     const std::string& what, const LowerOptions& options = {});

// Runs work(0), ..., work(count - 1), each once, on up to `threads` threads (this one among
// them). `work` catches what it throws.
void run_on_threads(size_t count, unsigned threads, const std::function<void(size_t)>& work);
// The threads a model's compile lowers and generates code on: this machine's cores, at most 8.
unsigned model_compile_threads();

// Whether stages inlined one into the next (an anchor's fused tail) stay within the
// compiler's bounds on an expression's depth and size (compiler/inline_budget.h).
bool within_inline_budget(const std::vector<ir::Tensor>& stages);

class ModelCodegen {
 public:
  // Throws UserError for a target no model library is compiled for, or `emulate_gpu` with a
  // CPU target.
  ModelCodegen(const Target& target, bool emulate_gpu);

  // What the library's code runs on: the target, or this machine for a GPU library's host code
  // and an emulated GPU's kernels.
  const Target& code_target() const { return code_target_; }
  // Device code for the GPU, host code for this machine.
  bool gpu_library() const { return gpu_library_; }

  // Adds the kernel `func` (its name is the exported function's). On GPU targets it is planned
  // as the GPU will run it (UserError prefixed with `what` if it cannot) and its launches are
  // returned (null on CPUs).
  nlohmann::json add_kernel(ir::LoweredFunc func, const std::string& what);

  // Per kernel, the first kernel with the same code (itself when none); computed on all cores.
  // Call once, after the last add_kernel.
  const std::vector<size_t>& share_code();

  struct Written {
    int64_t device_modules = 0;   // GPU libraries: the modules of device code
    int64_t workspace_bytes = 0;  // the largest bucket's, with a GPU library's split-K scratch after it
  };
  // Generates every kernel whose code is its own, the entry point (`buckets`, usually one, whose
  // calls name the kernels that share_code chose, in the order add_kernel took them: bucket 0's
  // first; a GPU library's workspaces grow by the kernels' scratch), links them into `out` and
  // writes `out + ".json"`, the text `sidecar` returns, before the library appears. Nothing is left
  // at `out` when anything fails.
  Written write(std::vector<EntrySpec>& buckets, const std::string& out,
                const std::function<std::string(const Written&)>& sidecar);

 private:
  void on_all_cores(const std::function<void(size_t)>& work, size_t count) const;
  void write_gpu_objects(std::vector<EntrySpec>& buckets, const std::string& tmp,
                         std::vector<std::string>& objects, Written& written);

  Target target_, code_target_;
  bool emulate_ = false, gpu_library_ = false;
  unsigned threads_ = 1;
  std::vector<ir::LoweredFunc> funcs_;
  std::vector<GpuPlan> plans_;
  std::vector<size_t> code_of_;
  std::vector<std::string> errors_;  // per kernel: why its code could not be keyed
};

}  // namespace tf
