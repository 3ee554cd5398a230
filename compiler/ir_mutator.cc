#include "compiler/ir_mutator.h"

namespace tf::ir {

Expr IRMutator::mutate_expr(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
      return e;
    case ExprKind::Not: {
      const Not* n = e.as<Not>();
      Expr a = mutate_expr(n->a);
      return a.same_as(n->a) ? e : Not::make(a);
    }
    case ExprKind::Select: {
      const Select* n = e.as<Select>();
      Expr c = mutate_expr(n->cond), t = mutate_expr(n->t), f = mutate_expr(n->f);
      if (c.same_as(n->cond) && t.same_as(n->t) && f.same_as(n->f)) return e;
      return Select::make(c, t, f);
    }
    case ExprKind::Cast: {
      const Cast* n = e.as<Cast>();
      Expr v = mutate_expr(n->value);
      return v.same_as(n->value) ? e : Cast::make(n->type.element_of(), v);
    }
    case ExprKind::Load: {
      const Load* n = e.as<Load>();
      Expr i = mutate_expr(n->index);
      return i.same_as(n->index) ? e : Load::make(n->type.element_of(), n->buffer, i);
    }
    case ExprKind::Ramp: {
      const Ramp* n = e.as<Ramp>();
      Expr b = mutate_expr(n->base), s = mutate_expr(n->stride);
      if (b.same_as(n->base) && s.same_as(n->stride)) return e;
      return Ramp::make(b, s, n->lanes);
    }
    case ExprKind::Broadcast: {
      const Broadcast* n = e.as<Broadcast>();
      Expr v = mutate_expr(n->value);
      return v.same_as(n->value) ? e : Broadcast::make(v, n->lanes);
    }
    case ExprKind::Call: {
      const Call* n = e.as<Call>();
      std::vector<Expr> args;
      bool changed = false;
      for (const Expr& a : n->args) {
        args.push_back(mutate_expr(a));
        changed |= !args.back().same_as(a);
      }
      return changed ? Call::make(n->name, std::move(args)) : e;
    }
    case ExprKind::Let: {
      const Let* n = e.as<Let>();
      Expr v = mutate_expr(n->value), b = mutate_expr(n->body);
      if (v.same_as(n->value) && b.same_as(n->body)) return e;
      return Let::make(n->var, v, b);
    }
    case ExprKind::TensorRead: {
      const TensorRead* n = e.as<TensorRead>();
      std::vector<Expr> idx;
      bool changed = false;
      for (const Expr& a : n->indices) {
        idx.push_back(mutate_expr(a));
        changed |= !idx.back().same_as(a);
      }
      return changed ? TensorRead::make(n->op, std::move(idx)) : e;
    }
    case ExprKind::Reduce: {
      const Reduce* n = e.as<Reduce>();
      Expr s = mutate_expr(n->source);
      return s.same_as(n->source) ? e : Reduce::make(n->reduce, s, n->axes);
    }
    default: {
      const Binary* n = e.as<Binary>();
      TF_CHECK(n, "unhandled expression kind ", static_cast<int>(e.kind()));
      Expr a = mutate_expr(n->a), b = mutate_expr(n->b);
      if (a.same_as(n->a) && b.same_as(n->b)) return e;
      return Binary::make(e.kind(), a, b);
    }
  }
}

