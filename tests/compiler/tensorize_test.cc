// Stage::tensorize (compiler/tensorize.h): a GEMM written as a tensor expression whose
// accumulator is defined over permuted coordinates, scheduled so that each lane's fragment
// elements are its own tile, and its K step replaced by warp-level products. The loop IR has
// the product where the nest was; the kernel computes C = A x B of the rounded operands in
// the threaded emulation of a block (each warp's lanes exchange their fragments as the
// hardware does); a nest that is not a product's step is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/float16.h"
#include "base/tf32.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/ir_printer.h"
#include "compiler/lower.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {
using ir::Expr;

struct Gemm {
  int64_t M = 64, N = 32, K = 48, MI = 2, NI = 2, warps_m = 2, warps_n = 1;
};

// C = A x B with C's rows split [block][warp][mi][half][g] and columns
// [block][warp][ni][t][pair]; the accumulator acc[M/2][N/2][2][2] holds, within a warp's
// tile, real row 16mi + 8half + g at (g*MI + mi, ., half, .) and real column 8ni + 2t + pair at
// (., t*NI + ni, ., pair), so that a lane's elements are its MI x NI x 2 x 2 tile.
struct Built {
  ir::Schedule schedule;
  ir::Tensor A, B;
  ir::Stage* acc;
  Expr ki;
};

Built build(const Gemm& d, const std::string& mma, bool reorder_inner = false,
            bool lanes_t_major = false) {
  const int64_t WM = 16 * d.MI, WN = 8 * d.NI, depth = ir::warp_mma_k(mma);
  ir::Tensor A = ir::placeholder("A", {d.M, d.K});
  ir::Tensor B = ir::placeholder("B", {d.K, d.N});
  auto c_ = [](int64_t v) { return Expr(v); };
  ir::IterVar k = ir::reduce_axis(d.K, "k");
  ir::Tensor acc = ir::compute(
      "acc", {d.M / 2, d.N / 2, 2, 2}, {"r2", "c2", "h", "p"},
      [&](const std::vector<Expr>& ax) {
        // Warp tile, then (g, mi) within it; columns (t, ni).
        Expr wr = ax[0] / c_(WM / 2), q = ax[0] % c_(WM / 2), g = q / c_(d.MI), mi = q % c_(d.MI);
        Expr wc = ax[1] / c_(WN / 2), u = ax[1] % c_(WN / 2), t = u / c_(d.NI), ni = u % c_(d.NI);
        Expr row = wr * c_(WM) + mi * c_(16) + ax[2] * c_(8) + g;
        Expr col = wc * c_(WN) + ni * c_(8) + t * c_(2) + ax[3];
        return ir::sum(ir::read(A, {row, k.var}) * ir::read(B, {k.var, col}), {k});
      },
      {k});
  ir::Tensor C = ir::compute("C", {d.M, d.N}, {"r", "c"}, [&](const std::vector<Expr>& ax) {
    Expr wr = ax[0] / c_(WM), q = ax[0] % c_(WM);
    Expr wc = ax[1] / c_(WN), u = ax[1] % c_(WN);
    Expr r2 = wr * c_(WM / 2) + (q % c_(8)) * c_(d.MI) + q / c_(16);
    Expr c2 = wc * c_(WN / 2) + ((u % c_(8)) / c_(2)) * c_(d.NI) + u / c_(8);
    return ir::read(acc, {r2, c2, (q % c_(16)) / c_(8), u % c_(2)});
  });
  ir::Schedule s(C);
  ir::Stage& out = s[C];
  auto [bm, r1] = out.split(C->axes[0].var, WM * d.warps_m);
  auto [wm, r2] = out.split(r1, WM);
  auto [mi, r3] = out.split(r2, 16);
  auto [half, g] = out.split(r3, 8);
  auto [bn, c1] = out.split(C->axes[1].var, WN * d.warps_n);
  auto [wn, c2] = out.split(c1, WN);
  auto [ni, c3] = out.split(c2, 8);
  auto [t, pair] = out.split(c3, 2);
  if (lanes_t_major)
    out.reorder({bm, bn, wm, wn, t, g, mi, half, ni, pair});
  else
    out.reorder({bm, bn, wm, wn, g, t, mi, half, ni, pair});
  Expr warp = out.fuse(wm, wn);
  Expr lane = lanes_t_major ? out.fuse(t, g) : out.fuse(g, t);
  Expr thread = out.fuse(warp, lane);
  out.bind(bm, "blockIdx.y");
  out.bind(bn, "blockIdx.x");
  out.bind(thread, "threadIdx.x");
  ir::Stage& a = s[acc];
  a.compute_at(out, thread);
  const auto& ax = acc->axes;
  auto [ko, ki] = a.split(acc->reduce_axes[0].var, depth);
  if (reorder_inner)
    a.reorder({ko, ax[0].var, ax[1].var, ki, ax[3].var, ax[2].var});
  else
    a.reorder({ko, ax[0].var, ax[1].var, ki, ax[2].var, ax[3].var});
  // The warp tile's products unrolled (registers, not a stack frame).
  a.unroll(ax[0].var);
  a.unroll(ax[1].var);
  return {std::move(s), A, B, &a, ki};
}

