// The compiler's one intermediate representation: expressions and statements.
//
// Tensor expressions (TE) and the loop IR share these nodes, as in Halide. TE uses two nodes
// that lowering removes: TensorRead (a multi-dimensional read of another operation's output)
// and Reduce (a commutative reduction over reduction axes). After lowering, memory is only
// touched through flat Load and Store on named buffers, each of one element type (float32
// unless its operation says otherwise: int8, uint8 and int32 for the integer kernels,
// docs/precision.md).
//
// Semantics:
// - Index arithmetic is 64-bit signed (Int64), so no index overflows for any tensor that fits
//   in memory. Div and Mod on integers round toward negative infinity (floor division), so
//   `x == (x / c) * c + x % c` with `0 <= x % c < c` for every c > 0.
// - Integer data arithmetic (int8, uint8, int32 values, not indices) wraps around in two's
//   complement; Cast between integer types truncates or extends by the source's signedness,
//   Cast from float to integer saturates (NaN gives 0).
// - Evaluation order inside an expression is unspecified; expressions have no side effects.
//   Only Store writes memory. Loads and stores within one iteration happen in program order.
// - A For loop runs `extent` iterations with `var` from `min`; extent is evaluated once.
//   Parallel loops may run iterations in any order and concurrently; vectorized loops have a
//   constant extent and are rewritten into Ramp/Broadcast lanes by vectorize_loops.
// - Allocate gives a buffer of `size` elements, uninitialized, live inside its body only.
//
// Nodes are immutable and shared; a Var is identified by its node, not its name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace tf::ir {

enum class TypeCode : uint8_t { Int, UInt, Float, Bool };

struct Type {
  TypeCode code = TypeCode::Int;
  int bits = 64;
  int lanes = 1;

  static Type int64() { return {TypeCode::Int, 64, 1}; }
  static Type float32() { return {TypeCode::Float, 32, 1}; }
  static Type boolean() { return {TypeCode::Bool, 1, 1}; }
  static Type int8() { return {TypeCode::Int, 8, 1}; }
  static Type uint8() { return {TypeCode::UInt, 8, 1}; }
  static Type int32() { return {TypeCode::Int, 32, 1}; }
  // The storage of a float16 or bfloat16 element (a model's 16-bit inputs and outputs): its
  // bits, converted by the calls kF16ToFloat ... below.
  static Type uint16() { return {TypeCode::UInt, 16, 1}; }
  Type with_lanes(int n) const { return {code, bits, n}; }
  Type element_of() const { return with_lanes(1); }
  // Signed or unsigned integers; index arithmetic is the signed 64-bit kind.
  bool is_int() const { return code == TypeCode::Int || code == TypeCode::UInt; }
  bool is_uint() const { return code == TypeCode::UInt; }
  bool is_index() const { return code == TypeCode::Int && bits == 64; }
  // Bytes of one lane in memory.
  int bytes() const { return is_bool() ? 1 : bits / 8; }
  bool is_float() const { return code == TypeCode::Float; }
  bool is_bool() const { return code == TypeCode::Bool; }
  bool is_vector() const { return lanes > 1; }
  bool operator==(const Type& o) const = default;
  std::string str() const;
};

enum class ExprKind : uint8_t {
  IntImm, FloatImm, Var,
  Add, Sub, Mul, Div, Mod, Min, Max,
  EQ, NE, LT, LE, And, Or, Not,
  Select, Cast, Load, Ramp, Broadcast, Call, Let,
  TensorRead, Reduce,
};

struct ExprNode;
class Expr;
struct Operation;  // defined in compiler/te.h

// A shared, immutable expression. Null only when default-constructed.
class Expr {
 public:
  Expr() = default;
  Expr(std::shared_ptr<const ExprNode> p) : p_(std::move(p)) {}  // NOLINT
  Expr(int64_t v);  // NOLINT: integer constants read naturally in index math
  Expr(int v) : Expr(static_cast<int64_t>(v)) {}  // NOLINT

  const ExprNode* get() const { return p_.get(); }
  const ExprNode* operator->() const { return p_.get(); }
  explicit operator bool() const { return p_ != nullptr; }
  bool same_as(const Expr& o) const { return p_ == o.p_; }
  ExprKind kind() const;
  Type type() const;

  template <typename T>
  const T* as() const;

 private:
  std::shared_ptr<const ExprNode> p_;
};

