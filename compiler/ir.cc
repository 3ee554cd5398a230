#include "compiler/ir.h"

#include "compiler/te.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf::ir {

std::string Type::str() const {
  std::string s = code == TypeCode::Int    ? "int"
                  : code == TypeCode::UInt ? "uint"
                  : code == TypeCode::Float ? "float"
                                            : "bool";
  if (code != TypeCode::Bool) s += std::to_string(bits);
  if (lanes > 1) s += "x" + std::to_string(lanes);
  return s;
}

Expr::Expr(int64_t v) : p_(std::make_shared<IntImm>(v)) {}

Expr IntImm::make(int64_t v) { return Expr(std::make_shared<IntImm>(v)); }
Expr IntImm::make_typed(int64_t v, Type t) {
  TF_CHECK(t.is_int() && t.lanes == 1, "integer constant of type ", t.str());
  return Expr(std::make_shared<IntImm>(v, t));
}
Expr IntImm::make_bool(bool b) { return Expr(std::make_shared<IntImm>(b ? 1 : 0, Type::boolean())); }
Expr FloatImm::make(double v) { return Expr(std::make_shared<FloatImm>(v)); }
Expr Var::make(const std::string& name, Type t) { return Expr(std::make_shared<Var>(name, t)); }

static bool is_compare(ExprKind k) {
  return k == ExprKind::EQ || k == ExprKind::NE || k == ExprKind::LT || k == ExprKind::LE;
}

Expr Binary::make(ExprKind k, Expr a, Expr b) {
  TF_CHECK(a.get() && b.get(), "null operand");
  // Scalars meet vectors by broadcasting.
  if (a.type().lanes != b.type().lanes) {
    if (a.type().lanes == 1) a = Broadcast::make(a, b.type().lanes);
    else if (b.type().lanes == 1) b = Broadcast::make(b, a.type().lanes);
  }
  TF_CHECK(a.type() == b.type(), "operand types differ: ", a.type().str(), " vs ", b.type().str());
  Type t = a.type();
  if (is_compare(k)) t = Type::boolean().with_lanes(t.lanes);
  if (k == ExprKind::And || k == ExprKind::Or) TF_CHECK(t.is_bool(), "logical op on ", t.str());
  return Expr(std::make_shared<Binary>(k, t, std::move(a), std::move(b)));
}

Expr Not::make(Expr a) {
  TF_CHECK(a.type().is_bool(), "Not of ", a.type().str());
  return Expr(std::make_shared<Not>(std::move(a)));
}

Expr Select::make(Expr c, Expr t, Expr f) {
  TF_CHECK(c.type().is_bool(), "select condition of type ", c.type().str());
  int lanes = std::max({c.type().lanes, t.type().lanes, f.type().lanes});
  if (t.type().lanes != lanes) t = Broadcast::make(t, lanes);
  if (f.type().lanes != lanes) f = Broadcast::make(f, lanes);
  TF_CHECK(t.type() == f.type(), "select arms differ: ", t.type().str(), " vs ", f.type().str());
  Type ty = t.type();
  return Expr(std::make_shared<Select>(ty, std::move(c), std::move(t), std::move(f)));
}

Expr Cast::make(Type t, Expr v) {
  t = t.with_lanes(v.type().lanes);
  if (t == v.type()) return v;
  return Expr(std::make_shared<Cast>(t, std::move(v)));
}

Expr Load::make(Type elem, const std::string& buffer, Expr index) {
  TF_CHECK(index.type().is_index(), "load index of type ", index.type().str());
  Type t = elem.with_lanes(index.type().lanes);
  return Expr(std::make_shared<Load>(t, buffer, std::move(index)));
}

Expr Ramp::make(Expr base, Expr stride, int lanes) {
  TF_CHECK(lanes > 1, "ramp of ", lanes, " lanes");
  TF_CHECK(!base.type().is_vector() && !stride.type().is_vector(), "ramp of vectors");
  return Expr(std::make_shared<Ramp>(std::move(base), std::move(stride), lanes));
}

Expr Broadcast::make(Expr value, int lanes) {
  TF_CHECK(!value.type().is_vector(), "broadcast of a vector");
  if (lanes == 1) return value;
  return Expr(std::make_shared<Broadcast>(std::move(value), lanes));
}

bool is_warp_mma(const std::string& call) { return call == kMmaTF32 || call == kMmaF16 || call == kMmaBF16; }

int warp_mma_k(const std::string& call) {
  TF_CHECK(is_warp_mma(call), call, " is not a warp-level product");
  return call == kMmaTF32 ? 8 : 16;
}

