#include "compiler/tensorize.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/simplify.h"

namespace tf::ir {
namespace {

constexpr int64_t kWarp = 32;

// A refusal naming the stage, the marked loop and its product, and why.
UserError refusal(const TensorizeMark& m, const std::string& why) {
  return UserError(str("tensorize on stage ", m.stage, ": loop '", m.var.as<Var>()->name, "' with ",
                       m.intrinsic, ": ", why));
}

std::optional<int64_t> constant(const Expr& e) {
  const Expr s = simplify(e);  // kept: the IntImm lives in it
  if (const IntImm* i = s.as<IntImm>()) return i->value;
  return std::nullopt;
}

// What the lanes of a warp share down a loop nest: the loop bound to threadIdx.x (the lanes'
// index) and its extent, every enclosing loop's variable, and the ranges of those whose bounds
// are constants. Tensorizer and FragmentPairs keep one.
struct LaneScope {
  Expr thread_x;
  int64_t thread_x_extent = 0;
  RangeMap ranges;
  std::set<const ExprNode*> loop_vars;

  // `body()` inside loop `f`: its variable enclosing, threadIdx.x's if it is bound to it.
  template <typename F>
  Stmt inside(const For& f, F body) {
    const std::optional<int64_t> lo = constant(f.min), n = constant(f.extent);
    if (lo && n && *n > 0) ranges[f.var.get()] = {*lo, *lo + *n - 1};
    loop_vars.insert(f.var.get());
    const Expr outer = thread_x;
    const int64_t outer_extent = thread_x_extent;
    if (f.for_kind == ForKind::ThreadIdxX) {
      thread_x = f.var;
      thread_x_extent = n.value_or(0);
    }
    Stmt r = body();
    thread_x = outer;
    thread_x_extent = outer_extent;
    ranges.erase(f.var.get());
    loop_vars.erase(f.var.get());
    return r;
  }

  // Whether `index` differs between the lanes of a warp only through the thread index: every
  // other variable an enclosing loop's (the same on all lanes: threadIdx.x runs whole warps),
  // nothing read or called to compute it (a loaded index may differ per lane).
  bool lane_only(const Expr& index) const {
    bool ok = true;
    post_order(index, [&](const Expr& x) {
      if (x.as<Load>() || x.as<Call>() ||
          (x.as<Var>() && !x.same_as(thread_x) && !loop_vars.count(x.get())))
        ok = false;
    });
    return ok;
  }

  // The thread index taken apart as 32 w + lane: w, a fresh variable over the block's warps,
  // and the ranges with it.
  struct Warp {
    Expr w;
    RangeMap ranges;
  };
  Warp warp() const {
    Warp out{Var::make("tf_warp", thread_x.type()), ranges};
    out.ranges[out.w.get()] = {0, thread_x_extent / kWarp - 1};
    return out;
  }
  // `e` at lane `lane` of warp `wp.w` (unsimplified).
  Expr at_lane(const Expr& e, const Warp& wp, int64_t lane) const {
    return substitute(e, VarMap{{thread_x.get(), wp.w * Expr(kWarp) + Expr(lane)}});
  }
};

class Tensorizer : public IRMutator {
 public:
  explicit Tensorizer(const std::vector<TensorizeMark>& marks) : marks_(marks) {}

  Stmt mutate_stmt(const Stmt& s) override {
    if (const Allocate* a = s.as<Allocate>(); a && a->scope == MemScope::Shared) {
      // The shared buffers in scope, by name: their sizes bound the rows ldmatrix may read.
      auto [it, fresh] = shared_.emplace(a->buffer, a->size);
      Stmt r = IRMutator::mutate_stmt(s);
      if (fresh) shared_.erase(it);
      return r;
    }
    const For* f = s.as<For>();
    if (!f) return IRMutator::mutate_stmt(s);
    for (const TensorizeMark& m : marks_) {
      if (f->var.same_as(m.var)) {
        done_.insert(m.var.get());
        return replace(*f, m);
      }
    }
    // The loops' ranges (where their bounds are constants), for the bounds of those rows.
    return scope_.inside(*f, [&] { return IRMutator::mutate_stmt(s); });
  }

  bool replaced(const TensorizeMark& m) const { return done_.count(m.var.get()) > 0; }

 private:
  [[noreturn]] void refuse(const TensorizeMark& m, const std::string& why) const {
    throw refusal(m, why);
  }

