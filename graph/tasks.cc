#include "graph/tasks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "base/error.h"
#include "compiler/operator_table.h"
#include "compiler/operators.h"
#include "compiler/winograd.h"
#include "compiler/workload.h"
#include "graph/fusion.h"
#include "graph/image_loop.h"
#include "graph/layout.h"
#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

bool all_equal(const std::vector<int64_t>& v) {
  for (int64_t x : v) {
    if (x != v[0]) return false;
  }
  return true;
}

// ",precision=X" for a product marked for tensor cores (kTensorCorePrecision), else "".
std::string precision_key(const Node& n) {
  const Precision p = tensor_core_precision(n);
  return p == Precision::Float32 ? "" : std::string(",precision=") + precision_name(p);
}

// The same for a MatMul whose operands may be 16-bit values (sixteen-bit-edges): both, the
// second, or neither (its marked precision).
std::string operand_types_key(const Graph& g, const Node& n) {
  const std::string key = sixteen_bit_types_key(g.value(n.inputs[0]).dtype, g.value(n.inputs[1]).dtype);
  return key.empty() ? precision_key(n) : key;
}

// How a MatMul's or Gemm's matrix product reads its weights: given as [N][K] (a TF32
// product's constant weights, tf32_weights_along_k), packed once when the model is compiled
// (other constant weights: tuned as the model runs them), or as computed.
const char* weights_key(const Graph& g, const Node& n) {
  if (tf32_weights_along_k(g, n)) return ",trans_b=1";
  return g.is_constant(n.inputs[1]) ? ",const_b=1" : "";
}

}  // namespace

std::string sixteen_bit_types_key(DType data, DType weights) {
  if (!is_storage16(weights)) return "";
  return str(is_storage16(data) ? ",dtype=" : ",weight_dtype=", dtype_name(weights));
}

bool tf32_weights_along_k(const Graph& g, const Node& n) {
  if ((n.op != "MatMul" && n.op != "Gemm") || n.inputs.size() < 2 ||
      tensor_core_precision(n) != Precision::TF32)
    return false;
  const Value& w = g.value(n.inputs[1]);
  return w.constant && w.dtype == DType::F32 && w.shape.size() == 2;
}

bool is_depthwise_conv(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  const Shape& w = g.value(n.inputs[1]).shape;
  const int64_t group = n.get_int("group", 1);
  return group != 1 && group == x[1] && w[0] == x[1] && w[1] == 1;
}

AnchorWorkload conv_workload(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  const Shape& w = g.value(n.inputs[1]).shape;
  std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads = n.get_ints("pads", {0, 0, 0, 0}),
                       strides = n.get_ints("strides", {1, 1});
  std::vector<int64_t> dil = n.get_ints("dilations", {1, 1});
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    return {"", "auto_pad " + auto_pad + " (pad explicitly)"};
  if (auto_pad == "VALID") pads = {0, 0, 0, 0};
  if (!all_equal(pads)) return {"", "asymmetric padding " + shape_str(pads)};
  if (!all_equal(strides) || !all_equal(dil))
    return {"", "different strides or dilations along H and W"};
  int64_t group = n.get_int("group", 1);
  bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  std::string tail =
      str(",R=", w[2], ",S=", w[3], ",stride=", strides[0], ",pad=", pads[0], ",dilation=", dil[0]);
  if (group == 1)
    return {str("conv2d_nchw(N=", x[0], ",C=", x[1], ",H=", x[2], ",W=", x[3], ",K=", w[0], tail, precision_key(n)),
            "", bias};
  if (is_depthwise_conv(g, n)) {
    return {str("depthwise_conv2d_nchw(N=", x[0], ",C=", x[1], ",H=", x[2], ",W=", x[3], tail), "",
            bias};
  }
  // Grouped (ResNeXt, RegNet): computed in float32 (no tensor-core precision).
  if (tensor_core_precision(n) != Precision::Float32)
    return {"", str("grouped convolution (group=", group, ") at a tensor-core precision")};
  return {str("conv2d_nchw(N=", x[0], ",C=", x[1], ",H=", x[2], ",W=", x[3], ",K=", w[0], tail,
              ",group=", group),
          "", bias};
}