Stmt IRMutator::mutate_stmt(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::For: {
      const For* n = s.as<For>();
      Expr mn = mutate_expr(n->min), ext = mutate_expr(n->extent);
      Stmt b = mutate_stmt(n->body);
      if (mn.same_as(n->min) && ext.same_as(n->extent) && b.same_as(n->body)) return s;
      return For::make(n->var, mn, ext, n->for_kind, b, n->parallel_inner);
    }
    case StmtKind::Store: {
      const Store* n = s.as<Store>();
      Expr v = mutate_expr(n->value), i = mutate_expr(n->index);
      if (v.same_as(n->value) && i.same_as(n->index)) return s;
      return Store::make(n->buffer, v, i);
    }
    case StmtKind::LetStmt: {
      const LetStmt* n = s.as<LetStmt>();
      Expr v = mutate_expr(n->value);
      Stmt b = mutate_stmt(n->body);
      if (v.same_as(n->value) && b.same_as(n->body)) return s;
      return LetStmt::make(n->var, v, b);
    }
    case StmtKind::IfThenElse: {
      const IfThenElse* n = s.as<IfThenElse>();
      Expr c = mutate_expr(n->cond);
      Stmt t = mutate_stmt(n->then_case);
      Stmt e = n->else_case ? mutate_stmt(n->else_case) : Stmt();
      if (c.same_as(n->cond) && t.same_as(n->then_case) && e.same_as(n->else_case)) return s;
      return IfThenElse::make(c, t, e);
    }
    case StmtKind::Allocate: {
      const Allocate* n = s.as<Allocate>();
      Stmt b = mutate_stmt(n->body);
      return b.same_as(n->body) ? s : Allocate::make(n->buffer, n->elem, n->size, n->scope, b, n->async_copies);
    }
    case StmtKind::Block: {
      const Block* n = s.as<Block>();
      std::vector<Stmt> out;
      bool changed = false;
      for (const Stmt& c : n->stmts) {
        out.push_back(mutate_stmt(c));
        changed |= !out.back().same_as(c);
      }
      return changed ? Block::make(std::move(out)) : s;
    }
    case StmtKind::Barrier:
      return s;
    case StmtKind::Prefetch: {
      const Prefetch* n = s.as<Prefetch>();
      Expr i = mutate_expr(n->index);
      return i.same_as(n->index) ? s : Prefetch::make(n->buffer, n->elem, i);
    }
  }
  TF_CHECK(false, "unhandled statement kind");
  return s;
}

namespace {

class Walker : public IRMutator {
 public:
  Walker(const std::function<void(const Expr&)>& fe, const std::function<void(const Stmt&)>& fs)
      : fe_(fe), fs_(fs) {}
  Expr mutate_expr(const Expr& e) override {
    IRMutator::mutate_expr(e);
    if (fe_) fe_(e);
    return e;
  }
  Stmt mutate_stmt(const Stmt& s) override {
    IRMutator::mutate_stmt(s);
    if (fs_) fs_(s);
    return s;
  }

 private:
  const std::function<void(const Expr&)>& fe_;
  const std::function<void(const Stmt&)>& fs_;
};

class Substituter : public IRMutator {
 public:
  explicit Substituter(const VarMap& vars) : vars_(vars) {}
  Expr mutate_expr(const Expr& e) override {
    if (e.kind() == ExprKind::Var) {
      auto it = vars_.find(e.get());
      return it == vars_.end() ? e : it->second;
    }
    return IRMutator::mutate_expr(e);
  }

 private:
  const VarMap& vars_;
};

}  // namespace

void post_order(const Expr& e, const std::function<void(const Expr&)>& f) {
  std::function<void(const Stmt&)> none;
  Walker w(f, none);
  w.mutate_expr(e);
}

void post_order(const Stmt& s, const std::function<void(const Expr&)>& fe,
                const std::function<void(const Stmt&)>& fs) {
  Walker w(fe, fs);
  w.mutate_stmt(s);
}

std::string call_named(const Stmt& s, bool (*is)(const std::string&)) {
  std::string name;
  post_order(s, [&](const Expr& e) {
    if (const Call* c = e.as<Call>(); c && is(c->name)) name = c->name;
  });
  return name;
}

Expr substitute(const Expr& e, const VarMap& vars) {
  if (vars.empty()) return e;
  Substituter s(vars);
  return s.mutate_expr(e);
}

Stmt substitute(const Stmt& s, const VarMap& vars) {
  if (vars.empty()) return s;
  Substituter sub(vars);
  return sub.mutate_stmt(s);
}

bool uses_var(const Expr& e, const Expr& var) {
  bool found = false;
  post_order(e, [&](const Expr& x) { found |= x.same_as(var); });
  return found;
}

bool uses_var(const Stmt& s, const Expr& var) {
  bool found = false;
  post_order(s, [&](const Expr& x) { found |= x.same_as(var); });
  if (found) return true;
  // Loop variables bound by the statement count as uses too.
  post_order(s, nullptr, [&](const Stmt& st) {
    if (const For* f = st.as<For>()) found |= f->var.same_as(var);
  });
  return found;
}

bool touches(const Stmt& s, const std::set<std::string>& buffers) {
  bool hit = false;
  post_order(
      s, [&](const Expr& e) { hit = hit || (e.as<Load>() && buffers.count(e.as<Load>()->buffer)); },
      [&](const Stmt& x) { hit = hit || (x.as<Store>() && buffers.count(x.as<Store>()->buffer)); });
  return hit;
}

}  // namespace tf::ir