  Stmt replace(const For& k, const TensorizeMark& m) {
    if (is_wgmma(m.intrinsic)) return replace_wgmma(k, m);
    const int64_t depth = warp_mma_k(m.intrinsic);
    if (constant(k.extent) != depth) {
      refuse(m, str("the loop runs ", to_string_or(k.extent), " times; the product's depth is ",
                    depth));
    }
    if (!scope_.thread_x)
      refuse(m, "it is not inside a loop bound to threadIdx.x (the lanes of a warp)");
    if (scope_.thread_x_extent % kWarp != 0) {
      refuse(m, str("threadIdx.x runs ", scope_.thread_x_extent,
                    " threads; a warp-level product needs whole warps along x (a multiple of 32)"));
    }
    const For* l1 = k.body.as<For>();
    const For* l2 = l1 ? l1->body.as<For>() : nullptr;
    const Store* st = l2 ? l2->body.as<Store>() : nullptr;
    if (!l1 || !l2 || constant(l1->extent) != 2 || constant(l2->extent) != 2) {
      refuse(m,
             "its body is not two loops of extent 2 (the fragment's rows g, g + 8 and columns 2t, "
             "2t + 1)");
    }
    if (!st)
      refuse(m,
             "the innermost loop's body is not one store (a guard left by a tile that does not "
             "divide?)");
    // acc[i] = acc[i] + x * y
    const Binary* add = st->value.kind() == ExprKind::Add ? st->value.as<Binary>() : nullptr;
    const Load* old = add ? add->a.as<Load>() : nullptr;
    const Binary* mul = add && add->b.kind() == ExprKind::Mul ? add->b.as<Binary>() : nullptr;
    if (!old || !mul || old->buffer != st->buffer || !equal(old->index, st->index)) {
      refuse(m, str("the update of ", st->buffer, " is not ", st->buffer, "[i] = ", st->buffer,
                    "[i] + a * b"));
    }
    if (old->type != Type::float32())
      refuse(m, str(st->buffer, " is not float32 (the product accumulates in it)"));
    // Which inner loop is which, from the accumulator's strides.
    auto at = [&](const Expr& e, int64_t v1, int64_t v2) {
      return simplify(substitute(e, VarMap{{l1->var.get(), Expr(v1)}, {l2->var.get(), Expr(v2)}}));
    };
    const Expr base = at(st->index, 0, 0);
    std::optional<int64_t> s1 = constant(at(st->index, 1, 0) - base),
                           s2 = constant(at(st->index, 0, 1) - base);
    Expr h, p;
    if (s1 == 2 && s2 == 1) {
      h = l1->var;
      p = l2->var;
    } else if (s1 == 1 && s2 == 2) {
      h = l2->var;
      p = l1->var;
    } else {
      refuse(m, str(st->buffer, "'s four values are not contiguous (strides ",
                    s1 ? std::to_string(*s1) : "?", " and ", s2 ? std::to_string(*s2) : "?",
                    "; the rows' must be 2 and the columns' 1)"));
    }
    Expr a = mul->a, b = mul->b;
    if (uses_var(a, p) || uses_var(b, h)) std::swap(a, b);
    if (uses_var(a, p) || uses_var(b, h)) {
      refuse(m,
             "neither factor of the product is free of the column loop with the other free of the "
             "row loop");
    }
    const Expr lane = scope_.thread_x % Expr(kWarp), g = lane / Expr(int64_t{4}),
               t = lane % Expr(int64_t{4});
    auto f32 = [](const Expr& e) {
      return e.type() == Type::float32() ? e : Cast::make(Type::float32(), e);
    };
    // The fragment's k as a function of t: k(t) = k(0) + (k(1) - k(0)) t.
    auto k_of = [&](int k0, int k1) { return Expr(int64_t{k0}) + Expr(int64_t{k1 - k0}) * t; };
    std::vector<Expr> operands;
    for (int e = 0; e < depth / 2; ++e) {
      MmaPlace p0 = warp_mma_a(m.intrinsic, e, 0, 0), p1 = warp_mma_a(m.intrinsic, e, 0, 1);
      VarMap v{{k.var.get(), k_of(p0.col, p1.col)}, {h.get(), Expr(int64_t{p0.row / 8})}};
      operands.push_back(f32(simplify(substitute(a, v))));
    }
    // B's column g is held by the lane with t = g / 2, at p = g % 2, in the same warp.
    const Expr holder = scope_.thread_x / Expr(kWarp) * Expr(kWarp) + g / Expr(int64_t{2});
    for (int e = 0; e < depth / 4; ++e) {
      MmaPlace p0 = warp_mma_b(m.intrinsic, e, 0, 0), p1 = warp_mma_b(m.intrinsic, e, 0, 1);
      VarMap v{{k.var.get(), k_of(p0.row, p1.row)},
               {p.get(), g % Expr(int64_t{2})},
               {scope_.thread_x.get(), holder}};
      operands.push_back(f32(simplify(substitute(b, v))));
    }
    for (int e = 0; e < 4; ++e) {
      MmaPlace c = warp_mma_c(e, 0, 0);
      operands.push_back(Load::make(Type::float32(), st->buffer,
                                    simplify(base + Expr(int64_t{2 * (c.row / 8) + c.col}))));
    }
    // 16-bit fragments held in shared memory as ldmatrix reads them: one instruction each.
    std::vector<std::pair<Expr, Expr>> lets;
    if (m.intrinsic != kMmaTF32) {
      const char* widen = m.intrinsic == kMmaBF16 ? kBF16ToFloat : kF16ToFloat;
      const int b_first = static_cast<int>(depth / 2);  // B's operands follow A's
      for (auto [first, matrices, name] : {std::tuple{0, 4, "frag_a"}, std::tuple{b_first, 2, "frag_b"}}) {
        if (std::optional<FragmentRows> rows = fragment_rows(operands, first, matrices, widen)) {
          Expr v = Var::make(name, Type::int32().with_lanes(matrices));
          std::vector<Expr> args = {rows->row, Expr(int64_t{matrices})};
          if (rows->transposed) args.push_back(Expr(int64_t{1}));
          lets.emplace_back(v, Call::make(kLdMatrix, args));
          for (int e = 0; e < 2 * matrices; ++e) {
            Expr cond;
            held_16_bits(operands[static_cast<size_t>(first + e)], widen, cond);
            Expr x = Call::make(widen, {Call::make(kWordHalf, {v, Expr(int64_t{e / 2}), Expr(int64_t{e % 2})})});
            operands[static_cast<size_t>(first + e)] = cond ? Select::make(cond, x, FloatImm::make(0.0)) : x;
          }
        }
      }
    }
    // TF32: each operand a float32 of a shared tile, its own 32-bit word: ldmatrix's 16-byte rows
    // are four of them, lane (g, t) taking word t of row g as the m16n8k8 fragments lie (A's
    // four operands its four matrices, B's two its two), the bits as they are (the product
    // rounds them).
    if (m.intrinsic == kMmaTF32) {
      for (auto [first, matrices, name] :
           {std::tuple{0, 4, "frag_a"}, std::tuple{4, 2, "frag_b"}}) {
        if (std::optional<FragmentRows> rows = fragment_rows(operands, first, matrices, nullptr)) {
          Expr v = Var::make(name, Type::int32().with_lanes(matrices));
          lets.emplace_back(v, Call::make(kLdMatrix, {rows->row, Expr(int64_t{matrices})}));
          for (int e = 0; e < matrices; ++e) {
            Expr cond;
            held_32_bits(operands[static_cast<size_t>(first + e)], cond);
            Expr x = Call::make(kWordFloat, {v, Expr(int64_t{e})});
            operands[static_cast<size_t>(first + e)] =
                cond ? Select::make(cond, x, FloatImm::make(0.0)) : x;
          }
        }
      }
    }
    Stmt out = Store::make(st->buffer, Call::make(m.intrinsic, operands), Ramp::make(base, Expr(int64_t{1}), 4));
    for (size_t i = lets.size(); i-- > 0;) out = LetStmt::make(lets[i].first, lets[i].second, out);
    return out;
  }

