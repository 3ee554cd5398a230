// Traversal of the IR: a mutator that rebuilds only what changed, and read-only walkers.
//
// A pass derives from IRMutator and overrides mutate_expr / mutate_stmt, switching on the
// kinds it cares about and calling the base version for the rest. The base version rebuilds
// a node only when a child changed, so unchanged IR is shared, not copied.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "compiler/ir.h"

namespace tf::ir {

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  virtual Expr mutate_expr(const Expr& e);
  virtual Stmt mutate_stmt(const Stmt& s);
};

// Calls `f` on every expression node under `e` (or `s`), children before parents.
void post_order(const Expr& e, const std::function<void(const Expr&)>& f);
void post_order(const Stmt& s, const std::function<void(const Expr&)>& fe,
                const std::function<void(const Stmt&)>& fs = nullptr);

// The name of a call under `s` whose name `is` accepts (the last one post_order meets), or ""
// when there is none: which warp- or warpgroup-level product a kernel uses, if any.
std::string call_named(const Stmt& s, bool (*is)(const std::string&));

// Replaces variables (by node identity) with expressions.
using VarMap = std::map<const ExprNode*, Expr>;
Expr substitute(const Expr& e, const VarMap& vars);
Stmt substitute(const Stmt& s, const VarMap& vars);

// Whether `e` uses the variable `var`.
bool uses_var(const Expr& e, const Expr& var);
bool uses_var(const Stmt& s, const Expr& var);

// Whether `s` loads or stores any of `buffers`.
bool touches(const Stmt& s, const std::set<std::string>& buffers);

}  // namespace tf::ir
