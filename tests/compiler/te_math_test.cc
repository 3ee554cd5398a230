// Elementwise math and max reductions, which no operator of the library uses yet: built
// directly as tensor expressions, compiled with real LLVM (vectorized, so the vector forms
// of the intrinsics and the libm link are exercised) and checked against <cmath>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "compiler/codegen_llvm.h"
#include "compiler/lower.h"
#include "compiler/target.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

using namespace ir;  // NOLINT

// fn(x) of every x, compiled for this machine in vectors of 16 lanes (the tail after the last
// whole vector scalar), and the kernel's assembly (named `name`).
struct Unary {
  std::vector<float> ys;
  std::string asm_text;
};
Unary run_unary(const std::vector<float>& xs, Expr (*fn)(Expr), const std::string& name) {
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = placeholder("x", {n});
  Tensor y = compute("y", {n}, {"i"}, [&](const std::vector<Expr>& i) { return fn(read(x, i)); });
  Schedule s(y);
  auto [o, in] = s[y].split(s[y].axis("i"), 16);
  s[y].vectorize(in);
  const LoweredFunc func = lower(s, {x}, name).func;
  auto lib = testing::build_for_host(func);
  Unary u{std::vector<float>(xs.size(), -2.0f), ""};
  EXPECT_EQ(lib->call({const_cast<float*>(xs.data()), u.ys.data()}), 0);
  u.asm_text = codegen_llvm(func, host_target(), CodegenOutput::Asm).data;
  return u;
}

// |got - exact| in units in the last place of the float nearest `exact` (the smallest
// denormal's below the normal range).
double ulps(float got, double exact) {
  const float want = static_cast<float>(exact);
  const double ulp = std::max(std::ldexp(1.0, std::ilogb(want) - 23), std::ldexp(1.0, -149));
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(TensorExpressions, ElementwiseMathVectorized) {
  const int64_t n = 37;
  Tensor x = placeholder("x", {n});
  Tensor y = compute("y", {n}, {"i"}, [&](const std::vector<Expr>& i) {
    Expr v = read(x, i);
    return exp(v) + log(fabs(v) + f32(1.0)) * sqrt(fabs(v)) - tanh(v);
  });
  Schedule s(y);
  auto [o, in] = s[y].split(s[y].axis("i"), 8);
  s[y].vectorize(in);
  LowerResult r = lower(s, {x}, "math");
  auto lib = testing::build_for_host(r.func);
  std::vector<float> xs(n), ys(n, NAN);
  for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i - 18) / 7.0f;
  ASSERT_EQ(lib->call({xs.data(), ys.data()}), 0);
  for (int64_t i = 0; i < n; ++i) {
    double v = xs[i];
    double want = std::exp(v) + std::log(std::fabs(v) + 1) * std::sqrt(std::fabs(v)) - std::tanh(v);
    EXPECT_NEAR(ys[i], want, 1e-5 * (1 + std::fabs(want))) << "x = " << v;
  }
}

// A kernel's parallel loop computes in its caller's floating-point mode on every thread
// (compiler/fp_control.h): the pool's workers, started by an IEEE call, take the caller's
// denormal flushing with the next job, and leave it with the one after. x * 2^-20 for x =
// 2^-110 is a denormal (2^-130), or 0 when flushed.
TEST(TensorExpressions, ParallelLoopsComputeInTheCallersFloatingPointMode) {
#if defined(__x86_64__) || defined(__i386__)
  constexpr int64_t n = 1 << 17;
  Tensor x = placeholder("x", {n});
  Tensor y = compute("y", {n}, {"i"}, [&](const std::vector<Expr>& i) { return read(x, i) * f32(std::ldexp(1.0, -20)); });
  Schedule s(y);
  auto [o, in] = s[y].split(s[y].axis("i"), 16);
  s[y].vectorize(in);
  s[y].parallel(o);
  auto lib = testing::build_for_host(lower(s, {x}, "scale").func);
  std::vector<float> xs(n, std::ldexp(1.0f, -110)), ys(n);
  const unsigned ieee = _mm_getcsr() & ~0x8040u;
  auto count = [&](float v) { return std::count(ys.begin(), ys.end(), v); };
  for (int call = 0; call < 30; ++call) {
    const bool flush = call % 3 == 1;
    _mm_setcsr(flush ? ieee | 0x8040u : ieee);
    std::fill(ys.begin(), ys.end(), -1.0f);
    ASSERT_EQ(lib->call({xs.data(), ys.data()}), 0);
    _mm_setcsr(ieee);
    EXPECT_EQ(count(flush ? 0.0f : std::ldexp(1.0f, -130)), n) << "call " << call << (flush ? " (flushing)" : " (IEEE)");
  }
#else
  GTEST_SKIP() << "the test sets x86's MXCSR";
#endif
}

