#include "compiler/inline_budget.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/error.h"

namespace tf::ir {

namespace {

// Calls `f` on each child expression of `e`.
template <typename F>
void for_each_child(const ExprNode* e, F&& f) {
  auto visit = [&](const Expr& c) {
    if (c) f(c.get());
  };
  switch (e->kind) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
      return;
    case ExprKind::Not:
      return visit(static_cast<const Not*>(e)->a);
    case ExprKind::Select:
      visit(static_cast<const Select*>(e)->cond);
      visit(static_cast<const Select*>(e)->t);
      return visit(static_cast<const Select*>(e)->f);
    case ExprKind::Cast:
      return visit(static_cast<const Cast*>(e)->value);
    case ExprKind::Load:
      return visit(static_cast<const Load*>(e)->index);
    case ExprKind::Ramp:
      visit(static_cast<const Ramp*>(e)->base);
      return visit(static_cast<const Ramp*>(e)->stride);
    case ExprKind::Broadcast:
      return visit(static_cast<const Broadcast*>(e)->value);
    case ExprKind::Call:
      for (const Expr& a : static_cast<const Call*>(e)->args) visit(a);
      return;
    case ExprKind::Let:
      visit(static_cast<const Let*>(e)->value);
      return visit(static_cast<const Let*>(e)->body);
    case ExprKind::TensorRead:
      for (const Expr& i : static_cast<const TensorRead*>(e)->indices) visit(i);
      return;
    case ExprKind::Reduce:
      return visit(static_cast<const Reduce*>(e)->source);
    default:
      visit(static_cast<const Binary*>(e)->a);
      return visit(static_cast<const Binary*>(e)->b);
  }
}

// How many times `body` reads each operation (as a walk sees it: a read under a shared
// subexpression counts at each use). Stops counting past kMaxInlinedNodes nodes.
std::map<const Operation*, int64_t> reads_of(const Expr& body) {
  std::map<const Operation*, int64_t> reads;
  std::vector<const ExprNode*> stack;
  if (body) stack.push_back(body.get());
  for (int64_t visited = 0; !stack.empty() && ++visited <= kMaxInlinedNodes;) {
    const ExprNode* e = stack.back();
    stack.pop_back();
    if (e->kind == ExprKind::TensorRead) ++reads[static_cast<const TensorRead*>(e)->op.get()];
    for_each_child(e, [&](const ExprNode* c) { stack.push_back(c); });
  }
  return reads;
}

}  // namespace

ExprCost inlined_cost(const Expr& body, const std::map<const Operation*, ExprCost>& inlined) {
  ExprCost c;
  std::vector<std::pair<const ExprNode*, int64_t>> stack;
  if (body) stack.push_back({body.get(), 1});
  while (!stack.empty()) {
    auto [e, d] = stack.back();
    stack.pop_back();
    c.nodes += 1;
    c.depth = std::max(c.depth, d);
    if (e->kind == ExprKind::TensorRead) {
      if (auto it = inlined.find(static_cast<const TensorRead*>(e)->op.get()); it != inlined.end()) {
        // The read becomes the producer's expression (its indices substituted in).
        c.nodes += it->second.nodes;
        c.depth = std::max(c.depth, d + it->second.depth);
      }
    }
    if (!within_inline_budget(c)) return c;
    for_each_child(e, [&, d = d](const ExprNode* child) { stack.push_back({child, d + 1}); });
  }
  return c;
}

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
