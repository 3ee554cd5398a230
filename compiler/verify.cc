#include "compiler/verify.h"

#include <set>

#include "compiler/ir_printer.h"

namespace tf::ir {
namespace {

class Verifier {
 public:
  Verifier(const LoweredFunc& f, const std::string& pass, bool vectors_lowered)
      : pass_(pass), vectors_lowered_(vectors_lowered) {
    for (const BufferArg& a : f.args) buffers_.insert(a.name);
  }

  void stmt(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::For: {
        const For* f = s.as<For>();
        check(!vectors_lowered_ || f->for_kind != ForKind::Vectorized, "vectorized loop ", f->var.as<Var>()->name, " survived");
        expr(f->min);
        expr(f->extent);
        bound_.insert(f->var.get());
        stmt(f->body);
        bound_.erase(f->var.get());
        return;
      }
      case StmtKind::Store: {
        const Store* st = s.as<Store>();
        check(buffers_.count(st->buffer), "store to unknown buffer ", st->buffer);
        check(st->value.type().lanes == st->index.type().lanes, "store lanes differ");
        expr(st->value);
        expr(st->index);
        return;
      }
      case StmtKind::LetStmt: {
        const LetStmt* l = s.as<LetStmt>();
        expr(l->value);
        bound_.insert(l->var.get());
        stmt(l->body);
        bound_.erase(l->var.get());
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* i = s.as<IfThenElse>();
        expr(i->cond);
        check(!i->cond.type().is_vector(), "vector condition in if");
        stmt(i->then_case);
        if (i->else_case) stmt(i->else_case);
        return;
      }
      case StmtKind::Allocate: {
        const Allocate* a = s.as<Allocate>();
        check(!buffers_.count(a->buffer), "buffer ", a->buffer, " allocated twice");
        buffers_.insert(a->buffer);
        stmt(a->body);
        buffers_.erase(a->buffer);
        return;
      }
      case StmtKind::Block:
        for (const Stmt& c : s.as<Block>()->stmts) stmt(c);
        return;
      case StmtKind::Barrier:
        return;
      case StmtKind::Prefetch: {
        const Prefetch* p = s.as<Prefetch>();
        check(buffers_.count(p->buffer), "prefetch of unknown buffer ", p->buffer);
        check(!p->index.type().is_vector(), "prefetch at a vector index");
        expr(p->index);
        return;
      }
    }
  }

  void expr(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::Var:
        check(bound_.count(e.get()), "unbound variable ", e.as<Var>()->name);
        return;
      case ExprKind::TensorRead:
      case ExprKind::Reduce:
        check(false, "tensor expression left after lowering: ", to_string(e));
        return;
      case ExprKind::Let: {
        const Let* l = e.as<Let>();
        expr(l->value);
        bound_.insert(l->var.get());
        expr(l->body);
        bound_.erase(l->var.get());
        return;
      }
      case ExprKind::Load: {
        const Load* l = e.as<Load>();
        check(buffers_.count(l->buffer), "load from unknown buffer ", l->buffer);
        expr(l->index);
        return;
      }
      default:
        break;
    }
    // Children.
    if (const Binary* b = e.as<Binary>()) {
      expr(b->a);
      expr(b->b);
    } else if (const Not* n = e.as<Not>()) {
      expr(n->a);
    } else if (const Select* s = e.as<Select>()) {
      expr(s->cond);
      expr(s->t);
      expr(s->f);
    } else if (const Cast* c = e.as<Cast>()) {
      expr(c->value);
    } else if (const Ramp* r = e.as<Ramp>()) {
      expr(r->base);
      expr(r->stride);
    } else if (const Broadcast* br = e.as<Broadcast>()) {
      expr(br->value);
    } else if (const Call* c = e.as<Call>()) {
      for (const Expr& a : c->args) expr(a);
    }
  }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... args) {
    TF_CHECK(ok, "IR invalid after pass ", pass_, ": ", str(args...));
  }

  std::string pass_;
  bool vectors_lowered_;
  std::set<std::string> buffers_;
  std::set<const ExprNode*> bound_;
};

}  // namespace

void verify(const LoweredFunc& f, const std::string& after_pass, bool vectors_lowered) {
  Verifier v(f, after_pass, vectors_lowered);
  v.stmt(f.body);
}

}  // namespace tf::ir