// exp is inlined on CPUs (a polynomial, not a libm call per lane): within 2 ulp of the exact
// value over the whole float range, denormal results included, vectorized and scalar (the
// tail of a split that does not divide), overflow to infinity, exp(-inf) = 0, NaN stays NaN.
TEST(TensorExpressions, ExpIsWithinTwoUlpEverywhere) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 88.72f, 88.7228f, 88.73f, 89.5f, 1000.0f,
                           -87.33f, -87.34f, -100.0f, -103.9f, -104.0f, -110.0f, 1e-8f, -1e-8f,
                           0.34657359f, -0.34657359f, 0.34657360f, INFINITY, -INFINITY, NAN};
  for (int k = 0; k <= 200000; ++k) xs.push_back(-104.0f + 193.0f * static_cast<float>(k) / 200000);
  Unary u = run_unary(xs, exp, "expf");
  double worst = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    float want = static_cast<float>(std::exp(static_cast<double>(xs[k])));
    if (std::isnan(xs[k])) {
      EXPECT_TRUE(std::isnan(u.ys[k]));
      continue;
    }
    if (std::isinf(want) || want == 0.0f) {
      EXPECT_EQ(u.ys[k], want) << "x = " << xs[k];
      continue;
    }
    const double err = ulps(u.ys[k], std::exp(static_cast<double>(xs[k])));
    worst = std::max(worst, err);
    EXPECT_LE(err, 2.0) << "x = " << xs[k] << " exp = " << want << " got " << u.ys[k];
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  std::cout << "worst error " << worst << " ulp\n";
  // Its vector code stays vector: no conversion done lane by lane. llvm.fptosi.sat, which the
  // reduction's integer part once used, is scalarized on x86 (a compare, a move and a
  // conversion per lane: a third of a matmul with a fused GELU went to it).
  EXPECT_EQ(u.asm_text.find("cvttss2si"), std::string::npos)
      << "a lane-by-lane float to int conversion";
  EXPECT_NE(u.asm_text.find("cvttps2dq"), std::string::npos) << "no vector float to int conversion";
}

// tanh is inlined on CPUs too (compiler/codegen_cpu.cc tanh_inline): within 3 ulp of the exact
// value everywhere (both forms and the switch between them at |x| = 0.625, tiny values and
// denormals, the saturation to +-1), -0 stays -0, NaN stays NaN, and no libm call is left.
TEST(TensorExpressions, TanhIsWithinThreeUlpEverywhere) {
  std::vector<float> xs = {0.0f,    -0.0f,       1e-30f,   -1e-30f,  1e-40f,    0.625f,
                           -0.625f, 0.62499994f, 9.0f,     -9.0f,    44.0f,     45.0f,
                           89.0f,   1000.0f,     -1000.0f, INFINITY, -INFINITY, NAN};
  for (int k = 0; k <= 200000; ++k) xs.push_back(-12.0f + 24.0f * static_cast<float>(k) / 200000);
  for (int k = 0; k <= 20000; ++k)
    xs.push_back(std::ldexp(1.0f, -(k % 140)) * (k % 2 ? -1.0f : 1.0f) * (1.0f + k / 20000.0f));
  Unary u = run_unary(xs, tanh, "th");
  double worst = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (std::isnan(xs[k])) {
      EXPECT_TRUE(std::isnan(u.ys[k]));
      continue;
    }
    const double exact = std::tanh(static_cast<double>(xs[k]));
    if (static_cast<float>(exact) == 0.0f) {
      EXPECT_EQ(u.ys[k], xs[k]) << "x = " << xs[k];  // tanh(x) = x there, -0 included
      EXPECT_EQ(std::signbit(u.ys[k]), std::signbit(xs[k])) << "x = " << xs[k];
      continue;
    }
    const double err = ulps(u.ys[k], exact);
    worst = std::max(worst, err);
    EXPECT_LE(err, 3.0) << "x = " << xs[k] << " tanh = " << exact << " got " << u.ys[k];
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  std::cout << "worst error " << worst << " ulp\n";
  EXPECT_EQ(u.asm_text.find("tanhf"), std::string::npos) << "a libm call";
}

