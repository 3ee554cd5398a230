#include "graph/model_compiler.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "compiler/codegen_llvm.h"
#include "compiler/codegen_runner.h"
#include "compiler/driver.h"
#include "compiler/gpu.h"
#include "compiler/gpu_reduction.h"
#include "compiler/error.h"
#include "compiler/inline_budget.h"
#include "compiler/ir_mutator.h"
#include "compiler/link.h"
#include "compiler/lower.h"
#include "compiler/operators.h"
#include "compiler/schedule_templates.h"
#include "compiler/winograd.h"
#include "graph/fusion.h"
#include "graph/node_te.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"
#include "graph/tasks.h"
#include "runtime/gpu_runtime.h"

namespace tf::graph {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct KernelBuild {
  ModelKernel info;
  ir::LoweredFunc func;
};

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The default schedule of a generic kernel's stage: the innermost axis vectorized when the
// vector width divides it (a reduction's loops moved inside the other spatial loops, around
// the lanes), the outer spatial loops fused into one of at least kFusedIterations iterations
// (the rest stay loops of their own: an index into a fused loop costs a division per axis in
// every iteration, and a layout transform of MobileNet-v2's input spent 8% of the model's
// time on them), parallel when the stage has enough work to pay for waking the thread pool.
constexpr int64_t kFusedIterations = 64;

void schedule_loops(ir::Stage& s, int lanes) {
  const ir::Operation& op = *s.op();
  size_t rank = op.shape.size();
  if (rank == 0) return;
  std::vector<ir::Expr> spatial(s.leaves().begin(),
                                s.leaves().begin() + static_cast<int64_t>(rank));
  std::vector<int64_t> extent(op.shape.begin(), op.shape.end());
  int64_t work = num_elements(op.shape);
  for (const ir::IterVar& r : op.reduce_axes) work *= r.extent;
  if (op.shape.back() % lanes == 0) {
    auto [outer, inner] = s.split(spatial.back(), lanes);
    s.vectorize(inner);
    spatial.back() = outer;
    extent.back() /= lanes;
    if (op.reduce()) {
      // The reduction's loops go outside the lanes, so each lane accumulates its own output
      // (pooling of channel blocks, a sum over rows).
      std::vector<ir::Expr> order;
      for (const ir::Expr& v : s.leaves())
        if (s.is_reduce_var(v)) order.push_back(v);
      order.push_back(inner);
      s.reorder(order);
    }
  }
  ir::Expr fused = spatial[0];
  int64_t iterations = extent[0];
  for (size_t d = 1; d < spatial.size() && iterations < kFusedIterations; ++d) {
    fused = s.fuse(fused, spatial[d]);
    iterations *= extent[d];
  }
  if (work >= (int64_t{1} << 15)) s.parallel(fused);
}

// The same on a GPU (correctness first): the spatial axes fused and dealt to a 1-D grid of
// blocks of up to 256 threads, one output element per thread (a reduction's loops inside,
// per thread). A stage of rank 0 has no axis to bind: its kernel runs as one thread
// (compiler/gpu.h check_gpu_kernel).
//
// An elementwise stage whose innermost dimension is a multiple of 4 gives each thread 4
// neighbours of it, vectorized (128-bit loads and stores where the operands are contiguous
// too), when that still leaves at least kMinGpuThreads threads.
constexpr int64_t kGpuLanes = 4, kMinGpuThreads = 16384;

void schedule_loops_gpu(ir::Stage& s) {
  const ir::Operation& op = *s.op();
  size_t rank = op.shape.size();
  if (rank == 0) return;
  std::vector<ir::Expr> spatial(s.leaves().begin(), s.leaves().begin() + static_cast<int64_t>(rank));
  int64_t threads = num_elements(op.shape);
  if (!op.reduce() && op.shape.back() % kGpuLanes == 0 && threads / kGpuLanes >= kMinGpuThreads) {
    auto [outer, lanes] = s.split(spatial.back(), kGpuLanes);
    s.vectorize(lanes);
    spatial.back() = outer;
    threads /= kGpuLanes;
  }
  ir::Expr fused = spatial[0];
  for (size_t d = 1; d < rank; ++d) fused = s.fuse(fused, spatial[d]);
  // (An empty tensor keeps a loop of extent 0: no block to launch.)
  auto [block, thread] = s.split(fused, std::clamp<int64_t>(threads, 1, 256));
  s.bind(block, "blockIdx.x");
  s.bind(thread, "threadIdx.x");
}

// How many reductions the TE graph of `t` holds (each a kernel of a GPU call).
int count_reductions(const ir::Tensor& t, std::set<const ir::Operation*>& seen) {
  if (!seen.insert(t.get()).second || t->is_placeholder()) return 0;
  int n = t->reduce() ? 1 : 0;
  for (const ir::Tensor& in : ir::inputs_of(t)) n += count_reductions(in, seen);
  return n;
}

class ModelBuilder {
 public:
  ModelBuilder(const Graph& g, const Target& t, const ConfigLookup& lookup)
      : g_(g), target_(t), lookup_(lookup), readers_(g_) {
    for (size_t k = 0; k < g_.nodes.size(); ++k) node_index_[g_.nodes[k].name] = k;
  }