struct ExprNode {
  ExprKind kind;
  Type type;
  ExprNode(ExprKind k, Type t) : kind(k), type(t) {}
  virtual ~ExprNode() = default;
};

inline ExprKind Expr::kind() const { return p_->kind; }
inline Type Expr::type() const { return p_->type; }

struct IntImm : ExprNode {
  static constexpr ExprKind kKind = ExprKind::IntImm;
  int64_t value;  // also the constants true (1) and false (0) when the type is Bool
  IntImm(int64_t v, Type t = Type::int64()) : ExprNode(kKind, t), value(v) {}
  static Expr make(int64_t v);
  // A constant of an integer data type (int32 0 for an integer reduction's identity).
  static Expr make_typed(int64_t v, Type t);
  static Expr make_bool(bool b);
};

struct FloatImm : ExprNode {
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  double value;
  FloatImm(double v) : ExprNode(kKind, Type::float32()), value(v) {}
  static Expr make(double v);
};

struct Var : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Var;
  std::string name;
  Var(std::string n, Type t) : ExprNode(kKind, t), name(std::move(n)) {}
  static Expr make(const std::string& name, Type t = Type::int64());
};

// Add, Sub, Mul, Div, Mod, Min, Max, comparisons, And, Or.
struct Binary : ExprNode {
  Expr a, b;
  Binary(ExprKind k, Type t, Expr a_, Expr b_) : ExprNode(k, t), a(std::move(a_)), b(std::move(b_)) {}
  static Expr make(ExprKind k, Expr a, Expr b);
};

struct Not : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Not;
  Expr a;
  Not(Expr a_) : ExprNode(kKind, a_.type()), a(std::move(a_)) {}
  static Expr make(Expr a);
};

struct Select : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Select;
  Expr cond, t, f;
  Select(Type ty, Expr c, Expr t_, Expr f_)
      : ExprNode(kKind, ty), cond(std::move(c)), t(std::move(t_)), f(std::move(f_)) {}
  static Expr make(Expr cond, Expr t, Expr f);
};

struct Cast : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Cast;
  Expr value;
  Cast(Type t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
  static Expr make(Type t, Expr v);
};

// A read of element(s) `index` of a flat buffer. A vector index gives a vector load.
struct Load : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Load;
  std::string buffer;
  Expr index;
  Load(Type t, std::string b, Expr i) : ExprNode(kKind, t), buffer(std::move(b)), index(std::move(i)) {}
  static Expr make(Type elem, const std::string& buffer, Expr index);
};

// The vector <base, base + stride, ..., base + (lanes-1)*stride>.
struct Ramp : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Ramp;
  Expr base, stride;
  int lanes;
  Ramp(Expr b, Expr s, int l)
      : ExprNode(kKind, b.type().with_lanes(l)), base(std::move(b)), stride(std::move(s)), lanes(l) {}
  static Expr make(Expr base, Expr stride, int lanes);
};

struct Broadcast : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Broadcast;
  Expr value;
  int lanes;
  Broadcast(Expr v, int l) : ExprNode(kKind, v.type().with_lanes(l)), value(std::move(v)), lanes(l) {}
  static Expr make(Expr value, int lanes);
};

