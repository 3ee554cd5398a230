// The simplifier and range analysis on hand-built expressions.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/simplify.h"

namespace tf::ir {
namespace {

TEST(Simplify, CancelsLinearTerms) {
  Expr io = Var::make("io"), ii = Var::make("ii");
  EXPECT_EQ(to_string(simplify((io * 4 + ii) - io * 4)), "ii");
  EXPECT_EQ(to_string(simplify((io + 3) + (io + -3))), "(io*2)");
}

TEST(Simplify, DivModUseRanges) {
  Expr jo = Var::make("jo"), ji = Var::make("ji");
  RangeMap r = {{ji.get(), {0, 31}}, {jo.get(), {0, 100}}};
  EXPECT_EQ(to_string(simplify((jo * 32 + ji) / 32, r)), "jo");
  EXPECT_EQ(to_string(simplify((jo * 32 + ji) % 32, r)), "ji");
  // Without a range for ji nothing can be proven about ji / 32.
  EXPECT_EQ(to_string(simplify((jo * 32 + ji) / 32)), "(jo + (ji/32))");
  EXPECT_EQ(to_string(simplify(Expr(-7) / 2)), "-4");  // floor division
  EXPECT_EQ(to_string(simplify(Expr(-7) % 2)), "1");
}

// A fused loop p indexing a tensor by its parts: (p/56)*56 + p%56 is p whatever p's range
// (floor division), also scaled and inside a sum; parts of different divisors stay.
TEST(Simplify, RecombinesDivAndMod) {
  Expr p = Var::make("p"), n = Var::make("n");
  EXPECT_EQ(to_string(simplify((p / 56) * 56 + p % 56)), "p");
  EXPECT_EQ(to_string(simplify(n * 3136 + ((p / 56) * 56 + p % 56) * 2)), "((n*3136) + (p*2))");
  EXPECT_EQ(to_string(simplify((p / 56) * 56 + p % 28)), "(((p/56)*56) + (p % 28))");
  EXPECT_EQ(to_string(simplify((p / 56) * 28 + p % 56)), "(((p/56)*28) + (p % 56))");
}

// A flattened index read through a reshape: (784 c + 28 h + w) / 1568 is c / 2 and its
// remainder 784 (c % 2) + 28 h + w when 28 h + w stays below 784, whatever c's sign (floor
// division); a vector of such indices whose lanes stay in one quotient is a broadcast
// (ShuffleNet's channel shuffle). Not when the rest can reach the divisor's factor.
TEST(Simplify, DivModSplitAtADivisorOfTheDivisor) {
  Expr c = Var::make("c"), h = Var::make("h"), w = Var::make("w");
  RangeMap r = {{c.get(), {-3, 115}}, {h.get(), {0, 27}}, {w.get(), {0, 27}}};
  Expr flat = c * 784 + h * 28 + w;
  EXPECT_EQ(to_string(simplify(flat / 1568, r)), "(c/2)");
  EXPECT_EQ(to_string(simplify(flat % 1568, r)), "((((c % 2)*784) + (h*28)) + w)");
  EXPECT_EQ(to_string(simplify((flat + 5) / 1568, r)), "(((((c*784) + (h*28)) + w) + 5)/1568)");  // 28*27+27+5 >= 784
  EXPECT_EQ(to_string(simplify(Ramp::make(c * 784 + h * 28, 1, 16) / Broadcast::make(Expr(1568), 16), r)), "x16((c/2))");
  // The rewritten forms, at every c and some h and w, against floor division itself.
  const Expr div = simplify(flat / 1568, r), mod = simplify(flat % 1568, r);
  for (int64_t cv = -3; cv <= 115; ++cv)
    for (int64_t hv = 0; hv < 28; hv += 9)
      for (int64_t wv = 0; wv < 28; wv += 13) {
        const int64_t x = cv * 784 + hv * 28 + wv;
        const int64_t q = x >= 0 ? x / 1568 : -((-x + 1567) / 1568), m = x - q * 1568;
        VarMap at = {{c.get(), Expr(cv)}, {h.get(), Expr(hv)}, {w.get(), Expr(wv)}};
        EXPECT_EQ(to_string(simplify(substitute(div, at))), std::to_string(q)) << x;
        EXPECT_EQ(to_string(simplify(substitute(mod, at))), std::to_string(m)) << x;
      }
}

// A select of two sums takes out the terms both branches share (and the smaller constant):
// a fragment's lane addresses (ldmatrix: a select over the lane's row) for each tile and step
// of K differ by such terms only, so that every tile's select is one value, and the division
// by the word size that follows distributes over what was taken out. Checked by evaluation.
TEST(Simplify, SelectTakesOutWhatItsBranchesShare) {
  Expr l = Var::make("l"), t = Var::make("t"), k = Var::make("k");
  auto lanes = [&](int64_t tile) {  // the rows of four 8 x 8 matrices, 40 halves a row
    Expr row = t * 40 + k * 5120 + Expr(tile * 640);
    return select(eq(l, Expr(0)), row,
                  select(eq(l, Expr(1)), row + 320, select(eq(l, Expr(2)), row + 8, row + 328)));
  };
  const Expr a0 = simplify(lanes(0)), a1 = simplify(lanes(1));
  EXPECT_EQ(to_string(a0),
            "(((t*40) + (k*5120)) + select((l == 0), 0, (select((l == 1), 312, select((l == 2), 0, "
            "320)) + 8)))");
  EXPECT_EQ(to_string(simplify(a1 - a0)), "640");  // the same select, another constant
  // Words of two halves: the division reaches only the select.
  EXPECT_EQ(to_string(simplify(lanes(1) / 2)),
            "((((t*20) + (k*2560)) + (select((l == 0), 0, (select((l == 1), 312, select((l == 2), "
            "0, 320)) + 8))/2)) + 320)");
  // Branches sharing nothing but a variable's different multiples stay as they are.
  EXPECT_EQ(to_string(simplify(select(eq(l, Expr(0)), t * 2, t * 3))),
            "select((l == 0), (t*2), (t*3))");
  for (int64_t lv = 0; lv < 5; ++lv)
    for (int64_t tv : {-3, 0, 7})
      for (int64_t kv : {0, 2}) {
        VarMap at = {{l.get(), Expr(lv)}, {t.get(), Expr(tv)}, {k.get(), Expr(kv)}};
        for (int64_t tile : {0, 1}) {
          EXPECT_EQ(to_string(simplify(substitute(simplify(lanes(tile)), at))),
                    to_string(simplify(substitute(lanes(tile), at))));
          EXPECT_EQ(to_string(simplify(substitute(simplify(lanes(tile) / 2), at))),
                    to_string(simplify(substitute(lanes(tile) / 2, at))));
        }
      }
}

TEST(Simplify, ProvesGuards) {
  Expr i = Var::make("i");
  RangeMap r = {{i.get(), {0, 7}}};
  EXPECT_EQ(to_string(simplify(i < Expr(8), r)), "true");
  EXPECT_EQ(to_string(simplify(i < Expr(7), r)), "(i < 7)");
  EXPECT_EQ(to_string(simplify(min(i, Expr(9)), r)), "i");
}

TEST(Simplify, FoldsRamps) {
  Expr b = Var::make("b");
  Expr e = Ramp::make(b * 32, 1, 8) + Broadcast::make(Expr(5), 8);
  EXPECT_EQ(to_string(simplify(e)), "ramp(((b*32) + 5), 1, 8)");
  RangeMap r = {{b.get(), {0, 3}}};
  // Lanes 0..7 of a block of 32 stay in one block.
  EXPECT_EQ(to_string(simplify(Ramp::make(b * 32, 1, 8) / Broadcast::make(Expr(32), 8), r)), "x8(b)");
  EXPECT_EQ(to_string(simplify(Ramp::make(b * 32, 1, 8) % Broadcast::make(Expr(32), 8), r)),
            "ramp(0, 1, 8)");
}

// A vector index whose lanes differ by constants (a group's channel i spread over its lanes:
// (lane / 4) * 4 + i) is its first lane's scalar index and the constant offsets; one whose
// lanes differ by a variable, or read through a load, is not.
TEST(LaneOffsets, ConstantPerLane) {
  Expr x = Var::make("x"), i = Var::make("i");
  Expr lanes = Ramp::make(x * 16, Expr(1), 8) / Broadcast::make(Expr(4), 8) * Broadcast::make(Expr(4), 8) +
               Broadcast::make(i, 8);
  std::optional<LaneOffsets> lo = lane_offsets(lanes);
  ASSERT_TRUE(lo.has_value());
  EXPECT_EQ(to_string(simplify(lo->first - (x * 16 + i))), "0");
  EXPECT_EQ(lo->offsets, (std::vector<int64_t>{0, 0, 0, 0, 4, 4, 4, 4}));
  EXPECT_FALSE(lane_offsets(Ramp::make(x, i, 4)).has_value());  // a variable stride
  EXPECT_FALSE(lane_offsets(Load::make(Type::int64(), "b", Ramp::make(x, Expr(1), 4))).has_value());
  EXPECT_FALSE(lane_offsets(x).has_value());  // a scalar
}

TEST(Simplify, DropsUnitAndEmptyLoops) {
  Expr i = Var::make("i");
  Stmt body = Store::make("out", f32(1.0), i);
  EXPECT_EQ(to_string(simplify(For::make(i, 3, 1, ForKind::Serial, body))), "out[3] = 1f\n");
  EXPECT_EQ(to_string(simplify(For::make(i, 0, 0, ForKind::Serial, body))), "");
}

TEST(ConstBounds, Intervals) {
  Expr i = Var::make("i");
  RangeMap r = {{i.get(), {-2, 5}}};
  auto b = const_bounds(i * -3 + 1, r);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->lo, -14);
  EXPECT_EQ(b->hi, 7);
  EXPECT_FALSE(const_bounds(Var::make("unknown"), r));
}

}  // namespace
}  // namespace tf::ir