  void add_group(const FusedGroup& grp) {
    std::vector<const Node*> nodes;
    for (const std::string& name : grp.nodes) nodes.push_back(&g_.nodes[node_index_.at(name)]);
    if (grp.outputs.size() == 1) {
      if (grp.kind == OpKind::Anchor && try_anchor(nodes, grp.outputs[0])) return;
      add_generic(nodes, grp.outputs[0]);
      return;
    }
    // Several outputs: one kernel per needed output of each node.
    for (const Node* n : nodes) {
      for (const std::string& o : n->outputs) {
        if (!o.empty() && (readers_.uses.count(o) || g_.is_output(o))) add_generic({n}, o);
      }
    }
  }

  Graph& graph() { return g_; }
  std::vector<KernelBuild>& builds() { return builds_; }
  const std::vector<FusedGroup>& kernel_groups() const { return groups_; }

 private:
  void schedule_stage(ir::Stage& s) {
    if (target_.is_gpu()) schedule_loops_gpu(s);
    else schedule_loops(s, target_.vector_lanes());
  }

  std::string function_name(const std::string& what) {
    return str("tf_k", builds_.size(), "_", identifier(what));
  }

  void record(KernelBuild b, OpKind kind, const std::vector<const Node*>& nodes) {
    FusedGroup fg{kind, {}, {}, {b.info.args.back()}};
    for (const Node* n : nodes) fg.nodes.push_back(n->name);
    for (size_t k = 0; k + 1 < b.info.args.size(); ++k) {
      if (!g_.is_constant(b.info.args[k])) fg.inputs.push_back(b.info.args[k]);
    }
    b.info.nodes = fg.nodes;
    groups_.push_back(std::move(fg));
    builds_.push_back(std::move(b));
  }

  bool try_anchor(const std::vector<const Node*>& nodes, const std::string& group_out) {
    const Node& a = *nodes[0];
    AnchorWorkload aw = anchor_workload(g_, a);
    if (aw.spec.empty()) return false;
    // An operator without a template for the target is a generic kernel there.
    if (!lookup_template(parse_workload(aw.spec + ")").op, target_)) return false;
    AnchorEpilogue e = anchor_epilogue(g_, a, aw, readers_);
    // What the epilogue takes over must open the group, and leave the group's output to write.
    size_t used = e.nodes.size();
    if (used > nodes.size() || !std::equal(e.nodes.begin(), e.nodes.end(), nodes.begin()))
      return false;
    const std::string& y = e.output;
    if (used == nodes.size() ? y != group_out : g_.is_output(y)) return false;
    std::vector<std::string> args{a.inputs[0], a.inputs[1]};
    if (a.op == "Gemm" && a.get_int("transB", 0)) args[1] = transposed(a.inputs[1]);
    if (!e.bias.empty()) args.push_back(e.bias);
    bool bias = !e.bias.empty(), relu = e.relu;
    Workload w = parse_workload(aw.spec + ",epilogue=" + e.name() + ")");
    KernelConfig kc = lookup_(w, target_);
    std::string spec = aw.spec;
    // A Winograd convolution where it was tuned and ran faster than the direct one.
    if (std::string alt = winograd_alternative(g_, a, aw); !alt.empty()) {
      Workload wa = parse_workload(alt + ",epilogue=" + e.name() + ")");
      KernelConfig ka = lookup_(wa, target_);
      if (tuned_faster(ka, kc)) {
        w = wa;
        kc = ka;
        spec = alt;
        args[1] = winograd_constant(args[1], w);
      }
    }
    std::vector<const Node*> rest(nodes.begin() + static_cast<int64_t>(used), nodes.end());
    std::string name = function_name(w.op);
    std::optional<OpGraph> fused;
    if (!rest.empty()) fused = fuse_tail(a, spec, w, bias, relu, y, rest, group_out, args);
    bool tail = fused.has_value();
    OpGraph og = tail ? std::move(*fused) : build_op(w);
    // Constant weights are packed here, once, if the template packs them (CPU templates).
    if (g_.is_constant(args[1]) && target_.is_cpu()) og.prepacked.insert(og.inputs[1]->name);
    CompiledKernel k = compile_op_graph(og, target_, kc.config, kc.source, name);
    for (const ir::Schedule::Packing& p : k.packed) {
      for (size_t i = 0; i < og.inputs.size(); ++i) {
        if (og.inputs[i]->name == p.input)
          args[i] = packed_constant(args[i], og.inputs[i]->shape, p.dim, p.block);
      }
    }
    KernelBuild b;
    b.info = {k.name, {}, w.canonical(), template_name(w.op, target_), args, kc};
    b.info.config.config = k.config;
    b.info.args.push_back(tail ? group_out : y);
    b.func = k.lowered.func;
    record(
        std::move(b), OpKind::Anchor,
        tail ? nodes
             : std::vector<const Node*>(nodes.begin(), nodes.begin() + static_cast<int64_t>(used)));
    if (!tail && !rest.empty()) add_generic(rest, group_out);
    return true;
  }

