#include "compiler/early_loads.h"

#include <map>
#include <vector>

#include "base/error.h"
#include "compiler/ir_mutator.h"

namespace tf::ir {
namespace {

bool is_block_loop(const Stmt& s) {
  const For* f = s.as<For>();
  return f && is_gpu_binding(f->for_kind) && !is_thread_binding(f->for_kind);
}

bool has_load(const Expr& e) {
  bool found = false;
  post_order(e, [&](const Expr& x) { found = found || x.as<Load>(); });
  return found;
}

// One block's body: its thread loops after a barrier, their eligible loads moved to the top.
class BlockBody {
 public:
  explicit BlockBody(const std::set<std::string>& inputs) : inputs_(inputs) {}

  Stmt run(const Stmt& body) {
    // Variables bound inside the body (loops, lets) and the buffers it allocates.
    post_order(
        body,
        [&](const Expr& x) {
          if (const Let* l = x.as<Let>()) inner_vars_.insert(l->var.get());
        },
        [&](const Stmt& s) {
          if (const For* f = s.as<For>()) inner_vars_.insert(f->var.get());
          if (const LetStmt* l = s.as<LetStmt>()) inner_vars_.insert(l->var.get());
          if (const Allocate* a = s.as<Allocate>()) own_buffers_.insert(a->buffer);
        });
    Stmt rewritten = scan(body);
    if (early_.empty()) return body;
    Stmt result = Block::make({Block::make(early_), rewritten});
    for (auto it = registers_.rbegin(); it != registers_.rend(); ++it) {
      result = Allocate::make(early_name(it->first), it->second.type, it->second.count,
                              MemScope::Local, result);
    }
    return result;
  }

 private:
  // The buffer of an input's registers.
  static std::string early_name(const std::string& input) { return str(input, ".early"); }
  // A load moved: element `slot` of early_name(buffer).
  struct Register {
    int slot;
    std::string buffer;
    Type type;
    Expr index, guard;  // in terms of the loop's variable; guard null: always
  };

  // The straight-line walk: statements in the order they run; a thread loop after a barrier
  // is rewritten.
  Stmt scan(const Stmt& s) {
    if (!s || blocked_) return s;
    if (const Block* b = s.as<Block>()) {
      std::vector<Stmt> out;
      bool changed = false;
      for (const Stmt& x : b->stmts) {
        out.push_back(scan(x));
        changed = changed || !out.back().same_as(x);
      }
      return changed ? Block::make(std::move(out)) : s;
    }
    if (const Allocate* a = s.as<Allocate>()) {
      Stmt body = scan(a->body);
      return body.same_as(a->body)
                 ? s
                 : Allocate::make(a->buffer, a->elem, a->size, a->scope, body, a->async_copies);
    }
    if (const LetStmt* l = s.as<LetStmt>()) {
      note_reads(l->value);
      Stmt body = scan(l->body);
      return body.same_as(l->body) ? s : LetStmt::make(l->var, l->value, body);
    }
    if (const Barrier* b = s.as<Barrier>()) {
      after_barrier_ = after_barrier_ || b->sync == Barrier::Kind::Block;
      return s;
    }
    Stmt result = s;
    const For* f = s.as<For>();
    if (f && f->for_kind == ForKind::ThreadIdxX && after_barrier_) result = thread_loop(*f, s);
    // What the statement reads and writes bounds what later loops may move.
    post_order(
        s, [&](const Expr& x) { note_reads(x); },
        [&](const Stmt& x) {
          const Store* st = x.as<Store>();
          if (st && !own_buffers_.count(st->buffer)) blocked_ = true;
        });
    return result;
  }

  void note_reads(const Expr& e) {
    post_order(e, [&](const Expr& x) {
      if (const Load* l = x.as<Load>()) read_.insert(l->buffer);
    });
  }

  // Whether `e` may be evaluated at the top of the block's body in loop `f`'s copy.
  bool movable(const Expr& e, const For& f) const {
    if (has_load(e)) return false;
    bool ok = true;
    post_order(e, [&](const Expr& x) {
      if (x.as<Var>() && !x.same_as(f.var) && inner_vars_.count(x.get())) ok = false;
    });
    return ok;
  }