// A pure elementwise math function on floats: exp, log, sqrt, fabs, tanh. One integer
// function: dot4_u8s8(a, b) on int32 lanes, each the sum over its four bytes t of
// uint8(byte t of a) * int8(byte t of b), as int32 (x86's vpdpbusd without the accumulator;
// codegen fuses `acc + dot4_u8s8(a, b)` into one instruction where the CPU has it). Two
// for bfloat16, whose values travel in pairs in int32 words (low half: the even element,
// high half: the odd one): bf16x2(lo, hi) rounds two float lanes to bfloat16 (to nearest,
// ties to even; a NaN stays a quiet NaN) and packs them into one int32 lane;
// dot2_bf16(a, b) on int32 lanes is the float sum hi(a) * hi(b) + lo(a) * lo(b) of the
// halves widened to float (exact products; codegen fuses `acc + dot2_bf16(a, b)` into
// x86's vdpbf16ps where the CPU has AVX512-BF16, else two fused multiply-adds, the high
// halves first as vdpbf16ps adds them; vdpbf16ps also flushes denormals to zero). Two for
// IEEE float16 weights stored in pairs, computed in float32 (CPUs without float16 arithmetic):
// round_f16(x), x rounded to float16 (to nearest, ties to even; subnormals kept; past 65504 to
// infinity) as a float; dot2_f16(a0, a1, b), a0 * lo(b) + a1 * hi(b) for floats a0, a1 and an
// int32 word b of two float16 (exact conversions; `acc + dot2_f16` is two fused multiply-adds,
// the low half first).
struct Call : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Call;
  std::string name;
  std::vector<Expr> args;
  Call(Type t, std::string n, std::vector<Expr> a) : ExprNode(kKind, t), name(std::move(n)), args(std::move(a)) {}
  static Expr make(const std::string& name, std::vector<Expr> args);
};
constexpr const char* kDot4U8S8 = "dot4_u8s8";
constexpr const char* kBF16x2 = "bf16x2";
constexpr const char* kDot2BF16 = "dot2_bf16";
constexpr const char* kRoundF16 = "round_f16";
// round_tf32(x): x rounded to TF32 (10 bits of mantissa, to nearest, ties away from zero, as
// cvt.rna.tf32.f32 and base/tf32.h round_tf32 round; infinities and NaNs as they are), a float.
constexpr const char* kRoundTF32 = "round_tf32";
constexpr const char* kDot2F16 = "dot2_f16";
// Single 16-bit floats held as their bits in uint16 lanes (a float16 model's inputs and
// outputs): f16_to_float(h) / bf16_to_float(h), the value as float32 (exact);
// float_to_f16(x) / float_to_bf16(x), float lanes rounded to nearest, ties to even, as uint16
// bits (float16: past 65504 to infinity, subnormals kept; a NaN stays a quiet NaN), as
// base/float16.h f16_bits and base/bfloat16.h bf16_bits do on the host.
constexpr const char* kF16ToFloat = "f16_to_float";
constexpr const char* kBF16ToFloat = "bf16_to_float";
constexpr const char* kFloatToF16 = "float_to_f16";
constexpr const char* kFloatToBF16 = "float_to_bf16";
// One warp-level matrix product on NVIDIA's tensor cores (sm_80 and later), in TF32:
// mma_m16n8k8_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), ten float32 scalars, is a
// float32x4: D = C + A x B for A 16x8, B 8x8, C and D 16x8 shared by the 32 lanes of the
// calling thread's warp, each lane holding the fragments of PTX's mma.m16n8k8 .tf32: lane l
// (the thread's index in its block, x fastest, modulo 32), g = l / 4, t = l % 4, holds
//   a = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4];   b = B[t][g], B[t+4][g];
//   c and the result = C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
// A and B are rounded to TF32 first (10 bits of mantissa, to nearest, ties away from zero:
// cvt.rna.tf32.f32), the products summed in float32. Every lane of the warp reaches it
// together (mma.sync.aligned): a block's thread count is a multiple of 32 and the call is
// not under a condition that differs between a warp's lanes. GPU kernels only: the NVPTX
// back end emits the instruction; on a CPU it runs only in the threaded emulation of a block
// (compiler/gpu.h emulate_gpu_thread), whose threads exchange their fragments.
constexpr const char* kMmaTF32 = "mma_m16n8k8_tf32";
// The same in float16 and bfloat16, K 16: mma_m16n8k16_f16 / mma_m16n8k16_bf16(a0..a7, b0..b3,
// c0..c3), sixteen float32 scalars rounded to the type (to nearest, ties to even: cvt.rn),
// products exact and summed in float32 (PTX's mma.m16n8k16 .f16 / .bf16 with .f32 C and D):
//   a = A[g][2t], A[g][2t+1], A[g+8][2t], A[g+8][2t+1],
//       A[g][2t+8], A[g][2t+9], A[g+8][2t+8], A[g+8][2t+9];
//   b = B[2t][g], B[2t+1][g], B[2t+8][g], B[2t+9][g];   c and the result as kMmaTF32's.
constexpr const char* kMmaF16 = "mma_m16n8k16_f16";
constexpr const char* kMmaBF16 = "mma_m16n8k16_bf16";
// A warp's fragments of 16-bit values read from shared memory by PTX's ldmatrix (sm_75 and
// later): ldmatrix(row, n), `row` a Load of int32x4 (16 bytes: a row of eight 16-bit values of
// one 8 x 8 matrix, at a 16-byte aligned address of a shared buffer) that each lane supplies,
// n 2 or 4 (IntImm) the matrices: an int32 x n, whose element j on lane l (g = l / 4, t = l % 4)
// is word t of the row supplied by lane 8 j + g: the two values of row g of matrix j at columns
// 2t, 2t + 1, the low half the first (x2: lanes 16-31 supply rows that are not read).
// ldmatrix(row, n, 1) reads the matrices transposed (.trans): element j on lane l holds the
// values of rows 2t and 2t + 1 of matrix j at column g, the low half row 2t's (a fragment of B
// kept as [K][N], N innermost: its pairs along K are a row apart). Every
// lane of the warp reaches it together, as the products above. The tensorize pass makes it from
// a product's pairs of 16-bit values it can prove are such rows (compiler/tensorize.cc); the
// NVPTX back end emits ldmatrix.sync.aligned.m8n8.x{2,4}[.trans].shared.b16; on a CPU it runs
// only in the threaded emulation of a block, whose lanes exchange their rows.
constexpr const char* kLdMatrix = "ldmatrix";
// Whether such a call reads its matrices transposed.
bool ldmatrix_transposed(const Call& c);
// word_half(v, j, h): the 16-bit half h (0: the low one) of element j of the int32 vector v, as
// uint16 bits (j and h IntImm): an ldmatrix fragment's value.
constexpr const char* kWordHalf = "word_half";
// word_float(v, j): the bits of element j of the int32 vector v as a float32 (j an IntImm): a
// TF32 product's operand read by ldmatrix (a row of 16 bytes is four float32 values, lane
// (g, t) taking word t of row g, as the m16n8k8 TF32 fragments lie).
constexpr const char* kWordFloat = "word_float";
// Whether `call` names one of the warp-level products above.
bool is_warp_mma(const std::string& call);
// Its K (8 or 16) and its float operands (10 or 16: K / 2 of A, K / 4 of B, 4 of C).
int warp_mma_k(const std::string& call);
inline int warp_mma_operands(const std::string& call) { return warp_mma_k(call) * 3 / 4 + 4; }
// The layouts above as functions, for lane (g, t) = (lane / 4, lane % 4): where its operand
// `e` of A lies (row, k), of B (k, column), and its element `e` (0..3) of C and D (row, column).
// One definition for the tensorize pass (compiler/tensorize.h) and the emulated warps.
struct MmaPlace {
  int row, col;
};
MmaPlace warp_mma_a(const std::string& call, int e, int g, int t);
MmaPlace warp_mma_b(const std::string& call, int e, int g, int t);
MmaPlace warp_mma_c(int e, int g, int t);

