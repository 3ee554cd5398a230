#include "cli/model_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "base/error.h"
#include "base/file_io.h"
#include "graph/element_types.h"
#include "graph/fusion.h"
#include "graph/image_loop.h"
#include "graph/memory_budget.h"
#include "graph/memory_plan.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "graph/node_te.h"
#include "graph/npy.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"
#include "graph/quantize.h"
#include "graph/reference_run.h"
#include "graph/tasks.h"
#include "runtime/gpu_runtime.h"
#include "tuner/measure.h"
#include "tuner/tuning_records.h"

namespace tf::cli {

using nlohmann::json;

using graph::channel_block;
using graph::load_model;

void add_dim_options(CLI::App* cmd, DimArgs& a) {
  cmd->add_option(
      "--dim", a.dims,
      "the size of a model's dynamic input dimension by its name, as name=size (--dim batch=8; "
      "repeatable; `import` lists a model's); compile, tune and import take several sizes, "
      "name=s1,s2,... (--dim batch=1,8,32): one shape bucket per size in one library");
  cmd->add_option("--input-shape", a.shapes,
                  "a model input's whole shape, as input=d0,d1,... (--input-shape "
                  "x=1,3,224,224), for dynamic "
                  "dimensions without a name (repeatable)");
}

void add_import_command(CLI::App& app, ImportArgs& a) {
  a.cmd = app.add_subcommand(
      "import", "Import an ONNX model: its graph after the graph passes and the tunable tasks");
  a.cmd->add_option("model", a.model, "the .onnx file");
  a.cmd
      ->add_option(
          "--target,-t", a.target,
          "target the tasks are for (its vector width sets the convolutions' channel blocks)")
      ->capture_default_str();
  a.cmd->add_option("--opt-level,-O", a.opt_level, "graph optimisation level, 0 to 3")
      ->capture_default_str();
  a.cmd->add_option("--disable-pass", a.disable, "do not run this graph pass (repeatable)");
  a.cmd->add_option("--dump-pass", a.dump,
                    "print the graph after this pass to stderr, or 'all' (repeatable)");
  a.cmd->add_flag("--list-passes", a.list_passes, "list the graph passes and exit");
  add_precision_option(a.cmd, a.precision);
  add_dim_options(a.cmd, a.dims);
  a.cmd->add_flag("--json", a.json, "print JSON");
}

// The products of `g` (its anchors: MatMul, Gemm, Conv and the kernels passes made of them).
static int64_t count_anchors(const graph::Graph& g) {
  int64_t anchors = 0;
  for (const graph::Node& n : g.nodes) anchors += graph::op_kind(n.op) == graph::OpKind::Anchor;
  return anchors;
}

// How this target multiplies the int8 kernels' bytes, and whether it has AMX tiles that they
// do not use.
static std::string int8_instructions(const Target& t) {
  std::string how = byte_dot_name(t.byte_dot());
  if (t.arch_name() == "x86_64" && t.has_feature("amx-int8")) how += "; this CPU's AMX tiles (tdpbusd) are not used yet";
  return how;
}

// The summary's line on a QDQ model: how many of its products (the anchors) run as int8
// kernels (fold-qdq) and with which instructions, the rest in float32 on the quantized values.
static void print_quantized(const graph::Graph& g, const Target& t) {
  if (g.quantize_nodes == 0) return;
  const int64_t anchors = count_anchors(g);
  std::printf("int8      %lld of %lld products (MatMul, Gemm, Conv) in int8 kernels (%s), from %lld "
              "QuantizeLinear/DequantizeLinear nodes; the rest computed in float32 on the quantized values "
              "(docs/precision.md)\n",
              static_cast<long long>(g.int8_nodes), static_cast<long long>(anchors), int8_instructions(t).c_str(),
              static_cast<long long>(g.quantize_nodes));
}

// The summary's line at --precision bf16 (fp16): how many products run as bfloat16 (float16)
// kernels, and how this target computes them.
static void print_bf16(const graph::Graph& g, const Target& t) {
  const int64_t anchors = count_anchors(g);
  const bool x86 = t.arch_name() == "x86_64";
  auto line = [&](const char* tag, int64_t count, const char* type, const char* how) {
    if (count == 0) return;
    std::printf("%-9s %lld of %lld products (MatMul, Gemm, Conv) in %s kernels (%s); the rest in float32 "
                "(docs/precision.md)\n",
                tag, static_cast<long long>(count), static_cast<long long>(anchors), type, how);
  };
  line("bf16", g.bf16_nodes, "bfloat16",
       x86 && t.has_feature("amx-bf16")                   ? "vdpbf16ps; this CPU's AMX tiles (tdpbf16ps) are not used yet"
       : x86 && t.has_feature("avx512bf16")               ? "vdpbf16ps"
       : t.arch_name() == "aarch64" && t.has_feature("bf16") ? "bfdot"
       : x86 ? "emulated: this target has no AVX512-BF16, slower than float32"
             : "emulated: this target has no bfloat16 dot product, slower than float32");
  if (g.tensor_core_nodes > 0) {
    const Precision tc = graph::tensor_core_precision(g);
    const auto sixteen_bit_weights = std::count_if(g.nodes.begin(), g.nodes.end(),
                                                   [](const graph::Node& n) { return graph::reads_16_bit_weights(n.op); });
    const std::string p = precision_name(tc);
    std::printf(
        "%-9s %lld of %lld products (MatMul, Gemm, Conv) on tensor cores (mma.sync: operands "
        "rounded to %s%s%s, "
        "float32 sums); depthwise convolutions and the rest in float32 (docs/precision.md)\n",
        p.c_str(), static_cast<long long>(g.tensor_core_nodes), static_cast<long long>(anchors),
        tc == Precision::TF32      ? "TF32"
        : tc == Precision::Float16 ? "float16"
                                   : "bfloat16",
        sixteen_bit_weights == 0
            ? ""
            : str(", ", sixteen_bit_weights, " of them with weights stored in it").c_str(),
        g.sixteen_bit_values == 0
            ? ""
            : str(", ", g.sixteen_bit_values, " values stored in it between kernels").c_str());
  }
  line("fp16", g.fp16_nodes, "float16",
       x86 && t.has_feature("f16c") ? "stored in float16, computed in float32: F16C conversions"
       : x86                        ? "stored in float16, computed in float32: conversions emulated (no F16C), slow"
                                    : "stored in float16, computed in float32");
}

int run_import(const ImportArgs& a) {
  using namespace graph;  // NOLINT
  if (a.list_passes) {
    for (const graph::PassInfo& p : graph_passes())
      std::printf("%-32s O%d  %s\n", p.name, p.opt_level, p.help);
    return 0;
  }
  if (a.model.empty()) throw UserError("import: name the .onnx model file");
  Target target = parse_target(a.target);
  PassOptions opts;
  opts.channel_block = channel_block(target);
  opts.opt_level = a.opt_level;
  opts.disabled = {a.disable.begin(), a.disable.end()};
  opts.dump = {a.dump.begin(), a.dump.end()};
  opts.precision = parse_precision(a.precision);
  opts.tensor_cores = tensor_cores(target);
  check_pass_options(opts);
  // Shape buckets (--dim batch=1,8,32): bucket 0 is described; the tasks are every bucket's.
  const std::vector<InputBinding> bindings = a.dims.bindings();
  const InputBinding& bind = bindings[0];
  Graph g = import_onnx(a.model, bind);
  print_warnings(g.import_warnings);
  GraphStats imported = graph_stats(g);
  size_t nodes_imported = g.nodes.size();
  opts.dump_sink = [](const std::string& pass, const Graph& gr) {
    std::fprintf(stderr, "// after %s\n%s", pass.c_str(), graph_to_text(gr).c_str());
  };
  std::vector<PassReport> reports = run_passes(g, opts);
  // What compile --model would refuse of a node, import refuses too.
  check_node_expressions(g);
  GraphStats after = graph_stats(g);
  std::vector<TaskList> bucket_tasks{extract_tasks(g, target)};
  for (size_t b = 1; b < bindings.size(); ++b) {
    Graph gb = load_model(a.model, a.opt_level, a.disable, opts.channel_block, opts.precision, opts.tensor_cores,
                          bindings[b]);
    check_node_expressions(gb);
    bucket_tasks.push_back(extract_tasks(gb, target));
  }
  TaskList tasks = merge_bucket_tasks(bucket_tasks);
  // The kernels a compile makes: the fused groups but the Concats computed in place.
  std::vector<FusedGroup> fused = plan_fusion(g);
  const std::vector<InPlaceConcat> in_place = in_place_concats(g, fused);
  std::vector<FusedGroup> groups = without_in_place(fused, in_place);
  MemoryPlan memory = plan_memory(g, groups, in_place);

  auto tensors = [&](const std::vector<std::string>& names) {
    json out = json::array();
    for (const std::string& n : names) {
      const Value& v = g.value(n);
      out.push_back({{"name", n}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape}});
    }
    return out;
  };
  json j = {{"model", a.model},
            {"graph", g.name},
            {"opset", g.opset},
            {"opset_converted_from", g.opset_converted_from},
            {"warnings", g.import_warnings},
            {"inputs", tensors(g.inputs)},
            {"outputs", tensors(g.outputs)},
            {"parameters", after.parameters},
            {"constant_bytes", after.constant_bytes},
            {"nodes_imported", nodes_imported},
            {"nodes", g.nodes.size()},
            {"ops_imported", imported.ops},
            {"ops", after.ops},
            {"quantize_nodes", g.quantize_nodes},
            {"int8_nodes", g.int8_nodes},
            {"bf16_nodes", g.bf16_nodes},
            {"fp16_nodes", g.fp16_nodes},
            {"tensor_core_nodes", g.tensor_core_nodes},
            {"sixteen_bit_values", g.sixteen_bit_values},
            {"written_out",
             {{"ifs", g.written_out.ifs},
              {"loops", g.written_out.loops},
              {"scans", g.written_out.scans},
              {"iterations", g.written_out.iterations},
              {"sequence_ops", g.written_out.sequence_ops},
              {"ifs_selected", g.written_out.ifs_selected}}}};
  if (!bind.dims.empty()) j["dims"] = bind.dims;
  if (bindings.size() > 1) {
    j["buckets"] = json::array();
    for (const InputBinding& b : bindings) j["buckets"].push_back(b.dims);
  }
  if (!bind.shapes.empty()) j["input_shapes"] = bind.shapes;
  // Whether a CPU library runs bucket 0 one image at a time (graph/image_loop.h), and why not.
  std::string no_loop;
  if (std::optional<ImageLoop> loop = image_loop(g, &no_loop)) {
    const bool pays = target.is_cpu() && g.one_image_at_a_time;
    j["images"] = {{"images", loop->images}, {"one_at_a_time", pays}, {"flops_per_image", loop->flops},
                   {"kernels", loop->kernels}, {"largest_intermediate_bytes", loop->largest_bytes},
                   {"streamed_weight_bytes", loop->streamed_weight_bytes}};
    no_loop = pays                       ? ""
              : !target.is_cpu()         ? "not a CPU target"
              : !pays_per_image(*loop)   ? "it would not pay: small intermediates, little work an image, or weights read at every image"
                                         : "the pass one-image-at-a-time did not run (--disable-pass, --opt-level)";
  } else {
    j["images"] = {{"one_at_a_time", false}, {"why_not", no_loop}};
  }
  j["passes"] = json::array();
  for (const PassReport& r : reports) {
    j["passes"].push_back({{"name", r.name},
                           {"ran", r.ran},
                           {"fired", r.changed},
                           {"ms", r.ms},
                           {"nodes_after", r.nodes_after}});
  }
  j["tasks"] = json::array();
  for (const Task& t : tasks.tasks) {
    j["tasks"].push_back({{"workload", t.workload},
                          {"count", t.nodes.size()},
                          {"flops", t.flops},
                          {"nodes", t.nodes},
                          {"alternative_to", t.alternative_to}});
  }
  j["fused_kernels"] = json::array();
  for (const FusedGroup& f : groups) {
    j["fused_kernels"].push_back({{"kind", op_kind_name(f.kind)},
                                  {"nodes", f.nodes},
                                  {"inputs", f.inputs},
                                  {"outputs", f.outputs}});
  }
  j["in_place"] = in_place_json(in_place);
  j["memory"] = {{"arena_bytes", memory.arena_bytes},
                 {"naive_bytes", memory.naive_bytes},
                 {"intermediates", memory.buffers.size()}};
  j["untunable"] = json::array();
  for (const Untunable& u : tasks.untunable)
    j["untunable"].push_back({{"node", u.node}, {"op", u.op}, {"reason", u.reason}});
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model     %s (graph '%s', opset %lld%s)\n", a.model.c_str(), g.name.c_str(),
              static_cast<long long>(g.opset),
              g.opset_converted_from ? str(", converted from opset ", g.opset_converted_from,
                                           " by ONNX's version converter").c_str()
                                     : "");
  for (const char* side : {"inputs", "outputs"}) {
    for (const json& t : j[side]) {
      std::printf("%-9s %s %s %s\n", side == std::string("inputs") ? "input" : "output",
                  t["name"].get<std::string>().c_str(), t["dtype"].get<std::string>().c_str(),
                  shape_str(t["shape"].get<Shape>()).c_str());
    }
  }
  if (!bind.empty()) {
    std::string given;
    for (const auto& [d, size] : bind.dims) given += str(given.empty() ? "" : ", ", d, "=", size);
    for (const auto& [in, shape] : bind.shapes)
      given += str(given.empty() ? "" : ", ", in, "=", shape_str(shape));
    std::printf("dims      %s (given)\n", given.c_str());
  }
  if (bindings.size() > 1) {
    std::string each;
    for (size_t b = 0; b < bindings.size(); ++b) {
      std::string one;
      for (const auto& [d, size] : bindings[b].dims) one += str(one.empty() ? "" : ",", d, "=", size);
      each += str(b == 0 ? "" : "; ", one);
    }
    std::printf("buckets   %zu (%s): the tasks are every bucket's (b<k>/node), the rest bucket 0's\n",
                bindings.size(), each.c_str());
  }
  if (j["images"]["one_at_a_time"].get<bool>()) {
    std::printf("images    %lld, one at a time (%.2f GFLOP and a largest intermediate of %.1f MB an image)\n",
                static_cast<long long>(j["images"]["images"].get<int64_t>()),
                j["images"]["flops_per_image"].get<double>() / 1e9,
                j["images"]["largest_intermediate_bytes"].get<int64_t>() / 1e6);
  } else {
    std::printf("images    all at once (%s)\n", no_loop.c_str());
  }
  std::printf("params    %lld floats (%.1f MB of constants)\n",
              static_cast<long long>(after.parameters),
              static_cast<double>(after.constant_bytes) / 1e6);
  std::printf("nodes     %zu imported, %zu after passes\n", nodes_imported, g.nodes.size());
  if (const graph::Graph::WrittenOut& w = g.written_out; w.ifs + w.loops + w.scans + w.sequence_ops > 0) {
    std::printf("control   written out at import, for these input shapes: If x%lld (the branch taken; %lld of "
                "them on a run-time condition: both branches computed, outputs selected), Loop x%lld, "
                "Scan x%lld (%lld iterations unrolled), sequence operators x%lld (lists at import); nodes inside "
                "loops count once an iteration\n",
                static_cast<long long>(w.ifs), static_cast<long long>(w.ifs_selected), static_cast<long long>(w.loops),
                static_cast<long long>(w.scans),
                static_cast<long long>(w.iterations), static_cast<long long>(w.sequence_ops));
  }
  print_quantized(g, target);
  print_bf16(g, target);
  std::string ops;
  for (const auto& [op, n] : after.ops) ops += str(ops.empty() ? "" : ", ", op, " x", n);
  std::printf("ops       %s\n", ops.empty() ? "(none)" : ops.c_str());
  std::printf("\npasses (-O%d)\n", a.opt_level);
  for (const PassReport& r : reports) {
    std::printf("  %-32s %s\n", r.name.c_str(),
                !r.ran ? "skipped"
                       : str(r.changed ? "fired " : "nothing", "  ", r.nodes_after, " nodes  ",
                             static_cast<int>(r.ms * 1000) / 1000.0, " ms")
                             .c_str());
  }
  std::map<std::string, int> by_kind;
  size_t fused_nodes = 0;
  for (const FusedGroup& f : groups) {
    ++by_kind[op_kind_name(f.kind)];
    if (f.nodes.size() > 1) fused_nodes += f.nodes.size();
  }
  std::string kinds;
  for (const auto& [k, n] : by_kind) kinds += str(kinds.empty() ? "" : ", ", n, " ", k);
  std::printf("kernels   %zu after fusion (%s; %zu nodes fused into others' kernels)\n",
              groups.size(), kinds.c_str(),
              fused_nodes - std::count_if(groups.begin(), groups.end(),
                                          [](const FusedGroup& f) { return f.nodes.size() > 1; }));
  if (!in_place.empty()) {
    // A view has one part, a Concat two or more.
    const auto views = std::count_if(in_place.begin(), in_place.end(), [](const InPlaceConcat& c) { return c.parts.size() == 1; });
    const auto concats = static_cast<std::ptrdiff_t>(in_place.size()) - views;
    std::string what;
    if (concats) what = str(concats, " Concat", concats == 1 ? "" : "s");
    if (views) what += str(what.empty() ? "" : " and ", views, views == 1 ? " view" : " views", " (reshapes keeping the order)");
    std::printf("in place  %s: their inputs written into their outputs, no kernel\n", what.c_str());
  }
  std::printf("memory    %.2f MB arena for %zu intermediates (%.2f MB without reuse)\n",
              static_cast<double>(memory.arena_bytes) / 1e6, memory.buffers.size(),
              static_cast<double>(memory.naive_bytes) / 1e6);
  std::printf("\ntasks (%zu distinct; an indented one computes the task above it another way, and compile "
              "--model takes it where it was tuned faster)\n", tasks.tasks.size());
  for (const Task& t : tasks.tasks) {
    std::printf("  %3zu x %s%-90s %.3g GFLOP\n", t.nodes.size(), t.alternative_to >= 0 ? "  " : "", t.workload.c_str(),
                static_cast<double>(t.flops) / 1e9);
  }
  for (const Untunable& u : tasks.untunable) {
    std::printf("  not tunable: node '%s' (%s): %s\n", u.node.c_str(), u.op.c_str(),
                u.reason.c_str());
  }
  return 0;
}

