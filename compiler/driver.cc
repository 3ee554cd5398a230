#include "compiler/driver.h"

#include <filesystem>
#include <stdexcept>

#include "base/error.h"
#include "base/file_io.h"
#include "compiler/codegen_llvm.h"
#include "compiler/ir_printer.h"
#include "compiler/link.h"
#include "compiler/schedule_templates.h"

namespace tf {
namespace fs = std::filesystem;

EmitKind parse_emit_kind(const std::string& s) {
  if (s == "so") return EmitKind::SharedLibrary;
  if (s == "obj") return EmitKind::Object;
  if (s == "asm") return EmitKind::Asm;
  if (s == "llvm") return EmitKind::LLVM;
  if (s == "loop-ir") return EmitKind::LoopIR;
  throw UserError(str("--emit '", s, "' is not one of so, obj, asm, llvm, loop-ir"));
}

CompiledKernel compile_kernel(const Workload& w, const Target& t, const nlohmann::json& config,
                              const std::string& config_source, const std::string& name,
                              const LowerOptions& options) {
  return compile_op_graph(build_op(w), t, config, config_source, name, options);
}

CompiledKernel compile_op_graph(OpGraph g, const Target& t, const nlohmann::json& config,
                                const std::string& config_source, const std::string& name,
                                const LowerOptions& options) {
  return lower_prepared(prepare_op_graph(std::move(g), t, config, config_source, name), options);
}

PreparedKernel prepare_op_graph(OpGraph g, const Target& t, const nlohmann::json& config,
                                const std::string& config_source, const std::string& name) {
  CompiledKernel k;
  k.graph = std::move(g);
  k.target = t;
  k.name = name.empty() ? k.graph.workload.op : name;
  for (char c : k.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
      throw UserError(str("function name '", k.name, "' must be letters, digits and underscores"));
    }
  }
  if (std::isdigit(static_cast<unsigned char>(k.name[0]))) {
    throw UserError(str("function name '", k.name, "' must not start with a digit"));
  }
  k.config = complete_config(k.graph, t, config);
  k.config_source = config_source;
  ir::Schedule sch = apply_config(k.graph, t, k.config);
  std::vector<ir::Tensor> args = k.graph.inputs;
  for (const ir::Schedule::Packing& p : sch.packings()) {
    if (!p.given) continue;
    for (ir::Tensor& a : args) {
      if (a->name == p.input) a = sch.placeholders().at(p.input + ".pack");
    }
    k.packed.push_back(p);
  }
  return PreparedKernel{std::move(k), std::move(sch), std::move(args)};
}

CompiledKernel lower_prepared(PreparedKernel p, const LowerOptions& options) {
  CompiledKernel& k = p.kernel;
  k.lowered = lower(p.schedule, p.args, k.name, options);
  if (k.target.is_gpu() && options.stop_after.empty())
    k.gpu = plan_gpu_program(k.lowered.func, k.target);
  return std::move(k);
}

nlohmann::json describe_args(const OpGraph& g) {
  nlohmann::json args = nlohmann::json::array();
  auto add = [&](const ir::Tensor& t, const char* role) {
    args.push_back({{"name", t->name}, {"shape", t->shape}, {"dtype", g.arg_dtype(t)}, {"role", role}});
  };
  for (const ir::Tensor& t : g.inputs) add(t, "input");
  add(g.output, "output");
  return args;
}

nlohmann::json kernel_metadata(const CompiledKernel& k) {
  nlohmann::json m = {
      {"format", "tunefarm-kernel/1"},
      {"workload", k.graph.workload.canonical()},
      {"op", k.graph.workload.op},
      {"target", k.target.str()},
      {"function", k.name},
      {"args", describe_args(k.graph)},
      {"flops", k.graph.flops},
      {"template", template_name(k.graph.workload, k.target)},
      {"config", k.config},
      {"config_source", k.config_source},
      {"tuned_from", k.tuned_from},
  };
  if (k.gpu) {
    m["module"] = k.target.info().module_format;
    m["launch"] = k.gpu->to_json();
  }
  // Inputs the kernel takes packed (OpGraph::prepacked): argument index, dimension, block.
  for (const ir::Schedule::Packing& p : k.packed) {
    for (size_t i = 0; i < k.graph.inputs.size(); ++i) {
      if (k.graph.inputs[i]->name == p.input) m["packed"].push_back({{"arg", i}, {"dim", p.dim}, {"block", p.block}});
    }
  }
  return m;
}

std::string kernel_text(const CompiledKernel& k, EmitKind kind) {
  switch (kind) {
    case EmitKind::LoopIR: return ir::to_string(k.lowered.func);
    case EmitKind::LLVM: return codegen_llvm(k.lowered.func, k.target, CodegenOutput::LLVM).data;
    case EmitKind::Asm: return codegen_llvm(k.lowered.func, k.target, CodegenOutput::Asm).data;
    case EmitKind::Object:
    case EmitKind::SharedLibrary: break;
  }
  TF_CHECK(false, "kernel_text of a binary output");
  return "";
}

void write_kernel(const CompiledKernel& k, EmitKind kind, const std::string& out_path) {
  if (k.target.kind == TargetKind::Cuda && kind == EmitKind::Object) {
    throw UserError(str("--emit obj: ", k.target.str(), " kernels are PTX, which has no object form here "
                        "(--emit so writes the PTX module and its sidecar; --emit asm the PTX alone)"));
  }
  switch (kind) {
    case EmitKind::LoopIR:
    case EmitKind::LLVM:
    case EmitKind::Asm: return write_file(out_path, kernel_text(k, kind));
    case EmitKind::Object:
      return write_file(out_path, codegen_llvm(k.lowered.func, k.target, CodegenOutput::Object).data);
    case EmitKind::SharedLibrary: {
      // Built under a temporary name and renamed, so a failed build never leaves a half
      // library; the temporaries go whatever happens.
      AtomicFile out(fs::absolute(out_path), ".so");
      if (k.target.is_gpu()) {
        write_file(out.temp_path(), gpu_device_module({k.lowered.func}, k.target, out.temp_path()));
      } else {
        CodegenResult obj = codegen_llvm(k.lowered.func, k.target, CodegenOutput::Object);
        TemporaryFiles temps;
        const std::string tmp_obj = temps.add(out.temp_path() + ".o");
        write_file(tmp_obj, obj.data);
        link_shared_library(tmp_obj, out.temp_path(), k.target, obj.uses_openmp, obj.uses_libm);
      }
      write_file(out.final_path() + ".json", kernel_metadata(k).dump(2) + "\n");
      out.commit();
      return;
    }
  }
}

}  // namespace tf
