#include "compiler/merge_barriers.h"

#include <vector>

#include "compiler/ir_mutator.h"

namespace tf::ir {
namespace {

bool is_block_barrier(const Stmt& s) {
  const Barrier* b = s.as<Barrier>();
  return b && b->sync == Barrier::Kind::Block;
}

// Whether evaluating `e` reads memory (a load, or a call, which may).
bool reads_memory(const Expr& e) {
  bool reads = false;
  post_order(e, [&](const Expr& x) { reads = reads || x.as<Load>() || x.as<Call>(); });
  return reads;
}

// `s` with the block barriers that follow one (`after`: whether the last thing run before s is
// one; on return, whether the last thing s runs is one).
Stmt merge(const Stmt& s, bool& after) {
  if (!s) return s;
  if (is_block_barrier(s)) {
    if (after) return Stmt();
    after = true;
    return s;
  }
  if (const Block* b = s.as<Block>()) {
    std::vector<Stmt> kept;
    bool changed = false;
    for (const Stmt& x : b->stmts) {
      Stmt y = merge(x, after);
      changed = changed || !y.same_as(x);
      if (y) kept.push_back(std::move(y));
    }
    return changed ? Block::make(std::move(kept)) : s;
  }
  if (const Allocate* a = s.as<Allocate>()) {
    Stmt body = merge(a->body, after);
    if (body.same_as(a->body)) return s;
    return Allocate::make(a->buffer, a->elem, a->size, a->scope, body ? body : Block::make({}),
                          a->async_copies);
  }
  if (const LetStmt* l = s.as<LetStmt>()) {
    if (reads_memory(l->value)) after = false;
    Stmt body = merge(l->body, after);
    if (body.same_as(l->body)) return s;
    return LetStmt::make(l->var, l->value, body ? body : Block::make({}));
  }
  if (const For* f = s.as<For>()) {
    if (is_gpu_binding(f->for_kind) && !is_thread_binding(f->for_kind)) {
      // A loop bound to the grid's blocks: each block runs its own iteration once, so the
      // body follows what came before it, and what follows it follows the body's end.
      Stmt body = merge(f->body, after);
      if (body.same_as(f->body)) return s;
      return For::make(f->var, f->min, f->extent, f->for_kind, body ? body : Block::make({}),
                       f->parallel_inner);
    }
    // The body starts after what came before or after its own end: merged inside alone.
    bool inside = false;
    Stmt body = merge(f->body, inside);
    after = false;
    if (body.same_as(f->body)) return s;
    return For::make(f->var, f->min, f->extent, f->for_kind, body ? body : Block::make({}),
                     f->parallel_inner);
  }
  if (const IfThenElse* i = s.as<IfThenElse>()) {
    bool in_then = false, in_else = false;
    Stmt then_case = merge(i->then_case, in_then);
    Stmt else_case = merge(i->else_case, in_else);
    after = false;
    if (then_case.same_as(i->then_case) && else_case.same_as(i->else_case)) return s;
    return IfThenElse::make(i->cond, then_case ? then_case : Block::make({}), else_case);
  }
  after = false;  // a store, a copy's commit or wait, a prefetch
  return s;
}

}  // namespace

Stmt merge_barriers(const Stmt& s) {
  // A kernel's first barrier, before its threads have done anything, waits for nothing.
  bool after = true;
  Stmt merged = merge(s, after);
  return merged ? merged : Block::make({});
}

}  // namespace tf::ir