void add_max_memory_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--max-memory", value,
                  "--model: refuse a model whose tensors need more memory than this (512M, 8G; default a "
                  "quarter of this machine's memory), naming the node, shape and bytes");
}

void refuse_precision_without_model(const std::string& precision) {
  if (precision != "fp32")
    throw UserError(str("--precision ", precision, " is for --model (a workload names its operand types itself)"));
}

void add_precision_option(CLI::App* cmd, std::string& value) {
  cmd->add_option("--precision", value,
                  "--model: the products' precision: fp32 (as the model says), bf16 or fp16 (CPUs: MatMul/Gemm with "
                  "constant weights and convolutions on operands rounded to bfloat16 or float16, with float32 sums; "
                  "the rest float32), tf32, fp16 or bf16 on cuda targets (every MatMul and Gemm on tensor cores; "
                  "docs/precision.md)")
      ->capture_default_str();
}

void add_model_run_options(CLI::App* run, ModelRunArgs& a) {
  run->add_option("--model", a.model,
                  "an ONNX model (compiled for this machine first, or with --reference evaluated) or a "
                  "library from `compile --model`, to run instead of a workload");
  run->add_option("--input", a.inputs,
                  "model input as name=file.npy (or file.npy for a model with one input; a "
                  "bfloat16 input from float32, rounded); inputs not given are uniform random in "
                  "[-1, 1) (floats), random (bool) or zeros (int64) (repeatable)");
  run->add_option("--output", a.outputs,
                  "write a model output: name=file.npy, or file.npy for the first (bfloat16 as "
                  "float32) (repeatable)");
  run->add_option("--expect", a.expect,
                  "a .npy the first output should match: prints the largest error, and exits 1 "
                  "past 1e-4 of its magnitude");
  run->add_flag("--reference", a.reference,
                "run with the reference evaluation of every operator (slow; for checking)");
  run->add_option("--opt-level,-O", a.opt_level, "graph optimisation level, 0 to 3")
      ->capture_default_str();
  run->add_option("--seed", a.seed, "seed of the random inputs")->capture_default_str();
  run->add_option("--bucket", a.bucket,
                  "a library of shape buckets (compile --model --dim batch=1,8,32): run bucket N, random inputs of "
                  "its shapes (default: the bucket of the --input files' shapes, else bucket 0)");
  run->add_option("--disable-pass", a.disable, "do not run this graph pass (repeatable)");
  run->add_option("--device", a.device,
                  "the GPU a library compiled for cuda or rocm runs on: cuda:N or rocm:N (default: its kind's "
                  "device 0)");
  add_max_memory_option(run, a.max_memory);
  add_precision_option(run, a.precision);
  add_dim_options(run, a.dims);
  run->add_flag("--profile", a.profile,
                "--model on a CPU: after the timed calls, as many again with each kernel timed: "
                "the kernels by their time (GFLOPS, the sidecar's workloads or nodes), then the "
                "time by kind (docs/models.md, \"Profiling\")");
  run->add_flag("--tensor-cores", a.tensor_cores,
                "with --reference and --precision tf32/fp16/bf16: evaluate every MatMul and Gemm as a cuda target's "
                "tensor cores compute it (what `compile --model -t cuda... --precision` builds): their accuracy "
                "without a GPU");
}

