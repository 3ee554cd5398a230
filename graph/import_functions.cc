// ONNX operators defined as functions of others, imported as those others (OpDef::expand), so
// they compile to the kernels that exist for them:
//   Attention (opsets 23, 24, 25): scaled dot-product attention, as ONNX's reference computes it
//     (onnx/reference/ops/op_attention.py):
//       Q, K, V of rank 4 [B, heads, S, head_size], or of rank 3 [B, S, heads * head_size] split
//       into q_num_heads / kv_num_heads heads (Reshape, Transpose) and merged back after;
//       past_key / past_value concatenated before K and V (present_key / present_value: the
//       concatenations); grouped-query heads (q_num_heads a multiple of kv_num_heads) each read
//       K and V head h / (q_num_heads / kv_num_heads) (Expand);
//       scores = MatMul(Q, Transpose(K)) * scale (default 1 / sqrt(head_size)), softcap * Tanh(
//       scores / softcap) when softcap > 0, + the bias: attn_mask (bool: 0 where true, -inf
//       where false; float: added), padded with -inf to the keys when shorter, plus the causal
//       (is_causal: key j <= query i + past length) and sliding-window (opset 25) limits as a
//       constant of 0 and -inf; Softmax along the keys; a row whose bias is -inf everywhere
//       gives zeros (Where), not NaN; MatMul by V.
//     The chain is the one fuse-attention (graph/pass_fuse_attention.cc) recognises on cuda
//     targets.
//   Swish (opset 24): y = x * Sigmoid(alpha * x).
//   RotaryEmbedding (opset 23): X [B, heads, S, D] (or [B, S, heads * D] with num_heads) with its
//     first rotary_embedding_dim (R, default D) features of each head rotated by position: halves
//     (or, interleaved, even and odd features) x1, x2 become cos x1 - sin x2 and sin x1 + cos x2,
//     cos and sin [B, S, R / 2] gathered from the caches by position_ids when given; Slice,
//     Gather, Mul, Sub, Add, Concat and the layout operators.
//   CastLike (opset 15): Cast to the element type of input 1 (saturate as Cast's).
//   MeanVarianceNormalization (opset 9, 13): (x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9)
//     over `axes` (default [0, 2, 3]), as ONNX's function body writes it.
//   LpNormalization (opset 1): x / ReduceL1 or ReduceL2 of x along `axis` (p 1 or 2).
// Refused (UserError naming the node and the value): inputs that are not float32 (a bool or
// float32 mask), ranks or shapes that do not fit each other, heads that do not divide,
// nonpad_kv_seqlen (a per-sequence length known only at run time), the qk_matmul_output
// output, softmax_precision other than float32, only one of past_key and past_value.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/import_builder.h"
#include "graph/ops.h"

