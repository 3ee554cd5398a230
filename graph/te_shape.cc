// The tensor expressions of the data-movement operators (graph/op_te.h): reshapes,
// transposes, slices, padding, resizing, concatenation, gathers, and their kin.
#include <array>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "graph/layout.h"
#include "graph/op_te.h"
#include "graph/te_kit.h"

namespace tf::graph::te {

std::vector<Tensor> reshape_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  return {elementwise(name, out, [&](const Index& i) { return read_reshaped(x, i, out); })};
}

std::vector<Tensor> expand_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  return {elementwise(name, out, [&](const Index& i) { return read_broadcast(x, i); })};
}

std::vector<Tensor> transpose_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  const std::vector<int64_t> perm = transpose_perm(n, x.shape.size());
  return {elementwise(name, out, [&](const Index& i) {
    Index src(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) src[perm[d]] = i[d];
    return operand(x, src);
  })};
}

std::vector<Tensor> slice_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  SliceSpec s = slice_spec(c);
  return {elementwise(name, out, [&](const Index& i) {
    Index src;
    for (size_t d = 0; d < i.size(); ++d) src.push_back(i[d] * s.step[d] + s.start[d]);
    return operand(x, src);
  })};
}

std::vector<Tensor> tile_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  return {elementwise(name, out, [&](const Index& i) {
    Index src;
    for (size_t d = 0; d < i.size(); ++d)
      src.push_back(x.shape[d] == out[d] ? i[d] : i[d] % x.shape[d]);
    return operand(x, src);
  })};
}

std::vector<Tensor> pad_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  PadSpec s = pad_spec(c);
  Expr fill = ir::f32(0.0);
  if (c.present(2)) {
    const TeOperand& v = need(n, in, 2);
    fill = operand(v, Index(v.shape.size(), Expr(int64_t{0})));
  }
  return {elementwise(name, out, [&](const Index& i) {
    Index src;
    Expr inside;
    for (size_t d = 0; d < i.size(); ++d) {
      int64_t extent = x.shape[d];
      Expr at = i[d] - Expr(s.begin[d]);
      if (s.begin[d] == 0 && out[d] == extent) {
        src.push_back(i[d]);
        continue;
      }
      if (s.mode == PadSpec::Edge || (s.mode == PadSpec::Reflect && extent == 1)) {
        src.push_back(clamp(at, 0, extent - 1));
      } else if (s.mode == PadSpec::Wrap) {
        src.push_back(at % extent);  // floored, as below
      } else if (s.mode == PadSpec::Reflect) {  // PadSpec::source, in index arithmetic
        int64_t period = 2 * (extent - 1);
        Expr m = at % period;  // the IR's Mod floors: in [0, period) for negative `at` too
        src.push_back(ir::select(m < Expr(extent), m, Expr(period) - m));
      } else {
        // Unclamped: read only under the select on `inside` (a masked load, where clamped
        // columns were a gather; graph/te_nn.cc window_read).
        Expr ok = ir::logical_and(at >= int64_t{0}, at < Expr(extent));
        inside = inside ? ir::logical_and(inside, ok) : ok;
        src.push_back(at);
      }
    }
    Expr v = operand(x, src);
    return inside ? ir::select(inside, v, fill) : v;
  })};
}

