#include "costmodel/features.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "compiler/ir_mutator.h"
#include "compiler/lower.h"
#include "compiler/schedule_templates.h"

namespace tf::costmodel {
namespace {

using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::ForKind;
using ir::Stmt;

using Lets = std::map<const ExprNode*, Expr>;

float lg(double x) { return static_cast<float>(std::log2(1.0 + std::max(0.0, x))); }

// The constant upper bound of a loop extent: tails after partition_loops are min(c, ...).
int64_t const_upper(const Expr& e) {
  if (const int64_t* v = ir::as_const_int(e)) return std::max<int64_t>(*v, 0);
  if (e.kind() == ExprKind::Min) {
    const auto* b = e.as<ir::Binary>();
    int64_t x = const_upper(b->a), y = const_upper(b->b);
    if (x > 0 && y > 0) return std::min(x, y);
    return std::max(x, y);
  }
  return 1;
}

// How much `e` moves when `v` grows by one: exact for affine indices, the coefficient of the
// leading term through div, mod, min and max (fused and shifted tiles), 1 when `v` enters
// non-linearly.
double coef(const Expr& e, const ExprNode* v, const Lets& lets) {
  switch (e.kind()) {
    case ExprKind::Var: {
      if (e.get() == v) return 1;
      auto it = lets.find(e.get());
      return it == lets.end() ? 0 : coef(it->second, v, lets);
    }
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Load:
      return 0;
    case ExprKind::Add: {
      const auto* b = e.as<ir::Binary>();
      return coef(b->a, v, lets) + coef(b->b, v, lets);
    }
    case ExprKind::Sub: {
      const auto* b = e.as<ir::Binary>();
      return coef(b->a, v, lets) - coef(b->b, v, lets);
    }
    case ExprKind::Mul: {
      const auto* b = e.as<ir::Binary>();
      if (const int64_t* c = ir::as_const_int(b->b)) return coef(b->a, v, lets) * static_cast<double>(*c);
      if (const int64_t* c = ir::as_const_int(b->a)) return coef(b->b, v, lets) * static_cast<double>(*c);
      return coef(b->a, v, lets) != 0 || coef(b->b, v, lets) != 0 ? 1 : 0;
    }
    case ExprKind::Div: {
      const auto* b = e.as<ir::Binary>();
      const int64_t* c = ir::as_const_int(b->b);
      double a = coef(b->a, v, lets);
      return c && *c != 0 ? a / static_cast<double>(*c) : (a != 0 ? 1 : 0);
    }
    case ExprKind::Mod:
    case ExprKind::Min:
    case ExprKind::Max:
      return coef(e.as<ir::Binary>()->a, v, lets);
    case ExprKind::EQ:
    case ExprKind::NE:
    case ExprKind::LT:
    case ExprKind::LE:
    case ExprKind::And:
    case ExprKind::Or: {  // a condition moves with `v` when either side does
      const auto* b = e.as<ir::Binary>();
      return coef(b->a, v, lets) != 0 || coef(b->b, v, lets) != 0 ? 1 : 0;
    }
    case ExprKind::Select:
      return coef(e.as<ir::Select>()->t, v, lets);
    case ExprKind::Cast:
      return coef(e.as<ir::Cast>()->value, v, lets);
    case ExprKind::Let: {
      const auto* l = e.as<ir::Let>();
      Lets inner = lets;
      inner[l->var.get()] = l->value;
      return coef(l->body, v, inner);
    }
    default:
      return 0;
  }
}

struct Loop {
  const ExprNode* var;
  int64_t extent;
  ForKind kind;
};

struct Access {
  std::string buffer;
  Expr index;
  std::vector<double> coefs;  // per enclosing loop, innermost first
};

// A store with the loops around it (innermost first) and what it reads.
struct StoreSite {
  std::vector<Loop> loops;
  std::vector<Access> accesses;  // the store first
  double iterations = 1;
  int float_ops = 0;
  int guards = 0;
  bool guard_on_inner = false;  // an enclosing if's condition moves with the innermost loop
};

class Walker {
 public:
  void stmt(const Stmt& s) {
    switch (s.kind()) {
      case ir::StmtKind::For: {
        const auto* f = s.as<ir::For>();
        // A GPU stage's loop bound to a thread index that an enclosing loop binds already (a
        // cooperative copy inside the block's threads) is the same threads, one iteration
        // each, not a loop of its own: counted, it multiplied the copy's iterations by the
        // block's size and made it the hottest statement instead of the products.
        const int axis = ir::is_gpu_binding(f->for_kind) ? ir::gpu_binding_index(f->for_kind) : -1;
        if (axis >= 0 && bound_[static_cast<size_t>(axis)]) {
          stmt(f->body);
          return;
        }
        int64_t ext = const_upper(f->extent);
        if (f->for_kind == ForKind::Parallel && parallel_depth_ == 0) {
          max_parallel_ = std::max(max_parallel_, ext);
        }
        parallel_depth_ += f->for_kind == ForKind::Parallel;
        if (axis >= 0) bound_[static_cast<size_t>(axis)] = true;
        loops_.push_back({f->var.get(), ext, f->for_kind});
        stmt(f->body);
        loops_.pop_back();
        if (axis >= 0) bound_[static_cast<size_t>(axis)] = false;
        parallel_depth_ -= f->for_kind == ForKind::Parallel;
        return;
      }
      case ir::StmtKind::Store:
        store(*s.as<ir::Store>());
        return;
      case ir::StmtKind::LetStmt: {
        const auto* l = s.as<ir::LetStmt>();
        lets_[l->var.get()] = l->value;
        stmt(l->body);
        lets_.erase(l->var.get());
        return;
      }
      case ir::StmtKind::IfThenElse: {
        const auto* i = s.as<ir::IfThenElse>();
        conds_.push_back(i->cond);
        stmt(i->then_case);
        if (i->else_case) stmt(i->else_case);
        conds_.pop_back();
        return;
      }
      case ir::StmtKind::Allocate: {
        const auto* a = s.as<ir::Allocate>();
        double bytes = static_cast<double>(a->size) * a->elem.bits / 8;
        (a->scope == ir::MemScope::Heap ? heap_bytes_ : local_bytes_) += bytes;
        stmt(a->body);
        return;
      }
      case ir::StmtKind::Block:
        for (const Stmt& c : s.as<ir::Block>()->stmts) stmt(c);
        return;
      case ir::StmtKind::Barrier:
        return;
      case ir::StmtKind::Prefetch: {
        double n = 1;
        for (const Loop& l : loops_) n *= static_cast<double>(l.extent);
        prefetches += n;
        return;
      }
    }
  }