  // A warpgroup-level product (tensorize.h): the marked loop of depth 16 over, optionally, the
  // warpgroup's 8-column tiles (accumulator stride 4), the rows g, g + 8 (stride 2) and the
  // columns 2t, 2t + 1 (stride 1) of a thread's accumulators; the factors 16-bit values of two
  // shared buffers in core matrices. Proves the layout, warpgroup by warpgroup, at every row and
  // k of A and column and k of B, and replaces the nest by one call on the tiles' first elements.
  Stmt replace_wgmma(const For& k, const TensorizeMark& m) {
    constexpr int64_t kGroup = 128;
    if (constant(k.extent) != 16) {
      refuse(m, str("the loop runs ", to_string_or(k.extent), " times; the product's depth is 16"));
    }
    if (!scope_.thread_x || !scope_.thread_x.as<Var>())
      refuse(m, "it is not inside a loop bound to threadIdx.x (the threads of a warpgroup)");
    if (scope_.thread_x_extent % kGroup != 0) {
      refuse(m, str("threadIdx.x runs ", scope_.thread_x_extent,
                    " threads; a warpgroup-level product needs whole warpgroups along x (a "
                    "multiple of 128)"));
    }
    // The loops inside, outermost first, down to the update.
    std::vector<const For*> loops;
    Stmt body = k.body;
    while (const For* f = body.as<For>()) {
      loops.push_back(f);
      body = f->body;
    }
    const Store* st = body.as<Store>();
    if (!st || loops.size() < 2 || loops.size() > 3) {
      refuse(m, "its body is not two or three loops (the warpgroup's 8-column tiles, rows g, g + 8, columns 2t, 2t + 1) "
                "around one store (a guard left by a tile that does not divide?)");
    }
    const Binary* add = st->value.kind() == ExprKind::Add ? st->value.as<Binary>() : nullptr;
    const Load* old = add ? add->a.as<Load>() : nullptr;
    const Binary* mul = add && add->b.kind() == ExprKind::Mul ? add->b.as<Binary>() : nullptr;
    if (!old || !mul || old->buffer != st->buffer || !equal(old->index, st->index) || old->type != Type::float32()) {
      refuse(m, str("the update of ", st->buffer, " is not ", st->buffer, "[i] = ", st->buffer, "[i] + a * b in float32"));
    }
    // Which loop is which, from the accumulator's strides: 4 (tiles), 2 (rows), 1 (columns).
    VarMap zero;
    for (const For* f : loops) zero[f->var.get()] = Expr(int64_t{0});
    const Expr base = simplify(substitute(st->index, zero));
    Expr tiles_var, h, p;
    int64_t tiles = 1;
    for (const For* f : loops) {
      VarMap one = zero;
      one[f->var.get()] = Expr(int64_t{1});
      const std::optional<int64_t> stride = constant(substitute(st->index, one) - base);
      const std::optional<int64_t> n = constant(f->extent);
      if (stride == 4 && n && !tiles_var) {
        tiles_var = f->var;
        tiles = *n;
      } else if (stride == 2 && n == 2 && !h) {
        h = f->var;
      } else if (stride == 1 && n == 2 && !p) {
        p = f->var;
      } else {
        refuse(m, str(st->buffer, "'s values are not the warpgroup's layout (loop '", f->var.as<Var>()->name,
                      "' of extent ", to_string_or(f->extent), " has stride ", stride ? std::to_string(*stride) : "?",
                      "; the tiles' must be 4, the rows' 2 and the columns' 1)"));
      }
    }
    if (!h || !p) refuse(m, "no loops of the rows g, g + 8 and columns 2t, 2t + 1 inside it");
    for (int64_t j = 0; j < tiles; ++j) {  // every accumulator where the product's layout has it
      for (int64_t e = 0; e < 4; ++e) {
        VarMap v{{h.get(), Expr(e / 2)}, {p.get(), Expr(e % 2)}};
        if (tiles_var) v[tiles_var.get()] = Expr(j);
        if (constant(substitute(st->index, v) - base) != 4 * j + e) {
          refuse(m, str(st->buffer, "'s values of tile ", j, " are not 4 consecutive ones at ", 4 * j));
        }
      }
    }
    if (tiles > 32) refuse(m, str(tiles, " tiles of 8 columns; the product's N is at most 256"));
    Expr a = mul->a, b = mul->b;
    auto free_of_columns = [&](const Expr& e) { return !uses_var(e, p) && !(tiles_var && uses_var(e, tiles_var)); };
    if (!free_of_columns(a) || uses_var(b, h)) std::swap(a, b);
    if (!free_of_columns(a) || uses_var(b, h)) {
      refuse(m, "neither factor of the product is free of the column loops with the other free of the row loop");
    }
    // Each factor: a 16-bit value of a shared buffer, widened; a select against zero around it
    // is dropped (the tensor cores read whole tiles), which is sound for guards of A's rows and
    // B's columns past the matrix (they reach only rows and columns of C that are not stored),
    // not for guards along K.
    const char* widen = m.intrinsic == kWgmmaBF16 ? kBF16ToFloat : kF16ToFloat;
    auto operand = [&](const Expr& e, const char* what) {
      Expr cond;
      const Call* w = held_16_bits(e, widen, cond);
      const Load* l = w ? w->args[0].as<Load>() : nullptr;
      if (!l || l->type != Type::uint16() || !shared_.count(l->buffer)) {
        refuse(m, str(what, " is not a ", widen == kBF16ToFloat ? "bfloat16" : "float16",
                      " value of a shared buffer: ", to_string(e)));
      }
      if (cond && uses_var(cond, k.var)) refuse(m, str(what, "'s guard depends on k: ", to_string(cond)));
      return l;
    };
    const Load* la = operand(a, "A's factor");
    const Load* lb = operand(b, "B's factor");
    // Thread l of warpgroup q: 128 q + l. Row r of A is warp r / 16's row g = r % 8 at h =
    // r % 16 / 8; column n of B is the thread with t = n % 8 / 2 (any warp of the group) at
    // p = n % 2, tile n / 8.
    const Expr x = scope_.thread_x;
    auto a_at = [&](int64_t q, int64_t r, int64_t kk) {
      return simplify(
          substitute(la->index, VarMap{{x.get(), Expr(kGroup * q + r / 16 * 32 + r % 8 * 4)},
                                       {h.get(), Expr(r % 16 / 8)},
                                       {k.var.get(), Expr(kk)}}),
          scope_.ranges);
    };
    auto b_at = [&](int64_t q, int64_t n, int64_t kk) {
      VarMap v{{x.get(), Expr(kGroup * q + n % 8 / 2)}, {p.get(), Expr(n % 2)}, {k.var.get(), Expr(kk)}};
      if (tiles_var) v[tiles_var.get()] = Expr(n / 8);
      return simplify(substitute(lb->index, v), scope_.ranges);
    };
    struct Layout {
      int64_t lbo = 0, sbo = 0;  // elements
    };
    // The core-matrix layout of an operand of `rows` rows at every warpgroup: its byte offsets,
    // the same for all, or a refusal naming the element that is not where they put it.
    auto layout = [&](const auto& at, int64_t rows, const char* what) {
      Layout out;
      for (int64_t q = 0; q < scope_.thread_x_extent / kGroup; ++q) {
        const Expr start = at(q, 0, 0);
        auto offset = [&](int64_t r, int64_t kk) { return constant(at(q, r, kk) - start); };
        const std::optional<int64_t> lbo = offset(0, 8), sbo = rows > 8 ? offset(8, 0) : std::optional<int64_t>(8 * 8);
        if (!lbo || !sbo || *lbo <= 0 || *sbo <= 0 || *lbo % 8 != 0 || *sbo % 8 != 0 || 2 * *lbo >= (1 << 18) ||
            2 * *sbo >= (1 << 18)) {
          refuse(m, str(what, " is not in core matrices: its second 8 of k are ", lbo ? std::to_string(*lbo) : "?",
                        " and its second 8 rows ", sbo ? std::to_string(*sbo) : "?",
                        " elements on (multiples of 8, below 2^17)"));
        }
        if (q > 0 && (*lbo != out.lbo || *sbo != out.sbo)) refuse(m, str(what, "'s layout differs between warpgroups"));
        out = {*lbo, *sbo};
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t kk = 0; kk < 16; ++kk) {
            const int64_t want = r / 8 * out.sbo + kk / 8 * out.lbo + r % 8 * 8 + kk % 8;
            if (offset(r, kk) != want) {
              refuse(m, str(what, "'s row ", r, ", k ", kk, " is not at element ", want,
                            " of its core matrices (warpgroup ", q, ")"));
            }
          }
        }
        if (known_multiple(start) % 8 != 0) refuse(m, str(what, "'s first element is not 16-byte aligned: ", to_string(start)));
      }
      return out;
    };
    const int64_t n_cols = 8 * tiles;
    const Layout A = layout(a_at, 64, "A"), B = layout(b_at, n_cols, "B");
    // The warpgroup's first elements, and the tiles inside their buffers.
    const Expr group_first = x / Expr(kGroup) * Expr(kGroup);
    auto first = [&](const Load* l, const VarMap& at) {
      return simplify(substitute(l->index, at), scope_.ranges);
    };
    VarMap a0{{x.get(), group_first}, {h.get(), Expr(int64_t{0})}, {k.var.get(), Expr(int64_t{0})}};
    VarMap b0{{x.get(), group_first}, {p.get(), Expr(int64_t{0})}, {k.var.get(), Expr(int64_t{0})}};
    if (tiles_var) b0[tiles_var.get()] = Expr(int64_t{0});
    const Expr a_first = first(la, a0), b_first = first(lb, b0);
    RangeMap ranges = scope_.ranges;
    ranges[x.get()] = {0, scope_.thread_x_extent - 1};
    for (auto [l, start, lay, rows] : {std::tuple{la, a_first, A, int64_t{64}}, std::tuple{lb, b_first, B, n_cols}}) {
      const int64_t last = (rows - 1) / 8 * lay.sbo + lay.lbo + (rows - 1) % 8 * 8 + 7;
      const std::optional<Interval> in = const_bounds(start, ranges);
      if (!in || in->lo < 0 || in->hi + last >= shared_.at(l->buffer)) {
        refuse(m, str("the tile of ", l->buffer, " read from ", to_string(start), " may pass its ",
                      shared_.at(l->buffer), " elements (the product reads whole tiles)"));
      }
    }
    std::vector<Expr> args = {Load::make(Type::uint16(), la->buffer, a_first), Expr(2 * A.lbo), Expr(2 * A.sbo),
                              Load::make(Type::uint16(), lb->buffer, b_first), Expr(2 * B.lbo), Expr(2 * B.sbo)};
    for (int64_t e = 0; e < 4 * tiles; ++e) args.push_back(Load::make(Type::float32(), st->buffer, simplify(base + Expr(e))));
    return Store::make(st->buffer, Call::make(m.intrinsic, args), Ramp::make(base, Expr(int64_t{1}), static_cast<int>(4 * tiles)));
  }

