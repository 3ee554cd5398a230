// pad-convs: a 2-D Conv whose four pads differ (Inception's 1x7 and 7x1 convolutions pad
// [0, 3, 0, 3]; 1-D convolutions, run at height 1, pad the width only; auto_pad SAME_UPPER
// and SAME_LOWER) gets an explicit Pad node for the part that differs, and keeps the one pad
// all four sides share, so its workload (one pad for both axes) and thus its schedule
// template apply instead of the generic kernel: with p = min(pads), the Pad adds pads - p
// zeros and the Conv pads p all round. The sum is the same (the added pixels are the zeros the
// convolution would have read). Convolutions with different strides or dilations along H and
// W stay: no workload expresses them either way.
#include <algorithm>

#include "graph/ops.h"
#include "graph/pass.h"

namespace tf::graph {
namespace {

// The Pad and the Conv that replace Conv n, or false when its pads are already one.
bool pad_explicitly(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op != "Conv" || n.inputs.size() < 2 || g.value(n.inputs[0]).shape.size() != 4 ||
      g.value(n.inputs[1]).shape.size() != 4) {
    return false;
  }
  const Shape x = g.value(n.inputs[0]).shape;
  const Shape w = g.value(n.inputs[1]).shape;
  std::vector<int64_t> k = kernel_shape(context(n, g, g.opset), {w[2], w[3]});
  Window win = window_of(context(n, g, g.opset), x, k[0], k[1]);
  if (win.sh != win.sw || win.dh != win.dw) return false;
  std::vector<int64_t> pads = {win.pt, win.pl, win.pb, win.pr};
  int64_t p = *std::min_element(pads.begin(), pads.end());
  if (pads == std::vector<int64_t>(4, p)) {
    return false;
  }
  std::string padded = g.add_float(
      n.inputs[0] + ".padded", {x[0], x[1], x[2] + win.pt + win.pb - 2 * p, x[3] + win.pl + win.pr - 2 * p});
  std::string widths = g.add_ints(n.name + ".pads", {0, 0, win.pt - p, win.pl - p, 0, 0, win.pb - p, win.pr - p});
  out.push_back(Node{n.name + ".pad", "Pad", {n.inputs[0], widths}, {padded}, {}});
  Node conv = n;
  conv.inputs[0] = padded;
  conv.attrs.erase("auto_pad");
  conv.attrs["pads"] = std::vector<int64_t>(4, p);
  conv.attrs["kernel_shape"] = k;
  out.push_back(std::move(conv));
  return true;
}

}  // namespace

bool pad_convs(Graph& g) { return expand_nodes(g, pad_explicitly); }

}  // namespace tf::graph
