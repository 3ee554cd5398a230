// Schedule primitives one at a time on hand-written schedules (compiled and run for real),
// and the user errors each primitive and the config parser can raise.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "base/error.h"
#include "compiler/ir_printer.h"
#include "compiler/lower.h"
#include "compiler/model_codegen.h"
#include "compiler/operator_table.h"
#include "compiler/schedule_templates.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {

using ir::Expr;
using ir::Schedule;
using ir::Stage;

OpGraph graph(const char* spec) { return build_op(parse_workload(spec)); }

// Lowers `g` scheduled by `f`, runs it and checks it against the reference.
void expect_correct(const OpGraph& g, const std::function<void(Schedule&)>& f) {
  Schedule s(g.output);
  f(s);
  LowerResult r = lower(s, g.inputs, "kernel");
  testing::Comparison c = testing::run_and_compare(g, r.func);
  EXPECT_TRUE(c.ok()) << c.str() << "\n" << ir::to_string(r.func);
}

TEST(Primitives, NoScheduleAtAll) {
  expect_correct(graph("matmul(M=7,N=5,K=3,epilogue=bias_relu)"), [](Schedule&) {});
}

TEST(Primitives, SplitFactorThatDoesNotDivide) {
  OpGraph g = graph("matmul(M=13,N=11,K=7)");
  expect_correct(g, [&](Schedule& s) {
    Stage& c = s[g.output];
    c.split(c.axis("i"), 4);
    c.split(c.axis("j"), 5);
    c.split(c.axis("k"), 3);
  });
}

TEST(Primitives, SplitNpartsTileReorderFuse) {
  OpGraph g = graph("matmul(M=10,N=9,K=4)");
  expect_correct(g, [&](Schedule& s) {
    Stage& c = s[g.output];
    c.split_nparts(c.axis("k"), 3);
    std::vector<Expr> t = c.tile(c.axis("i"), c.axis("j"), 3, 4);
    Expr f = c.fuse(t[0], t[1]);
    c.parallel(f);
    c.reorder({c.axis("k.o"), t[2]});
  });
}

TEST(Primitives, VectorizeUnrollParallel) {
  OpGraph g = graph("matmul(M=9,N=37,K=5,epilogue=relu)");
  expect_correct(g, [&](Schedule& s) {
    Stage& out = s[g.output];
    auto [jo, ji] = out.split(out.axis("j"), 8);
    out.vectorize(ji);
    out.parallel(out.axis("i"));
    Stage& acc = s[g.acc];
    acc.reorder({acc.axis("i"), acc.axis("k"), acc.axis("j")});
    auto [ko, ki] = acc.split(acc.axis("k"), 2);
    acc.unroll(ki);
  });
}

// A vectorized loop that cannot be one vector (the lanes of a tile past the output's end
// guarded one by one) is unrolled, its lanes as scalar copies, where its body is straight-line
// code; one with a loop inside stays a serial loop. Either way the note says why.
TEST(Primitives, VectorizedLoopsThatCannotBeVectorsAreUnrolled) {
  // Tiles of 8 columns of 5: no whole tile to shift the last one onto (partition_loops).
  OpGraph g = graph("matmul(M=9,N=5,K=5,epilogue=relu)");
  for (bool inner_loop : {false, true}) {
    SCOPED_TRACE(inner_loop ? "a loop inside" : "straight-line");
    LowerResult r;
    expect_correct(g, [&](Schedule& s) {
      Stage& out = s[g.output];
      auto [jo, ji] = out.split(out.axis("j"), 8);
      out.vectorize(ji);
      Stage& acc = s[g.acc];
      if (inner_loop) {
        auto [ajo, aji] = acc.split(acc.axis("j"), 8);
        acc.reorder({acc.axis("i"), ajo, aji, acc.axis("k")});
        acc.vectorize(aji);
      }
      r = lower(s, g.inputs, "kernel");
    });
    const std::string ir = ir::to_string(r.func);
    auto noted = [&](const std::string& text) {
      return std::any_of(r.notes.begin(), r.notes.end(),
                         [&](const std::string& n) { return n == text; });
    };
    EXPECT_TRUE(noted("loop j.i not vectorized: condition differs between lanes; unrolled")) << ir;
    EXPECT_EQ(noted("loop j.i not vectorized: condition differs between lanes"), inner_loop) << ir;
    EXPECT_EQ(ir.find("for (j.i,") != std::string::npos, inner_loop) << ir;
  }
}

TEST(Primitives, CacheWriteComputeAt) {
  OpGraph g = graph("matmul(M=19,N=23,K=11)");
  expect_correct(g, [&](Schedule& s) {
    ir::Tensor local = s.cache_write(g.output);
    Stage& c = s[g.output];
    std::vector<Expr> t = c.tile(c.axis("i"), c.axis("j"), 4, 8);
    c.vectorize(t[3]);
    Stage& l = s[local];
    l.compute_at(c, t[1]);
    l.reorder({l.axis("k"), l.axis("i"), l.axis("j")});
    l.vectorize(l.axis("j"));
    l.unroll(l.axis("i"));
  });
}

// The accumulators laid out [n][oh][ow][k] so that the output channels, vectorized, are the
// local buffer's contiguous dimension while the output stays NCHW; with an epilogue the
// reduction's own stage is inlined into it.
TEST(Primitives, CacheWriteWithLayout) {
  for (const char* spec : {"conv2d_nchw(N=2,C=3,H=7,W=6,K=19,R=3,S=3,pad=1)",
                           "conv2d_nchw(N=1,C=4,H=9,W=9,K=8,R=3,S=3,stride=2,epilogue=bias_relu)"}) {
    OpGraph g = graph(spec);
    std::string ir;
    expect_correct(g, [&](Schedule& s) {
      ir::Tensor local = s.cache_write(g.acc, {0, 2, 3, 1});
      EXPECT_EQ(local->shape, (std::vector<int64_t>{g.acc->shape[0], g.acc->shape[2], g.acc->shape[3], g.acc->shape[1]}));
      if (g.acc != g.output) s[g.acc].compute_inline();
      Stage& out = s[g.output];
      auto [ko, ki] = out.split(out.axis("k"), 8);
      auto [wo, wi] = out.split(out.axis("ow"), 3);
      out.reorder({out.axis("n"), ko, out.axis("oh"), wo, ki, wi});
      Stage& l = s[local];
      l.compute_at(out, wo);
      l.reorder({l.axis("n"), l.axis("oh"), l.axis("rc"), l.axis("rr"), l.axis("rs"), l.axis("ow"), l.axis("k")});
      l.vectorize(l.axis("k"));
      l.unroll(l.axis("ow"));
      ir = ir::to_string(lower(s, g.inputs, "kernel").func);
    });
    // One contiguous 8-lane vector per output column of the tile.
    EXPECT_NE(ir.find(".local[ramp(8, 1, 8)]"), std::string::npos) << ir;
  }
}

// Vector loops 16 lanes or wider whose extent is not a power of two become one vector per
// power-of-two chunk (LLVM handles such wide odd vectors element by element); narrower ones
// stay one vector.
TEST(Primitives, WideOddVectorsAreSplitIntoPowersOfTwo) {
  OpGraph g = graph("matmul(M=3,N=63,K=5)");
  std::string ir;
  expect_correct(g, [&](Schedule& s) {
    Stage& out = s[g.output];
    auto [jo, ji] = out.split(out.axis("j"), 56);
    out.vectorize(ji);
    ir = ir::to_string(lower(s, g.inputs, "kernel").func);
  });
  for (const char* chunk : {", 1, 32)]", ", 1, 16)]", ", 1, 8)]"}) EXPECT_NE(ir.find(chunk), std::string::npos) << chunk << "\n" << ir;
  EXPECT_EQ(ir.find(", 1, 56)]"), std::string::npos) << ir;

  OpGraph narrow = graph("matmul(M=3,N=7,K=5)");
  expect_correct(narrow, [&](Schedule& s) {
    Stage& out = s[narrow.output];
    out.vectorize(out.axis("j"));
    ir = ir::to_string(lower(s, narrow.inputs, "kernel").func);
  });
  EXPECT_NE(ir.find(", 1, 7)]"), std::string::npos) << ir;
}