MmaPlace warp_mma_a(const std::string& call, int e, int g, int t) {
  // TF32: (g, t), (g+8, t), (g, t+4), (g+8, t+4); 16-bit: pairs along k, then +8 rows, +8 k.
  if (warp_mma_k(call) == 8) return {g + 8 * (e % 2), t + 4 * (e / 2)};
  return {g + 8 * (e / 2 % 2), 2 * t + e % 2 + 8 * (e / 4)};
}

MmaPlace warp_mma_b(const std::string& call, int e, int g, int t) {
  if (warp_mma_k(call) == 8) return {t + 4 * e, g};
  return {2 * t + e % 2 + 8 * (e / 2), g};
}

MmaPlace warp_mma_c(int e, int g, int t) { return {g + 8 * (e / 2), 2 * t + e % 2}; }

bool ldmatrix_transposed(const Call& c) {
  return c.name == kLdMatrix && c.args.size() == 3 && *as_const_int(c.args[2]) == 1;
}

bool is_wgmma(const std::string& call) { return call == kWgmmaF16 || call == kWgmmaBF16; }

const Store* wgmma_store(const Stmt& s) {
  const Store* st = s.as<Store>();
  const Call* c = st ? st->value.as<Call>() : nullptr;
  return c && is_wgmma(c->name) ? st : nullptr;
}

bool same_accumulators(const Store& a, const Store& b) {
  return a.buffer == b.buffer && equal(a.index, b.index);
}

int wgmma_n(const Call& c) {
  TF_CHECK(is_wgmma(c.name), c.name, " is not a warpgroup-level product");
  return static_cast<int>(c.args.size() - 6) * 2;
}

MmaPlace wgmma_c(int e, int l) {
  const int w = l / 32, g = l % 32 / 4, t = l % 4;
  return {16 * w + g + 8 * (e % 4 / 2), 8 * (e / 4) + 2 * t + e % 2};
}