  // The row each lane supplies to ldmatrix for the `matrices` pairs of 16-bit values from
  // operand `first` on (a fragment of A: 4; of B: 2), as a Load of its 16 bytes, and whether the
  // matrices are read transposed (each pair's values a row apart, the pitch, rather than
  // consecutive); nothing where the pairs are not provably such rows (tensorize.h says what is
  // proved).
  struct FragmentRows {
    Expr row;
    bool transposed = false;
  };
  // `widen` null: TF32's operands, each one float32 value (a word of its own) of a shared
  // buffer, alone or under a select against +0.
  std::optional<FragmentRows> fragment_rows(const std::vector<Expr>& operands, int first,
                                            int matrices, const char* widen) {
    if (!scope_.thread_x.as<Var>() || scope_.thread_x_extent < kWarp) return std::nullopt;
    const int64_t per_word = widen ? 2 : 1;  // elements of the buffer in a 32-bit word
    std::string buffer;
    std::vector<Expr> lo_index;  // per pair: the index of its first value
    int64_t pitch = 1;           // the distance from a pair's first value to its second
    for (int j = 0; j < matrices; ++j) {
      const Load* l0 = nullptr;
      if (!widen) {
        Expr c;
        l0 = held_32_bits(operands[static_cast<size_t>(first + j)], c);
        if (!l0 || (j > 0 && l0->buffer != buffer)) return std::nullopt;
      } else {
        Expr c0, c1;
        const Call* w0 = held_16_bits(operands[static_cast<size_t>(first + 2 * j)], widen, c0);
        const Call* w1 = held_16_bits(operands[static_cast<size_t>(first + 2 * j + 1)], widen, c1);
        l0 = w0 ? w0->args[0].as<Load>() : nullptr;
        const Load* l1 = w1 ? w1->args[0].as<Load>() : nullptr;
        if (!l0 || !l1 || l0->buffer != l1->buffer || (j > 0 && l0->buffer != buffer) ||
            l0->type != Type::uint16() || l1->type != Type::uint16()) {
          return std::nullopt;
        }
        const std::optional<int64_t> gap = constant(l1->index - l0->index);
        if (!gap || *gap < 1 || (j > 0 && *gap != pitch)) return std::nullopt;
        pitch = *gap;
      }
      if (!scope_.lane_only(l0->index)) return std::nullopt;
      buffer = l0->buffer;
      lo_index.push_back(l0->index);
    }
    auto size = shared_.find(buffer);
    if (size == shared_.end()) return std::nullopt;
    // The answer depends only on these indices (their variables and those variables' ranges),
    // the buffer's size and the thread index: the products of one step share their fragments
    // (A's across a warp's column tiles, B's across its row tiles), so each is proved once.
    std::string key = str(buffer, '|', size->second, '|', matrices, '|', pitch, '|', per_word, '|',
                          scope_.thread_x.get(), '|', scope_.thread_x_extent);
    for (const Expr& index : lo_index) {
      key += '|' + to_string(index);
      post_order(index, [&](const Expr& x) {
        if (!x.as<Var>()) return;
        auto r = scope_.ranges.find(x.get());
        key +=
            str(':', x.get(),
                r == scope_.ranges.end() ? std::string("-") : str(r->second.lo, ',', r->second.hi));
      });
    }
    if (auto memo = fragment_memo_.find(key); memo != fragment_memo_.end()) return memo->second;
    std::optional<FragmentRows> rows;
    if (std::optional<Expr> row =
            prove_fragment_rows(lo_index, buffer, size->second, matrices, pitch, per_word))
      rows = {*row, pitch != 1};
    fragment_memo_.emplace(std::move(key), rows);
    return rows;
  }