  double total_iterations = 0;
  double prefetches = 0;  // executions of prefetch statements (guards ignored)
  int stores = 0;
  StoreSite hottest;
  double heap_bytes_ = 0, local_bytes_ = 0;
  int64_t max_parallel_ = 0;

 private:
  Access access(const std::string& buffer, const Expr& index, const std::vector<Loop>& loops) const {
    Access a{buffer, index, {}};
    for (const Loop& l : loops) a.coefs.push_back(coef(index, l.var, lets_));
    return a;
  }

  void store(const ir::Store& s) {
    StoreSite site;
    site.loops.assign(loops_.rbegin(), loops_.rend());
    for (const Loop& l : site.loops) site.iterations *= static_cast<double>(l.extent);
    ++stores;
    total_iterations += site.iterations;
    if (site.iterations <= hottest.iterations && stores > 1) return;
    site.guards = static_cast<int>(conds_.size());
    if (!site.loops.empty()) {
      for (const Expr& c : conds_) site.guard_on_inner |= coef(c, site.loops[0].var, lets_) != 0;
    }
    site.accesses.push_back(access(s.buffer, s.index, site.loops));
    std::vector<Access> loads;
    ir::post_order(s.value, [&](const Expr& e) {
      if (const auto* l = e.as<ir::Load>()) {
        bool same_as_store = l->buffer == s.buffer && ir::equal(l->index, s.index);
        bool seen = std::any_of(loads.begin(), loads.end(),
                                [&](const Access& a) { return a.buffer == l->buffer && ir::equal(a.index, l->index); });
        if (!same_as_store && !seen) loads.push_back(access(l->buffer, l->index, site.loops));
      } else if (e.type().is_float()) {
        switch (e.kind()) {
          case ExprKind::Add: case ExprKind::Sub: case ExprKind::Mul: case ExprKind::Div:
          case ExprKind::Min: case ExprKind::Max: case ExprKind::Call:
            ++site.float_ops;
            break;
          case ExprKind::Select:
            ++site.guards;
            break;
          default:
            break;
        }
      }
    });
    for (Access& a : loads) site.accesses.push_back(std::move(a));
    hottest = std::move(site);
  }

