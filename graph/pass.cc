#include "graph/pass.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <queue>

#include "base/error.h"
#include "graph/image_loop.h"

namespace tf::graph {

namespace {

std::function<bool(Graph&, const PassOptions&)> plain(bool (*pass)(Graph&)) {
  return [pass](Graph& g, const PassOptions&) { return pass(g); };
}

}  // namespace

const std::vector<PassInfo>& graph_passes() {
  static const std::vector<PassInfo> passes = {
      {"simplify-inference", 0,
       "drop Identity and inference-mode Dropout; BatchNormalization to a per-channel Mul and Add",
       plain(simplify_inference)},
      {"eliminate-common-subexpressions", 1,
       "merge nodes with the same operator, inputs and attributes",
       plain(eliminate_common_subexpressions)},
      {"fold-constants", 1,
       "evaluate nodes whose inputs are all constants (weights transposed, scales combined)",
       plain(fold_constants)},
      // Early: it reads what the import recorded of each QuantizeLinear/DequantizeLinear
      // (Graph::qdq) by the names the values had then; after fold-constants, which makes the
      // dequantized weights constants.
      {"fold-qdq", 1,
       "a QDQ model's MatMul/Gemm of quantized activations and int8 weights as one QMatMul, an "
       "int8 kernel that "
       "quantizes its input on entry (CPU targets; its convolutions become QConvNCHWc, depthwise "
       "ones QDepthwiseNCHWc, in "
       "transform-conv-layout)",
       [](Graph& g, const PassOptions& o) { return fold_qdq_matmuls(g, o.channel_block); }},
      {"recognize-composites", 2,
       "replace the decompositions exporters write for LayerNorm, GELU and softmax by one operator",
       plain(recognize_composites)},
      {"einsum-to-matmul", 2,
       "a two-operand Einsum that is a (batched) matrix product as Transpose, Reshape and MatMul, "
       "so the matmul templates run it",
       plain(einsum_to_matmul)},
      {"combine-parallel-matmuls", 2,
       "MatMuls of one input and constant weights (attention's Q, K, V) as one wide MatMul (and "
       "bias Add) and a Split",
       plain(combine_parallel_matmuls)},
      // After recognize-composites (the Softmax) and einsum-to-matmul (MaxViT's products).
      // -O3 only: on an H200 the fused kernel made BERT-base slower than the chain it replaces
      // (session 87: fp16 2.08 ms against 1.06 unfused, fp32 1.21 of 2.66 ms of kernels).
      {"fuse-attention", 3,
       "MatMul(Q, K^T), a scaling, a mask Add, Softmax and MatMul(., V) as one FusedAttention "
       "kernel that keeps a block's scores in shared memory and reads Q, K and V through the "
       "layout operators that made them (cuda targets; compiler/attention.h; -O3 only: slower "
       "than the unfused chain on an H200)",
       [](Graph& g, const PassOptions& o) { return o.tensor_cores && fuse_attention(g); }},
      {"lower-scatter-nd", 0,
       "ScatterND (in-place slice assignment) and ScatterElements with constant indices as a "
       "Gather of their updates and a Where over their data, which compiled kernels run",
       plain(lower_scatter_nd)},
      {"lower-conv-transpose", 2,
       "ConvTranspose with constant weights as a Conv over the input with zeros inserted (Pad, "
       "Reshape), so the conv templates run it",
       plain(lower_conv_transpose)},
      // Before pad-convs: a trimmed kernel's pads may differ side to side.
      {"trim-conv-taps", 2,
       "a Conv's kernel taps that read only padding at every output position (atrous rates past "
       "the feature map's size: DeepLabv3's ASPP) are dropped from its weights and pads; a 3x3 "
       "kernel whose outer taps all miss becomes 1x1",
       plain(trim_conv_taps)},
      {"pad-convs", 2,
       "a Conv whose pads differ (1x7, 7x1, 1-D, SAME) pads its input explicitly by the part "
       "that differs, so its schedule template runs it",
       plain(pad_convs)},
      {"fold-scale-into-conv", 2,
       "fold a per-channel Mul and Add after a Conv into its weights and bias",
       plain(fold_scale_into_conv)},
      // After fold-scale-into-conv (a BatchNorm's scale folds into the one Conv) and before
      // pad-channels and transform-conv-layout (which convert the rectangles' Convs).
      {"split-conv-regions", 2,
       "a Conv whose taps read padding at many outputs (atrous rates near the feature map's size: "
       "DeepLabv3's ASPP) computes its output as rectangles, each a Conv of the taps that read the "
       "image there over the pixels they read, concatenated back",
       plain(split_conv_regions)},
      {"pad-channels", 2,
       "a Conv whose filters no channel block divides computes zero filters up to the next block "
       "(at most 1/8 more), and the activations and depthwise and dense convolutions reading it "
       "read the padded channels, so the blocked layout runs them all (CPU targets)",
       [](Graph& g, const PassOptions& o) {
         return pad_channels(g, o.channel_block, o.opt_level >= 1 && !o.disabled.count("fold-qdq"));
       }},
      {"transform-conv-layout", 2,
       "convolutions in blocked layouts (NCHW<b>c, b = the target's vector width): weights "
       "converted now, activations only where an operator needs NCHW; elementwise ops follow",
       [](Graph& g, const PassOptions& o) {
         return transform_conv_layout(g, o.channel_block, o.opt_level >= 1 && !o.disabled.count("fold-qdq"));
       }},
      // After combine-parallel-matmuls (attention's Q, K and V weights convert as one) and
      // transform-conv-layout (the convolutions it converts are ConvNCHWc).
      {"auto-mixed-precision", 0,
       "--precision bf16 (fp16): MatMul/Gemm with constant weights and group-1 blocked "
       "convolutions as bfloat16 "
       "(float16) kernels (MatMulBF16, ConvNCHWcBF16, MatMulFP16, ConvNCHWcFP16; float32 sums); "
       "everything else stays float32 (docs/precision.md); on cuda targets (tf32, fp16, bf16) "
       "MatMul and Gemm run on "
       "tensor cores",
       [](Graph& g, const PassOptions& o) {
         return convert_precision(g, o.precision, o.tensor_cores);
       }},
      {"dead-code-elimination", 0, "drop nodes and constants no output depends on",
       plain(dead_code_elimination)},
      // After dead-code-elimination, as int8-edges: the readers it counts are the kernels'.
      {"sixteen-bit-edges", 1,
       "at --precision fp16 (bf16) on cuda targets, a value that tensor-core products read (as "
       "their data, which they round to that type anyway; directly or through a view) is stored "
       "in 16 bits by a storage Cast its producer's kernel fuses, and read as such (dtype=float16 "
       "workloads): half its bytes; its other readers, elementwise nodes, read it through a "
       "widening Cast in their kernels (rounded, as PyTorch's .half() computes)",
       [](Graph& g, const PassOptions& o) {
         return sixteen_bit_edges(g, o.precision, o.tensor_cores);
       }},
      // It only marks the graph: plan_fusion, after every pass, takes the views in (the
      // storage Casts sixteen-bit-edges adds among them).
      {"read-views-in-products", 2,
       "on cuda targets, a MatMul or Gemm reads an operand that only layout operators (Slice, "
       "Reshape, Transpose, Squeeze, Unsqueeze, Flatten), Casts and scalings by a constant make "
       "of another value through them, in its own kernel, instead of a kernel copying it "
       "(attention's Q, K and V sliced out of one wide product and its heads merged; "
       "graph/fusion.h)",
       [](Graph& g, const PassOptions& o) {
         g.products_read_views = o.tensor_cores;
         return o.tensor_cores;
       }},
      // After dead-code-elimination: the QuantizeLinear/DequantizeLinear arithmetic fold-qdq
      // left unread is gone, so the readers it counts are the kernels'.
      {"int8-edges", 1,
       "a value only int8 kernels read (with one input scale and zero point) is quantized once, in "
       "its "
       "producer's epilogue, and passed to them as uint8 (CPU targets)",
       [](Graph& g, const PassOptions& o) { return int8_edges(g, o.channel_block); }},
      // Last: it judges the graph the kernels will be made of.
      {"one-image-at-a-time", 2,
       "a batch whose images the model keeps apart runs as the graph at one image, once per "
       "image, where that pays: intermediates past the cache, work enough per image, few weights "
       "read at every image (CPU targets; graph/image_loop.h)",
       [](Graph& g, const PassOptions& o) {
         if (o.channel_block <= 0) return false;
         // image_loop copies the graph; the weights' data stay out of the copy (inference reads
         // shapes, and constants of a few elements), so a model's weights are never held twice.
         constexpr size_t kKeptElements = 4096;
         std::map<std::string, std::vector<float>> weights;
         for (auto& [name, v] : g.values) {
           if (v.constant && v.constant->f.size() > kKeptElements)
             weights[name] = std::move(v.constant->f);
         }
         std::optional<ImageLoop> loop = image_loop(g);
         for (auto& [name, f] : weights) g.value(name).constant->f = std::move(f);
         g.one_image_at_a_time = loop && pays_per_image(*loop);
         return g.one_image_at_a_time;
       }},
  };
  return passes;
}

ValueUses::ValueUses(const Graph& g) {
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    for (const std::string& o : n.outputs) {
      if (!o.empty()) producer[o] = k;
    }
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!n.inputs[i].empty()) readers[n.inputs[i]].push_back({k, i});
    }
  }
}

