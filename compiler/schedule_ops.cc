#include "compiler/schedule_ops.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "compiler/ir_mutator.h"
#include "compiler/simplify.h"

namespace tf::ir {
namespace {

// Stage::prefetch: a run of at most this many cache lines is prefetched by unrolled code.
constexpr int64_t kUnrolledLines = 32;

// Where a tensor's elements live: element `idx` is at linear((idx - mins), extents), its
// dimensions stored in `order` (outermost first; empty: as the tensor), each row of the
// innermost stored one followed by `pad` unused elements (Stage::storage_layout).
// With `core`, the two innermost stored dimensions are 8 x 8 core matrices
// (Stage::storage_layout's core_matrices).
struct BufferInfo {
  std::vector<Expr> mins;
  std::vector<int64_t> extents;
  std::vector<size_t> order;
  int64_t pad = 0;
  bool core = false;
};

// The two innermost stored dimensions of a buffer in core matrices: its rows, then its columns.
std::pair<size_t, size_t> core_dims(const BufferInfo& b) {
  const size_t k = b.extents.size();
  return b.order.empty() ? std::pair{k - 2, k - 1} : std::pair{b.order[k - 2], b.order[k - 1]};
}

Expr linear_index(const std::vector<Expr>& idx, const BufferInfo& b) {
  Expr index = 0;
  const size_t plain = b.core ? idx.size() - 2 : idx.size();
  for (size_t i = 0; i < plain; ++i) {
    size_t d = b.order.empty() ? i : b.order[i];
    int64_t row = b.extents[d] + (i + 1 == idx.size() ? b.pad : 0);
    index = index * Expr(row) + (idx[d] - b.mins[d]);
  }
  if (!b.core) return index;
  // Core matrices of 64 elements and `pad` after each (Stage::storage_layout).
  const auto [dr, dc] = core_dims(b);
  const int64_t tile = Stage::core_matrix_elements(b.extents[dr], b.extents[dc], b.pad), matrix = 64 + b.pad;
  const Expr r = idx[dr] - b.mins[dr], c = idx[dc] - b.mins[dc], eight(int64_t{8});
  return index * Expr(tile) + r / eight * Expr((b.extents[dc] + 7) / 8 * matrix) + c / eight * Expr(matrix) +
         r % eight * eight + c % eight;
}

// A copy into shared buffer `buffer` that cannot be asynchronous: every store rounds what it
// copies (a 16-bit tile of float32 data: Schedule::cache_read_shared_16), or copies 16-bit
// elements to places that are not consecutive along the thread's innermost loop (a transposed
// tile of float16 data: cp.async moves 4 to 16 consecutive bytes). Split in two at the
// registers: `load` keeps the values in a thread's `regs` (`size` of them, of `type`: one per
// iteration of the thread's own loops, constant extents), `store` (rounds and) stores them into
// the buffer, both under the copy's guards.
struct StagedCopy {
  Stmt load, store;
  int64_t size = 0;
  Type type;
};

std::optional<StagedCopy> stage_through_registers(const Stmt& nest, const std::string& buffer,
                                                  const std::string& regs) {
  // The thread's own loops around each store, outermost first; one store only.
  std::vector<const For*> loops, at_store;
  const Store* store = nullptr;
  int stores = 0;
  bool ok = true;
  std::function<void(const Stmt&)> walk = [&](const Stmt& st) {
    if (!st || !ok) return;
    if (const For* f = st.as<For>()) {
      const bool own = !is_gpu_binding(f->for_kind);
      if (own) loops.push_back(f);
      walk(f->body);
      if (own) loops.pop_back();
    } else if (const Block* b = st.as<Block>()) {
      for (const Stmt& x : b->stmts) walk(x);
    } else if (const IfThenElse* i = st.as<IfThenElse>()) {
      walk(i->then_case);
      walk(i->else_case);
    } else if (const Store* x = st.as<Store>()) {
      ok = x->buffer == buffer && ++stores == 1;
      store = x;
      at_store = loops;
    } else {
      ok = false;  // anything else: not a plain copy nest
    }
  };
  walk(nest);
  if (!ok || stores != 1) return std::nullopt;
  const Call* c = store->value.as<Call>();
  const bool rounds = c && (c->name == kFloatToF16 || c->name == kFloatToBF16);
  if (!rounds) {
    const Load* l = store->value.as<Load>();
    if (!l || l->type.element_of().bytes() != 2 || at_store.empty()) return std::nullopt;
    // The step along the thread's innermost loop, from each iteration to the next (its last
    // has none: a tile in core matrices, compiler/schedule.h, moves on to the next matrix there).
    RangeMap ranges;
    for (const For* f : at_store) {
      const int64_t* lo = as_const_int(f->min);
      const int64_t* n = as_const_int(f->extent);
      const bool inner = f == at_store.back();
      if (lo && n && *n > (inner ? 1 : 0)) ranges[f->var.get()] = Interval{*lo, *lo + *n - (inner ? 2 : 1)};
    }
    const Expr& v = at_store.back()->var;
    const Expr step = simplify(substitute(store->index, {{v.get(), v + 1}}) - store->index, ranges);  // kept alive
    const int64_t* s = as_const_int(step);
    if (s && *s == 1) return std::nullopt;  // consecutive: cp.async where the load is too
  }
  const Type type = rounds ? Type::float32() : store->value.type().element_of();
  Expr r = 0;
  int64_t size = 1;
  for (const For* f : at_store) {
    const int64_t* e = as_const_int(f->extent);
    const int64_t* m = as_const_int(f->min);
    if (!e || !m || *m != 0) return std::nullopt;
    r = r * Expr(*e) + f->var;
    size *= *e;
  }
  class Split : public IRMutator {
   public:
    Split(const std::string& b, const std::string& regs, Expr r, Type t, bool load)
        : b_(b), regs_(regs), r_(std::move(r)), t_(t), load_(load) {}
    Stmt mutate_stmt(const Stmt& st) override {
      // The thread's loops unrolled, so that the registers are registers (constant indices).
      if (const For* f = st.as<For>(); f && f->for_kind == ForKind::Serial) {
        return For::make(f->var, f->min, f->extent, ForKind::Unrolled, mutate_stmt(f->body));
      }
      const Store* x = st.as<Store>();
      if (!x || x->buffer != b_) return IRMutator::mutate_stmt(st);
      const Call* c = x->value.as<Call>();
      const bool rounds = c && (c->name == kFloatToF16 || c->name == kFloatToBF16);
      if (load_) return Store::make(regs_, rounds ? c->args[0] : x->value, r_);
      Expr held = Load::make(t_, regs_, r_);
      return Store::make(b_, rounds ? Call::make(c->name, {held}) : held, x->index);
    }

   private:
    const std::string& b_;
    const std::string& regs_;
    Expr r_;
    Type t_;
    bool load_;
  };
  Split load(buffer, regs, r, type, true), stored(buffer, regs, r, type, false);
  return StagedCopy{load.mutate_stmt(nest), stored.mutate_stmt(nest), size, type};
}

// A symbolic inclusive range [lo, hi].
struct SymRange {
  Expr lo, hi;
};

// Symbolic interval of `e` when the variables in `varying` take every value of their range
// and all others stay fixed. nullopt when the expression is not understood.
std::optional<SymRange> sym_bounds(const Expr& e, const RangeMap& varying) {
  bool uses_varying = false;
  post_order(e, [&](const Expr& x) { uses_varying |= x.kind() == ExprKind::Var && varying.count(x.get()); });
  if (!uses_varying) return SymRange{e, e};
  switch (e.kind()) {
    case ExprKind::Var: {
      Interval r = varying.at(e.get());
      return SymRange{r.lo, r.hi};
    }
    case ExprKind::Add:
    case ExprKind::Sub:
    case ExprKind::Min:
    case ExprKind::Max: {
      const Binary* b = e.as<Binary>();
      auto x = sym_bounds(b->a, varying), y = sym_bounds(b->b, varying);
      if (!x || !y) return std::nullopt;
      if (e.kind() == ExprKind::Add) return SymRange{x->lo + y->lo, x->hi + y->hi};
      if (e.kind() == ExprKind::Sub) return SymRange{x->lo - y->hi, x->hi - y->lo};
      if (e.kind() == ExprKind::Min) return SymRange{min(x->lo, y->lo), min(x->hi, y->hi)};
      return SymRange{max(x->lo, y->lo), max(x->hi, y->hi)};
    }
    case ExprKind::Mul: {
      const Binary* b = e.as<Binary>();
      const int64_t* c = as_const_int(b->b);
      Expr other = b->a;
      if (!c) {
        c = as_const_int(b->a);
        other = b->b;
      }
      if (!c) return std::nullopt;
      auto x = sym_bounds(other, varying);
      if (!x) return std::nullopt;
      if (*c >= 0) return SymRange{x->lo * *c, x->hi * *c};
      return SymRange{x->hi * *c, x->lo * *c};
    }
    case ExprKind::Div: {
      const Binary* b = e.as<Binary>();
      const int64_t* c = as_const_int(b->b);
      if (!c || *c <= 0) return std::nullopt;
      auto x = sym_bounds(b->a, varying);
      if (!x) return std::nullopt;
      return SymRange{x->lo / *c, x->hi / *c};
    }
    case ExprKind::Mod: {
      const Binary* b = e.as<Binary>();
      const int64_t* c = as_const_int(b->b);
      if (!c || *c <= 0) return std::nullopt;
      return SymRange{0, *c - 1};
    }
    default:
      return std::nullopt;
  }
}

class Lowerer {
 public:
  explicit Lowerer(Schedule& sch) : sch_(sch) {
    for (Stage* s : sch_.stages()) {
      by_name_[s->name()] = s;
      if (s->attach() == Stage::Attach::At) attached_[s->attach_stage()].push_back(s);
    }
    for (const auto& [name, t] : sch_.placeholders()) {
      buffers_[name] = BufferInfo{std::vector<Expr>(t->shape.size(), Expr(0)), t->shape, {}, 0};
    }
    check_attachments();
  }

