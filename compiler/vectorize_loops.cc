#include "compiler/vectorize_loops.h"

#include <bit>

#include "compiler/ir_mutator.h"
#include "compiler/unroll_loops.h"

namespace tf::ir {
namespace {

// Vectorized extents from this many lanes on that are not a power of two are split.
constexpr int64_t kSplitLanes = 16;

// Rewrites the body of one vectorized loop; `failure` says why when it cannot.
class LaneRewriter : public IRMutator {
 public:
  LaneRewriter(const Expr& var, Expr ramp) : var_(var), ramp_(std::move(ramp)) {}

  std::string failure;

  Expr mutate_expr(const Expr& e) override {
    if (e.same_as(var_)) return ramp_;
    return IRMutator::mutate_expr(e);
  }

  Stmt mutate_stmt(const Stmt& s) override {
    if (!failure.empty()) return s;
    switch (s.kind()) {
      case StmtKind::Store: {
        const Store* st = s.as<Store>();
        Expr v = mutate_expr(st->value), i = mutate_expr(st->index);
        if (!i.type().is_vector()) {
          failure = "store to " + st->buffer + " does not vary across lanes";
          return s;
        }
        if (!v.type().is_vector()) v = Broadcast::make(v, i.type().lanes);
        return Store::make(st->buffer, v, i);
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* n = s.as<IfThenElse>();
        Expr c = mutate_expr(n->cond);
        if (c.type().is_vector()) {
          failure = "condition differs between lanes";
          return s;
        }
        Stmt t = mutate_stmt(n->then_case);
        Stmt f = n->else_case ? mutate_stmt(n->else_case) : Stmt();
        return IfThenElse::make(c, t, f);
      }
      case StmtKind::For: {
        const For* f = s.as<For>();
        Expr mn = mutate_expr(f->min), ext = mutate_expr(f->extent);
        if (mn.type().is_vector() || ext.type().is_vector()) {
          failure = "inner loop bounds differ between lanes";
          return s;
        }
        return For::make(f->var, mn, ext, f->for_kind == ForKind::Parallel ? ForKind::Serial : f->for_kind,
                         mutate_stmt(f->body));
      }
      case StmtKind::LetStmt: {
        const LetStmt* l = s.as<LetStmt>();
        Expr v = mutate_expr(l->value);
        if (v.type().is_vector()) return mutate_stmt(substitute(l->body, {{l->var.get(), l->value}}));
        return LetStmt::make(l->var, v, mutate_stmt(l->body));
      }
      case StmtKind::Allocate:
        failure = "allocation inside the loop";
        return s;
      case StmtKind::Barrier:
        failure = "barrier inside the loop";
        return s;
      case StmtKind::Prefetch: {
        // One line for all lanes when the address does not vary; else the loop stays scalar.
        const Prefetch* p = s.as<Prefetch>();
        Expr i = mutate_expr(p->index);
        if (i.type().is_vector()) {
          failure = "prefetch of " + p->buffer + " varies across lanes";
          return s;
        }
        return Prefetch::make(p->buffer, p->elem, i);
      }
      case StmtKind::Block:
        return IRMutator::mutate_stmt(s);
    }
    return s;
  }

 private:
  Expr var_, ramp_;
};

// Whether `s` holds no loop, allocation or barrier: a body whose copies are plain statements.
bool straight_line(const Stmt& s) {
  bool plain = true;
  post_order(
      s, [](const Expr&) {},
      [&](const Stmt& t) {
        const StmtKind k = t.kind();
        if (k == StmtKind::For || k == StmtKind::Allocate || k == StmtKind::Barrier) plain = false;
      });
  return plain;
}

class Vectorizer : public IRMutator {
 public:
  explicit Vectorizer(std::vector<std::string>* notes) : notes_(notes) {}

  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f || f->for_kind != ForKind::Vectorized) return IRMutator::mutate_stmt(s);
    Stmt body = mutate_stmt(f->body);
    const int64_t* n = as_const_int(f->extent);
    std::string why;
    if (!n) why = "extent is not a constant";
    else if (*n > kMaxVectorLanes) why = str("extent ", *n, " exceeds ", kMaxVectorLanes, " lanes");
    if (why.empty()) {
      // Wide extents go as one vector per power-of-two chunk, largest first, and the rest
      // below kSplitLanes as one vector (56 lanes: 32 + 16 + 8; 28: 16 + 12). LLVM legalizes
      // wide odd widths element by element: a <48 x float> splat became 48 inserts and ran
      // matmul 10x slower; narrow ones (<7 x float>) it widens to one register, which beats
      // 4 + 2 + 1.
      std::vector<Stmt> chunks;
      for (int64_t done = 0; done < *n && why.empty();) {
        int64_t left = *n - done;
        int64_t width = left < kSplitLanes ? left : static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(left)));
        Expr start = f->min + Expr(done);
        if (width == 1) {
          chunks.push_back(substitute(body, {{f->var.get(), start}}));
        } else {
          LaneRewriter lanes(f->var, Ramp::make(start, 1, static_cast<int>(width)));
          chunks.push_back(lanes.mutate_stmt(body));
          why = lanes.failure;
        }
        done += width;
      }
      if (why.empty()) return chunks.size() == 1 ? chunks[0] : Block::make(chunks);
    }
    if (n && *n <= kMaxUnrolledLanes && straight_line(body)) {
      // Its lanes one after another, each a scalar copy: a register tile's columns stay
      // registers (a serial loop indexes the tile, which then lives in memory: on a GPU, local
      // memory a stack frame holds).
      if (notes_) {
        notes_->push_back("loop " + f->var.as<Var>()->name + " not vectorized: " + why + "; unrolled");
      }
      return unrolled_copies(*f, body, *n);
    }
    if (notes_) notes_->push_back("loop " + f->var.as<Var>()->name + " not vectorized: " + why);
    return For::make(f->var, f->min, f->extent, ForKind::Serial, body);
  }

 private:
  std::vector<std::string>* notes_;
};

class Devectorizer : public IRMutator {
 public:
  Stmt mutate_stmt(const Stmt& s) override {
    const For* f = s.as<For>();
    if (!f || f->for_kind != ForKind::Vectorized) return IRMutator::mutate_stmt(s);
    return For::make(f->var, f->min, f->extent, ForKind::Serial, mutate_stmt(f->body));
  }
};

}  // namespace

Stmt devectorize_loops(const Stmt& s) {
  Devectorizer d;
  return d.mutate_stmt(s);
}

Stmt vectorize_loops(const Stmt& s, std::vector<std::string>* notes) {
  Vectorizer v(notes);
  return v.mutate_stmt(s);
}

}  // namespace tf::ir