  std::vector<Loop> loops_;
  std::array<bool, 6> bound_{};  // blockIdx.x .. threadIdx.z bound by an enclosing loop
  Lets lets_;
  std::vector<Expr> conds_;  // of the enclosing ifs
  int parallel_depth_ = 0;
};

constexpr size_t kLevels[kFootprintLevels] = {1, 2, 3, 4, 6, 0};  // 0: the whole nest

// Distinct elements an access touches while the innermost `levels` loops run: the product of
// the extents it moves along, bounded by the span of addresses it covers.
double footprint(const Access& a, const std::vector<Loop>& loops, size_t levels) {
  double product = 1, span = 1;
  for (size_t i = 0; i < levels && i < loops.size(); ++i) {
    if (a.coefs[i] == 0) continue;
    product *= static_cast<double>(loops[i].extent);
    span += std::abs(a.coefs[i]) * static_cast<double>(loops[i].extent - 1);
  }
  return std::max(1.0, std::min(product, span));
}

double iterations_inside(const std::vector<Loop>& loops, size_t levels) {
  double n = 1;
  for (size_t i = 0; i < levels && i < loops.size(); ++i) n *= static_cast<double>(loops[i].extent);
  return n;
}

// The vector width LLVM's loop vectorizer gives the hottest store's innermost loop when the
// schedule leaves it a plain serial loop (up to 4 vectors interleaved): the store moves
// contiguously along it, every load is contiguous or invariant along it, and no enclosing
// guard depends on it (tails of outer loops leave such guards; they do not stop it). A
// reduction along it is not vectorized: without fast-math LLVM keeps float sums in order.
// 0 when it does not apply.
double implicit_vector_width(const StoreSite& hot, double lanes) {
  if (hot.loops.empty() || hot.loops[0].kind != ForKind::Serial || hot.guard_on_inner) return 0;
  if (hot.accesses.empty() || hot.accesses[0].coefs[0] != 1) return 0;
  for (const Access& a : hot.accesses) {
    if (a.coefs[0] != 0 && a.coefs[0] != 1) return 0;
  }
  if (hot.loops[0].extent < 2) return 0;
  return std::min(static_cast<double>(hot.loops[0].extent), 4 * lanes);
}

}  // namespace

const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {
        "flops",           "iterations.all",  "iterations.hot", "iterations.other", "stores",
        "nests",           "parallel.extent", "parallel.work",  "bytes.heap",       "bytes.local",
        "vector.width",    "unrolled.body",   "hot.float_ops",  "hot.intensity",    "hot.guards",
        "target.lanes",    "implicit.vector", "prefetches",
    };
    for (size_t l = 0; l < kLoopSlots; ++l) {
      for (const char* f : {"extent", "serial", "parallel", "vectorized", "unrolled"}) {
        n.push_back("loop" + std::to_string(l) + "." + f);
      }
    }
    for (size_t a = 0; a < kAccessSlots; ++a) {
      std::string p = "access" + std::to_string(a) + ".";
      n.push_back(p + "stride");
      n.push_back(p + "pattern");
      n.push_back(p + "invariant_levels");
      for (size_t k = 0; k < kFootprintLevels; ++k) {
        std::string level = kLevels[k] ? "l" + std::to_string(kLevels[k]) : "all";
        n.push_back(p + "bytes." + level);
        n.push_back(p + "reuse." + level);
      }
    }
    TF_CHECK(n.size() == kNumFeatures, "feature names ", n.size(), " != ", kNumFeatures);
    return n;
  }();
  return names;
}