  // fragment_rows's proof: each lane's pairs at the rows ldmatrix gives it, and the row address
  // each lane supplies. Plain (pitch 1): lane (g, t)'s pair j is row g of matrix j plus 2 t
  // values, row r supplied by lane 4 r. Transposed (ldmatrix.trans, a pair's values `pitch`
  // apart): lane (g, t)'s pair j is column g of rows 2 t and 2 t + 1 of matrix j, row 2 t supplied
  // by lane t and row 2 t + 1 a pitch after it. Lane l supplies row l % 8 of matrix
  // (l / 8) % matrices; every row 16-byte aligned.
  std::optional<Expr> prove_fragment_rows(const std::vector<Expr>& lo_index,
                                          const std::string& buffer, int64_t buffer_size,
                                          int matrices, int64_t pitch, int64_t per_word) {
    const bool transposed = pitch != 1;
    const int64_t row_elements = 4 * per_word;  // 16 bytes
    if (transposed && (pitch % 8 != 0 || per_word != 2)) return std::nullopt;
    // The thread index as 32 w + lane, w the warp (symbolic, in range), the lane given.
    const LaneScope::Warp wp = scope_.warp();
    const RangeMap& ranges = wp.ranges;
    auto at_lane = [&](const Expr& e, int64_t lane) {
      return simplify(scope_.at_lane(e, wp, lane), ranges);
    };
    auto row_of = [&](int j, int64_t r) {  // where row r of matrix j starts
      const Expr& lo = lo_index[static_cast<size_t>(j)];
      return transposed ? simplify(at_lane(lo, r / 2) + Expr(r % 2 * pitch), ranges)
                        : at_lane(lo, 4 * r);
    };
    bool inside = true;  // every row provably in the buffer
    for (int j = 0; j < matrices; ++j) {
      for (int64_t r = 0; r < 8; ++r) {
        const Expr row = row_of(j, r);
        if (known_multiple(row) % row_elements != 0) return std::nullopt;
        const std::optional<Interval> b = const_bounds(row, ranges);
        inside = inside && b && b->lo >= 0 && b->hi + row_elements <= buffer_size;
      }
      for (int64_t g = 0; g < 8; ++g) {
        for (int64_t t = 0; t < 4; ++t) {
          const Expr want =
              transposed ? row_of(j, 2 * t) + Expr(g) : row_of(j, g) + Expr(per_word * t);
          if (constant(at_lane(lo_index[static_cast<size_t>(j)], 4 * g + t) - want) != 0)
            return std::nullopt;
        }
      }
    }
    const int64_t last_row =
        (buffer_size - row_elements) / row_elements * row_elements;  // the last whole aligned row
    if (last_row < 0) return std::nullopt;
    const Expr lane = scope_.thread_x % Expr(kWarp);
    const Expr r = scope_.thread_x % Expr(int64_t{8});
    const Expr supplier = scope_.thread_x / Expr(kWarp) * Expr(kWarp) +
                          (transposed ? r / Expr(int64_t{2}) : r * Expr(int64_t{4}));
    const Expr which = lane / Expr(int64_t{8}) % Expr(int64_t{matrices});
    Expr row;
    for (int j = matrices - 1; j >= 0; --j) {
      Expr at =
          substitute(lo_index[static_cast<size_t>(j)], VarMap{{scope_.thread_x.get(), supplier}});
      row = row ? Select::make(eq(which, Expr(int64_t{j})), at, row) : at;
    }
    if (transposed) row = row + scope_.thread_x % Expr(int64_t{2}) * Expr(pitch);
    row = simplify(row);
    for (int64_t l = 0; l < kWarp; ++l) {  // as built, lane by lane
      if (constant(at_lane(row, l) - row_of(static_cast<int>(l / 8 % matrices), l % 8)) != 0)
        return std::nullopt;
    }
    // A row that may lie past the buffer (a tile trimmed to the matrix: rows past M) is one
    // whose values the guards discard (the pairs read it only where they hold): read the
    // buffer's last aligned row instead, as every lane must supply an address in it.
    if (!inside) row = max(min(row, Expr(last_row)), Expr(int64_t{0}));
    return Load::make(
        Type::int32().with_lanes(4), buffer,
        Ramp::make(simplify(per_word == 1 ? row : row / Expr(per_word)), Expr(int64_t{1}), 4));
  }