  Stmt lower() {
    const Stage& out = sch_[sch_.output()];
    if (out.attach() != Stage::Attach::Root) {
      throw UserError(str("the output stage ", out.name(), " must be computed at root"));
    }
    // Root stages in dependency order; each non-output one owns a heap buffer that lives
    // until the end of the function.
    std::vector<Stage*> roots;
    for (Stage* s : sch_.stages()) {
      if (s->attach() == Stage::Attach::Root) {
        if (s->scope() == MemScope::Shared) {
          throw UserError(str("shared stage ", s->name(), " must be computed at a loop of the kernel (compute_at)"));
        }
        roots.push_back(s);
        buffers_[s->name()] = full_buffer(*s);
      }
    }
    Stmt result;
    for (auto it = roots.rbegin(); it != roots.rend(); ++it) {
      Stage* s = *it;
      const BufferInfo& b = buffers_[s->name()];
      Stmt nest = make_stage(*s, b);
      if (s == &out) {
        result = nest;
        continue;
      }
      result = Allocate::make(s->name(), s->op()->dtype, size_of(b), MemScope::Heap,
                              Block::make({nest, result}));
    }
    return result;
  }

 private:
  static int64_t size_of(const BufferInfo& b) {
    int64_t n = 1;
    for (int64_t e : b.extents) n *= e;
    if (b.core) {
      const auto [dr, dc] = core_dims(b);
      return n / b.extents[dr] / b.extents[dc] * Stage::core_matrix_elements(b.extents[dr], b.extents[dc], b.pad);
    }
    if (b.pad && !b.extents.empty()) {
      size_t inner = b.order.empty() ? b.extents.size() - 1 : b.order.back();
      n = n / b.extents[inner] * (b.extents[inner] + b.pad);
    }
    return n;
  }

