#include "graph/model_compiler.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>

#include "base/error.h"
#include "compiler/driver.h"
#include "compiler/ir_mutator.h"
#include "compiler/model_codegen.h"
#include "compiler/schedule_templates.h"
#include "compiler/te_rebuild.h"
#include "compiler/winograd.h"
#include "graph/element_types.h"
#include "graph/fusion.h"
#include "graph/image_loop.h"
#include "graph/node_te.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"
#include "graph/tasks.h"
#include "runtime/pack_layout.h"

namespace tf::graph {
namespace {

using nlohmann::json;

struct KernelBuild {
  ModelKernel info;
  ir::LoweredFunc func;
  // The lowering, left to ModelBuilder::lower_all, which lowers a model's kernels on all cores
  // at once: sets `func` (and, for a tensor-core product emulated as a generic kernel, says so).
  std::function<void(KernelBuild&)> lower;
  bool emulated = false;
};

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

class ModelBuilder {
 public:
  // `prefix` starts every kernel's name: "tf_k", or "tf_b<bucket>_k" in a library of buckets.
  // `emulate_gpu`: kernels for a GPU target that --emulate-gpu runs serially here; `lowering`:
  // every kernel's lowering options (passes skipped).
  ModelBuilder(const Graph& g, const Target& t, const ConfigLookup& lookup, bool emulate_gpu,
               const LowerOptions& lowering, std::string prefix = "tf_k")
      : g_(g),
        target_(t),
        lookup_(lookup),
        emulate_gpu_(emulate_gpu),
        lowering_(lowering),
        readers_(g_),
        prefix_(std::move(prefix)) {
    for (size_t k = 0; k < g_.nodes.size(); ++k) node_index_[g_.nodes[k].name] = k;
  }

