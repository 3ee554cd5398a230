#include "compiler/unroll_loops.h"

#include "compiler/ir_mutator.h"

namespace tf::ir {
namespace {

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

}  // namespace

Stmt unroll_loops(const Stmt& s) {
  Unroller u;
  return u.mutate_stmt(s);
}

}  // namespace tf::ir