// log is inlined on CPUs too (compiler/codegen_cpu.cc log_inline): within 2 ulp of the exact
// value over the positive floats (denormals, the range around 1 where the result is small, the
// largest), log(+-0) = -inf, log(inf) = inf, a negative x or NaN is NaN, no libm call left.
TEST(TensorExpressions, LogIsWithinTwoUlpEverywhere) {
  std::vector<float> xs = {1.0f,          2.0f,      0.5f,   0.70710677f,     0.70710683f,
                           1.4142135f,    1e-45f,    1e-40f, 1.17549435e-38f, 1.1754942e-38f,
                           3.4028235e38f, 0.0f,      -0.0f,  -1.0f,           -1e-40f,
                           INFINITY,      -INFINITY, NAN};
  for (int k = 0; k <= 100000; ++k)
    xs.push_back(0.5f + 1.5f * static_cast<float>(k) / 100000);  // around 1
  for (int k = 0; k <= 100000; ++k)
    xs.push_back(std::ldexp(1.0f + static_cast<float>(k % 1000) / 1000, k % 277 - 149));
  Unary u = run_unary(xs, log, "lg");
  double worst = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (std::isnan(xs[k]) || xs[k] < 0.0f) {
      EXPECT_TRUE(std::isnan(u.ys[k])) << "x = " << xs[k] << " got " << u.ys[k];
      continue;
    }
    const double exact = std::log(static_cast<double>(xs[k]));
    const float want = static_cast<float>(exact);
    if (std::isinf(want) || want == 0.0f) {
      EXPECT_EQ(u.ys[k], want) << "x = " << xs[k];
      continue;
    }
    const double err = ulps(u.ys[k], exact);
    worst = std::max(worst, err);
    EXPECT_LE(err, 2.0) << "x = " << xs[k] << " log = " << want << " got " << u.ys[k];
  }
  RecordProperty("worst_ulp", std::to_string(worst));
  std::cout << "worst error " << worst << " ulp\n";
  EXPECT_EQ(u.asm_text.find("logf"), std::string::npos) << "a libm call";
}

// A gather by a computed index (a float read, cast to an integer, a select and a clamp) in one
// branch of a vectorized select, as a Concat of an embedding lookup compiles: the index is
// lane-invariant, so its select is scalar inside the vector one (codegen once built a
// <1 x i1> mask for it and LLVM refused the IR). Indices that are NaN, huge or negative
// saturate and clamp into the table rather than read out of bounds.
TEST(TensorExpressions, GatherByComputedIndexUnderAVectorSelect) {
  const int64_t rows = 6, width = 16, table_rows = 5;
  Tensor idx = placeholder("idx", {rows});
  Tensor table = placeholder("table", {table_rows, width});
  Tensor other = placeholder("other", {rows, width});
  Tensor y = compute("y", {rows, 2 * width}, {"r", "c"}, [&](const std::vector<Expr>& i) {
    Expr j = Cast::make(Type::int64(), read(idx, {i[0]}));
    j = min(max(select(j < Expr(int64_t{0}), j + table_rows, j), int64_t{0}), table_rows - 1);
    Expr col = min(i[1], Expr(width - 1));
    Expr from_table = read(table, {j, col});
    Expr from_other = read(other, {i[0], max(i[1] - width, Expr(int64_t{0}))});
    return select(i[1] < Expr(width), from_table, from_other);
  });
  Schedule s(y);
  auto [o, in] = s[y].split(s[y].axis("c"), width);
  s[y].vectorize(in);
  auto lib = testing::build_for_host(lower(s, {idx, table, other}, "gather").func);
  std::vector<float> ix = {0, -1, 3, NAN, 1e30f, -1e30f};
  std::vector<float> tb(table_rows * width), ot(rows * width), out(rows * 2 * width, -7);
  for (size_t k = 0; k < tb.size(); ++k) tb[k] = static_cast<float>(k);
  for (size_t k = 0; k < ot.size(); ++k) ot[k] = -static_cast<float>(k);
  ASSERT_EQ(lib->call({ix.data(), tb.data(), ot.data(), out.data()}), 0);
  // NaN saturates to 0, 1e30 to the largest int64 (clamped to the last row), -1e30 to the
  // smallest (plus 5, still negative: clamped to 0).
  const int64_t want_row[] = {0, 4, 3, 0, 4, 0};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 2 * width; ++c) {
      float want = c < width ? tb[want_row[r] * width + c] : ot[r * width + c - width];
      EXPECT_EQ(out[r * 2 * width + c], want) << "row " << r << " column " << c;
    }
  }
}

