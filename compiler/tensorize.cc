#include "compiler/tensorize.h"

#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/ir_mutator.h"
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

class Tensorizer : public IRMutator {
 public:
  explicit Tensorizer(const std::vector<TensorizeMark>& marks) : marks_(marks) {}

  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f) return IRMutator::mutate_stmt(s);
    for (const TensorizeMark& m : marks_) {
      if (f->var.same_as(m.var)) {
        done_.insert(m.var.get());
        return replace(*f, m);
      }
    }
    if (f->for_kind != ForKind::ThreadIdxX) return IRMutator::mutate_stmt(s);
    Expr outer = thread_x_;
    int64_t outer_extent = thread_x_extent_;
    thread_x_ = f->var;
    thread_x_extent_ = constant(f->extent).value_or(0);
    Stmt r = IRMutator::mutate_stmt(s);
    thread_x_ = outer;
    thread_x_extent_ = outer_extent;
    return r;
  }

  bool replaced(const TensorizeMark& m) const { return done_.count(m.var.get()) > 0; }

 private:
  [[noreturn]] void refuse(const TensorizeMark& m, const std::string& why) const {
    throw refusal(m, why);
  }

  Stmt replace(const For& k, const TensorizeMark& m) {
    const int64_t depth = warp_mma_k(m.intrinsic);
    if (constant(k.extent) != depth) {
      refuse(m, str("the loop runs ", to_string_or(k.extent), " times; the product's depth is ",
                    depth));
    }
    if (!thread_x_) refuse(m, "it is not inside a loop bound to threadIdx.x (the lanes of a warp)");
    if (thread_x_extent_ % kWarp != 0) {
      refuse(m, str("threadIdx.x runs ", thread_x_extent_,
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
    const Expr lane = thread_x_ % Expr(kWarp), g = lane / Expr(int64_t{4}),
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
    const Expr holder = thread_x_ / Expr(kWarp) * Expr(kWarp) + g / Expr(int64_t{2});
    for (int e = 0; e < depth / 4; ++e) {
      MmaPlace p0 = warp_mma_b(m.intrinsic, e, 0, 0), p1 = warp_mma_b(m.intrinsic, e, 0, 1);
      VarMap v{{k.var.get(), k_of(p0.row, p1.row)},
               {p.get(), g % Expr(int64_t{2})},
               {thread_x_.get(), holder}};
      operands.push_back(f32(simplify(substitute(b, v))));
    }
    for (int e = 0; e < 4; ++e) {
      MmaPlace c = warp_mma_c(e, 0, 0);
      operands.push_back(Load::make(Type::float32(), st->buffer,
                                    simplify(base + Expr(int64_t{2 * (c.row / 8) + c.col}))));
    }
    return Store::make(st->buffer, Call::make(m.intrinsic, operands),
                       Ramp::make(base, Expr(int64_t{1}), 4));
  }

  static std::string to_string_or(const Expr& e) {
    std::optional<int64_t> v = constant(e);
    return v ? std::to_string(*v) : std::string("a variable number of");
  }

  const std::vector<TensorizeMark>& marks_;
  std::set<const ExprNode*> done_;
  Expr thread_x_;
  int64_t thread_x_extent_ = 0;
};

}  // namespace

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
