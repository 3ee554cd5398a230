#include "compiler/ir_printer.h"

#include <sstream>

#include "compiler/te.h"

namespace tf::ir {
namespace {

const char* binary_op(ExprKind k) {
  switch (k) {
    case ExprKind::Add: return " + ";
    case ExprKind::Sub: return " - ";
    case ExprKind::Mul: return "*";
    case ExprKind::Div: return "/";
    case ExprKind::Mod: return " % ";
    case ExprKind::EQ: return " == ";
    case ExprKind::NE: return " != ";
    case ExprKind::LT: return " < ";
    case ExprKind::LE: return " <= ";
    case ExprKind::And: return " && ";
    case ExprKind::Or: return " || ";
    default: return nullptr;
  }
}

class Printer {
 public:
  explicit Printer(std::ostream& os) : os_(os) {}

  void print(const Expr& e) {
    if (!e) {
      os_ << "<null>";
      return;
    }
    switch (e.kind()) {
      case ExprKind::IntImm:
        if (e.type().is_bool()) os_ << (e.as<IntImm>()->value ? "true" : "false");
        else os_ << e.as<IntImm>()->value;
        return;
      case ExprKind::FloatImm: {
        std::ostringstream v;
        v << e.as<FloatImm>()->value;
        os_ << v.str() << "f";
        return;
      }
      case ExprKind::Var: os_ << e.as<Var>()->name; return;
      case ExprKind::Min:
      case ExprKind::Max: {
        const Binary* b = e.as<Binary>();
        os_ << (e.kind() == ExprKind::Min ? "min(" : "max(");
        print(b->a);
        os_ << ", ";
        print(b->b);
        os_ << ")";
        return;
      }
      case ExprKind::Not: os_ << "!"; print(e.as<Not>()->a); return;
      case ExprKind::Select: {
        const Select* s = e.as<Select>();
        os_ << "select(";
        print(s->cond);
        os_ << ", ";
        print(s->t);
        os_ << ", ";
        print(s->f);
        os_ << ")";
        return;
      }
      case ExprKind::Cast: os_ << e.type().str() << "("; print(e.as<Cast>()->value); os_ << ")"; return;
      case ExprKind::Load: {
        const Load* l = e.as<Load>();
        os_ << l->buffer << "[";
        print(l->index);
        os_ << "]";
        return;
      }
      case ExprKind::Ramp: {
        const Ramp* r = e.as<Ramp>();
        os_ << "ramp(";
        print(r->base);
        os_ << ", ";
        print(r->stride);
        os_ << ", " << r->lanes << ")";
        return;
      }
      case ExprKind::Broadcast: {
        const Broadcast* b = e.as<Broadcast>();
        os_ << "x" << b->lanes << "(";
        print(b->value);
        os_ << ")";
        return;
      }
      case ExprKind::Call: {
        const Call* c = e.as<Call>();
        os_ << c->name << "(";
        for (size_t i = 0; i < c->args.size(); ++i) {
          if (i) os_ << ", ";
          print(c->args[i]);
        }
        os_ << ")";
        return;
      }
      case ExprKind::Let: {
        const Let* l = e.as<Let>();
        os_ << "(let " << l->var.as<Var>()->name << " = ";
        print(l->value);
        os_ << " in ";
        print(l->body);
        os_ << ")";
        return;
      }
      case ExprKind::TensorRead: {
        const TensorRead* t = e.as<TensorRead>();
        os_ << t->op->name << "(";
        for (size_t i = 0; i < t->indices.size(); ++i) {
          if (i) os_ << ", ";
          print(t->indices[i]);
        }
        os_ << ")";
        return;
      }
      case ExprKind::Reduce: {
        const Reduce* r = e.as<Reduce>();
        os_ << (r->reduce == ReduceKind::Sum    ? "sum("
                : r->reduce == ReduceKind::Prod ? "prod("
                                                : "max(");
        print(r->source);
        os_ << ", axis=[";
        for (size_t i = 0; i < r->axes.size(); ++i) {
          if (i) os_ << ", ";
          print(r->axes[i]);
        }
        os_ << "])";
        return;
      }
      default: {
        const Binary* b = e.as<Binary>();
        os_ << "(";
        print(b->a);
        os_ << binary_op(e.kind());
        print(b->b);
        os_ << ")";
        return;
      }
    }
  }