// Resize: per axis the input positions an output position reads and their weights
// (ResizeSpec::source in float32 arithmetic); identity and nearest axes read one position,
// weight none. Where the innermost axis and another are interpolated (linear or cubic: a
// bilinear upsampling of an image), the innermost is interpolated first into a buffer of its
// own, a sum over its taps (so generic kernels keep it rather than inline it), and the other
// axes then read whole rows of it: the gathers along the innermost axis happen once per input
// row instead of once per output row and tap of the others (DeepLabv3's 20x20 -> 320x320
// upsampling of 21 classes 3.8 -> about 1 ms). The weights multiply as before, axis by axis.
// GridSample as grid_sample_eval (graph/ops_resize.cc) computes it: per spatial axis the
// position read from the grid, rounded (nearest) and kept or reflected inside (border,
// reflection), its taps' indices and weights; an index outside the input reads 0 (zeros) or
// moves inside. Every read index is clamped into the input, so no grid value (inf, NaN)
// reads outside it.
std::vector<Tensor> grid_sample_te(const Graph&, const Node& n, const OpContext& c, const std::vector<TeOperand>& in,
                                   const Shape& out, const std::string& name) {
  const TeOperand &x = need(n, in, 0), &grid = need(n, in, 1);
  if (!x.tensor || !grid.tensor) not_implemented(n, "GridSample of a one-element constant");
  const GridSampleSpec s = grid_sample_spec(c);
  const size_t r = s.spatial;
  auto to_int = [](Expr f) { return ir::Cast::make(ir::Type::int64(), std::move(f)); };
  auto reflect = [](Expr v, double lo, double hi) {  // grid_sample_reflect
    const double range = hi - lo;
    if (!(range > 0)) return ir::f32(lo);
    Expr below = v < ir::f32(lo);
    Expr dx = ir::select(below, ir::f32(lo) - v, v - ir::f32(hi));
    Expr turns = ir::floor(dx / ir::f32(range)), rest = dx - turns * ir::f32(range);
    Expr even = ir::eq(turns - ir::f32(2.0) * ir::floor(turns * ir::f32(0.5)), ir::f32(0.0));
    // Below and an even number of turns, or above and an odd one: from the low border.
    Expr from_low = ir::eq(to_float(below), to_float(even));
    Expr outside = ir::select(from_low, ir::f32(lo) + rest, ir::f32(hi) - rest);
    return ir::select(below, outside, ir::select(gt(v, ir::f32(hi)), outside, v));
  };
  // Per spatial axis, the position every output position reads around (rounded, and kept or
  // reflected inside), a stage of its own [N, o1..or]: the taps read it several times.
  Shape positions(out.begin(), out.end());
  positions.erase(positions.begin() + 1);  // no channel axis
  std::vector<Tensor> position(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t size = s.x[2 + d];
    position[d] = elementwise(str(name, "_pos", d), positions, [&](const Index& p) {
      Index at = p;
      at.push_back(Expr(static_cast<int64_t>(r - 1 - d)));  // the grid lists the innermost axis first
      Expr g = read_broadcast(grid, at);
      Expr v = s.align_corners ? (g + ir::f32(1.0)) * ir::f32(0.5 * double(size - 1))
                               : ((g + ir::f32(1.0)) * ir::f32(double(size)) - ir::f32(1.0)) * ir::f32(0.5);
      if (s.mode == GridSampleSpec::Nearest) v = ir::round_even(v);
      // Far outside, within 2^24 (grid_sample_eval); NaN to 0 (a select: max and min may drop it).
      auto bounded = [](Expr p) {
        return ir::select(ir::eq(p, p), ir::min(ir::max(p, ir::f32(-16777216.0)), ir::f32(16777216.0)), ir::f32(0.0));
      };
      if (s.mode == GridSampleSpec::Cubic) return bounded(v);  // its taps are mapped (grid_sample_eval)
      if (s.padding == GridSampleSpec::Border) {
        Expr clamped = ir::min(ir::max(v, ir::f32(0.0)), ir::f32(double(size - 1)));
        v = ir::select(v < ir::f32(s.low(d)), clamped, ir::select(gt(v, ir::f32(s.high(d))), clamped, v));
      } else if (s.padding == GridSampleSpec::Reflection) {
        v = reflect(v, s.low(d), s.high(d));
      }
      return bounded(v);
    });
  }
  return {elementwise(name, out, [&](const Index& i) {
    struct Tap {
      Expr index, weight;  // weight null: 1
    };
    std::vector<std::vector<Tap>> taps(r);
    Index p = {i[0]};
    p.insert(p.end(), i.begin() + 2, i.end());
    for (size_t d = 0; d < r; ++d) {
      const int64_t size = s.x[2 + d];
      Expr v = ir::read(position[d], p);
      if (s.mode == GridSampleSpec::Nearest) {
        taps[d].push_back({to_int(v), Expr()});
      } else {
        Expr f = ir::floor(v), t = v - f, k = to_int(f);
        if (s.mode == GridSampleSpec::Linear) {
          taps[d].push_back({k, ir::f32(1.0) - t});
          taps[d].push_back({k + int64_t{1}, t});
        } else {
          const Expr A = ir::f32(-0.75), one = ir::f32(1.0), t1 = t + one, u = one - t, u1 = ir::f32(2.0) - t;
          const Expr w[4] = {((A * t1 - ir::f32(5.0) * A) * t1 + ir::f32(8.0) * A) * t1 - ir::f32(4.0) * A,
                             ((A + ir::f32(2.0)) * t - (A + ir::f32(3.0))) * t * t + one,
                             ((A + ir::f32(2.0)) * u - (A + ir::f32(3.0))) * u * u + one,
                             ((A * u1 - ir::f32(5.0) * A) * u1 + ir::f32(8.0) * A) * u1 - ir::f32(4.0) * A};
          for (int64_t j = 0; j < 4; ++j) taps[d].push_back({k + (j - 1), w[j]});
        }
      }
      for (Tap& tap : taps[d]) {  // where an index outside the input reads
        Expr inside = ir::logical_and(tap.index >= int64_t{0}, tap.index < size);
        if (s.padding == GridSampleSpec::Zeros) {
          tap.weight = ir::select(inside, tap.weight ? tap.weight : ir::f32(1.0), ir::f32(0.0));
        } else if (s.padding == GridSampleSpec::Reflection) {
          tap.index = ir::select(inside, tap.index, to_int(reflect(to_float(tap.index), s.low(d), s.high(d))));
        }
        tap.index = clamp(tap.index, 0, size - 1);
      }
    }
    Expr sum;
    std::vector<size_t> pick(r, 0);
    for (;;) {
      Index at = {i[0], i[1]};
      Expr weight;
      for (size_t d = 0; d < r; ++d) {
        const Tap& tap = taps[d][pick[d]];
        at.push_back(tap.index);
        if (tap.weight) weight = weight ? weight * tap.weight : tap.weight;
      }
      Expr term = weight ? weight * read_broadcast(x, at) : read_broadcast(x, at);
      sum = sum ? sum + term : term;
      size_t d = r;
      while (d-- > 0) {
        if (++pick[d] < taps[d].size()) break;
        pick[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    return sum;
  })};
}

std::vector<Tensor> resize_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  ResizeSpec s = resize_spec(c);
  auto to_int = [](Expr f) { return ir::Cast::make(ir::Type::int64(), std::move(f)); };
  auto axis_taps = [&](size_t d, const Expr& index) {
    std::vector<std::pair<Expr, Expr>> taps;
    int64_t extent = s.in[d];
    if (s.identity(d)) {
      taps.push_back({index, Expr()});
      return taps;
    }
    Expr at = to_float(index), scale = ir::f32(s.scale[d]), src;
    double length = s.length[d];
    switch (s.coord) {
      case ResizeSpec::HalfPixel: src = (at + ir::f32(0.5)) / scale - ir::f32(0.5); break;
      case ResizeSpec::PytorchHalfPixel:
        src = length > 1 ? (at + ir::f32(0.5)) / scale - ir::f32(0.5) : ir::f32(0.0);
        break;
      case ResizeSpec::AlignCorners:
        src = length != 1 ? at * ir::f32(double(extent - 1) / (length - 1)) : ir::f32(0.0);
        break;
      case ResizeSpec::Asymmetric: src = at / scale; break;
      case ResizeSpec::TfHalfPixelForNn: src = (at + ir::f32(0.5)) / scale; break;
      case ResizeSpec::HalfPixelSymmetric:
        src = (at + ir::f32(0.5)) / scale + ir::f32(s.symmetric_offset(d) - 0.5);
        break;
    }
    if (!s.linear && !s.cubic) {
      Expr r;
      switch (s.nearest) {
        case ResizeSpec::RoundPreferFloor: r = ir::ceil(src - ir::f32(0.5)); break;
        case ResizeSpec::RoundPreferCeil: r = ir::floor(src + ir::f32(0.5)); break;
        case ResizeSpec::Floor: r = ir::floor(src); break;
        case ResizeSpec::Ceil: r = ir::ceil(src); break;
      }
      taps.push_back({clamp(to_int(r), 0, extent - 1), Expr()});
      return taps;
    }
    Expr f = ir::floor(src), k = to_int(f), t = src - f;
    if (s.linear) {
      taps.push_back({clamp(k, 0, extent - 1), ir::f32(1.0) - t});
      taps.push_back({clamp(k + int64_t{1}, 0, extent - 1), t});
      return taps;
    }
    // Cubic: ResizeSpec::cubic_weights written out; with exclude_outside, taps outside the
    // input weigh 0 and the rest are divided by their sum.
    Expr A = ir::f32(s.cubic_a), u = ir::f32(1.0) - t, one = ir::f32(1.0);
    Expr t1 = t + one, u1 = u + one;
    std::array<Expr, 4> cw = {((A * t1 - ir::f32(5.0) * A) * t1 + ir::f32(8.0) * A) * t1 - ir::f32(4.0) * A,
                              ((A + ir::f32(2.0)) * t - (A + ir::f32(3.0))) * t * t + one,
                              ((A + ir::f32(2.0)) * u - (A + ir::f32(3.0))) * u * u + one,
                              ((A * u1 - ir::f32(5.0) * A) * u1 + ir::f32(8.0) * A) * u1 - ir::f32(4.0) * A};
    Expr total;
    for (int64_t j = 0; j < 4; ++j) {
      Expr pos = k + (j - 1);
      Expr wj = cw[static_cast<size_t>(j)];
      if (s.exclude_outside) wj = ir::select(ir::logical_and(pos >= int64_t{0}, pos < extent), wj, ir::f32(0.0));
      total = total ? total + wj : wj;
      taps.push_back({clamp(pos, 0, extent - 1), wj});
    }
    if (s.exclude_outside)
      for (auto& tap : taps) tap.second = tap.second / total;
    return taps;
  };
  // The sum over the product of the axes' taps of read(at).
  auto interpolate = [](const std::vector<std::vector<std::pair<Expr, Expr>>>& taps,
                        const std::function<Expr(const Index&)>& read) {
    Expr v;
    std::vector<size_t> pick(taps.size(), 0);
    for (;;) {
      Index at;
      Expr weight;
      for (size_t d = 0; d < taps.size(); ++d) {
        const auto& [pos, wd] = taps[d][pick[d]];
        at.push_back(pos);
        if (wd) weight = weight ? weight * wd : wd;
      }
      Expr term = weight ? weight * read(at) : read(at);
      v = v ? v + term : term;
      size_t d = taps.size();
      while (d-- > 0) {
        if (++pick[d] < taps[d].size()) break;
        pick[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    return v;
  };
  const size_t rank = out.size(), last = rank - 1;
  int64_t interpolated = 0;
  for (size_t d = 0; d < rank; ++d) interpolated += !s.identity(d);
  const bool separate = x.tensor && rank >= 2 && (s.linear || s.cubic) && !s.identity(last) && interpolated >= 2;
  if (!separate) {
    return {elementwise(name, out, [&](const Index& i) {
      std::vector<std::vector<std::pair<Expr, Expr>>> taps;
      for (size_t d = 0; d < rank; ++d) taps.push_back(axis_taps(d, i[d]));
      return interpolate(taps, [&](const Index& at) { return operand(x, at); });
    })};
  }
  // The innermost axis first: rows[..][out_last] = the sum over its taps j (a select of the
  // tap's position and weight by j).
  Shape row_shape = x.shape;
  row_shape[last] = out[last];
  const int64_t row_taps = s.linear ? 2 : 4;
  ir::IterVar j = ir::reduce_axis(row_taps, "tap");
  Tensor rows = ir::compute(name + "_rows", row_shape, axis_names(rank), [&](const std::vector<Expr>& i) {
    std::vector<std::pair<Expr, Expr>> taps = axis_taps(last, i[last]);
    Expr pos = taps.back().first, weight = taps.back().second;
    for (size_t k = taps.size() - 1; k-- > 0;) {
      Expr here = ir::eq(j.var, Expr(static_cast<int64_t>(k)));
      pos = ir::select(here, taps[k].first, pos);
      weight = ir::select(here, taps[k].second, weight);
    }
    Index at(i.begin(), i.end());
    at[last] = pos;
    return ir::sum(weight * operand(x, at), {j});
  }, {j});
  return {elementwise(name, out, [&](const Index& i) {
    std::vector<std::vector<std::pair<Expr, Expr>>> taps;
    for (size_t d = 0; d < last; ++d) taps.push_back(axis_taps(d, i[d]));
    taps.push_back({{i[last], Expr()}});
    return interpolate(taps, [&](const Index& at) { return ir::read(rows, at); });
  })};
}

std::vector<Tensor> concat_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(out.size()));
  std::vector<int64_t> start;
  int64_t at = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    need(n, in, k);
    start.push_back(at);
    at += in[k].shape[axis];
  }
  std::vector<size_t> parts;  // the inputs with elements along the axis
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].shape[axis] > 0) parts.push_back(k);
  }
  return {elementwise(name, out, [&](const Index& i) {
    // A balanced tree of selects on the position along the axis: log2(inputs) deep, where a
    // chain was one level an input (an unrolled GRU of 400 steps, whose outputs one Concat
    // joins, was past the compiler's 256 levels) and a lane-invariant position branched once
    // an input before it. Unclamped: input k is read only under the selects that pick it (i in
    // [start, end): the tree's conditions), masked loads where clamped positions were gathers.
    std::function<Expr(size_t, size_t)> tree = [&](size_t lo, size_t hi) -> Expr {
      if (hi - lo == 1) {
        const size_t k = parts[lo];
        Index src = i;
        src[axis] = i[axis] - start[k];
        return operand(in[k], src);
      }
      const size_t mid = lo + (hi - lo) / 2;
      return ir::select(i[axis] < Expr(start[parts[mid]]), tree(lo, mid), tree(mid, hi));
    };
    return parts.empty() ? Expr() : tree(0, parts.size());
  })};
}