  static BufferInfo full_buffer(const Stage& s) {
    return BufferInfo{std::vector<Expr>(s.op()->shape.size(), Expr(0)), s.op()->shape, {}, 0};
  }

  // Whether `s` is computed inside `at`'s loops (attached to it, or to a stage inside them).
  // Such a reader of a stage computed at `at` runs where that stage's region is (a row's
  // reduction read by another's partial results, computed at the same row: the schedule
  // reads it at the row it is computed for; compiler/model_codegen.cc schedule_rows_gpu).
  static bool nested_in(const Stage& s, const Stage& at) {
    for (const Stage* p = &s; p->attach() == Stage::Attach::At; p = p->attach_stage()) {
      if (p->attach_stage() == &at) return true;
    }
    return false;
  }

  // Every stage computed at another is read by that stage only, or by stages computed inside
  // its loops.
  void check_attachments() {
    for (Stage* s : sch_.stages()) {
      if (s->attach() != Stage::Attach::At) continue;
      const Stage* at = s->attach_stage();
      if (at->attach() == Stage::Attach::Inline) {
        throw UserError(str("stage ", s->name(), " is computed at ", at->name(), ", which is inlined"));
      }
      for (Stage* reader : sch_.stages()) {
        if (reader == at || reader->attach() == Stage::Attach::Inline || nested_in(*reader, *at)) continue;
        for (const Tensor& in : inputs_of(reader->op())) {
          if (in->name == s->name()) {
            throw UserError(str("stage ", s->name(), " is computed at ", at->name(),
                                " but is also read by ", reader->name()));
          }
        }
      }
    }
  }

  // The body of an inlined stage at `indices`.
  static Expr inlined(const Stage& s, const std::vector<Expr>& indices) {
    const Operation& op = *s.op();
    VarMap m;
    for (size_t d = 0; d < op.axes.size(); ++d) m[op.axes[d].var.get()] = indices[d];
    return substitute(op.body, m);
  }

  // Replaces reads of inlined stages by their bodies, and all other reads by loads.
  Expr lower_reads(const Expr& e) {
    class Reads : public IRMutator {
     public:
      explicit Reads(Lowerer& l) : l_(l) {}
      Expr mutate_expr(const Expr& e) override {
        Expr x = IRMutator::mutate_expr(e);
        const TensorRead* r = x.as<TensorRead>();
        if (!r) return x;
        auto st = l_.by_name_.find(r->op->name);
        if (st != l_.by_name_.end() && st->second->attach() == Stage::Attach::Inline) {
          return mutate_expr(inlined(*st->second, r->indices));
        }
        auto b = l_.buffers_.find(r->op->name);
        TF_CHECK(b != l_.buffers_.end(), "no buffer for ", r->op->name);
        return Load::make(r->op->dtype, r->op->name, linear_index(r->indices, b->second));
      }

     private:
      Lowerer& l_;
    };
    Reads reads(*this);
    return reads.mutate_expr(e);
  }

  // All reads of `name` in `e`, with reads of inlined stages expanded.
  void collect_reads(const Expr& e, const std::string& name, std::vector<std::vector<Expr>>& out) {
    post_order(e, [&](const Expr& x) {
      const TensorRead* r = x.as<TensorRead>();
      if (!r) return;
      if (r->op->name == name) {
        out.push_back(r->indices);
        return;
      }
      auto st = by_name_.find(r->op->name);
      if (st != by_name_.end() && st->second->attach() == Stage::Attach::Inline) {
        collect_reads(inlined(*st->second, r->indices), name, out);
      }
    });
  }

  // The dimensions of stage `p` of extent 2 that the loops inside a tensorized loop of it run
  // over (a warp-level product's fragment: its rows g, g + 8 and columns 2t, 2t + 1): computed
  // whole whatever its readers read, as the instruction computes them (a reader that reads one
  // row, as a batch-1 product's tail reads the only row at index 0, must not shrink the loops
  // the instruction replaces). Other dimensions keep their inferred regions (a nest over
  // anything else is the tensorize pass's to refuse).
  static std::set<size_t> fragment_dims(const Stage& p) {
    std::set<size_t> dims;
    const std::vector<Expr>& leaves = p.leaves();
    for (const auto& [var, intrinsic] : p.tensorized()) {
      auto at = std::find_if(leaves.begin(), leaves.end(), [&](const Expr& l) { return l.same_as(var); });
      for (auto it = at == leaves.end() ? at : at + 1; it != leaves.end(); ++it) {
        for (size_t d = 0; d < p.op()->axes.size(); ++d) {
          if (p.op()->axes[d].var.same_as(*it) && p.op()->shape[d] == 2) dims.insert(d);
        }
      }
    }
    return dims;
  }

