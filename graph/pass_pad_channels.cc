// pad-channels: a dense Conv (one a workload expresses) whose filters the target's channel
// block does not divide (an ImageNet head's 1000: blocks of 8, half an AVX-512 vector;
// ShuffleNet-v2's 58 and 116: no block), where padding them with zero filters to the next
// multiple of the block adds at most 1/8, or a third where half the block divides them and
// their readers carry the padding on (graph/layout.h padded_filters: 24 -> 32, 40 -> 48 on
// AVX-512; readers_take_padding), computes the padded
// channels, and what reads them keeps reading padded values where it can, so the layout pass
// (transform-conv-layout) runs the whole chain in blocks:
//   - the padded Conv's extra channels are exactly 0 (zero filters, zero bias);
//   - Relu, Tanh, HardSwish, LeakyRelu, max and average pooling, global pooling, and Clip
//     whose range holds 0, keep them 0; Sigmoid, HardSigmoid and other Clips make them another
//     constant (Sigmoid's 0.5);
//   - a depthwise Conv of the value, or a grouped one of a filter a channel whose groups the
//     padding is a whole number of (RegNet's groups of 8 at 104 and 440 channels: a 14th and a
//     56th group), is padded alike: zero filters and bias for the extra channels, 0 out;
//   - a dense Conv reading the value gets zero weights for the extra input channels (then
//     whatever the extra channels held, as long as it is finite, adds nothing);
//   - Add and Mul of two padded values, one of them 0 there (a residual sum; a
//     squeeze-and-excitation scale; SiLU), give the other's constant and 0.
// The extra channels thus hold one constant computed from the zero filters, never from the
// model's data, of magnitude at most 1 or a Clip's bound (nothing in the chain lets it grow),
// and whatever reads them keeps them apart (per channel) or multiplies them by zero weights.
// Each padded value's model channels are also given under the value's old name by a Slice,
// which whatever else reads it reads (a Concat, a Reshape, the model's output); unread ones
// are dropped. ShuffleNet-v2's branch (1x1 conv, ReLU, depthwise 3x3, 1x1 conv, ReLU) thus runs
// in blocks from end to end instead of converting back to NCHW after each layer.
// Measured on the AVX-512 VM: SqueezeNet's 512 -> 1000 1x1 classifier, 1 thread, 2.3-3.8 ms in
// blocks of 8, 1.5 ms padded to 1008 in blocks of 16; ShuffleNet-v2 x1.0 with its filters
// padded (58 -> 64, 116 -> 128) 8.5 -> 6.0 ms at 1 thread, and with the padded channels carried
// through its ReLUs and depthwise convs 6.0 -> 5.1 ms (2026-11-30,
// docs/results/shufflenet-padding-2026-11-30-intel.txt). RegNetY-400MF's 104- and 440-channel
// stages, whose grouped convs and squeeze-and-excitation ended the chain, converted to NCHW and
// back around every block (76 LayoutTransforms, 159 kernels; now 22 and 125): 1.13x faster at
// 1 thread, 1.23x at 2; MobileNet-v3-large (HardSigmoid excitation at 72, 120 channels) 1.09x
// and 1.08x (2026-12-02, docs/results/pad-channels-groups-se-2026-12-02-zen5.txt). Then 24 and
// 40 filters padded to 32 and 48 (whole AVX-512 vectors instead of halves, pools carrying the
// padding): MNASNet-1.0, MobileNet-v2/v3, EfficientNet-B0 and ShuffleNet-v2 1.03-1.05x.
// Runs on CPU targets (a channel block of at least 4); int8 convolutions (QDQ) are left to
// fold-qdq's kernels.
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "graph/layout.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

class ChannelPadder {
 public:
  ChannelPadder(Graph& g, int64_t block, bool int8) : g_(g), block_(block), int8_(int8) {
    for (const Node& n : g_.nodes) {
      node_names_.insert(n.name);
      for (const std::string& in : n.inputs) readers_[in].push_back(&n);
    }
  }

  bool run() {
    std::vector<Node> nodes = std::move(g_.nodes);
    g_.nodes.clear();
    bool changed = false;
    for (Node& n : nodes) {
      const Read r = read_padded(n);
      changed |= r != Read::No;
      if (r == Read::Emitted) continue;
      if (n.op == "Conv" && start_chain(n)) {
        changed = true;
        continue;
      }
      g_.nodes.push_back(std::move(n));
    }
    if (changed) {
      dead_code_elimination(g_);
      drop_unused_values(g_);
    }
    return changed;
  }

 private:
  enum class Read {
    No,         // it reads no padded value (or cannot)
    Rewritten,  // it reads one now (a dense Conv): still to be emitted
    Emitted,    // it reads one and writes one, emitted with its Slice
  };

  struct Padded {
    std::string value;  // the padded value: [N, Kp, H, W]
    int64_t channels = 0, padded = 0;
    // Its extra channels are 0; else they hold one constant of magnitude at most 1 or a
    // Clip's bound (Sigmoid's 0.5), which no operator of the chain lets grow.
    bool zeros = true;
  };