namespace tf::graph {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Q, K or V as [B, heads, S, head_size]: rank 4 as it is, rank 3 [B, S, heads * size] split.
struct Heads {
  std::string name;
  int64_t batch = 0, heads = 0, seq = 0, size = 0;
};

Heads as_heads(const Expansion& e, NodeBuilder& b, size_t k, const char* what, int64_t heads_attr) {
  const Value& v = e.input(k, what);
  const Shape& s = v.shape;
  if (s.size() == 4) return {v.name, s[0], s[1], s[2], s[3]};
  if (heads_attr < 1 || s[2] % heads_attr != 0)
    e.fail(str(what, " ", shape_str(s), ": its ", s[2], " features do not split into ", heads_attr, " heads"));
  const int64_t size = s[2] / heads_attr;
  return {b.transpose(b.reshape(v.name, {s[0], s[1], heads_attr, size}), {0, 2, 1, 3}), s[0], heads_attr, s[1], size};
}

bool expand_attention(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.since(23);
  const size_t rank = e.input(0, "Q").shape.size();
  if (rank != 3 && rank != 4) e.fail(str("Q ", shape_str(e.input(0, "Q").shape), " must have rank 3 or 4"));
  for (size_t k : {size_t{1}, size_t{2}}) {
    const Value& v = e.input(k, k == 1 ? "K" : "V");
    if (v.shape.size() != rank)
      e.fail(str(k == 1 ? "K " : "V ", shape_str(v.shape), " must have Q's rank ", rank));
  }
  const bool named_heads = n.has("q_num_heads") || n.has("kv_num_heads");
  if (rank == 3 && !(n.has("q_num_heads") && n.has("kv_num_heads")))
    e.fail("Q, K and V of rank 3 need the attributes q_num_heads and kv_num_heads");
  if (rank == 4 && named_heads && s.g.opset >= 25)
    e.fail("q_num_heads and kv_num_heads must not be given with Q, K and V of rank 4 (opset 25)");
  if (e.present(6)) e.fail("nonpad_kv_seqlen (a length per sequence, known at run time) is not supported");
  if (n.outputs.size() > 3 && !n.outputs[3].empty()) e.fail("output qk_matmul_output is not supported");
  if (n.outputs.empty() || n.outputs[0].empty()) e.fail("output Y is missing");
  if (n.has("softmax_precision") && n.get_int("softmax_precision", 1) != 1)
    e.fail(str("softmax_precision ", n.get_int("softmax_precision", 1), " is not supported (1: float32)"));
  const int64_t causal = n.get_int("is_causal", 0);
  if (causal != 0 && causal != 1) e.fail(str("is_causal ", causal, " must be 0 or 1"));
  int64_t window[2] = {-1, -1};
  const char* window_names[2] = {"left_window_size", "right_window_size"};
  for (int side = 0; side < 2; ++side) {
    if (!n.has(window_names[side])) continue;
    if (s.g.opset < 25) e.fail(str(window_names[side], " is an attribute from opset 25 (the model's is ", s.g.opset, ")"));
    window[side] = n.get_int(window_names[side], -1);
    if (window[side] < -1) e.fail(str(window_names[side], " ", window[side], " must be -1 (unbounded) or more"));
  }
  if (e.present(4) != e.present(5)) e.fail("past_key and past_value must be given together");

  NodeBuilder b(n, s.g, s.add);
  Heads q = as_heads(e, b, 0, "Q", n.get_int("q_num_heads", 0));
  Heads k = as_heads(e, b, 1, "K", n.get_int("kv_num_heads", 0));
  Heads v = as_heads(e, b, 2, "V", n.get_int("kv_num_heads", 0));
  if (k.batch != q.batch || v.batch != q.batch)
    e.fail(str("Q, K and V have batches ", q.batch, ", ", k.batch, " and ", v.batch, "; they must be one"));
  if (k.size != q.size) e.fail(str("K's head size ", k.size, " differs from Q's ", q.size));
  if (v.heads != k.heads || v.seq != k.seq)
    e.fail(str("V's ", v.heads, " heads of ", v.seq, " keys differ from K's ", k.heads, " of ", k.seq));
  if (rank == 4 && named_heads &&
      (n.get_int("q_num_heads", q.heads) != q.heads || n.get_int("kv_num_heads", k.heads) != k.heads))
    e.fail(str("q_num_heads / kv_num_heads ", n.get_int("q_num_heads", q.heads), " / ", n.get_int("kv_num_heads", k.heads),
               " differ from the inputs' ", q.heads, " / ", k.heads));
  if (k.heads < 1 || q.heads % k.heads != 0)
    e.fail(str("Q's ", q.heads, " heads are not a multiple of K's and V's ", k.heads));
  int64_t past = 0;
  if (e.present(4)) {
    const Shape &pk = e.input(4, "past_key").shape, &pv = e.input(5, "past_value").shape;
    if (pk.size() != 4 || pk[0] != q.batch || pk[1] != k.heads || pk[3] != k.size)
      e.fail(str("past_key ", shape_str(pk), " must be [", q.batch, ", ", k.heads, ", past, ", k.size, "]"));
    if (pv.size() != 4 || pv[0] != q.batch || pv[1] != k.heads || pv[2] != pk[2] || pv[3] != v.size)
      e.fail(str("past_value ", shape_str(pv), " must be [", q.batch, ", ", k.heads, ", ", pk[2], ", ", v.size, "]"));
    past = pk[2];
    k.name = b.concat({n.inputs[4], k.name}, 2);
    v.name = b.concat({n.inputs[5], v.name}, 2);
  }
  const int64_t total = past + k.seq;
  for (size_t o : {size_t{1}, size_t{2}}) {  // present_key, present_value
    if (o < n.outputs.size() && !n.outputs[o].empty()) b.node("Identity", {o == 1 ? k.name : v.name}, {}, n.outputs[o]);
  }
  // Grouped-query attention: head h of Q reads head h / group of K and V.
  if (const int64_t group = q.heads / k.heads; group > 1) {
    for (Heads* t : {&k, &v}) {
      t->name = b.reshape(b.node("Expand", {b.reshape(t->name, {q.batch, k.heads, 1, total, t->size}),
                                            b.ints({q.batch, k.heads, group, total, t->size})}),
                          {q.batch, q.heads, total, t->size});
    }
  }
  const Shape scores_shape{q.batch, q.heads, q.seq, total};
  check_tensor_size(str(s.file, ": ", n.where(), ": the scores"), scores_shape);
  float scale = 1.0f / std::sqrt(static_cast<float>(q.size));
  if (n.has("scale")) {
    scale = n.get_float("scale", scale);
    if (!std::isfinite(scale)) e.fail(str("scale ", scale, " is not finite"));
  }
  std::string scores = b.node("Mul", {b.node("MatMul", {q.name, b.transpose(k.name, {0, 1, 3, 2})}), b.scalar(scale)});
  if (const float cap = n.get_float("softcap", 0.0f); cap > 0) {
    if (!std::isfinite(cap)) e.fail(str("softcap ", cap, " is not finite"));
    scores = b.node("Mul", {b.node("Tanh", {b.node("Div", {scores, b.scalar(cap)})}), b.scalar(cap)});
  }
  // The bias: the mask's, then the causal and window limits (constants), summed.
  std::string bias;
  bool may_mask_rows = false;
  if (e.present(3)) {
    const Value& m = s.g.value(n.inputs[3]);
    if (m.dtype != DType::Bool && m.dtype != DType::F32)
      e.fail(str("attn_mask '", m.name, "' is ", dtype_name(m.dtype), "; it must be bool or float32"));
    if (!m.shape.empty() && m.shape.back() > total)
      e.fail(str("attn_mask ", shape_str(m.shape), " has more keys than the ", total, " there are"));
    Shape padded = m.shape;
    if (!padded.empty()) padded.back() = total;
    if (!broadcasts_to(padded, scores_shape))
      e.fail(str("attn_mask ", shape_str(m.shape), " does not broadcast to the scores ", shape_str(scores_shape)));
    bias = m.dtype == DType::Bool ? b.node("Where", {m.name, b.scalar(0.0f), b.scalar(kNegInf)}) : m.name;
    if (const int64_t short_by = m.shape.empty() ? 0 : total - m.shape.back(); short_by > 0) {  // the keys past the mask: -inf
      std::vector<int64_t> pads(2 * m.shape.size(), 0);
      pads.back() = short_by;
      bias = b.node("Pad", {bias, b.ints(pads), b.scalar(kNegInf)});
    }
    may_mask_rows = true;
  }
  if (causal || window[0] >= 0 || window[1] >= 0) {
    std::vector<float> limits(static_cast<size_t>(q.seq * total), 0.0f);
    for (int64_t i = 0; i < q.seq; ++i) {
      bool any = false;
      for (int64_t j = 0; j < total; ++j) {
        const int64_t p = past + i;  // the query's position among the keys
        const bool allowed = (!causal || j <= p) && (window[0] < 0 || p - j <= window[0]) && (window[1] < 0 || j - p <= window[1]);
        if (!allowed) limits[static_cast<size_t>(i * total + j)] = kNegInf;
        any = any || allowed;
      }
      may_mask_rows = may_mask_rows || !any;
    }
    const std::string c = b.floats({q.seq, total}, std::move(limits));
    bias = bias.empty() ? c : b.node("Add", {bias, c});
  }
  if (!bias.empty()) scores = b.node("Add", {scores, bias});
  if (!bias.empty() && s.g.value(bias).constant) {  // known now: a guard only where it acts
    const std::vector<int64_t> rows = fully_masked_rows(*s.g.value(bias).constant).i;
    may_mask_rows = std::find(rows.begin(), rows.end(), 1) != rows.end();
  }
  std::string probs = b.node("Softmax", {scores}, {{"axis", int64_t{-1}}});
  if (may_mask_rows) {  // a row whose bias is -inf throughout: zeros, as ONNX's reference
    const std::string row_max = b.reduce("ReduceMax", bias, {-1});
    probs = b.node("Where", {b.node("Equal", {row_max, b.scalar(kNegInf)}), b.scalar(0.0f), probs});
  }
  if (rank == 4) {
    b.node("MatMul", {probs, v.name}, {}, n.outputs[0]);
  } else {
    b.reshape(b.transpose(b.node("MatMul", {probs, v.name}), {0, 2, 1, 3}), {q.batch, q.seq, q.heads * v.size}, n.outputs[0]);
  }
  return true;
}

bool expand_swish(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.since(24);
  e.one_output();
  e.input(0, "X");
  const float alpha = n.get_float("alpha", 1.0f);
  NodeBuilder b(n, s.g, s.add);
  const std::string x = n.inputs[0];
  b.node("Mul", {x, b.node("Sigmoid", {alpha == 1.0f ? x : b.node("Mul", {x, b.scalar(alpha)})})}, {}, n.outputs[0]);
  return true;
}

bool expand_rotary_embedding(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.since(23);
  e.one_output();
  const Shape& x = e.input(0, "X").shape;
  if (x.size() != 3 && x.size() != 4) e.fail(str("X ", shape_str(x), " must have rank 3 or 4"));
  int64_t heads = x.size() == 4 ? x[1] : n.get_int("num_heads", 0);
  if (x.size() == 3 && (heads < 1 || x[2] % heads != 0))
    e.fail(str("X ", shape_str(x), " of rank 3 needs num_heads dividing its ", x[2], " features (num_heads ", heads, ")"));
  const int64_t B = x[0], S = x.size() == 4 ? x[2] : x[1], D = x.size() == 4 ? x[3] : x[2] / heads;
  int64_t R = n.get_int("rotary_embedding_dim", 0);
  if (R == 0) R = D;
  if (R < 2 || R > D || R % 2 != 0) e.fail(str("rotary_embedding_dim ", R, " must be even and in [2, ", D, "] (the head size)"));
  const int64_t interleaved = n.get_int("interleaved", 0);
  if (interleaved != 0 && interleaved != 1) e.fail(str("interleaved ", interleaved, " must be 0 or 1"));
  const Shape want_cache = e.present(3) ? Shape{-1, R / 2} : Shape{B, S, R / 2};
  NodeBuilder b(n, s.g, s.add);
  std::string cache[2];
  for (size_t k : {size_t{1}, size_t{2}}) {
    const char* what = k == 1 ? "cos_cache" : "sin_cache";
    const Value& c = e.input(k, what);
    if (e.present(3)) {  // [positions, R / 2], read at position_ids [B, S]
      const Value& p = s.g.value(n.inputs[3]);
      if (p.dtype != DType::I64 || p.shape != Shape{B, S})
        e.fail(str("position_ids '", p.name, "' is ", dtype_name(p.dtype), " ", shape_str(p.shape), "; it must be int64 [", B, ", ", S, "]"));
      if (c.shape.size() != 2 || c.shape[1] != R / 2)
        e.fail(str(what, " ", shape_str(c.shape), " must be [positions, ", R / 2, "] (with position_ids)"));
      cache[k - 1] = b.node("Gather", {c.name, p.name}, {{"axis", int64_t{0}}});
    } else {
      if (c.shape != want_cache) e.fail(str(what, " ", shape_str(c.shape), " must be ", shape_str(want_cache), " (without position_ids)"));
      cache[k - 1] = c.name;
    }
    cache[k - 1] = b.node("Unsqueeze", {cache[k - 1], b.ints({2})});  // [B, S, 1, R / 2]
  }
  // [B, S, heads, D]
  std::string v = x.size() == 4 ? b.transpose(n.inputs[0], {0, 2, 1, 3}) : b.reshape(n.inputs[0], {B, S, heads, D});
  const std::string rotate = R == D ? v : b.slice(v, 3, 0, R);
  const std::string x1 = interleaved ? b.slice(rotate, 3, 0, R, 2) : b.slice(rotate, 3, 0, R / 2);
  const std::string x2 = interleaved ? b.slice(rotate, 3, 1, R, 2) : b.slice(rotate, 3, R / 2, R);
  const std::string real = b.node("Sub", {b.node("Mul", {cache[0], x1}), b.node("Mul", {cache[1], x2})});
  const std::string imag = b.node("Add", {b.node("Mul", {cache[1], x1}), b.node("Mul", {cache[0], x2})});
  std::string rotated;
  if (interleaved) {  // [.., R / 2, 2] -> [.., R]: real and imag alternate
    rotated = b.reshape(b.concat({b.node("Unsqueeze", {real, b.ints({-1})}), b.node("Unsqueeze", {imag, b.ints({-1})})}, -1),
                        {B, S, heads, R});
  } else {
    rotated = b.concat({real, imag}, -1);
  }
  if (R < D) rotated = b.concat({rotated, b.slice(v, 3, R, D)}, -1);
  if (x.size() == 4) {
    b.transpose(rotated, {0, 2, 1, 3}, n.outputs[0]);
  } else {
    b.reshape(rotated, x, n.outputs[0]);
  }
  return true;
}

bool expand_cast_like(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.since(15);
  e.one_output();
  const Value& like = s.g.value(n.inputs[1]);
  int64_t to = 0;
  switch (like.dtype) {
    case DType::F32: to = 1; break;
    case DType::I64: to = 7; break;
    case DType::Bool: to = 9; break;
    case DType::F16: to = 10; break;
    case DType::BF16: to = 16; break;
    default: e.fail(str("target_type '", like.name, "' is ", dtype_name(like.dtype), ", which Cast does not make"));
  }
  std::map<std::string, Attr> attrs{{"to", to}};
  if (n.has("saturate")) attrs["saturate"] = n.get_int("saturate", 1);
  NodeBuilder b(n, s.g, s.add);
  b.node("Cast", {n.inputs[0]}, std::move(attrs), n.outputs[0]);
  return true;
}

bool expand_mean_variance_normalization(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.one_output();
  const Shape& x = e.input(0, "X").shape;
  std::vector<int64_t> axes = n.get_ints("axes", {0, 2, 3});
  for (int64_t& a : axes) a = e.axis(a, x, "X");
  NodeBuilder b(n, s.g, s.add);
  auto mean = [&](const std::string& v) { return b.reduce("ReduceMean", v, axes); };
  const std::string x_mean = mean(n.inputs[0]);
  const std::string variance = b.node("Sub", {mean(b.node("Mul", {n.inputs[0], n.inputs[0]})), b.node("Mul", {x_mean, x_mean})});
  const std::string std_dev = b.node("Add", {b.node("Sqrt", {variance}), b.scalar(1e-9f)});
  b.node("Div", {b.node("Sub", {n.inputs[0], x_mean}), std_dev}, {}, n.outputs[0]);
  return true;
}

bool expand_lp_normalization(const Node& n, ImportSink& s) {
  const Expansion e{n, s};
  e.one_output();
  const Shape& x = e.input(0, "input").shape;
  const int64_t axis = e.axis(n.get_int("axis", -1), x, "input");
  const int64_t p = n.get_int("p", 2);
  if (p != 1 && p != 2) e.fail(str("p ", p, " is not 1 or 2"));
  NodeBuilder b(n, s.g, s.add);
  const std::string norm = b.reduce(p == 1 ? "ReduceL1" : "ReduceL2", n.inputs[0], {axis});
  b.node("Div", {n.inputs[0], norm}, {}, n.outputs[0]);
  return true;
}

}  // namespace