// One warpgroup-level matrix product on Hopper's tensor cores (cuda -arch=sm_90 only: PTX's
// wgmma.mma_async, an sm_90a instruction; no other architecture has it), in float16 or
// bfloat16 with float32 sums: wgmma_m64k16_f16 / wgmma_m64k16_bf16(a, a_lbo, a_sbo, b, b_lbo,
// b_sbo, c_0 .. c_{N/2-1}), a float32 x N/2: D = C + A x B for A 64 x 16 and B 16 x N read
// from shared memory and C, D 64 x N (N a multiple of 8 up to 256) held by the 128 threads of
// a warpgroup (warps 4q .. 4q + 3 of the block). `a` and `b` are uint16 Loads of the first
// element of each operand in a shared buffer (16-byte aligned; only their addresses are
// used), whose values are 16-bit floats of the call's type, stored K-major without swizzling
// (PTX's "no-swizzle canonical layout"): core matrices of 8 rows x 8 consecutive k (a row's 16
// bytes contiguous, 128 bytes a matrix), the one of rows 8i .. 8i + 7 and k 8j .. 8j + 7 at
// byte i * sbo + j * lbo from the start (A's rows are m, B's are its columns n); the byte
// offsets are IntImm multiples of 16 below 2^18, as the instruction's descriptor encodes them.
// Thread l of the warpgroup (its index in the block modulo 128), w = l / 32, g = l % 32 / 4,
// t = l % 4, holds c_e and its element e of D at row 16 w + g + 8 (e % 4 / 2) and column
// 8 (e / 4) + 2 t + e % 2 (wgmma_c). On the GPU the product is asynchronous (the NVPTX back
// end emits wgmma.fence, the mma_async and commit_group): its results may be the C of the next
// such product (the hardware orders products into the same accumulators), but anything else
// reads them only through kWgmmaWait, which the lowering pass wgmma_waits puts after each run
// of products (compiler/lower.cc). A kernel that calls it puts fence.proxy.async before each
// block barrier, so shared memory written before the barrier is visible to the tensor cores.
// Every thread of the warpgroup reaches it together with the same a, b and offsets. On a CPU it
// runs only in the threaded emulation of a block, whose warpgroups meet there (synchronously).
constexpr const char* kWgmmaF16 = "wgmma_m64k16_f16";
constexpr const char* kWgmmaBF16 = "wgmma_m64k16_bf16";
// wgmma_wait(pending, c_0 .. c_{n-1}): the float32 accumulators of warpgroup-level products,
// once at most `pending` (an integer constant) of the most recent products the thread issued are
// incomplete (PTX's wgmma.wait_group, each product its own group; the values tied through it so
// that nothing reads them earlier). With `pending` 0 every product is complete and the values
// may be read; with more, only the next products may take them (a pipelined loop keeping an
// iteration's products in flight: Barrier::Kind::AsyncReads). The values as they are on a CPU.
constexpr const char* kWgmmaWait = "wgmma_wait";
bool is_wgmma(const std::string& call);
// N of such a call (from its operands: 6 + N / 2).
int wgmma_n(const Call& c);
// Where element e of a warpgroup thread `l`'s accumulators lies in C and D.
MmaPlace wgmma_c(int e, int l);