// select(x < 0, -y, y) over an expensive y of x (erf's sign, GELU's): both sides read only the
// element the condition reads, so they are plain values and y is computed once (it was once
// computed per side under masks, masked loads included: GELU at half its speed). A side
// reading another element keeps its masked load: it may be out of bounds where the condition
// is false.
TEST(TensorExpressions, SelectReadingWhatItsConditionReadsIsOneValue) {
  const int64_t n = 37;
  Tensor x = placeholder("x", {n});
  Tensor y = compute("y", {n}, {"i"}, [&](const std::vector<Expr>& i) {
    Expr v = read(x, i);
    Expr heavy = exp(v * v * f32(-0.5)) + tanh(v);
    return select(v < f32(0.0), heavy * f32(-1.0), heavy);
  });
  Tensor z = compute("z", {n}, {"i"}, [&](const std::vector<Expr>& i) {
    Expr next = read(x, {min(i[0] + int64_t{1}, Expr(n - 1))});
    return select(read(x, i) < f32(0.0), next, f32(2.0));
  });
  std::vector<std::pair<Tensor, std::function<double(const std::vector<float>&, int64_t)>>> cases = {
      {y, [](const std::vector<float>& xs, int64_t i) {
         double v = xs[i], h = std::exp(-0.5 * v * v) + std::tanh(v);
         return v < 0 ? -h : h;
       }},
      {z, [](const std::vector<float>& xs, int64_t i) {
         return xs[i] < 0 ? xs[std::min(i + 1, n - 1)] : 2.0;
       }}};
  for (size_t c = 0; c < cases.size(); ++c) {
    Tensor out = cases[c].first;
    Schedule s(out);
    auto [o, in] = s[out].split(s[out].axis("i"), 16);
    s[out].vectorize(in);
    LoweredFunc f = lower(s, {x}, "sel").func;
    std::string ll = codegen_llvm(f, host_target(), CodegenOutput::LLVM).data;
    if (c == 0) EXPECT_EQ(ll.find("masked.load"), std::string::npos) << "the sides read x under masks";
    else EXPECT_NE(ll.find("masked.load"), std::string::npos) << "x[i + 1] read unmasked";
    auto lib = testing::build_for_host(f);
    std::vector<float> xs(n), ys(n, NAN);
    for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(i - 18) / 5.0f;
    ASSERT_EQ(lib->call({xs.data(), ys.data()}), 0);
    for (int64_t i = 0; i < n; ++i) {
      double want = cases[c].second(xs, i);
      EXPECT_NEAR(ys[i], want, 1e-5 * (1 + std::fabs(want))) << "case " << c << " x = " << xs[i];
    }
  }
}