  // The loop `f` (statement `s`) reading its eligible loads from registers filled early.
  Stmt thread_loop(const For& f, const Stmt& s) {
    std::vector<Register> mine;
    bool straight = true;
    post_order(
        f.body, [](const Expr&) {},
        [&](const Stmt& x) { straight = straight && !x.as<For>() && !x.as<Barrier>(); });
    if (!straight) return s;

    class Rewrite : public IRMutator {
     public:
      Rewrite(BlockBody& b, const For& f, std::vector<Register>& regs)
          : b_(b), f_(f), regs_(regs) {}
      Expr guard;

      Stmt mutate_stmt(const Stmt& s) override {
        if (const IfThenElse* i = s.as<IfThenElse>()) {
          Expr c = mutate_expr(i->cond);
          if (!b_.movable(i->cond, f_)) return IfThenElse::make(c, i->then_case, i->else_case);
          const Expr outer = guard;
          guard = logical_and(outer, i->cond);
          Stmt t = mutate_stmt(i->then_case);
          guard = logical_and(outer, Not::make(i->cond));
          Stmt e = i->else_case ? mutate_stmt(i->else_case) : Stmt();
          guard = outer;
          return IfThenElse::make(c, t, e);
        }
        return IRMutator::mutate_stmt(s);
      }

      Expr mutate_expr(const Expr& e) override {
        if (const Select* s = e.as<Select>()) {
          // Only the condition is evaluated whatever happens.
          Expr c = mutate_expr(s->cond);
          return c.same_as(s->cond) ? e : Select::make(c, s->t, s->f);
        }
        const Load* l = e.as<Load>();
        if (!l) return IRMutator::mutate_expr(e);
        if (l->type.lanes != 1 || !b_.inputs_.count(l->buffer) || b_.read_.count(l->buffer) ||
            !b_.movable(l->index, f_)) {
          return IRMutator::mutate_expr(e);
        }
        for (const Register& r : regs_) {
          if (r.buffer == l->buffer && equal(r.index, l->index) &&
              (r.guard && guard ? equal(r.guard, guard) : !r.guard && !guard)) {
            return Load::make(r.type, early_name(r.buffer), Expr(int64_t{r.slot}));
          }
        }
        if (b_.values_ >= kMaxEarlyValues) return e;
        ++b_.values_;
        Registers& input = b_.registers_[l->buffer];
        input.type = l->type;
        const int slot = input.count++;
        regs_.push_back({slot, l->buffer, l->type, l->index, guard});
        return Load::make(l->type, early_name(l->buffer), Expr(int64_t{slot}));
      }

     private:
      BlockBody& b_;
      const For& f_;
      std::vector<Register>& regs_;
    };
    Rewrite rw(*this, f, mine);
    Stmt body = rw.mutate_stmt(f.body);
    if (mine.empty()) return s;
    // The copy of the loop: the same threads load the same elements into the registers.
    const Expr v = Var::make(str(f.var.as<Var>()->name, ".early"), f.var.type());
    const VarMap to_copy = {{f.var.get(), v}};
    std::vector<Stmt> loads;
    for (const Register& r : mine) {
      Stmt st = Store::make(early_name(r.buffer),
                            Load::make(r.type, r.buffer, substitute(r.index, to_copy)),
                            Expr(int64_t{r.slot}));
      loads.push_back(r.guard ? IfThenElse::make(substitute(r.guard, to_copy), st) : st);
    }
    early_.push_back(For::make(v, f.min, f.extent, f.for_kind, Block::make(std::move(loads))));
    return For::make(f.var, f.min, f.extent, f.for_kind, body, f.parallel_inner);
  }

  const std::set<std::string>& inputs_;
  // Each input's registers: how many, of its loads' type.
  struct Registers {
    int count = 0;
    Type type;
  };
  std::map<std::string, Registers> registers_;
  std::set<const ExprNode*> inner_vars_;
  std::set<std::string> own_buffers_, read_;
  bool after_barrier_ = false, blocked_ = false;
  int values_ = 0;
  std::vector<Stmt> early_;
};

class Blocks : public IRMutator {
 public:
  explicit Blocks(const std::set<std::string>& inputs) : inputs_(inputs) {}

  Stmt mutate_stmt(const Stmt& s) override {
    if (!is_block_loop(s)) return IRMutator::mutate_stmt(s);
    const For* f = s.as<For>();
    // The innermost loop bound to blockIdx holds the block's body.
    bool inner = false;
    post_order(
        f->body, [](const Expr&) {}, [&](const Stmt& x) { inner = inner || is_block_loop(x); });
    Stmt body = inner ? mutate_stmt(f->body) : BlockBody(inputs_).run(f->body);
    if (body.same_as(f->body)) return s;
    return For::make(f->var, f->min, f->extent, f->for_kind, body, f->parallel_inner);
  }

 private:
  const std::set<std::string>& inputs_;
};

}  // namespace

Stmt early_loads(const Stmt& s, const std::set<std::string>& inputs) {
  if (!s || inputs.empty()) return s;
  return Blocks(inputs).mutate_stmt(s);
}

}  // namespace tf::ir