  static std::string to_string_or(const Expr& e) {
    std::optional<int64_t> v = constant(e);
    return v ? std::to_string(*v) : std::string("a variable number of");
  }

  const std::vector<TensorizeMark>& marks_;
  std::set<const ExprNode*> done_;
  LaneScope scope_;
  std::map<std::string, int64_t> shared_;  // the shared buffers in scope: their elements
  std::map<std::string, std::optional<FragmentRows>>
      fragment_memo_;  // fragment_rows's answers by their inputs
};

}  // namespace

namespace {
// `e` without a select against +0 around it (its condition to `cond`: a tile's guard), or null
// under a select of anything else.
Expr unless_padding(const Expr& e, Expr& cond) {
  const Select* sel = e.as<Select>();
  if (!sel) return e;
  const FloatImm* zero = sel->f.as<FloatImm>();
  if (!zero || zero->value != 0.0 || std::signbit(zero->value)) return Expr();
  cond = sel->cond;
  return sel->t;
}
}  // namespace

const Call* held_16_bits(const Expr& e, const char* widen, Expr& cond) {
  const Expr x = unless_padding(e, cond);
  const Call* w = x ? x.as<Call>() : nullptr;
  return w && w->name == widen && w->type.lanes == 1 ? w : nullptr;
}

const Load* held_32_bits(const Expr& e, Expr& cond) {
  const Expr x = unless_padding(e, cond);
  const Load* l = x ? x.as<Load>() : nullptr;
  return l && l->type == Type::float32() ? l : nullptr;
}

namespace {
// The wait for the accumulators `st` stored, `pending` of the thread's latest products left
// incomplete: acc[ramp] = wgmma_wait(pending, acc[base] .. acc[base + n - 1]).
Stmt wait_after(const Store& st, int64_t pending = 0) {
  const Ramp* r = st.index.as<Ramp>();
  TF_CHECK(r, "wgmma_waits: a product stored at a non-ramp index");
  std::vector<Expr> args = {Expr(pending)};
  for (int e = 0; e < r->lanes; ++e)
    args.push_back(Load::make(Type::float32(), st.buffer, simplify(r->base + Expr(int64_t{e}))));
  return Store::make(st.buffer, Call::make(kWgmmaWait, args), st.index);
}

const Barrier* async_reads(const Stmt& s) {
  const Barrier* b = s.as<Barrier>();
  return b && b->sync == Barrier::Kind::AsyncReads ? b : nullptr;
}

// Each run of products into one accumulator is waited for (0 pending) right after it, unless
// the run is part of an iteration of a pipelined loop that keeps its products in flight: the
// statements of a block up to an AsyncReads mark of p > 0 iterations, in which every product is
// a statement of the block itself and nothing else touches their accumulators. Then the mark
// becomes the waits for each accumulator with the iteration's products times p pending (each
// product is a group of its own), and the AsyncReads mark of 0 after the loop the waits with
// none pending. Marks without such products (an iteration that reads its accumulators, or
// products inside a loop of its own) go: their runs are waited for at once.
class WgmmaWaits : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    if (const Store* st = wgmma_store(s)) return Block::make({s, wait_after(*st)});
    if (async_reads(s)) return Block::make({});  // alone: no products before it in its block
    const Block* b = s.as<Block>();
    if (!b) return IRMutator::mutate_stmt(s);
    const std::vector<Stmt>& in = b->stmts;
    std::vector<Stmt> out;
    size_t segment = 0;  // first statement after the last mark
    for (size_t i = 0; i < in.size(); ++i) {
      const Barrier* mark = async_reads(in[i]);
      if (!mark) continue;
      if (mark->pending > 0 && in_flight(in, segment, i, out, mark->pending)) {
        segment = i + 1;
        continue;
      }
      waited(in, segment, i, out);
      if (mark->pending == 0) {  // after a loop that kept its products in flight: all complete now
        for (const Stmt& st : pending_) out.push_back(wait_after(*st.as<Store>()));
        pending_.clear();
      }
      segment = i + 1;
    }
    waited(in, segment, in.size(), out);
    return Block::make(out);
  }

 private:
  // Statements [from, to) of `in` onto `out`, each run of products waited for at its end.
  void waited(const std::vector<Stmt>& in, size_t from, size_t to, std::vector<Stmt>& out) {
    for (size_t i = from; i < to; ++i) {
      const Store* st = wgmma_store(in[i]);
      if (!st) {
        out.push_back(mutate_stmt(in[i]));
        continue;
      }
      out.push_back(in[i]);
      const Store* next = i + 1 < to ? wgmma_store(in[i + 1]) : nullptr;
      if (!next || !same_accumulators(*st, *next)) out.push_back(wait_after(*st));
    }
  }

  // Statements [from, to) of `in` onto `out` with their products left in flight and waited for
  // at `to` (the mark) with `iterations` iterations' products pending, if that is sound; false
  // (nothing written) otherwise.
  bool in_flight(const std::vector<Stmt>& in, size_t from, size_t to, std::vector<Stmt>& out,
                 int iterations) {
    std::vector<Stmt> products;  // one store of each accumulator
    std::set<std::string> accumulators;
    int64_t count = 0;
    for (size_t i = from; i < to; ++i) {
      const Store* st = wgmma_store(in[i]);
      if (!st) continue;
      ++count;
      accumulators.insert(st->buffer);
      add_once(products, in[i]);
    }
    if (count == 0) return false;
    for (size_t i = from; i < to; ++i) {
      if (wgmma_store(in[i])) continue;
      if (!call_named(in[i], is_wgmma).empty() || touches(in[i], accumulators)) return false;
    }
    for (size_t i = from; i < to; ++i)
      out.push_back(wgmma_store(in[i]) ? in[i] : mutate_stmt(in[i]));
    for (const Stmt& p : products) {
      out.push_back(wait_after(*p.as<Store>(), count * iterations));
      add_once(pending_, p);
    }
    return true;
  }

  // Adds the product `s` to `stores` unless one of them stores the same accumulators.
  static void add_once(std::vector<Stmt>& stores, const Stmt& s) {
    const Store* st = s.as<Store>();
    for (const Stmt& x : stores) {
      if (same_accumulators(*x.as<Store>(), *st)) return;
    }
    stores.push_back(s);
  }

  // Products left in flight by the loop just lowered (one store of each accumulator), for the
  // mark after it.
  std::vector<Stmt> pending_;
};
}  // namespace