AnchorWorkload matmul_workload(const Graph& g, const Node& n) {
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  if (a.size() < 2 || b.size() < 2) return {"", "a 1-D operand (a matrix-vector product)"};
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  if (b.size() == 2) {
    // [..., M, K] x [K, N]: the leading dimensions are more rows.
    for (size_t d = 0; d + 2 < a.size(); ++d) M *= a[d];
    return {str("matmul(M=", M, ",N=", N, ",K=", K, weights_key(g, n), operand_types_key(g, n)),
            ""};
  }
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  if (ab != bb)
    return {"", "batch dimensions " + shape_str(ab) + " and " + shape_str(bb) + " broadcast"};
  return {str("batch_matmul(B=", num_elements(ab), ",M=", M, ",N=", N, ",K=", K, operand_types_key(g, n)), ""};
}

AnchorWorkload gemm_workload(const Graph& g, const Node& n) {
  if (n.get_int("transA", 0)) return {"", "transA=1"};
  if (n.get_float("alpha", 1) != 1.0f) return {"", "alpha != 1"};
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  int64_t N = n.get_int("transB", 0) ? b[0] : b[1];
  if (n.get_int("transB", 0) && !g.is_constant(n.inputs[1]))
    return {"", "transB=1 of computed weights"};
  bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (bias && (n.get_float("beta", 1) != 1.0f || num_elements(g.value(n.inputs[2]).shape) != N)) {
    return {"", "a C that is not a bias of N values"};
  }
  // transB: the constant weights are transposed at compile time (and packed), or kept [N][K]
  // for a TF32 product (weights_key).
  return {str("matmul(M=", a[0], ",N=", N, ",K=", a[1], weights_key(g, n), precision_key(n)), "",
          bias};
}

// Its operator checked everything a workload needs (graph/layout.h).
AnchorWorkload conv_nchwc_workload(const Graph& g, const Node& n) {
  return {conv_nchwc_spec(n, g.value(n.inputs[0]).shape, g.value(n.inputs[1]).shape), "",
          n.inputs.size() > 2 && !n.inputs[2].empty()};
}

