// transform-conv-layout (TVM's AlterOpLayout for x86 convolutions): every Conv a workload
// expresses, with constant weights, becomes a ConvNCHWc (graph/layout.h) on channel blocks of
// the target's vector width b:
//   x -> LayoutTransform(NCHW -> NCHW<ib>c) -> ConvNCHWc(w blocked now) -> LayoutTransform(back)
// The output is in blocks of b, or of b/2 when b does not divide the filters but b/2 (at least
// 8) does (an AVX-512 target's 24-channel MobileNet layers: blocks of 8). The input keeps the
// block it already has when that divides its channels, else takes the output's rule, else is
// all its channels in one block (a 3-channel image becomes NHWC-like). Convolutions whose
// filters no block divides, and depthwise ones whose channels none divides, stay NCHW (unless
// pad-channels, which runs first, padded their filters to whole blocks). Then
// elementwise operators whose computed inputs all come back from the same blocked layout
// (Relu, Clip, a residual Add, ...) run in that layout too, with scalar and per-channel
// constants converted; and a conversion to a layout straight after the conversion from it
// cancels. MaxPool and AveragePool of a blocked value pool its blocks; a Concat along the
// channels concatenates blocks when the block divides every input's channels, one along the
// height or width concatenates them there; a Pad or a Slice of height and width pads or
// slices blocks; global pooling becomes a ReduceMean or ReduceMax of the blocks'
// height and width; elementwise operators take per-channel computed operands ([N, C, 1, 1])
// too. What is left converts activations only where an operator needs NCHW (reshapes, the
// model's outputs). Output values keep their names and NCHW shapes.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "graph/layout.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// Elementwise operators that compute each output element from the same position of their
// inputs (scalars and broadcast constants aside): indifferent to the layout.
const std::set<std::string>& layout_free_ops() {
  static const std::set<std::string> ops = {
      "Relu",      "Clip",       "Sigmoid",   "Tanh", "Exp",  "Neg",      "Abs",
      "Sqrt",      "Erf",        "LeakyRelu", "Elu",  "Selu", "Softplus", "HardSigmoid",
      "HardSwish", "Reciprocal", "Add",       "Sub",  "Mul",  "Div",      "Max",
      "Min",       "Sum",        "Mean",      "PRelu", "Celu", "ThresholdedRelu", "Softsign", "Sin", "Cos",
      // A QDQ model's QuantizeLinear is Div, Round, Add, Clip (graph/import_quantize.h): without
      // Round here each one left the blocked layout and came back (two transforms a layer).
      "Round",     "Floor",      "Ceil",      "Sign", "Log",  "Gelu",     "Pow"};
  return ops;
}

// Weights [C][g][taps] (a depthwise Conv's, g = 1, or one of groups of g channels in and out)
// as [C/b][g][taps][b]: each block's filters one lane each (depthwise_conv2d_nchwc).
std::vector<float> lane_weights(const std::vector<float>& wf, int64_t C, int64_t g, int64_t taps, int64_t b) {
  std::vector<float> wb(wf.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < g; ++i)
      for (int64_t p = 0; p < taps; ++p) wb[(((c / b) * g + i) * taps + p) * b + c % b] = wf[(c * g + i) * taps + p];
  return wb;
}

class LayoutRewriter {
 public:
  LayoutRewriter(Graph& g, int64_t block, bool int8) : g_(g), block_(block), int8_(int8) {
    for (const Node& n : g_.nodes) node_names_.insert(n.name);
  }

