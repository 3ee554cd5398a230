#include "compiler/simplify.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

#include "compiler/ir_mutator.h"

namespace tf::ir {
namespace {

constexpr int64_t kBig = int64_t{1} << 60;  // ranges beyond this count as unknown

std::optional<Interval> checked(int64_t lo, int64_t hi) {
  if (lo < -kBig || hi > kBig) return std::nullopt;
  return Interval{lo, hi};
}

}  // namespace

std::optional<Interval> const_bounds(const Expr& e, const RangeMap& ranges) {
  if (!e.type().is_index()) return std::nullopt;
  switch (e.kind()) {
    case ExprKind::IntImm: {
      int64_t v = e.as<IntImm>()->value;
      return Interval{v, v};
    }
    case ExprKind::Var: {
      auto it = ranges.find(e.get());
      if (it == ranges.end()) return std::nullopt;
      return it->second;
    }
    case ExprKind::Broadcast: return const_bounds(e.as<Broadcast>()->value, ranges);
    case ExprKind::Ramp: {
      const Ramp* r = e.as<Ramp>();
      auto b = const_bounds(r->base, ranges);
      const int64_t* s = as_const_int(r->stride);
      if (!b || !s) return std::nullopt;
      int64_t span = *s * (r->lanes - 1);
      return checked(b->lo + std::min<int64_t>(0, span), b->hi + std::max<int64_t>(0, span));
    }
    case ExprKind::Add:
    case ExprKind::Sub:
    case ExprKind::Mul:
    case ExprKind::Min:
    case ExprKind::Max: {
      const Binary* n = e.as<Binary>();
      auto a = const_bounds(n->a, ranges);
      auto b = const_bounds(n->b, ranges);
      if (!a || !b) return std::nullopt;
      if (std::max({std::abs(a->lo), std::abs(a->hi), std::abs(b->lo), std::abs(b->hi)}) > kBig / 4) {
        return std::nullopt;
      }
      switch (e.kind()) {
        case ExprKind::Add: return checked(a->lo + b->lo, a->hi + b->hi);
        case ExprKind::Sub: return checked(a->lo - b->hi, a->hi - b->lo);
        case ExprKind::Min: return Interval{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
        case ExprKind::Max: return Interval{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
        default: {
          if (a->hi - a->lo > (int64_t{1} << 30) && b->hi - b->lo > (int64_t{1} << 30)) return std::nullopt;
          int64_t p[] = {a->lo * b->lo, a->lo * b->hi, a->hi * b->lo, a->hi * b->hi};
          return checked(*std::min_element(p, p + 4), *std::max_element(p, p + 4));
        }
      }
    }
    case ExprKind::Div: {
      const Binary* n = e.as<Binary>();
      auto a = const_bounds(n->a, ranges);
      auto c = const_bounds(n->b, ranges);
      if (!a || !c || c->lo != c->hi || c->lo <= 0) return std::nullopt;
      return Interval{floor_div(a->lo, c->lo), floor_div(a->hi, c->lo)};
    }
    case ExprKind::Mod: {
      const Binary* n = e.as<Binary>();
      auto c = const_bounds(n->b, ranges);
      if (!c || c->lo != c->hi || c->lo <= 0) return std::nullopt;
      auto a = const_bounds(n->a, ranges);
      if (a && a->lo >= 0 && a->hi < c->lo) return a;
      return Interval{0, c->lo - 1};
    }
    case ExprKind::Select: {
      const Select* s = e.as<Select>();
      auto t = const_bounds(s->t, ranges);
      auto f = const_bounds(s->f, ranges);
      if (!t || !f) return std::nullopt;
      return Interval{std::min(t->lo, f->lo), std::max(t->hi, f->hi)};
    }
    default:
      return std::nullopt;
  }
}

namespace {

// sum(coef * atom) + constant, for scalar Int64 expressions.
struct Linear {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;

  void add(const Expr& atom, int64_t coef) {
    for (auto& [a, c] : terms) {
      if (equal(a, atom)) {
        c += coef;
        return;
      }
    }
    terms.emplace_back(atom, coef);
  }
};

void linearize(const Expr& e, int64_t scale, Linear& out) {
  if (const int64_t* c = as_const_int(e)) {
    out.constant += scale * *c;
    return;
  }
  const Binary* b = e.as<Binary>();
  if (b && e.kind() == ExprKind::Add) {
    linearize(b->a, scale, out);
    linearize(b->b, scale, out);
    return;
  }
  if (b && e.kind() == ExprKind::Sub) {
    linearize(b->a, scale, out);
    linearize(b->b, -scale, out);
    return;
  }
  if (b && e.kind() == ExprKind::Mul) {
    if (const int64_t* c = as_const_int(b->b)) return linearize(b->a, scale * *c, out);
    if (const int64_t* c = as_const_int(b->a)) return linearize(b->b, scale * *c, out);
  }
  out.add(e, scale);
}

// c*(x/c) + x%c == x for floor division (x/c and x%c with the same multiplier), which
// fusing two loops and indexing the fused tensor by them produces ((p/OW)*OW + p%OW).
void recombine_div_mod(Linear& l) {
  for (size_t i = 0; i < l.terms.size(); ++i) {
    const Binary* d = l.terms[i].first.kind() == ExprKind::Div ? l.terms[i].first.as<Binary>() : nullptr;
    const int64_t* c = d ? as_const_int(d->b) : nullptr;
    if (!c || *c <= 0 || l.terms[i].second % *c != 0) continue;
    int64_t k = l.terms[i].second / *c;
    for (size_t j = 0; j < l.terms.size(); ++j) {
      const Binary* m = l.terms[j].first.kind() == ExprKind::Mod ? l.terms[j].first.as<Binary>() : nullptr;
      if (!m || l.terms[j].second != k || !equal(m->b, d->b) || !equal(m->a, d->a)) continue;
      Expr x = d->a;
      l.terms[i].second = 0;
      l.terms[j].second = 0;
      linearize(x, k, l);
      break;
    }
  }
}

Expr rebuild(const Linear& l) {
  Expr result;
  for (const auto& [atom, coef] : l.terms) {
    if (coef == 0) continue;
    if (!result) {
      result = coef == 1 ? atom : Binary::make(ExprKind::Mul, atom, IntImm::make(coef));
    } else if (coef > 0) {
      Expr t = coef == 1 ? atom : Binary::make(ExprKind::Mul, atom, IntImm::make(coef));
      result = Binary::make(ExprKind::Add, result, t);
    } else {
      Expr t = coef == -1 ? atom : Binary::make(ExprKind::Mul, atom, IntImm::make(-coef));
      result = Binary::make(ExprKind::Sub, result, t);
    }
  }
  if (!result) return IntImm::make(l.constant);
  if (l.constant > 0) return Binary::make(ExprKind::Add, result, IntImm::make(l.constant));
  if (l.constant < 0) return Binary::make(ExprKind::Sub, result, IntImm::make(-l.constant));
  return result;
}

bool is_scalar_int(const Expr& e) { return e.type().is_index() && !e.type().is_vector(); }

class Simplifier : public IRMutator {
 public:
  explicit Simplifier(const RangeMap& ranges) : ranges_(ranges) {}

  Expr mutate_expr(const Expr& e) override {
    if (const Let* l = e.as<Let>()) return visit_let(l);
    return node(IRMutator::mutate_expr(e));
  }

  // `x` simplified where its operands already are. Rules that build a node from simplified
  // parts (a ramp's base plus a broadcast's value, a comparison's difference) simplify it with
  // node(), not mutate_expr(), which would walk the parts again: each level of a vector
  // expression re-walked every level below it (simplify was 28% of DenseNet-121's compile CPU,
  // 20% after). div_mod's scalar rewrites still call mutate_expr: they build nodes around parts
  // not yet simplified (a new Mod inside a product).
  Expr node(const Expr& x) {
    switch (x.kind()) {
      case ExprKind::Add:
      case ExprKind::Sub:
      case ExprKind::Mul: return arith(x);
      case ExprKind::Div:
      case ExprKind::Mod: return div_mod(x);
      case ExprKind::Min:
      case ExprKind::Max: return min_max(x);
      case ExprKind::EQ:
      case ExprKind::NE:
      case ExprKind::LT:
      case ExprKind::LE: return compare(x);
      case ExprKind::And:
      case ExprKind::Or: return logical(x);
      case ExprKind::Not: {
        if (auto c = as_const_bool(x.as<Not>()->a)) return IntImm::make_bool(!*c);
        return x;
      }
      case ExprKind::Select: {
        const Select* s = x.as<Select>();
        if (auto c = as_const_bool(s->cond)) return *c ? s->t : s->f;
        if (const Broadcast* b = s->cond.as<Broadcast>()) {
          if (auto c = as_const_bool(b->value)) return *c ? s->t : s->f;
        }
        if (is_scalar_int(x)) return hoist_shared_addend(s, x);
        return x;
      }
      case ExprKind::Ramp: {
        const Ramp* r = x.as<Ramp>();
        if (is_const(r->stride, 0)) return Broadcast::make(r->base, r->lanes);
        return x;
      }
      default: return x;
    }
  }

  Stmt mutate_stmt(const Stmt& s) override {
    switch (s.kind()) {
      case StmtKind::For: return visit_for(s);
      case StmtKind::LetStmt: return visit_let_stmt(s.as<LetStmt>());
      case StmtKind::IfThenElse: {
        const IfThenElse* i = s.as<IfThenElse>();
        Expr c = mutate_expr(i->cond);
        if (auto v = as_const_bool(c)) {
          if (*v) return mutate_stmt(i->then_case);
          return i->else_case ? mutate_stmt(i->else_case) : Block::make({});
        }
        Stmt t = mutate_stmt(i->then_case);
        Stmt f = i->else_case ? mutate_stmt(i->else_case) : Stmt();
        return IfThenElse::make(c, t, f);
      }
      default: return IRMutator::mutate_stmt(s);
    }
  }

 private:
  Stmt visit_for(const Stmt& s) {
    const For* f = s.as<For>();
    Expr mn = mutate_expr(f->min), ext = mutate_expr(f->extent);
    if (is_const(ext, 0)) return Block::make({});
    // A unit loop bound to the GPU grid stays: it says the launch has one block or thread there.
    if (is_const(ext, 1) && !is_gpu_binding(f->for_kind)) return mutate_stmt(substitute(f->body, {{f->var.get(), mn}}));
    auto lo = const_bounds(mn, ranges_);
    auto n = const_bounds(ext, ranges_);
    if (lo && n) ranges_[f->var.get()] = Interval{lo->lo, lo->hi + n->hi - 1};
    Stmt body = mutate_stmt(f->body);
    ranges_.erase(f->var.get());
    if (is_empty(body)) return body;
    if (mn.same_as(f->min) && ext.same_as(f->extent) && body.same_as(f->body)) return s;
    return For::make(f->var, mn, ext, f->for_kind, body, f->parallel_inner);
  }

  static bool is_empty(const Stmt& s) {
    const Block* b = s.as<Block>();
    return b && b->stmts.empty();
  }

  Stmt visit_let_stmt(const LetStmt* l) {
    Expr v = mutate_expr(l->value);
    if (v.as<IntImm>() || v.as<Var>()) return mutate_stmt(substitute(l->body, {{l->var.get(), v}}));
    if (auto r = const_bounds(v, ranges_)) ranges_[l->var.get()] = *r;
    Stmt body = mutate_stmt(l->body);
    ranges_.erase(l->var.get());
    return LetStmt::make(l->var, v, body);
  }

  Expr visit_let(const Let* l) {
    Expr v = mutate_expr(l->value);
    if (v.as<IntImm>() || v.as<Var>()) return mutate_expr(substitute(l->body, {{l->var.get(), v}}));
    if (auto r = const_bounds(v, ranges_)) ranges_[l->var.get()] = *r;
    Expr body = mutate_expr(l->body);
    ranges_.erase(l->var.get());
    return Let::make(l->var, v, body);
  }

  // select(c, A + k, B + k) == select(c, A, B) + k: the terms both branches have with the same
  // coefficient, and the smaller of their constants, added outside the select. A fragment's lane
  // addresses (ldmatrix: a select over the lane's row) differ from tile to tile and from step to
  // step only by such terms: once outside, every tile's select is the same one (computed once a
  // kernel), and the division by the word size that follows distributes over what was taken
  // out (each iteration's buffer offset, each tile's constant), leaving an address register
  // plus an immediate per load where each load had a chain of a dozen integer operations.
  Expr hoist_shared_addend(const Select* s, const Expr& x) {
    Linear t, f;
    linearize(s->t, 1, t);
    linearize(s->f, 1, f);
    Linear shared;
    shared.constant = std::min(t.constant, f.constant);
    for (const auto& [atom, coef] : t.terms) {
      if (coef == 0) continue;
      for (const auto& [other, c] : f.terms) {
        if (c == coef && equal(atom, other)) {
          shared.add(atom, coef);
          break;
        }
      }
    }
    if (shared.terms.empty() && shared.constant == 0) return x;
    auto without_shared = [&](Linear l) {
      for (const auto& [atom, coef] : shared.terms) l.add(atom, -coef);
      l.constant -= shared.constant;
      return rebuild(l);
    };
    Linear out = shared;
    out.add(Select::make(s->cond, without_shared(t), without_shared(f)), 1);
    return rebuild(out);
  }

  // Add, Sub, Mul.
  Expr arith(const Expr& x) {
    const Binary* b = x.as<Binary>();
    if (x.type().is_vector()) return vector_arith(x.kind(), b->a, b->b, x);
    if (!is_scalar_int(x)) return fold_float(x);
    if (x.kind() == ExprKind::Mul && !as_const_int(b->a) && !as_const_int(b->b)) return x;
    Linear l;
    linearize(x, 1, l);
    recombine_div_mod(l);
    return rebuild(l);
  }

  Expr fold_float(const Expr& x) {
    const Binary* b = x.as<Binary>();
    const FloatImm* fa = b->a.as<FloatImm>();
    const FloatImm* fb = b->b.as<FloatImm>();
    if (!fa || !fb) return x;
    switch (x.kind()) {
      case ExprKind::Add: return FloatImm::make(static_cast<float>(fa->value + fb->value));
      case ExprKind::Sub: return FloatImm::make(static_cast<float>(fa->value - fb->value));
      case ExprKind::Mul: return FloatImm::make(static_cast<float>(fa->value * fb->value));
      default: return x;
    }
  }

  Expr vector_arith(ExprKind k, const Expr& a, const Expr& b, const Expr& orig) {
    const Broadcast* ba = a.as<Broadcast>();
    const Broadcast* bb = b.as<Broadcast>();
    const Ramp* ra = a.as<Ramp>();
    const Ramp* rb = b.as<Ramp>();
    int lanes = orig.type().lanes;
    if (ba && bb) return Broadcast::make(node(Binary::make(k, ba->value, bb->value)), lanes);
    auto s = [&](const Expr& e) { return node(e); };
    if (k == ExprKind::Add || k == ExprKind::Sub) {
      if (ra && rb) return ramp(s(Binary::make(k, ra->base, rb->base)), s(Binary::make(k, ra->stride, rb->stride)), lanes);
      if (ra && bb) return ramp(s(Binary::make(k, ra->base, bb->value)), ra->stride, lanes);
      if (ba && rb) {
        Expr stride = k == ExprKind::Add ? rb->stride : s(Binary::make(ExprKind::Sub, IntImm::make(0), rb->stride));
        return ramp(s(Binary::make(k, ba->value, rb->base)), stride, lanes);
      }
    }
    if (k == ExprKind::Mul) {
      if (ra && bb) return ramp(s(ra->base * bb->value), s(ra->stride * bb->value), lanes);
      if (ba && rb) return ramp(s(rb->base * ba->value), s(rb->stride * ba->value), lanes);
    }
    return orig;
  }

  Expr ramp(const Expr& base, const Expr& stride, int lanes) {
    if (is_const(stride, 0)) return Broadcast::make(base, lanes);
    return Ramp::make(base, stride, lanes);
  }

  Expr div_mod(const Expr& x) {
    const Binary* b = x.as<Binary>();
    bool is_div = x.kind() == ExprKind::Div;
    if (x.type().is_vector()) return vector_div_mod(x);
    if (!is_scalar_int(x)) return fold_float(x);
    const int64_t* c = as_const_int(b->b);
    if (!c || *c <= 0) return x;
    if (*c == 1) return is_div ? b->a : IntImm::make(0);
    // (c*Q + R) / c == Q + R / c and (c*Q + R) % c == R % c for floor division.
    Linear l;
    linearize(b->a, 1, l);
    Linear q, r;
    for (const auto& [atom, coef] : l.terms) {
      if (coef % *c == 0) q.add(atom, coef / *c);
      else r.add(atom, coef);
    }
    q.constant = floor_div(l.constant, *c);
    r.constant = l.constant - q.constant * *c;
    Expr rest = rebuild(r);
    auto rb = const_bounds(rest, ranges_);
    if (!(rb && floor_div(rb->lo, *c) == floor_div(rb->hi, *c))) {
      if (std::optional<DivisorSplit> d = split_by_divisor(r, *c)) {
        // (k*S + R) / c == S / (c/k) and (k*S + R) % c == k*(S % (c/k)) + R.
        Expr s = rebuild(d->s), per = IntImm::make(*c / d->k);
        if (is_div) {
          Linear out = q;
          linearize(mutate_expr(Binary::make(ExprKind::Div, s, per)), 1, out);
          return rebuild(out);
        }
        return mutate_expr(Binary::make(ExprKind::Mod, s, per) * IntImm::make(d->k) + rebuild(d->rest));
      }
    }
    if (is_div) {
      Expr rest_div;
      if (rb && floor_div(rb->lo, *c) == floor_div(rb->hi, *c)) {
        rest_div = IntImm::make(floor_div(rb->lo, *c));
      } else if (r.terms.empty()) {
        rest_div = IntImm::make(floor_div(r.constant, *c));
      } else {
        // (x / a) / c == x / (a*c) for positive a, c.
        const Binary* inner = rest.kind() == ExprKind::Div ? rest.as<Binary>() : nullptr;
        const int64_t* a = inner ? as_const_int(inner->b) : nullptr;
        rest_div = (a && *a > 0) ? Binary::make(ExprKind::Div, inner->a, IntImm::make(*a * *c))
                                 : Binary::make(ExprKind::Div, rest, b->b);
      }
      Linear out = q;
      linearize(rest_div, 1, out);
      return rebuild(out);
    }
    if (rb && rb->lo >= 0 && rb->hi < *c) return rest;
    if (rb && floor_div(rb->lo, *c) == floor_div(rb->hi, *c)) {
      return mutate_expr(rest - IntImm::make(floor_div(rb->lo, *c) * *c));
    }
    if (r.terms.empty()) return IntImm::make(r.constant);
    if (rest.kind() == ExprKind::Mod) {
      const Binary* inner = rest.as<Binary>();
      const int64_t* a = as_const_int(inner->b);
      if (a && *a > 0 && *a % *c == 0) return Binary::make(ExprKind::Mod, inner->a, b->b);
    }
    return Binary::make(ExprKind::Mod, rest, b->b);
  }

  // `r` (none of whose coefficients c divides) as k*S + R, with k > 1 dividing c, S the terms
  // whose coefficients k divides (divided by k) and R the rest, 0 <= R < k over the loop
  // ranges: the largest such k. A flattened index read through a reshape divides so:
  // (784 i + 28 h + w) / 1568 == i / 2 for 0 <= 28 h + w < 784 (ShuffleNet's channel
  // shuffle, whose vector loads were lane-by-lane divisions without it).
  struct DivisorSplit {
    Linear s, rest;
    int64_t k;
  };
  std::optional<DivisorSplit> split_by_divisor(const Linear& r, int64_t c) {
    std::vector<int64_t> ks;
    for (const auto& [atom, coef] : r.terms) {
      if (coef > 1 && c % coef == 0) ks.push_back(coef);
    }
    std::sort(ks.rbegin(), ks.rend());
    for (int64_t k : ks) {
      DivisorSplit d{{}, {}, k};
      d.rest.constant = r.constant;
      for (const auto& [atom, coef] : r.terms) {
        if (coef % k == 0) d.s.add(atom, coef / k);
        else d.rest.add(atom, coef);
      }
      auto b = const_bounds(rebuild(d.rest), ranges_);
      if (b && b->lo >= 0 && b->hi < k) return d;
    }
    return std::nullopt;
  }

  Expr vector_div_mod(const Expr& x) {
    const Binary* b = x.as<Binary>();
    bool is_div = x.kind() == ExprKind::Div;
    int lanes = x.type().lanes;
    const Broadcast* bc = b->b.as<Broadcast>();
    const int64_t* c = bc ? as_const_int(bc->value) : nullptr;
    if (const Broadcast* ba = b->a.as<Broadcast>(); ba && bc) {
      return Broadcast::make(node(Binary::make(x.kind(), ba->value, bc->value)), lanes);
    }
    const Ramp* r = b->a.as<Ramp>();
    const int64_t* s = r ? as_const_int(r->stride) : nullptr;
    if (!r || !c || *c <= 0 || !s || *s < 0) return x;
    Expr base_mod = node(Binary::make(ExprKind::Mod, r->base, bc->value));
    if (*s % *c == 0) {
      if (is_div) {
        return ramp(node(Binary::make(ExprKind::Div, r->base, bc->value)), IntImm::make(*s / *c), lanes);
      }
      return Broadcast::make(base_mod, lanes);
    }
    auto mb = const_bounds(base_mod, ranges_);
    if (mb && mb->hi + *s * (lanes - 1) < *c) {
      if (is_div) return Broadcast::make(node(Binary::make(ExprKind::Div, r->base, bc->value)), lanes);
      return Ramp::make(base_mod, r->stride, lanes);
    }
    return x;
  }

  Expr min_max(const Expr& x) {
    const Binary* b = x.as<Binary>();
    bool is_min = x.kind() == ExprKind::Min;
    if (x.type().is_vector()) {
      const Broadcast* ba = b->a.as<Broadcast>();
      const Broadcast* bb = b->b.as<Broadcast>();
      if (ba && bb) return Broadcast::make(node(Binary::make(x.kind(), ba->value, bb->value)), x.type().lanes);
    }
    if (!x.type().is_index()) return x;
    if (equal(b->a, b->b)) return b->a;
    auto ra = const_bounds(b->a, ranges_);
    auto rb = const_bounds(b->b, ranges_);
    if (ra && rb) {
      if (ra->hi <= rb->lo) return is_min ? b->a : b->b;
      if (rb->hi <= ra->lo) return is_min ? b->b : b->a;
    }
    return x;
  }

  Expr compare(const Expr& x) {
    const Binary* b = x.as<Binary>();
    int lanes = x.type().lanes;
    if (!b->a.type().is_index()) return x;
    auto as_result = [&](bool v) { return Broadcast::make(IntImm::make_bool(v), lanes); };
    Expr diff = node(Binary::make(ExprKind::Sub, b->a, b->b));
    auto d = const_bounds(diff, ranges_);
    if (!d) {
      if (x.kind() == ExprKind::EQ && equal(b->a, b->b)) return as_result(true);
      return x;
    }
    switch (x.kind()) {
      case ExprKind::LT:
        if (d->hi < 0) return as_result(true);
        if (d->lo >= 0) return as_result(false);
        break;
      case ExprKind::LE:
        if (d->hi <= 0) return as_result(true);
        if (d->lo > 0) return as_result(false);
        break;
      case ExprKind::EQ:
        if (d->lo == 0 && d->hi == 0) return as_result(true);
        if (d->lo > 0 || d->hi < 0) return as_result(false);
        break;
      case ExprKind::NE:
        if (d->lo == 0 && d->hi == 0) return as_result(false);
        if (d->lo > 0 || d->hi < 0) return as_result(true);
        break;
      default: break;
    }
    return x;
  }

  static std::optional<bool> const_bool_lanes(const Expr& e) {
    if (auto c = as_const_bool(e)) return c;
    if (const Broadcast* b = e.as<Broadcast>()) return as_const_bool(b->value);
    return std::nullopt;
  }

  Expr logical(const Expr& x) {
    const Binary* b = x.as<Binary>();
    bool is_and = x.kind() == ExprKind::And;
    auto ca = const_bool_lanes(b->a);
    auto cb = const_bool_lanes(b->b);
    if (ca) return *ca == is_and ? b->b : b->a;
    if (cb) return *cb == is_and ? b->a : b->b;
    return x;
  }

  RangeMap ranges_;
};

}  // namespace

Expr simplify(const Expr& e, const RangeMap& ranges) {
  Simplifier s(ranges);
  return s.mutate_expr(e);
}

Stmt simplify(const Stmt& st, const RangeMap& ranges) {
  Simplifier s(ranges);
  return s.mutate_stmt(st);
}

int64_t known_multiple(const Expr& e) {
  constexpr int64_t kMost = int64_t{1} << 20;
  if (const auto* i = e.as<IntImm>()) return std::min(std::abs(i->value), kMost);
  const Binary* b = e.as<Binary>();
  if (!b) return 1;
  switch (e.kind()) {
    case ExprKind::Add: case ExprKind::Sub: case ExprKind::Min: case ExprKind::Max:
      return std::gcd(known_multiple(b->a), known_multiple(b->b));
    case ExprKind::Mul:
      return std::min(known_multiple(b->a) * known_multiple(b->b), kMost);
    case ExprKind::Mod:
      if (const int64_t* c = as_const_int(b->b)) return std::gcd(known_multiple(b->a), *c);
      return 1;
    default:
      return 1;
  }
}

namespace {

// Lane k of a vector integer expression as a scalar one; ok false where it holds a vector
// value this cannot take apart.
class LaneOf final : public IRMutator {
 public:
  explicit LaneOf(int64_t k) : k_(k) {}
  bool ok = true;
  Expr mutate_expr(const Expr& e) override {
    if (!e.type().is_vector()) return e;
    switch (e.kind()) {
      case ExprKind::Ramp: {
        const Ramp* r = e.as<Ramp>();
        return r->base + IntImm::make(k_) * r->stride;
      }
      case ExprKind::Broadcast: return e.as<Broadcast>()->value;
      case ExprKind::Add:
      case ExprKind::Sub:
      case ExprKind::Mul:
      case ExprKind::Div:
      case ExprKind::Mod:
      case ExprKind::Min:
      case ExprKind::Max: return IRMutator::mutate_expr(e);
      default: ok = false; return e;
    }
  }

 private:
  int64_t k_;
};

}  // namespace

std::optional<LaneOffsets> lane_offsets(const Expr& index) {
  if (!index.type().is_vector() || !index.type().is_index()) return std::nullopt;
  const int lanes = index.type().lanes;
  LaneOf first(0);
  LaneOffsets out{simplify(first.mutate_expr(index)), {0}};
  if (!first.ok) return std::nullopt;
  for (int k = 1; k < lanes; ++k) {
    LaneOf lane(k);
    Expr e = lane.mutate_expr(index);
    if (!lane.ok) return std::nullopt;
    const Expr diff = simplify(e - out.first);  // kept alive: as_const_int points into it
    const int64_t* d = as_const_int(diff);
    if (!d) return std::nullopt;
    out.offsets.push_back(*d);
  }
  return out;
}

}  // namespace tf::ir