  // The anchor's operator graph with the group's elementwise tail after its bias and Relu
  // (a residual Add, a Clip, a GELU): one kernel, the tail applied while the template's
  // output tile is in registers. The tail is computed in the shape of the template's output
  // (a matmul flattens leading dimensions into rows), so its operands must be that shape,
  // per-column vectors or scalars. Nothing when the tail does not fit; `args` gains the
  // tail's inputs.
  std::optional<OpGraph> fuse_tail(const Node& a, const std::string& spec, const Workload& w,
                                   bool bias, bool relu, const std::string& y,
                                   const std::vector<const Node*>& rest,
                                   const std::string& group_out, std::vector<std::string>& args) {
    OpGraph og = build_op(parse_workload(spec + ",epilogue=none)"));
    og.workload = w;
    ir::Tensor acc = og.acc;
    const Shape s = acc->shape;
    const Shape& onnx = g_.value(a.outputs[0]).shape;
    // The bias index of an output element: its channel (a blocked output's block and lane).
    auto channel = [&](const std::vector<ir::Expr>& i) {
      if (a.op == "ConvNCHWc") return i[1] * s[4] + i[4];
      return a.op == "Conv" ? i[1] : i[s.size() - 1];
    };
    int64_t channels = a.op == "ConvNCHWc" ? s[1] * s[4] : s[a.op == "Conv" ? 1 : s.size() - 1];
    std::vector<std::string> names;
    for (size_t d = 0; d < s.size(); ++d) names.push_back(str("e", d));
    ir::Tensor pre = acc;
    if (bias || relu) {
      ir::Tensor b = bias ? ir::placeholder("bias", {channels}) : nullptr;
      if (b) og.inputs.push_back(b);
      pre = ir::compute("epilogue", s, names, [&](const std::vector<ir::Expr>& i) {
        ir::Expr v = ir::read(acc, i);
        if (b) v = v + ir::read(b, {channel(i)});
        return relu ? ir::max(v, ir::f32(0.0)) : v;
      });
      og.tail.push_back(pre);
    }
    std::map<std::string, TeOperand> env{{y, TeOperand{s, pre, std::nullopt}}};
    std::vector<std::string> extra;
    for (size_t k = 0; k < rest.size(); ++k) {
      const Node& n = *rest[k];
      if (op_kind(n.op) != OpKind::Elementwise || n.outputs.size() != 1 ||
          g_.value(n.outputs[0]).shape != onnx || g_.value(n.outputs[0]).dtype != DType::F32) {
        return std::nullopt;
      }
      std::vector<TeOperand> in;
      for (const std::string& v : n.inputs) {
        if (v.empty()) {
          in.emplace_back();
          continue;
        }
        if (auto it = env.find(v); it != env.end()) {
          in.push_back(it->second);
          continue;
        }
        const Value& val = g_.value(v);
        if (val.dtype != DType::F32) return std::nullopt;
        if (val.constant && val.constant->size() == 1) {
          in.push_back(TeOperand{val.shape, nullptr, val.constant->f[0]});
          continue;
        }
        Shape shape = val.shape;
        if (shape == onnx) {
          shape = s;
        } else if (s != onnx) {
          while (!shape.empty() && shape[0] == 1) shape.erase(shape.begin());
          if (shape.size() > 1) return std::nullopt;
        }
        ir::Tensor t = ir::placeholder(str("tail", extra.size()), shape);
        og.inputs.push_back(t);
        extra.push_back(v);
        in.push_back(TeOperand{shape, t, std::nullopt});
        env[v] = in.back();
      }
      std::vector<ir::Tensor> ts;
      try {
        ts = node_te(g_, n, in, str("t", k, "_"), &s, target_.is_gpu());
      } catch (const UserError&) {
        return std::nullopt;  // compiled on its own, where the error is reported
      }
      env[n.outputs[0]] = TeOperand{s, ts[0], std::nullopt};
      og.tail.push_back(ts[0]);
    }
    if (!env.count(group_out) || og.tail.empty() || og.tail.back() != env.at(group_out).tensor)
      return std::nullopt;
    // The template inlines the tail into its output tile: past the compiler's bounds, the
    // tail is compiled as generic kernels instead (bounded there by computing stages apart).
    std::map<const ir::Operation*, ir::ExprCost> costs;
    for (const ir::Tensor& t : og.tail) {
      ir::ExprCost c = ir::inlined_cost(t->body, costs);
      if (!ir::within_inline_budget(c)) return std::nullopt;
      costs[t.get()] = c;
    }
    og.output = og.tail.back();
    og.tail.pop_back();
    args.insert(args.end(), extra.begin(), extra.end());
    return og;
  }