  void add_group(const FusedGroup& grp) {
    std::vector<const Node*> nodes;
    for (const std::string& name : grp.nodes) nodes.push_back(&g_.nodes[node_index_.at(name)]);
    if (grp.outputs.size() == 1) {
      if (grp.kind == OpKind::Anchor) {
        if (try_anchor(nodes, grp.outputs[0])) return;
        // A product that cannot read its operands through the views that make them: the views
        // are kernels of their own (as without products_read_views), the product the rest.
        if (const size_t p = anchor_position(nodes); p > 0) {
          add_prologue_kernels(nodes, p);
          nodes.erase(nodes.begin(), nodes.begin() + static_cast<int64_t>(p));
          if (try_anchor(nodes, grp.outputs[0])) return;
        }
      }
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

  // Lowers the kernels added since the last call, on up to `threads` threads (their lowerings
  // read only their own schedules and tensor expressions), each into its build; then throws
  // the error of the first of them, in the model's order, whose lowering failed.
  void lower_all(unsigned threads) {
    std::vector<std::exception_ptr> errors(builds_.size());
    run_on_threads(builds_.size(), threads, [&](size_t k) {
      if (!builds_[k].lower) return;
      try {
        builds_[k].lower(builds_[k]);
      } catch (...) {
        errors[k] = std::current_exception();
      }
      builds_[k].lower = nullptr;
    });
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

  Graph& graph() { return g_; }
  // Kernels of warp-level products that were lowered as generic kernels (emulate_gpu).
  int emulated_products() const {
    return static_cast<int>(std::count_if(builds_.begin(), builds_.end(),
                                          [](const KernelBuild& b) { return b.emulated; }));
  }
  std::vector<KernelBuild>& builds() { return builds_; }
  const std::vector<FusedGroup>& kernel_groups() const { return groups_; }

 private:
  std::string function_name(const std::string& what) {
    return str(prefix_, builds_.size(), "_", identifier(what));
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

  // Where a group's anchor is: after the views it reads its operands through, if any
  // (products_read_views: graph/fusion.h).
  static size_t anchor_position(const std::vector<const Node*>& nodes) {
    for (size_t k = 0; k < nodes.size(); ++k) {
      if (op_kind(nodes[k]->op) == OpKind::Anchor) return k;
    }
    return 0;
  }

  // The views before a group's anchor (nodes[0, p)) as generic kernels, one per operand of the
  // anchor they compute, each of the nodes that operand needs.
  void add_prologue_kernels(const std::vector<const Node*>& nodes, size_t p) {
    std::map<std::string, size_t> producer;
    for (size_t k = 0; k < p; ++k) {
      for (const std::string& o : nodes[k]->outputs) producer[o] = k;
    }
    std::set<std::string> done;
    for (const std::string& v : nodes[p]->inputs) {
      if (!producer.count(v) || !done.insert(v).second) continue;
      std::set<size_t> needed;
      std::vector<std::string> stack{v};
      while (!stack.empty()) {
        auto it = producer.find(stack.back());
        stack.pop_back();
        if (it == producer.end() || !needed.insert(it->second).second) continue;
        for (const std::string& in : nodes[it->second]->inputs) stack.push_back(in);
      }
      std::vector<const Node*> chain;
      for (size_t k : needed) chain.push_back(nodes[k]);
      add_generic(chain, v);
    }
  }

  // Indices, in a tensor of shape `to`, of the element at `at` in a tensor of shape `from` that
  // holds the same elements in the same order with the same last dimension (a MatMul's operand
  // as its workload sees it: leading dimensions flattened into the batch or the rows).
  static std::vector<ir::Expr> same_element(const std::vector<ir::Expr>& at, const Shape& from,
                                            const Shape& to) {
    auto lead = [](const Shape& s) {
      size_t k = 0;
      while (k + 1 < s.size() && s[k] == 1) ++k;
      return k;
    };
    const size_t f0 = lead(from), t0 = lead(to);
    if (Shape(from.begin() + static_cast<int64_t>(f0), from.end()) ==
        Shape(to.begin() + static_cast<int64_t>(t0), to.end())) {
      std::vector<ir::Expr> out(t0, ir::Expr(0));
      out.insert(out.end(), at.begin() + static_cast<int64_t>(f0), at.end());
      return out;
    }
    ir::Expr row(0);
    for (size_t d = 0; d + 1 < from.size(); ++d) row = row * ir::Expr(from[d]) + at[d];
    std::vector<ir::Expr> out(to.size());
    out.back() = at.back();
    for (size_t d = to.size() - 1; d-- > 0;) {
      out[d] = d == 0 ? row : row % ir::Expr(to[d]);
      row = row / ir::Expr(to[d]);
    }
    return out;
  }

  // Product `og` of anchor `a` reading the operands that `prologue` computes (layout views,
  // Casts, scalings: graph/fusion.h) through that computation: each such operand's placeholder
  // is replaced by a view in its shape (<operand>_view) of the value the prologue's stages
  // compute, which the templates stage as a computed operand; those stages are og.prologue,
  // inlined into the view. `args` (og.inputs' values, in order) loses the operands and gains
  // the values the prologue reads. False (nothing changed) where an operand's value does not
  // hold the workload operand's elements in order, in its type.
  bool read_through_views(OpGraph& og, const Node& a, const std::vector<const Node*>& prologue,
                          std::vector<std::string>& args) {
    TeEnv e{"view_arg", {}, {}, {}};
    std::set<std::string> made;
    for (size_t k = 0; k < prologue.size(); ++k) {
      evaluate(e, *prologue[k], str("v", k, "_"));
      for (const std::string& o : prologue[k]->outputs) made.insert(o);
    }
    std::map<const ir::Operation*, ir::Tensor> views;
    std::vector<ir::Tensor> sources;
    for (size_t i = 0; i < 2 && i < og.inputs.size() && i < a.inputs.size(); ++i) {
      if (!made.count(a.inputs[i])) continue;
      const ir::Tensor from = e.env.at(a.inputs[i]).tensor;
      const ir::Tensor& p = og.inputs[i];
      if (!from || from->dtype != p->dtype || from->shape.empty() || p->shape.empty() ||
          ir::num_elements(from->shape) != ir::num_elements(p->shape) ||
          from->shape.back() != p->shape.back())
        return false;
      std::vector<std::string> names;
      for (size_t d = 0; d < p->shape.size(); ++d) names.push_back(str("d", d));
      views[p.get()] =
          ir::compute(p->name + "_view", p->shape, names, [&](const std::vector<ir::Expr>& at) {
            return ir::read(from, same_element(at, p->shape, from->shape));
          });
      sources.push_back(from);
    }
    if (views.empty()) return false;
    // The prologue's stages: what the views read, down to the placeholders.
    std::set<const ir::Operation*> seen;
    while (!sources.empty()) {
      ir::Tensor t = sources.back();
      sources.pop_back();
      if (t->is_placeholder() || !seen.insert(t.get()).second) continue;
      og.prologue.push_back(t);
      for (const ir::Tensor& in : ir::inputs_of(t)) sources.push_back(in);
    }
    ir::StageRebuilder rebuild(views);
    og.output = rebuild.rebuild(og.output);
    for (ir::Tensor& t : og.tail) t = rebuild.rebuild(t);
    og.acc = rebuild.rebuild(og.acc);
    if (og.pad) og.pad = rebuild.rebuild(og.pad);
    std::vector<ir::Tensor> inputs;
    std::vector<std::string> kept;
    for (size_t i = 0; i < og.inputs.size(); ++i) {
      if (views.count(og.inputs[i].get())) {
        og.word_types.erase(og.inputs[i]->name);
        continue;
      }
      inputs.push_back(og.inputs[i]);
      kept.push_back(args[i]);
    }
    // 16-bit values the views read are 16-bit elements, as the workload's operands are.
    for (size_t k = 0; k < e.args.size(); ++k) {
      const DType t = g_.value(e.args[k]).dtype;
      if (is_storage16(t))
        og.word_types[e.placeholders[k]->name] =
            t == DType::BF16 ? kBFloat16Elements : kFloat16Elements;
    }
    inputs.insert(inputs.end(), e.placeholders.begin(), e.placeholders.end());
    kept.insert(kept.end(), e.args.begin(), e.args.end());
    og.inputs = std::move(inputs);
    args = std::move(kept);
    return true;
  }

  bool try_anchor(const std::vector<const Node*>& group, const std::string& group_out) {
    const size_t at = anchor_position(group);
    const std::vector<const Node*> prologue(group.begin(),
                                            group.begin() + static_cast<int64_t>(at));
    const std::vector<const Node*> nodes(group.begin() + static_cast<int64_t>(at), group.end());
    const Node& a = *nodes[0];
    AnchorWorkload aw = anchor_workload(g_, a);
    if (aw.spec.empty()) return false;
    // An operator without a template for the target is a generic kernel there.
    if (!lookup_template(parse_workload(aw.spec + ")"), target_)) return false;
    AnchorEpilogue e = anchor_epilogue(g_, a, aw, readers_);
    // What the epilogue takes over must open the group, and leave the group's output to write.
    size_t used = e.nodes.size();
    if (used > nodes.size() || !std::equal(e.nodes.begin(), e.nodes.end(), nodes.begin()))
      return false;
    const std::string& y = e.output;
    if (used == nodes.size() ? y != group_out : g_.is_output(y)) return false;
    std::vector<std::string> args{a.inputs[0], a.inputs[1]};
    const OpDef& def = *find_op(a.op);
    // The constant weights as the workload reads them: [K][N], or [N][K] for a TF32 product
    // (trans_b=1); a Gemm's transB gives them [N][K].
    const bool given_nk = def.transposed_weight && a.get_int(def.transposed_weight, 0);
    if (given_nk != tf32_weights_along_k(g_, a)) args[1] = transposed(a.inputs[1]);
    if (def.kernel_constants) {
      args.resize(1);
      // Made once for nodes that share their operands after input 0 (layers sharing weights).
      Node key_node = a;
      key_node.inputs[0].clear();
      auto [it, fresh] = operands_.emplace(node_key(key_node), std::vector<std::string>{});
      if (fresh) {
        for (HostTensor& t : def.kernel_constants(g_, a)) it->second.push_back(add_constant(a.name + ".operand", std::move(t)));
      }
      args.insert(args.end(), it->second.begin(), it->second.end());
    }
    if (!e.bias.empty()) args.push_back(e.bias);
    bool bias = !e.bias.empty(), relu = e.relu;
    Workload w = parse_workload(aw.spec + ",epilogue=" + e.name() + ")");
    KernelConfig kc = lookup_(w, target_);
    std::string spec = aw.spec;
    // A Winograd convolution where the layer has one (winograd_alternative), unless the
    // database says the direct one is faster (prefer_winograd).
    if (std::string alt = winograd_alternative(g_, a, aw); !alt.empty()) {
      Workload wa = parse_workload(alt + ",epilogue=" + e.name() + ")");
      KernelConfig ka = lookup_(wa, target_);
      if (prefer_winograd(ka, kc)) {
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
    if (!prologue.empty() && !read_through_views(og, a, prologue, args)) return false;
    // The config and schedule now (they say which constants are packed), the lowering in
    // lower_all.
    auto k =
        std::make_shared<PreparedKernel>(prepare_op_graph(og, target_, kc.config, kc.source, name));
    for (const ir::Schedule::Packing& p : k->kernel.packed) {
      for (size_t i = 0; i < og.inputs.size(); ++i) {
        if (og.inputs[i]->name == p.input)
          args[i] = packed_constant(args[i], og.inputs[i]->shape, p.dim, p.block);
      }
    }
    KernelBuild b;
    b.info.function = k->kernel.name;
    b.info.workload = w.canonical();
    b.info.template_name = template_name(w, target_);
    b.info.args = args;
    b.info.config = kc;
    b.info.config.config = k->kernel.config;
    b.info.args.push_back(tail ? group_out : y);
    b.lower = [this, k, what = str("node '", a.name, "' (", a.op, ")")](KernelBuild& kb) {
      const CompiledKernel lowered = lower_prepared(std::move(*k), lowering_);
      kb.func = lowered.lowered.func;
      if (emulate_gpu_ && uses_warp_products(kb.func.body)) {
        // Warp-level products need a warp's 32 lanes at once, which the serialized grid of
        // --emulate-gpu does not have: the same function as a generic kernel instead, its
        // operands rounded as the tensor cores round them (float32 sums in another order).
        // The tensor-core kernels themselves are checked by the threaded emulation of their
        // warps (tests/compiler/tensor_core_test.cc).
        kb.func = lower_generic_kernel(with_operands_rounded(lowered.graph), lowered.graph.inputs,
                                       target_, lowered.name, what, lowering_);
        kb.info.template_name = "generic, emulating " + kb.info.template_name;
        kb.emulated = true;
      }
    };
    std::vector<const Node*> made = prologue;
    made.insert(made.end(), nodes.begin(),
                tail ? nodes.end() : nodes.begin() + static_cast<int64_t>(used));
    record(std::move(b), OpKind::Anchor, made);
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
    if (og.output != og.acc) {
      // The operator's own stage after its sum (qmatmul's scaling to float): the tail's start.
      og.tail.push_back(og.output);
      acc = og.output;
    }
    const Shape s = acc->shape;
    const Shape& onnx = g_.value(a.outputs[0]).shape;
    // The bias index of an output element: its channel (a blocked output's block and lane).
    using BiasAxis = OpDef::BiasAxis;
    const BiasAxis axis = find_op(a.op)->bias_axis;
    auto channel = [&](const std::vector<ir::Expr>& i) {
      if (axis == BiasAxis::BlockedChannel) return i[1] * s[4] + i[4];
      return axis == BiasAxis::Channel ? i[1] : i[s.size() - 1];
    };
    int64_t channels = axis == BiasAxis::BlockedChannel ? s[1] * s[4] : s[axis == BiasAxis::Channel ? 1 : s.size() - 1];
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
      // Float results, the uint8 of a QuantizeU8 (int8-edges: the requantization), and the
      // 16-bit bits of a storage Cast (sixteen-bit-edges, a float16 model's output).
      const DType t = n.outputs.size() == 1 ? g_.value(n.outputs[0]).dtype : DType::F32;
      if (op_kind(n.op) != OpKind::Elementwise || n.outputs.size() != 1 ||
          g_.value(n.outputs[0]).shape != onnx || (t != DType::F32 && t != DType::U8 && !is_storage16(t))) {
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
        // Float32 values, and the 16-bit values a widening Cast reads (sixteen-bit-edges).
        if (val.dtype != DType::F32 && !(is_storage16(val.dtype) && n.op == "Cast"))
          return std::nullopt;
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
        ir::Tensor t = ir::placeholder(str("tail", extra.size()), shape, kernel_type(val.dtype));
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
    if (!within_inline_budget(og.tail)) return std::nullopt;
    og.output = og.tail.back();
    og.tail.pop_back();
    args.insert(args.end(), extra.begin(), extra.end());
    return og;
  }

  // Winograd kernel `a` or direct kernel `b` of a layer: where both were tuned for the exact
  // workload and target, the Winograd one if it ran more than 2% faster (the verdict margin,
  // docs/tuning.md); where only the direct one was, the direct one (what the database knows
  // beats what it does not); otherwise the Winograd one, whose default schedule runs the
  // layers winograd_alternative offers at 1.3-3x the direct template's (docs/models.md).
  static bool prefer_winograd(const KernelConfig& a, const KernelConfig& b) {
    auto exact_median = [](const KernelConfig& k) {
      if (!k.tuned_from.is_object() || k.tuned_from.value("tier", "") != "exact") return 0.0;
      const nlohmann::json& m = k.tuned_from.value("median_s", nlohmann::json());
      return m.is_number() ? m.get<double>() : 0.0;
    };
    double ta = exact_median(a), tb = exact_median(b);
    if (ta > 0 && tb > 0) return ta < tb * 0.98;
    return tb == 0;
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

  // A constant [K, N] made of a constant [N, K] (Gemm's transB; the other way for a TF32
  // product's weights), added to the graph once (layers sharing weights share it).
  std::string transposed(const std::string& name) {
    const std::string key = name + "/transposed";
    if (auto it = packed_.find(key); it != packed_.end()) return it->second;
    const Value& v = g_.value(name);
    const HostTensor& t = *v.constant;
    int64_t N = v.shape[0], K = v.shape[1];
    HostTensor out = HostTensor::floats({K, N}, std::vector<float>(t.f.size()));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) out.f[k * N + n] = t.f[n * K + k];
    return packed_[key] = add_constant(name + "_T", std::move(out));
  }

  // Nodes' tensor expressions, evaluated in order over placeholders for the values they read
  // from outside the kernel (`args`, in call order, named <prefix>0, <prefix>1, ...).
  struct TeEnv {
    std::string prefix;
    std::map<std::string, TeOperand> env;
    std::vector<std::string> args;
    std::vector<ir::Tensor> placeholders;
  };

  // How node n's input `input` is read in the kernel of `e`: an earlier node's tensor, a
  // folded constant, or a new placeholder (and argument).
  TeOperand operand(TeEnv& e, const Node& n, size_t input) {
    const std::string& name = n.inputs[input];
    if (name.empty()) return {};
    if (auto it = e.env.find(name); it != e.env.end()) return it->second;
    if (std::optional<TeOperand> c = constant_operand(g_, n, input)) {
      // A parameter depends on the reading node (reads_as_data): only scalars are kept.
      if (c->scalar) e.env[name] = *c;
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
    TeOperand o{v.shape,
                ir::placeholder(str(e.prefix, e.args.size()), v.shape, kernel_type(v.dtype)),
                std::nullopt};
    e.args.push_back(arg);
    e.placeholders.push_back(o.tensor);
    e.env[name] = o;
    return o;
  }

  // Node n's stages in `e`, named <stage_prefix>...
  void evaluate(TeEnv& e, const Node& n, const std::string& stage_prefix) {
    std::vector<TeOperand> in;
    for (size_t i = 0; i < n.inputs.size(); ++i) in.push_back(operand(e, n, i));
    std::vector<ir::Tensor> ts = node_te(g_, n, in, stage_prefix, nullptr, target_.is_gpu());
    for (size_t j = 0; j < ts.size() && j < n.outputs.size(); ++j) {
      if (!n.outputs[j].empty())
        e.env[n.outputs[j]] = TeOperand{g_.value(n.outputs[j]).shape, ts[j], std::nullopt};
    }
  }

  void add_generic(const std::vector<const Node*>& nodes, const std::string& out) {
    TeEnv e{"arg", {}, {}, {}};
    std::map<std::string, TeOperand>& env = e.env;
    std::vector<std::string>& args = e.args;
    std::vector<ir::Tensor>& placeholders = e.placeholders;
    // A GPU kernel ending in attention schedules its stages together (compiler/attention.h).
    std::optional<Attention> attention;
    for (size_t k = 0; k < nodes.size(); ++k) {
      const Node& n = *nodes[k];
      if (n.op == kFusedAttention && k + 1 == nodes.size() && target_.is_gpu()) {
        std::vector<TeOperand> in;
        for (size_t i = 0; i < n.inputs.size(); ++i) in.push_back(operand(e, n, i));
        attention = fused_attention_te(n, in, str("n", k, "_"));
        env[n.outputs[0]] = TeOperand{g_.value(n.outputs[0]).shape, attention->out, std::nullopt};
        continue;
      }
      evaluate(e, n, str("n", k, "_"));
    }
    ir::Tensor result = env.at(out).tensor;
    TF_CHECK(result && result->kind == ir::Operation::Kind::Compute, "generic kernel of ", out,
             " computes nothing");
    KernelBuild b;
    b.info.function = function_name(nodes.back()->op);
    b.info.template_name = "generic";
    b.info.args = args;
    b.info.args.push_back(out);
    if (attention && result == attention->out) {
      b.info.template_name = "attention";
      b.lower = [this, a = *attention, placeholders](KernelBuild& kb) {
        kb.func = lower_attention_gpu(a, placeholders, target_, kb.info.function, lowering_);
      };
    } else {
      b.lower = [this, result, placeholders,
                 what = str("node '", nodes.back()->name, "' (", nodes.back()->op, ")")](
                    KernelBuild& kb) {
        kb.func =
            lower_generic_kernel(result, placeholders, target_, kb.info.function, what, lowering_);
      };
    }
    record(std::move(b), op_kind(nodes[0]->op), nodes);
  }

  static bool uses_warp_products(const ir::Stmt& body) {
    return !ir::call_named(body, [](const std::string& c) { return ir::is_warp_mma(c) || ir::is_wgmma(c); }).empty();
  }

  Graph g_;
  Target target_;
  const ConfigLookup& lookup_;
  bool emulate_gpu_ = false;
  LowerOptions lowering_;
  Readers readers_;
  std::string prefix_;
  std::map<std::string, size_t> node_index_;
  std::vector<KernelBuild> builds_;
  std::vector<FusedGroup> groups_;
  // name/dim/block, name/winograd/tile, name/transposed -> the constant made of it
  std::map<std::string, std::string> packed_;
  std::map<std::string, std::vector<std::string>> operands_;  // node_key (input 0 left out) -> kernel_constants
};

// A per-image graph's shape as the model's callers see it: `images` slices along axis 0.
Shape whole(Shape s, int64_t images) {
  if (images > 1) s.at(0) *= images;
  return s;
}

json tensors_json(const Graph& g, const std::vector<std::string>& names, int64_t images = 1) {
  json out = json::array();
  for (const std::string& n : names)
    out.push_back(
        {{"name", n}, {"shape", whole(g.value(n).shape, images)}, {"dtype", dtype_name(g.value(n).dtype)}});
  return out;
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
    if (!buckets.empty()) j["bucket"] = k.bucket;
    if (!k.launch.is_null()) j["launch"] = k.launch;
    if (!k.workload.empty()) {
      j["workload"] = k.workload;
      j["config"] = k.config.config;
      j["config_source"] = k.config.source;
      if (!k.config.tuned_from.is_null()) j["tuned_from"] = k.config.tuned_from;
    }
    ks.push_back(j);
  }
  json j = {{"format", "tunefarm-model/1"},
          {"model", model},
          {"target", target.str()},
          {"emulates", emulates.empty() ? json() : json(emulates)},
          {"emulated_products", emulated_products},
          {"device_code", device_modules == 0 ? json()
                                              : json{{"modules", device_modules},
                                                     {"format", target.info().module_format}}},
          {"inputs", inputs},
          {"outputs", outputs},
          {"workspace_bytes", memory.arena_bytes},
          {"intermediate_bytes_unplanned", memory.naive_bytes},
          {"constant_bytes", constant_bytes},
          {"kernels", ks},
          {"in_place", in_place_json(in_place)},
          {"images", images},
          {"untuned_kernels", untuned()}};
  if (pad_batch) j["pad_batch"] = true;
  if (!skipped_passes.empty()) j["skipped_passes"] = skipped_passes;
  if (!import_warnings.empty()) j["import_warnings"] = import_warnings;
  if (!buckets.empty()) {
    json bs = json::array();
    for (const Bucket& b : buckets)
      bs.push_back({{"inputs", b.inputs},
                    {"outputs", b.outputs},
                    {"workspace_bytes", b.workspace_bytes},
                    {"in_place", b.in_place},
                    {"images", b.images},
                    {"padded", b.padded}});
    j["buckets"] = bs;
  }
  return j;
}

int64_t channel_block(const Target& t) { return t.is_cpu() ? t.vector_lanes() : 0; }

bool tensor_cores(const Target& t) { return t.kind == TargetKind::Cuda; }

Graph load_model(const std::string& path, int opt_level, const std::vector<std::string>& disable,
                 int64_t block, Precision precision, bool tensor_cores, const InputBinding& bind,
                 bool external_data) {
  PassOptions opts;
  opts.channel_block = block;
  opts.precision = precision;
  opts.tensor_cores = tensor_cores;
  opts.opt_level = opt_level;
  opts.disabled = {disable.begin(), disable.end()};
  check_pass_options(opts);
  Graph g = import_onnx(path, bind, external_data);
  run_passes(g, opts);
  return g;
}

CompiledModel compile_model(const Graph& g, const Target& target, const ConfigLookup& lookup,
                            const std::string& out, const std::string& model_name,
                            int64_t memory_budget, bool emulate_gpu) {
  return compile_model(std::vector<const Graph*>{&g}, target, lookup, out, model_name, memory_budget, emulate_gpu);
}

namespace {

// Threads that run images of their own (one image at a time: compiler/model_entry.h) each
// take a workspace slot: at most this many slots (the thread pool's most threads), and this
// many bytes of them in all. Slots no thread takes are never touched.
constexpr int64_t kMaxImageSlots = 64;
constexpr int64_t kImageSlotsBytes = int64_t{256} << 20;

// One bucket of a library on its way: its graph's kernels, memory plan and entry point.
struct BucketBuild {
  // The graph at one image, where the library runs the model one image at a time
  // (graph/image_loop.h): the builder's graph, with `loop->images` slices a call.
  std::optional<ImageLoop> loop;
  std::unique_ptr<ModelBuilder> mb;
  std::vector<InPlaceConcat> in_place;
  MemoryPlan memory;
  EntrySpec spec;
  size_t first_kernel = 0;  // its kernels' place among all buckets' (ModelCodegen's order)
};

}  // namespace

CompiledModel compile_model(const std::vector<const Graph*>& buckets, const Target& target,
                            const ConfigLookup& lookup, const std::string& out,
                            const std::string& model_name, int64_t memory_budget, bool emulate_gpu,
                            bool pad_batch, const LowerOptions& lowering) {
  TF_CHECK(!buckets.empty(), "compile_model: no graph");
  check_lower_options(lowering);
  // With pad_batch, which buckets fewer rows may run padded: every bucket of more than one row
  // of axis 0, where the model keeps the rows apart.
  std::vector<bool> padded(buckets.size(), false);
  if (pad_batch) {
    for (size_t bk = 0; bk < buckets.size(); ++bk) {
      const Graph& g = *buckets[bk];
      if (g.inputs.empty()) throw UserError("--pad-batch: the model has no input to pad");
      const Shape& first = g.value(g.inputs[0]).shape;
      if (first.empty() || first[0] <= 1) continue;
      std::string why;
      if (!image_loop(g, &why)) {
        throw UserError(str("--pad-batch: bucket ", bk, " (", g.inputs[0], " ", shape_str(first),
                            ") cannot be padded up to: the rows of axis 0 are not kept apart (",
                            why, ")"));
      }
      padded[bk] = true;
    }
    if (std::find(padded.begin(), padded.end(), true) == padded.end()) {
      throw UserError(
          "--pad-batch: no bucket has more than one row of axis 0 to pad up to (give sizes: "
          "--dim batch=1,8,32)");
    }
  }
  if (buckets.size() > kMaxShapeBuckets)
    throw UserError(str(buckets.size(), " shape buckets: a library holds at most ", kMaxShapeBuckets));
  for (const Graph* gp : buckets) {
    const Graph& g = *gp;
    if (!target.is_cpu()) {
      for (const Node& n : g.nodes) {
        static const std::map<std::string, const char*> cpu_only = {
            {"MatMulBF16", "bf16"}, {"ConvNCHWcBF16", "bf16"}, {"MatMulFP16", "fp16"}, {"ConvNCHWcFP16", "fp16"}};
        if (auto it = cpu_only.find(n.op); it != cpu_only.end())
          throw UserError(str(n.where(), ": --precision ", it->second,
                              " is implemented for CPU targets and cuda's tensor cores, not ", target.str()));
      }
    }
    // Made for a cuda target's tensor cores (auto-mixed-precision); a model could name it too.
    if (target.kind != TargetKind::Cuda) {
      for (const Node& n : g.nodes) {
        if (reads_16_bit_weights(n.op))
          throw UserError(str(n.where(), ": ", n.op, " runs on a cuda target's tensor cores (--precision fp16 or bf16), not ",
                              target.str()));
      }
    }
    // Every value must fit the budget on its own before anything is generated.
    check_input_budgets(g, memory_budget);
    for (const Node& n : g.nodes) check_output_budgets(g, n, memory_budget);
  }
  ModelCodegen code(target, emulate_gpu);
  CompiledModel cm;
  cm.target = target;
  cm.pad_batch = pad_batch;
  cm.skipped_passes = {lowering.skip.begin(), lowering.skip.end()};
  cm.import_warnings = buckets[0]->import_warnings;
  std::vector<BucketBuild> bb(buckets.size());
  auto entry_type = [](DType t) { return static_cast<EntryType>(onnx_element_type(t)); };
  for (size_t bk = 0; bk < buckets.size(); ++bk) {
    BucketBuild& b = bb[bk];
    // Inputs and outputs of every type: kernels compute in float32, bools as 0 / 1 and int64
    // values as integral floats (exact within +-2^24; node_te refuses int64 arithmetic that
    // floats would round). int64 and bool inputs are converted on entry, such outputs after the
    // last kernel; constants of other types are copied as they are.
    if (!emulate_gpu) b.loop = image_loop_for(*buckets[bk], target);
    const Graph& source = b.loop ? b.loop->per_image : *buckets[bk];
    const int64_t images = b.loop ? b.loop->images : 1;
    b.mb = std::make_unique<ModelBuilder>(source, target, lookup, emulate_gpu, lowering,
                                          buckets.size() > 1 ? str("tf_b", bk, "_k") : "tf_k");
    const std::vector<FusedGroup> fused = plan_fusion(source);
    b.in_place = in_place_concats(source, fused);
    // The kernels' lowerings on all cores once every kernel is planned (one at a time, dumps
    // stay in order); a planning error comes after any lowering error of an earlier kernel, as
    // it would one kernel at a time.
    const unsigned threads = lowering.dump.empty() ? model_compile_threads() : 1;
    try {
      for (const FusedGroup& grp : without_in_place(fused, b.in_place)) b.mb->add_group(grp);
    } catch (...) {
      b.mb->lower_all(threads);
      throw;
    }
    b.mb->lower_all(threads);
    const Graph& graph = b.mb->graph();
    b.memory = plan_memory(graph, b.mb->kernel_groups(), b.in_place);
    EntrySpec& spec = b.spec;
    spec.images = images;
    spec.padded = padded[bk];
    for (const std::string& n : graph.inputs) {
      const Value& v = graph.value(n);
      spec.inputs.push_back({n, whole(v.shape, images), entry_type(v.dtype)});
      if (v.dtype == DType::I64 || v.dtype == DType::Bool) {
        // Kernels read int64 and bool inputs as floats: a copy converted on entry, after the
        // planned intermediates and live all through the run.
        auto at = static_cast<int64_t>(spec.inputs.size() - 1);
        spec.conversions.push_back({at, b.memory.arena_bytes});
        b.memory.arena_bytes += (num_elements(v.shape) * 4 + 63) / 64 * 64;
      }
    }
    for (const std::string& n : graph.outputs) {
      spec.outputs.push_back({n, whole(graph.value(n).shape, images), entry_type(graph.value(n).dtype)});
    }
    spec.workspace_bytes = b.memory.arena_bytes;
    if (images > 1) {
      // A workspace slot for each thread that runs images of its own (compiler/model_entry.h):
      // up to 64, and 256 MiB in all (at least one).
      spec.slot_bytes = (b.memory.arena_bytes + 63) / 64 * 64;
      spec.image_slots = std::min<int64_t>(
          {images, kMaxImageSlots, std::max<int64_t>(1, kImageSlotsBytes / std::max<int64_t>(spec.slot_bytes, 1))});
      spec.workspace_bytes = spec.image_slots * spec.slot_bytes;
    }
    // And a run's inputs, outputs and workspace together.
    std::vector<int64_t> run_tensors;
    for (const std::vector<std::string>* names : {&graph.inputs, &graph.outputs}) {
      for (const std::string& n : *names)
        run_tensors.push_back(tensor_bytes(graph.value(n).dtype, whole(graph.value(n).shape, images)));
    }
    check_run_budget("a run of the model would hold", spec.workspace_bytes, run_tensors, memory_budget);
    b.first_kernel = bk == 0 ? 0 : bb[bk - 1].first_kernel + bb[bk - 1].mb->builds().size();
    for (KernelBuild& k : b.mb->builds()) {
      k.info.launch = code.add_kernel(std::move(k.func), str("kernel ", k.info.function, " (nodes ", k.info.nodes.front(), ", ...)"));
    }
  }
  if (emulate_gpu) {
    cm.emulates = target.str();
    for (const BucketBuild& b : bb) cm.emulated_products += b.mb->emulated_products();
    cm.target = code.code_target();
  }
  // Kernels whose code is the same but for their names are generated once, and the model
  // calls the first of them (in any bucket).
  const std::vector<size_t>& code_of = code.share_code();
  std::vector<const ModelKernel*> all;
  for (BucketBuild& b : bb)
    for (KernelBuild& k : b.mb->builds()) all.push_back(&k.info);
  std::unordered_set<std::string_view> embedded;  // constants by their bytes: one copy each
  std::vector<EntrySpec> specs;
  for (size_t bk = 0; bk < bb.size(); ++bk) {
    BucketBuild& b = bb[bk];
    const Graph& graph = b.mb->graph();
    EntrySpec& spec = b.spec;
    std::map<std::string, int64_t> constant_index;
    auto buffer = [&](const std::string& v) -> EntryBuffer {
      auto in = std::find(graph.inputs.begin(), graph.inputs.end(), v);
      if (in != graph.inputs.end()) return {EntryBuffer::Kind::Input, in - graph.inputs.begin()};
      if (graph.is_constant(v)) {
        auto [it, fresh] = constant_index.emplace(v, static_cast<int64_t>(spec.constants.size()));
        if (fresh) {
          const std::vector<float>& f = graph.value(v).constant->f;
          spec.constants.push_back(&f);
          if (embedded.emplace(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float)).second)
            cm.constant_bytes += static_cast<int64_t>(f.size() * 4);
        }
        return {EntryBuffer::Kind::Constant, it->second};
      }
      auto o = std::find(graph.outputs.begin(), graph.outputs.end(), v);
      // Float outputs, and a float16 model's, are written by their kernels in the caller's buffer.
      if (o != graph.outputs.end() &&
          (graph.value(v).dtype == DType::F32 || is_storage16(graph.value(v).dtype))) {
        return {EntryBuffer::Kind::Output, o - graph.outputs.begin()};
      }
      return {EntryBuffer::Kind::Workspace, b.memory.buffers.at(v).offset};
    };
    std::vector<KernelBuild>& builds = b.mb->builds();
    for (size_t k = 0; k < builds.size(); ++k) {
      ModelKernel info = builds[k].info;
      const size_t shared = code_of[b.first_kernel + k];
      if (shared != b.first_kernel + k) info.same_code_as = all[shared]->function;
      EntryCall call{all[shared]->function, {}};
      for (const std::string& a : info.args) call.args.push_back(buffer(a));
      spec.calls.push_back(std::move(call));
      info.bucket = static_cast<int>(bk);
      cm.kernels.push_back(std::move(info));
    }
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const Value& v = graph.value(graph.outputs[k]);
      if (v.dtype != DType::F32 && v.constant) {
        // A constant of another type (a folded shape, a comparison of constants): its bytes.
        EntryCopy c{{EntryBuffer::Kind::Constant, 0}, static_cast<int64_t>(k), {}};
        for (float x : is_storage16(v.dtype) ? v.constant->f : std::vector<float>{}) {
          const uint16_t bits = storage16_bits(v.dtype, x);
          c.literal.push_back(static_cast<uint8_t>(bits & 0xFF));
          c.literal.push_back(static_cast<uint8_t>(bits >> 8));
        }
        for (int64_t x : v.constant->i) {
          if (v.dtype == DType::Bool) {
            c.literal.push_back(x != 0);
          } else {
            const auto* p = reinterpret_cast<const uint8_t*>(&x);
            c.literal.insert(c.literal.end(), p, p + sizeof x);
          }
        }
        if (!c.literal.empty()) spec.copies.push_back(std::move(c));
        continue;
      }
      EntryBuffer from = buffer(graph.outputs[k]);
      if (from.kind != EntryBuffer::Kind::Output || from.index != static_cast<int64_t>(k))
        spec.copies.push_back({from, static_cast<int64_t>(k), {}});
    }
    const int64_t images = spec.images;
    CompiledModel::Bucket desc{tensors_json(graph, graph.inputs, images),
                               tensors_json(graph, graph.outputs, images),
                               spec.workspace_bytes,
                               in_place_json(b.in_place),
                               images,
                               spec.padded};
    if (bk == 0) {
      cm.memory = b.memory;
      // One image at a time: a plan per workspace slot (the arena is set from the entry below).
      cm.memory.naive_bytes *= spec.image_slots;
      cm.in_place = b.in_place;
      cm.inputs = desc.inputs;
      cm.outputs = desc.outputs;
      cm.images = images;
      cm.image_slots = spec.image_slots;
    }
    if (bb.size() > 1) cm.buckets.push_back(std::move(desc));
    specs.push_back(std::move(spec));
  }
  code.write(specs, out, [&](const ModelCodegen::Written& w) {
    cm.device_modules = w.device_modules;
    cm.memory.arena_bytes = w.workspace_bytes;
    return cm.sidecar(model_name).dump(2) + "\n";
  });
  return cm;
}

}  // namespace tf::graph