std::string winograd_alternative(const Graph& g, const Node& n, const AnchorWorkload& aw) {
  if (n.op != "ConvNCHWc" || aw.spec.empty() || n.inputs.size() < 2 || !g.is_constant(n.inputs[1])) return "";
  Workload w = parse_workload(aw.spec + ")");
  if (w.op != "conv2d_nchwc" || w.get("R") != 3 || w.get("S") != 3 || w.get("stride") != 1 || w.get("group") != 1)
    return "";
  // Fewer than 8 input channels: the transforms (per tile, a^2 values of each input channel
  // in and of each output channel out) cost about what the GEMMs save. Alone on Zen 5, 1
  // thread, Winograd / direct: 3 channels (an RGB stem, channel blocks of 3) 0.44x, 4 1.11x,
  // 8 1.68x, 16 2.1x.
  if (w.get("C") < 8) return "";
  // F(4x4, 3x3): a quarter of the direct multiplications on whole tiles. Its transformed
  // weights are 4x the direct ones (36 values per filter against 9) and are read once per
  // call: where few tiles share them, streaming them costs more than the multiplications
  // saved. ResNet-18 on the 2-core AVX-512 VM, in the model (all 152 MB of weights streamed
  // from memory): the 512-channel 7x7 layers (4 tiles, 37.7 MB each) took 2.2 ms against
  // 0.73 timed alone with warm caches and 0.77 direct; 256-channel 14x14 (16 tiles, 9.4 MB)
  // 1.0 against 0.94 direct; 28x28 and 56x56 (49 and 196 tiles) gained 1.6-2.7x.
  // So: at least 32 tiles (16 multiply-adds per weight byte), or weights of 2 MB or less.
  // Where F(4x4) fails that, F(2x2, 3x3) may pass it: 16 values per filter (1.8x the direct
  // weights), 2.25x fewer multiplications, four times the tiles (256-channel 14x14: 49 tiles
  // of 2x2, 4.2 MB).
  // A dilated layer's tiles are those of its residue classes (compiler/winograd.h), each class
  // as many as the largest: where they cover much more than the output, the tiles past it
  // multiply padding. Dilated, F(4x4) only where at least 80% of its tiles' outputs exist and
  // F(2x2) where 60% do: on Zen 5, 1 thread, DeepLab's 512-channel rate-4 layer at 40x40 (10
  // rows a class: 69% in tiles of 4, all in tiles of 2) ran 15.5 ms in F(4x4), 15.0 in F(2x2)
  // (whose rounding error is 100x smaller) and 32 direct; its rate-2 layers 2.6-3.3x direct.
  const int64_t d = w.get("dilation");
  for (const int64_t m : {4, 2}) {
    const int64_t a = m + 2;
    const WinogradTiling tl = winograd_tiling(w.get("H"), w.get("W"), w.get("pad"), d, m);
    if (d > 1 && tl.useful() < (m == 4 ? 0.8 : 0.6)) continue;
    int64_t tiles = w.get("N") * tl.nh * tl.nw;
    int64_t weight_bytes = a * a * w.get("K") * w.get("C") * 4;
    if (tiles < 32 && weight_bytes > (int64_t{2} << 20)) continue;
    return str("conv2d_winograd_nchwc(N=", w.get("N"), ",C=", w.get("C"), ",H=", w.get("H"), ",W=", w.get("W"),
               ",K=", w.get("K"), ",pad=", w.get("pad"), ",ic_block=", w.get("ic_block"), ",oc_block=", w.get("oc_block"),
               ",tile=", m, d > 1 ? str(",dilation=", d) : std::string());
  }
  return "";
}

AnchorWorkload anchor_workload(const Graph& g, const Node& n) {
  const OpDef* def = find_op(n.op);
  if (!def || !def->workload) return {"", n.op + " is not an anchor operator"};
  return def->workload(g, n);
}

std::string AnchorEpilogue::name() const {
  return !bias.empty() ? (relu ? "bias_relu" : "bias") : (relu ? "relu" : "none");
}

Readers::Readers(const Graph& g) : uses(use_counts(g)) {
  for (const Node& n : g.nodes) {
    for (const std::string& in : n.inputs) reader[in] = &n;
  }
}

AnchorEpilogue anchor_epilogue(const Graph& g, const Node& n, const AnchorWorkload& aw,
                               const Readers& readers) {
  // The reader of `v` when it is the only use, `v` is not returned and the reader is `op`.
  auto sole_reader = [&](const std::string& v, const char* op) -> const Node* {
    auto u = readers.uses.find(v);
    auto r = readers.reader.find(v);
    if (u == readers.uses.end() || u->second != 1 || g.is_output(v) || r == readers.reader.end() ||
        r->second->op != op) {
      return nullptr;
    }
    return r->second;
  };
  AnchorEpilogue e;
  e.nodes.push_back(&n);
  e.output = n.outputs[0];
  if (aw.bias) e.bias = n.inputs[2];
  if (n.op == "MatMul" || n.op == "QMatMul" || n.op == "MatMulBF16" || n.op == "MatMulFP16" || n.op == kTensorCoreMatMul) {
    if (const Node* add = sole_reader(e.output, "Add")) {
      const std::string& other = add->inputs[0] == e.output ? add->inputs[1] : add->inputs[0];
      const Shape& ys = g.value(e.output).shape;
      const Shape& os = g.value(other).shape;
      if (g.is_constant(other) && g.value(other).dtype == DType::F32 && !os.empty() &&
          num_elements(os) == ys.back() && os.back() == ys.back() &&
          g.value(add->outputs[0]).shape == ys) {
        e.bias = other;
        e.nodes.push_back(add);
        e.output = add->outputs[0];
      }
    }
  }
  if (const Node* r = sole_reader(e.output, "Relu")) {
    e.relu = true;
    e.nodes.push_back(r);
    e.output = r->outputs[0];
  }
  return e;
}