  // Whether config `a` was tuned for this very workload and target (the exact tier) and ran
  // faster than `b`, also tuned so, by more than the tuner's verdict margin (2%).
  static bool tuned_faster(const KernelConfig& a, const KernelConfig& b) {
    auto exact_median = [](const KernelConfig& k) {
      if (!k.tuned_from.is_object() || k.tuned_from.value("tier", "") != "exact") return 0.0;
      const nlohmann::json& m = k.tuned_from.value("median_s", nlohmann::json());
      return m.is_number() ? m.get<double>() : 0.0;
    };
    double ta = exact_median(a), tb = exact_median(b);
    return ta > 0 && tb > 0 && ta < tb * 0.98;
  }

  // The constant NCHWc weights `name` transformed for Winograd workload `w`
  // (winograd_weight_transform), added to the graph once.
  std::string winograd_constant(const std::string& name, const Workload& w) {
    int m = static_cast<int>(w.get("tile"));
    std::string key = str(name, "/winograd/", m);
    if (auto it = packed_.find(key); it != packed_.end()) return it->second;
    int64_t K = w.get("K"), C = w.get("C");
    std::vector<float> u = winograd_weight_transform(g_.value(name).constant->f.data(), K, C, w.get("ic_block"),
                                                     w.get("oc_block"), m);
    Shape us{m + 2, m + 2, K / w.get("oc_block"), C, w.get("oc_block")};
    return packed_[key] = add_constant(name + "_winograd", HostTensor::floats(us, std::move(u)));
  }

  // Constant `name` (seen as `shape`) in a template's packed layout, added to the graph once.
  std::string packed_constant(const std::string& name, const Shape& shape, size_t dim,
                              int64_t block) {
    std::string key = str(name, "/", dim, "/", block);
    if (auto it = packed_.find(key); it != packed_.end()) return it->second;
    std::vector<float> data = pack_layout(g_.value(name).constant->f, shape, dim, block);
    Shape ps{static_cast<int64_t>(data.size())};
    return packed_[key] = add_constant(name + "_packed", HostTensor::floats(ps, std::move(data)));
  }

  // A new float constant named after `base`.
  std::string add_constant(const std::string& base, HostTensor t) {
    std::string fresh = g_.fresh_name(base);
    g_.values[fresh] = Value{fresh, DType::F32, t.shape, std::move(t)};
    return fresh;
  }

  // A constant [K, N] made of a constant [N, K] (Gemm's transB), added to the graph.
  std::string transposed(const std::string& name) {
    const Value& v = g_.value(name);
    const HostTensor& t = *v.constant;
    int64_t N = v.shape[0], K = v.shape[1];
    HostTensor out = HostTensor::floats({K, N}, std::vector<float>(t.f.size()));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) out.f[k * N + n] = t.f[n * K + k];
    return add_constant(name + "_T", std::move(out));
  }

