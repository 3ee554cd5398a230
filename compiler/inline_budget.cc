#include "compiler/inline_budget.h"

#include <algorithm>
#include <set>
#include <vector>

#include "compiler/error.h"

namespace tf::ir {

ExprCost inlined_cost(const Expr& body, const std::map<const Operation*, ExprCost>& inlined) {
  ExprCost c;
  std::vector<std::pair<const ExprNode*, int64_t>> stack;
  if (body) stack.push_back({body.get(), 1});
  auto push = [&](const Expr& e, int64_t depth) {
    if (e) stack.push_back({e.get(), depth});
  };
  while (!stack.empty()) {
    auto [e, d] = stack.back();
    stack.pop_back();
    c.nodes += 1;
    c.depth = std::max(c.depth, d);
    if (!within_inline_budget(c)) return c;
    switch (e->kind) {
      case ExprKind::IntImm:
      case ExprKind::FloatImm:
      case ExprKind::Var:
        break;
      case ExprKind::Not:
        push(static_cast<const Not*>(e)->a, d + 1);
        break;
      case ExprKind::Select: {
        const auto* n = static_cast<const Select*>(e);
        push(n->cond, d + 1);
        push(n->t, d + 1);
        push(n->f, d + 1);
        break;
      }
      case ExprKind::Cast:
        push(static_cast<const Cast*>(e)->value, d + 1);
        break;
      case ExprKind::Load:
        push(static_cast<const Load*>(e)->index, d + 1);
        break;
      case ExprKind::Ramp:
        push(static_cast<const Ramp*>(e)->base, d + 1);
        push(static_cast<const Ramp*>(e)->stride, d + 1);
        break;
      case ExprKind::Broadcast:
        push(static_cast<const Broadcast*>(e)->value, d + 1);
        break;
      case ExprKind::Call:
        for (const Expr& a : static_cast<const Call*>(e)->args) push(a, d + 1);
        break;
      case ExprKind::Let: {
        const auto* n = static_cast<const Let*>(e);
        push(n->value, d + 1);
        push(n->body, d + 1);
        break;
      }
      case ExprKind::TensorRead: {
        const auto* n = static_cast<const TensorRead*>(e);
        if (auto it = inlined.find(n->op.get()); it != inlined.end()) {
          // The read becomes the producer's expression (its indices substituted in).
          c.nodes += it->second.nodes;
          c.depth = std::max(c.depth, d + it->second.depth);
          if (!within_inline_budget(c)) return c;
        }
        for (const Expr& i : n->indices) push(i, d + 1);
        break;
      }
      case ExprKind::Reduce:
        push(static_cast<const Reduce*>(e)->source, d + 1);
        break;
      default: {
        const auto* n = static_cast<const Binary*>(e);
        push(n->a, d + 1);
        push(n->b, d + 1);
      }
    }
  }
  return c;
}

namespace {

// How many times `body` reads each operation (as a walk sees it: a read under a shared
// subexpression counts at each use). Stops counting past kMaxInlinedNodes nodes.
std::map<const Operation*, int64_t> reads_of(const Expr& body) {
  std::map<const Operation*, int64_t> reads;
  std::vector<const ExprNode*> stack;
  if (body) stack.push_back(body.get());
  int64_t visited = 0;
  auto push = [&](const Expr& e) {
    if (e) stack.push_back(e.get());
  };
  while (!stack.empty() && ++visited <= kMaxInlinedNodes) {
    const ExprNode* e = stack.back();
    stack.pop_back();
    switch (e->kind) {
      case ExprKind::IntImm:
      case ExprKind::FloatImm:
      case ExprKind::Var:
        break;
      case ExprKind::Not:
        push(static_cast<const Not*>(e)->a);
        break;
      case ExprKind::Select:
        push(static_cast<const Select*>(e)->cond);
        push(static_cast<const Select*>(e)->t);
        push(static_cast<const Select*>(e)->f);
        break;
      case ExprKind::Cast:
        push(static_cast<const Cast*>(e)->value);
        break;
      case ExprKind::Load:
        push(static_cast<const Load*>(e)->index);
        break;
      case ExprKind::Ramp:
        push(static_cast<const Ramp*>(e)->base);
        push(static_cast<const Ramp*>(e)->stride);
        break;
      case ExprKind::Broadcast:
        push(static_cast<const Broadcast*>(e)->value);
        break;
      case ExprKind::Call:
        for (const Expr& a : static_cast<const Call*>(e)->args) push(a);
        break;
      case ExprKind::Let:
        push(static_cast<const Let*>(e)->value);
        push(static_cast<const Let*>(e)->body);
        break;
      case ExprKind::TensorRead:
        ++reads[static_cast<const TensorRead*>(e)->op.get()];
        for (const Expr& i : static_cast<const TensorRead*>(e)->indices) push(i);
        break;
      case ExprKind::Reduce:
        push(static_cast<const Reduce*>(e)->source);
        break;
      default:
        push(static_cast<const Binary*>(e)->a);
        push(static_cast<const Binary*>(e)->b);
    }
  }
  return reads;
}

}  // namespace

std::vector<Stage*> bound_inlining(Schedule& sch) {
  std::map<const Operation*, ExprCost> inlined;
  std::map<const Operation*, Stage*> stage_of;
  std::vector<Stage*> rooted;
  auto materialize = [&](const Operation* op) {
    inlined.erase(op);
    Stage* p = stage_of.at(op);
    p->compute_root();
    rooted.push_back(p);
  };
  for (Stage* s : sch.stages()) {
    stage_of[s->op().get()] = s;
    // A producer read more than once would be computed once per read: past a small
    // allowance, it is computed once into a buffer instead.
    for (const auto& [op, n] : reads_of(s->op()->body)) {
      auto it = inlined.find(op);
      if (it != inlined.end() && n > 1 && (n - 1) * it->second.nodes > kMaxDuplicatedNodes) {
        materialize(op);
      }
    }
    ExprCost c = inlined_cost(s->op()->body, inlined);
    if (!within_inline_budget(c)) {
      // Its inlined producers are computed first instead, then read from their buffers.
      for (const Tensor& in : inputs_of(s->op())) {
        if (inlined.count(in.get())) materialize(in.get());
      }
      c = inlined_cost(s->op()->body, inlined);
      if (!within_inline_budget(c)) {
        throw UserError(str("the expression of ", s->name(), " is over the compiler's bounds (",
                            c.nodes > kMaxInlinedNodes ? str("more than ", kMaxInlinedNodes, " nodes")
                                                       : str("more than ", kMaxInlinedDepth, " levels deep"),
                            ") even with nothing inlined into it"));
      }
    }
    if (s->attach() == Stage::Attach::Inline) inlined[s->op().get()] = c;
  }
  // Dependency order: a producer made root before its reader's own turn came is listed first.
  std::vector<Stage*> ordered;
  std::set<Stage*> made(rooted.begin(), rooted.end());
  for (Stage* s : sch.stages()) {
    if (made.count(s)) ordered.push_back(s);
  }
  return ordered;
}

}  // namespace tf::ir