namespace {
// The two-matrix fragment load `s` lets, or null.
const Call* ldmatrix_x2(const Expr& value) {
  const Call* c = value.as<Call>();
  return c && c->name == kLdMatrix && c->args.size() >= 2 && as_const_int(c->args[1]) &&
                 *as_const_int(c->args[1]) == 2
             ? c
             : nullptr;
}

// The buffer a fragment load reads.
const std::string& fragment_buffer(const Call& c) { return c.args[0].as<Load>()->buffer; }

// Rewrites each word_half(v, j, h) / word_float(v, j) of `var` to read `into` at j + `offset`
// (any other use of `var` stays: the caller checks that none is left).
class FragmentWords : public IRMutator {
 public:
  FragmentWords(Expr var, Expr into, int64_t offset)
      : var_(std::move(var)), into_(std::move(into)), offset_(offset) {}
  Expr mutate_expr(const Expr& e) override {
    if (const Call* c = e.as<Call>();
        c && (c->name == kWordHalf || c->name == kWordFloat) && c->args[0].same_as(var_)) {
      std::vector<Expr> args = c->args;
      args[0] = into_;
      args[1] = Expr(*as_const_int(c->args[1]) + offset_);
      return Call::make(c->name, args);
    }
    return IRMutator::mutate_expr(e);
  }