  // The ranges of the leaves inside leaf `pos` (of extents `extents`): what one iteration of
  // that loop runs over.
  static RangeMap inside(const std::vector<Expr>& leaves, const std::map<const ExprNode*, int64_t>& extents,
                         size_t pos) {
    RangeMap varying;
    for (size_t i = pos + 1; i < leaves.size(); ++i) {
      varying[leaves[i].get()] = Interval{0, extents.at(leaves[i].get()) - 1};
    }
    return varying;
  }

  // The region of `p` that one iteration of leaf `pos` of `s` reads; `body` is s's body
  // in terms of its leaves.
  BufferInfo infer_region(const Stage& p, const Expr& body, const std::vector<Expr>& leaves,
                          const std::map<const ExprNode*, int64_t>& extents, size_t pos) {
    RangeMap varying = inside(leaves, extents, pos);
    // A shared buffer serves every thread of the block: its region spans all their indices.
    if (p.scope() == MemScope::Shared) {
      for (const ExprNode* v : thread_vars_) varying[v] = ranges_.at(v);
    }
    BufferInfo region;
    region.order = p.storage_order();
    region.pad = p.storage_pad();
    region.core = p.storage_core_matrices();
    TF_CHECK(read_box(p.name(), p.op()->shape, body, varying, fragment_dims(p), region),
             "stage ", p.name(), " is attached where it is not read");
    return region;
  }

  // The box of `name`'s elements (a tensor of `shape`) that `body` reads while the variables
  // in `varying` take every value of their ranges: its first index (an expression of the
  // variables around) and extent per dimension, into `box`'s mins and extents; a dimension in
  // `whole`, or whose bounds are not understood or not constant, whole. False when `body`
  // does not read `name`.
  bool read_box(const std::string& name, const std::vector<int64_t>& shape, const Expr& body, RangeMap varying,
                const std::set<size_t>& whole, BufferInfo& box) {
    // A loop of one iteration varies nothing: its variable is its value (a split by 1).
    VarMap single;
    for (auto it = varying.begin(); it != varying.end();) {
      if (it->second.lo == it->second.hi) {
        single[it->first] = Expr(it->second.lo);
        it = varying.erase(it);
      } else {
        ++it;
      }
    }
    std::vector<std::vector<Expr>> reads;
    collect_reads(single.empty() ? body : substitute(body, single), name, reads);
    if (reads.empty()) return false;
    BufferInfo& region = box;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (whole.count(d)) {
        region.mins.push_back(0);
        region.extents.push_back(shape[d]);
        continue;
      }
      Expr lo, hi;
      bool known = true;
      for (const auto& idx : reads) {
        auto r = sym_bounds(simplify(idx[d], ranges_), varying);
        if (!r) {
          known = false;
          break;
        }
        lo = lo ? min(lo, r->lo) : r->lo;
        hi = hi ? max(hi, r->hi) : r->hi;
      }
      Expr ext = known ? simplify(hi - lo + 1, ranges_) : Expr();
      const int64_t* c = ext ? as_const_int(ext) : nullptr;
      std::optional<Interval> bound = ext ? const_bounds(ext, ranges_) : std::nullopt;
      if (c && *c <= shape[d]) {
        region.mins.push_back(simplify(lo, ranges_));
        region.extents.push_back(*c);
      } else if (bound && bound->hi < shape[d]) {
        region.mins.push_back(simplify(lo, ranges_));
        region.extents.push_back(std::max<int64_t>(bound->hi, 1));
      } else {
        region.mins.push_back(0);
        region.extents.push_back(shape[d]);
      }
    }
    return true;
  }