  bool run() {
    std::vector<Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    bool changed = false;
    for (Node& n : nodes) {
      if (n.op == "Conv" && convert_conv(n)) {
        changed = true;
      } else if (layout_free_ops().count(n.op) && follow(n)) {
        changed = true;
      } else if ((n.op == "MaxPool" || n.op == "AveragePool") && follow_pool(n)) {
        changed = true;
      } else if ((n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") &&
                 follow_global_pool(n)) {
        changed = true;
      } else if (n.op == "Concat" && follow_concat(n)) {
        changed = true;
      } else if (n.op == "Slice" && follow_slice(n)) {
        changed = true;
      } else if (n.op == "Pad" && follow_pad(n)) {
        changed = true;
      } else {
        g_.nodes.push_back(std::move(n));
      }
    }
    changed |= cancel_round_trips();
    if (changed) {
      dead_code_elimination(g_);
      drop_unused_values(g_);
    }
    return changed;
  }

 private:
  // The channel block for `channels`: the target's, or half of it (at least 8); 0 for none.
  int64_t block_for(int64_t channels) const {
    for (int64_t b = block_; b >= std::min<int64_t>(block_, 8); b /= 2) {
      if (channels % b == 0) return b;
    }
    return 0;
  }

  std::string node_name(const std::string& base) {
    std::string n = base;
    for (int k = 1; !node_names_.insert(n).second; ++k) n = base + "_" + std::to_string(k);
    return n;
  }


  // `x` (NCHW) in blocks of `b`: the blocked value it came from, one converted earlier, or a
  // new conversion.
  std::string to_blocked(const std::string& x, int64_t b) {
    if (auto it = back_.find(x); it != back_.end() && it->second.second == b)
      return it->second.first;
    std::string key = x + "/" + std::to_string(b);
    if (auto it = converted_.find(key); it != converted_.end()) return it->second;
    const Shape& s = g_.value(x).shape;
    std::string y = g_.add_float(x + "_" + layout_name(b), {s[0], s[1] / b, s[2], s[3], b});
    emit_transform(x, y, 0, b);
    return converted_[key] = y;
  }

  void emit_transform(const std::string& x, const std::string& y, int64_t src, int64_t dst) {
    Node t;
    t.name = node_name(y + "_layout");
    t.op = "LayoutTransform";
    t.inputs = {x};
    t.outputs = {y};
    t.attrs["src_layout"] = layout_name(src);
    t.attrs["dst_layout"] = layout_name(dst);
    g_.nodes.push_back(std::move(t));
  }

  // The node `n` rewritten to write `blocked` (of block b) instead of its NCHW output, which a
  // conversion back now computes under its old name.
  void emit_with_back(Node n, const std::string& blocked, int64_t b) {
    std::string y = n.outputs[0];
    n.outputs[0] = blocked;
    g_.nodes.push_back(std::move(n));
    emit_transform(blocked, y, b, 0);
    back_[y] = {blocked, b};
  }

  // The node `n`, whose output is NCHW, rewritten to write it in blocks of b (a new value),
  // which a conversion back computes under its old name.
  void emit_blocked(Node n, int64_t b) {
    const Shape& s = g_.value(n.outputs[0]).shape;
    std::string blocked =
        g_.add_float(n.outputs[0] + "_" + layout_name(b), {s[0], s[1] / b, s[2], s[3], b});
    emit_with_back(std::move(n), blocked, b);
  }

  bool convert_conv(Node& n) {
    if (block_ <= 1 || n.outputs.size() != 1) return false;
    AnchorWorkload aw = anchor_workload(g_, n);
    if (aw.spec.empty() || !g_.is_constant(n.inputs[1]) ||
        g_.value(n.inputs[0]).dtype != DType::F32)
      return false;
    const Shape& x = g_.value(n.inputs[0]).shape;
    const Value& wv = g_.value(n.inputs[1]);
    const Shape& w = wv.shape;
    int64_t C = x[1], K = w[0], R = w[2], S = w[3];
    // anchor_workload expressed it: depthwise (a depthwise_conv2d_nchw) or a grouped
    // conv2d_nchw (group > 1, any other shape of group).
    const bool depthwise = is_depthwise_conv(g_, n);
    if (n.get_int("group", 1) != 1 && !depthwise) return convert_grouped_conv(n, x, wv);
    const int64_t ob = block_for(K);
    if (!ob) return false;
    const int64_t ib = depthwise ? ob : input_block(n.inputs[0], C);
    if (int8_ && (depthwise || ib % 4 == 0)) {
      if (std::optional<QdqOperands> q = qdq_operands(g_, n.inputs[0], n.inputs[1], 0)) {
        convert_qconv(n, *q, ib, ob, depthwise);
        return true;
      }
    }
    const std::vector<float>& wf = wv.constant->f;
    HostTensor wb;
    if (depthwise) {
      wb = HostTensor::floats({C / ib, R, S, ib}, lane_weights(wf, C, 1, R * S, ib));
    } else {
      // [K][C][R][S] -> [K/ob][C/ib][R][S][ib][ob]
      wb = HostTensor::floats({K / ob, C / ib, R, S, ib, ob}, std::vector<float>(wf.size()));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = 0; p < R * S; ++p) {
            wb.f[((((k / ob) * (C / ib) + c / ib) * R * S + p) * ib + c % ib) * ob + k % ob] =
                wf[(k * C + c) * R * S + p];
          }
    }
    emit_conv_nchwc(n, ib, ob, std::move(wb));
    return true;
  }