namespace {

// "name=file" -> {name, file}; a bare file names `only` (the single input, the first output).
std::pair<std::string, std::string> named_file(const std::string& arg,
                                               const std::vector<std::string>& names,
                                               const char* what) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos) {
    if (names.size() != 1 && std::string(what) == "--input") {
      throw UserError(str("--input ", arg, ": the model has ", names.size(),
                          " inputs; name it as name=file.npy"));
    }
    return {names.at(0), arg};
  }
  std::string name = arg.substr(0, eq);
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string have;
    for (const std::string& n : names) have += (have.empty() ? "" : ", ") + n;
    throw UserError(str(what, " ", arg, ": the model has no ",
                        std::string(what) == "--input" ? "input" : "output", " '", name,
                        "' (it has: ", have, ")"));
  }
  return {name, arg.substr(eq + 1)};
}

}  // namespace

namespace {

// A model input not given: floats uniform in [-1, 1), bools at random, int64 zeros (valid
// indices).
graph::HostTensor random_input(const graph::TensorInfo& t, std::mt19937& rng) {
  using namespace graph;  // NOLINT
  std::uniform_real_distribution<float> uni(-1, 1);
  int64_t n = num_elements(t.shape);
  if (holds_floats(t.dtype)) {  // float16 and bfloat16: values of the type
    HostTensor x = HostTensor::floats(t.shape, std::vector<float>(n), t.dtype);
    for (float& v : x.f) v = round_to(t.dtype, uni(rng));
    return x;
  }
  HostTensor x = HostTensor::ints(t.shape, std::vector<int64_t>(n), t.dtype);
  if (t.dtype == graph::DType::Bool)
    for (int64_t& v : x.i) v = uni(rng) < 0;
  return x;
}

}  // namespace