TEST(Primitives, PackAndInline) {
  OpGraph g = graph("conv2d_nchw(N=1,C=4,H=9,W=9,K=6,R=3,S=3,pad=1)");
  expect_correct(g, [&](Schedule& s) {
    s.stage("data_pad").compute_inline();
    Stage& p = s.pack("weight", 0, 4);  // [K/4][C][R][S][4], zero past K
    p.vectorize(p.axis("x"));
  });
}

TEST(Primitives, PaddedCopyComputedAtRow) {
  OpGraph g = graph("conv2d_nchw(N=1,C=2,H=6,W=7,K=3,R=3,S=3,pad=1)");
  expect_correct(g, [&](Schedule& s) {
    Stage& out = s[g.output];
    s.stage("data_pad").compute_at(out, out.axis("oh"));
  });
}

using testing::expect_user_error;

TEST(PrimitiveErrors, EachNamesTheProblem) {
  OpGraph g = graph("matmul(M=8,N=8,K=8,epilogue=relu)");
  Schedule s(g.output);
  Stage& out = s[g.output];
  Stage& acc = s[g.acc];
  expect_user_error([&] { out.axis("q"); }, "has no axis 'q'");
  expect_user_error([&] { out.split(out.axis("i"), 0); }, "factor 0 must be at least 1");
  expect_user_error([&] { out.split_nparts(out.axis("i"), -1); }, "nparts -1");
  expect_user_error([&] { acc.parallel(acc.axis("k")); }, "is a reduction loop");
  expect_user_error([&] { acc.fuse(acc.axis("j"), acc.axis("k")); }, "cannot fuse reduction loop");
  expect_user_error([&] { out.fuse(out.axis("j"), out.axis("i")); }, "not adjacent");
  expect_user_error([&] { out.reorder({out.axis("i"), out.axis("i")}); }, "listed twice");
  expect_user_error([&] { acc.compute_inline(); }, "a reduction cannot be inlined");
  expect_user_error([&] { s.pack("Z", 0, 4); }, "'Z' is not an input");
  expect_user_error([&] { s.pack("A", 5, 4); }, "dimension 5 out of range");
  expect_user_error([&] { s.cache_write(g.output); }, "only reductions can be cached");
  expect_user_error([&] { s.cache_write(g.acc, {0, 0}); }, "must order each of its 2 axes exactly once");
  expect_user_error([&] { s.cache_write(g.acc, {1, 0, 2}); }, "must order each of its 2 axes exactly once");
  expect_user_error([&] { s.stage("nope"); }, "no stage 'nope'");
  auto [io, ii] = out.split(out.axis("i"), 2);
  expect_user_error([&] { out.vectorize(out.axis("i")); }, "is not a loop of this stage");
  (void)io;
  (void)ii;
}

// prefetch: at each iteration of `at`, the lines of the input the same iteration reads
// `offset` iterations of `from` later, under a guard that that iteration exists. A row of A
// (one run of 40 floats, 3 lines) read at row i + 1; a tile of 8 rows of B, each a run of 4
// floats, at k.o + 1 (one loop over the rows). Results unchanged.
TEST(Primitives, PrefetchAsksForWhatALaterIterationReads) {
  OpGraph g = graph("matmul(M=6,N=12,K=40)");
  std::string ir;
  expect_correct(g, [&](Schedule& s) {
    Stage& c = s[g.output];
    c.prefetch("A", c.axis("j"), c.axis("i"), 1);
  });
  {
    Schedule s(g.output);
    Stage& c = s[g.output];
    c.prefetch("A", c.axis("j"), c.axis("i"), 1);
    ir = ir::to_string(lower(s, g.inputs, "kernel").func);
  }
  EXPECT_NE(ir.find("if (((i + 1) < 6))"), std::string::npos) << ir;
  EXPECT_EQ(testing::count_of(ir, "prefetch A["), 3u + 1u) << ir;  // 3 lines, and the last element's
  EXPECT_EQ(testing::count_of(ir, "prefetch"), testing::count_of(ir, "prefetch A[")) << ir;

  OpGraph g2 = graph("matmul(M=5,N=9,K=16,epilogue=relu)");
  expect_correct(g2, [&](Schedule& s) {
    Stage& acc = s[g2.acc];
    auto [ko, ki] = acc.split(acc.axis("k"), 8);
    auto [jo, ji] = acc.split(acc.axis("j"), 4);
    acc.reorder({acc.axis("i"), jo, ko, ki, ji});
    acc.prefetch("B", ko, ko, 1);
    ir = ir::to_string(lower(s, g2.inputs, "kernel").func);
  });
  // 8 rows of 4 floats at j.o * 4: a line each, and the line of its last element.
  EXPECT_NE(ir.find("if (((k.o + 1) < 2))"), std::string::npos) << ir;
  EXPECT_NE(ir.find("prefetch B[(((k.o*72) + (j.o*4)) + 138)]"), std::string::npos) << ir;

  // In a vectorized loop: one scalar prefetch where every lane wants the same line (A's row);
  // where the lanes want their own (B's column j), the loop stays serial and says why.
  for (const char* input : {"A", "B"}) {
    SCOPED_TRACE(input);
    std::vector<std::string> notes;
    expect_correct(g, [&](Schedule& s) {
      Stage& c = s[g.output];
      c.vectorize(c.axis("j"));
      c.prefetch(input, c.axis("j"), c.axis("i"), 1);
      notes = lower(s, g.inputs, "kernel").notes;
    });
    const bool serial = std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("loop j not vectorized: prefetch of B varies across lanes") != std::string::npos;
    });
    EXPECT_EQ(serial, std::string(input) == "B");
  }
}

TEST(PrimitiveErrors, PrefetchNamesItsInputAndLoops) {
  OpGraph g = graph("matmul(M=8,N=8,K=8,epilogue=relu)");
  auto lowering = [&](const std::function<void(Schedule&)>& f) {
    return [&g, f] {
      Schedule s(g.output);
      f(s);
      lower(s, g.inputs, "kernel");
    };
  };
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& acc = s[g.acc];
                      acc.prefetch("B", acc.axis("k"), acc.axis("i"), 0);
                    }),
                    "offset 0 must be at least 1");
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& acc = s[g.acc];
                      acc.prefetch("B", acc.axis("k"), Expr(3), 1);
                    }),
                    "prefetch on stage acc: 'from' is not a loop");
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& acc = s[g.acc];
                      auto [ko, ki] = acc.split(acc.axis("k"), 2);
                      acc.prefetch("B", acc.axis("k"), ko, 1);
                    }),
                    "is not a loop of this stage");
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& out = s[g.output];
                      out.prefetch("B", out.axis("j"), out.axis("i"), 1);
                    }),
                    "prefetches B, which it does not read inside its loop 'j'");
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& acc = s[g.acc];
                      acc.prefetch("Q", acc.axis("k"), acc.axis("i"), 1);
                    }),
                    "prefetches Q, which is no buffer of this kernel");
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& acc = s[g.acc];
                      acc.prefetch("B", acc.axis("i"), acc.axis("k"), 1);
                    }),
                    "from loop 'k', which is not a loop around its loop 'i'");
  // A tile whose storage is reordered (Stage::storage_layout) is no run of lines to prefetch.
  expect_user_error(lowering([&](Schedule& s) {
                      Stage& c = s[g.output];
                      Stage& acc = s[g.acc];
                      std::vector<Expr> t = c.tile(c.axis("i"), c.axis("j"), 4, 4);
                      acc.compute_at(c, t[1]);
                      auto [ko, ki] = acc.split(acc.axis("k"), 4);
                      acc.reorder({ko, ki, acc.axis("i"), acc.axis("j")});
                      Stage& a = s.cache_read_shared("A");
                      a.compute_at(acc, ko);
                      a.storage_layout({1, 0});
                      acc.prefetch("A.shared", ki, ki, 1);
                    }),
                    "prefetches A.shared, which is not stored row-major");
}