Expr Call::make(const std::string& name, std::vector<Expr> args) {
  TF_CHECK(!args.empty(), "call of ", name, " without arguments");
  // The fragment loads (compiler/ir.h): their count arguments are not lanes to broadcast.
  if (name == kLdMatrix) {  // (ldmatrix_transposed below)
    const int64_t* n = args.size() == 2 || args.size() == 3 ? as_const_int(args[1]) : nullptr;
    const int64_t* trans = args.size() == 3 ? as_const_int(args[2]) : nullptr;
    TF_CHECK(n && (*n == 2 || *n == 4) && args[0].as<Load>() &&
                 args[0].type() == Type::int32().with_lanes(4) &&
                 (args.size() == 2 || (trans && (*trans == 0 || *trans == 1))),
             name,
             " takes a Load of int32x4 (a row of eight 16-bit values), 2 or 4 matrices and, "
             "optionally, ",
             "whether they are read transposed (0 or 1)");
    return Expr(std::make_shared<Call>(Type::int32().with_lanes(static_cast<int>(*n)), name, std::move(args)));
  }
  if (is_wgmma(name)) {
    // a, a_lbo, a_sbo, b, b_lbo, b_sbo, then N / 2 accumulators (N = 8, 16, ..., 256).
    const size_t acc = args.size() >= 6 ? args.size() - 6 : 0;
    bool ok = acc >= 4 && acc <= 128 && acc % 4 == 0;
    for (size_t i : {size_t{0}, size_t{3}}) {
      ok = ok && args[i].as<Load>() && args[i].type() == Type::uint16();
    }
    for (size_t i : {size_t{1}, size_t{2}, size_t{4}, size_t{5}}) {
      const int64_t* v = ok ? as_const_int(args[i]) : nullptr;
      ok = ok && v && *v > 0 && *v % 16 == 0 && *v < (int64_t{1} << 18);
    }
    for (size_t i = 6; ok && i < args.size(); ++i) ok = args[i].type() == Type::float32();
    TF_CHECK(ok, name, " takes a uint16 Load of A in shared memory, its leading and stride byte offsets (multiples "
             "of 16 below 2^18), the same of B, and N / 2 float32 accumulators (N a multiple of 8 up to 256); got ",
             args.size(), " arguments");
    return Expr(std::make_shared<Call>(Type::float32().with_lanes(static_cast<int>(acc)), name, std::move(args)));
  }
  if (name == kWgmmaWait) {
    const int64_t* pending = args.empty() ? nullptr : as_const_int(args[0]);
    bool ok = pending && *pending >= 0 && *pending < 64 && args.size() >= 2 && args.size() <= 129;
    for (size_t i = 1; ok && i < args.size(); ++i) ok = args[i].type() == Type::float32();
    TF_CHECK(
        ok, name,
        " takes the products it leaves pending (an integer constant, 0 to 63) and 1 to 128 float32 "
        "accumulators; got ",
        args.size(), " arguments");
    return Expr(std::make_shared<Call>(
        Type::float32().with_lanes(static_cast<int>(args.size() - 1)), name, std::move(args)));
  }
  if (name == kWordFloat) {
    const int64_t* j = args.size() == 2 ? as_const_int(args[1]) : nullptr;
    TF_CHECK(
        j && args[0].type().element_of() == Type::int32() && *j >= 0 && *j < args[0].type().lanes,
        name, " takes an int32 vector and an element of it");
    return Expr(std::make_shared<Call>(Type::float32(), name, std::move(args)));
  }
  if (name == kWordHalf) {
    const int64_t* j = args.size() == 3 ? as_const_int(args[1]) : nullptr;
    const int64_t* h = args.size() == 3 ? as_const_int(args[2]) : nullptr;
    TF_CHECK(j && h && args[0].type().element_of() == Type::int32() && *j >= 0 && *j < args[0].type().lanes &&
                 (*h == 0 || *h == 1),
             name, " takes an int32 vector, an element of it and a half (0 or 1)");
    return Expr(std::make_shared<Call>(Type::uint16(), name, std::move(args)));
  }
  // Scalars meet vectors by broadcasting, as in Binary.
  int lanes = 1;
  for (const Expr& a : args) lanes = std::max(lanes, a.type().lanes);
  for (Expr& a : args) {
    if (a.type().lanes == 1 && lanes > 1) a = Broadcast::make(a, lanes);
  }
  Type t = args[0].type();
  // The bfloat16 and float16 pair functions change the lanes' type (compiler/ir.h).
  if (name == kBF16x2) t = Type::int32().with_lanes(lanes);
  if (name == kDot2BF16 || name == kDot2F16) t = Type::float32().with_lanes(lanes);
  if (name == kF16ToFloat || name == kBF16ToFloat || name == kFloatToF16 || name == kFloatToBF16) {
    const bool widen = name == kF16ToFloat || name == kBF16ToFloat;
    TF_CHECK(args.size() == 1 && t.element_of() == (widen ? Type::uint16() : Type::float32()), name,
             " takes one ", widen ? "uint16" : "float32", " argument, not ", t.str());
    t = (widen ? Type::float32() : Type::uint16()).with_lanes(lanes);
  }
  if (is_warp_mma(name)) {
    TF_CHECK(static_cast<int>(args.size()) == warp_mma_operands(name) && lanes == 1 && t == Type::float32(), name,
             " takes ", warp_mma_operands(name), " float32 scalars");
    t = Type::float32().with_lanes(4);
  }
  return Expr(std::make_shared<Call>(t, name, std::move(args)));
}

Expr Let::make(Expr var, Expr value, Expr body) {
  TF_CHECK(var.as<Var>(), "let binds a non-variable");
  return Expr(std::make_shared<Let>(std::move(var), std::move(value), std::move(body)));
}

Expr TensorRead::make(std::shared_ptr<const Operation> op, std::vector<Expr> indices) {
  Type t = op->dtype;
  return Expr(std::make_shared<TensorRead>(std::move(op), t, std::move(indices)));
}

Expr Reduce::make(ReduceKind r, Expr source, std::vector<Expr> axes) {
  return Expr(std::make_shared<Reduce>(r, std::move(source), std::move(axes)));
}

Expr Reduce::identity() const {
  Type t = source.type().element_of();
  if (t.is_int()) {
    int64_t least = t.is_uint() ? 0 : -(int64_t{1} << (t.bits - 1));
    return IntImm::make_typed(reduce == ReduceKind::Sum ? 0 : reduce == ReduceKind::Prod ? 1 : least, t);
  }
  if (reduce == ReduceKind::Sum) return FloatImm::make(0.0);
  if (reduce == ReduceKind::Prod) return FloatImm::make(1.0);
  return FloatImm::make(-std::numeric_limits<double>::infinity());
}

const int64_t* as_const_int(const Expr& e) {
  const IntImm* i = e.as<IntImm>();
  return i && i->type.is_index() ? &i->value : nullptr;
}

std::optional<bool> as_const_bool(const Expr& e) {
  const IntImm* i = e.as<IntImm>();
  if (!i || !i->type.is_bool()) return std::nullopt;
  return i->value != 0;
}