namespace {

bool is_library(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".so") == 0;
}

int64_t memory_budget(const std::string& flag) {
  return flag.empty() ? graph::default_memory_budget() : graph::parse_memory_size("--max-memory", flag);
}

// `dims`: the model's dynamic dimensions as given, repeated in the hint to import it.
graph::CompiledModel compile_to(const std::vector<const graph::Graph*>& buckets, const Target& t,
                                db::Database* db, const std::string& out, const std::string& model,
                                bool warn, int64_t budget, bool emulate_gpu, const DimArgs& dims,
                                bool pad_batch = false, const LowerOptions& lowering = {}) {
  graph::CompiledModel cm =
      compile_model_with(buckets, t, db, out, model, budget, emulate_gpu, pad_batch, lowering);
  if (warn && cm.untuned() > 0) {
    std::string flags;
    for (const std::string& d : dims.dims) flags += " --dim " + d;
    for (const std::string& s : dims.shapes) flags += " --input-shape " + s;
    std::fprintf(
        stderr,
        "warning: %d of %d tunable kernels have no tuned config for %s and use default schedules "
        "(`tunefarm import %s%s` lists the tasks to tune)\n",
        cm.untuned(), cm.tunable(), t.short_str().c_str(), model.c_str(), flags.c_str());
  }
  return cm;
}

}  // namespace