// parallel_slices: the pool's chunks take slices of the fused loop's inner part for every
// outer iteration. Every iteration runs once whether the team has fewer chunks than the inner
// extent (slices of several iterations) or more (3 of them: slices of one, the outer range
// split among the rest, the chunks left over idle); the loop IR says so; a loop that is not a
// fuse is refused by name, and a For whose extent the slices do not divide, or that is not
// parallel, keeps no slices.
TEST(Primitives, ParallelSlicesRunEveryIterationOnce) {
  for (const char* spec : {"matmul(M=6,N=40,K=3,epilogue=relu)", "matmul(M=10,N=9,K=4)", "matmul(M=7,N=3,K=2)"}) {
    OpGraph g = graph(spec);
    auto sliced = [&](Schedule& s) {
      Stage& c = s[g.output];
      c.parallel_slices(c.fuse(c.axis("i"), c.axis("j")));
    };
    expect_correct(g, sliced);
    Schedule s(g.output);
    sliced(s);
    const std::string loops = ir::to_string(lower(s, g.inputs, "kernel").func);
    const int64_t n = g.output->shape[1];
    EXPECT_NE(loops.find("slices of " + std::to_string(n) + " {"), std::string::npos) << spec << "\n" << loops;
  }
  OpGraph g = graph("matmul(M=8,N=8,K=8)");
  Schedule s(g.output);
  Stage& out = s[g.output];
  expect_user_error([&] { out.parallel_slices(out.axis("i")); }, "'i' is not a loop made by fuse(outer, inner)");
  Expr v = ir::Var::make("v");
  ir::Stmt body = ir::Store::make("A", ir::FloatImm::make(1.0), v);
  EXPECT_EQ(ir::For::make(v, 0, 12, ir::ForKind::Parallel, body, 4).as<ir::For>()->parallel_inner, 4);
  EXPECT_EQ(ir::For::make(v, 0, 10, ir::ForKind::Parallel, body, 4).as<ir::For>()->parallel_inner, 0);
  EXPECT_EQ(ir::For::make(v, 0, 12, ir::ForKind::Serial, body, 4).as<ir::For>()->parallel_inner, 0);
  EXPECT_EQ(ir::For::make(v, 0, 12, ir::ForKind::Parallel, body, 12).as<ir::For>()->parallel_inner, 0);
}

// Shared stages run on a CPU too (one thread: the buffers on the stack, barriers nothing):
// a transposed, padded layout and double buffering (the next tile copied before this one is
// used, K not a multiple of the step) compute the reference's values.
// A matmul's accumulator at the output's 4 x 8 tiles, K in steps of 4, A and B copied into
// shared stages by `cache` at each step, laid out (order, pad) as given, in `buffers` buffers;
// checked against the reference for 1 to 4 buffers, and 3 and 4 with reads in flight (the
// copies one tile less ahead).
using Layout = std::pair<std::vector<size_t>, int64_t>;
void expect_shared_tiles_correct(const OpGraph& g, const std::function<Stage&(Schedule&, const std::string&)>& cache,
                                 const Layout& la, const Layout& lb) {
  for (auto [buffers, in_flight] : {std::pair{1, 0}, {2, 0}, {3, 0}, {4, 0}, {3, 1}, {4, 1}}) {
    SCOPED_TRACE(str(buffers, " buffers, ", in_flight, " iterations of reads in flight"));
    expect_correct(g, [&](Schedule& s) {
      Stage& c = s[g.output];
      Stage& l = s[g.acc];
      std::vector<Expr> t = c.tile(c.axis("i"), c.axis("j"), 4, 8);
      l.compute_at(c, t[1]);
      auto [ko, ki] = l.split(l.axis("k"), 4);
      l.reorder({ko, ki, l.axis("i"), l.axis("j")});
      Stage& a = cache(s, "A");
      a.compute_at(l, ko);
      a.storage_layout(la.first, la.second);
      Stage& b = cache(s, "B");
      b.compute_at(l, ko);
      b.storage_layout(lb.first, lb.second);
      if (buffers > 1) {
        a.multi_buffer(buffers, in_flight);
        b.multi_buffer(buffers, in_flight);
      }
    });
  }
}

TEST(Primitives, SharedLayoutAndDoubleBuffer) {
  expect_shared_tiles_correct(
      graph("matmul(M=19,N=23,K=13,epilogue=relu)"),
      [](Schedule& s, const std::string& in) -> Stage& { return s.cache_read_shared(in); }, {{1, 0}, 4},
      {{0, 1}, 3});
}

// cache_read_shared_16: the tiles held as float16 / bfloat16 bits, read widened. On a CPU (one
// thread) with 1 to 4 buffers: the multi-buffered copies, which round what they copy, go
// through registers (loaded before the step's products, stored after); an fp16 / bf16 matmul's
// reference rounds its operands the same way, so the results match it.
TEST(Primitives, SharedTilesIn16Bits) {
  for (const char* p : {"fp16", "bf16"}) {
    const bool bf16 = std::string(p) == "bf16";
    expect_shared_tiles_correct(
        graph((std::string("matmul(M=19,N=23,K=13,epilogue=relu,precision=") + p + ")").c_str()),
        [&](Schedule& s, const std::string& in) -> Stage& { return s.cache_read_shared_16(in, bf16); },
        {{0, 1}, 0}, {{1, 0}, 8});
  }
}

TEST(PrimitiveErrors, SharedTilesIn16BitsOfFloat32Only) {
  ir::Tensor x = ir::placeholder("X", {8}, ir::Type::uint8());
  ir::Tensor y = ir::compute("Y", {8}, {"i"}, [&](const std::vector<Expr>& ax) {
    return ir::Cast::make(ir::Type::float32(), ir::read(x, ax));
  });
  Schedule s(y);
  expect_user_error([&] { s.cache_read_shared_16("X", false); },
                    "cache_read of X in 16 bits: it is uint8, not float32");
  expect_user_error([&] { s.cache_read_shared_16("Z", true); }, "'Z' is not an input of this workload");
  // store_16_bits: float32 stages that are not reductions.
  ir::Tensor w = ir::compute("W", {8}, {"i"}, [&](const std::vector<Expr>& ax) { return ir::read(x, ax); });
  ir::Tensor v = ir::compute("V", {8}, {"i"}, [&](const std::vector<Expr>& ax) {
    return ir::Cast::make(ir::Type::float32(), ir::read(w, ax));
  });
  Schedule sv(v);
  expect_user_error([&] { sv.store_16_bits(sv[w], false); }, "store_16_bits of stage W: it is uint8, not float32");
  OpGraph g = graph("matmul(M=8,N=8,K=8)");
  Schedule sg(g.output);
  expect_user_error([&] { sg.store_16_bits(sg[g.acc], true); }, "a reduction accumulates in float32");
}