struct Let : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Let;
  Expr var, value, body;
  Let(Expr v, Expr val, Expr b)
      : ExprNode(kKind, b.type()), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
  static Expr make(Expr var, Expr value, Expr body);
};

// TE only: element `indices` of the output of `op`.
struct TensorRead : ExprNode {
  static constexpr ExprKind kKind = ExprKind::TensorRead;
  std::shared_ptr<const Operation> op;
  std::vector<Expr> indices;
  TensorRead(std::shared_ptr<const Operation> o, Type t, std::vector<Expr> i)
      : ExprNode(kKind, t), op(std::move(o)), indices(std::move(i)) {}
  static Expr make(std::shared_ptr<const Operation> op, std::vector<Expr> indices);
};

enum class ReduceKind : uint8_t { Sum, Max, Prod };

// TE only: the reduction of `source` over the reduction axes `axes` (their Vars).
struct Reduce : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Reduce;
  ReduceKind reduce;
  Expr source;
  std::vector<Expr> axes;
  Reduce(ReduceKind r, Expr s, std::vector<Expr> a)
      : ExprNode(kKind, s.type()), reduce(r), source(std::move(s)), axes(std::move(a)) {}
  static Expr make(ReduceKind r, Expr source, std::vector<Expr> axes);
  // The identity of the combiner, of the source's type: 0 for Sum, 1 for Prod, -infinity for
  // Max (an integer Max: the type's least value).
  Expr identity() const;
};

template <typename T>
const T* Expr::as() const {
  if (!p_ || p_->kind != T::kKind) return nullptr;
  return static_cast<const T*>(p_.get());
}
template <>
inline const Binary* Expr::as<Binary>() const {
  if (!p_) return nullptr;
  switch (p_->kind) {
    case ExprKind::Add: case ExprKind::Sub: case ExprKind::Mul: case ExprKind::Div:
    case ExprKind::Mod: case ExprKind::Min: case ExprKind::Max: case ExprKind::EQ:
    case ExprKind::NE: case ExprKind::LT: case ExprKind::LE: case ExprKind::And:
    case ExprKind::Or:
      return static_cast<const Binary*>(p_.get());
    default:
      return nullptr;
  }
}

