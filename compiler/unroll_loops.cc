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

struct Unrolled {
  int64_t size = 0;      // Stores and Barriers, each once per copy
  int64_t loops = 0;     // loops left (serial, parallel, unrolled ones kept as loops), per copy
  int64_t branches = 0;  // IfThenElse outside those loops, per copy
};

// Whether an unrolled loop of constant extent `n` (or none) around `body` is unrolled: within
// kMaxUnroll, copying at most kMaxCopiedLoops loops and kMaxCopiedBranches branches.
bool unrolls(const int64_t* n, const Unrolled& body) {
  return n && *n <= kMaxUnroll && (body.loops == 0 || saturating_mul(body.loops, *n) <= kMaxCopiedLoops) &&
         (body.branches == 0 || saturating_mul(body.branches, *n) <= kMaxCopiedBranches);
}

// What unroll_loops makes of `s`.
Unrolled count(const Stmt& s) {
  if (!s) return {};
  switch (s.kind()) {
    case StmtKind::Store:
    case StmtKind::Barrier:
      return {1, 0, 0};
    case StmtKind::For: {
      const For* f = s.as<For>();
      Unrolled body = count(f->body);
      const int64_t* n = as_const_int(f->extent);
      bool copies = f->for_kind == ForKind::Vectorized ? n != nullptr
                                                        : f->for_kind == ForKind::Unrolled && unrolls(n, body);
      if (copies) {
        int64_t k = std::max<int64_t>(*n, 1);
        return {saturating_mul(body.size, k), saturating_mul(body.loops, k), saturating_mul(body.branches, k)};
      }
      return {body.size, saturating_add(body.loops, 1), 0};
    }
    case StmtKind::LetStmt:
      return count(s.as<LetStmt>()->body);
    case StmtKind::IfThenElse: {
      Unrolled a = count(s.as<IfThenElse>()->then_case), b = count(s.as<IfThenElse>()->else_case);
      return {saturating_add(a.size, b.size), saturating_add(a.loops, b.loops),
              saturating_add(saturating_add(a.branches, b.branches), 1)};
    }
    case StmtKind::Allocate:
      return count(s.as<Allocate>()->body);
    case StmtKind::Block: {
      Unrolled total;
      for (const Stmt& c : s.as<Block>()->stmts) {
        Unrolled u = count(c);
        total = {saturating_add(total.size, u.size), saturating_add(total.loops, u.loops),
                 saturating_add(total.branches, u.branches)};
      }
      return total;
    }
  }
  return {};
}

class Unroller : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f || f->for_kind != ForKind::Unrolled) return IRMutator::mutate_stmt(s);
    Stmt body = mutate_stmt(f->body);
    const int64_t* n = as_const_int(f->extent);
    if (!unrolls(n, count(body))) return For::make(f->var, f->min, f->extent, ForKind::Serial, body);
    std::vector<Stmt> copies;
    for (int64_t i = 0; i < *n; ++i) copies.push_back(substitute(body, {{f->var.get(), f->min + Expr(i)}}));
    return Block::make(std::move(copies));
  }
};

}  // namespace

int64_t unrolled_size(const Stmt& s) { return count(s).size; }

Stmt unroll_loops(const Stmt& s) {
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