bool equal(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  if (!a || !b || a.kind() != b.kind() || !(a.type() == b.type())) return false;
  switch (a.kind()) {
    case ExprKind::IntImm: return a.as<IntImm>()->value == b.as<IntImm>()->value;
    case ExprKind::FloatImm: return a.as<FloatImm>()->value == b.as<FloatImm>()->value;
    case ExprKind::Var: return false;  // identity only
    case ExprKind::Not: return equal(a.as<Not>()->a, b.as<Not>()->a);
    case ExprKind::Select: {
      const Select *x = a.as<Select>(), *y = b.as<Select>();
      return equal(x->cond, y->cond) && equal(x->t, y->t) && equal(x->f, y->f);
    }
    case ExprKind::Cast: return equal(a.as<Cast>()->value, b.as<Cast>()->value);
    case ExprKind::Load: {
      const Load *x = a.as<Load>(), *y = b.as<Load>();
      return x->buffer == y->buffer && equal(x->index, y->index);
    }
    case ExprKind::Ramp: {
      const Ramp *x = a.as<Ramp>(), *y = b.as<Ramp>();
      return x->lanes == y->lanes && equal(x->base, y->base) && equal(x->stride, y->stride);
    }
    case ExprKind::Broadcast: return equal(a.as<Broadcast>()->value, b.as<Broadcast>()->value);
    case ExprKind::Call: {
      const Call *x = a.as<Call>(), *y = b.as<Call>();
      if (x->name != y->name || x->args.size() != y->args.size()) return false;
      for (size_t i = 0; i < x->args.size(); ++i) {
        if (!equal(x->args[i], y->args[i])) return false;
      }
      return true;
    }
    case ExprKind::Let:
    case ExprKind::TensorRead:
    case ExprKind::Reduce:
      return false;
    default: {
      const Binary *x = a.as<Binary>(), *y = b.as<Binary>();
      return equal(x->a, y->a) && equal(x->b, y->b);
    }
  }
}

bool is_const(const Expr& e, int64_t v) {
  const int64_t* c = as_const_int(e);
  return c && *c == v;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// Folds two integer constants; returns null when either side is not one.
static Expr fold(ExprKind k, const Expr& a, const Expr& b) {
  const int64_t* x = as_const_int(a);
  const int64_t* y = as_const_int(b);
  if (!x || !y) return Expr();
  switch (k) {
    case ExprKind::Add: return IntImm::make(*x + *y);
    case ExprKind::Sub: return IntImm::make(*x - *y);
    case ExprKind::Mul: return IntImm::make(*x * *y);
    case ExprKind::Div: return *y == 0 ? Expr() : IntImm::make(floor_div(*x, *y));
    case ExprKind::Mod: return *y == 0 ? Expr() : IntImm::make(floor_mod(*x, *y));
    case ExprKind::Min: return IntImm::make(std::min(*x, *y));
    case ExprKind::Max: return IntImm::make(std::max(*x, *y));
    default: return Expr();
  }
}

static Expr arith(ExprKind k, Expr a, Expr b) {
  if (Expr f = fold(k, a, b)) return f;
  return Binary::make(k, std::move(a), std::move(b));
}

Expr operator+(Expr a, Expr b) {
  if (is_const(a, 0) ) return b;
  if (is_const(b, 0)) return a;
  return arith(ExprKind::Add, std::move(a), std::move(b));
}
Expr operator-(Expr a, Expr b) {
  if (is_const(b, 0)) return a;
  return arith(ExprKind::Sub, std::move(a), std::move(b));
}
Expr operator*(Expr a, Expr b) {
  if (is_const(a, 1)) return b;
  if (is_const(b, 1)) return a;
  return arith(ExprKind::Mul, std::move(a), std::move(b));
}
Expr operator/(Expr a, Expr b) {
  if (is_const(b, 1)) return a;
  return arith(ExprKind::Div, std::move(a), std::move(b));
}
Expr operator%(Expr a, Expr b) { return arith(ExprKind::Mod, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return Binary::make(ExprKind::LT, std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return Binary::make(ExprKind::LE, std::move(a), std::move(b)); }
Expr operator>=(Expr a, Expr b) { return Binary::make(ExprKind::LE, std::move(b), std::move(a)); }
Expr logical_and(Expr a, Expr b) {
  if (!a) return b;
  if (!b) return a;
  return Binary::make(ExprKind::And, std::move(a), std::move(b));
}
Expr min(Expr a, Expr b) { return arith(ExprKind::Min, std::move(a), std::move(b)); }
Expr max(Expr a, Expr b) { return arith(ExprKind::Max, std::move(a), std::move(b)); }
Expr eq(Expr a, Expr b) { return Binary::make(ExprKind::EQ, std::move(a), std::move(b)); }
Expr select(Expr c, Expr t, Expr f) { return Select::make(std::move(c), std::move(t), std::move(f)); }
Expr f32(double v) { return FloatImm::make(v); }

const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial: return "for";
    case ForKind::Parallel: return "parallel";
    case ForKind::Vectorized: return "vectorized";
    case ForKind::Unrolled: return "unrolled";
    case ForKind::BlockIdxX: return "blockIdx.x";
    case ForKind::BlockIdxY: return "blockIdx.y";
    case ForKind::BlockIdxZ: return "blockIdx.z";
    case ForKind::ThreadIdxX: return "threadIdx.x";
    case ForKind::ThreadIdxY: return "threadIdx.y";
    case ForKind::ThreadIdxZ: return "threadIdx.z";
  }
  return "?";
}

bool is_gpu_binding(ForKind k) { return k >= ForKind::BlockIdxX; }
bool is_thread_binding(ForKind k) { return k >= ForKind::ThreadIdxX; }

int gpu_binding_index(ForKind k) {
  TF_CHECK(is_gpu_binding(k), "gpu_binding_index of ", for_kind_name(k));
  return static_cast<int>(k) - static_cast<int>(ForKind::BlockIdxX);
}

int gpu_binding_dim(ForKind k) { return gpu_binding_index(k) % 3; }

std::optional<ForKind> parse_thread_tag(const std::string& tag) {
  for (ForKind k : {ForKind::BlockIdxX, ForKind::BlockIdxY, ForKind::BlockIdxZ, ForKind::ThreadIdxX,
                    ForKind::ThreadIdxY, ForKind::ThreadIdxZ}) {
    if (tag == for_kind_name(k)) return k;
  }
  return std::nullopt;
}

Stmt For::make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body, int64_t parallel_inner) {
  TF_CHECK(var.as<Var>(), "loop over a non-variable");
  TF_CHECK(body, "loop without body");
  const int64_t* n = as_const_int(extent);
  if (kind != ForKind::Parallel || !n || parallel_inner <= 1 || parallel_inner >= *n || *n % parallel_inner != 0) {
    parallel_inner = 0;
  }
  return Stmt(std::make_shared<For>(std::move(var), std::move(min), std::move(extent), kind, std::move(body),
                                    parallel_inner));
}

