#include "compiler/partition_loops.h"

#include "compiler/ir_mutator.h"
#include "compiler/simplify.h"

namespace tf::ir {
namespace {

class Partitioner : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f) return IRMutator::mutate_stmt(s);
    Stmt body = mutate_stmt(f->body);
    const int64_t* n = as_const_int(f->extent);
    bool peelable = f->for_kind == ForKind::Serial || f->for_kind == ForKind::Parallel;
    if (!peelable || !n || *n < 2 || !has_shifted_tail(body, f->var, f->min, *n)) {
      return body.same_as(f->body) ? s : For::make(f->var, f->min, f->extent, f->for_kind, body, f->parallel_inner);
    }
    Stmt main = For::make(f->var, f->min, IntImm::make(*n - 1), f->for_kind, body);
    Stmt tail = substitute(body, {{f->var.get(), f->min + Expr(*n - 1)}});
    return Block::make({main, tail});
  }

 private:
  // Whether `body` has a min(a, b), a using `var`, b not, that is `a` for var in [min, min+n-2].
  static bool has_shifted_tail(const Stmt& body, const Expr& var, const Expr& mn, int64_t n) {
    const int64_t* lo = as_const_int(mn);
    if (!lo) return false;
    RangeMap r = {{var.get(), {*lo, *lo + n - 2}}};
    bool found = false;
    post_order(body, [&](const Expr& e) {
      if (found || e.kind() != ExprKind::Min) return;
      const Binary* m = e.as<Binary>();
      if (!uses_var(m->a, var) || uses_var(m->b, var)) return;
      found = is_true(simplify(m->a <= m->b, r));
    });
    return found;
  }

  static bool is_true(const Expr& e) {
    auto c = as_const_bool(e);
    return c && *c;
  }
};

}  // namespace

Stmt partition_loops(const Stmt& s) {
  Partitioner p;
  return p.mutate_stmt(s);
}

}  // namespace tf::ir