float (*rounding(const std::string& mma))(float) {
  if (mma == ir::kMmaTF32) return round_tf32;
  return mma == ir::kMmaF16 ? static_cast<float (*)(float)>(round_f16)
                            : static_cast<float (*)(float)>(round_bf16);
}

// The emulated kernel's largest difference from A x B of the rounded operands (relative to the
// largest |C|).
double emulated_error(const ir::LoweredFunc& f, const Gemm& d, const std::string& mma) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> bufs = {std::vector<float>(static_cast<size_t>(d.M * d.K)),
                                          std::vector<float>(static_cast<size_t>(d.K * d.N)),
                                          std::vector<float>(static_cast<size_t>(d.M * d.N), NAN)};
  for (int i = 0; i < 2; ++i)
    for (float& v : bufs[i]) v = u(rng);
  GpuLaunch launch = check_gpu_kernel(f, parse_target("cuda -arch=sm_80"));
  EXPECT_EQ(testing::emulate_gpu_kernel(f, launch, bufs), 0);
  float (*round)(float) = rounding(mma);
  double worst = 0, most = 0;
  for (int64_t i = 0; i < d.M; ++i)
    for (int64_t j = 0; j < d.N; ++j) {
      double want = 0;
      for (int64_t k = 0; k < d.K; ++k)
        want += double(round(bufs[0][static_cast<size_t>(i * d.K + k)])) *
                round(bufs[1][static_cast<size_t>(k * d.N + j)]);
      double got = bufs[2][static_cast<size_t>(i * d.N + j)];
      worst = std::max(worst, std::isnan(got) ? 1e30 : std::fabs(got - want));
      most = std::max(most, std::fabs(want));
    }
  return worst / most;
}

TEST(Tensorize, NestBecomesWarpProductsThatComputeTheGemm) {
  for (const char* mma : {ir::kMmaTF32, ir::kMmaF16, ir::kMmaBF16}) {
    for (bool swapped_inner : {false, true}) {
      Gemm d;
      d.K = 3 * ir::warp_mma_k(mma);
      Built b = build(d, mma, swapped_inner);
      b.acc->tensorize(b.ki, mma);
      LowerResult r = lower(b.schedule, {b.A, b.B}, "tc_gemm");
      std::string text = ir::to_string(r.func.body);
      // MI x NI products per step of K (unrolled), and no loop of the step left.
      EXPECT_EQ(testing::count_of(text, std::string(mma) + "("), static_cast<size_t>(d.MI * d.NI))
          << text;
      EXPECT_EQ(testing::count_of(text, "for ki"), 0u) << text;
      EXPECT_NE(text.find("allocate acc[float32 * " + std::to_string(4 * d.MI * d.NI) + "] local"),
                std::string::npos)
          << text;
      double err = emulated_error(r.func, d, mma);
      EXPECT_LT(err, 1e-5) << mma << (swapped_inner ? " (inner loops swapped)" : "") << "\n"
                           << text;
      // The products unrolled: MI x NI of them in the PTX.
      std::string ptx =
          codegen_llvm(r.func, parse_target("cuda -arch=sm_90"), CodegenOutput::Asm).data;
      EXPECT_EQ(testing::count_of(ptx, "mma.sync.aligned"), static_cast<size_t>(d.MI * d.NI))
          << mma;
    }
  }
}