// Builders that read like arithmetic. They fold constants but do no other simplification.
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);
Expr operator%(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
// a && b; a null side is ignored, so guards can be accumulated from nothing.
Expr logical_and(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr eq(Expr a, Expr b);
Expr select(Expr c, Expr t, Expr f);
Expr f32(double v);

// The constant value of an Int64 expression, if it is one.
const int64_t* as_const_int(const Expr& e);
// The constant value of a scalar Bool expression, if it is one.
std::optional<bool> as_const_bool(const Expr& e);
// Structural equality (variables by identity).
bool equal(const Expr& a, const Expr& b);
bool is_const(const Expr& e, int64_t v);
// Integer division and remainder rounding towards negative infinity (the IR's Div and Mod).
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

// ---- statements ----

enum class StmtKind : uint8_t { For, Store, LetStmt, IfThenElse, Allocate, Block, Barrier, Prefetch };
// GPU kernels bind loops to the launch grid: a loop bound to blockIdx.x runs its iterations
// as the blocks of the grid's x dimension, one bound to threadIdx.x as the threads of a block
// (its extent is the launch size; the loop itself disappears in code generation).
enum class ForKind : uint8_t {
  Serial, Parallel, Vectorized, Unrolled,
  BlockIdxX, BlockIdxY, BlockIdxZ, ThreadIdxX, ThreadIdxY, ThreadIdxZ,
};
// Local: the stack (a GPU thread's private memory); Heap: malloc'd; Shared: a GPU block's
// shared memory, one copy for all its threads (a CPU, running one thread, keeps it on the stack).
enum class MemScope : uint8_t { Local, Heap, Shared };

// for, parallel, vectorized, unrolled, blockIdx.x ... threadIdx.z
const char* for_kind_name(ForKind k);
bool is_gpu_binding(ForKind k);
bool is_thread_binding(ForKind k);  // threadIdx.*
// 0..5 for blockIdx.x, .y, .z, threadIdx.x, .y, .z: an index into per-axis tables.
int gpu_binding_index(ForKind k);
// 0, 1, 2 for the x, y, z dimension of a GPU binding.
int gpu_binding_dim(ForKind k);
// The kind for a thread tag (blockIdx.x ... threadIdx.z); nullopt for anything else.
std::optional<ForKind> parse_thread_tag(const std::string& tag);

struct StmtNode;
class Stmt {
 public:
  Stmt() = default;
  Stmt(std::shared_ptr<const StmtNode> p) : p_(std::move(p)) {}  // NOLINT
  const StmtNode* get() const { return p_.get(); }
  const StmtNode* operator->() const { return p_.get(); }
  explicit operator bool() const { return p_ != nullptr; }
  bool same_as(const Stmt& o) const { return p_ == o.p_; }
  StmtKind kind() const;
  template <typename T>
  const T* as() const;

 private:
  std::shared_ptr<const StmtNode> p_;
};

struct StmtNode {
  StmtKind kind;
  explicit StmtNode(StmtKind k) : kind(k) {}
  virtual ~StmtNode() = default;
};
inline StmtKind Stmt::kind() const { return p_->kind; }
template <typename T>
const T* Stmt::as() const {
  if (!p_ || p_->kind != T::kKind) return nullptr;
  return static_cast<const T*>(p_.get());
}

struct For : StmtNode {
  static constexpr StmtKind kKind = StmtKind::For;
  Expr var, min, extent;
  ForKind for_kind;
  Stmt body;
  // A parallel loop over a fused (outer, inner) pair, iteration min + o * parallel_inner + i:
  // when > 0, the pool's chunks are slices of i, each run for every o in order, instead of
  // runs of consecutive iterations (Stage::parallel_slices). 0 otherwise; make() keeps it only
  // on a parallel loop whose constant extent it divides. One thread runs the iterations in the
  // same order either way.
  int64_t parallel_inner = 0;
  For(Expr v, Expr mn, Expr ext, ForKind k, Stmt b, int64_t inner)
      : StmtNode(kKind), var(std::move(v)), min(std::move(mn)), extent(std::move(ext)), for_kind(k), body(std::move(b)),
        parallel_inner(inner) {}
  static Stmt make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body, int64_t parallel_inner = 0);
};

struct Store : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Store;
  std::string buffer;
  Expr value, index;
  Store(std::string b, Expr v, Expr i) : StmtNode(kKind), buffer(std::move(b)), value(std::move(v)), index(std::move(i)) {}
  static Stmt make(const std::string& buffer, Expr value, Expr index);
};

struct LetStmt : StmtNode {
  static constexpr StmtKind kKind = StmtKind::LetStmt;
  Expr var, value;
  Stmt body;
  LetStmt(Expr v, Expr val, Stmt b) : StmtNode(kKind), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
  static Stmt make(Expr var, Expr value, Stmt body);
};

struct IfThenElse : StmtNode {
  static constexpr StmtKind kKind = StmtKind::IfThenElse;
  Expr cond;
  Stmt then_case, else_case;  // else_case may be null
  IfThenElse(Expr c, Stmt t, Stmt e) : StmtNode(kKind), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
  static Stmt make(Expr cond, Stmt then_case, Stmt else_case = Stmt());
};