  void print(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::For: {
        const For* f = s.as<For>();
        indent();
        os_ << for_kind_name(f->for_kind) << " (" << f->var.as<Var>()->name << ", ";
        print(f->min);
        os_ << ", ";
        print(f->extent);
        os_ << ")";
        if (f->parallel_inner) os_ << " slices of " << f->parallel_inner;
        os_ << " {\n";
        nested(f->body);
        indent();
        os_ << "}\n";
        return;
      }
      case StmtKind::Store: {
        const Store* st = s.as<Store>();
        indent();
        os_ << st->buffer << "[";
        print(st->index);
        os_ << "] = ";
        print(st->value);
        os_ << "\n";
        return;
      }
      case StmtKind::LetStmt: {
        const LetStmt* l = s.as<LetStmt>();
        indent();
        os_ << "let " << l->var.as<Var>()->name << " = ";
        print(l->value);
        os_ << "\n";
        print(l->body);
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* i = s.as<IfThenElse>();
        indent();
        os_ << "if (";
        print(i->cond);
        os_ << ") {\n";
        nested(i->then_case);
        if (i->else_case) {
          indent();
          os_ << "} else {\n";
          nested(i->else_case);
        }
        indent();
        os_ << "}\n";
        return;
      }
      case StmtKind::Allocate: {
        const Allocate* a = s.as<Allocate>();
        indent();
        os_ << "allocate " << a->buffer << "[" << a->elem.str() << " * " << a->size << "] "
            << (a->scope == MemScope::Local ? "local" : a->scope == MemScope::Shared ? "shared" : "heap")
            << (a->async_copies ? " async" : "") << "\n";
        print(a->body);
        return;
      }
      case StmtKind::Block:
        for (const Stmt& c : s.as<Block>()->stmts) print(c);
        return;
      case StmtKind::Barrier:
        indent();
        switch (s.as<Barrier>()->sync) {
          case Barrier::Kind::Block: os_ << "barrier\n"; break;
          case Barrier::Kind::AsyncCommit: os_ << "async_commit\n"; break;
          case Barrier::Kind::AsyncWait: os_ << "async_wait(" << s.as<Barrier>()->pending << ")\n"; break;
          case Barrier::Kind::Emulated: os_ << "emulated_barrier\n"; break;
          case Barrier::Kind::AsyncReads:
            os_ << "async_reads(" << s.as<Barrier>()->pending << ")\n";
            break;
        }
        return;
      case StmtKind::Prefetch: {
        const Prefetch* p = s.as<Prefetch>();
        indent();
        os_ << "prefetch " << p->buffer << "[";
        print(p->index);
        os_ << "]\n";
        return;
      }
    }
  }

 private:
  void indent() { os_ << std::string(depth_ * 2, ' '); }
  void nested(const Stmt& s) {
    ++depth_;
    print(s);
    --depth_;
  }

  std::ostream& os_;
  int depth_ = 0;
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Expr& e) {
  Printer(os).print(e);
  return os;
}
std::ostream& operator<<(std::ostream& os, const Stmt& s) {
  Printer(os).print(s);
  return os;
}
std::string to_string(const Expr& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}
std::string to_string(const Stmt& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}
std::string to_string(const LoweredFunc& f) {
  std::ostringstream os;
  os << "func " << f.name << "(";
  for (size_t i = 0; i < f.args.size(); ++i) {
    const BufferArg& a = f.args[i];
    if (i) os << ", ";
    os << a.name << ": " << a.elem.str() << "[";
    for (size_t d = 0; d < a.shape.size(); ++d) os << (d ? ", " : "") << a.shape[d];
    os << "]" << (a.role == ArgRole::Output ? " out" : "");
  }
  os << ") {\n";
  std::ostringstream body;
  Printer p(body);
  p.print(f.body);
  // Indent the body one level.
  std::istringstream lines(body.str());
  for (std::string line; std::getline(lines, line);) os << "  " << line << "\n";
  os << "}\n";
  return os.str();
}

}  // namespace tf::ir