// Lanes numbered t-major (lane = 8t + g): the nest has the product's form, but no lane holds
// the fragment the instruction expects of it; the emulated warps, exchanging fragments as the
// hardware does, compute something else.
TEST(Tensorize, LanesInTheWrongOrderComputeAWrongProduct) {
  Gemm d;
  Built b = build(d, ir::kMmaTF32, false, true);
  b.acc->tensorize(b.ki, ir::kMmaTF32);
  LowerResult r = lower(b.schedule, {b.A, b.B}, "wrong_lanes");
  EXPECT_GT(emulated_error(r.func, d, ir::kMmaTF32), 0.05);
}

// The schedule without the product (the same loops, run serially) computes the float32 GEMM:
// the accumulator's permutation alone changes nothing.
TEST(Tensorize, UntensorizedScheduleComputesTheSameGemm) {
  Gemm d;
  Built b = build(d, ir::kMmaTF32);
  LowerResult r = lower(b.schedule, {b.A, b.B}, "plain");
  ir::LoweredFunc serial = r.func;
  serial.body = serialize_gpu_bindings(serial.body);
  auto lib = testing::build_for_host(serial);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(d.M * d.K)), bb(static_cast<size_t>(d.K * d.N)),
      c(static_cast<size_t>(d.M * d.N), NAN);
  for (float& v : a) v = u(rng);
  for (float& v : bb) v = u(rng);
  ASSERT_EQ(lib->call({a.data(), bb.data(), c.data()}), 0);
  double worst = 0;
  for (int64_t i = 0; i < d.M; ++i)
    for (int64_t j = 0; j < d.N; ++j) {
      double want = 0;
      for (int64_t q = 0; q < d.K; ++q)
        want += double(a[static_cast<size_t>(i * d.K + q)]) * bb[static_cast<size_t>(q * d.N + j)];
      worst = std::max(worst, std::fabs(c[static_cast<size_t>(i * d.N + j)] - want));
    }
  EXPECT_LT(worst, 1e-5);
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Tensorize, RefusesWhatIsNotAProductStep) {
  Gemm d;
  // Not a warp-level product; not a reduction loop.
  {
    Built b = build(d, ir::kMmaTF32);
    EXPECT_NE(refusal([&] {
                b.acc->tensorize(b.ki, "mma_m8n8k4_f64");
              }).find("'mma_m8n8k4_f64' is not a warp-level product"),
              std::string::npos);
    std::string r = refusal([&] { b.acc->tensorize(b.acc->op()->axes[2].var, ir::kMmaTF32); });
    EXPECT_NE(r.find("'h' is not a reduction loop"), std::string::npos) << r;
  }
  // The step's depth differs from the product's (8 for a 16-deep product).
  {
    Built b = build(d, ir::kMmaTF32);
    b.acc->tensorize(b.ki, ir::kMmaF16);
    std::string r = refusal([&] { lower(b.schedule, {b.A, b.B}, "f"); });
    EXPECT_NE(
        r.find(
            "loop 'k.i' with mma_m16n8k16_f16: the loop runs 8 times; the product's depth is 16"),
        std::string::npos)
        << r;
  }
  // The inner loops are not the fragment's: K's step outside the accumulator's tile loops.
  {
    Built b = build(d, ir::kMmaTF32);
    const auto& ax = b.acc->op()->axes;
    b.acc->reorder({ax[0].var, ax[1].var, ax[2].var, b.ki, ax[3].var});
    b.acc->tensorize(b.ki, ir::kMmaTF32);
    std::string r = refusal([&] { lower(b.schedule, {b.A, b.B}, "f"); });
    EXPECT_NE(r.find("its body is not two loops of extent 2"), std::string::npos) << r;
  }
  // The inner loops over the wrong dimensions of the accumulator (c2 and h: strides 4 and 2).
  {
    Built b = build(d, ir::kMmaTF32);
    const auto& ax = b.acc->op()->axes;
    b.acc->reorder({b.acc->leaves()[0], ax[0].var, ax[3].var, b.ki, ax[1].var, ax[2].var});
    b.acc->tensorize(b.ki, ir::kMmaTF32);
    std::string r = refusal([&] { lower(b.schedule, {b.A, b.B}, "f"); });
    EXPECT_NE(r.find("acc's four values are not contiguous (strides 4 and 2; the rows' must be 2 "
                     "and the columns' 1)"),
              std::string::npos)
        << r;
  }
  // One 16 x 8 tile's nest, acc[r2][c2][h][p] summed over k, of `term` (A 17 x 8, B 8 x 8),
  // with (r2, c2, k, h, p) in that order, k marked, `threads` (0: none) of r2 (8) or r2 and c2
  // fused (32) bound to threadIdx.x. Lowered: the refusal.
  using Term = std::function<Expr(const ir::Tensor&, const ir::Tensor&, const std::vector<Expr>&,
                                  const Expr&)>;
  auto tile_refusal = [](const Term& term, int threads) {
    ir::Tensor A = ir::placeholder("A", {17, 8});
    ir::Tensor B = ir::placeholder("B", {8, 8});
    ir::IterVar k = ir::reduce_axis(8, "k");
    ir::Tensor acc = ir::compute(
        "acc", {8, 4, 2, 2}, {"r2", "c2", "h", "p"},
        [&](const std::vector<Expr>& ax) { return ir::sum(term(A, B, ax, k.var), {k}); }, {k});
    ir::Schedule s(acc);
    ir::Stage& st = s[acc];
    const auto& ax = acc->axes;
    st.reorder({ax[0].var, ax[1].var, k.var, ax[2].var, ax[3].var});
    if (threads == 8) st.bind(ax[0].var, "threadIdx.x");
    if (threads == 32) st.bind(st.fuse(ax[0].var, ax[1].var), "threadIdx.x");
    st.tensorize(k.var, ir::kMmaTF32);
    return refusal([&] { lower(s, {A, B}, "f"); });
  };
  const Expr c8(int64_t{8}), c2(int64_t{2});
  const Term product = [&](const ir::Tensor& A, const ir::Tensor& B, const std::vector<Expr>& ax,
                           const Expr& k) {
    return ir::read(A, {ax[2] * c8 + ax[0], k}) * ir::read(B, {k, ax[1] * c2 + ax[3]});
  };
  // Not inside a thread loop: nothing bound to the GPU.
  std::string r = tile_refusal(product, 0);
  EXPECT_NE(r.find("it is not inside a loop bound to threadIdx.x"), std::string::npos) << r;
  // A thread loop that is not whole warps.
  r = tile_refusal(product, 8);
  EXPECT_NE(r.find("threadIdx.x runs 8 threads; a warp-level product needs whole warps along x"),
            std::string::npos)
      << r;
  // Not a sum of products.
  r = tile_refusal(
      [&](const ir::Tensor& A, const ir::Tensor& B, const std::vector<Expr>& ax, const Expr& k) {
        return ir::read(A, {ax[2] * c8 + ax[0], k}) + ir::read(B, {k, ax[1] * c2 + ax[3]});
      },
      32);
  EXPECT_NE(r.find("the update of acc is not acc[i] = acc[i] + a * b"), std::string::npos) << r;
  // A factor of the rows that moves with the columns too (and B with the columns).
  r = tile_refusal(
      [&](const ir::Tensor& A, const ir::Tensor& B, const std::vector<Expr>& ax, const Expr& k) {
        return ir::read(A, {ax[2] * c8 + ax[0] + ax[3], k}) * ir::read(B, {k, ax[1] * c2 + ax[3]});
      },
      32);
  EXPECT_NE(r.find("neither factor of the product is free of the column loop"), std::string::npos)
      << r;
  // A marked loop of one iteration, which lowering drops.
  {
    ir::Tensor A = ir::placeholder("A", {16, 8});
    ir::Tensor B = ir::placeholder("B", {8, 8});
    ir::IterVar k = ir::reduce_axis(8, "k");
    ir::Tensor C = ir::compute(
        "C", {16, 8}, {"i", "j"},
        [&](const std::vector<Expr>& ax) {
          return ir::sum(ir::read(A, {ax[0], k.var}) * ir::read(B, {k.var, ax[1]}), {k});
        },
        {k});
    ir::Schedule s(C);
    Expr ko = s[C].split(k.var, 8).first;
    s[C].tensorize(ko, ir::kMmaTF32);
    r = refusal([&] { lower(s, {A, B}, "f"); });
    EXPECT_NE(r.find("loop 'k.o' with mma_m16n8k8_tf32: it is not in the lowered code"),
              std::string::npos)
        << r;
  }
}

}  // namespace
}  // namespace tf