  void add_generic(const std::vector<const Node*>& nodes, const std::string& out) {
    std::map<std::string, TeOperand> env;
    std::vector<std::string> args;
    std::vector<ir::Tensor> placeholders;
    auto operand = [&](const Node& n, size_t input) -> TeOperand {
      const std::string& name = n.inputs[input];
      if (name.empty()) return {};
      if (auto it = env.find(name); it != env.end()) return it->second;
      if (std::optional<TeOperand> c = constant_operand(g_, n, input)) {
        // A parameter depends on the reading node (reads_as_data): only scalars are kept.
        if (c->scalar) env[name] = *c;
        return *c;
      }
      const Value& v = g_.value(name);
      std::string arg = name;
      if (v.constant && v.dtype != DType::F32) {  // int64 and bool values are floats in kernels
        std::vector<float> f(static_cast<size_t>(v.constant->size()));
        for (size_t k = 0; k < f.size(); ++k) {
          int64_t x = v.constant->as_int(static_cast<int64_t>(k));
          f[k] = v.dtype == DType::Bool ? (x != 0 ? 1.0f : 0.0f) : static_cast<float>(x);
        }
        arg = add_constant(name + "_f32", HostTensor::floats(v.shape, std::move(f)));
      }
      TeOperand o{v.shape, ir::placeholder(str("arg", args.size()), v.shape), std::nullopt};
      args.push_back(arg);
      placeholders.push_back(o.tensor);
      env[name] = o;
      return o;
    };
    for (size_t k = 0; k < nodes.size(); ++k) {
      const Node& n = *nodes[k];
      std::vector<TeOperand> in;
      for (size_t i = 0; i < n.inputs.size(); ++i) in.push_back(operand(n, i));
      std::vector<ir::Tensor> ts = node_te(g_, n, in, str("n", k, "_"), nullptr, target_.is_gpu());
      for (size_t j = 0; j < ts.size() && j < n.outputs.size(); ++j) {
        if (!n.outputs[j].empty())
          env[n.outputs[j]] = TeOperand{g_.value(n.outputs[j]).shape, ts[j], std::nullopt};
      }
    }
    ir::Tensor result = env.at(out).tensor;
    TF_CHECK(result && result->kind == ir::Operation::Kind::Compute, "generic kernel of ", out,
             " computes nothing");
    // GPUs: long reductions with few outputs spread over threads, while the call's kernels
    // (every reduction, the output, each split into two) stay within the limit.
    std::optional<GpuReductionSplitter> splitter;
    if (target_.is_gpu()) {
      std::set<const ir::Operation*> seen;
      int kernels = count_reductions(result, seen) + (result->reduce() ? 0 : 1);
      const GpuArch arch = gpu_arch(target_);
      splitter.emplace(arch.multiprocessors * arch.threads_per_sm, kMaxGpuKernelsPerCall - kernels);
      result = splitter->rebuild(result);
    }
    ir::Schedule sch(result);
    auto schedule = [&](ir::Stage& s) {
      if (const auto* b = splitter ? splitter->block_reduction(s.op().get()) : nullptr)
        schedule_block_reduction(sch, s, *b);
      else
        schedule_stage(s);
    };
    for (ir::Stage* s : sch.stages()) {
      if (s->op() == result || (splitter && splitter->is_block_part(s->op().get()))) continue;
      if (s->op()->reduce())
        schedule(*s);
      else
        s->compute_inline();
    }
    // Stages whose inlining would make an expression too deep or too large for the compiler
    // (a long chain of elementwise nodes) are computed into buffers of their own instead.
    std::vector<ir::Stage*> rooted;
    try {
      rooted = ir::bound_inlining(sch);
    } catch (const UserError& e) {
      throw UserError(str("node '", nodes.back()->name, "' (", nodes.back()->op, "): ", e.what()));
    }
    for (ir::Stage* s : rooted) schedule_stage(*s);
    schedule(sch[result]);
    KernelBuild b;
    b.info.function = function_name(nodes.back()->op);
    b.info.template_name = "generic";
    b.info.args = args;
    b.info.args.push_back(out);
    b.func = lower(sch, placeholders, b.info.function).func;
    record(std::move(b), op_kind(nodes[0]->op), nodes);
  }

  Graph g_;
  Target target_;
  const ConfigLookup& lookup_;
  Readers readers_;
  std::map<std::string, size_t> node_index_;
  std::vector<KernelBuild> builds_;
  std::vector<FusedGroup> groups_;
  std::map<std::string, std::string> packed_;  // name/dim/block -> packed constant
};

json tensors_json(const Graph& g, const std::vector<std::string>& names) {
  json out = json::array();
  for (const std::string& n : names)
    out.push_back(
        {{"name", n}, {"shape", g.value(n).shape}, {"dtype", dtype_name(g.value(n).dtype)}});
  return out;
}