struct Allocate : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Allocate;
  std::string buffer;
  Type elem;
  int64_t size;  // elements
  MemScope scope;
  Stmt body;
  // Shared buffers: a store into it whose value is a load of a kernel argument may complete
  // asynchronously (cp.async on sm_80 and later), at the latest at the next Barrier of kind
  // AsyncWait of the storing thread.
  bool async_copies = false;
  Allocate(std::string b, Type t, int64_t n, MemScope s, Stmt bd, bool async)
      : StmtNode(kKind), buffer(std::move(b)), elem(t), size(n), scope(s), body(std::move(bd)), async_copies(async) {}
  static Stmt make(const std::string& buffer, Type elem, int64_t size, MemScope scope, Stmt body,
                   bool async_copies = false);
};

// GPU synchronisation; nothing on a CPU.
//   Block      every thread of the block waits here until all have arrived, and their
//              shared-memory writes before it are visible to all after it (__syncthreads).
//   AsyncCommit  the thread's asynchronous copies (Allocate::async_copies) since the last
//                commit form a group (cp.async.commit_group).
//   AsyncWait    the thread waits until at most `pending` of its groups, the most recent, are
//                incomplete (cp.async.wait_group); a Block barrier after it publishes them.
//   Emulated     a Block barrier where CPU threads emulate a GPU block (tests only:
//                compiler/gpu.h emulate_gpu_thread): a call to tunefarm_emulated_barrier().
//   AsyncReads   a mark, not an instruction: at the end of an iteration of a pipelined loop
//                (Stage::multi_buffer with reads in flight), the asynchronous readers of its
//                shared buffers this iteration issued (warpgroup-level products) may still run
//                for `pending` more iterations, those of earlier ones must be complete; with
//                `pending` 0, right after the loop, every one must be. The lowering pass
//                wgmma_waits turns each into the waits it says and removes it.
struct Barrier : StmtNode {
  enum class Kind : uint8_t { Block, AsyncCommit, AsyncWait, Emulated, AsyncReads };
  static constexpr StmtKind kKind = StmtKind::Barrier;
  Kind sync;
  int pending = 0;  // AsyncWait, AsyncReads
  Barrier(Kind k, int p) : StmtNode(kKind), sync(k), pending(p) {}
  static Stmt make(Kind k = Kind::Block, int pending = 0);
};

// A hint: the cache line holding element `index` (a scalar) of `buffer`, whose elements are
// `elem`, is wanted soon (Stage::prefetch). CPUs bring it into the caches (llvm.prefetch: a
// read, kept in all levels); it never faults, reads nothing into the program and changes no
// result. GPU targets emit nothing for it.
struct Prefetch : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Prefetch;
  std::string buffer;
  Type elem;
  Expr index;
  Prefetch(std::string b, Type t, Expr i) : StmtNode(kKind), buffer(std::move(b)), elem(t), index(std::move(i)) {}
  static Stmt make(const std::string& buffer, Type elem, Expr index);
};

struct Block : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Block;
  std::vector<Stmt> stmts;
  explicit Block(std::vector<Stmt> s) : StmtNode(kKind), stmts(std::move(s)) {}
  // Flattens nested blocks and drops null statements; one statement is returned as is.
  static Stmt make(std::vector<Stmt> stmts);
};

// ---- functions ----

// The store of a warpgroup-level product's results (kWgmmaF16 / kWgmmaBF16) that `s` is, or
// null.
const Store* wgmma_store(const Stmt& s);
// Whether two products' stores write the same accumulators (buffer and index). Consecutive
// such products are a run, which PTX orders by itself: the lowering (wgmma_waits) waits once a
// run, and the NVPTX code generator fences once a run.
bool same_accumulators(const Store& a, const Store& b);

enum class ArgRole : uint8_t { Input, Output };

// The elements of a tensor of this shape (1 for a scalar).
int64_t num_elements(const std::vector<int64_t>& shape);

// One kernel argument: a contiguous row-major tensor of `elem` (float32 unless said).
struct BufferArg {
  std::string name;
  std::vector<int64_t> shape;
  ArgRole role;
  Type elem = Type::float32();
  int64_t num_elements() const;
};

// A lowered kernel: `int name(void* args...)` running `body`.
struct LoweredFunc {
  std::string name;
  std::vector<BufferArg> args;
  Stmt body;
};

}  // namespace tf::ir