  std::string node_name(const std::string& base) {
    std::string n = base;
    for (int k = 1; !node_names_.insert(n).second; ++k) n = base + "_" + std::to_string(k);
    return n;
  }

  static bool dense_conv(const Node& n) { return n.op == "Conv" && n.get_int("group", 1) == 1; }

  // Constant float32 4-D weights (and a constant bias, or none) of a Conv reading a 4-D float32
  // input.
  bool plain_conv(const Node& n) const {
    if (n.outputs.size() != 1 || n.inputs.size() < 2 || !g_.is_constant(n.inputs[1])) return false;
    const Value& w = g_.value(n.inputs[1]);
    const Value& x = g_.value(n.inputs[0]);
    if (w.dtype != DType::F32 || w.shape.size() != 4 || x.dtype != DType::F32 || x.shape.size() != 4) return false;
    if (n.inputs.size() > 2 && !n.inputs[2].empty() && !g_.is_constant(n.inputs[2])) return false;
    return !(int8_ && qdq_operands(g_, n.inputs[0], n.inputs[1], 0));
  }

  // `n`'s output `y` (of `channels`) as a padded value of `padded` channels written by `n`,
  // and the model's channels under the old name by a Slice after it.
  void emit_padded(Node n, int64_t channels, int64_t padded, bool zeros = true) {
    const std::string y = n.outputs[0];
    const Shape& s = g_.value(y).shape;
    const std::string yp = g_.add_float(y + "_chpad", {s[0], padded, s[2], s[3]});
    n.outputs[0] = yp;
    const std::string name = n.name;
    g_.nodes.push_back(std::move(n));
    Node slice{node_name(name + "_chunpad"),
               "Slice",
               {yp, g_.add_ints(name + ".chunpad_start", {0}), g_.add_ints(name + ".chunpad_end", {channels}),
                g_.add_ints(name + ".chunpad_axis", {1})},
               {y},
               {}};
    g_.nodes.push_back(std::move(slice));
    padded_[y] = {yp, channels, padded, zeros};
  }

  // A constant [K] (or [K, ...]) padded with zeros along its first axis to `padded`.
  std::string padded_constant(const std::string& v, int64_t padded) {
    const Value& c = g_.value(v);
    Shape s = c.shape;
    const int64_t inner = c.constant->size() / s[0];
    std::vector<float> f = c.constant->f;
    f.resize(static_cast<size_t>(padded * inner), 0.0f);
    s[0] = padded;
    return g_.add_constant(v + "_chpad", HostTensor::floats(s, std::move(f)));
  }

  // A dense Conv whose filters the block does not divide, padded where that adds at most 1/8
  // (graph/layout.h padded_filters: the layout pass's rule).
  bool start_chain(const Node& n) {
    if (!dense_conv(n) || !plain_conv(n) || anchor_workload(g_, n).spec.empty()) return false;
    const int64_t K = g_.value(n.inputs[1]).shape[0],
                  Kp = padded_filters(K, block_, readers_take_padding(n.outputs[0], 4));
    if (!Kp) return false;
    Node c = n;
    c.inputs[1] = padded_constant(n.inputs[1], Kp);
    if (c.inputs.size() > 2 && !c.inputs[2].empty()) c.inputs[2] = padded_constant(n.inputs[2], Kp);
    emit_padded(std::move(c), K, Kp);
    return true;
  }

  // What an operator of one computed input makes of the extra channels' constant (0 if
  // `zeros`, else a constant of magnitude at most 1 or a Clip's bound): std::nullopt where it
  // may make it anything (a slope could grow it) or reads something else computed, else
  // whether they hold 0 after it.
  std::optional<bool> unary(const Node& n, bool zeros) const {
    const bool one = n.inputs.size() == 1;
    // 0 stays 0, and no constant grows: |f(c)| <= |c|.
    if (n.op == "Relu" || n.op == "Tanh" || n.op == "HardSwish") return one ? std::optional(zeros) : std::nullopt;
    if (n.op == "LeakyRelu") return one && zeros ? std::optional(true) : std::nullopt;
    // Pooling windows of 0 give 0 (a window holds at least one position of the image; an
    // average counting padded positions would scale another constant).
    if (n.op == "MaxPool" || n.op == "AveragePool") return one && zeros ? std::optional(true) : std::nullopt;
    // Global pooling: each channel's mean or largest value is its constant.
    if (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") return one ? std::optional(zeros) : std::nullopt;
    if (n.op == "Sigmoid" || n.op == "HardSigmoid") return one ? std::optional(false) : std::nullopt;  // in [0, 1]
    if (n.op == "Clip") {
      // Clip(x, min, max) with constant bounds, or the attributes of opset < 11: the constant
      // ends up in [min, max], and 0 stays 0 where that holds it.
      bool around_zero = n.get_float("min", -1) <= 0 && n.get_float("max", 1) >= 0;
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        if (n.inputs[k].empty()) continue;
        const Value& v = g_.value(n.inputs[k]);
        if (!v.constant || v.constant->size() != 1) return std::nullopt;
        const float bound = v.constant->f.empty() ? 0.0f : v.constant->f[0];
        if (!std::isfinite(bound)) return std::nullopt;
        around_zero &= k == 1 ? bound <= 0 : bound >= 0;
      }
      return zeros && around_zero;
    }
    return std::nullopt;
  }

