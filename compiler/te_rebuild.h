// Rewriting a graph of tensor expressions: its stages rebuilt from an output down.
#pragma once

#include <map>
#include <utility>

#include "compiler/ir_mutator.h"
#include "compiler/te.h"

namespace tf::ir {

// Rebuilds the stages from a tensor down, with the same names, axes and bodies but for their
// reads: a read of a tensor the map names reads its replacement, and every rebuilt stage passes
// through finish(), which may replace it in turn (the reads of it then read what it returns).
// Placeholders stay as they are; each stage is rebuilt once however many read it.
class StageRebuilder : public IRMutator {
 public:
  explicit StageRebuilder(std::map<const Operation*, Tensor> replaced = {}) : done_(std::move(replaced)) {}

  Tensor rebuild(const Tensor& t) {
    if (auto it = done_.find(t.get()); it != done_.end()) return it->second;
    if (t->is_placeholder()) return done_[t.get()] = t;
    auto op = std::make_shared<Operation>(*t);
    op->body = mutate_expr(t->body);
    return done_[t.get()] = finish(op);
  }

  Expr mutate_expr(const Expr& e) override {
    Expr m = IRMutator::mutate_expr(e);
    if (const TensorRead* r = m.as<TensorRead>()) {
      Tensor to = rebuild(r->op);
      if (to != r->op) return TensorRead::make(to, r->indices);
    }
    return m;
  }

 protected:
  virtual Tensor finish(Tensor rebuilt) { return rebuilt; }

 private:
  std::map<const Operation*, Tensor> done_;
};

}  // namespace tf::ir