int compile_model_file(const ModelCompileArgs& a) {
  if (a.out.empty()) throw UserError("-o OUT is required");
  if (a.out == "-") throw UserError("compile --model writes a library: name a file for -o, not -");
  Target t = parse_target(a.target);
  int64_t budget = memory_budget(a.max_memory);
  LowerOptions lowering;
  lowering.skip = {a.skip.begin(), a.skip.end()};
  check_lower_options(lowering);  // before the model is imported
  // One graph per shape bucket (--dim batch=1,8,32), usually one.
  std::vector<graph::Graph> graphs;
  for (const graph::InputBinding& bind : a.dims.bindings()) {
    graphs.push_back(load_model(a.model, a.opt_level, a.disable, channel_block(t), graph::parse_precision(a.precision),
                                graph::tensor_cores(t), bind));
  }
  const graph::Graph& g = graphs[0];
  print_warnings(g.import_warnings);
  std::vector<const graph::Graph*> buckets;
  for (const graph::Graph& b : graphs) buckets.push_back(&b);
  auto start = std::chrono::steady_clock::now();
  graph::CompiledModel cm = compile_to(buckets, t, a.db, a.out, a.model, !a.quiet_untuned, budget,
                                       a.emulate_gpu, a.dims, a.pad_batch, lowering);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (a.json) {
    json j = cm.sidecar(a.model);
    j["output"] = std::filesystem::absolute(a.out).string();
    j["sidecar"] = std::filesystem::absolute(a.out + ".json").string();
    j["compile_s"] = seconds;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  print_quantized(g, t);
  print_bf16(g, t);
  if (!cm.skipped_passes.empty()) {
    std::string names;
    for (const std::string& p : cm.skipped_passes) names += (names.empty() ? "" : ", ") + p;
    std::printf("note: every kernel lowered without %s (--skip-pass)\n", names.c_str());
  }
  int tunable = cm.tunable();
  std::printf("wrote %s and %s: %zu kernels (%d tunable, %d tuned), workspace %.2f MiB (%.2f MiB unplanned), "
              "weights %.2f MiB, in %.1f s%s\n",
              a.out.c_str(), (a.out + ".json").c_str(), cm.kernels.size(), tunable, tunable - cm.untuned(),
              cm.memory.arena_bytes / 1048576.0, cm.memory.naive_bytes / 1048576.0, cm.constant_bytes / 1048576.0,
              seconds,
              !cm.emulates.empty()
                  ? str("; the kernels of ", cm.emulates, " run serially on this machine (emulated",
                        cm.emulated_products == 0
                            ? std::string()
                            : str("; its ", cm.emulated_products,
                                  cm.emulated_products == 1 ? " tensor-core kernel as a generic kernel"
                                                            : " tensor-core kernels as generic kernels",
                                  " of the same rounding, not ", cm.emulated_products == 1 ? "its" : "their",
                                  " warp-level code"),
                        ")")
                        .c_str()
              : cm.device_modules > 0
                  ? str("; ", cm.target.info().module_noun, " in ", cm.device_modules,
                        " module(s) for ", cm.target.short_str(), ", launched through the ", cm.target.kind_name(),
                        " driver (loaded at run time)")
                        .c_str()
                  : "");
  for (size_t b = 0; b < cm.buckets.size(); ++b) {
    std::string shapes;
    for (const json& in : cm.buckets[b].inputs)
      shapes += str(shapes.empty() ? "" : ", ", in["name"].get<std::string>(), " ", graph::shape_str(in["shape"].get<graph::Shape>()));
    std::printf("  bucket %zu: %s (workspace %.2f MiB%s)\n", b, shapes.c_str(),
                cm.buckets[b].workspace_bytes / 1048576.0,
                cm.buckets[b].images > 1 ? str(", one image at a time").c_str() : "");
  }
  if (cm.buckets.empty() && cm.images > 1) {
    std::printf("  runs one image at a time: %lld images a call, on up to %lld threads with a workspace slot of one "
                "image each (docs/models.md, \"Batches one image at a time\")\n",
                static_cast<long long>(cm.images), static_cast<long long>(cm.image_slots));
  }
  if (!cm.buckets.empty()) {
    std::printf("  %zu shape buckets: a call runs the bucket of its inputs' shapes (tf_model_run_shaped; "
                "tf_model_run is bucket 0's)\n",
                cm.buckets.size());
  }
  if (cm.pad_batch) {
    std::string sizes;
    for (size_t b = 0; b < std::max<size_t>(cm.buckets.size(), 1); ++b) {
      const json& in = cm.buckets.empty() ? cm.inputs : cm.buckets[b].inputs;
      if (cm.buckets.empty() || cm.buckets[b].padded)
        sizes += str(sizes.empty() ? "" : ", ", in[0]["shape"][0].get<int64_t>());
    }
    std::printf(
        "  fewer rows of axis 0 run padded up to the next of %s (--pad-batch: tf_model_run_shaped, "
        "run --model and the Python package pad)\n",
        sizes.c_str());
  }
  return 0;
}

namespace {

// `run --model --profile` (docs/models.md, "Profiling"): the kernels of the calls profiled, by
// their time.
// A kernel's rate: its workload's arithmetic over its time (0 where either is not known).
double gflops(const graph::KernelTime& k) {
  return k.flops > 0 && k.seconds > 0
             ? 1e-9 * static_cast<double>(k.flops) * static_cast<double>(k.calls) / k.seconds
             : 0;
}

struct ProfileReport {
  int runs = 0;
  double wall_s = 0;                       // the profiled runs' time, end to end
  std::vector<graph::KernelTime> kernels;  // those that ran, longest first

  double kernel_s() const {
    double t = 0;
    for (const graph::KernelTime& k : kernels) t += k.seconds;
    return t;
  }
  // Kinds by their time, longest first: {kind, {kernels, seconds}}.
  std::vector<std::pair<std::string, std::pair<int, double>>> kinds() const {
    std::map<std::string, std::pair<int, double>> by;
    for (const graph::KernelTime& k : kernels) {
      by[k.kind].first += 1;
      by[k.kind].second += k.seconds;
    }
    std::vector<std::pair<std::string, std::pair<int, double>>> out(by.begin(), by.end());
    std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
      return x.second.second > y.second.second;
    });
    return out;
  }

  json to_json() const {
    json ks = json::array();
    for (const graph::KernelTime& k : kernels) {
      ks.push_back({{"function", k.function},
                    {"kind", k.kind},
                    {"bucket", k.bucket},
                    {"calls", k.calls},
                    {"ms_per_run", 1e3 * k.seconds / runs},
                    {"what", k.what}});
      if (gflops(k) > 0) ks.back()["gflops"] = gflops(k);
    }
    json kd = json::array();
    for (const auto& [kind, v] : kinds())
      kd.push_back({{"kind", kind}, {"kernels", v.first}, {"ms_per_run", 1e3 * v.second / runs}});
    return {{"runs", runs},
            {"ms_per_run", 1e3 * wall_s / runs},
            {"kernel_ms_per_run", 1e3 * kernel_s() / runs},
            {"kernels", ks},
            {"kinds", kd}};
  }

  void print(size_t top = 25) const {
    const double total = kernel_s(), per = 1e3 / runs;
    std::printf(
        "profile   %d runs with each kernel timed: %.3f ms a run, %.3f ms of it in %zu kernels",
        runs, wall_s * per, total * per, kernels.size());
    if (total > wall_s) {
      std::printf(" (summed over the threads that ran images side by side)\n");
    } else {
      std::printf(", %.3f ms outside them (conversions, copies, the calls)\n",
                  (wall_s - total) * per);
    }
    const bool described = std::any_of(kernels.begin(), kernels.end(),
                                       [](const graph::KernelTime& k) { return !k.what.empty(); });
    std::printf("  %9s %6s %7s  %-32s %s\n", "ms/run", "share", "GFLOPS", "kernel",
                described ? "workload or nodes" : "");
    for (size_t i = 0; i < kernels.size() && i < top; ++i) {
      const graph::KernelTime& k = kernels[i];
      const std::string gf = gflops(k) > 0 ? str(std::lround(gflops(k))) : "";
      std::printf("  %9.3f %5.1f%% %7s  %-32s %s\n", k.seconds * per,
                  total > 0 ? 100 * k.seconds / total : 0.0, gf.c_str(), k.function.c_str(),
                  k.what.c_str());
    }
    if (kernels.size() > top) {
      double rest = 0;
      for (size_t i = top; i < kernels.size(); ++i) rest += kernels[i].seconds;
      std::printf("  %9.3f %5.1f%% %7s  (%zu more kernels; --json lists them all)\n", rest * per,
                  total > 0 ? 100 * rest / total : 0.0, "", kernels.size() - top);
    }
    std::printf("by kind\n");
    for (const auto& [kind, v] : kinds()) {
      std::printf("  %9.3f %5.1f%% %7s  %-32s %d kernel%s\n", v.second * per,
                  total > 0 ? 100 * v.second / total : 0.0, "", kind.c_str(), v.first,
                  v.first == 1 ? "" : "s");
    }
  }
};