  // Add or Mul of two padded values alike (4-D, broadcasting only height and width), one of
  // them with zeros in its extra channels: the operator on their padded values. Add's extra
  // channels hold the other's constant (0 where both are 0), Mul's 0.
  bool binary_padded(Node& n) {
    if ((n.op != "Add" && n.op != "Mul") || n.inputs.size() != 2) return false;
    auto a = padded_.find(n.inputs[0]), b = padded_.find(n.inputs[1]);
    if (a == padded_.end() || b == padded_.end()) return false;
    const Padded pa = a->second, pb = b->second;
    if (pa.channels != pb.channels || pa.padded != pb.padded || !(pa.zeros || pb.zeros)) return false;
    if (g_.value(n.outputs[0]).shape.size() != 4) return false;
    const bool zeros = n.op == "Mul" || (pa.zeros && pb.zeros);
    n.inputs = {pa.value, pb.value};
    emit_padded(std::move(n), pa.channels, pa.padded, zeros);
    return true;
  }

  // Whether everything reading `v` (through up to `depth` activations) would read its padded
  // channels: dense or depthwise convs, pools, activations, Add and Mul; not a model output, a
  // Concat, a reshape, or a grouped conv of other widths (they would read a Slice of it).
  // Padding by more than 1/8 only pays where the padding carries on.
  bool readers_take_padding(const std::string& v, int depth) const {
    if (g_.is_output(v)) return false;
    auto it = readers_.find(v);
    if (it == readers_.end()) return false;
    for (const Node* r : it->second) {
      if (r->op == "Add" || r->op == "Mul") continue;
      if (r->op == "Conv") {
        const int64_t group = r->get_int("group", 1);
        if (r->inputs[0] != v || !plain_conv(*r)) return false;
        const Shape& w = g_.value(r->inputs[1]).shape;
        if (group == 1 || w[1] == 1) continue;  // dense or depthwise
        return false;
      }
      if (depth == 0 || !unary(*r, true) || r->outputs.size() != 1 || !readers_take_padding(r->outputs[0], depth - 1))
        return false;
    }
    return true;
  }

  // `n` rewritten to read the padded value of its first input where it can.
  Read read_padded(Node& n) {
    if (n.inputs.empty() || n.outputs.size() != 1) return Read::No;
    if (binary_padded(n)) return Read::Emitted;
    auto it = padded_.find(n.inputs[0]);
    if (it == padded_.end()) return Read::No;
    const Padded p = it->second;
    if (const std::optional<bool> zeros = unary(n, p.zeros)) {
      n.inputs[0] = p.value;
      emit_padded(std::move(n), p.channels, p.padded, *zeros);
      return Read::Emitted;
    }
    if (n.op != "Conv" || !plain_conv(n)) return Read::No;
    const Shape& w = g_.value(n.inputs[1]).shape;
    const int64_t group = n.get_int("group", 1);
    // Depthwise (a channel a group) or grouped with a filter a channel, the padding whole
    // groups: zero filters (and bias) for the extra groups, which read only the extra channels.
    const int64_t width = w[1];  // channels a group
    if (group > 1 && w[0] == p.channels && width * group == p.channels && (p.padded - p.channels) % width == 0) {
      n.inputs[0] = p.value;
      n.inputs[1] = padded_constant(n.inputs[1], p.padded);
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) n.inputs[2] = padded_constant(n.inputs[2], p.padded);
      n.attrs["group"] = p.padded / width;
      emit_padded(std::move(n), p.channels, p.padded);
      return Read::Emitted;
    }
    if (group != 1 || w[1] != p.channels) return Read::No;
    // Dense: zero weights for the extra input channels, [K][C][R][S] -> [K][Cp][R][S].
    const Value& wv = g_.value(n.inputs[1]);
    const int64_t K = w[0], C = w[1], RS = w[2] * w[3];
    std::vector<float> f(static_cast<size_t>(K * p.padded * RS), 0.0f);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < RS; ++r) f[(k * p.padded + c) * RS + r] = wv.constant->f[(k * C + c) * RS + r];
    n.inputs[0] = p.value;
    n.inputs[1] = g_.add_constant(n.inputs[1] + "_chpad", HostTensor::floats({K, p.padded, w[2], w[3]}, std::move(f)));
    return Read::Rewritten;
  }

  Graph& g_;
  int64_t block_;
  bool int8_;
  std::set<std::string> node_names_;
  std::map<std::string, Padded> padded_;  // a model value -> its padded value
  std::map<std::string, std::vector<const Node*>> readers_;  // of each value in the graph as given
};

}  // namespace

bool pad_channels(Graph& g, int64_t channel_block, bool int8) {
  if (channel_block < 4) return false;
  return ChannelPadder(g, channel_block, int8).run();
}

}  // namespace tf::graph