void insert_after(Graph& g, std::map<size_t, std::vector<Node>> after) {
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    nodes.push_back(std::move(g.nodes[k]));
    if (auto it = after.find(k); it != after.end()) {
      for (Node& n : it->second) nodes.push_back(std::move(n));
    }
  }
  g.nodes = std::move(nodes);
}

void check_pass_options(const PassOptions& o) {
  if (o.opt_level < 0 || o.opt_level > 3)
    throw UserError(str("--opt-level ", o.opt_level, " is not one of 0, 1, 2, 3"));
  auto known = [](const std::string& n) {
    for (const PassInfo& p : graph_passes()) {
      if (n == p.name) return true;
    }
    return false;
  };
  auto list = [] {
    std::string s;
    for (const PassInfo& p : graph_passes()) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
  };
  for (const std::string& n : o.disabled) {
    if (!known(n))
      throw UserError(str("--disable-pass ", n, ": no such pass (passes: ", list(), ")"));
  }
  for (const std::string& n : o.dump) {
    if (n != "all" && !known(n))
      throw UserError(str("--dump-pass ", n, ": no such pass (passes: ", list(), ", or all)"));
  }
}

std::vector<PassReport> run_passes(Graph& g, const PassOptions& o) {
  check_pass_options(o);
  std::vector<PassReport> reports;
  for (const PassInfo& p : graph_passes()) {
    PassReport r;
    r.name = p.name;
    if (p.opt_level <= o.opt_level && !o.disabled.count(p.name)) {
      auto start = std::chrono::steady_clock::now();
      r.ran = true;
      r.changed = p.run(g, o);
      r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                 .count();
      try {
        verify(g);
      } catch (const UserError& e) {
        TF_CHECK(false, "graph pass ", p.name, " broke the graph: ", e.what());
      }
      if (o.dump_sink && (o.dump.count("all") || o.dump.count(p.name))) o.dump_sink(p.name, g);
    }
    r.nodes_after = g.nodes.size();
    reports.push_back(r);
  }
  return reports;
}