std::vector<Tensor> split_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size()));
  std::vector<int64_t> sizes = split_sizes(c);
  std::vector<Tensor> outs;
  int64_t at = 0;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    int64_t from = at;
    outs.push_back(elementwise(str(name, k), g.value(n.outputs[k]).shape, [&](const Index& i) {
      Index src = i;
      src[axis] = i[axis] + from;
      return operand(x, src);
    }));
    at += sizes[k];
  }
  return outs;
}

std::vector<Tensor> gather_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  const Value& idx = g.value(n.inputs[1]);
  int64_t axis = normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size()));
  size_t irank = idx.shape.size();
  if (!idx.constant || (in.size() > 1 && in[1].present())) {
    // Indices computed at run time (token ids, ArgMax's result), or a table of constant
    // ones: floats holding integers; a negative one counts from the end, and one out of
    // range is clamped to the axis (a kernel cannot raise ONNX's error; TVM's take clips
    // alike).
    const TeOperand& ix = need(n, in, 1);
    int64_t len = x.shape[axis];
    return {elementwise(name, out, [&](const Index& i) {
      Index inner(i.begin() + axis, i.begin() + axis + static_cast<int64_t>(irank));
      Expr j = ir::Cast::make(ir::Type::int64(), operand(ix, inner));
      j = clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1);
      Index src(i.begin(), i.begin() + axis);
      src.push_back(j);
      src.insert(src.end(), i.begin() + axis + static_cast<int64_t>(irank), i.end());
      return operand(x, src);
    })};
  }
  int64_t count = idx.constant->size(), len = x.shape[axis];
  TF_CHECK(count <= kMaxUnrolledIndices, n.where(), ": ", count,
           " constant indices not given as a table");
  std::vector<int64_t> pos;
  for (int64_t k = 0; k < count; ++k) {
    int64_t p = idx.constant->as_int(k);
    if (p < -len || p >= len)
      throw UserError(str(n.where(), ": index ", p, " is out of range for axis of size ", len));
    pos.push_back(p < 0 ? p + len : p);
  }
  return {elementwise(name, out, [&](const Index& i) {
    Index inner(i.begin() + axis, i.begin() + axis + static_cast<int64_t>(irank));
    Expr j = flat_of(inner, idx.shape), at = pos.back();
    for (size_t k = pos.size() - 1; k-- > 0;)
      at = ir::select(eq(j, Expr(static_cast<int64_t>(k))), pos[k], at);
    Index src(i.begin(), i.begin() + axis);
    src.push_back(at);
    src.insert(src.end(), i.begin() + axis + static_cast<int64_t>(irank), i.end());
    return operand(x, src);
  })};
}

