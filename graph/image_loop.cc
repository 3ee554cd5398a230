#include "graph/image_loop.h"

#include <algorithm>
#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "graph/fusion.h"
#include "graph/memory_budget.h"
#include "graph/ops.h"
#include "graph/tasks.h"

namespace tf::graph {
namespace {

// pays_per_image's rules of thumb (docs/models.md, "Batches one image at a time"):
// Batched intermediates past a cache this size are read back from memory.
constexpr int64_t kCacheBytes = int64_t{4} << 20;
// Below this much work a kernel per image (on average), running the batch one image at a time
// gains nothing: batch 8 on the 2-core Zen 5 VM, one image at a time (images on threads of
// their own) against the batch at once, 1 and 2 threads: RegNetY-400MF, 4 MFLOP a kernel,
// 0.97-1.03x and 0.96-1.03x; MobileNet-v2, 10 MFLOP, 1.07-1.15x and 1.17-1.26x; SqueezeNet 1.1,
// 17 MFLOP, 1.14x and 1.31x; DenseNet-121, 29 MFLOP, 1.52x and 1.34x.
constexpr double kMinFlopsPerKernel = 8e6;
// Weights used fewer times than this per image are streamed from memory at each image...
constexpr double kMinWeightUses = 16;
// ... at ~10 GB/s, against ~100 GFLOPS of arithmetic: their bytes x 100 (10x the time they take)
// must not exceed the arithmetic.
constexpr double kFlopsPerStreamedByte = 100;

// The shape operand of a node that takes one (Reshape's and Expand's shape, Resize's sizes), or
// -1. Such a constant was often computed from the input's shape and folded when the batch was
// bound (an exporter's Concat(Shape(x)[0], ...)), so it names the batch in its element 0.
int shape_operand(const Node& n) {
  if (n.op == "Reshape" || n.op == "Expand") return 1;
  if (n.op == "Resize" && !n.has("axes")) return 3;
  return -1;
}

// A constant of `images` equal rows along axis 0 (token type ids of zeros made for the bound
// batch, indices expanded to it): its first row, which an elementwise operator broadcasts to
// the same values; nullopt where rows differ (a NaN differs from itself: refused, never wrong).
std::optional<HostTensor> first_of_equal_rows(const HostTensor& t, int64_t images) {
  if (t.shape.empty() || t.shape[0] != images || images < 2) return std::nullopt;
  auto rows_equal = [&](const auto& data) {
    if (data.empty()) return false;
    const size_t row = data.size() / static_cast<size_t>(images);
    for (size_t e = row; e < data.size(); ++e) {
      if (!(data[e] == data[e % row])) return false;
    }
    return true;
  };
  if (!(t.f.empty() ? rows_equal(t.i) : rows_equal(t.f))) return std::nullopt;
  HostTensor one = t;
  one.shape[0] = 1;
  const int64_t row = t.size() / images;
  if (!one.f.empty()) one.f.resize(static_cast<size_t>(row));
  if (!one.i.empty()) one.i.resize(static_cast<size_t>(row));
  return one;
}

}  // namespace

std::optional<ImageLoop> image_loop(const Graph& g, std::string* why) {
  auto no = [&](const std::string& reason) -> std::optional<ImageLoop> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (g.inputs.empty()) return no("the model has no inputs");
  int64_t images = 0;
  for (const std::vector<std::string>* names : {&g.inputs, &g.outputs}) {
    for (const std::string& name : *names) {
      const Shape& s = g.value(name).shape;
      if (s.empty()) return no(str("'", name, "' is a scalar"));
      if (images == 0) images = s[0];
      if (s[0] != images)
        return no(str("axis 0 of '", name, "' is ", s[0], ", of '", g.inputs[0], "' ", images));
      if (g.is_constant(name)) return no(str("output '", name, "' is a constant"));
    }
  }
  if (images <= 1) return no(str("axis 0 has ", images, " image"));
  ImageLoop loop;
  loop.images = images;
  Graph& one = loop.per_image;
  one = g;
  for (const std::string& in : g.inputs) one.value(in).shape[0] = 1;
  // The values computed from an input (the others, from constants alone, stay as they are).
  std::set<std::string> derived(g.inputs.begin(), g.inputs.end());
  for (Node& node : one.nodes) {
    bool reads_input = false;
    for (const std::string& in : node.inputs) reads_input |= derived.count(in) > 0;
    // A shape operand naming the batch in element 0, for data of the batch in axis 0 (the
    // output's rows are then the data's rows, reshaped, broadcast or resized alone): one
    // image's graph reads it with 1 there.
    const int shape_at = shape_operand(node);
    if (shape_at > 0 && static_cast<size_t>(shape_at) < node.inputs.size() &&
        derived.count(node.inputs[0])) {
      const std::string& operand = node.inputs[static_cast<size_t>(shape_at)];
      const Value* v = operand.empty() || derived.count(operand) ? nullptr : &one.value(operand);
      // (node.inputs[0], derived, is [images, ...]: every derived value is checked below.)
      if (v && v->constant && v->constant->dtype == DType::I64 && v->shape.size() == 1 &&
          !v->constant->i.empty() && v->constant->i[0] == images) {
        std::vector<int64_t> single = v->constant->i;
        single[0] = 1;
        node.inputs[static_cast<size_t>(shape_at)] =
            one.add_ints(operand + ".one_image", std::move(single));
      }
    }
    // A constant operand of equal rows for the batch, read by an elementwise operator (which
    // broadcasts one row to the same values) or as GatherElements' indices along another axis
    // (each row gathers with the first's indices): one image reads its first row.
    if (reads_input) {
      const bool elementwise = op_kind(node.op) == OpKind::Elementwise;
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const std::string operand = node.inputs[k];
        if (operand.empty() || derived.count(operand) || !one.value(operand).constant) continue;
        if (!elementwise && !(node.op == "GatherElements" && k == 1 && keeps_rows_apart(g, node)))
          continue;
        if (std::optional<HostTensor> row =
                first_of_equal_rows(*one.value(operand).constant, images))
          node.inputs[k] = one.add_constant(operand + ".one_image", std::move(*row));
      }
    }
    std::vector<TypeShape> out;
    try {
      out = infer_node(node, one, one.opset);
    } catch (const std::exception& e) {
      // Any failure, not only a UserError: these are shapes the model's author never wrote
      // (a batch of 1 where it had N), and refusing is always safe.
      return no(str(node.where(), " does not take one image: ", e.what()));
    }
    for (size_t k = out.size(); k < node.outputs.size(); ++k) {
      if (!node.outputs[k].empty()) return no(str(node.where(), ": output '", node.outputs[k], "' is not inferred"));
    }
    for (size_t k = 0; k < node.outputs.size() && k < out.size(); ++k) {
      const std::string& name = node.outputs[k];
      if (name.empty()) continue;
      const Shape& batched = g.value(name).shape;
      Shape& single = one.value(name).shape;
      single = out[k].shape;
      if (!reads_input) {
        if (single != batched)
          return no(str(node.where(), " reads no input but its output '", name, "' has another shape at one image"));
        continue;
      }
      derived.insert(name);
      if (batched.empty() || single.empty() || batched[0] != images || single[0] != 1 ||
          !std::equal(batched.begin() + 1, batched.end(), single.begin() + 1, single.end())) {
        return no(str("'", name, "' (", node.where(), ") is ", shape_str(batched), " at ", images, " images and ",
                      shape_str(single), " at one: axis 0 is not the images' alone"));
      }
    }
    if (reads_input && !keeps_rows_apart(g, node)) return no(str(node.where(), " mixes the rows of axis 0"));
    if (!reads_input) continue;
    const OpKind kind = op_kind(node.op);
    if (kind != OpKind::Elementwise) ++loop.kernels;  // elementwise nodes fuse into others
    for (const std::string& o : node.outputs) {
      if (!o.empty()) loop.largest_bytes = std::max(loop.largest_bytes, tensor_bytes(one.value(o).dtype, one.value(o).shape));
    }
    if (kind != OpKind::Anchor) continue;
    double flops = 0;
    try {
      AnchorWorkload m = anchor_workload(one, node);
      if (m.spec.empty()) continue;
      flops = static_cast<double>(build_op(parse_workload(m.spec + ",epilogue=none)")).flops);
    } catch (const std::exception& e) {
      return no(str(node.where(), " has no workload at one image: ", e.what()));
    }
    int64_t weight_elements = 0, weight_bytes = 0;
    for (const std::string& in : node.inputs) {
      if (in.empty() || derived.count(in)) continue;
      const Value& v = one.value(in);
      if (!v.constant || !holds_floats(v.dtype)) continue;
      weight_elements += num_elements(v.shape);
      weight_bytes += tensor_bytes(v.dtype, v.shape);
    }
    loop.flops += flops;
    // Each weight's uses at one image: a convolution's output positions, a product's rows.
    if (weight_elements > 0 && flops < 2.0 * kMinWeightUses * static_cast<double>(weight_elements))
      loop.streamed_weight_bytes += weight_bytes;
  }
  // An output computed from constants alone would be the whole batch's in every slice.
  for (const std::string& o : g.outputs) {
    if (!derived.count(o)) return no(str("output '", o, "' is computed from constants alone"));
  }
  return loop;
}

bool pays_per_image(const ImageLoop& loop) {
  const double flops = loop.flops;
  return loop.images * loop.largest_bytes > kCacheBytes && flops >= kMinFlopsPerKernel * static_cast<double>(loop.kernels) &&
         static_cast<double>(loop.streamed_weight_bytes) * kFlopsPerStreamedByte <= flops;
}

std::optional<ImageLoop> image_loop_for(const Graph& g, const Target& t) {
  if (!t.is_cpu() || !g.one_image_at_a_time) return std::nullopt;
  return image_loop(g);
}

}  // namespace tf::graph