  // Stage::prefetch `p` of stage `s`, at the top of an iteration of its leaf `pos`: a prefetch
  // of each line of the box of p.input that the iteration of `pos` reads `p.offset` iterations
  // of p.from further on, under the guard that that iteration exists.
  Stmt prefetch_lines(const Stage& s, const Stage::Prefetching& p, const Expr& body, const std::vector<Expr>& leaves,
                      const std::map<const ExprNode*, int64_t>& extents, size_t pos) {
    auto info = buffers_.find(p.input);
    Type elem;
    if (auto ph = sch_.placeholders().find(p.input); ph != sch_.placeholders().end()) {
      elem = ph->second->dtype;
    } else if (auto st = by_name_.find(p.input); st != by_name_.end()) {
      elem = st->second->op()->dtype;
    }
    if (info == buffers_.end() || !elem.bits) {
      throw UserError(str("stage ", s.name(), " prefetches ", p.input, ", which is no buffer of this kernel"));
    }
    const BufferInfo& buf = info->second;
    if (!buf.order.empty() || buf.pad || buf.core) {
      throw UserError(str("stage ", s.name(), " prefetches ", p.input, ", which is not stored row-major"));
    }
    // The loops around leaf `pos`: this stage's up to it, and those of the stages it is computed
    // at, up to each one's attachment.
    bool around = false;
    for (size_t i = 0; i <= pos; ++i) around |= leaves[i].same_as(p.from);
    for (const Stage* at = &s; at->attach() == Stage::Attach::At; at = at->attach_stage()) {
      const std::vector<Expr>& outer = at->attach_stage()->leaves();
      for (const Expr& v : outer) {
        around |= v.same_as(p.from);
        if (v.same_as(at->attach_var())) break;
      }
    }
    auto from = ranges_.find(p.from.get());
    if (!around || from == ranges_.end()) {
      throw UserError(str("stage ", s.name(), " prefetches ", p.input, " from loop '", p.from.as<Var>()->name,
                          "', which is not a loop around its loop '", s.var_name(leaves[pos]), "'"));
    }
    BufferInfo box;
    if (!read_box(p.input, buf.extents, body, inside(leaves, extents, pos), {}, box)) {
      throw UserError(str("stage ", s.name(), " prefetches ", p.input, ", which it does not read inside its loop '",
                          s.var_name(leaves[pos]), "'"));
    }
    const Expr later = p.from + Expr(p.offset);
    for (Expr& m : box.mins) m = substitute(m, {{p.from.get(), later}});
    // The innermost dimension the box does not span: the dimensions inside it are whole, so it
    // and they are one run of elements; the dimensions outside it are looped over.
    size_t k = box.extents.size();
    int64_t run = 1;
    for (size_t d = box.extents.size(); d-- > 0;) {
      run *= box.extents[d];
      k = d;
      if (box.extents[d] != buf.extents[d]) break;
    }
    constexpr int64_t kLine = 64;
    const int64_t bytes = elem.bytes() * elem.lanes, per_line = std::max<int64_t>(1, kLine / bytes);
    std::vector<Expr> idx(box.mins.size(), Expr(0));
    std::vector<std::pair<Expr, int64_t>> loops;  // outside k, outermost first
    for (size_t d = 0; d < box.mins.size(); ++d) {
      if (d < k && box.extents[d] > 1) {
        Expr v = Var::make(str(s.name(), ".prefetch.", d), Type::int64());
        loops.emplace_back(v, box.extents[d]);
        idx[d] = box.mins[d] + v;
      } else if (d <= k) {
        idx[d] = box.mins[d];
      }
    }
    const Expr base = simplify(linear_index(idx, buf), ranges_);
    const int64_t lines = (run * bytes + kLine - 1) / kLine;
    Expr j = Var::make(str(s.name(), ".prefetch.line"), Type::int64());
    Stmt nest = For::make(j, 0, lines, lines <= kUnrolledLines ? ForKind::Unrolled : ForKind::Serial,
                          Prefetch::make(p.input, elem, base + j * Expr(per_line)));
    // A run that may start inside a line ends inside one more.
    if ((known_multiple(base) * bytes) % kLine != 0 || (run * bytes) % kLine != 0) {
      nest = Block::make({nest, Prefetch::make(p.input, elem, base + Expr(run - 1))});
    }
    for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
      nest = For::make(it->first, 0, it->second, ForKind::Unrolled, nest);
    }
    return IfThenElse::make(later < Expr(from->second.hi + 1), nest);
  }

  // The loop nest of stage `s` computing the region `b` of its output.
  Stmt make_stage(Stage& s, const BufferInfo& b) {
    const Operation& op = *s.op();
    // Extents of every variable, from the root extents through the relations.
    std::map<const ExprNode*, int64_t> ext;
    for (size_t d = 0; d < op.axes.size(); ++d) ext[op.axes[d].var.get()] = b.extents[d];
    for (const IterVar& iv : op.reduce_axes) ext[iv.var.get()] = iv.extent;
    for (const Relation& r : s.relations()) {
      if (r.kind == Relation::Kind::Split) {
        int64_t e = ext.at(r.parent.get());
        int64_t inner = r.factor ? r.factor : (e + r.nparts - 1) / r.nparts;
        ext[r.inner.get()] = inner;
        ext[r.outer.get()] = r.factor ? (e + r.factor - 1) / r.factor : r.nparts;
      } else {
        ext[r.fused.get()] = ext.at(r.outer.get()) * ext.at(r.inner.get());
      }
    }
    const std::vector<Expr>& leaves = s.leaves();
    size_t first_reduce = leaves.size();
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (s.is_reduce_var(leaves[i])) {
        first_reduce = i;
        break;
      }
    }
    // Values of the root variables in terms of the leaves.
    VarMap value;
    for (const Expr& v : leaves) value[v.get()] = v;
    for (auto it = s.relations().rbegin(); it != s.relations().rend(); ++it) {
      if (it->kind == Relation::Kind::Split) {
        int64_t inner = ext.at(it->inner.get());
        Expr base = value.at(it->outer.get()) * Expr(inner);
        if (shift_inwards(s, *it, ext.at(it->parent.get()), inner, first_reduce)) {
          base = min(base, Expr(ext.at(it->parent.get()) - inner));
        }
        value[it->parent.get()] = base + value.at(it->inner.get());
      } else {
        Expr f = value.at(it->fused.get());
        int64_t inner = ext.at(it->inner.get());
        value[it->outer.get()] = f / inner;
        value[it->inner.get()] = f % inner;
      }
    }
    for (const Expr& v : leaves) {
      ranges_[v.get()] = Interval{0, ext.at(v.get()) - 1};
      if (is_thread_binding(s.kind_of(v))) thread_vars_.insert(v.get());
    }