// `runs` more calls of the model (`once`), each kernel timed (graph::ModelLibrary::profile).
ProfileReport profile_model(const graph::ModelLibrary& lib, int runs,
                            const std::function<void()>& once) {
  graph::ModelProfile p = lib.profile([&] {
    for (int r = 0; r < runs; ++r) once();
  });
  if (!p.sidecar_problem.empty()) {
    std::fprintf(stderr, "warning: %s; kernels are named by function only\n",
                 p.sidecar_problem.c_str());
  }
  ProfileReport r{runs, p.seconds, p.ran_longest_first()};
  for (graph::KernelTime& k : r.kernels)
    if (k.what.size() > 160) k.what = k.what.substr(0, 157) + "...";
  return r;
}

}  // namespace

int run_model(const ModelRunArgs& a) {
  using namespace graph;  // NOLINT
  if (a.repeat < 1) throw UserError(str("--repeat ", a.repeat, " must be at least 1"));
  bool library = is_library(a.model);
  if (library && a.reference) throw UserError(str("--reference runs an .onnx model, not the library ", a.model));
  const int64_t budget = memory_budget(a.max_memory);
  std::optional<Graph> g;
  std::unique_ptr<ModelLibrary> lib;
  std::filesystem::path tmp_dir;
  struct Cleanup {
    std::filesystem::path* d;
    ~Cleanup() {
      std::error_code ec;
      if (!d->empty()) std::filesystem::remove_all(*d, ec);
    }
  } cleanup{&tmp_dir};
  std::vector<TensorInfo> in_info, out_info;
  std::string mode = "reference evaluation, not compiled";
  if (a.tensor_cores && (library || !a.reference || a.precision == "fp32")) {
    throw UserError(str("--tensor-cores evaluates an ONNX model's --precision (tf32, fp16, bf16) as tensor cores "
                        "compute it: it needs --reference and --precision (compile for a cuda target to build it), not ",
                        library ? "a library" : !a.reference ? "a compiled run" : "--precision " + a.precision));
  }
  if (!a.device.empty() && !library)
    throw UserError(str("--device ", a.device, " is for a library compiled for a GPU; ", a.model, " is not a library"));
  if (a.profile && a.reference)
    throw UserError(
        "--profile times a compiled model's kernels; --reference evaluates the model operator by "
        "operator");
  if (library && a.dims.given()) {
    throw UserError(str("--dim and --input-shape size an .onnx model's dynamic dimensions; ",
                        a.model, " is a library, compiled for fixed shapes"));
  }
  if (library) {
    lib = std::make_unique<ModelLibrary>(a.model);
    mode = "compiled library";
    if (!a.device.empty()) {
      GpuDeviceSpec d;
      try {
        d = parse_gpu_device(a.device);
      } catch (const std::runtime_error& e) {
        throw UserError(e.what());
      }
      if (parse_target_kind(lib->device_kind()) != d.kind) {
        throw UserError(str("--device ", a.device, ": ", a.model, " runs on ",
                            lib->device_kind().empty() ? std::string("this machine's CPU") : lib->device_kind() + " GPUs"));
      }
      lib->set_device(d.index);
    }
    if (!lib->device_kind().empty()) mode = str("compiled library, on ", lib->device_kind(), " GPU");
  } else {
    // The reference evaluation runs the model as exported (no layout change), except at
    // --precision bf16, whose convolutions are converted in the blocked layout.
    const graph::Precision precision = graph::parse_precision(a.precision);
    g = load_model(a.model, a.opt_level, a.disable,
                   a.tensor_cores || (a.reference && precision == graph::Precision::Float32)
                       ? 0
                       : channel_block(host_target()),
                   precision, a.tensor_cores, a.dims.binding());
    print_warnings(g->import_warnings);
    if (!a.reference) {
      tmp_dir = std::filesystem::temp_directory_path() / ("tunefarm-model-" + std::to_string(::getpid()));
      std::filesystem::create_directories(tmp_dir);
      std::string so = (tmp_dir / "model.so").string();
      compile_to({&*g}, host_target(), a.db, so, a.model, true, budget, false, a.dims);
      lib = std::make_unique<ModelLibrary>(so);
      mode = "compiled for this machine";
    }
  }
  if (a.bucket >= 0 && !library)
    throw UserError(str("--bucket ", a.bucket, " chooses a shape bucket of a compiled library; ", a.model, " is not one"));
  if (lib && a.bucket >= lib->num_buckets()) {
    throw UserError(str("--bucket ", a.bucket, ": ", a.model, " has ", lib->num_buckets(), " shape bucket",
                        lib->num_buckets() == 1 ? " (0)" : str("s (0 to ", lib->num_buckets() - 1, ")")));
  }
  if (lib && a.profile) lib->check_profiler();  // refused before the timed calls
  if (lib) {
    in_info = lib->inputs();
    out_info = lib->outputs();
  } else {
    check_reference_memory(*g, budget);
    for (const std::string& n : g->inputs)
      in_info.push_back({n, g->value(n).shape, g->value(n).dtype});
    for (const std::string& n : g->outputs) out_info.push_back({n, g->value(n).shape});
  }
  std::vector<std::string> in_names, out_names;
  for (const TensorInfo& t : in_info) in_names.push_back(t.name);
  for (const TensorInfo& t : out_info) out_names.push_back(t.name);
  std::map<std::string, HostTensor> inputs;
  for (const std::string& arg : a.inputs) {
    auto [name, file] = named_file(arg, in_names, "--input");
    inputs[name] = read_npy(file, budget);
  }
  int bucket = 0;
  int64_t padded_rows = 0;  // inputs of fewer rows than the bucket's, run padded (--pad-batch)
  if (lib) {
    // A library of shape buckets runs --bucket's, or the one whose shapes the given inputs
    // have (random inputs take its shapes), or one it may run them padded in.
    bucket = std::max(a.bucket, 0);
    if (a.bucket < 0 && (lib->num_buckets() > 1 || lib->bucket_padded(0)) && !inputs.empty()) {
      bucket = -1;
      for (int b = 0; b < lib->num_buckets() && bucket < 0; ++b) {
        bool fits = true;
        for (const TensorInfo& t : lib->bucket_inputs(b))
          fits &= !inputs.count(t.name) || inputs.at(t.name).shape == t.shape;
        if (fits) bucket = b;
      }
      if (bucket < 0 && inputs.size() == in_names.size()) {
        std::vector<Shape> shapes;
        for (const std::string& n : in_names) shapes.push_back(inputs.at(n).shape);
        bucket = lib->padded_bucket_of(shapes, &padded_rows);
      }
      if (bucket < 0) {
        std::string have, served;
        for (const auto& [name, t] : inputs) have += str(have.empty() ? "" : ", ", name, " ", shape_str(t.shape));
        for (int b = 0; b < lib->num_buckets(); ++b) {
          served += str(b == 0 ? "" : "; ", b, ":");
          for (const TensorInfo& t : lib->bucket_inputs(b)) served += str(" ", t.name, " ", shape_str(t.shape));
        }
        std::string pads = lib->padded_sizes();
        if (!pads.empty())
          pads = str("; fewer rows of axis 0 than ", pads, " run padded (all inputs given)");
        throw UserError(str("--input: no shape bucket of ", a.model, " takes ", have,
                            "; its buckets: ", served, pads));
      }
    }
    in_info = lib->bucket_inputs(bucket);
    out_info = lib->bucket_outputs(bucket);
    if (padded_rows > 0) {
      // What the caller gives and gets: the bucket's shapes with the inputs' rows.
      for (std::vector<TensorInfo>* side : {&in_info, &out_info})
        for (TensorInfo& t : *side) t.shape.at(0) = padded_rows;
    }
    // A library compiled elsewhere (or with a larger --max-memory) is checked here too.
    std::vector<int64_t> run_tensors;
    for (const std::vector<TensorInfo>* side : {&in_info, &out_info}) {
      for (const TensorInfo& t : *side) {
        check_tensor_budget(str(side == &in_info ? "input '" : "output '", t.name, "'"), t.dtype, t.shape, budget);
        run_tensors.push_back(tensor_bytes(t.dtype, t.shape));
      }
    }
    check_run_budget(a.model + ": a run holds", static_cast<int64_t>(std::min<uint64_t>(lib->workspace_bytes(), INT64_MAX)),
                     run_tensors, budget);
  }
  std::mt19937 rng(static_cast<uint32_t>(a.seed));
  for (const TensorInfo& t : in_info) {
    if (inputs.count(t.name)) {
      HostTensor& given = inputs[t.name];
      given = npy_as_input(std::move(given), t.dtype);
      if (given.dtype != t.dtype || given.shape != t.shape) {
        throw UserError(str("--input: input '", t.name, "' is ", dtype_name(given.dtype), " ",
                            shape_str(given.shape), "; the model takes ", dtype_name(t.dtype), " ",
                            shape_str(t.shape)));
      }
      continue;
    }
    inputs[t.name] = random_input(t, rng);
  }
  std::map<std::string, HostTensor> outs;
  std::vector<const HostTensor*> in_ptrs;
  for (const TensorInfo& t : in_info) in_ptrs.push_back(&inputs.at(t.name));
  std::vector<HostTensor> out_list;
  auto once = [&] {
    if (lib) {
      lib->run(in_ptrs, out_list);
    } else {
      outs = run_reference(*g, inputs, budget);
    }
  };
  if (lib) {
    // Warm-up: first touches of the weights and the workspace, the thread pool's workers
    // waking (each library has its own), then --warmup-ms of calls: a single warm-up call
    // left ResNet-18's timed calls 15-20% slower than a caller's steady ones.
    once();
    auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < a.warmup_ms)
      once();
  }
  std::vector<double> ms;
  for (int r = 0; r < a.repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (lib) {
    for (size_t k = 0; k < out_info.size(); ++k) outs[out_info[k].name] = out_list[k];
  }
  std::sort(ms.begin(), ms.end());
  double median = ms[ms.size() / 2];
  std::optional<ProfileReport> profile;
  if (a.profile) profile = profile_model(*lib, a.repeat, once);
  for (const std::string& arg : a.outputs) {
    auto [name, file] = named_file(arg, out_names, "--output");
    write_npy(file, outs.at(name));
  }
  json j = {{"model", a.model}, {"mode", lib ? "compiled" : "reference"}, {"median_ms", median}, {"repeat", a.repeat}};
  if (lib && lib->num_buckets() > 1) j["bucket"] = bucket;
  if (profile) j["profile"] = profile->to_json();
  if (padded_rows > 0) j["padded_from_rows"] = padded_rows;
  int status = 0;
  if (!a.expect.empty()) {
    HostTensor want = read_npy(a.expect, budget);
    const HostTensor& got = outs.at(out_names[0]);
    if (want.shape != got.shape) {
      throw UserError(str("--expect ", a.expect, " has shape ", shape_str(want.shape), "; output '",
                          out_names[0], "' is ", shape_str(got.shape)));
    }
    double err = 0, mag = 0;
    for (int64_t k = 0; k < want.size(); ++k) {
      err = std::max(err, std::fabs(want.as_double(k) - got.as_double(k)));
      mag = std::max(mag, std::fabs(want.as_double(k)));
    }
    j["max_abs_error"] = err;
    j["max_abs_expected"] = mag;
    status = err <= 1e-4 * std::max(mag, 1.0) ? 0 : 1;
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model     %s (%s)\n", a.model.c_str(), mode.c_str());
    if (lib && (lib->num_buckets() > 1 || padded_rows > 0)) {
      std::string shapes;
      for (const TensorInfo& t : lib->bucket_inputs(bucket))
        shapes += str(shapes.empty() ? "" : ", ", t.name, " ", shape_str(t.shape));
      std::printf("bucket    %d of %d (%s)%s\n", bucket, lib->num_buckets(), shapes.c_str(),
                  padded_rows > 0 ? str(": ", padded_rows, " rows padded to its ",
                                        lib->bucket_inputs(bucket)[0].shape[0])
                                        .c_str()
                                  : "");
    }
    std::printf("latency   %.3f ms (median of %d)\n", median, a.repeat);
    if (profile) profile->print();
    if (j.contains("max_abs_error")) {
      std::printf("max error %.3g (largest expected magnitude %.3g)%s\n",
                  j["max_abs_error"].get<double>(), j["max_abs_expected"].get<double>(),
                  status ? ": past 1e-4 of it" : "");
    }
  }
  return status;
}