TEST(PrimitiveErrors, SharedLayoutAndDoubleBuffer) {
  OpGraph g = graph("matmul(M=8,N=8,K=8,epilogue=relu)");
  Schedule s(g.output);
  Stage& out = s[g.output];
  expect_user_error([&] { out.storage_layout({1, 0}); }, "only shared stages (cache_read_shared) have one");
  expect_user_error([&] { out.double_buffer(); }, "only shared stages (cache_read_shared) can be");
  Stage& a = s.cache_read_shared("A");
  expect_user_error([&] { a.storage_layout({0, 0}); }, "must be a permutation of its 2 dimensions");
  expect_user_error([&] { a.storage_layout({0, 1, 2}); }, "must be a permutation of its 2 dimensions");
  expect_user_error([&] { a.storage_layout({1, 0}, 65); }, "pad 65 is not in 0..64");
  // Double buffering swaps tiles between iterations of a serial loop; a parallel one has none.
  Stage& acc = s[g.acc];
  acc.parallel(acc.axis("i"));
  a.compute_at(acc, acc.axis("i"));
  a.double_buffer();
  expect_user_error([&] { lower(s, g.inputs, "k"); }, "which is parallel; only a serial loop can be");
  // set_scope_shared: a reduction accumulates per thread; a shared stage needs a loop to live in.
  expect_user_error([&] { acc.set_scope_shared(); }, "a reduction accumulates per thread");
  // Tiles of one loop go through one pipeline: as many buffers each.
  {
    Schedule s3(g.output);
    Stage& l = s3[g.acc];
    auto [ko, ki] = l.split(l.axis("k"), 4);
    (void)ki;
    Stage& a3 = s3.cache_read_shared("A");
    a3.compute_at(l, ko);
    a3.multi_buffer(2);
    Stage& b3 = s3.cache_read_shared("B");
    b3.compute_at(l, ko);
    expect_user_error([&] { b3.multi_buffer(17); }, "17 buffers (2 to 16)");
    b3.multi_buffer(3);
    expect_user_error([&] { lower(s3, g.inputs, "k"); }, "they must have as many buffers");
    // Reads in flight: one iteration at most, and a buffer for the reads still running.
    expect_user_error([&] { b3.multi_buffer(3, 2); }, "2 iterations of reads in flight (0 or 1)");
    expect_user_error([&] { b3.multi_buffer(2, 1); },
                      "2 buffers with reads in flight (it needs 3 or more");
    a3.multi_buffer(3);
    b3.multi_buffer(3, 1);
    expect_user_error([&] { lower(s3, g.inputs, "k"); }, "they must keep as many in flight");
  }
  Schedule s2(g.output);
  s2.cache_read_shared("A");
  expect_user_error([&] { lower(s2, g.inputs, "k"); }, "shared stage A.shared must be computed at a loop of the kernel");
}

TEST(PrimitiveErrors, OutputMustBeAtRoot) {
  OpGraph g = graph("matmul(M=8,N=8,K=8,epilogue=relu)");
  Schedule s(g.output);
  s[g.output].compute_inline();
  expect_user_error([&] { lower(s, g.inputs, "k"); }, "must be computed at root");
}

TEST(PrimitiveErrors, ComputeAtNeedsSingleConsumer) {
  OpGraph g = graph("matmul(M=8,N=8,K=8,epilogue=relu)");
  Schedule s(g.output);
  Stage& a = s.pack("A", 0, 4);
  a.compute_at(s[g.output], s[g.output].axis("i"));  // A.pack is read by acc, not out
  expect_user_error([&] { lower(s, g.inputs, "k"); }, "is also read by");
}

// The registry is the one map from (operator, target kind) to a template: every template
// schedules known operators only, no two templates claim the same pair, ids are unique, and
// each template's default config passes its own constraints and knob checks.
TEST(TemplateRegistry, OneTemplatePerOperatorAndTargetKind) {
  std::set<std::string> ids, pairs;
  std::vector<std::string> ops = known_ops();
  for (const ScheduleTemplate* tpl : registered_templates()) {
    EXPECT_TRUE(ids.insert(tpl->id()).second) << tpl->id();
    EXPECT_FALSE(tpl->knobs().empty()) << tpl->id();
    for (const std::string& op : tpl->ops) {
      EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << tpl->id() << " schedules unknown " << op;
      for (const OperandTypes& ty : tpl->types) {
        std::string key = op + (ty == OperandTypes{} ? "" : " of " + ty.str()) + " on " + std::string(kind_name(tpl->target_kind));
        EXPECT_TRUE(pairs.insert(key).second) << key;
      }
    }
  }
  // Every operator has a CPU template.
  for (const std::string& op : ops) EXPECT_TRUE(pairs.count(op + " on llvm")) << op;
  // Every typed operator has a CPU template for each of its types.
  for (const OperatorDef& def : operator_table()) {
    for (const OperandTypes& ty : def.types) {
      // (Not float32 data rounded to a reduced precision: as tensor cores round it, GPUs only.)
      const bool rounded_float32 = ty.data == DType::Float32 && ty.precision != Precision::Float32;
      if (!ty.is_float32() && !rounded_float32) {
        EXPECT_TRUE(pairs.count(std::string(def.name) + " of " + ty.str() + " on llvm")) << def.name;
      }
      // Reduced precision: a tensor-core template on CUDA (CPUs refuse it by name).
      if (ty.precision != Precision::Float32) {
        EXPECT_TRUE(pairs.count(std::string(def.name) + " of " + ty.str() + " on cuda")) << def.name;
      }
    }
  }
  Workload mm = parse_workload("matmul(M=1,N=1,K=1)");
  Workload conv = parse_workload("conv2d_nchwc(N=1,C=8,H=4,W=4,K=8,R=1,S=1)");
  Workload mm8 = parse_workload("matmul(M=1,N=1,K=1,dtype=uint8,weight_dtype=int8)");
  EXPECT_EQ(lookup_template(mm, parse_target("llvm")), &find_template(mm, parse_target("llvm")));
  EXPECT_NE(lookup_template(mm8, parse_target("llvm")), lookup_template(mm, parse_target("llvm")));
  EXPECT_EQ(lookup_template(conv, parse_target("cuda -arch=sm_90")), nullptr);
  expect_user_error([&] { find_template(conv, parse_target("cuda -arch=sm_90")); },
                    "no schedule template for conv2d_nchwc on cuda targets yet (cuda templates: matmul, batch_matmul, "
                    "matmul (float32 in tf32, float32 in fp16, float32 in bf16, float16, bfloat16, float32 x float16, "
                    "float32 x bfloat16), batch_matmul (float32 in tf32, float32 in fp16, float32 in bf16, float16, "
                    "bfloat16, float32 x float16, float32 x bfloat16), conv2d_nchw, conv2d_nhwc, "
                    "conv2d_nchw (float32 in tf32, float32 in fp16, float32 in bf16, float16, bfloat16, float32 x "
                    "float16, float32 x bfloat16), conv2d_nhwc (float32 in tf32, float32 in fp16, float32 in bf16, "
                    "float16, bfloat16, float32 x float16, float32 x bfloat16), depthwise_conv2d_nchw)");
  expect_user_error([&] { find_template(mm8, parse_target("cuda -arch=sm_90")); },
                    "no schedule template for matmul of uint8 x int8 on cuda targets yet");
  // Reduced precision is a tensor-core template of its own; CPUs have none.
  Workload tf32 = parse_workload("matmul(M=64,N=64,K=64,precision=tf32)");
  EXPECT_EQ(template_name(tf32, parse_target("cuda -arch=sm_90")), "dense_tc.cuda.v2");
  EXPECT_EQ(template_name(mm, parse_target("cuda -arch=sm_90")), "dense.cuda.v4");
  expect_user_error([&] { find_template(tf32, parse_target("llvm")); },
                    "no schedule template for matmul of float32 in tf32 on llvm targets yet");
}