    // Root axes: relative (in the buffer) and actual (in the tensor) values, and guards.
    VarMap actual;
    std::vector<Expr> rel_idx;
    Expr spatial_guard, reduce_guard;
    for (size_t d = 0; d < op.axes.size(); ++d) {
      Expr rel = simplify(value.at(op.axes[d].var.get()), ranges_);
      Expr act = simplify(b.mins[d] + rel, ranges_);
      rel_idx.push_back(rel);
      actual[op.axes[d].var.get()] = act;
      spatial_guard = logical_and(spatial_guard, guard(rel, b.extents[d]));
      if (!equal(rel, act)) spatial_guard = logical_and(spatial_guard, guard(act, op.shape[d]));
    }
    for (const IterVar& iv : op.reduce_axes) {
      Expr v = simplify(value.at(iv.var.get()), ranges_);
      actual[iv.var.get()] = v;
      reduce_guard = logical_and(reduce_guard, guard(v, iv.extent));
    }

    // Regions of the stages computed inside this one, before its body reads them.
    Expr body_te = substitute(op.body, actual);
    std::map<const ExprNode*, std::vector<Stage*>> inner_stages, pipelined_stages;
    if (auto it = attached_.find(&s); it != attached_.end()) {
      for (Stage* p : it->second) {
        size_t pos = std::find_if(leaves.begin(), leaves.end(),
                                  [&](const Expr& v) { return v.same_as(p->attach_var()); }) - leaves.begin();
        if (pos == leaves.size()) {
          throw UserError(str("stage ", p->name(), " is computed at '", p->attach_var().as<Var>()->name,
                              "', which is no longer a loop of ", s.name()));
        }
        buffers_[p->name()] = infer_region(*p, body_te, leaves, ext, pos);
        (p->buffers() > 1 ? pipelined_stages : inner_stages)[p->attach_var().get()].push_back(p);
      }
    }

    // The innermost statement: the update, or the plain store.
    Expr index =
        linear_index(rel_idx, BufferInfo{std::vector<Expr>(rel_idx.size(), Expr(0)), b.extents, b.order, b.pad, b.core});
    const Reduce* red = body_te.as<Reduce>();
    Stmt update;
    Stmt init;
    if (red) {
      Expr src = lower_reads(red->source);
      Expr old = Load::make(s.op()->dtype, s.name(), index);
      Expr combined = red->reduce == ReduceKind::Sum    ? old + src
                      : red->reduce == ReduceKind::Prod ? old * src
                                                        : max(old, src);
      update = Store::make(s.name(), combined, index);
      init = Store::make(s.name(), red->identity(), index);
      if (spatial_guard) init = IfThenElse::make(spatial_guard, init);
    } else {
      update = Store::make(s.name(), lower_reads(body_te), index);
    }
    Expr all_guards = logical_and(spatial_guard, reduce_guard);
    if (all_guards) update = IfThenElse::make(all_guards, update);