void add_quantize_command(CLI::App& app, QuantizeArgs& a) {
  a.cmd = app.add_subcommand("quantize",
                             "Make a float32 ONNX model a QDQ model (int8 weights per channel, uint8 activations), "
                             "calibrated on input files or seeded random inputs; ONNX Runtime runs it too");
  a.cmd->add_option("model", a.model, "the float32 .onnx file")->required();
  a.cmd->add_option("-o,--output", a.out, "the QDQ .onnx file to write")->required();
  add_dim_options(a.cmd, a.dims);
  a.cmd->add_option("--input", a.inputs,
                    "a calibration input as name=file.npy (or file.npy for a model with one input); repeat a name "
                    "for more samples: the k-th file of each name is sample k");
  a.cmd->add_option("--samples", a.samples, "without --input: this many seeded random samples (floats uniform in "
                                            "[-1, 1), as `run --model` makes them)")
      ->capture_default_str();
  a.cmd->add_option("--seed", a.seed, "seed of the random samples")->capture_default_str();
  a.cmd->add_option("--method", a.method,
                    "activation ranges: minmax, percentile (--percentile of each side) or entropy (clipped where the "
                    "quantized histogram stays closest to the values', by KL divergence)")
      ->capture_default_str();
  a.cmd->add_option("--percentile", a.percentile, "with --method percentile: the percentile kept, in (50, 100]")
      ->capture_default_str();
  a.cmd->add_flag("--per-tensor", a.per_tensor, "one scale per weight tensor instead of one per output channel");
  a.cmd->add_flag("--symmetric", a.symmetric, "int8 symmetric activations instead of uint8 asymmetric");
}

