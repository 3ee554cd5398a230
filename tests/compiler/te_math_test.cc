// Elementwise math and max reductions, which no operator of the library uses yet: built
// directly as tensor expressions, compiled with real LLVM (vectorized, so the vector forms
// of the intrinsics and the libm link are exercised) and checked against <cmath>.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "compiler/lower.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

using namespace ir;  // NOLINT

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
