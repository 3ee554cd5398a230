#include "compiler/unroll_loops.h"

#include <algorithm>

#include "compiler/error.h"
#include "compiler/ir_mutator.h"

namespace tf::ir {
namespace {

// Saturates instead of overflowing: nested extents can multiply past 64 bits.
int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

class Unroller : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f || f->for_kind != ForKind::Unrolled) return IRMutator::mutate_stmt(s);
    Stmt body = mutate_stmt(f->body);
    const int64_t* n = as_const_int(f->extent);
    if (!n || *n > kMaxUnroll) return For::make(f->var, f->min, f->extent, ForKind::Serial, body);
    std::vector<Stmt> copies;
    for (int64_t i = 0; i < *n; ++i) copies.push_back(substitute(body, {{f->var.get(), f->min + Expr(i)}}));
    return Block::make(std::move(copies));
  }
};

// What unrolling makes of `s`: with `loops`, the loops that stay loops (each serial or
// parallel loop once per copy made around it); without, the Stores and Barriers.
int64_t unrolled_count(const Stmt& s, bool loops) {
  if (!s) return 0;
  switch (s.kind()) {
    case StmtKind::Store:
    case StmtKind::Barrier:
      return loops ? 0 : 1;
    case StmtKind::For: {
      const For* f = s.as<For>();
      int64_t body = unrolled_count(f->body, loops);
      const int64_t* n = as_const_int(f->extent);
      bool copies = f->for_kind == ForKind::Vectorized || (f->for_kind == ForKind::Unrolled && n && *n <= kMaxUnroll);
      if (copies && n) return saturating_mul(body, std::max<int64_t>(*n, 1));
      return loops ? saturating_add(body, 1) : body;
    }
    case StmtKind::LetStmt:
      return unrolled_count(s.as<LetStmt>()->body, loops);
    case StmtKind::IfThenElse: {
      const IfThenElse* i = s.as<IfThenElse>();
      return saturating_add(unrolled_count(i->then_case, loops), unrolled_count(i->else_case, loops));
    }
    case StmtKind::Allocate:
      return unrolled_count(s.as<Allocate>()->body, loops);
    case StmtKind::Block: {
      int64_t total = 0;
      for (const Stmt& c : s.as<Block>()->stmts) total = saturating_add(total, unrolled_count(c, loops));
      return total;
    }
  }
  return 0;
}

}  // namespace

int64_t unrolled_size(const Stmt& s) { return unrolled_count(s, false); }

int64_t unrolled_loops(const Stmt& s) { return unrolled_count(s, true); }

Stmt unroll_loops(const Stmt& s) {
  int64_t loops = unrolled_loops(s);
  if (loops > kMaxUnrolledLoops) {
    throw UserError(str("the schedule unrolls into ", loops == INT64_MAX ? "over 2^63" : std::to_string(loops),
                        " loops (serial loops copied by the unrolled loops around them), over the budget of ",
                        kMaxUnrolledLoops, ": vectorize the inner loop, or use smaller unrolled tiles or unroll=false"));
  }
  int64_t size = unrolled_size(s);
  if (size > kMaxUnrolledSize) {
    throw UserError(str("the schedule unrolls and vectorizes into ", size == INT64_MAX ? "over 2^63" : std::to_string(size),
                        " element operations, over the budget of ", kMaxUnrolledSize,
                        ": use smaller unrolled or vectorized tiles (tile_*, unroll_k) or unroll=false"));
  }
  Unroller u;
  return u.mutate_stmt(s);
}

}  // namespace tf::ir