 private:
  Expr var_, into_;
  int64_t offset_;
};

// pair_fragment_loads (tensorize.h): in each block, the distinct two-matrix loads of the same
// shared buffer, paired in the order they first appear.
class FragmentPairs : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    if (const For* f = s.as<For>())
      return scope_.inside(*f, [&] { return IRMutator::mutate_stmt(s); });
    const Block* b = s.as<Block>();
    if (!b) return IRMutator::mutate_stmt(s);
    std::vector<Stmt> stmts;
    for (const Stmt& x : b->stmts) stmts.push_back(mutate_stmt(x));
    if (!scope_.thread_x || scope_.thread_x_extent < kWarp || scope_.thread_x_extent % kWarp != 0)
      return Block::make(stmts);
    return paired(stmts);
  }

 private:
  struct Candidate {
    Expr call;           // an ldmatrix x2
    size_t first, last;  // the statements that let it
  };

  // The lets at the head of statement `s`, outermost first.
  static std::vector<const LetStmt*> head_lets(const Stmt& s) {
    std::vector<const LetStmt*> lets;
    for (const LetStmt* l = s.as<LetStmt>(); l; l = l->body.as<LetStmt>()) lets.push_back(l);
    return lets;
  }

  // Whether `call` reads a row (a Ramp) that only the thread index and enclosing loops'
  // variables select, so that its load may move anywhere in the block.
  bool movable(const Call& call) const {
    const Ramp* row = call.args[0].as<Load>()->index.as<Ramp>();
    return row && scope_.lane_only(row->base) && scope_.lane_only(row->stride);
  }
  // Whether `row` is the same on lanes l and l + 16 of every warp (then a two-matrix load's
  // rows, which only its lanes 0-15 supply, serve the upper half of a four-matrix one as they
  // are).
  bool repeats_every_16_lanes(const Expr& row) const {
    const LaneScope::Warp wp = scope_.warp();
    for (int64_t l = 0; l < 16; ++l) {
      const Expr gap =
          simplify(scope_.at_lane(row, wp, l + 16) - scope_.at_lane(row, wp, l), wp.ranges);
      const IntImm* zero = gap.as<IntImm>();
      if (!zero || zero->value != 0) return false;
    }
    return true;
  }

  // Nothing in statements [from, to] writes `buffer`, waits or synchronizes.
  static bool quiet(const std::vector<Stmt>& stmts, size_t from, size_t to,
                    const std::string& buffer) {
    bool ok = true;
    for (size_t i = from; i <= to && ok; ++i) {
      post_order(
          stmts[i], [](const Expr&) {},
          [&](const Stmt& x) {
            if (x.as<Barrier>() || x.as<Prefetch>() ||
                (x.as<Store>() && x.as<Store>()->buffer == buffer))
              ok = false;
          });
    }
    return ok;
  }

  // Statement `s` with its lets of `call` dropped and their words read from `into` at `offset`;
  // null where such a let's variable has another use.
  static Stmt reread(const Stmt& s, const Expr& call, const Expr& into, int64_t offset) {
    if (const Block* b = s.as<Block>()) {  // a later pair's load around the rest
      std::vector<Stmt> stmts;
      for (const Stmt& x : b->stmts) {
        stmts.push_back(reread(x, call, into, offset));
        if (!stmts.back()) return Stmt();
      }
      return Block::make(stmts);
    }
    const LetStmt* l = s.as<LetStmt>();
    if (!l) return s;
    Stmt body = reread(l->body, call, into, offset);
    if (!body) return Stmt();
    if (!equal(l->value, call))
      return body.same_as(l->body) ? s : LetStmt::make(l->var, l->value, body);
    FragmentWords words(l->var, into, offset);
    body = words.mutate_stmt(body);
    return uses_var(body, l->var) ? Stmt() : body;
  }

  Stmt paired(std::vector<Stmt> stmts) {
    std::vector<Candidate> found;
    for (size_t i = 0; i < stmts.size(); ++i) {
      for (const LetStmt* l : head_lets(stmts[i])) {
        if (!ldmatrix_x2(l->value)) continue;
        auto same = std::find_if(found.begin(), found.end(),
                                 [&](const Candidate& c) { return equal(c.call, l->value); });
        if (same == found.end()) {
          found.push_back({l->value, i, i});
        } else {
          same->last = i;
        }
      }
    }
    // Greedily, in order of first appearance: each with the next one it can pair with.
    std::vector<bool> used(found.size(), false);
    struct Pair {
      size_t a, b, first, last;
    };
    std::vector<Pair> pairs;
    for (size_t i = 0; i < found.size(); ++i) {
      if (used[i]) continue;
      const Call& ca = *found[i].call.as<Call>();
      if (!movable(ca)) continue;
      for (size_t j = i + 1; j < found.size(); ++j) {
        const Call& cb = *found[j].call.as<Call>();
        if (used[j] || fragment_buffer(ca) != fragment_buffer(cb) ||
            ldmatrix_transposed(ca) != ldmatrix_transposed(cb) || !movable(cb)) {
          continue;
        }
        const size_t first = std::min(found[i].first, found[j].first),
                     last = std::max(found[i].last, found[j].last);
        if (!quiet(stmts, first, last, fragment_buffer(ca))) continue;
        used[i] = used[j] = true;
        pairs.push_back({i, j, first, last});
        break;
      }
    }
    // From the last pair's first statement back, each pair's load wraps the rest of the block.
    std::sort(pairs.begin(), pairs.end(),
              [](const Pair& x, const Pair& y) { return x.first < y.first; });
    std::vector<Stmt> tail;
    size_t end = stmts.size();
    for (size_t p = pairs.size(); p-- > 0;) {
      const Pair& pr = pairs[p];
      const Call& ca = *found[pr.a].call.as<Call>();
      const Call& cb = *found[pr.b].call.as<Call>();
      const Expr var = Var::make("frag_b4", Type::int32().with_lanes(4));
      std::vector<Stmt> rest(stmts.begin() + static_cast<std::ptrdiff_t>(pr.first),
                             stmts.begin() + static_cast<std::ptrdiff_t>(end));
      for (const Stmt& t : tail) rest.push_back(t);
      bool ok = true;
      for (Stmt& x : rest) {
        x = reread(x, found[pr.a].call, var, 0);
        if (x) x = reread(x, found[pr.b].call, var, 2);
        ok = ok && static_cast<bool>(x);
        if (!ok) break;
      }
      if (!ok) continue;  // (tail keeps what the later pairs made of it)
      // Lanes 0-15 supply the first load's rows, 16-31 the second's: as its own lanes 0-15 do
      // where its row repeats every 16 lanes, else read at lane - 16. (Both rows are Ramps:
      // movable.)
      const Load* ra = ca.args[0].as<Load>();
      const Ramp* a_ramp = ra->index.as<Ramp>();
      const Ramp* b_ramp = cb.args[0].as<Load>()->index.as<Ramp>();
      const Expr& x = scope_.thread_x;
      Expr upper = b_ramp->base;
      if (!repeats_every_16_lanes(upper))
        upper = substitute(upper, VarMap{{x.get(), x - Expr(int64_t{16})}});
      const Expr low_half = x % Expr(kWarp) < Expr(int64_t{16});
      const Expr row = Load::make(
          ra->type, ra->buffer,
          Ramp::make(simplify(Select::make(low_half, a_ramp->base, upper)), Expr(int64_t{1}), 4));
      std::vector<Expr> args = {row, Expr(int64_t{4})};
      if (ldmatrix_transposed(ca)) args.push_back(Expr(int64_t{1}));
      tail = {LetStmt::make(var, Call::make(kLdMatrix, args), Block::make(rest))};
      end = pr.first;
    }
    std::vector<Stmt> out(stmts.begin(), stmts.begin() + static_cast<std::ptrdiff_t>(end));
    for (const Stmt& t : tail) out.push_back(t);
    return Block::make(out);
  }

  LaneScope scope_;
};
}  // namespace

Stmt pair_fragment_loads(const Stmt& s) {
  FragmentPairs p;
  return p.mutate_stmt(s);
}

Stmt insert_wgmma_waits(const Stmt& s) {
  WgmmaWaits w;
  return w.mutate_stmt(s);
}

Stmt tensorize(const Stmt& s, const std::vector<TensorizeMark>& marks) {
  if (marks.empty()) return s;
  Tensorizer t(marks);
  Stmt out = t.mutate_stmt(simplify(s));
  for (const TensorizeMark& m : marks) {
    if (!t.replaced(m)) {
      throw refusal(m,
                    "it is not in the lowered code (the stage inlined, or the loop of extent 1)");
    }
  }
  return out;
}

}  // namespace tf::ir