// A GPU model's device code and launch plan: the kernels in up to `threads` modules (each
// generated by one thread: PTX text for cuda, a .hsaco code object for rocm), split-K
// workspaces in scratch after the arena (one kernel runs at a time, so all calls share it),
// the host object of tables (codegen_gpu_runner) and the runtime's (runtime/gpu_model), whose
// paths join `objects`.
void compile_gpu_library(const std::vector<KernelBuild>& builds, const std::vector<GpuPlan>& plans,
                         const std::vector<size_t>& code_of, const Target& target, unsigned threads,
                         const std::function<void(const std::function<void(size_t)>&, size_t)>& on_all_cores,
                         RunnerSpec& spec, CompiledModel& cm, const std::string& tmp,
                         std::vector<std::string>& objects) {
  constexpr int64_t kAlign = 256;
  auto aligned = [](int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  const int64_t scratch_at = aligned(spec.workspace_bytes);
  int64_t scratch = 0;
  // The kernels whose code is generated (the others launch the same code of an earlier one,
  // code_of, with their own grids and workspaces), spread over the modules. (A model of no
  // kernel, its outputs copies of inputs or constants, has no module.)
  std::vector<size_t> unique;
  for (size_t k = 0; k < builds.size(); ++k)
    if (code_of[k] == k) unique.push_back(k);
  const size_t modules = std::min<size_t>(threads, unique.size());
  GpuRunnerSpec gs;
  gs.platform = target.kind;
  gs.modules.resize(modules);
  std::vector<std::vector<ir::LoweredFunc>> funcs(modules);
  std::vector<size_t> module_of(builds.size());
  for (size_t u = 0; u < unique.size(); ++u) {
    module_of[unique[u]] = u * modules / unique.size();
    funcs[module_of[unique[u]]].push_back(builds[unique[u]].func);
  }
  for (size_t k = 0; k < builds.size(); ++k) {
    const GpuPlan& code = plans[code_of[k]];
    TF_CHECK(code.kernels.size() == plans[k].kernels.size(), "kernel ", builds[k].info.function,
             " has the code of ", builds[code_of[k]].info.function, " but other launches");
    GpuRunnerCall call;
    call.module = static_cast<int64_t>(module_of[code_of[k]]);
    for (size_t i = 0; i < plans[k].kernels.size(); ++i) {
      const GpuLaunch& l = plans[k].kernels[i].launch;
      call.kernels.push_back({code.kernels[i].function, l.grid, l.block, l.dynamic_shared_bytes});
    }
    int64_t at = scratch_at;
    for (const auto& [name, elements] : plans[k].workspaces) {
      call.workspace_offsets.push_back(at);
      at += aligned(elements * 4);
    }
    scratch = std::max(scratch, at - scratch_at);
    gs.calls.push_back(std::move(call));
  }
  spec.workspace_bytes = scratch_at + scratch;
  cm.memory.arena_bytes = spec.workspace_bytes;
  std::vector<std::string> errors(modules);
  on_all_cores(
      [&](size_t m) {
        try {
          if (target.kind == "cuda") {
            gs.modules[m] = codegen_llvm(funcs[m], target, CodegenOutput::Asm).data;
            return;
          }
          std::string object = str(tmp, ".m", m, ".o"), code = str(tmp, ".m", m, ".hsaco");
          write_file(object, codegen_llvm(funcs[m], target, CodegenOutput::Object).data);
          link_amdgpu_code_object(object, code);
          gs.modules[m] = read_file(code);
          std::error_code ec;
          fs::remove(object, ec);
          fs::remove(code, ec);
        } catch (const std::exception& e) {
          errors[m] = e.what();
        }
      },
      modules);
  for (size_t m = 0; m < modules; ++m) {
    if (!errors[m].empty())
      throw std::runtime_error(str("GPU code of kernels ", funcs[m].front().name, " ... ", funcs[m].back().name, ": ",
                                   errors[m]));
  }
  objects.push_back(tmp + ".gpu_tables.o");
  write_file(objects.back(), codegen_gpu_runner(spec, gs, host_target()));
  objects.push_back(tmp + ".gpu_runtime.o");
  write_file(objects.back(), std::string(gpu_model_runtime_object()));
  cm.device_modules = static_cast<int64_t>(modules);
}

}  // namespace

int CompiledModel::tunable() const {
  int n = 0;
  for (const ModelKernel& k : kernels) n += !k.workload.empty();
  return n;
}

int CompiledModel::untuned() const {
  int n = 0;
  for (const ModelKernel& k : kernels) n += !k.workload.empty() && k.config.source == "default";
  return n;
}

json CompiledModel::sidecar(const std::string& model) const {
  json ks = json::array();
  for (const ModelKernel& k : kernels) {
    json j = {{"function", k.function},
              {"nodes", k.nodes},
              {"template", k.template_name},
              {"args", k.args}};
    if (!k.same_code_as.empty()) j["same_code_as"] = k.same_code_as;
    if (!k.launch.is_null()) j["launch"] = k.launch;
    if (!k.workload.empty()) {
      j["workload"] = k.workload;
      j["config"] = k.config.config;
      j["config_source"] = k.config.source;
      if (!k.config.tuned_from.is_null()) j["tuned_from"] = k.config.tuned_from;
    }
    ks.push_back(j);
  }
  return {{"format", "tunefarm-model/1"},
          {"model", model},
          {"target", target.str()},
          {"emulates", emulates.empty() ? json() : json(emulates)},
          {"device_code", device_modules == 0 ? json() : json{{"modules", device_modules},
                                                               {"format", target.kind == "cuda" ? "ptx" : "hsaco"}}},
          {"inputs", inputs},
          {"outputs", outputs},
          {"workspace_bytes", memory.arena_bytes},
          {"intermediate_bytes_unplanned", memory.naive_bytes},
          {"constant_bytes", constant_bytes},
          {"kernels", ks},
          {"untuned_kernels", untuned()}};
}

int64_t channel_block(const Target& t) { return t.is_cpu() ? t.vector_lanes() : 0; }

Graph load_model(const std::string& path, int opt_level, const std::vector<std::string>& disable, int64_t block) {
  PassOptions opts;
  opts.channel_block = block;
  opts.opt_level = opt_level;
  opts.disabled = {disable.begin(), disable.end()};
  check_pass_options(opts);
  Graph g = import_onnx(path);
  run_passes(g, opts);
  return g;
}