  // A grouped (not depthwise) Conv as a grouped ConvNCHWc: output blocks of the target's
  // block or half of it (at least 8), input blocks of the input's own block or the output's
  // rule, the pair that multiplies the fewest channels per output channel (NchwcGroups::span
  // / ob: a vector instruction each, whatever its width), ties to the wider output block and
  // the input's own: RegNet's groups of 24 run in blocks of 16 that straddle two groups
  // (48 channels a block, as many instructions as blocks of 8 reading 24) and convert
  // nothing on either side. A block that straddles groups and computes with under a quarter
  // of what it reads is not taken. The weights [K][C/G][R][S] become
  // [K/ob][span/ib][R][S][ib][ob], zero where a filter meets another group's channel. Where
  // no blocks are taken, it stays NCHW (the conv2d_nchw template's group=G).
  bool convert_grouped_conv(const Node& n, const Shape& x, const Value& wv) {
    const Shape& w = wv.shape;
    const int64_t C = x[1], K = w[0], R = w[2], S = w[3], group = n.get_int("group", 1);
    // Groups of g channels in and out that the target's block holds whole (ResNeXt's groups
    // of 4 and 8, RegNet's of 8, on 16 lanes): lane by lane, as a depthwise convolution of
    // width g (weights [C/b][g][R][S][b]): every product useful, where a block of filters
    // multiplies each of its b input channels by b filters of which g read it (ResNeXt-50's
    // 56x56 layer of groups of 4 on Zen 5: 0.16 ms against 0.55).
    if (const int64_t g = C / group; C == K && g > 1 && g < block_ && block_ % g == 0 && C % block_ == 0) {
      const int64_t b = block_;
      emit_conv_nchwc(n, b, b, HostTensor::floats({C / b, g, R, S, b}, lane_weights(wv.constant->f, C, g, R * S, b)));
      return true;
    }
    std::vector<int64_t> input_blocks;
    if (auto it = back_.find(n.inputs[0]); it != back_.end() && C % it->second.second == 0)
      input_blocks.push_back(it->second.second);
    for (int64_t b = block_; b >= std::min<int64_t>(block_, 8); b /= 2) {
      if (C % b == 0 && std::find(input_blocks.begin(), input_blocks.end(), b) == input_blocks.end())
        input_blocks.push_back(b);
    }
    std::optional<NchwcGroups> best;
    for (int64_t ob = block_; ob >= std::min<int64_t>(block_, 8); ob /= 2) {
      if (K % ob != 0) continue;
      for (int64_t ib : input_blocks) {
        const NchwcGroups gr{C, K, group, ob, ib};
        if (!gr.whole() && gr.useful() < 0.25) continue;
        if (!best || gr.span() * best->ob < best->span() * ob) best = gr;
      }
    }
    if (!best) return false;
    const NchwcGroups gr = *best;
    const int64_t ob = gr.ob, ib = gr.ib, span = gr.span();
    const std::vector<float>& wf = wv.constant->f;
    const int64_t Cg = gr.channels(), Kg = gr.filters();
    HostTensor wb = HostTensor::floats({K / ob, span / ib, R, S, ib, ob},
                                       std::vector<float>(K / ob * span * R * S * ob));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c0 = gr.start(k / ob),
                    own = k / Kg * Cg;  // the block's first channel, k's group's
      for (int64_t c = own; c < own + Cg; ++c) {
        const int64_t cl = c - c0;  // within the block's span
        for (int64_t p = 0; p < R * S; ++p) {
          wb.f[((((k / ob) * (span / ib) + cl / ib) * R * S + p) * ib + cl % ib) * ob + k % ob] =
              wf[(k * Cg + (c - own)) * R * S + p];
        }
      }
    }
    emit_conv_nchwc(n, ib, ob, std::move(wb));
    return true;
  }

  // The input block of a dense convolution reading `x`: the block it already has where that
  // divides its channels, else the output's rule, else all its channels in one block.
  int64_t input_block(const std::string& x, int64_t C) const {
    if (auto it = back_.find(x); it != back_.end() && C % it->second.second == 0)
      return it->second.second;
    return block_for(C) ? block_for(C) : C;
  }

  // `n` as a ConvNCHWc on its input in blocks of ib, with blocked weights `wb`, writing blocks
  // of ob that a conversion back returns under the old name.
  void emit_conv_nchwc(const Node& n, int64_t ib, int64_t ob, HostTensor wb) {
    std::string xb = to_blocked(n.inputs[0], ib);
    std::string wname = g_.add_constant(n.inputs[1] + "_" + layout_name(ob), std::move(wb));
    const Shape& y = g_.value(n.outputs[0]).shape;
    std::string yb =
        g_.add_float(n.outputs[0] + "_" + layout_name(ob), {y[0], y[1] / ob, y[2], y[3], ob});
    Node c = n;
    c.op = "ConvNCHWc";
    c.inputs[0] = xb;
    c.inputs[1] = wname;
    c.attrs.erase("kernel_shape");
    c.attrs.erase("auto_pad");
    // anchor_workload resolved padding to one value (auto_pad VALID: 0).
    std::vector<int64_t> pads = n.get_string("auto_pad", "NOTSET") == "VALID"
                                    ? std::vector<int64_t>{0, 0, 0, 0}
                                    : n.get_ints("pads", {0, 0, 0, 0});
    c.attrs["pads"] = pads;
    emit_with_back(std::move(c), yb, ob);
  }

  // A QDQ convolution (DequantizeLinear(QuantizeLinear(x)) by DequantizeLinear of int8
  // weights) as a QConvNCHWc of x in blocks of `ib` (fold-qdq's part): its kernel quantizes x
  // on entry and multiplies bytes; the int8 weights stay [K][C][R][S] (the kernel's quads are
  // made at compile time, graph/import_quantize.cc). A depthwise one (`depthwise`, weights
  // [C][1][R][S], ib = ob) as a QDepthwiseNCHWc.
  void convert_qconv(const Node& n, const QdqOperands& q, int64_t ib, int64_t ob, bool depthwise) {
    std::string xb = to_blocked(q.x, ib);
    const Shape& y = g_.value(n.outputs[0]).shape;
    std::string yb = g_.add_float(n.outputs[0] + "_" + layout_name(ob), {y[0], y[1] / ob, y[2], y[3], ob});
    Node c;
    c.name = n.name;
    c.op = depthwise ? "QDepthwiseNCHWc" : "QConvNCHWc";
    c.inputs = {xb, g_.add_constant(n.inputs[1] + "_int8", q.w)};
    add_quantization_constants(g_, n.name, q, c.inputs);
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) c.inputs.push_back(n.inputs[2]);
    c.outputs = n.outputs;
    for (const char* a : {"strides", "dilations"}) {
      if (n.has(a)) c.attrs[a] = n.attrs.at(a);
    }
    c.attrs["pads"] = n.get_string("auto_pad", "NOTSET") == "VALID" ? std::vector<int64_t>{0, 0, 0, 0}
                                                                     : n.get_ints("pads", {0, 0, 0, 0});
    if (!depthwise) c.attrs["oc_block"] = ob;
    ++g_.int8_nodes;
    emit_with_back(std::move(c), yb, ob);
  }

  // A constant operand of an elementwise node over a blocked [N, C, H, W] value: kept when it
  // has one element, converted when it varies along channels only; else nothing.
  std::optional<std::string> blocked_constant(const std::string& v, int64_t C, int64_t b) {
    const Value& c = g_.value(v);
    if (!c.constant || c.dtype != DType::F32) return std::nullopt;
    if (c.constant->size() == 1) return v;
    const Shape& s = c.shape;
    if (s.size() > 4) return std::nullopt;
    for (size_t d = 0; d < s.size(); ++d) {
      size_t out_dim = 4 - s.size() + d;
      if (s[d] != 1 && !(out_dim == 1 && s[d] == C)) return std::nullopt;
    }
    std::string key = v + "/" + std::to_string(b);
    if (auto it = constants_.find(key); it != constants_.end()) return it->second;
    HostTensor t =
        HostTensor::floats({1, C / b, 1, 1, b}, c.constant->f);  // channel c at [c/b][c%b]
    return constants_[key] = g_.add_constant(v + "_" + layout_name(b), std::move(t));
  }

  bool follow(Node& n) {
    if (n.outputs.size() != 1 || n.inputs.empty()) return false;
    const Value& out = g_.value(n.outputs[0]);
    if (out.dtype != DType::F32 || out.shape.size() != 4) return false;
    // Computed operands of the output's shape, or per-channel ones ([N, C, 1, 1]: a
    // squeeze-and-excitation scale), which broadcast alike in the blocked layout.
    auto fits = [&](const Shape& s) {
      return s == out.shape || (s.size() == 4 && s[0] == out.shape[0] && s[1] == out.shape[1] &&
                                s[2] == 1 && s[3] == 1);
    };
    int64_t b = 0;
    for (const std::string& in : n.inputs) {
      auto it = back_.find(in);
      if (it == back_.end()) continue;
      if ((b && it->second.second != b) || !fits(g_.value(in).shape)) return false;
      b = it->second.second;
    }
    if (!b) return false;
    std::vector<std::string> inputs;
    for (const std::string& in : n.inputs) {
      if (in.empty()) {
        inputs.push_back(in);
      } else if (auto it = back_.find(in); it != back_.end()) {
        inputs.push_back(it->second.first);
      } else if (auto c = blocked_constant(in, out.shape[1], b)) {
        inputs.push_back(*c);
      } else if (!g_.is_constant(in) && g_.value(in).dtype == DType::F32 &&
                 fits(g_.value(in).shape)) {
        inputs.push_back(to_blocked(in, b));  // e.g. a residual from a pooling layer
      } else {
        return false;
      }
    }
    n.inputs = inputs;
    emit_blocked(std::move(n), b);
    return true;
  }

  // MaxPool or AveragePool of a value that comes back from a blocked layout pools the blocks
  // (graph/ops.h, pool_window: a 3-D window whose last axis is 1).
  bool follow_pool(Node& n) {
    if (n.outputs.size() != 1 || n.inputs.size() != 1) return false;
    auto it = back_.find(n.inputs[0]);
    if (it == back_.end()) return false;
    const auto [blocked_in, b] = it->second;
    // Each 2-D attribute gains the trivial last axis: [a, b] -> [a, b, 1], pads
    // [t, l, b, r] -> [t, l, 0, b, r, 0].
    std::map<std::string, std::vector<int64_t>> widened;
    for (const char* a : {"kernel_shape", "strides", "dilations", "pads"}) {
      if (!n.has(a)) continue;
      const bool pads = std::string(a) == "pads";
      std::vector<int64_t> v = n.get_ints(a, {});
      if (v.size() != (pads ? 4u : 2u)) return false;  // not 2-D: the verifier names it
      widened[a] = pads ? std::vector<int64_t>{v[0], v[1], 0, v[2], v[3], 0}
                        : std::vector<int64_t>{v[0], v[1], 1};
    }
    for (auto& [a, v] : widened) n.attrs[a] = v;
    n.inputs[0] = blocked_in;
    emit_blocked(std::move(n), b);
    return true;
  }

  // GlobalAveragePool or GlobalMaxPool of a blocked value: ReduceMean or ReduceMax over its
  // height and width, each lane alone (squeeze-and-excitation blocks, classifier heads).
  bool follow_global_pool(Node& n) {
    if (n.outputs.size() != 1 || n.inputs.size() != 1) return false;
    auto it = back_.find(n.inputs[0]);
    if (it == back_.end() || g_.value(n.inputs[0]).shape.size() != 4) return false;
    const auto [blocked_in, b] = it->second;
    n.op = n.op == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax";
    n.inputs = {blocked_in};
    n.attrs = {{"axes", std::vector<int64_t>{2, 3}}, {"keepdims", int64_t{1}}};
    emit_blocked(std::move(n), b);
    return true;
  }

  // A Concat along the channels of values one of which comes back from a blocked layout, all
  // of channel counts the block divides, concatenates the blocks (DenseNet's feature maps,
  // Inception's branches); the others are converted. Along the height or width likewise
  // (split-conv-regions' rectangles).
  bool follow_concat(Node& n) {
    if (n.outputs.size() != 1 || g_.value(n.outputs[0]).shape.size() != 4) return false;
    int64_t axis = n.get_int("axis", 0);
    if (axis < 0) axis += 4;
    if (axis < 1 || axis > 3) return false;
    int64_t b = 0;
    for (const std::string& in : n.inputs) {
      if (auto it = back_.find(in); it != back_.end()) {
        if (b && it->second.second != b) return false;
        b = it->second.second;
      }
    }
    if (!b) return false;
    for (const std::string& in : n.inputs) {
      if (in.empty() || g_.is_constant(in)) return false;
      const Value& v = g_.value(in);
      if (v.dtype != DType::F32 || v.shape.size() != 4 || v.shape[1] % b != 0) return false;
    }
    for (std::string& in : n.inputs) {
      auto it = back_.find(in);
      in = it != back_.end() ? it->second.first : to_blocked(in, b);
    }
    n.attrs["axis"] = axis;  // the channel blocks, the height or the width: the same axis blocked
    emit_blocked(std::move(n), b);
    return true;
  }

  // A Slice of a blocked value's height and width only (constant starts, ends, axes and
  // steps) slices the blocks: those axes keep their places in the blocked layout.
  bool follow_slice(Node& n) {
    if (n.outputs.size() != 1 || n.inputs.size() < 4 || n.inputs.size() > 5) return false;
    auto it = back_.find(n.inputs[0]);
    if (it == back_.end() || g_.value(n.inputs[0]).shape.size() != 4) return false;
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      if (n.inputs[k].empty() || !g_.value(n.inputs[k]).constant) return false;
    }
    const HostTensor& a = *g_.value(n.inputs[3]).constant;
    std::vector<int64_t> axes;
    for (int64_t k = 0; k < a.size(); ++k) {
      int64_t axis = a.as_int(k);
      if (axis < 0) axis += 4;
      if (axis != 2 && axis != 3) return false;
      axes.push_back(axis);
    }
    const auto [blocked_in, b] = it->second;
    n.inputs[0] = blocked_in;
    n.inputs[3] = g_.add_ints(n.inputs[3] + "_" + layout_name(b), axes);
    emit_blocked(std::move(n), b);
    return true;
  }

  // A Pad of a blocked value's height and width only (constant pads, no axes input) pads the
  // blocks, each lane alike (any mode).
  bool follow_pad(Node& n) {
    if (n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 3 ||
        n.inputs[1].empty() || n.has("pads"))
      return false;
    auto it = back_.find(n.inputs[0]);
    const Value& pads = g_.value(n.inputs[1]);
    if (it == back_.end() || !pads.constant || pads.constant->size() != 8) return false;
    std::vector<int64_t> p(8);
    for (size_t k = 0; k < 8; ++k) p[k] = pads.constant->as_int(static_cast<int64_t>(k));
    if (p[0] || p[1] || p[4] || p[5]) return false;
    const auto [blocked_in, b] = it->second;
    n.inputs[0] = blocked_in;
    n.inputs[1] =
        g_.add_ints(n.inputs[1] + "_" + layout_name(b), {0, 0, p[2], p[3], 0, 0, 0, p[6], p[7], 0});
    emit_blocked(std::move(n), b);
    return true;
  }

  // LayoutTransform(LayoutTransform(v, A -> NCHW), NCHW -> A) reads v.
  bool cancel_round_trips() {
    std::map<std::string, const Node*> producer;
    for (const Node& n : g_.nodes) {
      for (const std::string& o : n.outputs) producer[o] = &n;
    }
    bool changed = false;
    for (const Node& t : g_.nodes) {
      if (t.op != "LayoutTransform" || t.get_string("src_layout", "") != "NCHW") continue;
      auto p = producer.find(t.inputs[0]);
      if (p == producer.end() || p->second->op != "LayoutTransform") continue;
      const Node& u = *p->second;
      if (u.get_string("src_layout", "") != t.get_string("dst_layout", "") ||
          g_.is_output(t.outputs[0]))
        continue;
      replace_uses(g_, t.outputs[0], u.inputs[0]);
      changed = true;
    }
    return changed;
  }

  Graph& g_;
  int64_t block_;
  bool int8_;
  std::set<std::string> node_names_;
  // NCHW value -> the blocked value it converts back from, and the block.
  std::map<std::string, std::pair<std::string, int64_t>> back_;
  std::map<std::string, std::string> constants_;  // constant/block -> converted constant
  std::map<std::string, std::string> converted_;  // NCHW value/block -> its conversion
};

}  // namespace

bool transform_conv_layout(Graph& g, int64_t channel_block, bool int8) {
  if (channel_block <= 1) return false;
  return LayoutRewriter(g, channel_block, int8).run();
}

}  // namespace tf::graph
