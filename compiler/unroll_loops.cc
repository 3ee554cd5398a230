#include "compiler/unroll_loops.h"

#include <algorithm>

#include "base/error.h"
#include "compiler/ir_mutator.h"
#include "compiler/vectorize_loops.h"

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
  int64_t all_branches = 0;  // IfThenElse, those inside loops too
};

// Whether an unrolled loop of constant extent `n` (or none) around `body` is unrolled: within
// kMaxUnroll and, when `limit`ed, copying at most kMaxCopiedLoops loops and kMaxCopiedBranches
// branches.
bool unrolls(const int64_t* n, const Unrolled& body, bool limit) {
  if (!n || *n > kMaxUnroll) return false;
  if (!limit) return true;
  return (body.loops == 0 || saturating_mul(body.loops, *n) <= kMaxCopiedLoops) &&
         (body.branches == 0 || saturating_mul(body.branches, *n) <= kMaxCopiedBranches);
}

// What unroll_loops makes of `s` (with `limit`: see unrolls()).
Unrolled count(const Stmt& s, bool limit) {
  if (!s) return {};
  switch (s.kind()) {
    case StmtKind::Store:
    case StmtKind::Barrier:
    case StmtKind::Prefetch:
      return {1, 0, 0, 0};
    case StmtKind::For: {
      const For* f = s.as<For>();
      Unrolled body = count(f->body, limit);
      const int64_t* n = as_const_int(f->extent);
      // A vectorized loop wider than a vector stays a loop (vectorize_loops.h).
      bool copies = f->for_kind == ForKind::Vectorized ? n && *n <= kMaxVectorLanes
                                                        : f->for_kind == ForKind::Unrolled && unrolls(n, body, limit);
      if (copies) {
        int64_t k = std::max<int64_t>(*n, 1);
        // A vectorized loop's lanes share its branches, each of which then guards vector
        // operations: a branch counts once per 16 lanes (a 512-bit register of floats).
        int64_t b = f->for_kind == ForKind::Vectorized ? std::max<int64_t>(k / 16, 1) : k;
        return {saturating_mul(body.size, k), saturating_mul(body.loops, k), saturating_mul(body.branches, b),
                saturating_mul(body.all_branches, b)};
      }
      // A loop bound to a GPU block or thread index is no loop in the code (each thread runs
      // its iteration), so it does not count as one.
      if (is_gpu_binding(f->for_kind)) return body;
      return {body.size, saturating_add(body.loops, 1), 0, body.all_branches};
    }
    case StmtKind::LetStmt:
      return count(s.as<LetStmt>()->body, limit);
    case StmtKind::IfThenElse: {
      Unrolled a = count(s.as<IfThenElse>()->then_case, limit), b = count(s.as<IfThenElse>()->else_case, limit);
      return {saturating_add(a.size, b.size), saturating_add(a.loops, b.loops),
              saturating_add(saturating_add(a.branches, b.branches), 1),
              saturating_add(saturating_add(a.all_branches, b.all_branches), 1)};
    }
    case StmtKind::Allocate:
      return count(s.as<Allocate>()->body, limit);
    case StmtKind::Block: {
      Unrolled total;
      for (const Stmt& c : s.as<Block>()->stmts) {
        Unrolled u = count(c, limit);
        total = {saturating_add(total.size, u.size), saturating_add(total.loops, u.loops),
                 saturating_add(total.branches, u.branches), saturating_add(total.all_branches, u.all_branches)};
      }
      return total;
    }
  }
  return {};
}

class Unroller : public IRMutator {
 public:
  explicit Unroller(bool limit) : limit_(limit) {}
  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f || f->for_kind != ForKind::Unrolled) return IRMutator::mutate_stmt(s);
    Stmt body = mutate_stmt(f->body);
    const int64_t* n = as_const_int(f->extent);
    if (!unrolls(n, count(body, limit_), limit_)) return For::make(f->var, f->min, f->extent, ForKind::Serial, body);
    return unrolled_copies(*f, body, *n);
  }

 private:
  bool limit_;
};

// Whether unrolling all of `s` would leave more loops or branches than a function should have.
bool needs_limit(const Stmt& s) {
  Unrolled all = count(s, false);
  return all.loops > kMaxUnrolledLoops || all.all_branches > kMaxUnrolledBranches;
}

}  // namespace

Stmt unrolled_copies(const For& f, const Stmt& body, int64_t n) {
  std::vector<Stmt> copies;
  for (int64_t i = 0; i < n; ++i) {
    copies.push_back(substitute(body, {{f.var.get(), f.min + Expr(i)}}));
  }
  return Block::make(std::move(copies));
}

int64_t unrolled_size(const Stmt& s) { return count(s, needs_limit(s)).size; }

Stmt unroll_loops(const Stmt& s) {
  int64_t size = unrolled_size(s);
  if (size > kMaxUnrolledSize) {
    throw UserError(str("the schedule unrolls and vectorizes into ", size == INT64_MAX ? "over 2^63" : std::to_string(size),
                        " element operations, over the budget of ", kMaxUnrolledSize,
                        ": use smaller unrolled or vectorized tiles (tile_*, unroll_k) or unroll=false"));
  }
  Unroller u(needs_limit(s));
  return u.mutate_stmt(s);
}

}  // namespace tf::ir