std::map<std::string, int> use_counts(const Graph& g) {
  std::map<std::string, int> uses;
  for (const Node& n : g.nodes) {
    for (const std::string& in : n.inputs) {
      if (!in.empty()) ++uses[in];
    }
  }
  for (const std::string& out : g.outputs) ++uses[out];
  return uses;
}

std::map<std::string, size_t> last_readers(const Graph& g) {
  std::map<std::string, size_t> last;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const std::string& in : g.nodes[k].inputs) {
      if (!in.empty()) last[in] = k;
    }
  }
  return last;
}

void replace_uses(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes) {
    for (std::string& in : n.inputs) {
      if (in == from) in = to;
    }
  }
  for (std::string& out : g.outputs) {
    if (out == from) out = to;
  }
}

// By value: callers pass a node's own names, which the renaming below rewrites.
bool bypass(Graph& g, std::string out, std::string replacement) {
  if (!g.is_output(out)) {
    replace_uses(g, out, replacement);
    return true;
  }
  if (g.is_constant(replacement) || g.is_input(replacement) || g.is_output(replacement))
    return false;
  for (Node& n : g.nodes) {
    for (std::string& in : n.inputs) {
      if (in == replacement) in = out;
    }
    for (std::string& o : n.outputs) {
      if (o == replacement) o = out;
    }
  }
  Value v = g.value(replacement);
  v.name = out;
  g.values.erase(replacement);
  g.values[out] = std::move(v);
  return true;
}

void topological_sort(Graph& g) {
  // Kahn's algorithm, always taking the ready node that came first (stable, no recursion).
  std::map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const std::string& o : g.nodes[k].outputs) producer[o] = k;
  }
  std::vector<int> waiting(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> readers(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (const std::string& in : g.nodes[k].inputs) {
      if (auto it = producer.find(in); it != producer.end()) {
        ++waiting[k];
        readers[it->second].push_back(k);
      }
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (waiting[k] == 0) ready.push(k);
  }
  std::vector<Node> order;
  while (!ready.empty()) {
    size_t k = ready.top();
    ready.pop();
    order.push_back(std::move(g.nodes[k]));
    for (size_t r : readers[k]) {
      if (--waiting[r] == 0) ready.push(r);
    }
  }
  TF_CHECK(order.size() == g.nodes.size(), "graph: the nodes form a cycle");
  g.nodes = std::move(order);
}

bool expand_nodes(Graph& g, const std::function<bool(Graph&, const Node&, std::vector<Node>&)>& expand) {
  bool changed = false;
  for (size_t k = 0; k < g.nodes.size();) {
    std::vector<Node> parts;
    if (!expand(g, g.nodes[k], parts)) {
      ++k;
      continue;
    }
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(k));
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(k), parts.begin(), parts.end());
    k += parts.size();
    changed = true;
  }
  return changed;
}

void drop_unused_values(Graph& g) {
  std::set<std::string> live(g.inputs.begin(), g.inputs.end());
  live.insert(g.outputs.begin(), g.outputs.end());
  for (const Node& n : g.nodes) {
    live.insert(n.inputs.begin(), n.inputs.end());
    live.insert(n.outputs.begin(), n.outputs.end());
  }
  for (auto it = g.values.begin(); it != g.values.end();) {
    it = live.count(it->first) ? std::next(it) : g.values.erase(it);
  }
}

}  // namespace tf::graph