TEST(TemplateRegistry, DefaultsAreCompleteAndWithinConstraints) {
  // Each template on its operators' own examples (compiler/operator_table.h), on the targets
  // of its kind.
  const std::map<TargetKind, std::vector<const char*>> targets = {
      {TargetKind::Llvm,
       {"llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"}},
      {TargetKind::Cuda, {"cuda -arch=sm_90"}},
      {TargetKind::Rocm, {"rocm -mcpu=gfx90a"}}};
  int checked = 0;
  for (const ScheduleTemplate* tpl : registered_templates()) {
    ASSERT_TRUE(targets.count(tpl->target_kind)) << tpl->id() << ": a target kind this test has no target of";
    for (const std::string& op : tpl->ops) {
      const OperatorDef* def = find_operator(op);
      ASSERT_NE(def, nullptr) << op;
      ASSERT_TRUE(def->example && *def->example) << op << " has no example workload";
      std::vector<const char*> examples{def->example};
      examples.insert(examples.end(), def->typed_examples.begin(), def->typed_examples.end());
      for (const char* example : examples) {
        if (std::find(tpl->types.begin(), tpl->types.end(), parse_workload(example).types) == tpl->types.end()) continue;
        for (const char* target : targets.at(tpl->target_kind)) {
          Target t = parse_target(target);
          OpGraph g = graph(example);
          ASSERT_EQ(lookup_template(g.workload, t), tpl) << example << " on " << target;
          nlohmann::json d = default_config(g, t);
          EXPECT_EQ(complete_config(g, t, d), d) << example << " on " << target;
          EXPECT_EQ(d.size(), tpl->knobs().size()) << example << " on " << target;
          EXPECT_EQ(check_constraints(g, t, d), "") << example << " on " << target;
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 20);
}

// B given packed (const_b=1: a model's weights, packed at compile time) costs nothing to
// pack, so the default packs it at any M; otherwise only from 16 rows of A, where a copy per
// call pays for itself.
TEST(TemplateRegistry, DenseDefaultPacksBWhenItIsGivenPacked) {
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  EXPECT_TRUE(default_config(graph("matmul(M=1,N=1000,K=1280,const_b=1,epilogue=bias)"), t)["pack_b"]);
  EXPECT_TRUE(default_config(graph("matmul(M=4,N=8,K=16,const_b=1)"), t)["pack_b"]);
  EXPECT_FALSE(default_config(graph("matmul(M=1,N=1000,K=1280,epilogue=bias)"), t)["pack_b"]);
  EXPECT_TRUE(default_config(graph("matmul(M=16,N=64,K=64)"), t)["pack_b"]);
}

// The blocked convolution's default register tile: two channel blocks (a weight vector
// loaded serves w columns, a broadcast two blocks) rather than one block of many columns (one
// load a multiply-add), a shifted tail when it costs less than the loads it saves, and the
// larger tile among equals. With 16 registers, 35 columns take 2 x 5 (1 x 7 before: 1.31x
// slower on Zen 3 at 14 columns); with 32 the ResNet widths keep their tiles. Rows under 32
// columns that the row tile does not divide tile their positions as one run (v3): 14 x 14
// and 7 x 7 on AVX2, 13 x 13 on AVX-512.
TEST(TemplateRegistry, BlockedConvDefaultTileLoadsLeastPerMultiplyAdd) {
  auto tile = [](const char* target, int64_t hw, int64_t c, int64_t r, int64_t block) {
    OpGraph g = graph(str("conv2d_nchwc(N=1,C=", c, ",H=", hw, ",W=", hw, ",K=256,R=", r, ",S=", r,
                          ",stride=1,pad=", r / 2, ",ic_block=", block, ",oc_block=", block, ")")
                          .c_str());
    nlohmann::json d = default_config(g, parse_target(target));
    return std::pair<int64_t, int64_t>{d["tile_kb"], d["tile_w"]};
  };
  using P = std::pair<int64_t, int64_t>;
  const char* avx2 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3";
  EXPECT_EQ(tile(avx2, 35, 256, 3, 8), P(2, 5));
  EXPECT_EQ(tile(avx2, 14, 256, 3, 8), P(2, 4));  // 196 positions: 49 tiles of 4
  // 1x1 layers tile their positions as one run (below): 49 take 2 x 5 (10 tiles, one
  // position recomputed), 3,136 2 x 4 (none), 400 2 x 5.
  EXPECT_EQ(tile(avx2, 7, 2048, 1, 8), P(2, 5));
  EXPECT_EQ(tile(avx2, 56, 64, 1, 8), P(2, 4));
  EXPECT_EQ(tile(avx2, 20, 64, 1, 8), P(2, 5));
  EXPECT_EQ(tile(avx2, 7, 2048, 3, 8), P(2, 5));   // 49 positions: 10 tiles of 5
  const char* avx512 = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512";
  EXPECT_EQ(tile(avx512, 28, 128, 3, 16), P(2, 7));
  EXPECT_EQ(tile(avx512, 56, 64, 1, 16), P(2, 8));
  EXPECT_EQ(tile(avx512, 13, 256, 3, 16), P(2, 10));  // 169 positions: 17 tiles of 10
  EXPECT_EQ(tile(avx512, 14, 256, 3, 16), P(2, 7));   // rows: 7 divides 14
}

// conv2d_nchwc.cpu v2: a 1x1 convolution of stride 1 without padding tiles its OH x OW positions
// as one run (tile_w positions, the last tile shifted back), not row by row: a 7 x 7 layer is
// 10 tiles of 5 positions per pair of channel blocks (v1: 2 tiles of 5 a row, 14 in all, 30%
// of them recomputed). v3: one of stride s > 1 reads a unit-stride copy of the pixels it uses
// and tiles its positions the same way, and so do other convolutions of rows under 32 columns
// whose blocks share input channels. Every config gives the reference's results: tiles across
// rows, wider than a row, the whole run, batches, groups, epilogues, serial, strides 2 and 3
// over odd sizes, windows with padding (copied or read through selects) and dilation.
TEST(TemplateRegistry, OneByOneConvTilesItsPositionsAsOneRun) {
  const Target znver3 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  OpGraph g = graph("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,stride=1,pad=0,ic_block=8,oc_block=8,epilogue=bias_relu)");
  nlohmann::json d = default_config(g, znver3);
  EXPECT_EQ(d["tile_kb"], 2);
  EXPECT_EQ(d["tile_w"], 5);
  // The positions' extent is what tile_w splits (candidates up to 49, not 7).
  Schedule flat = apply_config(g, znver3, d);
  std::string loops = ir::to_string(lower(flat, g.inputs, "kernel").func);
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\([^,]+, 0, 40\\)"))) << loops;
  // So does a 3x3 one of rows under 32 columns (its padded copy computed first, at root).
  OpGraph three = graph("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8)");
  Schedule run3 = apply_config(three, znver3, nlohmann::json());
  loops = ir::to_string(lower(run3, three.inputs, "kernel").func);
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\([^,]+, 0, 40\\)"))) << loops;
  EXPECT_NE(loops.find("allocate data_pad["), std::string::npos) << loops;
  // Rows of 56 keep their tiles (4 channel tiles x 56 rows in parallel), and so do
  // short rows of a grouped layer whose blocks each read their own channels (one group of 8
  // a block: 8 blocks x 7 rows in parallel).
  OpGraph wide = graph("conv2d_nchwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8)");
  Schedule by_rows = apply_config(wide, znver3, nlohmann::json());
  loops = ir::to_string(lower(by_rows, wide.inputs, "kernel").func);
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\(n.ko.o.oh, 0, 224\\)"))) << loops;
  OpGraph own = graph("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=3,S=3,stride=1,pad=1,group=8,ic_block=8,oc_block=8)");
  EXPECT_EQ(default_config(own, znver3)["tile_w"], 7);
  Schedule own_rows = apply_config(own, znver3, nlohmann::json());
  loops = ir::to_string(lower(own_rows, own.inputs, "kernel").func);
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\([^,]+, 0, 56\\)"))) << loops;
  // A strided 1x1 one copies the 7 x 7 pixels of its 14 x 14 input it reads (8 channel blocks
  // x 7 rows in parallel, a block's 8 lanes one vector), then tiles 49 positions as above.
  OpGraph strided = graph("conv2d_nchwc(N=1,C=64,H=14,W=14,K=64,R=1,S=1,stride=2,pad=0,ic_block=8,oc_block=8)");
  Schedule copied = apply_config(strided, znver3, nlohmann::json());
  loops = ir::to_string(lower(copied, strided.inputs, "kernel").func);
  EXPECT_NE(loops.find("allocate data.unit_stride[float32 * 3136]"), std::string::npos) << loops;
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\(n.c.h, 0, 56\\)"))) << loops;
  EXPECT_TRUE(std::regex_search(loops, std::regex("data.unit_stride\\[ramp\\([^\\]]*\\] = data\\[ramp\\("))) << loops;
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\([^,]+, 0, 40\\)"))) << loops;
  const Target host = host_target();
  struct Case {
    const char* spec;
    nlohmann::json config;
  };
  const Case cases[] = {
      {"conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=8,oc_block=8,epilogue=bias_relu)", {{"tile_w", 9}}},
      {"conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=8,oc_block=8)", {{"tile_w", 49}, {"tile_kb", 1}}},
      {"conv2d_nchwc(N=2,C=24,H=5,W=9,K=40,R=1,S=1,ic_block=8,oc_block=8,epilogue=bias)",
       {{"tile_w", 4}, {"tile_kb", 3}, {"parallel", false}}},
      {"conv2d_nchwc(N=1,C=32,H=6,W=6,K=32,R=1,S=1,ic_block=8,oc_block=8,group=4,epilogue=relu)", {{"tile_w", 7}}},
      {"conv2d_nchwc(N=1,C=16,H=3,W=5,K=24,R=1,S=1,ic_block=4,oc_block=8)",
       {{"tile_w", 6}, {"reduce_order", "rsc"}, {"unroll", false}, {"vectorize", false}}},
      {"conv2d_nchwc(N=2,C=24,H=15,W=13,K=40,R=1,S=1,stride=2,ic_block=8,oc_block=8,epilogue=bias_relu)",
       {{"tile_w", 5}}},
      {"conv2d_nchwc(N=1,C=16,H=17,W=16,K=16,R=1,S=1,stride=3,ic_block=8,oc_block=8)",
       {{"tile_w", 36}, {"tile_kb", 1}, {"parallel", false}}},
      {"conv2d_nchwc(N=1,C=32,H=9,W=9,K=32,R=1,S=1,stride=2,ic_block=8,oc_block=8,group=4,epilogue=relu)",
       {{"tile_w", 3}, {"vectorize", false}, {"unroll", false}}},
      {"conv2d_nchwc(N=1,C=32,H=7,W=7,K=32,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8,epilogue=bias_relu)",
       {{"tile_w", 5}}},
      {"conv2d_nchwc(N=2,C=16,H=15,W=13,K=24,R=3,S=3,stride=2,pad=1,dilation=2,ic_block=8,oc_block=8,epilogue=bias)",
       {{"tile_w", 6}, {"inline_pad", true}}},
      {"conv2d_nchwc(N=1,C=16,H=9,W=11,K=16,R=5,S=3,stride=3,pad=2,ic_block=4,oc_block=8,group=2)",
       {{"tile_w", 4}, {"reduce_order", "rsc"}, {"parallel", false}}},
      {"conv2d_nchwc(N=1,C=3,H=20,W=20,K=16,R=7,S=7,stride=2,pad=3,ic_block=3,oc_block=8,epilogue=relu)",
       {{"tile_w", 9}, {"inline_pad", true}}},
  };
  for (const Case& c : cases) {
    OpGraph cg = graph(c.spec);
    Schedule sch = apply_config(cg, host, c.config);
    LowerResult r = lower(sch, cg.inputs, "kernel");
    testing::Comparison cmp = testing::run_and_compare(cg, r.func);
    EXPECT_TRUE(cmp.ok()) << c.spec << " " << c.config.dump() << ": " << cmp.str();
  }
}

// A blocked convolution whose input is larger than its weights runs on threads that take
// slices of its positions for every channel tile (ResNet-50's reducing 1x1 layers at 2
// threads: 1.7-1.9x); one with more weights than input keeps runs of channel tiles.
TEST(TemplateRegistry, BlockedConvThreadsSliceThePositionsWhereTheInputIsLarger) {
  const Target znver3 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  auto loops_of = [&](const char* spec) {
    OpGraph g = graph(spec);
    Schedule s = apply_config(g, znver3, nlohmann::json());
    return ir::to_string(lower(s, g.inputs, "kernel").func);
  };
  // 512 x 56 x 56 inputs against 128 x 512 weights (flat: 392 tiles of 8 positions).
  std::string loops = loops_of("conv2d_nchwc(N=1,C=512,H=56,W=56,K=128,R=1,S=1,ic_block=8,oc_block=8)");
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\([^)]+\\) slices of \\d+ \\{"))) << loops;
  // Rows: 56 of them.
  loops = loops_of("conv2d_nchwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8)");
  EXPECT_TRUE(std::regex_search(loops, std::regex("parallel \\(n.ko.o.oh, 0, 224\\) slices of 56 \\{"))) << loops;
  // 512 x 7 x 7 against 2048 x 512.
  loops = loops_of("conv2d_nchwc(N=1,C=512,H=7,W=7,K=2048,R=1,S=1,ic_block=8,oc_block=8)");
  EXPECT_EQ(loops.find("slices of"), std::string::npos) << loops;
  EXPECT_NE(loops.find("parallel ("), std::string::npos) << loops;
}

// The generic kernels between blocked convolutions (pools, Concat, elementwise) cut their
// parallel loop as the convolutions cut theirs: each thread a slice of the rows for every
// channel block, so that a core reads the rows it wrote. A kernel that reads an image in
// NCHW (a layout transform) keeps runs of channel blocks: its slice of rows would be short
// runs of every channel's plane. Both compute every element on 2 threads and on 1.
TEST(GenericKernels, BlockedImagesAreSlicedByRowsUnlessAnInputIsNchw) {
  const Target host = host_target();
  ir::Tensor blocked = ir::placeholder("x", {1, 6, 28, 28, 16});
  ir::Tensor nchw = ir::placeholder("y", {1, 96, 28, 28});
  const std::vector<std::string> names = {"n", "cb", "h", "w", "c"};
  ir::Tensor relu = ir::compute("relu", blocked->shape, names, [&](const std::vector<ir::Expr>& i) {
    return ir::max(ir::read(blocked, i), ir::f32(0));
  });
  ir::Tensor to_blocked = ir::compute("to_blocked", blocked->shape, names, [&](const std::vector<ir::Expr>& i) {
    return ir::read(nchw, {i[0], i[1] * 16 + i[4], i[2], i[3]});
  });
  struct Case {
    ir::Tensor result, input;
    bool sliced;
  };
  for (const Case& c : {Case{relu, blocked, true}, Case{to_blocked, nchw, false}}) {
    ir::LoweredFunc f = lower_generic_kernel(c.result, {c.input}, host, "k", c.result->name);
    std::string loops = ir::to_string(f);
    EXPECT_NE(loops.find("parallel ("), std::string::npos) << loops;
    EXPECT_EQ(loops.find("slices of 28 {") != std::string::npos, c.sliced) << loops;
    std::unique_ptr<KernelLibrary> lib = testing::build_for_host(f);
    const int64_t n = ir::num_elements(c.input->shape);
    std::vector<float> in(static_cast<size_t>(n)), expect(in.size()), out(in.size());
    for (int64_t k = 0; k < n; ++k) in[k] = static_cast<float>((k * 7919) % 2001 - 1000) / 100.0f;
    // The expected output, index by index: relu of x, or y's element (cb * 16 + c) at (h, w).
    for (int64_t k = 0; k < n; ++k) {
      if (c.sliced) {
        expect[k] = std::max(in[k], 0.0f);
      } else {
        const int64_t cc = k % 16, w = k / 16 % 28, h = k / (16 * 28) % 28, cb = k / (16 * 28 * 28);
        expect[k] = in[((cb * 16 + cc) * 28 + h) * 28 + w];
      }
    }
    for (int threads : {2, 1}) {
      int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      std::fill(out.begin(), out.end(), std::nanf(""));
      ASSERT_EQ(lib->call({in.data(), out.data()}), 0);
      omp_set_num_threads(saved);
      EXPECT_EQ(out, expect) << c.result->name << " on " << threads << " thread(s)";
    }
  }
}

// A generic kernel whose innermost axis is shorter than the vector (a pool of blocks of 8
// channels on AVX-512, 16 lanes) vectorizes it at half or a quarter of the vector: one 8-lane
// load per window element, where LLVM alone gathered 16 columns of a stride-2 window
// (ShuffleNet-v2's stem pool). The same kernel computes every element on this machine.
TEST(GenericKernels, BlocksNarrowerThanTheVectorAreVectorizedWhole) {
  ir::Tensor x = ir::placeholder("x", {1, 3, 12, 12, 8});
  ir::IterVar r = ir::reduce_axis(2, "r"), q = ir::reduce_axis(2, "q");
  ir::Tensor pool = ir::compute(
      "pool", {1, 3, 6, 6, 8}, {"n", "cb", "h", "w", "c"},
      [&](const std::vector<ir::Expr>& i) {
        return ir::max_reduce(ir::read(x, {i[0], i[1], i[2] * 2 + r.var, i[3] * 2 + q.var, i[4]}), {r, q});
      },
      {r, q});
  const Target avx512 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4");
  ASSERT_EQ(avx512.vector_lanes(), 16);
  const std::string loops = ir::to_string(lower_generic_kernel(pool, {x}, avx512, "k", "pool"));
  // Each window element of x read as 8 contiguous lanes, into 8 lanes of the output.
  EXPECT_TRUE(std::regex_search(loops, std::regex(R"(= max\(pool\[ramp\([^\]]+, 1, 8\)\], x\[ramp\([^\]]+, 1, 8\)\]\))")))
      << loops;
  std::unique_ptr<KernelLibrary> lib = testing::build_for_host(lower_generic_kernel(pool, {x}, host_target(), "k", "pool"));
  std::vector<float> in(3 * 12 * 12 * 8), out(3 * 6 * 6 * 8, std::nanf("")), expect(out.size());
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>((k * 7919) % 2001 - 1000) / 100.0f;
  for (int64_t cb = 0; cb < 3; ++cb)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t w = 0; w < 6; ++w)
        for (int64_t c = 0; c < 8; ++c) {
          float m = -INFINITY;
          for (int64_t dr = 0; dr < 2; ++dr)
            for (int64_t dq = 0; dq < 2; ++dq) m = std::max(m, in[((cb * 12 + 2 * h + dr) * 12 + 2 * w + dq) * 8 + c]);
          expect[((cb * 6 + h) * 6 + w) * 8 + c] = m;
        }
  ASSERT_EQ(lib->call({in.data(), out.data()}), 0);
  EXPECT_EQ(out, expect);
}

// A generic reduction whose innermost axis is longer than the vector but not a multiple of it
// (an NCHW max pool over 28 columns, padded: clamped reads under a select) is vectorized along
// that axis, its last vector guarded, and computes what the pool does at every column.
TEST(GenericKernels, ReductionVectorizesAnAxisTheVectorDoesNotDivide) {
  const int64_t C = 3, H = 28, W = 28;
  ir::Tensor x = ir::placeholder("x", {1, C, H, W});
  ir::IterVar r = ir::reduce_axis(3, "r"), q = ir::reduce_axis(3, "q");
  auto clamp = [](const Expr& e, int64_t hi) { return ir::min(ir::max(e, Expr(int64_t{0})), Expr(hi)); };
  ir::Tensor pool = ir::compute(
      "pool", {1, C, H, W}, {"n", "c", "h", "w"},
      [&](const std::vector<Expr>& i) {
        Expr iy = i[2] - int64_t{1} + r.var, ix = i[3] - int64_t{1} + q.var;
        Expr inside = ir::logical_and(ir::logical_and(iy >= int64_t{0}, iy < Expr(H)),
                                      ir::logical_and(ix >= int64_t{0}, ix < Expr(W)));
        Expr v = ir::read(x, {i[0], i[1], clamp(iy, H - 1), clamp(ix, W - 1)});
        return ir::max_reduce(ir::select(inside, v, ir::f32(-INFINITY)), {r, q});
      },
      {r, q});
  const Target avx512 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4");
  const std::string loops = ir::to_string(lower_generic_kernel(pool, {x}, avx512, "k", "pool"));
  EXPECT_NE(loops.find(", 1, 16)]"), std::string::npos) << loops;
  std::unique_ptr<KernelLibrary> lib = testing::build_for_host(lower_generic_kernel(pool, {x}, host_target(), "k", "pool"));
  std::vector<float> in(C * H * W), out(in.size(), std::nanf("")), expect(in.size());
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>((k * 7919) % 2001 - 1000) / 100.0f;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        float m = -INFINITY;
        for (int64_t y = std::max<int64_t>(h - 1, 0); y <= std::min(h + 1, H - 1); ++y)
          for (int64_t z = std::max<int64_t>(w - 1, 0); z <= std::min(w + 1, W - 1); ++z)
            m = std::max(m, in[(c * H + y) * W + z]);
        expect[(c * H + h) * W + w] = m;
      }
  ASSERT_EQ(lib->call({in.data(), out.data()}), 0);
  EXPECT_EQ(out, expect);
}

// Grouped blocked convolutions: where each output block reads channels of its own (a block
// is one group, or holds whole groups), two blocks share no broadcasts, so the tile takes one
// block. Blocks within one larger group keep two; three where three hold whole groups or lie
// in one.
TEST(TemplateRegistry, GroupedBlockedConvTileFollowsWhatBlocksShare) {
  Target t = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  auto config = [&](const char* spec) { return default_config(graph(spec), t); };
  nlohmann::json regnet = config(
      "conv2d_nchwc(N=1,C=208,H=14,W=14,K=208,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8,group=26)");
  EXPECT_EQ(regnet["tile_kb"], 1);
  nlohmann::json two_groups_a_block = config(
      "conv2d_nchwc(N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8,group=32)");
  EXPECT_EQ(two_groups_a_block["tile_kb"], 1);
  nlohmann::json resnext = config(
      "conv2d_nchwc(N=1,C=512,H=28,W=28,K=512,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8,group=32)");
  EXPECT_EQ(resnext["tile_kb"], 2);
  nlohmann::json plain = config("conv2d_nchwc(N=1,C=208,H=14,W=14,K=208,R=3,S=3,stride=1,pad=1,ic_block=8,oc_block=8)");
  EXPECT_EQ(plain["tile_kb"], 2);

  // Groups of 24 (RegNet's) on AVX-512: three blocks of 8 are one group, sharing every
  // broadcast; three straddling blocks of 16 are two groups, reading from two first blocks;
  // both take three. Two blocks of 8 would cross a group in every other tile (two first
  // blocks), and three of 8 in groups of 32 would too: two.
  Target avx512 = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5");
  auto config512 = [&](const char* spec) { return default_config(graph(spec), avx512); };
  EXPECT_EQ(config512("conv2d_nchwc(N=1,C=408,H=14,W=14,K=408,R=3,S=3,pad=1,ic_block=8,oc_block=8,group=17)")["tile_kb"],
            3);
  EXPECT_EQ(
      config512("conv2d_nchwc(N=1,C=336,H=14,W=14,K=336,R=3,S=3,pad=1,ic_block=16,oc_block=16,group=14)")["tile_kb"], 3);
  EXPECT_EQ(config512("conv2d_nchwc(N=1,C=256,H=28,W=28,K=256,R=3,S=3,pad=1,ic_block=8,oc_block=8,group=8)")["tile_kb"],
            2);
  // Blocks of 16 holding two groups of 8 (ResNeXt's) share nothing: one block.
  EXPECT_EQ(
      config512("conv2d_nchwc(N=1,C=256,H=28,W=28,K=256,R=3,S=3,pad=1,ic_block=16,oc_block=16,group=32)")["tile_kb"], 1);
  // Ungrouped convolutions keep at most two.
  EXPECT_EQ(config512("conv2d_nchwc(N=1,C=408,H=14,W=14,K=408,R=3,S=3,pad=1,ic_block=8,oc_block=8)")["tile_kb"], 2);
}

// A flat (1x1) blocked convolution whose input rows take more than 4 MB runs its positions in
// chunks outside the output-channel tiles (each tile reads a chunk from the cache, not the whole
// input from memory); a smaller one keeps the channel tiles outermost. The knob chunk chooses
// otherwise: none, or a size for any flat one. All match the reference.
TEST(TemplateRegistry, LargeFlatConvolutionsRunTheirPositionsInChunks) {
  Target t = host_target();
  struct Case {
    const char* spec;
    const char* chunk;  // the knob (auto: the default)
    const char* loop;   // the fused parallel loop's name: chunks (oh.ow.o.o) before channel tiles (ko.o), or not
  };
  const char* large = "conv2d_nchwc(N=1,C=1040,H=33,W=31,K=16,R=1,S=1,ic_block=16,oc_block=16,epilogue=relu)";
  const char* small = "conv2d_nchwc(N=1,C=1040,H=16,W=31,K=16,R=1,S=1,ic_block=16,oc_block=16,epilogue=relu)";
  for (const Case& c : {Case{large, "auto", "(n.oh.ow.o.o.ko.o"}, Case{small, "auto", "(n.ko.o.oh.ow.o"},
                        Case{large, "none", "(n.ko.o.oh.ow.o"}, Case{small, "128K", "(n.oh.ow.o.o.ko.o"}}) {
    SCOPED_TRACE(std::string(c.spec) + " chunk=" + c.chunk);
    OpGraph g = graph(c.spec);
    EXPECT_EQ(default_config(g, t)["chunk"], "auto");
    Schedule s = apply_config(g, t, nlohmann::json{{"chunk", c.chunk}});
    LowerResult r = lower(s, g.inputs, "kernel");
    const std::string loops = ir::to_string(r.func);
    EXPECT_NE(loops.find(c.loop), std::string::npos) << loops;
    testing::Comparison cmp = testing::run_and_compare(g, r.func);
    EXPECT_TRUE(cmp.ok()) << cmp.str();
  }
}

// Knob prefetch: each step over the input channel blocks prefetches the weights the next
// channel tile reads at that step (tile_kb blocks of one 16 x 16 row: 16 lines each), the
// default where a channel tile has at most 8 position tiles and its weights fit 256 KB. Results
// unchanged, prefetching or not: flat (7 x 7, and strided over its unit-stride copy), 3x3
// rows, grouped, chunked, serial. (A layer of one channel tile has no next one to prefetch.)
TEST(TemplateRegistry, BlockedConvPrefetchesTheNextChannelTilesWeights) {
  Target t = host_target();
  struct Case {
    const char* spec;
    bool by_default;
  };
  for (const Case& c : {Case{"conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=16,oc_block=16,epilogue=bias)", true},
                        Case{"conv2d_nchwc(N=1,C=32,H=14,W=13,K=48,R=1,S=1,stride=2,ic_block=16,oc_block=16)", true},
                        Case{"conv2d_nchwc(N=1,C=32,H=28,W=28,K=32,R=1,S=1,ic_block=16,oc_block=16)", false},
                        Case{"conv2d_nchwc(N=1,C=32,H=5,W=6,K=32,R=3,S=3,pad=1,ic_block=16,oc_block=16)", true},
                        Case{"conv2d_nchwc(N=1,C=1024,H=7,W=7,K=32,R=3,S=3,pad=1,ic_block=16,oc_block=16)", false},
                        Case{"conv2d_nchwc(N=1,C=64,H=6,W=6,K=64,R=3,S=3,pad=1,group=2,ic_block=16,oc_block=16)", true},
                        Case{"conv2d_nchwc(N=1,C=1040,H=33,W=31,K=48,R=1,S=1,ic_block=16,oc_block=16)", false}}) {
    SCOPED_TRACE(c.spec);
    OpGraph g = graph(c.spec);
    EXPECT_EQ(default_config(g, t)["prefetch"], c.by_default);
    for (bool prefetch : {true, false}) {
      for (bool parallel : {true, false}) {
        // One block a channel tile: several tiles, so that there is a next one.
        Schedule s = apply_config(g, t, nlohmann::json{{"prefetch", prefetch}, {"parallel", parallel}, {"tile_kb", 1}});
        LowerResult r = lower(s, g.inputs, "kernel");
        const std::string loops = ir::to_string(r.func);
        EXPECT_EQ(loops.find("prefetch weight[") != std::string::npos, prefetch) << loops;
        testing::Comparison cmp = testing::run_and_compare(g, r.func);
        EXPECT_TRUE(cmp.ok()) << cmp.str() << " prefetch=" << prefetch << " parallel=" << parallel;
      }
    }
  }
  // A 1x1 layer's step reads tile_kb rows of 16 x 16 weights: 16 lines each, all prefetched
  // for the channel tile 7 position tiles on (its 7 x 7 positions in tiles of 7), if it exists.
  OpGraph g = graph("conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=1,S=1,ic_block=16,oc_block=16)");
  Schedule s = apply_config(g, t, nlohmann::json{{"prefetch", true}, {"tile_w", 7}, {"tile_kb", 2}});
  const std::string loops = ir::to_string(lower(s, g.inputs, "kernel").func);
  EXPECT_EQ(testing::count_of(loops, "prefetch weight["), 32u) << loops;
  EXPECT_NE(loops.find("(n.ko.o.oh.ow.o + 7) < 14)"), std::string::npos) << loops;
}

TEST(ConfigErrors, EachNamesTheKnobAndValue) {
  OpGraph g = graph("matmul(M=8,N=8,K=8)");
  Target t = host_target();
  using nlohmann::json;
  expect_user_error([&] { complete_config(g, t, json{{"tile_q", 4}}); }, "knob 'tile_q'");
  expect_user_error([&] { complete_config(g, t, json{{"tile_m", 0}}); }, "tile_m=0");
  expect_user_error([&] { complete_config(g, t, json{{"tile_m", 1000}}); }, "from 1 to 64");
  expect_user_error([&] { complete_config(g, t, json{{"tile_m", "4"}}); }, "tile_m=\"4\"");
  expect_user_error([&] { complete_config(g, t, json{{"pack_b", 1}}); }, "must be true or false");
  expect_user_error([&] { complete_config(g, t, json{{"order", "km"}}); }, "must be one of mn, nm");
  expect_user_error([&] { complete_config(g, t, json::array({1, 2})); }, "is not a JSON object");
  OpGraph conv = graph("conv2d_nchwc(N=1,C=32,H=8,W=8,K=16,R=1,S=1,ic_block=16,oc_block=16)");
  expect_user_error([&] { complete_config(conv, t, json{{"chunk", "3M"}}); }, "must be one of auto, none, 128K");
}

TEST(Passes, SkippingAPassKeepsResults) {
  OpGraph g = graph("matmul(M=21,N=40,K=9,epilogue=bias)");
  Target t = host_target();
  for (const char* pass : {"simplify", "unroll_loops", "vectorize_loops", "simplify_vectors"}) {
    Schedule s = apply_config(g, t, nlohmann::json());
    LowerOptions o;
    o.skip = {pass};
    LowerResult r = lower(s, g.inputs, "kernel", o);
    testing::Comparison c = testing::run_and_compare(g, r.func);
    EXPECT_TRUE(c.ok()) << "skipping " << pass << ": " << c.str();
  }
  Schedule s = apply_config(g, t, nlohmann::json());
  LowerOptions o;
  o.skip = {"schedule_ops"};
  expect_user_error([&] { lower(s, g.inputs, "k", o); }, "cannot be skipped");
  o.skip = {"fuse_everything"};
  expect_user_error([&] { lower(s, g.inputs, "k", o); }, "unknown pass 'fuse_everything'");
}

}  // namespace
}  // namespace tf