std::vector<Tensor> onehot_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &idx = need(n, in, 0), &values = need(n, in, 2);
  OneHotSpec s = onehot_spec(c);
  return {elementwise(name, out, [&](const Index& i) {
    Index at(i.begin(), i.end());
    Expr j = at[s.axis];
    at.erase(at.begin() + s.axis);
    Expr k = ir::Cast::make(ir::Type::int64(), operand(idx, at));
    k = ir::select(k < Expr(int64_t{0}), k + s.depth, k);  // out of range: no class is on
    Index off{Expr(int64_t{0})}, on{Expr(int64_t{1})};
    Shape flat{2};
    return ir::select(eq(k, j), read_reshaped(values, on, flat),
                      read_reshaped(values, off, flat));
  })};
}

std::vector<Tensor> topk_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  // By places: each element's place in the order is the number of elements before it
  // (greater, or equal at a lower index: every place is taken once), quadratic in the axis's
  // length; output r is the element whose place is r. A NaN sorts as an infinity (the
  // reference puts it beyond one).
  const TeOperand& x = need(n, in, 0);
  if (!x.tensor) not_implemented(n, "TopK of a one-element constant");
  TopKSpec s = topk_spec(c);
  auto axis = static_cast<size_t>(s.axis);
  const Shape& xs = x.shape;
  Expr inf = ir::f32(std::numeric_limits<double>::infinity());
  auto key = [&](Expr v) { return ir::select(ir::eq(v, v), v, inf); };
  IterVar m = ir::reduce_axis(xs[axis], "m");
  Tensor place =
      ir::compute(name + "_place", xs, axis_names(xs.size()),
                  [&](const Index& i) {
                    Index other = i;
                    other[axis] = m.var;
                    Expr a = key(operand(x, other)), b = key(operand(x, i));
                    Expr ahead = s.largest ? gt(a, b) : a < b;
                    Expr tie = ir::logical_and(ir::eq(a, b), m.var < i[axis]);
                    Expr one = ir::f32(1.0), zero = ir::f32(0.0);
                    return ir::sum(ir::select(ahead, one, ir::select(tie, one, zero)), {m});
                  },
                  {m});
  auto pick = [&](const std::string& suffix, const std::function<Expr(const Index&)>& what) {
    IterVar j = ir::reduce_axis(xs[axis], "j");
    const Shape& os = g.value(n.outputs[0]).shape;
    return ir::compute(name + suffix, os, axis_names(os.size()),
                       [&](const Index& o) {
                         Index src = o;
                         src[axis] = j.var;
                         Expr here = ir::eq(ir::read(place, src), to_float(o[axis]));
                         return ir::sum(ir::select(here, what(src), ir::f32(0.0)), {j});
                       },
                       {j});
  };
  return {pick("_values", [&](const Index& src) { return operand(x, src); }),
          pick("_indices", [&](const Index& src) { return to_float(src[axis]); })};
}