TaskList extract_tasks(const Graph& g) {
  TaskList out;
  Readers readers(g);
  std::map<std::string, size_t> index;
  for (const Node& n : g.nodes) {
    if (op_kind(n.op) != OpKind::Anchor) continue;
    AnchorWorkload m = anchor_workload(g, n);
    if (m.spec.empty()) {
      out.untunable.push_back({n.name, n.op, m.reason});
      continue;
    }
    std::string epilogue = anchor_epilogue(g, n, m, readers).name();
    auto add = [&](const std::string& open_spec, int alternative_to) {
      Workload w = parse_workload(open_spec + ",epilogue=" + epilogue + ")");
      std::string spec = w.canonical();
      auto [it, fresh] = index.emplace(spec, out.tasks.size());
      if (fresh) out.tasks.push_back({spec, {}, build_op(w).flops, alternative_to});
      out.tasks[it->second].nodes.push_back(n.name);
      return static_cast<int>(it->second);
    };
    int direct = add(m.spec, -1);
    if (std::string alt = winograd_alternative(g, n, m); !alt.empty()) add(alt, direct);
  }
  return out;
}

TaskList extract_tasks(const Graph& g, const Target& t) {
  std::optional<ImageLoop> loop = image_loop_for(g, t);
  return extract_tasks(loop ? loop->per_image : g);
}

double tasks_time(const TaskList& list, const std::vector<double>& weights, const std::vector<double>& times,
                  bool alternatives) {
  const size_t n = list.tasks.size();
  TF_CHECK(weights.size() == n && times.size() == n, "tasks_time: ", weights.size(), " weights and ", times.size(),
           " times for ", n, " tasks");
  auto known = [](double t) { return std::isfinite(t) && t > 0; };
  std::vector<double> fastest(n, std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < n; ++i) {
    if (known(times[i])) fastest[i] = times[i];
  }
  for (size_t i = 0; i < n; ++i) {
    const int to = list.tasks[i].alternative_to;
    if (to < 0) continue;
    double& t = fastest[static_cast<size_t>(to)];
    if (!alternatives) {
      t = known(times[i]) ? times[i] : std::numeric_limits<double>::infinity();
    } else if (known(times[i])) {
      t = std::min(t, times[i]);
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (list.tasks[i].alternative_to >= 0) continue;
    if (!std::isfinite(fastest[i])) return std::numeric_limits<double>::infinity();
    total += weights[i] * fastest[i];
  }
  return total;
}

TaskList merge_bucket_tasks(const std::vector<TaskList>& buckets) {
  if (buckets.size() == 1) return buckets[0];
  TaskList out;
  std::map<std::string, size_t> at;  // workload -> its task in `out`
  for (size_t b = 0; b < buckets.size(); ++b) {
    const TaskList& list = buckets[b];
    const std::string prefix = str("b", b, "/");
    std::vector<size_t> index(list.tasks.size());
    std::vector<bool> fresh(list.tasks.size());
    for (size_t k = 0; k < list.tasks.size(); ++k) {
      const Task& t = list.tasks[k];
      auto [it, added] = at.emplace(t.workload, out.tasks.size());
      if (added) {
        out.tasks.push_back(Task{t.workload, {}, t.flops, -1});
      }
      index[k] = it->second;
      fresh[k] = added;
      for (const std::string& n : t.nodes) out.tasks[it->second].nodes.push_back(prefix + n);
    }
    for (size_t k = 0; k < list.tasks.size(); ++k) {
      const int alt = list.tasks[k].alternative_to;
      if (fresh[k] && alt >= 0) out.tasks[index[k]].alternative_to = static_cast<int>(index[static_cast<size_t>(alt)]);
    }
    for (const Untunable& u : list.untunable) out.untunable.push_back({prefix + u.node, u.op, u.reason});
  }
  return out;
}

}  // namespace tf::graph