// A window over columns, as a padded pool or convolution reads it: x[o * stride - 1 + q] for
// q < 3 where that is inside [0, n), -inf outside, the index unclamped (graph/te_nn.cc's
// window_read). Vectorized over o, each window element is one masked load, contiguous at
// stride 1 and a masked load of lanes x stride elements shuffled at stride 2, never a gather
// (clamped indices were: an NCHW 3x3 max pool 4x slower). x lies between two inaccessible
// pages, so a lane read outside it faults.
TEST(TensorExpressions, WindowReadOutsideItsInputIsMaskedNotGathered) {
  const long page = sysconf(_SC_PAGESIZE);
  for (int64_t stride : {1, 2}) {
    const int64_t n = 45, out_n = (n + 2 - 3) / stride + 1;
    Tensor x = placeholder("x", {n});
    IterVar q = reduce_axis(3, "q");
    Tensor y = compute("y", {out_n}, {"o"}, [&](const std::vector<Expr>& o) {
      Expr at = o[0] * stride - int64_t{1} + q.var;
      Expr inside = logical_and(at >= int64_t{0}, at < Expr(n));
      return max_reduce(select(inside, read(x, {at}), f32(-INFINITY)), {q});
    }, {q});
    Schedule s(y);
    auto [oo, oi] = s[y].split(s[y].axis("o"), 16);
    s[y].reorder({oo, s[y].axis("q"), oi});
    s[y].vectorize(oi);
    LoweredFunc f = lower(s, {x}, "window").func;
    std::string ll = codegen_llvm(f, host_target(), CodegenOutput::LLVM).data;
    EXPECT_NE(ll.find("masked.load"), std::string::npos) << "stride " << stride;
    EXPECT_EQ(ll.find("masked.gather"), std::string::npos) << "stride " << stride << ": the columns gathered";
    auto lib = testing::build_for_host(f);
    // [guard page][... x ends here][guard page], x's first element right after a guard too
    // when the window reads before it: two arrangements.
    void* mem = mmap(nullptr, static_cast<size_t>(3 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    char* base = static_cast<char*>(mem);
    ASSERT_EQ(mprotect(base, static_cast<size_t>(page), PROT_NONE), 0);
    ASSERT_EQ(mprotect(base + 2 * page, static_cast<size_t>(page), PROT_NONE), 0);
    for (float* xs : {reinterpret_cast<float*>(base + page), reinterpret_cast<float*>(base + 2 * page) - n}) {
      for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>((i * 7) % 11) - 5.0f;
      std::vector<float> ys(static_cast<size_t>(out_n), NAN);
      ASSERT_EQ(lib->call({xs, ys.data()}), 0);
      for (int64_t o = 0; o < out_n; ++o) {
        float want = -INFINITY;
        for (int64_t k = 0; k < 3; ++k) {
          int64_t at = o * stride - 1 + k;
          if (at >= 0 && at < n) want = std::max(want, xs[at]);
        }
        EXPECT_EQ(ys[static_cast<size_t>(o)], want) << "stride " << stride << " output " << o;
      }
    }
    munmap(mem, static_cast<size_t>(3 * page));
  }
}

TEST(TensorExpressions, MaxReductionWithSplitAxis) {
  const int64_t rows = 5, cols = 29;
  Tensor a = placeholder("a", {rows, cols});
  IterVar k = reduce_axis(cols, "k");
  Tensor m = compute("rowmax", {rows}, {"i"}, [&](const std::vector<Expr>& i) {
    return max_reduce(read(a, {i[0], k.var}), {k});
  }, {k});
  Schedule s(m);
  s[m].split(s[m].axis("k"), 4);  // 29 = 7*4 + 1: a guarded tail
  LowerResult r = lower(s, {a}, "rowmax");
  auto lib = testing::build_for_host(r.func);
  std::vector<float> as(rows * cols), out(rows, NAN);
  for (int64_t i = 0; i < rows * cols; ++i) as[i] = static_cast<float>((i * 37) % 101) - 50.0f;
  as[4 * cols + cols - 1] = 1000.0f;  // the maximum of the last row sits in the tail
  ASSERT_EQ(lib->call({as.data(), out.data()}), 0);
  for (int64_t i = 0; i < rows; ++i) {
    float want = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) want = std::max(want, as[i * cols + j]);
    EXPECT_EQ(out[i], want) << "row " << i;
  }
}

}  // namespace
}  // namespace tf