std::vector<Tensor> gather_nd_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &x = need(n, in, 0), &idx = need(n, in, 1);
  GatherNDSpec s = gather_nd_spec(c);
  const Shape& is = idx.shape;
  const auto lead = static_cast<int64_t>(is.size()) - 1;  // batch and tuple dimensions
  return {elementwise(name, out, [&](const Index& o) {
    Index src(o.begin(), o.begin() + s.batch);
    Index at(o.begin(), o.begin() + lead);
    at.push_back(Expr(int64_t{0}));
    for (int64_t d = 0; d < s.k; ++d) {
      // As Gather's computed indices: negative from the end, out of range clamped.
      int64_t len = x.shape[static_cast<size_t>(s.batch + d)];
      at.back() = Expr(d);
      Expr j = ir::Cast::make(ir::Type::int64(), operand(idx, at));
      src.push_back(clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1));
    }
    src.insert(src.end(), o.begin() + lead, o.end());
    return operand(x, src);
  })};
}

std::vector<Tensor> gather_elements_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand &x = need(n, in, 0), &idx = need(n, in, 1);
  auto axis = static_cast<size_t>(
      normalize_axis(n, n.get_int("axis", 0), static_cast<int64_t>(x.shape.size())));
  int64_t len = x.shape[axis];
  return {elementwise(name, out, [&](const Index& i) {
    // As Gather's computed indices: negative from the end, out of range clamped.
    Expr j = ir::Cast::make(ir::Type::int64(), operand(idx, i));
    Index src = i;
    src[axis] = clamp(ir::select(j < Expr(int64_t{0}), j + len, j), 0, len - 1);
    return operand(x, src);
  })};
}