    // Loops, innermost first. The init nest sits right before the outermost reduction loop
    // and loops over the spatial leaves inside it.
    Stmt init_nest;
    if (init) {
      init_nest = init;
      for (size_t i = leaves.size(); i-- > first_reduce;) {
        if (s.is_reduce_var(leaves[i])) continue;
        init_nest = For::make(leaves[i], 0, ext.at(leaves[i].get()), s.kind_of(leaves[i]), init_nest);
      }
    }
    Stmt nest = update;
    if (!leaves.empty()) nest = with_inner_stages(inner_stages, leaves.back(), nest);
    for (size_t i = leaves.size(); i-- > 0;) {
      const Expr& v = leaves[i];
      int64_t slices = 0;  // Stage::parallel_slices: the inner loop's extent
      if (Expr inner = s.sliced_inner(v)) {
        const Expr extent = simplify(ext.at(inner.get()));  // as_const_int points into it
        if (const int64_t* e = as_const_int(extent)) slices = *e;
      }
      for (const Stage::Prefetching& p : s.prefetches()) {
        if (p.at.same_as(v)) nest = Block::make({prefetch_lines(s, p, body_te, leaves, ext, i), nest});
      }
      Stmt loop = For::make(v, 0, ext.at(v.get()), s.kind_of(v), nest, slices);
      if (auto d = pipelined_stages.find(v.get()); d != pipelined_stages.end()) {
        // It runs more than once where an enclosing loop of the stage is not a GPU binding (a
        // block's groups, its tiles of C), or the stage is computed at another one's loop.
        bool repeats = !runs_once_per_thread(s);
        for (size_t j = 0; j < i; ++j) {
          const Expr extent = ext.at(leaves[j].get());  // as_const_int points into it
          const int64_t* e = as_const_int(extent);
          repeats = repeats || (!is_gpu_binding(s.kind_of(leaves[j])) && (!e || *e > 1));
        }
        loop = multi_buffered_loop(s, d->second, loop.as<For>(), repeats);
      }
      if (i == first_reduce) loop = Block::make({init_nest, loop});
      nest = loop;
      // Stages computed at the loop outside this one go at the top of its body.
      if (i > 0) nest = with_inner_stages(inner_stages, leaves[i - 1], nest);
    }
    if (init && leaves.empty()) nest = Block::make({init_nest, nest});
    return nest;
  }

  // Whether each GPU thread computes stage `s`'s nest once: a root stage, or one computed at
  // a loop of such a stage inside whose every enclosing loop is a GPU binding (a cache_write's
  // local stage at threadIdx.x); false where that is not known.
  static bool runs_once_per_thread(const Stage& s) {
    if (s.attach() == Stage::Attach::Root) return true;
    const Stage* at = s.attach_stage();
    if (s.attach() != Stage::Attach::At || !at || !runs_once_per_thread(*at)) return false;
    for (const Expr& leaf : at->leaves()) {
      if (!is_gpu_binding(at->kind_of(leaf))) return false;
      if (leaf.same_as(s.attach_var())) return true;
    }
    return false;
  }

  // The loop `f` with the multi-buffered shared stages `stages` computed at it (n buffers,
  // Stage::multi_buffer): the copies run d = n-1 tiles ahead: tiles 0..d-1 are copied before
  // the loop, and iteration v first copies tile v+d into the buffer tile v-1 used, then
  // computes on tile v. One barrier per iteration, at its top, both publishes tile v and makes
  // sure no thread still reads the buffer about to be overwritten (the one iteration v-1 read).
  // The copies may be asynchronous: each tile's copies are one group (committed even when
  // empty, so that the count stays uniform), and before the barrier each thread waits until at
  // most the d-1 groups after tile v's are pending. With reads in flight (r = 1: asynchronous
  // readers, waited for one iteration late), d = n-2: iteration v overwrites the buffer of
  // iteration v-2, whose reads the end of iteration v-1 waited for (Barrier::Kind::AsyncReads
  // closes each iteration, and the loop, for the lowering pass that places those waits).
  Stmt multi_buffered_loop(const Stage& s, const std::vector<Stage*>& stages, const For* f,
                           bool repeats) {
    const int64_t* extent = as_const_int(f->extent);
    if (f->for_kind != ForKind::Serial && f->for_kind != ForKind::Unrolled) {
      throw UserError(str("multi_buffer of ", stages.front()->name(), ": it is computed at loop '",
                          f->var.as<Var>()->name, "' of ", s.name(), ", which is ", for_kind_name(f->for_kind),
                          "; only a serial loop can be"));
    }
    TF_CHECK(extent, "loop ", f->var.as<Var>()->name, " has no constant extent");
    const int n = stages.front()->buffers();
    for (const Stage* p : stages) {
      if (p->buffers() != n) {
        throw UserError(str("multi_buffer: ", stages.front()->name(), " (", n, " buffers) and ", p->name(), " (",
                            p->buffers(), ") are computed at the same loop '", f->var.as<Var>()->name,
                            "' of ", s.name(), ": they must have as many buffers"));
      }
    }
    const int lag = stages.front()->reads_in_flight();
    for (const Stage* p : stages) {
      if (p->reads_in_flight() != lag) {
        throw UserError(str("multi_buffer: ", stages.front()->name(), " (", lag,
                            " iterations of reads in flight) and ", p->name(), " (",
                            p->reads_in_flight(), ") are computed at the same loop '",
                            f->var.as<Var>()->name, "' of ", s.name(),
                            ": they must keep as many in flight"));
      }
    }
    const int ahead_tiles = n - 1 - lag;
    const Expr& v = f->var;
    Expr ahead = v + ahead_tiles;
    Stmt commit = Barrier::make(Barrier::Kind::AsyncCommit);
    // The copy of the tile of iteration `it` into its buffer, for every stage.
    std::vector<Stmt> nests;
    for (const Stage* p : stages) nests.push_back(make_stage(*const_cast<Stage*>(p), buffers_.at(p->name())));
    auto tile_copy = [&](size_t i, const Expr& it) {
      return offset_buffer(stages[i]->name(), substitute(nests[i], {{v.get(), it}}), (it % n) * buffer_tile(*stages[i]));
    };
    auto copy = [&](const Expr& it) {
      std::vector<Stmt> out;
      for (size_t i = 0; i < stages.size(); ++i) out.push_back(tile_copy(i, it));
      return Block::make(out);
    };
    // One group per prologue tile, in order. Where the loop runs again (`repeats`: an enclosing
    // loop, a block's next group or tile of C), after a barrier: the prologue overwrites the
    // buffers the last run's last iterations read, and no thread may get there before every
    // thread has finished reading them (its products waited for: the mark after the loop).
    std::vector<Stmt> prologue;
    if (repeats) prologue.push_back(Barrier::make());
    for (int j = 0; j < ahead_tiles; ++j)
      prologue.insert(prologue.end(), {j < *extent ? copy(Expr(j)) : Stmt(), commit});
    Stmt body = f->body;
    for (const Stage* p : stages) body = offset_buffer(p->name(), body, (v % n) * buffer_tile(*p));
    // A copy that rounds what it copies (cache_read_shared_16) or transposes 16-bit elements
    // cannot be asynchronous, and done where cp.async goes, its loads would hold the thread up
    // before the current tile's products. It goes through registers instead (CUTLASS's
    // mixed-input pipelines): iteration v loads tile v+n-1 into them first, computes on tile v,
    // then (rounds and) stores them into the buffer. Iteration v-1, its last reader, has finished everywhere (the barrier at the
    // top of iteration v), and the barrier at the top of iteration v+1 publishes it.
    std::vector<Stmt> early, late;
    std::vector<std::tuple<std::string, int64_t, Type>> registers;
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::string& name = stages[i]->name();
      Stmt nest = tile_copy(i, ahead);
      const std::string regs = name + ".regs";
      if (auto staged = stage_through_registers(nest, name, regs)) {
        early.push_back(staged->load);
        late.push_back(staged->store);
        registers.emplace_back(regs, staged->size, staged->type);
      } else {
        early.push_back(nest);
      }
    }
    const Expr more = ahead < Expr(*extent);
    std::vector<Stmt> steps = {Barrier::make(Barrier::Kind::AsyncWait, ahead_tiles - 1),
                               Barrier::make(), IfThenElse::make(more, Block::make(early)), commit,
                               body};
    if (!late.empty()) steps.push_back(IfThenElse::make(more, Block::make(late)));
    if (lag > 0) steps.push_back(Barrier::make(Barrier::Kind::AsyncReads, lag));
    Stmt loop_body = Block::make(steps);
    for (const auto& [regs, size, type] : registers) {
      loop_body = Allocate::make(regs, type, size, MemScope::Local, loop_body);
    }
    Stmt result =
        Block::make({Block::make(prologue), For::make(v, f->min, f->extent, f->for_kind, loop_body),
                     lag > 0 ? Barrier::make(Barrier::Kind::AsyncReads, 0) : Stmt()});
    for (auto p = stages.rbegin(); p != stages.rend(); ++p) {
      result = Allocate::make((*p)->name(), (*p)->op()->dtype, n * buffer_tile(**p), MemScope::Shared, result,
                              /*async_copies=*/true);
    }
    return result;
  }

  // Elements of one of a multi-buffered stage's tiles: rounded up to 16 bytes, so every tile
  // is as aligned as the first (128-bit accesses and copies).
  int64_t buffer_tile(const Stage& p) const {
    const int64_t per16 = std::max<int64_t>(1, 16 / p.op()->dtype.bytes());
    return (size_of(buffers_.at(p.name())) + per16 - 1) / per16 * per16;
  }

  // `s` with every load and store of `buffer` moved `offset` elements on.
  static Stmt offset_buffer(const std::string& buffer, const Stmt& s, const Expr& offset) {
    class Offset : public IRMutator {
     public:
      Offset(const std::string& b, Expr o) : b_(b), o_(std::move(o)) {}
      Expr mutate_expr(const Expr& e) override {
        Expr x = IRMutator::mutate_expr(e);
        const Load* l = x.as<Load>();
        if (!l || l->buffer != b_) return x;
        return Load::make(l->type.element_of(), l->buffer, shifted(l->index));
      }
      Stmt mutate_stmt(const Stmt& s) override {
        Stmt x = IRMutator::mutate_stmt(s);
        const Store* st = x.as<Store>();
        if (!st || st->buffer != b_) return x;
        return Store::make(st->buffer, st->value, shifted(st->index));
      }

     private:
      Expr shifted(const Expr& index) const {
        int lanes = index.type().lanes;
        return index + (lanes > 1 ? Broadcast::make(o_, lanes) : o_);
      }
      const std::string& b_;
      Expr o_;
    };
    Offset o(buffer, offset);
    return o.mutate_stmt(s);
  }

  Stmt with_inner_stages(const std::map<const ExprNode*, std::vector<Stage*>>& inner,
                         const Expr& var, const Stmt& body) {
    auto it = inner.find(var.get());
    if (it == inner.end()) return body;
    Stmt result = body;
    for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
      const BufferInfo& b = buffers_.at((*p)->name());
      Stmt nest = make_stage(**p, b);
      int64_t n = size_of(b);
      if ((*p)->scope() == MemScope::Shared) {
        // Wait until no thread reads the previous tile, copy, wait until the copy is whole.
        Stmt body = Block::make({Barrier::make(), nest, Barrier::make(), result});
        result = Allocate::make((*p)->name(), (*p)->op()->dtype, n, MemScope::Shared, body);
        continue;
      }
      MemScope scope = n * (*p)->op()->dtype.bytes() <= kMaxStackBytes ? MemScope::Local : MemScope::Heap;
      result = Allocate::make((*p)->name(), (*p)->op()->dtype, n, scope, Block::make({nest, result}));
    }
    return result;
  }

  // Whether a split that does not divide its extent may shift its last tile inwards, to
  // overlap the previous one, instead of guarding (Halide's ShiftInwards tail strategy).
  // Elements in the overlap are computed twice with the same result, so this needs every
  // tile to compute its elements completely: the stage is not a reduction, or the outer loop
  // of the split encloses the init nest and all reduction loops. The tile must also fit.
  static bool shift_inwards(const Stage& s, const Relation& r, int64_t extent, int64_t inner,
                            size_t first_reduce) {
    if (extent % inner == 0 || extent < inner || s.is_reduce_var(r.parent) || s.guards_tails()) return false;
    if (!s.op()->reduce()) return true;
    const auto& leaves = s.leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].same_as(r.outer)) return i < first_reduce;
    }
    return false;  // the outer loop was split or fused again
  }

  // `0 <= v < extent`, or null when the loop ranges already prove it.
  Expr guard(const Expr& v, int64_t extent) {
    auto r = const_bounds(v, ranges_);
    Expr g;
    if (!r || r->lo < 0) g = v >= 0;
    if (!r || r->hi >= extent) g = logical_and(g, v < Expr(extent));
    return g;
  }

  Schedule& sch_;
  std::map<std::string, Stage*> by_name_;
  std::map<const Stage*, std::vector<Stage*>> attached_;
  std::map<std::string, BufferInfo> buffers_;
  RangeMap ranges_;
  std::set<const ExprNode*> thread_vars_;  // loop variables bound to threadIdx.*
};

}  // namespace

LoweredFunc schedule_to_loops(Schedule& sch, const std::vector<Tensor>& inputs, const std::string& name) {
  LoweredFunc f;
  f.name = name;
  for (const Tensor& t : inputs) f.args.push_back({t->name, t->shape, ArgRole::Input, t->dtype});
  f.args.push_back({sch.output()->name, sch.output()->shape, ArgRole::Output, sch.output()->dtype});
  Lowerer l(sch);
  f.body = l.lower();
  return f;
}

}  // namespace tf::ir