CompiledModel compile_model(const Graph& g, const Target& target, const ConfigLookup& lookup,
                            const std::string& out, const std::string& model_name,
                            int64_t memory_budget, bool emulate_gpu) {
  if (emulate_gpu && !target.is_gpu()) {
    throw UserError(str("emulating a GPU needs a GPU target (cuda, rocm), not ", target.str()));
  }
  // A library for a GPU: its kernels' code for the GPU, its host code for this machine.
  const bool gpu_library = target.is_gpu() && !emulate_gpu;
  if (!target.is_cpu() && !target.is_gpu()) {
    throw UserError(str("compiling whole models for ", target.str(), " is not implemented: CPU, cuda and rocm targets"));
  }
  // What the library's code runs on: the target, or this machine running the GPU's kernels
  // (and, for a GPU library, launching them).
  const Target code_target = target.is_gpu() ? host_target() : target;
  // Every value must fit the budget on its own before anything is generated.
  check_input_budgets(g, memory_budget);
  for (const Node& n : g.nodes) check_output_budgets(g, n, memory_budget);
  // Inputs and outputs of every type: kernels compute in float32, bools as 0 / 1 and int64
  // values as integral floats (exact within +-2^24; node_te refuses int64 arithmetic that
  // floats would round). int64 and bool inputs are converted on entry, such outputs after the
  // last kernel; constants of other types are copied as they are.
  ModelBuilder mb(g, target, lookup);
  for (const FusedGroup& grp : plan_fusion(g)) mb.add_group(grp);
  const Graph& graph = mb.graph();
  CompiledModel cm;
  cm.target = target;
  cm.memory = plan_memory(graph, mb.kernel_groups());
  cm.inputs = tensors_json(graph, graph.inputs);
  cm.outputs = tensors_json(graph, graph.outputs);

  RunnerSpec spec;
  auto runner_type = [](DType t) {
    return t == DType::I64 ? RunnerType::Int64 : t == DType::Bool ? RunnerType::Bool : RunnerType::Float32;
  };
  for (const std::string& n : graph.inputs) {
    const Value& v = graph.value(n);
    spec.inputs.push_back({n, v.shape, runner_type(v.dtype)});
    if (v.dtype != DType::F32) {
      // Kernels read int64 and bool inputs as floats: a copy converted on entry, after the
      // planned intermediates and live all through the run.
      auto at = static_cast<int64_t>(spec.inputs.size() - 1);
      spec.conversions.push_back({at, cm.memory.arena_bytes});
      cm.memory.arena_bytes += (num_elements(v.shape) * 4 + 63) / 64 * 64;
    }
  }
  for (const std::string& n : graph.outputs) {
    spec.outputs.push_back({n, graph.value(n).shape, runner_type(graph.value(n).dtype)});
  }
  spec.workspace_bytes = cm.memory.arena_bytes;
  // And a run's inputs, outputs and workspace together.
  std::vector<int64_t> run_tensors;
  for (const std::vector<std::string>* names : {&graph.inputs, &graph.outputs}) {
    for (const std::string& n : *names) run_tensors.push_back(tensor_bytes(graph.value(n).dtype, graph.value(n).shape));
  }
  check_run_budget("a run of the model would hold", cm.memory.arena_bytes, run_tensors, memory_budget);
  std::map<std::string, int64_t> constant_index;
  auto buffer = [&](const std::string& v) -> RunnerBuffer {
    auto in = std::find(graph.inputs.begin(), graph.inputs.end(), v);
    if (in != graph.inputs.end()) return {RunnerBuffer::Kind::Input, in - graph.inputs.begin()};
    if (graph.is_constant(v)) {
      auto [it, fresh] = constant_index.emplace(v, static_cast<int64_t>(spec.constants.size()));
      if (fresh) {
        spec.constants.push_back(&graph.value(v).constant->f);
        cm.constant_bytes += static_cast<int64_t>(graph.value(v).constant->f.size() * 4);
      }
      return {RunnerBuffer::Kind::Constant, it->second};
    }
    auto o = std::find(graph.outputs.begin(), graph.outputs.end(), v);
    if (o != graph.outputs.end() && graph.value(v).dtype == DType::F32) {
      return {RunnerBuffer::Kind::Output, o - graph.outputs.begin()};
    }
    return {RunnerBuffer::Kind::Workspace, cm.memory.buffers.at(v).offset};
  };
  std::vector<KernelBuild>& builds = mb.builds();
  // Each GPU kernel as the GPU will run it (the checker's refusals included): its kernels and
  // their launches.
  std::vector<GpuPlan> plans;
  for (KernelBuild& b : builds) {
    if (!target.is_gpu()) break;
    try {
      plans.push_back(plan_gpu_program(b.func, target));
    } catch (const UserError& e) {
      throw UserError(str("kernel ", b.info.function, " (nodes ", b.info.nodes.front(), ", ...): ", e.what()));
    }
    b.info.launch = plans.back().to_json();
    // Emulated: its grid serially, for this machine.
    if (emulate_gpu) b.func.body = serialize_gpu_bindings(b.func.body);
  }
  if (emulate_gpu) {
    cm.emulates = target.str();
    cm.target = code_target;
  }
  // Kernels whose code is the same but for their names (a repeated layer, the per-group
  // convolutions of split-grouped-convs) are generated once, keyed by their LLVM IR before
  // optimization, and the model calls the first of them: most of a compile is LLVM's.
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8));
  auto on_all_cores = [&](const std::function<void(size_t)>& work, size_t count) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k; (k = next++) < count;) work(k);
    };
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < threads; ++k) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
  };
  // (A GPU library's kernels by their GPU code: the same for the GPU is the same everywhere.)
  std::vector<std::string> keys(builds.size()), errors(builds.size());
  on_all_cores(
      [&](size_t k) {
        try {
          keys[k] = llvm_ir_key(builds[k].func, gpu_library ? target : code_target);
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      },
      builds.size());
  std::vector<size_t> code_of(builds.size());
  std::map<std::string, size_t> first;
  for (size_t k = 0; k < builds.size(); ++k) {
    code_of[k] = errors[k].empty() ? first.emplace(std::move(keys[k]), k).first->second : k;
    keys[k].clear();
  }
  for (size_t k = 0; k < builds.size(); ++k) {
    KernelBuild& b = builds[k];
    if (code_of[k] != k) b.info.same_code_as = builds[code_of[k]].info.function;
    RunnerCall call{builds[code_of[k]].info.function, {}};
    for (const std::string& a : b.info.args) call.args.push_back(buffer(a));
    spec.calls.push_back(std::move(call));
    cm.kernels.push_back(b.info);
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    const Value& v = graph.value(graph.outputs[k]);
    if (v.dtype != DType::F32 && v.constant) {
      // A constant of another type (a folded shape, a comparison of constants): its bytes.
      RunnerCopy c{{RunnerBuffer::Kind::Constant, 0}, static_cast<int64_t>(k), {}};
      for (int64_t x : v.constant->i) {
        if (v.dtype == DType::Bool) {
          c.literal.push_back(x != 0);
        } else {
          const auto* b = reinterpret_cast<const uint8_t*>(&x);
          c.literal.insert(c.literal.end(), b, b + sizeof x);
        }
      }
      if (!c.literal.empty()) spec.copies.push_back(std::move(c));
      continue;
    }
    RunnerBuffer from = buffer(graph.outputs[k]);
    if (from.kind != RunnerBuffer::Kind::Output || from.index != static_cast<int64_t>(k))
      spec.copies.push_back({from, static_cast<int64_t>(k)});
  }

  // Code generation, the kernels on all cores; then one link.
  fs::path target_path = fs::absolute(out);
  std::string tmp = target_path.string() + ".tmp" + std::to_string(getpid());
  std::vector<std::string> objects;
  struct Cleanup {
    std::vector<std::string>* paths;
    std::string so;
    ~Cleanup() {
      std::error_code ec;
      for (const std::string& p : *paths) fs::remove(p, ec);
      fs::remove(so, ec);
    }
  } cleanup{&objects, tmp + ".so"};
  if (gpu_library) {
    compile_gpu_library(builds, plans, code_of, target, threads, on_all_cores, spec, cm, tmp, objects);
    // (ld.lld in a process of its own: the runtime's object is gcc's, see compiler/link.h.)
    link_shared_library(objects, tmp + ".so", code_target, false, false, /*nodelete=*/true, /*in_process=*/false);
    write_file(target_path.string() + ".json", cm.sidecar(model_name).dump(2) + "\n");
    std::error_code ec;
    fs::rename(tmp + ".so", target_path, ec);
    if (ec) throw std::runtime_error(str("cannot write ", target_path.string(), ": ", ec.message()));
    return cm;
  }
  std::vector<CodegenResult> results(builds.size());
  on_all_cores(
      [&](size_t k) {
        if (code_of[k] != k || !errors[k].empty()) return;
        try {
          results[k] = codegen_llvm(builds[k].func, code_target, CodegenOutput::Object);
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      },
      builds.size());
  bool openmp = false, libm = false;
  for (size_t k = 0; k < builds.size(); ++k) {
    if (!errors[k].empty())
      throw std::runtime_error(str("kernel ", builds[k].info.function, ": ", errors[k]));
    if (code_of[k] != k) continue;
    objects.push_back(str(tmp, ".k", k, ".o"));
    write_file(objects.back(), results[k].data);
    openmp |= results[k].uses_openmp;
    libm |= results[k].uses_libm;
  }
  objects.push_back(tmp + ".runner.o");
  write_file(objects.back(), codegen_runner(spec, code_target));
  link_shared_library(objects, tmp + ".so", code_target, openmp, libm);
  write_file(target_path.string() + ".json", cm.sidecar(model_name).dump(2) + "\n");
  std::error_code ec;
  fs::rename(tmp + ".so", target_path, ec);
  if (ec) throw std::runtime_error(str("cannot write ", target_path.string(), ": ", ec.message()));
  return cm;
}

}  // namespace tf::graph