std::vector<Tensor> depth_space_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  DepthSpaceSpec s = depth_space_spec(c);
  return {elementwise(name, out, [&](const Index& i) {
    std::array<Expr, 4> src = s.source<Expr>({i[0], i[1], i[2], i[3]});
    return operand(x, Index(src.begin(), src.end()));
  })};
}

std::vector<Tensor> trilu_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  const TeOperand& x = need(n, in, 0);
  TriluSpec s = trilu_spec(c);
  return {elementwise(name, out, [&](const Index& i) {
    Expr d = i[i.size() - 1] - i[i.size() - 2];  // column - row
    Expr keep = s.upper ? d >= Expr(s.k) : d <= Expr(s.k);
    return ir::select(keep, read_broadcast(x, i), ir::f32(0.0));
  })};
}

std::vector<Tensor> cumsum_te(const Graph& g, const Node& n, const OpContext& c, const std::vector<TeOperand>& in, const Shape& out,
                               const std::string& name) {
  // out[.., j, ..] sums x along the axis over the positions that come before j (or after,
  // reversed; j itself unless exclusive): one reduction over the whole axis with the others
  // masked out, quadratic in the axis's length.
  const TeOperand& x = need(n, in, 0);
  if (!x.tensor) not_implemented(n, "CumSum of a one-element constant");
  CumSumSpec s = cumsum_spec(c);
  IterVar r = ir::reduce_axis(x.shape[s.axis], "r");
  return {ir::compute(name, out, axis_names(out.size()),
                      [&](const Index& i) {
                        Index src = i;
                        src[s.axis] = r.var;
                        Expr j = i[s.axis];
                        Expr take = s.reverse ? (s.exclusive ? gt(r.var, j) : r.var >= j)
                                              : (s.exclusive ? r.var < j : r.var <= j);
                        return ir::sum(ir::select(take, operand(x, src), ir::f32(0.0)), {r});
                      },
                      {r})};
}

}  // namespace tf::graph::te