Stmt Store::make(const std::string& buffer, Expr value, Expr index) {
  TF_CHECK(value.type().lanes == index.type().lanes, "store of ", value.type().str(), " at ",
           index.type().str());
  return Stmt(std::make_shared<Store>(buffer, std::move(value), std::move(index)));
}

Stmt LetStmt::make(Expr var, Expr value, Stmt body) {
  TF_CHECK(var.as<Var>(), "let binds a non-variable");
  return Stmt(std::make_shared<LetStmt>(std::move(var), std::move(value), std::move(body)));
}

Stmt IfThenElse::make(Expr cond, Stmt then_case, Stmt else_case) {
  TF_CHECK(cond.type().is_bool(), "if condition of type ", cond.type().str());
  return Stmt(std::make_shared<IfThenElse>(std::move(cond), std::move(then_case), std::move(else_case)));
}

Stmt Allocate::make(const std::string& buffer, Type elem, int64_t size, MemScope scope, Stmt body,
                    bool async_copies) {
  TF_CHECK(size > 0, "allocation of ", size, " elements for ", buffer);
  TF_CHECK(!async_copies || scope == MemScope::Shared, "asynchronous copies into ", buffer, ", not a shared buffer");
  return Stmt(std::make_shared<Allocate>(buffer, elem, size, scope, std::move(body), async_copies));
}

Stmt Barrier::make(Kind k, int pending) { return Stmt(std::make_shared<const Barrier>(k, pending)); }

Stmt Prefetch::make(const std::string& buffer, Type elem, Expr index) {
  TF_CHECK(index.type().lanes == 1, "prefetch of ", buffer, " at a vector index ", index.type().str());
  return Stmt(std::make_shared<const Prefetch>(buffer, elem, std::move(index)));
}

Stmt Block::make(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    if (!s) continue;
    if (const Block* b = s.as<Block>()) {
      flat.insert(flat.end(), b->stmts.begin(), b->stmts.end());
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  return Stmt(std::make_shared<Block>(std::move(flat)));
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t BufferArg::num_elements() const { return ir::num_elements(shape); }

}  // namespace tf::ir