int run_quantize(const QuantizeArgs& a) {
  using namespace graph;  // NOLINT
  static const std::map<std::string, graph::Calibration> methods = {{"minmax", graph::Calibration::MinMax},
                                                                    {"percentile", graph::Calibration::Percentile},
                                                                    {"entropy", graph::Calibration::Entropy}};
  if (!methods.count(a.method)) throw UserError(str("--method ", a.method, " is not one of minmax, percentile, entropy"));
  if (a.samples < 1 || a.samples > 10000) throw UserError(str("--samples ", a.samples, " is not in [1, 10000]"));
  std::string bytes = read_file(a.model);
  const InputBinding bind = a.dims.binding();
  // No external data: quantize_model refuses it (its QDQ model would point at the original's
  // files), so it is refused here before any of it is read.
  Graph g = import_onnx_bytes(bytes, a.model, bind);
  std::vector<std::string> names = g.inputs;
  const int64_t budget = default_memory_budget();
  std::map<std::string, std::vector<HostTensor>> given;
  for (const std::string& arg : a.inputs) {
    auto [name, file] = named_file(arg, names, "--input");
    const Value& v = g.value(name);
    HostTensor t = npy_as_input(read_npy(file, budget), v.dtype);
    if (t.dtype != v.dtype || t.shape != v.shape) {
      throw UserError(str("--input ", arg, ": input '", name, "' is ", dtype_name(t.dtype), " ", shape_str(t.shape),
                          "; the model takes ", dtype_name(v.dtype), " ", shape_str(v.shape)));
    }
    given[name].push_back(std::move(t));
  }
  std::vector<std::map<std::string, HostTensor>> samples;
  if (!given.empty()) {
    size_t count = given.begin()->second.size();
    for (const std::string& n : names) {
      if (!given.count(n) || given[n].size() != count) {
        throw UserError(str("--input: input '", n, "' has ", given.count(n) ? given[n].size() : 0,
                            " files, '", given.begin()->first, "' ", count, "; give each input the same number"));
      }
    }
    for (size_t k = 0; k < count; ++k) {
      std::map<std::string, HostTensor> s;
      for (const std::string& n : names) s[n] = given[n][k];
      samples.push_back(std::move(s));
    }
  } else {
    std::mt19937 rng(static_cast<uint32_t>(a.seed));
    for (int k = 0; k < a.samples; ++k) {
      std::map<std::string, HostTensor> s;
      for (const std::string& n : names) s[n] = random_input({n, g.value(n).shape, g.value(n).dtype}, rng);
      samples.push_back(std::move(s));
    }
  }
  QuantizeOptions o;
  o.bind = bind;
  o.method = methods.at(a.method);
  o.percentile = a.percentile;
  o.per_channel = !a.per_tensor;
  o.symmetric = a.symmetric;
  QuantizeReport r;
  std::string out = quantize_model(bytes, a.model, samples, o, &r);
  write_file_atomic(a.out, out);
  std::printf("quantized %d activations (per tensor, %s) and %d weights (int8 symmetric, %s) read by %d Conv/MatMul/"
              "Gemm nodes, calibrated on %zu %s (%s); wrote %s\n",
              r.activations, a.symmetric ? "int8 symmetric" : "uint8 asymmetric", r.weights,
              r.per_channel ? "per output channel" : "per tensor", r.nodes, samples.size(),
              given.empty() ? "seeded random samples" : "samples",
              a.method == "minmax"     ? "min-max"
              : a.method == "entropy" ? "entropy"
                                      : str(a.percentile, "th percentile").c_str(),
              a.out.c_str());
  if (!r.per_channel && !a.per_tensor)
    std::printf("note: opset %lld has no per-channel DequantizeLinear (13 has): weights are per tensor\n",
                static_cast<long long>(g.opset));
  return 0;
}

}  // namespace tf::cli