std::vector<float> extract_features(const ir::LoweredFunc& f, double flops, int vector_lanes) {
  Walker w;
  w.stmt(f.body);
  std::vector<float> out;
  out.reserve(kNumFeatures);
  const StoreSite& hot = w.hottest;
  const std::vector<Loop>& loops = hot.loops;

  double vector_width = 1, unrolled = 1;
  for (const Loop& l : loops) {
    if (l.kind == ForKind::Vectorized) vector_width *= static_cast<double>(l.extent);
    if (l.kind == ForKind::Unrolled) unrolled *= static_cast<double>(l.extent);
  }
  const double lanes = std::max(1, vector_lanes);
  double vectors = std::ceil(vector_width / lanes);
  double hot_bytes = 0;
  for (const Access& a : hot.accesses) hot_bytes += 4 * footprint(a, loops, loops.size());
  size_t nests = 1;
  if (const auto* b = f.body.as<ir::Block>()) nests = b->stmts.size();
  double par = static_cast<double>(std::max<int64_t>(w.max_parallel_, 1));

  out.push_back(lg(flops));
  out.push_back(lg(w.total_iterations));
  out.push_back(lg(hot.iterations));
  out.push_back(lg(w.total_iterations - hot.iterations));
  out.push_back(static_cast<float>(w.stores));
  out.push_back(static_cast<float>(nests));
  out.push_back(lg(static_cast<double>(w.max_parallel_)));
  out.push_back(lg(hot.iterations / par));
  out.push_back(lg(w.heap_bytes_));
  out.push_back(lg(w.local_bytes_));
  out.push_back(lg(vector_width / lanes));
  out.push_back(lg(unrolled * vectors));
  out.push_back(static_cast<float>(hot.float_ops));
  out.push_back(lg(hot.iterations * std::max(1, hot.float_ops) / std::max(hot_bytes, 1.0)));
  out.push_back(static_cast<float>(hot.guards));
  out.push_back(static_cast<float>(lanes));
  out.push_back(lg(implicit_vector_width(hot, lanes) / lanes));
  out.push_back(lg(w.prefetches));

  for (size_t l = 0; l < kLoopSlots; ++l) {
    if (l >= loops.size()) {
      out.insert(out.end(), kLoopFeatures, 0.0f);
      continue;
    }
    out.push_back(lg(static_cast<double>(loops[l].extent)));
    for (ForKind k : {ForKind::Serial, ForKind::Parallel, ForKind::Vectorized, ForKind::Unrolled}) {
      out.push_back(loops[l].kind == k ? 1.0f : 0.0f);
    }
  }

  // The store, then the loads with the largest whole-nest footprint (by name on ties).
  std::vector<const Access*> acc;
  for (const Access& a : hot.accesses) acc.push_back(&a);
  if (acc.size() > 1) {
    std::stable_sort(acc.begin() + 1, acc.end(), [&](const Access* x, const Access* y) {
      double fx = footprint(*x, loops, loops.size()), fy = footprint(*y, loops, loops.size());
      return fx > fy || (fx == fy && x->buffer < y->buffer);
    });
  }
  // The loop whose step is one vector lane: the innermost vectorized loop, else the innermost.
  size_t lane_loop = 0;
  for (size_t l = 0; l < loops.size(); ++l) {
    if (loops[l].kind == ForKind::Vectorized) {
      lane_loop = l;
      break;
    }
  }
  for (size_t s = 0; s < kAccessSlots; ++s) {
    if (s >= acc.size()) {
      out.insert(out.end(), kAccessFeatures, 0.0f);
      continue;
    }
    const Access& a = *acc[s];
    double inner = loops.empty() ? 0 : a.coefs[0];
    double lane = loops.empty() ? 0 : a.coefs[lane_loop];
    out.push_back(lg(std::abs(inner)));
    out.push_back(lane == 1 ? 1.0f : lane == 0 ? 2.0f : 0.0f);  // contiguous, broadcast, strided
    out.push_back(static_cast<float>(std::count(a.coefs.begin(), a.coefs.end(), 0.0)));
    for (size_t k = 0; k < kFootprintLevels; ++k) {
      size_t levels = kLevels[k] ? kLevels[k] : loops.size();
      double fp = footprint(a, loops, levels);
      out.push_back(lg(4 * fp));
      out.push_back(lg(iterations_inside(loops, levels) / fp));
    }
  }
  TF_CHECK(out.size() == kNumFeatures, "extracted ", out.size(), " features, expected ", kNumFeatures);
  for (float& v : out) {
    if (!std::isfinite(v)) v = 0;
  }
  return out;
}

std::vector<float> config_features(const OpGraph& g, const Target& t, const nlohmann::json& config) {
  ir::Schedule s = apply_config(g, t, config);
  LowerOptions o;
  o.stop_after = "partition_loops";
  o.verify_each = false;
  LowerResult r = lower(s, g.inputs, "candidate", o);
  return extract_features(r.func, static_cast<double>(g.flops), t.vector_lanes());
}

}  // namespace tf::costmodel