void register_function_ops(std::vector<OpDef>& ops) {
  ops.push_back({"RotaryEmbedding", 3, 4, nullptr, nullptr});
  describe(ops.back(), OpKind::Injective, {"interleaved", "num_heads", "rotary_embedding_dim"});
  ops.back().expand = expand_rotary_embedding;
  ops.push_back({"CastLike", 2, 2, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"saturate"});
  ops.back().expand = expand_cast_like;
  ops.push_back({"MeanVarianceNormalization", 1, 1, nullptr, nullptr});
  describe(ops.back(), OpKind::Reduction, {"axes"});
  ops.back().expand = expand_mean_variance_normalization;
  ops.push_back({"LpNormalization", 1, 1, nullptr, nullptr});
  describe(ops.back(), OpKind::Reduction, {"axis", "p"});
  ops.back().expand = expand_lp_normalization;
  ops.push_back({"Attention", 3, 7, nullptr, nullptr});
  describe(ops.back(), OpKind::Opaque,
           {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap", "softmax_precision",
            "left_window_size", "right_window_size"});
  ops.back().expand = expand_attention;
  ops.push_back({"Swish", 1, 1, nullptr, nullptr});
  describe(ops.back(), OpKind::Elementwise, {"alpha"});
  ops.back().expand = expand_swish;
}

}  // namespace tf::graph
