// Graph passes: each fires on the pattern it is for, the graph computes the same outputs
// (reference evaluation) before and after every pass, outputs keep their names, and the pass
// manager's options are checked.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <functional>

#include <cmath>
#include <limits>
#include <random>

#include "base/error.h"
#include "base/file_io.h"
#include "compiler/driver.h"
#include "compiler/codegen_llvm.h"
#include "compiler/lower.h"
#include "compiler/model_codegen.h"
#include "compiler/operators.h"
#include "graph/fusion.h"
#include "graph/memory_budget.h"
#include "graph/memory_plan.h"
#include "graph/model_library.h"
#include "graph/model_compiler.h"
#include "graph/node_te.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/reference_run.h"
#include "graph/tasks.h"
#include "tests/compiler/kernel_harness.h"

using namespace tf::graph;  // NOLINT

namespace {

HostTensor random_floats(const Shape& s, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  HostTensor t = HostTensor::floats(s, std::vector<float>(num_elements(s)));
  for (float& v : t.f) v = d(rng);
  return t;
}

struct GraphBuilder {
  Graph g;
  uint32_t seed = 1;
  std::string input(const std::string& n, const Shape& s) {
    g.values[n] = Value{n, DType::F32, s, std::nullopt};
    g.inputs.push_back(n);
    return n;
  }
  std::string constant(const std::string& n, HostTensor t) {
    g.values[n] = Value{n, t.dtype, t.shape, t};
    return n;
  }
  std::string weights(const std::string& n, const Shape& s, float lo = -1, float hi = 1) {
    return constant(n, random_floats(s, seed++, lo, hi));
  }
  std::string node(const std::string& op, std::vector<std::string> in, const std::string& out,
                   const Shape& s, std::map<std::string, Attr> attrs = {}) {
    g.values[out] = Value{out, DType::F32, s, std::nullopt};
    g.nodes.push_back(Node{op + "_" + out, op, std::move(in), {out}, std::move(attrs)});
    return out;
  }
  // The same with the output's shape inferred (infer_node).
  std::string inferred(const std::string& op, std::vector<std::string> in, const std::string& out,
                       std::map<std::string, Attr> attrs) {
    Shape s = infer_node(Node{op + "_" + out, op, in, {out}, attrs}, g, g.opset).at(0).shape;
    return node(op, std::move(in), out, s, std::move(attrs));
  }
};

// conv -> BatchNormalization -> Relu -> conv(+bias) -> Mul by a per-channel constant ->
// residual Add -> Relu, an Identity, a Dropout, a duplicated Transpose of a weight, a dead
// branch, and a MatMul + bias + Relu head.
Graph sample_model() {
  GraphBuilder b;
  std::string x = b.input("x", {1, 4, 6, 6});
  std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  std::string c1 = b.node("Conv", {x, b.weights("w1", {4, 4, 3, 3})}, "c1", {1, 4, 6, 6}, pad1);
  std::string bn = b.node("BatchNormalization",
                          {c1, b.weights("gamma", {4}, 0.5, 1.5), b.weights("beta", {4}),
                           b.weights("mean", {4}), b.weights("var", {4}, 0.5, 2)},
                          "bn", {1, 4, 6, 6}, {{"epsilon", 1e-3f}});
  std::string r1 = b.node("Relu", {bn}, "r1", {1, 4, 6, 6});
  std::string id = b.node("Identity", {r1}, "id", {1, 4, 6, 6});
  std::string c2 = b.node("Conv", {id, b.weights("w2", {4, 4, 3, 3}), b.weights("b2", {4})}, "c2",
                          {1, 4, 6, 6}, pad1);
  std::string sc = b.node("Mul", {c2, b.weights("scale", {4, 1, 1})}, "sc", {1, 4, 6, 6});
  std::string sum = b.node("Add", {sc, x}, "sum", {1, 4, 6, 6});
  std::string r2 = b.node("Relu", {sum}, "r2", {1, 4, 6, 6});
  std::string dr = b.node("Dropout", {r2}, "dr", {1, 4, 6, 6});
  b.node("Sigmoid", {dr}, "dead", {1, 4, 6, 6});
  std::string flat =
      b.node("Reshape", {dr, b.constant("shape", HostTensor::ints({2}, {6, 24}))}, "flat", {6, 24});
  // The same transpose twice (CSE), of a constant (folding).
  std::string wt1 = b.node("Transpose", {b.weights("fc", {5, 24})}, "wt1", {24, 5});
  std::string wt2 = b.node("Transpose", {"fc"}, "wt2", {24, 5});
  std::string m1 = b.node("MatMul", {flat, wt1}, "m1", {6, 5});
  std::string m2 = b.node("MatMul", {flat, wt2}, "m2", {6, 5});
  std::string a1 = b.node("Add", {m1, b.weights("fcb", {5})}, "a1", {6, 5});
  std::string y = b.node("Relu", {a1}, "y", {6, 5});
  std::string z = b.node("Identity", {m2}, "z", {6, 5});  // an Identity that is a graph output
  b.g.outputs = {y, z};
  verify(b.g);
  return b.g;
}

// Both graphs compute the same outputs from input x of `shape` (sample_model's by default).
void expect_same_outputs(const Graph& before, const Graph& after, const Shape& shape = {1, 4, 6, 6}) {
  std::map<std::string, HostTensor> in = {{"x", random_floats(shape, 99)}};
  auto want = run_reference(before, in), got = run_reference(after, in);
  ASSERT_EQ(after.outputs, before.outputs);
  for (const auto& [name, w] : want) {
    const HostTensor& g = got.at(name);
    ASSERT_EQ(g.shape, w.shape) << name;
    for (int64_t k = 0; k < w.size(); ++k)
      EXPECT_NEAR(g.f[k], w.f[k], 1e-4 * (1 + std::fabs(w.f[k]))) << name << "[" << k << "]";
  }
}

// An Identity that writes a graph output from a value later nodes also read: bypassing it
// renames that value to the output's name in every node, the later readers too (bypass once
// took the Identity's own input name by reference, which its first rename changed, so readers
// after the Identity kept a name no node defined any more).
TEST(GraphPasses, IdentityToAnOutputKeepsLaterReadersOfItsInput) {
  GraphBuilder b;
  std::string x = b.input("x", {2, 3});
  std::string r = b.node("Relu", {x}, "r", {2, 3});
  std::string out1 = b.node("Identity", {r}, "out1", {2, 3});
  std::string out2 = b.node("Neg", {r}, "out2", {2, 3});
  b.g.outputs = {out1, out2};
  verify(b.g);
  Graph g = b.g;
  EXPECT_TRUE(simplify_inference(g));
  verify(g);
  for (const Node& n : g.nodes) EXPECT_NE(n.op, "Identity");
  expect_same_outputs(b.g, g, {2, 3});
}

// `model` after the passes for a CPU of 16-float vectors (channel blocks of 16), both verified.
Graph with_blocks_of_16(const Graph& model) {
  verify(model);
  Graph g = model;
  PassOptions o;
  o.channel_block = 16;
  run_passes(g, o);
  verify(g);
  return g;
}

// A graph of one Conv of input x (a graph input) and seeded weights w (and a bias, unless
// `bias` is false) with `attrs`, its output y.
Graph one_conv(const Shape& x, const Shape& w, const std::map<std::string, Attr>& attrs, uint32_t seed,
               bool bias = true) {
  GraphBuilder b;
  b.seed = seed;
  std::vector<std::string> in = {b.input("x", x), b.weights("w", w)};
  if (bias) in.push_back(b.weights("b", {w[0]}));
  b.g.outputs = {b.inferred("Conv", in, "y", attrs)};
  verify(b.g);
  return b.g;
}

// The workloads of g's tasks, in order.
std::vector<std::string> task_workloads(const Graph& g) {
  std::vector<std::string> w;
  for (const Task& t : extract_tasks(g).tasks) w.push_back(t.workload);
  return w;
}

}  // namespace

TEST(GraphPasses, EachFiresAndOutputsStayTheSame) {
  Graph original = sample_model();
  Graph g = original;
  std::vector<std::string> dumped;
  PassOptions o;
  o.opt_level = 3;  // every pass (fuse-attention runs at -O3 only)
  o.dump = {"all"};
  o.dump_sink = [&](const std::string& pass, const Graph&) { dumped.push_back(pass); };
  std::vector<PassReport> r = run_passes(g, o);
  for (const PassReport& p : r) {
    EXPECT_TRUE(p.ran) << p.name;
    // recognize-composites, combine-parallel-matmuls and transform-conv-layout have their own
    // tests (no LayerNorm, GELU or parallel projections here, and no target: no channel block),
    // and fold-qdq and int8-edges (no QDQ model; tests/graph/import_test.cc), and
    // auto-mixed-precision and sixteen-bit-edges (not at fp32, the default; below), and
    // one-image-at-a-time (batch 1 here; ImageLoop in tests/graph/import_test.cc), and
    // fuse-attention (cuda targets; no attention here), and trim-conv-taps and split-conv-regions
    // (no atrous convolution here; ConvTapsThatReadOnlyPaddingAreDropped,
    // ConvsReadingMuchPaddingSplitIntoRegions), and read-views-in-products (cuda targets;
    // GraphFusion.ProductsTakeInTheViewsOfTheirOperands).
    bool own_test = p.name == "recognize-composites" || p.name == "read-views-in-products" ||
                    p.name == "combine-parallel-matmuls" || p.name == "fuse-attention" ||
                    p.name == "fold-qdq" || p.name == "int8-edges" ||
                    p.name == "auto-mixed-precision" || p.name == "sixteen-bit-edges" ||
                    p.name == "transform-conv-layout" || p.name == "pad-channels" ||
                    p.name == "lower-conv-transpose" || p.name == "pad-convs" ||
                    p.name == "trim-conv-taps" || p.name == "split-conv-regions" ||
                    p.name == "einsum-to-matmul" || p.name == "lower-scatter-nd" ||
                    p.name == "one-image-at-a-time";
    EXPECT_EQ(p.changed, !own_test) << p.name;
  }
  EXPECT_EQ(dumped.size(), r.size());
  expect_same_outputs(original, g);
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops.count("BatchNormalization"), 0u);
  EXPECT_EQ(ops.count("Identity"), 0u);
  EXPECT_EQ(ops.count("Dropout"), 0u);
  EXPECT_EQ(ops.count("Sigmoid"), 0u);    // dead
  EXPECT_EQ(ops.count("Transpose"), 0u);  // folded
  EXPECT_EQ(ops.count("Mul"), 0u);        // into the convolutions
  EXPECT_EQ(ops["Conv"], 2);
  EXPECT_EQ(ops["MatMul"], 1);  // the two merged
  EXPECT_EQ(ops["Add"], 2);     // residual and bias; BatchNorm's shift went into conv1's bias
  // Tasks: both convolutions with a bias (conv1's from the BatchNorm), conv1 followed by Relu,
  // and the MatMul with its bias and Relu... but the merged MatMul also feeds z, so no
  // epilogue is fused there.
  TaskList t = extract_tasks(g);
  ASSERT_EQ(t.tasks.size(), 3u);
  EXPECT_EQ(
      t.tasks[0].workload,
      "conv2d_nchw(N=1,C=4,H=6,W=6,K=4,R=3,S=3,stride=1,pad=1,dilation=1,epilogue=bias_relu)");
  EXPECT_EQ(t.tasks[1].workload,
            "conv2d_nchw(N=1,C=4,H=6,W=6,K=4,R=3,S=3,stride=1,pad=1,dilation=1,epilogue=bias)");
  EXPECT_EQ(t.tasks[2].workload, "matmul(M=6,N=5,K=24,const_b=1,epilogue=none)");
}

// --precision bf16: the MatMul with constant weights becomes MatMulBF16 (a matmul_bf16 task),
// the convolutions stay float32, and the outputs move by bfloat16's rounding only (the
// reference evaluation rounds the operands as the kernel does).
TEST(GraphPasses, AutoMixedPrecisionConvertsProductsWithConstantWeights) {
  Graph original = sample_model();
  Graph g = original;
  PassOptions o;
  o.precision = Precision::BFloat16;
  for (const PassReport& p : run_passes(g, o)) {
    if (p.name == "auto-mixed-precision") {
      EXPECT_TRUE(p.changed);
    }
  }
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["MatMulBF16"], 1);
  EXPECT_EQ(ops.count("MatMul"), 0u);
  EXPECT_EQ(ops["Conv"], 2);
  EXPECT_EQ(g.bf16_nodes, 1);
  TaskList t = extract_tasks(g);
  ASSERT_EQ(t.tasks.size(), 3u);
  EXPECT_EQ(t.tasks[2].workload, "matmul_bf16(M=6,N=5,K=24,const_b=1,epilogue=none)");
  std::map<std::string, HostTensor> in = {{"x", random_floats({1, 4, 6, 6}, 99)}};
  auto want = run_reference(original, in), got = run_reference(g, in);
  double most = 0, err = 0;
  for (const auto& [name, w] : want) {
    for (int64_t k = 0; k < w.size(); ++k) {
      most = std::max(most, double(std::fabs(w.f[k])));
      err = std::max(err, double(std::fabs(got.at(name).f[k] - w.f[k])));
    }
  }
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.02 * most);
  // With a CPU target's channel block the convolutions (blocked, group 1) convert too.
  Graph blocked = original;
  o.channel_block = 4;  // the sample's 4 channels: one block
  run_passes(blocked, o);
  ops.clear();
  for (const Node& n : blocked.nodes) ++ops[n.op];
  EXPECT_EQ(ops["ConvNCHWcBF16"], 2);
  EXPECT_EQ(ops.count("ConvNCHWc"), 0u);
  EXPECT_EQ(blocked.bf16_nodes, 3);
  t = extract_tasks(blocked);
  ASSERT_EQ(t.tasks.size(), 3u);
  EXPECT_EQ(t.tasks[0].workload.rfind("conv2d_nchwc_bf16(", 0), 0u) << t.tasks[0].workload;
  auto got_blocked = run_reference(blocked, in);
  for (const auto& [name, w] : want) {
    for (int64_t k = 0; k < w.size(); ++k) EXPECT_NEAR(got_blocked.at(name).f[k], w.f[k], 0.02 * most) << name;
  }
  EXPECT_EQ(parse_precision("bf16"), Precision::BFloat16);
  EXPECT_EQ(parse_precision("fp16"), Precision::Float16);
  EXPECT_EQ(parse_precision("tf32"), Precision::TF32);
  EXPECT_THROW(parse_precision("fp8"), tf::UserError);
  // --precision fp16: the same products as float16 kernels, float16's finer rounding (11
  // significant bits to bfloat16's 8) moving the outputs less.
  Graph half = original;
  o.precision = Precision::Float16;
  run_passes(half, o);
  ops.clear();
  for (const Node& n : half.nodes) ++ops[n.op];
  EXPECT_EQ(ops["ConvNCHWcFP16"], 2);
  EXPECT_EQ(ops["MatMulFP16"], 1);
  EXPECT_EQ(half.fp16_nodes, 3);
  EXPECT_EQ(half.bf16_nodes, 0);
  t = extract_tasks(half);
  ASSERT_EQ(t.tasks.size(), 3u);
  EXPECT_EQ(t.tasks[0].workload.rfind("conv2d_nchwc_fp16(", 0), 0u) << t.tasks[0].workload;
  EXPECT_EQ(t.tasks[2].workload, "matmul_fp16(M=6,N=5,K=24,const_b=1,epilogue=none)");
  auto got_half = run_reference(half, in);
  double err_half = 0;
  for (const auto& [name, w] : want) {
    for (int64_t k = 0; k < w.size(); ++k) err_half = std::max(err_half, double(std::fabs(got_half.at(name).f[k] - w.f[k])));
  }
  EXPECT_GT(err_half, 0.0);
  EXPECT_LT(err_half, 0.003 * most);
}

// The 16-bit values whose bits float32 constant `words` carries, two a word (low half first).
std::vector<uint16_t> halves_of(const HostTensor& words) {
  std::vector<uint16_t> halves(words.f.size() * 2);
  std::memcpy(halves.data(), words.f.data(), halves.size() * 2);
  return halves;
}

// The reference evaluations of `got` and `want` on `in` agree within `rel` of each value.
void expect_near_reference(const Graph& want_g, const Graph& got_g, const std::map<std::string, HostTensor>& in, double rel) {
  auto want = run_reference(want_g, in), got = run_reference(got_g, in);
  for (const auto& [name, w] : want) {
    for (size_t k = 0; k < w.f.size(); ++k)
      ASSERT_NEAR(got.at(name).f[k], w.f[k], rel * (1 + std::fabs(w.f[k]))) << name << " " << k;
  }
}

// The kernel of workload `spec` on `target` emulated on the arguments `bufs` (its inputs as
// float32 buffers of their bytes; the output and workspaces appended here): its output.
std::vector<float> emulated_output(const std::string& spec, const tf::Target& target, std::vector<std::vector<float>> bufs,
                                   size_t output_elements) {
  tf::CompiledKernel k = tf::compile_kernel(tf::parse_workload(spec), target, nullptr, "default", "");
  tf::GpuProgram prog = tf::split_gpu_program(k.lowered.func);
  const size_t out = bufs.size();
  bufs.emplace_back(output_elements, std::nanf(""));
  for (const auto& [name, size] : prog.workspaces) bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
  for (const tf::ir::LoweredFunc& kf : prog.kernels) {
    const int status = tf::testing::emulate_gpu_kernel(kf, tf::check_gpu_kernel(kf, target), bufs);
    EXPECT_EQ(status, 0) << spec;
  }
  return bufs[out];
}

// Runs the passes (but `disabled`) on `g` at precision `p` for a CUDA target's tensor cores;
// its nodes by op.
std::map<std::string, int> on_tensor_cores(Graph& g, Precision p, const std::set<std::string>& disabled = {}) {
  PassOptions o;
  o.precision = p;
  o.tensor_cores = true;
  o.disabled = disabled;
  run_passes(g, o);
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  return ops;
}

// On a CUDA target (tensor_cores) every MatMul, Gemm and group-1 Conv is marked for the tensor
// cores instead (activations by activations too): its task is dense_tc.cuda's or
// conv2d_tc.cuda's `precision=...` workload, and the reference evaluation rounds the marked
// products' operands as the instruction does. tf32 without tensor cores is refused by name.
TEST(GraphPasses, TensorCorePrecisionMarksProductsForCudaTargets) {
  Graph original = sample_model();
  std::map<std::string, HostTensor> in = {{"x", random_floats({1, 4, 6, 6}, 99)}};
  auto want = run_reference(original, in);
  double most = 0;
  for (const auto& [name, w] : want)
    for (float v : w.f) most = std::max(most, double(std::fabs(v)));
  for (auto [p, name, bound] : {std::tuple{Precision::TF32, "tf32", 2e-3}, std::tuple{Precision::Float16, "fp16", 3e-3},
                                std::tuple{Precision::BFloat16, "bf16", 0.02}}) {
    Graph g = original;
    std::map<std::string, int> ops = on_tensor_cores(g, p);
    // At fp16 and bf16 the products of constant weights read them in 16 bits (a MatMul's N x K).
    const bool sixteen = p != Precision::TF32;
    EXPECT_EQ(ops["MatMul"], sixteen ? 0 : 1) << name;
    EXPECT_EQ(ops[kTensorCoreMatMul], sixteen ? 1 : 0) << name;
    EXPECT_EQ(ops["Conv"], sixteen ? 0 : 2) << name;
    EXPECT_EQ(ops[kTensorCoreConv], sixteen ? 2 : 0) << name;
    EXPECT_EQ(g.tensor_core_nodes, 3) << name;
    EXPECT_EQ(g.bf16_nodes + g.fp16_nodes, 0) << name;
    TaskList t = extract_tasks(g);
    ASSERT_EQ(t.tasks.size(), 3u);
    // ... and the values only they read are stored in 16 bits (sixteen-bit-edges): conv1's
    // output, which conv2 reads, and the flattened features the MatMul reads.
    EXPECT_EQ(g.sixteen_bit_values, sixteen ? 2 : 0) << name;
    EXPECT_EQ(t.tasks[2].workload, sixteen
                                       ? tf::str("matmul(M=6,N=5,K=24,trans_b=1,dtype=",
                                                 p == Precision::Float16 ? "float16" : "bfloat16",
                                                 ",epilogue=none)")
                                       : std::string("matmul(M=6,N=5,K=24,trans_b=1,precision=") +
                                             name + ",epilogue=none)");  // TF32: [N][K]
    EXPECT_NE(t.tasks[0].workload.find(sixteen ? tf::str("dtype=float32,weight_dtype=", p == Precision::Float16 ? "float16" : "bfloat16")
                                               : std::string("precision=") + name),
              std::string::npos)
        << t.tasks[0].workload;
    auto got = run_reference(g, in);
    double err = 0;
    for (const auto& [out, w] : want)
      for (int64_t k = 0; k < w.size(); ++k) err = std::max(err, double(std::fabs(got.at(out).f[k] - w.f[k])));
    EXPECT_GT(err, 0.0) << name;  // the evaluation rounds
    EXPECT_LT(err, bound * most) << name;
  }
  Graph g = original;
  PassOptions o;
  o.precision = Precision::TF32;
  try {
    run_passes(g, o);
    ADD_FAILURE() << "tf32 without tensor cores ran";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--precision tf32 rounds the products as NVIDIA's tensor cores do: it is for "
                                         "cuda targets"),
              std::string::npos)
        << e.what();
  }
  // A mark of another value (a model may carry the attribute) is refused by name, by the task
  // extraction and the reference evaluation alike.
  Graph marked = original;
  for (Node& n : marked.nodes) {
    if (n.op == "MatMul") n.attrs[kTensorCorePrecision] = std::string("fp8");
  }
  for (const std::function<void()>& use : std::vector<std::function<void()>>{
           [&] { extract_tasks(marked); }, [&] { run_reference(marked, in); }}) {
    try {
      use();
      ADD_FAILURE() << "a tf_precision of fp8 was taken";
    } catch (const tf::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("attribute tf_precision 'fp8' is not one of tf32, fp16, bf16"),
                std::string::npos)
          << e.what();
    }
  }
}

// At fp16 and bf16 on a CUDA target, a MatMul or Gemm of constant weights becomes a
// MatMulTensorCore: its kernel reads the weights as 16-bit values stored N x K (weight_dtype,
// trans_b=1), made once at compile time. Its evaluation is the marked product's (the weights
// rounded to the type either way); its constant holds exactly the halves of the weights,
// transposed, whatever the parity of N K; and the kernel dense_tc.cuda compiles for its
// workload, emulated on those bytes, computes what the node evaluates to. Products of two
// activations stay marked MatMuls (their operands float32 unless only such products read them).
TEST(GraphPasses, TensorCoreProductsReadTheirConstantWeightsIn16Bits) {
  GraphBuilder b;
  std::string x = b.input("x", {2, 3, 7});
  std::string v = b.input("v", {5, 8});
  std::string m = b.node("MatMul", {x, b.weights("w", {7, 5})}, "m", {2, 3, 5});  // K 7, N K 35: odd
  std::string gm = b.node("Gemm", {v, b.weights("wt", {6, 8}), b.weights("bias", {6})}, "gm", {5, 6},
                          {{"transB", int64_t{1}}});
  std::string aa = b.node("MatMul", {gm, b.node("Transpose", {gm}, "gt", {6, 5})}, "aa", {5, 5});
  b.g.outputs = {m, gm, aa};
  verify(b.g);
  const tf::Target sm90 = tf::parse_target("cuda -arch=sm_90");
  std::map<std::string, HostTensor> in = {{"x", random_floats({2, 3, 7}, 5)}, {"v", random_floats({5, 8}, 6)}};
  for (const Precision p : {Precision::Float16, Precision::BFloat16}) {
    const tf::HalfPairs& f = p == Precision::Float16 ? tf::kF16Pairs : tf::kBF16Pairs;
    SCOPED_TRACE(precision_name(p));
    // What the pass made before this step: every product marked, none rewritten.
    Graph marked = b.g;
    for (Node& n : marked.nodes)
      if (n.op == "MatMul" || n.op == "Gemm") n.attrs[kTensorCorePrecision] = std::string(precision_name(p));
    Graph g = b.g;
    std::map<std::string, int> ops = on_tensor_cores(g, p);
    EXPECT_EQ(ops[kTensorCoreMatMul], 2);
    EXPECT_EQ(ops["MatMul"], 1);  // the activations' product
    EXPECT_EQ(ops["Gemm"], 0);
    EXPECT_EQ(g.tensor_core_nodes, 3);
    expect_near_reference(marked, g, in, 1e-6);
    TaskList t = extract_tasks(g);
    ASSERT_EQ(t.tasks.size(), 3u);
    const std::string type = p == Precision::Float16 ? "float16" : "bfloat16";
    EXPECT_EQ(t.tasks[0].workload, "matmul(M=6,N=5,K=7,trans_b=1,dtype=float32,weight_dtype=" + type + ",epilogue=none)");
    EXPECT_EQ(t.tasks[1].workload, "matmul(M=5,N=6,K=8,trans_b=1,dtype=float32,weight_dtype=" + type + ",epilogue=bias)");
    // The activations' product: gm is a model output (float32), its transpose only this product's
    // second operand (16 bits: sixteen-bit-edges).
    EXPECT_EQ(t.tasks[2].workload, "matmul(M=5,N=5,K=6,dtype=float32,weight_dtype=" + type + ",epilogue=none)");
    for (const Node& n : g.nodes) {
      if (n.op != kTensorCoreMatMul) continue;
      SCOPED_TRACE(n.name);
      const OpDef& def = *find_op(n.op);
      OpContext c = context(n, g, g.opset);
      const HostTensor& w = *c.in(1).constant;  // [K, N] float32
      const int64_t K = w.shape[0], N = w.shape[1];
      std::vector<HostTensor> operands = def.kernel_constants(g, n);
      ASSERT_EQ(operands.size(), 1u);
      ASSERT_EQ(operands[0].f.size(), static_cast<size_t>((N * K + 1) / 2));
      const std::vector<uint16_t> halves = halves_of(operands[0]);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          ASSERT_EQ(halves[static_cast<size_t>(j * K + k)],
                    std::bit_cast<uint32_t>(f.pair(w.f[static_cast<size_t>(k * N + j)], 0.0f)) & 0xffff)
              << j << " " << k;
      // The kernel of its workload, emulated on x and those bytes, against the node's evaluation.
      const HostTensor& xv = in.at(n.inputs[0] == "x" ? "x" : "v");
      const HostTensor y = def.eval(c, {&xv, &w}).at(0);
      const std::vector<float> out = emulated_output(def.workload(g, n).spec + ")", sm90, {xv.f, operands[0].f}, y.f.size());
      for (size_t e = 0; e < y.f.size(); ++e) ASSERT_NEAR(out[e], y.f[e], 1e-5 * (1 + std::fabs(y.f[e]))) << e;
    }
  }
  // Compiled for another target than cuda's tensor cores (a model may name the op), refused by name;
  // emulated for cuda (--emulate-gpu), compiled, its tensor-core kernels as generic kernels.
  {
    Graph g = b.g;
    on_tensor_cores(g, Precision::Float16);
    g.tensor_core_nodes = 0;  // as a model naming the op would have it (not counted by the pass)
    tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
    try {
      compile_model(g, tf::host_target(), defaults, tf::testing::temp_dir() + "/tc.so", "tc");
      ADD_FAILURE() << "a MatMulTensorCore compiled for " << tf::host_target().str();
    } catch (const tf::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("(MatMulTensorCore): MatMulTensorCore runs on a cuda target's tensor cores "
                                           "(--precision fp16 or bf16), not " + tf::host_target().str()),
                std::string::npos)
          << e.what();
    }
    const auto products = std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == kTensorCoreMatMul; });
    const CompiledModel cm =
        compile_model(g, sm90, defaults, tf::testing::temp_dir() + "/tc.so", "tc", default_memory_budget(), true);
    EXPECT_GE(cm.emulated_products, products);
    EXPECT_GE(products, 2);
  }
  // A MatMulTensorCore of another precision is refused by name (the weights have no 16-bit type).
  Graph tf32 = b.g;
  for (Node& n : tf32.nodes) {
    if (n.name != "MatMul_m") continue;
    n.op = kTensorCoreMatMul;
    n.attrs[kTensorCorePrecision] = std::string("tf32");
  }
  try {
    run_reference(tf32, in);
    ADD_FAILURE() << "a MatMulTensorCore at tf32 ran";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'MatMul_m' (MatMulTensorCore): attribute tf_precision 'tf32' is not fp16 or bf16"),
              std::string::npos)
        << e.what();
  }
}

// The same for convolutions: at fp16 and bf16 on a cuda target a marked Conv of constant
// weights becomes a ConvTensorCore whose kernel (conv2d_tc.cuda, weight_dtype) reads the weights
// [K][C][R][S] as 16-bit values in their own order; its evaluation is the marked Conv's, and the
// kernel emulated on those bytes computes it. A Conv of weights computed at run time stays a
// marked Conv; a grouped one stays float32.
TEST(GraphPasses, TensorCoreConvolutionsReadTheirConstantWeightsIn16Bits) {
  GraphBuilder b;
  std::string x = b.input("x", {2, 3, 7, 6});
  std::string wx = b.input("wx", {4, 5, 1, 1});
  std::map<std::string, Attr> attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}};
  // K C R S = 5 x 3 x 3 x 3: odd, the last word half padding.
  std::string c = b.node("Conv", {x, b.weights("w", {5, 3, 3, 3}), b.weights("bias", {5})}, "c", {2, 5, 4, 3}, attrs);
  std::string d = b.node("Conv", {c, wx}, "d", {2, 4, 4, 3});
  std::string gr = b.node("Conv", {d, b.weights("wg", {4, 2, 1, 1})}, "gr", {2, 4, 4, 3}, {{"group", int64_t{2}}});
  b.g.outputs = {gr};
  verify(b.g);
  const tf::Target sm90 = tf::parse_target("cuda -arch=sm_90");
  std::map<std::string, HostTensor> in = {{"x", random_floats({2, 3, 7, 6}, 7)}, {"wx", random_floats({4, 5, 1, 1}, 8)}};
  for (const Precision p : {Precision::Float16, Precision::BFloat16}) {
    const tf::HalfPairs& f = p == Precision::Float16 ? tf::kF16Pairs : tf::kBF16Pairs;
    const std::string type = p == Precision::Float16 ? "float16" : "bfloat16";
    SCOPED_TRACE(precision_name(p));
    Graph marked = b.g;
    for (Node& n : marked.nodes)
      if (n.op == "Conv" && n.get_int("group", 1) == 1) n.attrs[kTensorCorePrecision] = std::string(precision_name(p));
    Graph g = b.g;
    std::map<std::string, int> ops = on_tensor_cores(g, p);
    EXPECT_EQ(ops[kTensorCoreConv], 1);
    EXPECT_EQ(ops["Conv"], 2);
    EXPECT_EQ(g.tensor_core_nodes, 2);
    expect_near_reference(marked, g, in, 1e-6);
    TaskList t = extract_tasks(g);
    ASSERT_EQ(t.tasks.size(), 3u);
    EXPECT_EQ(t.tasks[0].workload,
              "conv2d_nchw(N=2,C=3,H=7,W=6,K=5,R=3,S=3,stride=2,pad=1,dilation=1,dtype=float32,weight_dtype=" + type + ",epilogue=bias)");
    EXPECT_EQ(t.tasks[1].workload, std::string("conv2d_nchw(N=2,C=5,H=4,W=3,K=4,R=1,S=1,stride=1,pad=0,dilation=1,precision=") + precision_name(p) +
                                       ",epilogue=none)");
    EXPECT_EQ(t.tasks[2].workload.find("weight_dtype"), std::string::npos) << t.tasks[2].workload;
    EXPECT_EQ(t.tasks[2].workload.find("precision"), std::string::npos) << t.tasks[2].workload;
    const Node& n = *std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& m) { return m.op == kTensorCoreConv; });
    const OpDef& def = *find_op(n.op);
    OpContext ctx = context(n, g, g.opset);
    const HostTensor& w = *ctx.in(1).constant;
    std::vector<HostTensor> operands = def.kernel_constants(g, n);
    ASSERT_EQ(operands.size(), 1u);
    ASSERT_EQ(operands[0].f.size(), (w.f.size() + 1) / 2);
    const std::vector<uint16_t> halves = halves_of(operands[0]);
    for (size_t e = 0; e < w.f.size(); ++e)
      ASSERT_EQ(halves[e], std::bit_cast<uint32_t>(f.pair(w.f[e], 0.0f)) & 0xffff) << e;
    // Its kernel, emulated on x, those bytes and the bias, against the node's evaluation.
    const HostTensor& bias = *ctx.in(2).constant;
    const HostTensor y = def.eval(ctx, {&in.at("x"), &w, &bias}).at(0);
    const std::vector<float> out =
        emulated_output(def.workload(g, n).spec + ",epilogue=bias)", sm90, {in.at("x").f, operands[0].f, bias.f}, y.f.size());
    for (size_t e = 0; e < y.f.size(); ++e) ASSERT_NEAR(out[e], y.f[e], 1e-5 * (1 + std::fabs(y.f[e]))) << e;
  }
  // Compiled for a CPU, refused by name; at tf32 (no 16-bit type for the weights) too.
  Graph g = b.g;
  on_tensor_cores(g, Precision::Float16);
  g.tensor_core_nodes = 0;  // as a model naming the op would have it
  tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
  try {
    compile_model(g, tf::host_target(), defaults, tf::testing::temp_dir() + "/tcc.so", "tcc", default_memory_budget(), false);
    ADD_FAILURE() << "a ConvTensorCore compiled for the host";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("(ConvTensorCore): ConvTensorCore runs on a cuda target's tensor cores"), std::string::npos)
        << e.what();
  }
  // A ConvTensorCore a model names with what it cannot compute is refused by name: another
  // precision, a group, weights that are not a float32 constant, data of another type.
  auto refused = [&](const std::function<void(Graph&, Node&)>& spoil, const std::string& message) {
    Graph h = g;
    for (Node& n : h.nodes)
      if (n.op == kTensorCoreConv) spoil(h, n);
    try {
      run_reference(h, in);
      ADD_FAILURE() << "ran; expected: " << message;
    } catch (const tf::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  refused([](Graph&, Node& n) { n.attrs[kTensorCorePrecision] = std::string("tf32"); },
          "(ConvTensorCore): attribute tf_precision 'tf32' is not fp16 or bf16");
  refused([](Graph&, Node& n) { n.attrs["group"] = int64_t{3}; }, "(ConvTensorCore): group 3 is not 1");
  refused([&](Graph&, Node& n) { n.inputs[1] = "wx"; }, "(ConvTensorCore): weight must be a float32 constant [K, C, R, S]");
  Graph h = g;
  for (const Node& n : h.nodes) {
    if (n.op != kTensorCoreConv) continue;
    h.value(n.inputs[0]).dtype = DType::I64;
    try {
      find_op(n.op)->infer(context(n, h, h.opset));
      ADD_FAILURE() << "int64 data inferred";
    } catch (const tf::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("(ConvTensorCore): input must be float32 or float16, not int64"), std::string::npos)
          << e.what();
    }
  }
}

// sixteen-bit-edges: at fp16 and bf16 on a cuda target, a value that tensor-core products
// of 16-bit weights read as their data is stored in 16 bits by a storage Cast after its
// producer (which its kernel fuses: as many kernels, the producing kernels storing 16-bit
// values), and its readers' tasks take 16-bit data. Where only such products read it the
// results are the same bit for bit (the products rounded it to that type anyway); an
// elementwise reader beside them (a residual Add) reads it through a widening Cast that its
// kernel fuses (the value rounded, as PyTorch's .half() rounds it). A value anything else
// reads, or a model output, stays float32.
TEST(GraphPasses, SixteenBitEdgesStoreWhatOnlyTensorCoreProductsRead) {
  GraphBuilder b;
  std::string x = b.input("x", {2, 3, 8, 8});
  std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  std::string c1 = b.node("Conv", {x, b.weights("w1", {8, 3, 3, 3}), b.weights("b1", {8})}, "c1", {2, 8, 8, 8}, pad1);
  std::string r1 = b.node("Relu", {c1}, "r1", {2, 8, 8, 8});  // read by c2 alone: 16 bits
  std::string c2 = b.node("Conv", {r1, b.weights("w2", {8, 8, 1, 1})}, "c2", {2, 8, 8, 8});
  std::string r2 =
      b.node("Relu", {c2}, "r2", {2, 8, 8, 8});  // read by c3 and the Add: 16 bits, widened
  std::string c3 = b.node("Conv", {r2, b.weights("w3", {8, 8, 3, 3})}, "c3", {2, 8, 8, 8}, pad1);
  std::string a = b.node("Add", {r2, c3}, "a", {2, 8, 8, 8});
  std::string flat = b.node("Reshape", {a, b.constant("shape", HostTensor::ints({2}, {2, 512}))}, "flat", {2, 512});
  std::string m = b.node("MatMul", {flat, b.weights("wm", {512, 10})}, "m", {2, 10});  // a model output
  b.g.outputs = {m};
  verify(b.g);
  std::map<std::string, HostTensor> in = {{"x", random_floats({2, 3, 8, 8}, 17)}};
  const tf::Target sm90 = tf::parse_target("cuda -arch=sm_90");
  tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
  for (const Precision p : {Precision::Float16, Precision::BFloat16}) {
    SCOPED_TRACE(precision_name(p));
    const DType type = p == Precision::Float16 ? DType::F16 : DType::BF16;
    const std::string t = dtype_name(type);
    Graph off = b.g, on = b.g;
    on_tensor_cores(off, p, {"sixteen-bit-edges"});
    std::map<std::string, int> ops = on_tensor_cores(on, p);
    EXPECT_EQ(off.sixteen_bit_values, 0);
    EXPECT_EQ(on.sixteen_bit_values, 3);
    EXPECT_EQ(ops["Cast"], 4);
    EXPECT_EQ(ops[kTensorCoreConv], 3);
    verify(on);
    std::string widened;  // what the Add reads
    for (const Node& n : on.nodes) {
      if (n.op == "Add") widened = n.inputs[0];
      if (n.op != "Cast") continue;
      if (!n.has(kStorageCast)) {  // the Add's widening Cast, just before it
        EXPECT_EQ(n.get_int("to", 0), 1) << n.name;
        EXPECT_EQ(on.value(n.inputs[0]).dtype, type) << n.name;
        EXPECT_EQ(on.value(n.outputs[0]).dtype, DType::F32) << n.name;
        EXPECT_EQ(&n + 1 < on.nodes.data() + on.nodes.size() ? (&n + 1)->op : "", "Add") << n.name;
        continue;
      }
      EXPECT_EQ(on.value(n.outputs[0]).dtype, type) << n.name;
      EXPECT_TRUE(n.inputs[0] == r1 || n.inputs[0] == r2 || n.inputs[0] == a) << n.inputs[0];
    }
    EXPECT_NE(widened, r2);
    EXPECT_EQ(on.value(widened).dtype, DType::F32);
    // The same bit for bit as the float32 graph whose Add reads r2 rounded to the type.
    Graph rounded = off;
    Node store{"r2.stored",
               "Cast",
               {r2},
               {"r2.half"},
               {{"to", int64_t{p == Precision::Float16 ? 10 : 16}}, {kStorageCast, int64_t{1}}}};
    Node widen{"r2.wide", "Cast", {"r2.half"}, {"r2.wide"}, {{"to", int64_t{1}}}};
    rounded.values["r2.half"] = Value{"r2.half", type, rounded.value(r2).shape, std::nullopt};
    rounded.values["r2.wide"] = Value{"r2.wide", DType::F32, rounded.value(r2).shape, std::nullopt};
    for (size_t k = 0; k < rounded.nodes.size(); ++k) {
      if (rounded.nodes[k].op != "Add") continue;
      ASSERT_EQ(rounded.nodes[k].inputs[0], r2);
      rounded.nodes[k].inputs[0] = "r2.wide";
      rounded.nodes.insert(rounded.nodes.begin() + static_cast<std::ptrdiff_t>(k), {store, widen});
      break;
    }
    verify(rounded);
    expect_near_reference(rounded, on, in, 0.0);
    // The readers' tasks take 16-bit data.
    std::vector<std::string> tasks;
    for (const Task& task : extract_tasks(on).tasks) tasks.push_back(task.workload);
    ASSERT_EQ(tasks.size(), 4u);
    EXPECT_EQ(tasks[0], "conv2d_nchw(N=2,C=3,H=8,W=8,K=8,R=3,S=3,stride=1,pad=1,dilation=1,dtype=float32,weight_dtype=" + t +
                            ",epilogue=bias_relu)");
    EXPECT_EQ(tasks[1], "conv2d_nchw(N=2,C=8,H=8,W=8,K=8,R=1,S=1,stride=1,pad=0,dilation=1,dtype=" + t + ",epilogue=relu)");
    EXPECT_EQ(tasks[2], "conv2d_nchw(N=2,C=8,H=8,W=8,K=8,R=3,S=3,stride=1,pad=1,dilation=1,dtype=" +
                            t + ",epilogue=none)");
    EXPECT_EQ(tasks[3], "matmul(M=2,N=10,K=512,trans_b=1,dtype=" + t + ",epilogue=none)");
    // Compiled for the GPU: the Casts are in their producers' kernels, which store 16-bit
    // values: as many kernels (the Reshape a view passing the Add's 16 bits on, no kernel).
    auto build = [&](const Graph& g, const std::string& file) {
      const std::string path = tf::testing::temp_dir() + "/" + file;
      tf::graph::CompiledModel cm = compile_model(g, sm90, defaults, path, file, default_memory_budget(), false);
      // c3's kernel (the template's) computes the Add too; here with its widening Cast,
      // reading r2's 16 bits.
      bool add_in_c3 = false;
      for (const tf::graph::ModelKernel& k : cm.kernels) {
        if (std::find(k.nodes.begin(), k.nodes.end(), "Conv_c3") == k.nodes.end()) continue;
        add_in_c3 = std::find(k.nodes.begin(), k.nodes.end(), "Add_a") != k.nodes.end() &&
                    k.template_name != "generic";
        const bool widens = std::any_of(
            k.nodes.begin(), k.nodes.end(),
            [&](const std::string& name) { return name.find(".widened") != std::string::npos; });
        EXPECT_EQ(widens, &g == &on) << k.function;
        EXPECT_EQ(std::any_of(k.args.begin(), k.args.end(),
                              [&](const std::string& v) {
                                return g.values.count(v) && g.value(v).dtype == type;
                              }),
                  &g == &on)
            << k.function;
      }
      EXPECT_TRUE(add_in_c3) << file;

      return std::pair{cm.kernels.size(), tf::read_file(path).find("st.global.b16") != std::string::npos};
    };
    const auto [kernels_off, stores_off] = build(off, "off.so");
    const auto [kernels_on, stores_on] = build(on, "on.so");
    EXPECT_EQ(kernels_on, kernels_off);
    EXPECT_FALSE(stores_off);
    EXPECT_TRUE(stores_on);
  }
  // Not at tf32 (the weights stay float32, so do the values).
  Graph g = b.g;
  on_tensor_cores(g, Precision::TF32);
  EXPECT_EQ(g.sixteen_bit_values, 0);
  // A 16-bit value read by anything but a product of 16-bit weights, or written by anything but
  // a storage Cast, is refused by name.
  Graph bad = b.g;
  on_tensor_cores(bad, Precision::Float16, {"fuse-attention"});
  for (Node& n : bad.nodes) {
    if (n.op != kTensorCoreConv || bad.value(n.inputs[0]).dtype != DType::F16) continue;
    Node relu{"stray", "Relu", {n.inputs[0]}, {"stray_out"}, {}};
    bad.values["stray_out"] = Value{"stray_out", DType::F32, bad.value(n.inputs[0]).shape, std::nullopt};
    bad.nodes.push_back(relu);
    break;
  }
  try {
    verify(bad);
    ADD_FAILURE() << "a Relu read a float16 value";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'stray' (Relu) reads the float16 value"), std::string::npos) << e.what();
  }
  Graph writes = b.g;
  writes.values.at(r1).dtype = DType::F16;
  try {
    verify(writes);
    ADD_FAILURE() << "a Relu wrote a float16 value";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("writes the float16 value '" + r1 + "'; only a storage Cast writes float16 or bfloat16"),
              std::string::npos)
        << e.what();
  }
}

// The same for marked products of two activations (attention's scores and context): both
// operands stored in 16 bits where only such products read them (dtype=float16), or the second
// alone (weight_dtype); a first operand whose second stays float32 stays float32 too (no kernel
// takes 16-bit data times float32), and so does anything a model input feeds directly.
TEST(GraphPasses, SixteenBitEdgesOfProductsOfActivations) {
  GraphBuilder b;
  std::string x = b.input("x", {3, 5, 8});
  std::string q = b.node("Relu", {x}, "q", {3, 5, 8});
  std::string k = b.node("Transpose", {b.node("Sigmoid", {x}, "ks", {3, 5, 8})}, "k", {3, 8, 5},
                         {{"perm", std::vector<int64_t>{0, 2, 1}}});
  std::string s = b.node("MatMul", {q, k}, "s", {3, 5, 5});
  std::string p = b.node("Softmax", {s}, "p", {3, 5, 5}, {{"axis", int64_t{-1}}});
  std::string v = b.node("Tanh", {x}, "v", {3, 5, 8});
  std::string o = b.node("MatMul", {p, v}, "o", {3, 5, 8});  // both 16-bit
  std::string u = b.node("Neg", {x}, "u", {3, 5, 8});        // first operand, second the input: float32
  std::string xt = b.node("Transpose", {x}, "xt", {3, 8, 5}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
  std::string ux = b.node("MatMul", {u, xt}, "ux", {3, 5, 5});
  // Second operand, first the input: weight_dtype (a Softmax, not elementwise, reads xt too).
  std::string w = b.node("Softmax", {xt}, "w", {3, 8, 5}, {{"axis", int64_t{-1}}});
  std::string xw = b.node("MatMul", {x, w}, "xw", {3, 5, 5});
  b.g.outputs = {o, ux, xw};
  verify(b.g);
  std::map<std::string, HostTensor> in = {{"x", random_floats({3, 5, 8}, 23)}};
  for (const Precision pr : {Precision::Float16, Precision::BFloat16}) {
    SCOPED_TRACE(precision_name(pr));
    const std::string t = pr == Precision::Float16 ? "float16" : "bfloat16";
    // s, Softmax and o are an attention, which fuse-attention would make one float32 kernel
    // of: the products of activations as they are where it does not apply.
    Graph off = b.g, on = b.g;
    on_tensor_cores(off, pr, {"sixteen-bit-edges", "fuse-attention"});
    on_tensor_cores(on, pr, {"fuse-attention"});
    verify(on);
    std::set<std::string> stored;
    for (const Node& n : on.nodes)
      if (n.op == "Cast" && n.has(kStorageCast)) stored.insert(n.inputs[0]);
    // xt (read by w's Softmax too) stays float32, and so does u.
    EXPECT_EQ(stored, (std::set<std::string>{q, k, p, v, w}));
    EXPECT_EQ(on.sixteen_bit_values, 5);
    expect_near_reference(off, on, in, 0.0);  // bit for bit
    std::map<std::string, std::string> by_node;
    for (const Task& task : extract_tasks(on).tasks) by_node[task.nodes.at(0)] = task.workload;
    auto node_of = [&](const std::string& out) {
      for (const Node& n : on.nodes)
        if (n.outputs[0] == out) return n.name;
      return std::string();
    };
    EXPECT_EQ(by_node[node_of(s)], "batch_matmul(B=3,M=5,N=5,K=8,dtype=" + t + ",epilogue=none)");
    EXPECT_EQ(by_node[node_of(o)], "batch_matmul(B=3,M=5,N=8,K=5,dtype=" + t + ",epilogue=none)");
    EXPECT_EQ(by_node[node_of(ux)], std::string("batch_matmul(B=3,M=5,N=5,K=8,precision=") + precision_name(pr) + ",epilogue=none)");
    EXPECT_EQ(by_node[node_of(xw)], "batch_matmul(B=3,M=5,N=5,K=8,dtype=float32,weight_dtype=" + t + ",epilogue=none)");
  }
  // Inference refuses 16-bit data times float32 by name.
  Graph bad = b.g;
  on_tensor_cores(bad, Precision::Float16, {"fuse-attention"});
  Node* product = nullptr;
  for (Node& n : bad.nodes) {
    if (n.outputs[0] == ux) product = &n;
  }
  ASSERT_NE(product, nullptr);
  for (const Node& c : bad.nodes)
    if (c.op == "Cast" && c.inputs[0] == q) product->inputs[0] = c.outputs[0];
  ASSERT_NE(product->inputs[0], u);
  try {
    find_op("MatMul")->infer(context(*product, bad, bad.opset));
    ADD_FAILURE() << "16-bit data times float32 inferred";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is float16 and input 1 float32; a 16-bit first operand needs a 16-bit second one"),
              std::string::npos)
        << e.what();
  }
}

// --precision fp16 keeps a product whose weights float16 cannot hold (past 65504: infinity)
// in float32, on CPUs and tensor cores alike; bf16, whose range is float32's, converts it.
TEST(GraphPasses, Float16LeavesWeightsBeyondItsRangeInFloat32) {
  for (float big : {1e3f, 1e5f})
  for (bool tensor_cores : {false, true}) {
    GraphBuilder b;
    std::string x = b.input("x", {2, 3});
    HostTensor w = random_floats({3, 4}, 5);
    w.f[7] = big;
    b.node("MatMul", {x, b.constant("w", w)}, "y", {2, 4});
    b.g.outputs = {"y"};
    for (Precision p : {Precision::Float16, Precision::BFloat16}) {
      Graph g = b.g;
      PassOptions o;
      o.precision = p;
      o.tensor_cores = tensor_cores;
      run_passes(g, o);
      const bool converts = p == Precision::BFloat16 || big < 65504.0f;
      EXPECT_EQ(tensor_cores ? g.tensor_core_nodes : g.fp16_nodes + g.bf16_nodes, converts ? 1 : 0) << big;
      EXPECT_EQ(g.nodes.at(0).op, !converts ? "MatMul" : tensor_cores ? kTensorCoreMatMul : p == Precision::Float16 ? "MatMulFP16" : "MatMulBF16") << big;
      std::map<std::string, HostTensor> in = {{"x", random_floats({2, 3}, 6)}};
      const std::map<std::string, HostTensor> out = run_reference(g, in);  // kept: the loop reads into it
      for (float v : out.at("y").f) EXPECT_TRUE(std::isfinite(v)) << big;
    }
  }
}

TEST(GraphPasses, LevelsAndDisabledPasses) {
  Graph g = sample_model();
  PassOptions o;
  o.opt_level = 0;
  o.disabled = {"dead-code-elimination"};
  std::vector<PassReport> r = run_passes(g, o);
  for (const PassReport& p : r) {
    EXPECT_EQ(p.ran, p.name == std::string("simplify-inference") ||
                         p.name == std::string("lower-scatter-nd") || p.name == std::string("auto-mixed-precision"))
        << p.name;
  }
  bool has_sigmoid = false;
  for (const Node& n : g.nodes) has_sigmoid |= n.op == "Sigmoid";
  EXPECT_TRUE(has_sigmoid);
  expect_same_outputs(sample_model(), g);
}

TEST(GraphPasses, BadOptionsAreErrors) {
  Graph g = sample_model();
  auto error = [&](const PassOptions& o) {
    try {
      run_passes(g, o);
    } catch (const tf::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PassOptions a;
  a.disabled = {"fusion-of-everything"};
  EXPECT_NE(error(a).find(
                "--disable-pass fusion-of-everything: no such pass (passes: simplify-inference"),
            std::string::npos)
      << error(a);
  PassOptions b;
  b.dump = {"nope"};
  EXPECT_NE(error(b).find("--dump-pass nope: no such pass"), std::string::npos) << error(b);
  PassOptions c;
  c.opt_level = 7;
  EXPECT_NE(error(c).find("--opt-level 7 is not one of 0, 1, 2, 3"), std::string::npos) << error(c);
}

// LayerNorm and GELU as exporters decompose them become one operator each; where an
// intermediate value is also read elsewhere, the decomposition stays.
Graph composites(bool extra_use) {
  GraphBuilder b;
  std::string x = b.input("x", {1, 3, 8});
  Shape s = {1, 3, 8}, r = {1, 3, 1};
  std::map<std::string, Attr> last = {{"axes", std::vector<int64_t>{-1}}};
  std::string mean = b.node("ReduceMean", {x}, "mean", r, last);
  std::string d = b.node("Sub", {x, mean}, "d", s);
  std::string p = b.node("Pow", {d, b.constant("two", HostTensor::floats({}, {2.0f}))}, "p", s);
  std::string var = b.node("ReduceMean", {p}, "var", r, last);
  std::string ve =
      b.node("Add", {var, b.constant("eps", HostTensor::floats({}, {1e-5f}))}, "ve", r);
  std::string sd = b.node("Sqrt", {ve}, "sd", r);
  std::string n = b.node("Div", {d, sd}, "n", s);
  std::string m = b.node("Mul", {n, b.weights("gamma", {8})}, "m", s);
  std::string ln = b.node("Add", {m, b.weights("beta", {8})}, "ln", s);
  // GELU in PyTorch's order: (x * (1 + erf(x / sqrt 2))) * 0.5
  std::string a =
      b.node("Div", {ln, b.constant("sqrt2", HostTensor::floats({}, {1.41421354f}))}, "a", s);
  std::string e = b.node("Erf", {a}, "e", s);
  std::string one =
      b.node("Add", {e, b.constant("one", HostTensor::floats({}, {1.0f}))}, "one_plus", s);
  std::string xm = b.node("Mul", {ln, one}, "xm", s);
  std::string y = b.node("Mul", {xm, b.constant("half", HostTensor::floats({}, {0.5f}))}, "y", s);
  b.g.outputs = {y};
  if (extra_use) {
    b.node("Relu", {var}, "extra", r);  // the variance read outside the pattern
    b.g.outputs.push_back("extra");
  }
  verify(b.g);
  return b.g;
}

TEST(GraphPasses, RecognizesLayerNormAndGelu) {
  Graph original = composites(false);
  Graph g = original;
  EXPECT_TRUE(recognize_composites(g));
  verify(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, "LayerNormalization");
  EXPECT_EQ(g.nodes[0].get_int("axis", 0), 2);
  EXPECT_FLOAT_EQ(g.nodes[0].get_float("epsilon", 0), 1e-5f);
  EXPECT_EQ(g.nodes[1].op, "Gelu");
  EXPECT_EQ(g.outputs, original.outputs);
  std::map<std::string, HostTensor> in = {{"x", random_floats({1, 3, 8}, 5, -3, 3)}};
  HostTensor want = run_reference(original, in).at("y"), got = run_reference(g, in).at("y");
  for (int64_t k = 0; k < want.size(); ++k)
    EXPECT_NEAR(got.f[k], want.f[k], 1e-5 * (1 + std::fabs(want.f[k])));

  Graph shared = composites(true);
  recognize_composites(shared);
  verify(shared);
  int layernorms = 0, gelus = 0;
  for (const Node& n : shared.nodes) {
    layernorms += n.op == "LayerNormalization";
    gelus += n.op == "Gelu";
  }
  EXPECT_EQ(layernorms, 0);  // the variance is read by another node
  EXPECT_EQ(gelus, 1);
}

// Softmax and log-softmax written out (with or without the max subtraction; ReduceSum's axes
// as an attribute or, from opset 13, an input) become one Softmax / LogSoftmax over that axis;
// the computed values stay (within float rounding). Where the pattern's axes disagree, a value
// inside it is read elsewhere, or the opset gives Softmax's axis another meaning, it stays.
enum class SoftmaxForm { kStable, kPlain, kLogStable, kLogPlain };
Graph softmax_graph(SoftmaxForm form, int64_t axis, int64_t max_axis, int64_t opset,
                    bool extra_use = false) {
  GraphBuilder b;
  b.g.opset = opset;
  Shape s = {2, 5, 3}, r = s;
  r[static_cast<size_t>(axis < 0 ? axis + 3 : axis)] = 1;
  Shape rm = s;
  rm[static_cast<size_t>(max_axis < 0 ? max_axis + 3 : max_axis)] = 1;
  std::string x = b.input("x", s), d = x;
  bool log = form == SoftmaxForm::kLogStable || form == SoftmaxForm::kLogPlain;
  if (form == SoftmaxForm::kStable || form == SoftmaxForm::kLogStable) {
    std::string mx = b.node("ReduceMax", {x}, "mx", rm, {{"axes", std::vector<int64_t>{max_axis}}});
    d = b.node("Sub", {x, mx}, "d", s);
  }
  std::string e = b.node("Exp", {d}, "e", s);
  std::string sum =
      opset >= 13
          ? b.node("ReduceSum", {e, b.constant("axes", HostTensor::ints({1}, {axis}))}, "sum", r)
          : b.node("ReduceSum", {e}, "sum", r, {{"axes", std::vector<int64_t>{axis}}});
  if (log) {
    b.node("Sub", {d, b.node("Log", {sum}, "lg", r)}, "y", s);
  } else {
    b.node("Div", {e, sum}, "y", s);
  }
  b.g.outputs = {"y"};
  if (extra_use) {
    b.node("Relu", {e}, "extra", s);
    b.g.outputs.push_back("extra");
  }
  verify(b.g);
  return b.g;
}

TEST(GraphPasses, RecognizesSoftmaxAndLogSoftmax) {
  struct Case {
    SoftmaxForm form;
    int64_t axis, max_axis, opset;
    const char* op;  // nullptr: stays decomposed
    bool extra_use = false;
  };
  using F = SoftmaxForm;
  for (const Case& c : std::vector<Case>{{F::kStable, -1, -1, 17, "Softmax"},
                                         {F::kStable, 1, 1, 13, "Softmax"},
                                         {F::kPlain, 0, 0, 17, "Softmax"},
                                         {F::kLogStable, 1, -2, 17, "LogSoftmax"},
                                         {F::kLogPlain, 2, 2, 11, "LogSoftmax"},
                                         {F::kStable, 2, 2, 11, "Softmax"},
                                         {F::kStable, 1, 1, 11, nullptr},  // legacy axis
                                         {F::kStable, 1, 2, 17, nullptr},  // axes differ
                                         {F::kLogStable, -1, 0, 17, nullptr},
                                         {F::kStable, 1, 1, 17, nullptr, true},
                                         {F::kPlain, 1, 1, 17, nullptr, true}}) {
    Graph original = softmax_graph(c.form, c.axis, c.max_axis, c.opset, c.extra_use);
    std::string label = tf::str("form ", static_cast<int>(c.form), " axis ", c.axis, " max axis ",
                                c.max_axis, " opset ", c.opset, c.extra_use ? " extra use" : "");
    Graph g = original;
    EXPECT_EQ(recognize_composites(g), c.op != nullptr) << label;
    verify(g);
    EXPECT_EQ(g.outputs, original.outputs) << label;
    if (c.op) {
      ASSERT_EQ(g.nodes.size(), 1u) << label;
      EXPECT_EQ(g.nodes[0].op, c.op) << label;
      EXPECT_EQ(g.nodes[0].inputs, std::vector<std::string>{"x"}) << label;
      EXPECT_EQ(g.nodes[0].get_int("axis", -9), c.axis < 0 ? c.axis + 3 : c.axis) << label;
    } else {
      EXPECT_EQ(g.nodes.size(), original.nodes.size()) << label;
    }
    std::map<std::string, HostTensor> in = {{"x", random_floats({2, 5, 3}, 9, -4, 4)}};
    HostTensor want = run_reference(original, in).at("y"), got = run_reference(g, in).at("y");
    for (int64_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(got.f[k], want.f[k], 1e-5 * (1 + std::fabs(want.f[k]))) << label;
  }
}

// Q, K, V projections of one input: one wide MatMul (+ one bias Add when each has one) and a
// Split; readers of the projections keep working, outputs keep their names.
TEST(GraphPasses, CombinesParallelMatmuls) {
  for (bool biases : {true, false}) {
    GraphBuilder b;
    std::string x = b.input("x", {1, 4, 6, 8});
    Shape s = {1, 4, 6, 5};
    std::vector<std::string> outs;
    for (const char* name : {"q", "k", "v"}) {
      std::string y = b.node("MatMul", {x, b.weights(std::string("w") + name, {8, 5})}, name, s);
      if (biases)
        y = b.node("Add", {y, b.weights(std::string("b") + name, {5})}, std::string(name) + "b", s);
      outs.push_back(b.node("Relu", {y}, std::string(name) + "r", s));
    }
    // A MatMul of another input stays apart.
    std::string x2 = b.input("x2", {1, 4, 6, 8});
    b.node("MatMul", {x2, b.weights("other", {8, 3})}, "o", {1, 4, 6, 3});
    b.g.outputs = outs;
    b.g.outputs.push_back("o");
    verify(b.g);
    Graph g = b.g;
    EXPECT_TRUE(combine_parallel_matmuls(g));
    verify(g);
    int matmuls = 0, adds = 0, splits = 0;
    for (const Node& n : g.nodes) {
      matmuls += n.op == "MatMul";
      adds += n.op == "Add";
      splits += n.op == "Split";
    }
    EXPECT_EQ(matmuls, 2) << "biases " << biases;  // q, k and v as one; o
    EXPECT_EQ(adds, biases ? 1 : 0) << "biases " << biases;
    EXPECT_EQ(splits, 1);
    std::map<std::string, HostTensor> in = {{"x", random_floats({1, 4, 6, 8}, 3)},
                                            {"x2", random_floats({1, 4, 6, 8}, 4)}};
    auto want = run_reference(b.g, in), got = run_reference(g, in);
    for (const auto& [name, w] : want) {
      ASSERT_EQ(got.at(name).shape, w.shape) << name;
      for (int64_t k = 0; k < w.size(); ++k) EXPECT_NEAR(got.at(name).f[k], w.f[k], 1e-5) << name;
    }
  }
}

namespace {

// Every group's inputs come from graph inputs or earlier groups; every node is in one group.
void expect_runnable(const Graph& g, const std::vector<FusedGroup>& plan) {
  std::set<std::string> ready(g.inputs.begin(), g.inputs.end()), placed;
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  for (const FusedGroup& f : plan) {
    for (const std::string& in : f.inputs)
      EXPECT_TRUE(ready.count(in)) << in << " read before it is computed";
    for (const std::string& name : f.nodes) {
      EXPECT_TRUE(placed.insert(name).second) << name << " in two groups";
      for (const std::string& o : by_name.at(name)->outputs) ready.insert(o);
    }
  }
  EXPECT_EQ(placed.size(), g.nodes.size());
}

const FusedGroup* group_with(const std::vector<FusedGroup>& plan, const std::string& node) {
  for (const FusedGroup& f : plan) {
    if (std::find(f.nodes.begin(), f.nodes.end(), node) != f.nodes.end()) return &f;
  }
  return nullptr;
}

}  // namespace

// A small CNN: conv(3 -> 16) + Relu, a depthwise stride-2 conv, Clip (ReLU6), a 1x1 conv and a
// residual Add, a per-channel Mul, MaxPool; a conv of 10 filters off the first Relu, and the
// Mul's output also returned.
Graph small_cnn() {
  GraphBuilder b;
  std::string x = b.input("x", {1, 3, 9, 9});
  std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  std::string c1 = b.node("Conv", {x, b.weights("w1", {16, 3, 3, 3}), b.weights("b1", {16})}, "c1",
                          {1, 16, 9, 9}, pad1);
  std::string r1 = b.node("Relu", {c1}, "r1", {1, 16, 9, 9});
  std::map<std::string, Attr> dw = {{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                    {"strides", std::vector<int64_t>{2, 2}},
                                    {"group", int64_t{16}}};
  std::string d = b.node("Conv", {r1, b.weights("wd", {16, 1, 3, 3})}, "d", {1, 16, 5, 5}, dw);
  std::string c = b.node("Clip",
                         {d, b.constant("lo", HostTensor::floats({}, {0.0f})),
                          b.constant("hi", HostTensor::floats({}, {6.0f}))},
                         "c", {1, 16, 5, 5});
  std::string p = b.node("Conv", {c, b.weights("wp", {16, 16, 1, 1})}, "p", {1, 16, 5, 5});
  std::string s = b.node("Add", {p, c}, "s", {1, 16, 5, 5});
  std::string m = b.node("Mul", {s, b.weights("scale", {16, 1, 1})}, "m", {1, 16, 5, 5});
  std::string pool = b.node(
      "MaxPool", {m}, "pool", {1, 16, 2, 2},
      {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  std::string side = b.node("Conv", {r1, b.weights("w10", {10, 16, 1, 1})}, "side", {1, 10, 9, 9});
  b.g.outputs = {pool, m, side};
  verify(b.g);
  return b.g;
}

// Convolutions go to blocked layouts where the block divides their filters; elementwise ops
// and pooling follow; activations are converted only at the input, for the outputs and for
// the convolution left in NCHW; the outputs stay the same, in NCHW, under their names.
TEST(GraphPasses, TransformsConvolutionsToBlockedLayouts) {
  for (int64_t block : {4, 8, 16}) {
    Graph original = small_cnn();
    Graph g = original;
    PassOptions o;
    o.channel_block = block;
    std::vector<PassReport> r = run_passes(g, o);
    for (const PassReport& p : r) {
      if (p.name == "transform-conv-layout") {
        EXPECT_TRUE(p.changed) << block;
      }
    }
    SCOPED_TRACE(tf::str("block ", block));
    expect_same_outputs(original, g, {1, 3, 9, 9});
    std::map<std::string, int> ops;
    for (const Node& n : g.nodes) ++ops[n.op];
    EXPECT_EQ(ops["ConvNCHWc"], 3) << block;
    EXPECT_EQ(ops["Conv"], 1) << block;  // 10 filters: no block divides them
    // x in; r1 back for the NCHW conv; m and pool back for the outputs (MaxPool pools the
    // blocks).
    EXPECT_EQ(ops["LayoutTransform"], 4) << block;
    for (const Node& n : g.nodes) {
      if (n.op == "Clip" || n.op == "Add" || n.op == "Mul" || n.op == "MaxPool") {
        EXPECT_EQ(g.value(n.outputs[0]).shape.size(), 5u) << n.name << " block " << block;
      }
    }
    TaskList t = extract_tasks(g);
    ASSERT_GE(t.tasks.size(), 3u);
    EXPECT_EQ(t.tasks[0].workload,
              tf::str("conv2d_nchwc(N=1,C=3,H=9,W=9,K=16,R=3,S=3,stride=1,pad=1,dilation=1,"
                      "ic_block=3,oc_block=",
                      block, ",epilogue=bias_relu)"));
    // A 3x3 stride-1 convolution with constant weights, but of 3 input channels: no Winograd
    // alternative (GraphTasks.WinogradAlternativesWhereTheTransformedWeightsPayOff has them).
    EXPECT_EQ(t.tasks[0].alternative_to, -1);
    EXPECT_EQ(t.tasks[1].alternative_to, -1);  // stride 2: none
    EXPECT_EQ(
        t.tasks[1].workload,
        tf::str("depthwise_conv2d_nchwc(N=1,C=16,H=9,W=9,R=3,S=3,stride=2,pad=1,dilation=1,block=",
                block, ",epilogue=none)"));
  }
}

// The Winograd alternative of a 3x3 stride-1 convolution is F(4x4) where enough tiles share
// its transformed weights (or they are small), else F(2x2) where that passes the same rule
// (ResNet's 256-channel 14x14 layers: 49 tiles of 2x2), else none (512-channel 7x7: 16
// tiles of 2x2 for 16.8 MB of transformed weights).
TEST(GraphTasks, WinogradTilesFollowTheWeightsPerTile) {
  struct Case {
    int64_t c, hw;
    const char* tile;  // "" for none
  };
  for (const Case& k : {Case{64, 28, "tile=4"}, Case{256, 14, "tile=2"}, Case{512, 7, ""}, Case{16, 7, "tile=4"}}) {
    GraphBuilder b;
    std::string x = b.input("x", {1, k.c, k.hw, k.hw});
    std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    std::string y = b.node("Conv", {x, b.weights("w", {k.c, k.c, 3, 3})}, "y", {1, k.c, k.hw, k.hw}, pad1);
    b.g.outputs = {y};
    verify(b.g);
    PassOptions o;
    o.channel_block = 16;
    run_passes(b.g, o);
    TaskList t = extract_tasks(b.g);
    SCOPED_TRACE(tf::str(k.c, " channels at ", k.hw, "x", k.hw));
    if (std::string(k.tile).empty()) {
      ASSERT_EQ(t.tasks.size(), 1u) << t.tasks.back().workload;
      continue;
    }
    ASSERT_EQ(t.tasks.size(), 2u);
    EXPECT_EQ(t.tasks[1].alternative_to, 0);
    EXPECT_NE(t.tasks[1].workload.find(std::string("conv2d_winograd_nchwc(") + "N=1,C=" + std::to_string(k.c)),
              std::string::npos)
        << t.tasks[1].workload;
    EXPECT_NE(t.tasks[1].workload.find(std::string(",") + k.tile + ","), std::string::npos) << t.tasks[1].workload;
  }
}

// A task and its alternative count once in a model's estimate, at the faster of their known
// times (or at the alternative's for a default build, which compiles it); a task without a
// time makes it infinite.
TEST(GraphTasks, AnAlternativeCountsOnceAtTheFaster) {
  TaskList l;
  l.tasks = {{"a", {"n1", "n2"}, 0, -1}, {"a_winograd", {"n1", "n2"}, 0, 0}, {"b", {"n3"}, 0, -1}};
  std::vector<double> w = {2, 2, 1};
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {3, 1, 5}, true), 2 * 1 + 5);
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {3, 1, 5}, false), 2 * 1 + 5);
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {1, 3, 5}, true), 2 * 1 + 5);
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {1, 3, 5}, false), 2 * 3 + 5);  // the default build's Winograd kernel
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {inf, 1, 5}, true), 2 * 1 + 5);  // the direct task failed
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {inf, 1, 5}, false), 2 * 1 + 5);
  EXPECT_EQ(tasks_time(l, w, {3, inf, 5}, false), inf);  // the Winograd task failed
  EXPECT_DOUBLE_EQ(tasks_time(l, w, {3, 0, 5}, true), 2 * 3 + 5);  // no Winograd time
  EXPECT_EQ(tasks_time(l, w, {3, 1, inf}, true), inf);
}

// A 3x3 stride-1 blocked convolution gets a Winograd alternative where enough tiles share its
// transformed weights or they are small: not at 7x7 with 256 channels (4 tiles, 9.4 MB), yes
// at 7x7 with 16 channels and at 28x28 with 256; never for a 1x1, strided, or computed-weight
// convolution, nor one of fewer than 8 input channels; dilated where its residue classes'
// tiles hold mostly real outputs.
TEST(GraphTasks, WinogradAlternativesWhereTheTransformedWeightsPayOff) {
  auto alternatives = [](int64_t c, int64_t hw, int64_t r, int64_t stride, bool constant_weights, int64_t cin = 0,
                         int64_t dilation = 1) {
    if (cin == 0) cin = c;
    GraphBuilder b;
    std::string x = b.input("x", {1, cin, hw, hw});
    std::string w = constant_weights ? b.weights("w", {c, cin, r, r}, -0.1f, 0.1f) : b.input("w", {c, cin, r, r});
    int64_t pad = r / 2 * dilation, out = (hw + 2 * pad - dilation * (r - 1) - 1) / stride + 1;
    b.node("Conv", {x, w}, "y", {1, c, out, out},
           {{"pads", std::vector<int64_t>(4, pad)}, {"strides", std::vector<int64_t>{stride, stride}},
            {"dilations", std::vector<int64_t>{dilation, dilation}}});
    b.g.outputs = {"y"};
    verify(b.g);
    PassOptions o;
    o.channel_block = 16;
    run_passes(b.g, o);
    int n = 0;
    for (const Task& t : extract_tasks(b.g).tasks) n += t.alternative_to >= 0;
    return n;
  };
  EXPECT_EQ(alternatives(256, 7, 3, 1, true), 0);
  EXPECT_EQ(alternatives(16, 7, 3, 1, true), 1);
  EXPECT_EQ(alternatives(256, 28, 3, 1, true), 1);
  EXPECT_EQ(alternatives(16, 28, 1, 1, true), 0);
  EXPECT_EQ(alternatives(16, 28, 3, 2, true), 0);
  EXPECT_EQ(alternatives(16, 28, 3, 1, false), 0);
  EXPECT_EQ(alternatives(16, 28, 3, 1, true, 8), 1);
  EXPECT_EQ(alternatives(16, 28, 3, 1, true, 4), 0);
  EXPECT_EQ(alternatives(16, 28, 3, 1, true, 3), 0);
  // Dilated: DeepLab's rates 2 and 4 over 40x40, and rates whose residue classes hold too
  // few rows for whole tiles (12 over 16x16: 2 rows, 1 for most classes; 5 over 12: 3).
  EXPECT_EQ(alternatives(256, 40, 3, 1, true, 0, 2), 1);
  EXPECT_EQ(alternatives(512, 40, 3, 1, true, 0, 4), 1);
  EXPECT_EQ(alternatives(64, 16, 3, 1, true, 0, 12), 0);
  EXPECT_EQ(alternatives(64, 12, 3, 1, true, 0, 5), 0);
}

// Filters the target's block does not divide but half of it does, where padding them to whole
// blocks would add more than a third (8 under 16; 24 pads to 32), take blocks of 8; the next
// convolution reads that layout as it is (ic_block 8, no conversion between), and a depthwise
// layer on 8 channels runs in blocks of 8 too.
TEST(GraphPasses, HalvesTheBlockWhereTheTargetsDoesNotDivide) {
  GraphBuilder b;
  std::string x = b.input("x", {1, 16, 6, 6});
  std::string a = b.node("Conv", {x, b.weights("wa", {8, 16, 1, 1})}, "a", {1, 8, 6, 6});
  std::string d = b.node("Conv", {a, b.weights("wd", {8, 1, 3, 3})}, "d", {1, 8, 6, 6},
                         {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{8}}});
  std::string r = b.node("Relu", {d}, "r", {1, 8, 6, 6});
  b.node("Conv", {r, b.weights("wc", {32, 8, 1, 1})}, "y", {1, 32, 6, 6});
  b.g.outputs = {"y"};
  Graph g = with_blocks_of_16(b.g);
  expect_same_outputs(b.g, g, {1, 16, 6, 6});
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["ConvNCHWc"], 3);
  EXPECT_EQ(ops["LayoutTransform"], 2);  // x in, y out
  TaskList t = extract_tasks(g);
  std::vector<std::string> w;
  for (const auto& task : t.tasks) w.push_back(task.workload);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NE(w[0].find("ic_block=16,oc_block=8"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("depthwise_conv2d_nchwc"), std::string::npos) << w[1];
  EXPECT_NE(w[1].find("block=8"), std::string::npos) << w[1];
  EXPECT_NE(w[2].find("ic_block=8,oc_block=16"), std::string::npos) << w[2];
}

// The float arithmetic a QDQ model's QuantizeLinear imports as (Div, Round, Add, Clip; then
// DequantizeLinear's Sub, Mul) between two convolutions stays in the blocked layout: no
// conversion to NCHW and back around Round (MobileNet-v2 int8 had two per layer).
TEST(GraphPasses, RoundingAndOtherElementwiseOpsFollowBlockedLayouts) {
  GraphBuilder b;
  std::string x = b.input("x", {1, 16, 6, 6});
  std::string a = b.node("Conv", {x, b.weights("wa", {16, 16, 1, 1})}, "a", {1, 16, 6, 6});
  const Shape s{1, 16, 6, 6};
  std::string v = b.node("Div", {a, b.weights("scale", {1})}, "q0", s);
  v = b.node("Round", {v}, "q1", s);
  v = b.node("Floor", {b.node("Ceil", {v}, "q2", s)}, "q3", s);
  v = b.node("Mul", {b.node("Sign", {v}, "q4", s), v}, "q5", s);
  v = b.node("Gelu", {v}, "q6", s);
  b.node("Conv", {v, b.weights("wc", {16, 16, 1, 1})}, "y", {1, 16, 6, 6});
  b.g.outputs = {"y"};
  Graph g = with_blocks_of_16(b.g);
  expect_same_outputs(b.g, g, {1, 16, 6, 6});
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["ConvNCHWc"], 2);
  EXPECT_EQ(ops["LayoutTransform"], 2);  // x in, y out
}

// A Concat along the channels of a blocked value concatenates blocks when the block divides
// every input's channels (an NCHW input among them is converted), else stays NCHW; a Pad of
// height and width pads blocks, one of the channels does not; global pooling reduces the
// blocks' height and width, and a per-channel computed scale multiplies blocks; the outputs
// stay the same.
TEST(GraphPasses, ConcatPadAndGlobalPoolingFollowBlockedLayouts) {
  for (int64_t block : {8, 16}) {
    SCOPED_TRACE(tf::str("block ", block));
    GraphBuilder b;
    std::string x = b.input("x", {1, 16, 6, 6});
    std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    std::string a = b.node("Conv", {x, b.weights("wa", {16, 16, 3, 3})}, "a", {1, 16, 6, 6}, pad1);
    std::string r = b.node("Relu", {a}, "r", {1, 16, 6, 6});
    std::string neg = b.node("Neg", {x}, "neg", {1, 16, 6, 6});  // NCHW: converted
    std::string c1 = b.node("Concat", {r, neg}, "c1", {1, 32, 6, 6}, {{"axis", int64_t{-3}}});
    std::string z = b.node("Conv", {x, b.weights("wz", {8, 16, 1, 1})}, "z", {1, 8, 6, 6});
    // 40 channels: blocks of 8 divide all three inputs, blocks of 16 do not divide z's 8.
    std::string c2 = b.node("Concat", {c1, z}, "c2", {1, 40, 6, 6}, {{"axis", int64_t{1}}});
    std::string p =
        b.node("Pad", {c1, b.constant("hw", HostTensor::ints({8}, {0, 0, 1, 2, 0, 0, 2, 1}))}, "p",
               {1, 32, 9, 9}, {{"mode", std::string("edge")}});
    std::string q =
        b.node("Pad", {c1, b.constant("ch", HostTensor::ints({8}, {0, 1, 0, 0, 0, 0, 0, 0}))}, "q",
               {1, 33, 6, 6});
    // Squeeze and excitation: a global average, a per-channel scale of the feature map, then
    // a global max.
    std::string avg = b.node("GlobalAveragePool", {r}, "avg", {1, 16, 1, 1});
    std::string sig = b.node("Sigmoid", {avg}, "sig", {1, 16, 1, 1});
    std::string se = b.node("Mul", {r, sig}, "se", {1, 16, 6, 6});
    std::string top = b.node("GlobalMaxPool", {se}, "top", {1, 16, 1, 1});
    b.g.outputs = {c2, p, q, top};
    verify(b.g);
    Graph g = b.g;
    PassOptions o;
    o.channel_block = block;
    run_passes(g, o);
    expect_same_outputs(b.g, g, {1, 16, 6, 6});
    std::map<std::string, size_t> rank;
    std::map<std::string, std::string> op;
    for (const Node& n : g.nodes) {
      rank[n.name] = g.value(n.outputs[0]).shape.size();
      op[n.name] = n.op;
    }
    EXPECT_EQ(rank["Concat_c1"], 5u);
    EXPECT_EQ(rank["Concat_c2"], block == 8 ? 5u : 4u);
    EXPECT_EQ(rank["Pad_p"], 5u);
    EXPECT_EQ(rank["Pad_q"], 4u);  // pads channels
    EXPECT_EQ(rank["GlobalAveragePool_avg"], 5u);
    EXPECT_EQ(op["GlobalAveragePool_avg"], "ReduceMean");
    EXPECT_EQ(rank["Mul_se"], 5u);  // the per-channel scale broadcasts over the blocks
    EXPECT_EQ(op["GlobalMaxPool_top"], "ReduceMax");
  }
}

// Without a channel block (no target) or with one that divides nothing, nothing changes.
TEST(GraphPasses, ConvLayoutNeedsABlockThatDivides) {
  for (int64_t block : {0, 1, 3}) {
    Graph g = small_cnn();
    PassOptions o;
    o.channel_block = block;
    for (const PassReport& p : run_passes(g, o)) {
      if (p.name == "transform-conv-layout") {
        EXPECT_FALSE(p.changed) << block;
      }
    }
    for (const Node& n : g.nodes) EXPECT_NE(n.op, "LayoutTransform") << block;
  }
}

// The blocked-layout operators check what they are given like any imported operator.
TEST(GraphLayoutOps, BadAttributesAndShapesAreErrors) {
  auto error = [](Graph g) {
    try {
      verify(g);
      for (const Node& n : g.nodes) infer_node(n, g, g.opset);
    } catch (const tf::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto transform = [](const std::string& src, const std::string& dst, const Shape& s) {
    GraphBuilder b;
    std::string x = b.input("x", s);
    b.node("LayoutTransform", {x}, "y", {1}, {{"src_layout", src}, {"dst_layout", dst}});
    b.g.outputs = {"y"};
    return b.g;
  };
  EXPECT_NE(error(transform("NCHW", "NHWC", {1, 8, 2, 2}))
                .find("dst_layout 'NHWC' is not NCHW or NCHW<b>c"),
            std::string::npos);
  EXPECT_NE(error(transform("NCHW", "NCHW0c", {1, 8, 2, 2})).find("dst_layout 'NCHW0c'"),
            std::string::npos);
  EXPECT_NE(error(transform("NCHW", "NCHW3c", {1, 8, 2, 2}))
                .find("block 3 does not divide the 8 channels"),
            std::string::npos);
  EXPECT_NE(error(transform("NCHW8c", "NCHW", {1, 8, 2, 2})).find("is not in layout NCHW8c"),
            std::string::npos);
  auto conv = [](const Shape& w, int64_t group, std::vector<int64_t> pads) {
    GraphBuilder b;
    std::string x = b.input("x", {1, 2, 5, 5, 4});
    b.node("ConvNCHWc", {x, b.weights("w", w)}, "y", {1}, {{"group", group}, {"pads", pads}});
    b.g.outputs = {"y"};
    return b.g;
  };
  EXPECT_EQ(error(conv({3, 2, 3, 3, 4, 4}, 1, {1, 1, 1, 1})), "");
  EXPECT_NE(
      error(conv({3, 1, 3, 3, 4, 4}, 1, {1, 1, 1, 1})).find("does not fit input [1, 2, 5, 5, 4]"),
      std::string::npos);
  EXPECT_NE(error(conv({2, 3, 3, 4}, 5, {0, 0, 0, 0}))
                .find("group 5 is not the 8 channels (depthwise weights)"),
            std::string::npos);
  // Grouped: weights [K/ob][span/ib][R][S][ib][ob] (2 groups of 4 channels, blocks of 4).
  EXPECT_EQ(error(conv({2, 1, 3, 3, 4, 4}, 2, {1, 1, 1, 1})), "");
  EXPECT_NE(error(conv({2, 1, 3, 3, 4, 4}, 3, {1, 1, 1, 1}))
                .find("group 3 does not divide the 8 channels"),
            std::string::npos);
  EXPECT_NE(error(conv({2, 2, 3, 3, 4, 4}, 2, {1, 1, 1, 1}))
                .find("does not fit input [1, 2, 5, 5, 4] and group 2"),
            std::string::npos);
  EXPECT_NE(error(conv({3, 1, 3, 3, 4, 4}, 2, {1, 1, 1, 1})).find("does not fit"),
            std::string::npos);  // 6 a group
  // Groups of width channels lane by lane: weights [C/b][width][R][S][b].
  EXPECT_EQ(error(conv({2, 2, 3, 3, 4}, 4, {1, 1, 1, 1})), "");
  EXPECT_NE(error(conv({2, 2, 3, 3, 4}, 2, {1, 1, 1, 1}))
                .find("group 2 is not the 8 channels over groups of 2 (4: weights [C/b][width][R][S][b])"),
            std::string::npos);
  EXPECT_NE(error(conv({2, 3, 3, 3, 4}, 2, {1, 1, 1, 1})).find("groups of 3 channels do not divide the input block 4"),
            std::string::npos);
  EXPECT_NE(error(conv({3, 2, 3, 3, 4}, 4, {1, 1, 1, 1})).find("does not fit input [1, 2, 5, 5, 4] and group 4"),
            std::string::npos);
  EXPECT_NE(error(conv({2, 3, 3, 4, 4, 4, 4}, 2, {1, 1, 1, 1}))
                .find("is neither [K/ob][span/ib][R][S][ib][ob]"),
            std::string::npos);
  EXPECT_NE(error(conv({2, 1, 3, 3, 4, 4}, 0, {1, 1, 1, 1})).find("group 0"), std::string::npos);
  EXPECT_NE(error(conv({3, 2, 0, 3, 4, 4}, 1, {1, 1, 1, 1}))
                .find("an empty dimension in [3, 2, 0, 3, 4, 4]"),
            std::string::npos);
  EXPECT_NE(error(conv({3, 2, 3, 3, 4, 0}, 1, {1, 1, 1, 1})).find("an empty dimension"),
            std::string::npos);
  EXPECT_NE(error(conv({3, 2, 3, 3, 4, 4}, 1, {1, 0, 1, 0})).find("pads [1, 0, 1, 0] differ"),
            std::string::npos);
  // Pooling of channel blocks: a 3-D window whose last axis is trivial, nothing else.
  auto pool = [](const Shape& x, std::map<std::string, Attr> attrs) {
    GraphBuilder b;
    b.node("MaxPool", {b.input("x", x)}, "y", {1}, std::move(attrs));
    b.g.outputs = {"y"};
    return b.g;
  };
  using Ints = std::vector<int64_t>;
  EXPECT_EQ(error(pool({1, 2, 5, 5, 4},
                       {{"kernel_shape", Ints{2, 2, 1}}, {"pads", Ints{1, 1, 0, 1, 1, 0}}})),
            "");
  EXPECT_NE(
      error(pool({1, 2, 5, 5, 4}, {{"kernel_shape", Ints{2, 2, 2}}}))
          .find("kernel_shape [2, 2, 2] of the rank-5 input [1, 2, 5, 5, 4] must have 3 values "
                "with 1 for the last axis"),
      std::string::npos);
  EXPECT_NE(
      error(pool({1, 2, 5, 5, 4}, {{"kernel_shape", Ints{2, 2}}})).find("kernel_shape [2, 2]"),
      std::string::npos);
  EXPECT_NE(
      error(pool({1, 2, 5, 5, 4}, {{"kernel_shape", Ints{2, 2, 1}}, {"strides", Ints{1, 1, 2}}}))
          .find("strides [1, 1, 2]"),
      std::string::npos);
  EXPECT_NE(error(pool({1, 2, 5, 5, 4},
                       {{"kernel_shape", Ints{2, 2, 1}}, {"pads", Ints{1, 1, 1, 1, 1, 1}}}))
                .find("pads [1, 1, 1, 1, 1, 1]"),
            std::string::npos);
  EXPECT_NE(error(pool({1, 2, 5, 5, 4}, {})).find("attribute 'kernel_shape' is required"),
            std::string::npos);
  EXPECT_NE(error(pool({1, 2, 5, 5, 4, 1}, {{"kernel_shape", Ints{2, 2, 1}}}))
                .find("must have rank 4 (NCHW) or 5 (channel-blocked), not [1, 2, 5, 5, 4, 1]"),
            std::string::npos);
}

// A product of a graph marked products_read_views (pass read-views-in-products: cuda targets)
// takes in the groups of layout views, Casts and scalings that compute its operands for it
// alone: not a group with other arithmetic, not views that another node reads too, and nothing
// without the mark. The pass marks only for cuda.
TEST(GraphFusion, ProductsTakeInTheViewsOfTheirOperands) {
  using Ints = std::vector<int64_t>;
  GraphBuilder b;
  std::string x = b.input("x", {4, 6});
  std::string two = b.constant("two", HostTensor::floats({1}, {2.0f}));
  std::string t = b.node("Transpose", {x}, "t", {6, 4}, {{"perm", Ints{1, 0}}});
  std::string s = b.node("Mul", {t, two}, "s", {6, 4});
  std::string e = b.node("Exp", {x}, "e", {4, 6});
  std::string m = b.node("MatMul", {s, e}, "m", {6, 6});
  std::string u = b.node("Transpose", {x}, "u", {6, 4}, {{"perm", Ints{1, 0}}});
  std::string p1 = b.node("MatMul", {u, b.weights("w1", {4, 3})}, "p1", {6, 3});
  std::string p2 = b.node("MatMul", {u, b.weights("w2", {4, 5})}, "p2", {6, 5});
  std::string r =
      b.node("Reshape", {m, b.constant("shape", HostTensor::ints({1}, {36}))}, "r", {36});
  b.g.outputs = {r, p1, p2};
  verify(b.g);
  for (bool marked : {false, true}) {
    SCOPED_TRACE(marked);
    b.g.products_read_views = marked;
    std::vector<FusedGroup> plan = plan_fusion(b.g);
    expect_runnable(b.g, plan);
    const FusedGroup* product = group_with(plan, "MatMul_m");
    ASSERT_NE(product, nullptr);
    EXPECT_EQ(product->kind, OpKind::Anchor);
    if (marked) {
      EXPECT_EQ(product->nodes, (std::vector<std::string>{"Transpose_t", "Mul_s", "MatMul_m"}));
    } else {
      EXPECT_EQ(product->nodes, (std::vector<std::string>{"MatMul_m"}));
    }
    EXPECT_NE(group_with(plan, "Exp_e"), product);  // arithmetic: its own kernel
    EXPECT_NE(group_with(plan, "Transpose_u"), group_with(plan, "MatMul_p1"));  // read twice
    EXPECT_NE(group_with(plan, "Transpose_u"), group_with(plan, "MatMul_p2"));
  }
  for (bool cuda : {false, true}) {
    Graph g = b.g;
    g.products_read_views = false;
    PassOptions o;
    o.tensor_cores = cuda;
    run_passes(g, o);
    EXPECT_EQ(g.products_read_views, cuda);
  }
}

// The views a product leaves to memory planning are the ones planning computes in place
// (graph/memory_plan.h view_in_place_by_itself, one predicate for both): a lone view of a
// computed value stays a view in place; two views of one value, or a view of a view, which
// planning would not both compute in place (the second would be a copy kernel), are the
// products' to read. With the mark (products_read_views), no group is a view copied by a
// kernel.
TEST(GraphFusion, ProductsLeaveToMemoryPlanningOnlyTheViewsItComputesInPlace) {
  GraphBuilder b;
  std::string x = b.input("x", {4, 6});
  std::string shape = b.constant("shape", HostTensor::ints({2}, {6, 4}));
  std::string same = b.constant("same", HostTensor::ints({2}, {6, 4}));
  // A lone view of a computed value (read by another node too, so that the view does not join
  // its group): in place, the product reads its source.
  std::string e = b.node("Exp", {x}, "e", {4, 6});
  std::string q = b.node("Neg", {e}, "q", {4, 6});
  std::string lone = b.node("Reshape", {e, shape}, "lone", {6, 4});
  std::string p0 = b.node("MatMul", {lone, b.weights("w0", {4, 3})}, "p0", {6, 3});
  // Two views of one value.
  std::string y = b.node("Sigmoid", {x}, "y", {4, 6});
  std::string a = b.node("Reshape", {y, shape}, "a", {6, 4});
  std::string c = b.node("Reshape", {y, shape}, "c", {6, 4});
  std::string p1 = b.node("MatMul", {a, b.weights("w1", {4, 3})}, "p1", {6, 3});
  std::string p2 = b.node("MatMul", {c, b.weights("w2", {4, 5})}, "p2", {6, 5});
  // A view of a view, and the first view also read by a product.
  std::string z = b.node("Tanh", {x}, "z", {4, 6});
  std::string r = b.node("Relu", {z}, "r", {4, 6});
  std::string v1 = b.node("Reshape", {z, shape}, "v1", {6, 4});
  std::string v2 = b.node("Reshape", {v1, same}, "v2", {6, 4});
  std::string p3 = b.node("MatMul", {v2, b.weights("w3", {4, 2})}, "p3", {6, 2});
  std::string p4 = b.node("MatMul", {v1, b.weights("w4", {4, 2})}, "p4", {6, 2});
  b.g.outputs = {p0, p1, p2, p3, p4, q, r};
  verify(b.g);
  b.g.products_read_views = true;
  const std::vector<FusedGroup> plan = plan_fusion(b.g);
  expect_runnable(b.g, plan);
  EXPECT_NE(group_with(plan, "Reshape_lone"), group_with(plan, "MatMul_p0"));
  EXPECT_EQ(group_with(plan, "Reshape_a"), group_with(plan, "MatMul_p1"));
  EXPECT_EQ(group_with(plan, "Reshape_c"), group_with(plan, "MatMul_p2"));
  EXPECT_EQ(group_with(plan, "Reshape_v2"), group_with(plan, "MatMul_p3"));
  // Every view left in a group of its own is computed in place: no kernel copies a view.
  const std::vector<InPlaceConcat> in_place = in_place_concats(b.g, plan);
  std::set<std::string> planned;
  for (const InPlaceConcat& v : in_place) planned.insert(v.node);
  for (const FusedGroup& grp : plan) {
    if (grp.nodes.size() != 1) continue;
    const std::string& node = grp.nodes[0];
    if (node.rfind("Reshape_", 0) == 0) {
      EXPECT_TRUE(planned.count(node)) << node << " is a kernel copying a view";
    }
  }
  EXPECT_TRUE(planned.count("Reshape_lone"));
}

// conv + bias + residual add + relu is one kernel, whichever operand of the Add the conv is; a
// reduction takes in the elementwise group computing its input; joining never makes two
// groups wait for each other.
TEST(GraphFusion, GroupsFollowTheRules) {
  Graph g = sample_model();
  run_passes(g, PassOptions{});
  std::vector<FusedGroup> plan = plan_fusion(g);
  expect_runnable(g, plan);
  // conv2 (bias folded in), the residual Add and the Relu.
  const FusedGroup* block = group_with(plan, "Conv_c2");
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->kind, OpKind::Anchor);
  EXPECT_EQ(block->nodes, (std::vector<std::string>{"Conv_c2", "Add_sum", "Relu_r2"}));

  GraphBuilder b;
  std::string x = b.input("x", {1, 4, 2, 2});
  std::string e = b.node("Relu", {x}, "e", {1, 4, 2, 2});
  b.g.values["s1"] = Value{"s1", DType::F32, {1, 2, 2, 2}, std::nullopt};
  b.g.values["s2"] = Value{"s2", DType::F32, {1, 2, 2, 2}, std::nullopt};
  b.g.nodes.push_back(Node{"split", "Split", {e}, {"s1", "s2"}, {{"axis", int64_t{1}}}});
  std::string c = b.node("Conv", {"s2", b.weights("w", {2, 2, 1, 1})}, "c", {1, 2, 2, 2});
  std::string sum =
      b.node("Add", {"s1", c}, "sum", {1, 2, 2, 2});  // s1 from the Relu's group, c waits for it
  std::string sq = b.node("Mul", {sum, sum}, "sq", {1, 2, 2, 2});
  b.node("ReduceSum", {sq}, "r", {1, 1, 1, 1}, {{"axes", std::vector<int64_t>{1, 2, 3}}});
  std::string t = b.node("Sigmoid", {x}, "t", {1, 4, 2, 2});
  b.node("ReduceSum", {t}, "r2", {1, 1, 1, 1}, {{"axes", std::vector<int64_t>{1, 2, 3}}});
  b.g.outputs = {"r", "r2"};
  verify(b.g);
  std::vector<FusedGroup> p2 = plan_fusion(b.g);
  expect_runnable(b.g, p2);
  EXPECT_EQ(group_with(p2, "split"), group_with(p2, "Relu_e"));  // injective after elementwise
  EXPECT_NE(group_with(p2, "Add_sum"),
            group_with(p2, "Relu_e"));  // would wait for the conv that waits for it
  // Its first input, s1, cannot take it; the next, the conv's output, read by it alone, can:
  // a residual Add written with the skip first (MobileNet-v2) joins the conv.
  EXPECT_EQ(group_with(p2, "Add_sum"), group_with(p2, "Conv_c"));
  // Mul(sum, sum) reads one value twice, as one reader: it joins the conv's group too; the
  // reduction after it starts its own.
  EXPECT_EQ(group_with(p2, "Mul_sq"), group_with(p2, "Conv_c"));
  EXPECT_NE(group_with(p2, "ReduceSum_r"), group_with(p2, "Mul_sq"));
  // A reduction takes in the elementwise group computing its input (read by nothing else).
  ASSERT_EQ(group_with(p2, "ReduceSum_r2"), group_with(p2, "Sigmoid_t"));
  EXPECT_EQ(group_with(p2, "ReduceSum_r2")->kind, OpKind::Reduction);
}

// A value read by several elementwise nodes whose paths meet again (SiLU: Mul(y,
// Sigmoid(y)); a GELU written out) joins its producer's group whole: one kernel with the conv.
// Not where a node of the diamond reads something else computed, where one of its values is
// returned or read elsewhere, or where the paths never meet (a squeeze-and-excitation: a pool
// and a Mul read the value); then every node stays where the old rule put it, and no group
// computes a value for another group halfway through a diamond.
TEST(GraphFusion, DiamondsJoinTheirSourcesGroupWhole) {
  enum class Variant { Silu, Gelu, OtherInput, Returned, NoMeet };
  for (Variant v : {Variant::Silu, Variant::Gelu, Variant::OtherInput, Variant::Returned, Variant::NoMeet}) {
    SCOPED_TRACE(static_cast<int>(v));
    GraphBuilder b;
    std::string x = b.input("x", {1, 4, 3, 3});
    std::string y = b.node("Conv", {x, b.weights("w", {4, 4, 1, 1})}, "y", {1, 4, 3, 3});
    std::string z = b.node("Relu", {x}, "z", {1, 4, 3, 3});  // another group's value
    std::string out;
    std::vector<std::string> diamond;
    if (v == Variant::Gelu) {
      std::string d = b.node("Div", {y, b.constant("c", HostTensor::floats({}, {1.4142135f}))}, "d", {1, 4, 3, 3});
      std::string e = b.node("Erf", {d}, "e", {1, 4, 3, 3});
      std::string a = b.node("Add", {e, b.constant("one", HostTensor::floats({}, {1.0f}))}, "a", {1, 4, 3, 3});
      out = b.node("Mul", {y, a}, "m", {1, 4, 3, 3});
      diamond = {"Div_d", "Erf_e", "Add_a", "Mul_m"};
    } else if (v == Variant::NoMeet) {
      std::string p = b.node("GlobalAveragePool", {y}, "p", {1, 4, 1, 1});
      out = b.node("Mul", {y, p}, "m", {1, 4, 3, 3});
      diamond = {"Mul_m"};
    } else {
      std::string s = b.node("Sigmoid", {y}, "s", {1, 4, 3, 3});
      std::string s2 = v == Variant::OtherInput ? b.node("Add", {s, z}, "s2", {1, 4, 3, 3}) : s;
      out = b.node("Mul", {y, s2}, "m", {1, 4, 3, 3});
      diamond = {"Sigmoid_s", "Mul_m"};
      if (v == Variant::OtherInput) diamond.insert(diamond.begin() + 1, "Add_s2");
    }
    b.g.outputs = {b.node("Relu", {out}, "r", {1, 4, 3, 3})};
    if (v == Variant::Returned) b.g.outputs.push_back("s");
    verify(b.g);
    std::vector<FusedGroup> plan = plan_fusion(b.g);
    expect_runnable(b.g, plan);
    const FusedGroup* conv = group_with(plan, "Conv_y");
    ASSERT_NE(conv, nullptr);
    const bool joins = v == Variant::Silu || v == Variant::Gelu;
    for (const std::string& n : diamond) EXPECT_EQ(group_with(plan, n) == conv, joins) << n;
    if (joins) {
      EXPECT_EQ(group_with(plan, "Relu_r"), conv);
      EXPECT_EQ(conv->outputs, (std::vector<std::string>{"r"}));
    }
    for (const FusedGroup& f : plan) EXPECT_LE(f.outputs.size(), v == Variant::Returned ? 2u : 1u) << f.nodes[0];
  }
}

// Intermediates share the arena where their lifetimes do not overlap, never where they do.
TEST(GraphMemory, ReuseByLivenessWithoutOverlap) {
  // A chain of opaque ops (each its own kernel): a -> b -> c -> d -> out; each buffer is
  // dead once the next is written, so two slots suffice.
  GraphBuilder b;
  std::string v = b.input("x", {1, 1, 16, 16});
  std::map<std::string, Attr> pool = {{"kernel_shape", std::vector<int64_t>{1, 1}}};
  for (const char* name : {"a", "b", "c", "d", "out"})
    v = b.node("MaxPool", {v}, name, {1, 1, 16, 16}, pool);
  b.g.outputs = {"out"};
  verify(b.g);
  MemoryPlan chain = plan_memory(b.g, plan_fusion(b.g));
  EXPECT_EQ(chain.buffers.size(), 4u);  // out is the caller's
  EXPECT_EQ(chain.naive_bytes, 4 * 1024);
  EXPECT_EQ(chain.arena_bytes, 2 * 1024);

  for (Graph g : {sample_model(), composites(false)}) {
    run_passes(g, PassOptions{});
    std::vector<FusedGroup> groups = plan_fusion(g);
    MemoryPlan m = plan_memory(g, groups);
    EXPECT_LE(m.arena_bytes, m.naive_bytes);
    for (const auto& [n1, p1] : m.buffers) {
      EXPECT_EQ(p1.offset % kArenaAlignment, 0) << n1;
      for (const auto& [n2, p2] : m.buffers) {
        if (n1 >= n2) continue;
        bool live_together = p1.first <= p2.last && p2.first <= p1.last;
        bool share_memory = p1.offset < p2.offset + p2.bytes && p2.offset < p1.offset + p1.bytes;
        EXPECT_FALSE(live_together && share_memory) << n1 << " and " << n2;
      }
    }
  }
}

// A Concat whose inputs are whole contiguous ranges of its output (the dimensions before the
// axis are 1) is computed in place: its inputs' kernels write into its output, which is live
// from the first of them; with a batch of 2, an input that is also a model output, or one
// that is the model's input, it is a kernel as before.
TEST(GraphMemory, ConcatsOfContiguousPartsAreComputedInPlace) {
  auto model = [](int64_t batch, bool part_is_output, bool part_is_input) {
    GraphBuilder b;
    std::string x = b.input("x", {batch, 16, 8, 8});
    std::map<std::string, Attr> pool = {{"kernel_shape", std::vector<int64_t>{1, 1}}};
    std::string a = b.node("MaxPool", {x}, "a", {batch, 16, 8, 8}, pool);
    std::string c = b.node("MaxPool", {a}, "c", {batch, 16, 8, 8}, pool);
    std::string cat = b.node("Concat", {part_is_input ? x : a, c}, "cat", {batch, 32, 8, 8},
                             {{"axis", int64_t{1}}});
    std::string out = b.node("MaxPool", {cat}, "out", {batch, 32, 8, 8}, pool);
    b.g.outputs = {out};
    if (part_is_output) b.g.outputs.push_back(a);
    verify(b.g);
    return b.g;
  };
  Graph g = model(1, false, false);
  std::vector<FusedGroup> groups = plan_fusion(g);
  std::vector<InPlaceConcat> in_place = in_place_concats(g, groups);
  ASSERT_EQ(in_place.size(), 1u);
  EXPECT_EQ(in_place[0].output, "cat");
  ASSERT_EQ(in_place[0].parts.size(), 2u);
  EXPECT_EQ(in_place[0].parts[1], (std::pair<std::string, int64_t>{"c", 16 * 64 * 4}));
  std::vector<FusedGroup> kernels = without_in_place(groups, in_place);
  EXPECT_EQ(kernels.size() + 1, groups.size());
  MemoryPlan m = plan_memory(g, kernels, in_place);
  const BufferPlacement &cat = m.buffers.at("cat"), &a = m.buffers.at("a"), &c = m.buffers.at("c");
  EXPECT_EQ(a.offset, cat.offset);
  EXPECT_EQ(c.offset, cat.offset + 16 * 64 * 4);
  EXPECT_EQ(cat.first, a.first);  // live from a's kernel to out's
  EXPECT_EQ(cat.last, kernels.size() - 1);
  EXPECT_EQ(in_place_json(in_place)[0]["parts"][1]["offset"], 16 * 64 * 4);
  for (auto [batch, output, input] :
       {std::tuple{2, false, false}, {1, true, false}, {1, false, true}}) {
    Graph h = model(batch, output, input);
    EXPECT_TRUE(in_place_concats(h, plan_fusion(h)).empty()) << batch << output << input;
  }
}

// The generic kernels of the blocked-layout operators (node_te: what a ConvNCHWc becomes when
// no template takes its group) compute what the workloads' references compute, on odd blocks,
// strides, padding and dilation.
TEST(GraphLayoutOps, GenericConvKernelsMatchTheWorkloadReference) {
  for (const char* spec :
       {"conv2d_nchwc(N=1,C=6,H=7,W=9,K=8,R=3,S=3,stride=2,pad=1,ic_block=3,oc_block=4,epilogue="
        "bias)",
        "conv2d_nchwc(N=2,C=8,H=5,W=6,K=8,R=1,S=1,ic_block=8,oc_block=8)",
        "depthwise_conv2d_nchwc(N=2,C=8,H=6,W=5,R=3,S=3,pad=2,dilation=2,block=4)",
        // Grouped: blocks holding two groups (block-diagonal weights), blocks within a group.
        "conv2d_nchwc(N=1,C=16,H=5,W=6,K=16,R=3,S=3,pad=1,ic_block=8,oc_block=8,group=4,epilogue="
        "bias)",
        "conv2d_nchwc(N=2,C=16,H=5,W=5,K=32,R=1,S=1,stride=2,ic_block=4,oc_block=4,group=2)",
        // Blocks straddling two groups of 24 (the last block starting early).
        "conv2d_nchwc(N=1,C=96,H=5,W=4,K=96,R=3,S=3,pad=1,ic_block=16,oc_block=16,group=4,epilogue=bias)"}) {
    SCOPED_TRACE(spec);
    tf::Workload w = tf::parse_workload(spec);
    tf::OpGraph og = tf::build_op(w);
    bool depthwise = w.op.rfind("depthwise", 0) == 0;
    Graph g;
    std::vector<std::string> names;
    std::vector<TeOperand> in;
    for (const tf::ir::Tensor& t : og.inputs) {
      g.values[t->name] = Value{t->name, DType::F32, t->shape, std::nullopt};
      g.inputs.push_back(t->name);
      names.push_back(t->name);
      in.push_back(TeOperand{t->shape, t, std::nullopt});
    }
    int64_t s = w.get("stride"), p = w.get("pad"), d = w.get("dilation");
    Node n{"conv",
           "ConvNCHWc",
           names,
           {"y"},
           {{"strides", std::vector<int64_t>{s, s}},
            {"pads", std::vector<int64_t>{p, p, p, p}},
            {"dilations", std::vector<int64_t>{d, d}},
            {"group", depthwise ? w.get("C") : w.get("group")}}};
    g.values["y"] = Value{"y", DType::F32, og.output->shape, std::nullopt};
    g.nodes.push_back(n);
    g.outputs = {"y"};
    verify(g);
    ASSERT_EQ(infer_node(n, g, g.opset)[0].shape, og.output->shape);
    og.output = node_te(g, n, in, "t_")[0];
    tf::ir::Schedule sch(og.output);
    for (tf::ir::Stage* st : sch.stages()) {
      if (st->op() != og.output && !st->op()->reduce()) st->compute_inline();
    }
    tf::testing::Comparison c =
        tf::testing::run_and_compare(og, tf::lower(sch, og.inputs, "k").func);
    EXPECT_TRUE(c.ok()) << c.str();
  }
}

namespace {

// Node `n` of `g` (its inputs declared, its output "y" not yet) compiled as a generic kernel
// of `args` (`in`, node_te's view of the inputs): the kernel's LLVM IR for AVX-512 (znver4),
// and its output on this machine for `feeds` (the inputs of `args`, by name) with the
// reference evaluation's.
struct GenericNodeRun {
  std::string ll;
  std::vector<float> got, want;
};
GenericNodeRun run_generic_node(Graph& g, const Node& n, const std::vector<TeOperand>& in,
                                const std::vector<tf::ir::Tensor>& args,
                                const std::map<std::string, HostTensor>& feeds) {
  const Shape out = infer_node(n, g, g.opset)[0].shape;
  g.values["y"] = Value{"y", DType::F32, out, std::nullopt};
  g.nodes.push_back(n);
  g.outputs = {"y"};
  verify(g);
  tf::ir::Tensor y = node_te(g, n, in, "t_")[0];
  const tf::Target avx512 = tf::parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4");
  GenericNodeRun r;
  r.ll = tf::codegen_llvm(tf::lower_generic_kernel(y, args, avx512, "k", n.op), avx512, tf::CodegenOutput::LLVM).data;
  auto lib = tf::testing::build_for_host(tf::lower_generic_kernel(y, args, tf::host_target(), "k", n.op));
  std::vector<std::vector<float>> data;
  for (const tf::ir::Tensor& a : args) data.push_back(feeds.at(a->name).f);
  r.got.assign(static_cast<size_t>(num_elements(out)), NAN);
  std::vector<float*> ptrs;
  for (std::vector<float>& d : data) ptrs.push_back(d.data());
  ptrs.push_back(r.got.data());
  EXPECT_EQ(lib->call(ptrs), 0);
  r.want = run_reference(g, feeds).at("y").f;
  return r;
}

}  // namespace

// NCHW pools as compiled by the generic schedule (vectorized over output columns): a window
// element's columns are one masked load (a stride-2 window's a masked load shuffled), not a
// gather of clamped columns (an NCHW 3x3 max pool over 8x480x28x28 9.2 -> 2.2 ms, S3D's 3-D
// pools), and the results are the reference's at every border, ceil mode and dilation too.
TEST(GraphNodeTe, NchwPoolsReadWindowColumnsContiguously) {
  struct Case {
    const char* op;
    int64_t k, stride, pad, dilation, ceil, include_pad;
  };
  for (const Case& c : {Case{"MaxPool", 3, 1, 1, 1, 0, 0}, Case{"MaxPool", 3, 2, 1, 1, 0, 0},
                        Case{"MaxPool", 3, 2, 0, 1, 1, 0}, Case{"MaxPool", 3, 1, 2, 2, 0, 0},
                        Case{"AveragePool", 3, 1, 1, 1, 0, 0}, Case{"AveragePool", 3, 2, 1, 1, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << c.op << " stride " << c.stride << " pad " << c.pad << " dilation "
                                    << c.dilation << " ceil " << c.ceil);
    const Shape shape = {2, 3, 13, 37};
    Graph g;
    g.opset = 13;
    g.values["x"] = Value{"x", DType::F32, shape, std::nullopt};
    g.inputs = {"x"};
    Node n{"pool", c.op, {"x"}, {"y"},
           {{"kernel_shape", std::vector<int64_t>{c.k, c.k}},
            {"strides", std::vector<int64_t>{c.stride, c.stride}},
            {"pads", std::vector<int64_t>{c.pad, c.pad, c.pad, c.pad}},
            {"ceil_mode", c.ceil}}};
    if (c.dilation > 1) n.attrs["dilations"] = std::vector<int64_t>{c.dilation, c.dilation};
    if (std::string(c.op) == "AveragePool") n.attrs["count_include_pad"] = c.include_pad;
    tf::ir::Tensor x = tf::ir::placeholder("x", shape);
    GenericNodeRun r = run_generic_node(g, n, {TeOperand{shape, x, std::nullopt}}, {x},
                                        {{"x", random_floats(shape, 11, -3.0f, 3.0f)}});
    if (c.pad > 0) {
      EXPECT_NE(r.ll.find("masked.load"), std::string::npos) << "the padded columns read under a mask";
    }
    EXPECT_EQ(r.ll.find("gather"), std::string::npos) << "the window's columns gathered";
    ASSERT_EQ(r.got.size(), r.want.size());
    for (size_t k = 0; k < r.got.size(); ++k)
      EXPECT_NEAR(r.got[k], r.want[k], 1e-6f * (1 + std::fabs(r.want[k]))) << k;
  }
}

// A constant-mode Pad of the columns and a Concat along them, as compiled: their input
// positions unclamped under the selects that pick them, so each is a masked load, not a
// gather (Pad over 64x56x56 3.6x faster, Concat 3.3x), with the reference's results.
TEST(GraphNodeTe, PadAndConcatAlongColumnsReadContiguously) {
  const Shape shape = {2, 3, 5, 37}, other = {2, 3, 5, 20};
  for (const char* op : {"Pad", "Concat"}) {
    SCOPED_TRACE(op);
    Graph g;
    g.opset = 13;
    g.values["x"] = Value{"x", DType::F32, shape, std::nullopt};
    g.inputs = {"x"};
    Node n{"n", op, {"x"}, {"y"}, {}};
    tf::ir::Tensor x = tf::ir::placeholder("x", shape), z = tf::ir::placeholder("z", other);
    std::vector<TeOperand> in = {TeOperand{shape, x, std::nullopt}};
    std::vector<tf::ir::Tensor> args = {x};
    std::map<std::string, HostTensor> feeds = {{"x", random_floats(shape, 3, -3.0f, 3.0f)}};
    if (std::string(op) == "Pad") {
      g.values["pads"] = Value{"pads", DType::I64, {8}, HostTensor::ints({8}, {0, 0, 1, 2, 0, 0, 2, 19})};
      n.inputs.push_back("pads");
      in.push_back(TeOperand{{8}, nullptr, std::nullopt});
    } else {
      g.values["z"] = Value{"z", DType::F32, other, std::nullopt};
      g.inputs.push_back("z");
      n.inputs.push_back("z");
      n.attrs["axis"] = int64_t{3};
      in.push_back(TeOperand{other, z, std::nullopt});
      args.push_back(z);
      feeds["z"] = random_floats(other, 4, -3.0f, 3.0f);
    }
    GenericNodeRun r = run_generic_node(g, n, in, args, feeds);
    EXPECT_NE(r.ll.find("masked.load"), std::string::npos);
    EXPECT_EQ(r.ll.find("gather"), std::string::npos) << "the columns gathered";
    EXPECT_EQ(r.got, r.want);
  }
}

// Pow by a constant as compiled: an integral exponent of any size keeps a negative base's
// sign, as std::pow and the reference evaluation do (exp(p log x) would be NaN there).
TEST(GraphNodeTe, PowByAConstantMatchesStdPow) {
  const Shape shape = {3, 7};
  for (double p : {2.0, 3.0, -3.0, 9.0, 10.0, 11.0, -11.0, 0.5, -0.5, 2.5}) {
    SCOPED_TRACE(p);
    bool positive_only = p != std::round(p);
    Graph g;
    g.values["x"] = Value{"x", DType::F32, shape, std::nullopt};
    g.inputs = {"x"};
    g.values["e"] = Value{"e", DType::F32, {}, HostTensor::floats({}, {static_cast<float>(p)})};
    Node n{"pow", "Pow", {"x", "e"}, {"y"}, {}};
    g.values["y"] = Value{"y", DType::F32, shape, std::nullopt};
    g.nodes.push_back(n);
    g.outputs = {"y"};
    verify(g);
    tf::ir::Tensor x = tf::ir::placeholder("x", shape);
    tf::ir::Tensor y = node_te(g, n, {TeOperand{shape, x, std::nullopt}, TeOperand{{}, nullptr, p}}, "t_")[0];
    tf::ir::Schedule sch(y);
    auto lib = tf::testing::build_for_host(tf::lower(sch, {x}, "k").func);
    // |x| in [0.3, 1.5] (x^-11 stays finite), every other one negative unless p is not integral.
    HostTensor in = random_floats(shape, 5, 0.3f, 1.5f);
    for (size_t k = 0; k < in.f.size(); k += 2) in.f[k] = positive_only ? in.f[k] : -in.f[k];
    std::vector<float> xs = in.f, out(xs.size(), -7.0f);
    ASSERT_EQ(lib->call({xs.data(), out.data()}), 0);
    auto want = run_reference(g, {{"x", in}}).at("y");
    for (size_t k = 0; k < xs.size(); ++k) {
      double ref = std::pow(static_cast<double>(xs[k]), p);
      EXPECT_NEAR(out[k], ref, 1e-5 * (1 + std::fabs(ref))) << "x = " << xs[k];
      EXPECT_NEAR(want.f[k], ref, 1e-5 * (1 + std::fabs(ref))) << "reference, x = " << xs[k];
    }
  }
}

// Pow of a computed exponent as compiled, against std::pow: negative bases with integral
// exponents (odd and even), NaN for a negative base and a fractional exponent, zero bases
// (0 and inf results), x^0 = 1 and 1^y = 1.
TEST(GraphNodeTe, PowOfAComputedExponentMatchesStdPow) {
  std::vector<float> xs, ys;
  for (float a : {-2.0f, -1.5f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f, 3.0f}) {
    for (float b : {-3.0f, -2.0f, -1.0f, 0.0f, 0.5f, 1.0f, 2.0f, 2.5f, 3.0f, 7.0f}) {
      xs.push_back(a);
      ys.push_back(b);
    }
  }
  xs.push_back(std::nanf(""));
  ys.push_back(0.0f);  // NaN^0 = 1
  xs.push_back(1.0f);
  ys.push_back(std::nanf(""));  // 1^NaN = 1
  const Shape shape = {static_cast<int64_t>(xs.size())};
  Graph g;
  for (const char* v : {"x", "e"}) {
    g.values[v] = Value{v, DType::F32, shape, std::nullopt};
    g.inputs.push_back(v);
  }
  Node n{"pow", "Pow", {"x", "e"}, {"y"}, {}};
  g.values["y"] = Value{"y", DType::F32, shape, std::nullopt};
  g.nodes.push_back(n);
  g.outputs = {"y"};
  verify(g);
  tf::ir::Tensor x = tf::ir::placeholder("x", shape), e = tf::ir::placeholder("e", shape);
  tf::ir::Tensor y =
      node_te(g, n, {TeOperand{shape, x, std::nullopt}, TeOperand{shape, e, std::nullopt}}, "t_")[0];
  tf::ir::Schedule sch(y);
  auto lib = tf::testing::build_for_host(tf::lower(sch, {x, e}, "k").func);
  std::vector<float> out(xs.size(), -7.0f);
  ASSERT_EQ(lib->call({xs.data(), ys.data(), out.data()}), 0);
  for (size_t k = 0; k < xs.size(); ++k) {
    double ref = std::pow(static_cast<double>(xs[k]), static_cast<double>(ys[k]));
    std::string at = "pow(" + std::to_string(xs[k]) + ", " + std::to_string(ys[k]) + ") = " + std::to_string(out[k]);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(out[k])) << at;
    } else if (std::isinf(ref)) {
      EXPECT_EQ(out[k], ref) << at;
    } else {
      EXPECT_NEAR(out[k], ref, 1e-5 * (1 + std::fabs(ref))) << at;
    }
  }
}

namespace {

// One node of `op` over float inputs `xs` (a kernel argument each, in the input positions
// `consts` leaves free; positions past them are omitted) and constants `consts`, compiled alone; returns the compiled output and the reference evaluation's.
std::pair<std::vector<float>, std::vector<float>> compile_one(
    const std::string& op, const std::map<std::string, Attr>& attrs,
    const std::vector<HostTensor>& xs, const std::vector<std::pair<size_t, HostTensor>>& consts) {
  Graph g;
  g.opset = 13;
  Node n{"n", op, {}, {"y"}, attrs};
  std::vector<TeOperand> operands;
  std::vector<tf::ir::Tensor> args;
  std::vector<HostTensor> arg_data;  // what each argument holds
  std::map<std::string, HostTensor> feeds;
  size_t next_x = 0, count = xs.size();
  for (const auto& c : consts) count = std::max(count + 1, c.first + 1);
  for (size_t k = 0; k < count; ++k) {
    std::string name = "in" + std::to_string(k);
    auto c = std::find_if(consts.begin(), consts.end(), [&](const auto& p) { return p.first == k; });
    if (c == consts.end() && next_x == xs.size()) {  // an omitted optional input
      n.inputs.push_back("");
      operands.push_back(TeOperand{});
      continue;
    }
    n.inputs.push_back(name);
    if (c != consts.end()) {
      const HostTensor& t = c->second;
      g.values[name] = Value{name, t.dtype, t.shape, t};
      // As the model compiler has them: one-element constants folded in, an int64 one only
      // where the node computes with it (not a parameter such as an axis).
      // Others it reads as data (Gather's table of indices) are kernel arguments.
      bool data = t.dtype == DType::F32 || reads_as_data(g, n, k);
      if (data && t.size() > 1) {
        args.push_back(tf::ir::placeholder(name, t.shape));
        arg_data.push_back(t);
        operands.push_back(TeOperand{t.shape, args.back(), std::nullopt});
        continue;
      }
      operands.push_back(
          TeOperand{t.shape, nullptr, data ? std::optional<double>(t.as_double(0)) : std::nullopt});
      continue;
    }
    const HostTensor& x = xs.at(next_x++);
    g.values[name] = Value{name, x.dtype, x.shape, std::nullopt};
    g.inputs.push_back(name);
    feeds[name] = x;
    args.push_back(tf::ir::placeholder(name, x.shape));
    arg_data.push_back(x);
    operands.push_back(TeOperand{x.shape, args.back(), std::nullopt});
  }
  TypeShape y_type = infer_node(n, g, g.opset).at(0);
  Shape out = y_type.shape;
  g.values["y"] = Value{"y", y_type.dtype, out, std::nullopt};
  g.nodes.push_back(n);
  g.outputs = {"y"};
  verify(g);
  tf::ir::Tensor y = node_te(g, n, operands, "t_")[0];
  tf::ir::Schedule sch(y);
  auto lib = tf::testing::build_for_host(tf::lower(sch, args, "k").func);
  std::vector<std::vector<float>> bufs;
  std::vector<float*> ptrs;
  // Compiled kernels hold bools as 0.0 / 1.0 floats (graph/node_te.h).
  auto as_floats = [](const HostTensor& t) {
    if (t.dtype == DType::F32) return t.f;
    return std::vector<float>(t.i.begin(), t.i.end());
  };
  for (const HostTensor& x : arg_data) bufs.push_back(as_floats(x));
  bufs.emplace_back(num_elements(out), -7.0f);
  for (auto& b : bufs) ptrs.push_back(b.data());
  EXPECT_EQ(lib->call(ptrs), 0);
  return {bufs.back(), as_floats(run_reference(g, feeds).at("y"))};
}

}  // namespace

// Activations whose ONNX node tests are all older than opset 11, compiled and in the
// reference, against their formulas in double; large inputs stay finite (no exp overflow in
// the branch not taken).
TEST(GraphNodeTe, ActivationsWithoutOpset11NodeTestsMatchTheirFormulas) {
  std::vector<float> xs = {-100, -20, -3, -1.5f, -1, -0.25f, 0, 0.25f, 0.9f, 1, 1.1f, 2, 30, 100};
  HostTensor x = HostTensor::floats({static_cast<int64_t>(xs.size())}, xs);
  const double sa = 1.67326319217681884765625, sg = 1.05070102214813232421875;
  struct Case {
    std::string op;
    std::map<std::string, Attr> attrs;
    std::function<double(double)> f;
  };
  std::vector<Case> cases = {
      {"Elu", {}, [](double v) { return v < 0 ? std::expm1(v) : v; }},
      {"Elu", {{"alpha", 0.5f}}, [](double v) { return v < 0 ? 0.5 * std::expm1(v) : v; }},
      {"Selu", {}, [&](double v) { return sg * (v > 0 ? v : sa * std::expm1(v)); }},
      {"Selu", {{"alpha", 2.0f}, {"gamma", 3.0f}}, [](double v) { return 3 * (v > 0 ? v : 2 * std::expm1(v)); }},
      {"Celu", {}, [](double v) { return std::max(0.0, v) + std::min(0.0, std::expm1(v)); }},
      {"Celu", {{"alpha", 2.0f}}, [](double v) { return std::max(0.0, v) + std::min(0.0, 2 * std::expm1(v / 2)); }},
      {"ThresholdedRelu", {}, [](double v) { return v > 1 ? v : 0; }},
      {"ThresholdedRelu", {{"alpha", 0.2f}}, [](double v) { return v > 0.2f ? v : 0; }},
      {"Softsign", {}, [](double v) { return v / (1 + std::fabs(v)); }},
      {"Sin", {}, [](double v) { return std::sin(v); }},
      {"Cos", {}, [](double v) { return std::cos(v); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + (c.attrs.empty() ? "" : " with attributes"));
    auto [compiled, reference] = compile_one(c.op, c.attrs, {x}, {});
    for (size_t k = 0; k < xs.size(); ++k) {
      double want = c.f(xs[k]);
      EXPECT_NEAR(compiled[k], want, 2e-6 * (1 + std::fabs(want))) << "x = " << xs[k];
      EXPECT_NEAR(reference[k], want, 2e-6 * (1 + std::fabs(want))) << "reference, x = " << xs[k];
    }
  }
}

// Integer arithmetic on int64 values (floats inside compiled kernels), compiled and in the
// reference, against results written out: Div truncates toward zero (not the floor; exact where
// a float quotient would round up), Mod with either sign convention, Cast from float
// truncates, Clip, Max and Pow of integers; Gather by computed indices (negative ones count from
// the end; compiled, out-of-range ones clamp), OneHot (negative indices, one out of range: no
// class on), CumSum each way.
TEST(GraphNodeTe, IntegerValuesAndIndicesMatchTheReference) {
  auto ints = [](Shape s, std::vector<int64_t> v) {
    return HostTensor::ints(std::move(s), std::move(v));
  };
  auto expect = [](const std::pair<std::vector<float>, std::vector<float>>& got,
                   const std::vector<float>& want, const std::string& what) {
    EXPECT_EQ(got.first, want) << what << ", compiled";
    EXPECT_EQ(got.second, want) << what << ", reference";
  };
  HostTensor a = ints({9}, {7, -7, 7, -7, 16777216, -16777215, 0, 16777213, 16777215});
  HostTensor b = ints({9}, {2, 2, -2, -2, 3, 7, 5, 2, 16777216});
  expect(compile_one("Div", {}, {a, b}, {}), {3, -3, -3, 3, 5592405, -2396745, 0, 8388606, 0},
         "Div");
  HostTensor m = ints({4}, {7, -7, 7, -7}), d = ints({4}, {3, 3, -3, -3});
  expect(compile_one("Mod", {}, {m, d}, {}), {1, 2, -2, -1}, "Mod");
  expect(compile_one("Mod", {{"fmod", int64_t{1}}}, {m, d}, {}), {1, -1, 1, -1}, "Mod fmod=1");
  HostTensor f = HostTensor::floats({5}, {-2.7f, -0.5f, 0.5f, 2.7f, 3.0f});
  expect(compile_one("Cast", {{"to", int64_t{7}}}, {f}, {}), {-2, 0, 0, 2, 3}, "Cast to int64");
  expect(compile_one("Clip", {}, {m}, {{1, ints({}, {-5})}, {2, ints({}, {5})}}), {5, -5, 5, -5},
         "Clip");
  expect(compile_one("Max", {}, {m, d}, {}), {7, 3, 7, -3}, "Max");
  // Pow of integers: products, the parity of -1's exponent beyond 24 factors, truncated
  // reciprocals; an integral float exponent the same.
  expect(compile_one(
             "Pow", {},
             {ints({8}, {2, -3, 5, -1, -1, 2, 1, 0}), ints({8}, {3, 3, 0, 25, 26, -1, -5, 2})}, {}),
         {8, -27, 1, -1, 1, 0, 1, 0}, "Pow of int64");
  expect(compile_one("Pow", {},
                     {ints({3}, {4, -9, 2}), HostTensor::floats({3}, {2.0f, 3.0f, 24.0f})}, {}),
         {16, -729, 16777216}, "Pow of int64 by float32");
  HostTensor table = HostTensor::floats({5, 2}, {0, 1, 10, 11, 20, 21, 30, 31, 40, 41});
  expect(compile_one("Gather", {}, {table, ints({2, 2}, {-1, 0, 4, -5})}, {}),
         {40, 41, 0, 1, 40, 41, 0, 1}, "Gather");
  // More constant indices than are unrolled into the code: read from a table.
  std::vector<int64_t> many;
  std::vector<float> picked;
  for (int64_t k = 0; k < kMaxUnrolledIndices + 6; ++k) {
    many.push_back(k % 7 - 2);  // -2 .. 4
    int64_t row = (k % 7 - 2 + 5) % 5;
    picked.insert(picked.end(), {static_cast<float>(10 * row), static_cast<float>(10 * row + 1)});
  }
  expect(compile_one("Gather", {}, {table}, {{1, ints({kMaxUnrolledIndices + 6}, many)}}), picked,
         "Gather of a table of constant indices");
  HostTensor onoff = HostTensor::floats({2}, {0.5f, 2.0f});
  expect(compile_one("OneHot", {}, {ints({4}, {0, -1, 2, 9}), onoff}, {{1, ints({}, {3})}}),
         {2, .5, .5, .5, .5, 2, .5, .5, 2, .5, .5, .5}, "OneHot");
  expect(compile_one("OneHot", {{"axis", int64_t{0}}}, {ints({2}, {1, 0}), onoff},
                     {{1, ints({1}, {2})}}),
         {.5, 2, 2, .5}, "OneHot on axis 0");
  HostTensor x = HostTensor::floats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor axis = ints({}, {1});
  expect(compile_one("CumSum", {}, {x}, {{1, axis}}), {1, 3, 6, 4, 9, 15}, "CumSum");
  expect(compile_one("CumSum", {{"exclusive", int64_t{1}}}, {x}, {{1, axis}}), {0, 1, 3, 0, 4, 9},
         "CumSum exclusive");
  expect(compile_one("CumSum", {{"reverse", int64_t{1}}}, {x}, {{1, axis}}), {6, 5, 3, 15, 11, 6},
         "CumSum reverse");
  expect(
      compile_one("CumSum", {{"reverse", int64_t{1}}, {"exclusive", int64_t{1}}}, {x}, {{1, axis}}),
      {5, 3, 0, 11, 6, 0}, "CumSum reverse exclusive");
  expect(compile_one("CumSum", {}, {ints({2, 2}, {1, -2, 3, 4})}, {{1, ints({1}, {-2})}}),
         {1, -2, 4, 2}, "CumSum of int64 along axis -2");
}

// Pooling of channel blocks (what transform-conv-layout makes of MaxPool and AveragePool after
// a blocked convolution), compiled and in the reference, is the NCHW pooling's result in
// blocks: padding (-inf for MaxPool: every input is negative), strides, dilations, ceil_mode's
// overhang, count_include_pad, auto_pad.
TEST(GraphNodeTe, PoolingOfChannelBlocksIsPoolingInBlocks) {
  using Ints = std::vector<int64_t>;
  const int64_t C = 8, H = 7, W = 9, b = 4;
  HostTensor x = random_floats({1, C, H, W}, 5, -2.0f, -0.5f);
  HostTensor xb = HostTensor::floats({1, C / b, H, W, b}, std::vector<float>(x.f.size()));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < H * W; ++p)
      xb.f[((c / b) * H * W + p) * b + c % b] = x.f[c * H * W + p];
  struct Case {
    std::string op;
    std::map<std::string, Attr> attrs;  // 2-D
  };
  std::vector<Case> cases = {
      {"MaxPool",
       {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}},
      {"MaxPool",
       {{"kernel_shape", Ints{2, 3}},
        {"dilations", Ints{2, 1}},
        {"pads", Ints{0, 1, 1, 0}},
        {"ceil_mode", int64_t{1}},
        {"strides", Ints{2, 2}}}},
      {"AveragePool",
       {{"kernel_shape", Ints{3, 3}},
        {"strides", Ints{2, 2}},
        {"pads", Ints{1, 1, 1, 1}},
        {"ceil_mode", int64_t{1}}}},
      {"AveragePool",
       {{"kernel_shape", Ints{3, 2}},
        {"pads", Ints{1, 0, 1, 1}},
        {"count_include_pad", int64_t{1}}}},
      {"AveragePool", {{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " case " + std::to_string(&c - cases.data()));
    std::map<std::string, Attr> attrs5 = c.attrs;
    for (auto& [name, v] : attrs5) {
      if (name == "kernel_shape" || name == "strides" || name == "dilations") {
        Ints a = std::get<Ints>(v);
        v = Ints{a[0], a[1], 1};
      } else if (name == "pads") {
        Ints a = std::get<Ints>(v);
        v = Ints{a[0], a[1], 0, a[2], a[3], 0};
      }
    }
    auto plain = compile_one(c.op, c.attrs, {x}, {});
    auto blocked = compile_one(c.op, attrs5, {xb}, {});
    ASSERT_EQ(blocked.first.size(), plain.second.size());
    const int64_t area = static_cast<int64_t>(plain.second.size()) / C;
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < area; ++p) {
        float want = plain.second[static_cast<size_t>(ch * area + p)];
        size_t at = static_cast<size_t>(((ch / b) * area + p) * b + ch % b);
        EXPECT_NEAR(blocked.first[at], want, 1e-6) << "compiled, channel " << ch << " at " << p;
        EXPECT_NEAR(blocked.second[at], want, 1e-6) << "reference, channel " << ch << " at " << p;
        EXPECT_NEAR(plain.first[static_cast<size_t>(ch * area + p)], want, 1e-6) << "NCHW compiled";
      }
  }
}

// Softmax, LogSoftmax and LayerNormalization over a last axis that is a multiple of 16 reduce
// in two stages (16 partial results per row first); compiled, they match the reference (one
// stage, in double) as the one-stage forms do. A row of large values and one with a -1e30
// check the softmaxes take the max before the exponentials.
TEST(GraphNodeTe, TwoStageRowReductionsMatchTheReference) {
  for (int64_t len : {32, 48, 17, 16}) {  // two-stage, two-stage, one stage, one stage
    SCOPED_TRACE(tf::str("row of ", len));
    HostTensor x = random_floats({3, 2, len}, 11, -4.0f, 4.0f);
    HostTensor spread = x;
    for (int64_t k = 0; k < len; ++k) spread.f[k] += 80.0f;  // exp overflows without the max
    spread.f[static_cast<size_t>(len + 3)] = -1e30f;
    auto close = [](const std::pair<std::vector<float>, std::vector<float>>& r, double tol) {
      ASSERT_EQ(r.first.size(), r.second.size());
      for (size_t k = 0; k < r.first.size(); ++k)
        EXPECT_NEAR(r.first[k], r.second[k], tol * (1 + std::fabs(r.second[k]))) << k;
    };
    {
      SCOPED_TRACE("Softmax");
      close(compile_one("Softmax", {}, {spread}, {}), 1e-6);
    }
    {
      SCOPED_TRACE("LogSoftmax");
      close(compile_one("LogSoftmax", {}, {spread}, {}), 1e-6);
    }
    SCOPED_TRACE("LayerNormalization");
    HostTensor scale = random_floats({len}, 12), bias = random_floats({len}, 13);
    close(compile_one("LayerNormalization", {}, {x}, {{1, scale}, {2, bias}}), 2e-5);
  }
}

// Hardmax, compiled and in the reference: 1 at the first largest element of each row (ties go
// to the first, a NaN is never picked, a row of NaN has none), along the last axis (rows of 32:
// the two-stage max) and along axis 0.
TEST(GraphNodeTe, HardmaxPicksTheFirstLargest) {
  HostTensor x = random_floats({3, 32}, 21);
  x.f[5] = x.f[9] = 7.0f;  // row 0: a tie, the first wins
  x.f[32 + 4] = NAN;       // row 1: a NaN beside the largest
  x.f[32 + 30] = 5.0f;
  for (int64_t k = 64; k < 96; ++k) x.f[k] = NAN;  // row 2: nothing to pick
  std::vector<float> want(96, 0.0f);
  want[5] = want[32 + 30] = 1.0f;
  auto got = compile_one("Hardmax", {}, {x}, {});
  EXPECT_EQ(got.first, want) << "compiled";
  EXPECT_EQ(got.second, want) << "reference";
  HostTensor y = HostTensor::floats({3, 2}, {1, 4, 3, 4, 3, 0});
  auto cols = compile_one("Hardmax", {{"axis", int64_t{0}}}, {y}, {});
  EXPECT_EQ(cols.first, (std::vector<float>{0, 1, 1, 0, 0, 0})) << "compiled, axis 0";
  EXPECT_EQ(cols.second, (std::vector<float>{0, 1, 1, 0, 0, 0})) << "reference, axis 0";
}

// Pad as compiled and in the reference, against numpy.pad's results: constant (with the
// default 0, a constant value and a computed one), reflect past one period, edge, negative
// pads (cropping), and the axes input.
TEST(GraphNodeTe, PadMatchesNumpy) {
  HostTensor row = HostTensor::floats({3}, {1, 2, 3});
  auto pads = [](std::vector<int64_t> p) { return HostTensor::ints({static_cast<int64_t>(p.size())}, p); };
  auto mode = [](const char* m) { return std::map<std::string, Attr>{{"mode", std::string(m)}}; };
  auto expect = [](const std::pair<std::vector<float>, std::vector<float>>& got, const std::vector<float>& want) {
    EXPECT_EQ(got.first, want) << "compiled";
    EXPECT_EQ(got.second, want) << "reference";
  };
  expect(compile_one("Pad", mode("reflect"), {row}, {{1, pads({4, 5})}}), {1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2});
  expect(compile_one("Pad", mode("edge"), {row}, {{1, pads({2, 1})}}), {1, 1, 1, 2, 3, 3});
  expect(compile_one("Pad", {}, {row}, {{1, pads({1, 2})}}), {0, 1, 2, 3, 0, 0});
  expect(compile_one("Pad", {}, {row}, {{1, pads({-1, 1})}, {2, HostTensor::floats({}, {9})}}), {2, 3, 9});
  expect(compile_one("Pad", {}, {row, HostTensor::floats({}, {-4})}, {{1, pads({2, -2})}}), {-4, -4, 1});
  std::vector<float> grid(12);
  for (int k = 0; k < 12; ++k) grid[k] = static_cast<float>(k);
  HostTensor y = HostTensor::floats({3, 4}, grid);
  expect(compile_one("Pad", mode("reflect"), {y}, {{1, pads({1, 2, 0, 3})}}),
         {6, 5, 4, 5, 6, 7, 6, 5, 4, 2, 1, 0, 1, 2, 3, 2, 1, 0, 6, 5, 4, 5, 6, 7, 6, 5, 4,
          10, 9, 8, 9, 10, 11, 10, 9, 8});
  // axes (opset 18's input 3): only the last axis is padded.
  expect(compile_one("Pad", mode("edge"), {y}, {{1, pads({0, 1})}, {3, HostTensor::ints({1}, {-1})}}),
         {0, 1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 11});
}

// Resize interpolating the innermost axis and another (bilinear and bicubic upsampling of an
// image, a downsampling) computes the innermost first, into a stage of its own (`_rows`), then
// the others from whole rows of it; compiled and in the reference (one pass over the product
// of the taps), the same within float32 rounding. Nearest and one-axis resizes stay one stage.
TEST(GraphNodeTe, ResizeInterpolatesTheInnermostAxisFirst) {
  const Shape shape = {1, 2, 5, 7};
  HostTensor x = random_floats(shape, 13, -2, 3);
  struct Case {
    const char* mode;
    std::vector<float> scales;
    bool rows;  // a separate stage for the innermost axis
  };
  for (const Case& c : {Case{"linear", {1, 1, 2.4f, 2}, true}, Case{"cubic", {1, 1, 2.4f, 2}, true},
                        Case{"linear", {1, 1, 0.6f, 0.5f}, true}, Case{"nearest", {1, 1, 2.4f, 2}, false},
                        Case{"linear", {1, 1, 2.4f, 1}, false}}) {
    SCOPED_TRACE(std::string(c.mode) + " " + std::to_string(c.scales[2]) + " x " + std::to_string(c.scales[3]));
    std::map<std::string, Attr> attrs = {{"mode", std::string(c.mode)}};
    auto [compiled, reference] =
        compile_one("Resize", attrs, {x}, {{2, HostTensor::floats({4}, c.scales)}});  // no roi
    ASSERT_EQ(compiled.size(), reference.size());
    for (size_t k = 0; k < compiled.size(); ++k)
      ASSERT_NEAR(compiled[k], reference[k], 2e-6 * (1 + std::abs(reference[k]))) << "element " << k;
    // The stages node_te makes.
    Graph g;
    g.opset = 13;
    g.values["x"] = Value{"x", DType::F32, shape, std::nullopt};
    g.values["scales"] = Value{"scales", DType::F32, {4}, HostTensor::floats({4}, c.scales)};
    g.inputs = {"x"};
    Node n{"r", "Resize", {"x", "", "scales"}, {"y"}, attrs};
    TypeShape y = infer_node(n, g, g.opset).at(0);
    g.values["y"] = Value{"y", DType::F32, y.shape, std::nullopt};
    g.nodes.push_back(n);
    tf::ir::Tensor xt = tf::ir::placeholder("x", shape);
    tf::ir::Tensor out = node_te(g, n, {TeOperand{shape, xt, std::nullopt}, TeOperand{}, TeOperand{}}, "t_")[0];
    tf::ir::Schedule sch(out);
    bool rows = false;
    for (tf::ir::Stage* st : sch.stages()) rows |= st->op()->name.find("_rows") != std::string::npos;
    EXPECT_EQ(rows, c.rows);
  }
}

// InstanceNormalization (its node tests are of opset 6), compiled and in the reference, against
// its formula: per (n, c) the spatial mean and variance, then the channel's scale and bias.
TEST(GraphNodeTe, InstanceNormalizationMatchesItsFormula) {
  const Shape shape = {2, 3, 4, 5};
  HostTensor x = random_floats(shape, 11, -2, 3);
  HostTensor scale = HostTensor::floats({3}, {0.5f, -1.5f, 2});
  HostTensor bias = HostTensor::floats({3}, {0.25f, 0, -1});
  auto [compiled, reference] = compile_one("InstanceNormalization", {{"epsilon", 0.01f}}, {x, scale, bias}, {});
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int64_t l = 0; l < 20; ++l) mean += x.f[r * 20 + l] / 20.0;
    for (int64_t l = 0; l < 20; ++l) var += (x.f[r * 20 + l] - mean) * (x.f[r * 20 + l] - mean) / 20.0;
    for (int64_t l = 0; l < 20; ++l) {
      double want = (x.f[r * 20 + l] - mean) / std::sqrt(var + 0.01) * scale.f[r % 3] + bias.f[r % 3];
      EXPECT_NEAR(compiled[r * 20 + l], want, 1e-5) << "row " << r << ", element " << l;
      EXPECT_NEAR(reference[r * 20 + l], want, 1e-5) << "reference, row " << r << ", element " << l;
    }
  }
}

// Einsum (its node tests are of float64), compiled and in the reference, against loops
// written out: a batched matmul with a transposed operand, a transpose (nothing summed), a
// diagonal, the implicit output of "ij,j" (the labels used once: "i") and an outer product.
TEST(GraphNodeTe, EinsumMatchesLoopsWrittenOut) {
  HostTensor a = random_floats({2, 3, 4}, 21), b = random_floats({2, 5, 4}, 22);
  HostTensor sq = random_floats({4, 4}, 23), m = random_floats({3, 4}, 24), v = random_floats({4}, 25);
  auto check = [](const std::pair<std::vector<float>, std::vector<float>>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.first.size(), want.size());
    ASSERT_EQ(got.second.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_NEAR(got.first[k], want[k], 1e-5) << "compiled, element " << k;
      EXPECT_NEAR(got.second[k], want[k], 1e-5) << "reference, element " << k;
    }
  };
  auto eq = [](const char* e) { return std::map<std::string, Attr>{{"equation", std::string(e)}}; };
  std::vector<double> want;
  for (int bb = 0; bb < 2; ++bb)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) {
        double s = 0;
        for (int j = 0; j < 4; ++j) s += double(a.f[(bb * 3 + i) * 4 + j]) * b.f[(bb * 5 + k) * 4 + j];
        want.push_back(s);
      }
  check(compile_one("Einsum", eq("bij, bkj -> bik"), {a, b}, {}), want);
  want.clear();
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) want.push_back(m.f[i * 4 + j]);
  check(compile_one("Einsum", eq("ij->ji"), {m}, {}), want);
  want.clear();
  for (int i = 0; i < 4; ++i) want.push_back(sq.f[i * 4 + i]);
  check(compile_one("Einsum", eq("ii->i"), {sq}, {}), want);
  want.clear();
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += double(m.f[i * 4 + j]) * v.f[j];
    want.push_back(s);
  }
  check(compile_one("Einsum", eq("ij,j"), {m, v}, {}), want);
  want.clear();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) want.push_back(double(v.f[i]) * v.f[j]);
  check(compile_one("Einsum", eq("i,j->ij"), {v, v}, {}), want);
}

// Not, And, Or, Xor compiled (bools held as 0 / 1 floats) and in the reference, broadcast, against
// their truth tables (ONNX's node tests of them have bool outputs, which compiled models refuse).
TEST(GraphNodeTe, LogicalOpsMatchTheirTruthTables) {
  HostTensor a = HostTensor::ints({2, 2}, {0, 0, 1, 1}, DType::Bool);
  HostTensor b = HostTensor::ints({2}, {0, 1}, DType::Bool);
  auto expect = [](const std::pair<std::vector<float>, std::vector<float>>& got, const std::vector<float>& want) {
    EXPECT_EQ(got.first, want) << "compiled";
    EXPECT_EQ(got.second, want) << "reference";
  };
  expect(compile_one("Not", {}, {a}, {}), {1, 1, 0, 0});
  expect(compile_one("And", {}, {a, b}, {}), {0, 0, 0, 1});
  expect(compile_one("Or", {}, {a, b}, {}), {0, 1, 1, 1});
  expect(compile_one("Xor", {}, {a, b}, {}), {0, 1, 1, 0});
}

// lower-conv-transpose: ConvTransposes with constant weights become Pad/Reshape and a Conv
// that computes the same (reference evaluation before and after, then the whole pipeline
// compiled), over strides, dilations, pads larger than the window (cropping), output_padding,
// output_shape, groups and a bias; one with computed weights stays.
TEST(GraphPasses, LowersConvTransposeToConv) {
  struct Case {
    Shape x, w;
    std::map<std::string, Attr> attrs;
    bool bias;
  };
  using V = std::vector<int64_t>;
  std::vector<Case> cases = {
      {{1, 3, 4, 5}, {3, 2, 3, 3}, {}, false},
      {{1, 3, 4, 5}, {3, 2, 3, 3}, {{"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}, {"output_padding", V{1, 1}}}, true},
      {{2, 4, 3, 3}, {4, 3, 4, 2}, {{"strides", V{3, 2}}, {"dilations", V{2, 1}}, {"group", int64_t{2}}}, true},
      {{1, 2, 5, 5}, {2, 2, 3, 3}, {{"strides", V{2, 2}}, {"pads", V{4, 0, 3, 1}}}, false},
      {{1, 2, 3, 4}, {2, 3, 3, 3}, {{"strides", V{2, 2}}, {"output_shape", V{8, 9}}, {"auto_pad", std::string("SAME_UPPER")}}, true},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    GraphBuilder b;
    b.seed = static_cast<uint32_t>(10 + k);
    std::string x = b.input("x", c.x);
    std::vector<std::string> in = {x, b.weights("w", c.w)};
    int64_t group = c.attrs.count("group") ? std::get<int64_t>(c.attrs.at("group")) : 1;
    if (c.bias) in.push_back(b.weights("b", {c.w[1] * group}));
    std::string y = b.inferred("ConvTranspose", in, "y", c.attrs);
    b.g.outputs = {y};
    verify(b.g);
    Graph g = b.g;
    EXPECT_TRUE(lower_conv_transpose(g));
    verify(g);
    for (const Node& n : g.nodes) EXPECT_NE(n.op, "ConvTranspose");
    expect_same_outputs(b.g, g, c.x);
  }
  // Computed weights: nothing to do.
  GraphBuilder b;
  std::string x = b.input("x", {1, 2, 3, 3});
  std::string w = b.input("w", {2, 2, 3, 3});
  b.g.outputs = {b.node("ConvTranspose", {x, w}, "y", {1, 2, 5, 5})};
  EXPECT_FALSE(lower_conv_transpose(b.g));
}

// lower-scatter-nd: ScatterNDs with constant indices become a Gather of the updates and a
// Where (per layer of rows writing one position, for add and mul) that compute the same
// (reference evaluation before and after): whole rows and single elements, negative indices,
// a position written twice (none: the last row wins; add and mul: both count). Computed
// indices, or more rows on one position than the pass spreads over layers, stay.
TEST(GraphPasses, LowersScattersToGatherAndWhere) {
  struct Case {
    Shape idx_shape;
    std::vector<int64_t> idx;
    std::string reduction;
  };
  const Shape x_shape = {4, 3, 2};
  std::vector<Case> cases = {
      {{2, 1}, {1, -1}, "none"},                              // rows 1 and 3
      {{3, 1}, {2, 0, 2}, "none"},                            // row 2 twice: the second wins
      {{2, 2, 2}, {0, 1, 3, 2, 1, 0, -4, -3}, "none"},        // [4, 3] positions, negative ones
      {{4, 3}, {0, 0, 0, 3, 2, 1, 0, 0, 0, 1, 1, 1}, "add"},  // single elements, one twice
      {{3, 1}, {1, 1, 1}, "mul"},                             // one row three times
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    GraphBuilder b;
    b.seed = static_cast<uint32_t>(20 + k);
    std::string x = b.input("x", x_shape);
    std::string idx = b.constant("idx", HostTensor::ints(c.idx_shape, c.idx));
    Shape up(c.idx_shape.begin(), c.idx_shape.end() - 1);
    up.insert(up.end(), x_shape.begin() + c.idx_shape.back(), x_shape.end());
    std::string sig = b.node("Sigmoid", {x}, "sig", x_shape);  // data computed
    std::string y =
        b.inferred("ScatterND", {sig, idx, b.weights("up", up)}, "y", {{"reduction", c.reduction}});
    b.g.outputs = {y};
    verify(b.g);
    Graph g = b.g;
    EXPECT_TRUE(lower_scatter_nd(g));
    verify(g);
    for (const Node& n : g.nodes) EXPECT_NE(n.op, "ScatterND");
    expect_same_outputs(b.g, g, x_shape);
  }
  // ScatterElements (torch.scatter): each index element writes one element of data.
  struct ElementsCase {
    Shape idx_shape;
    std::vector<int64_t> idx;
    int64_t axis;
    std::string reduction;
  };
  std::vector<ElementsCase> elements = {
      {{2, 3, 2}, {0, 3, -1, 2, 1, 1, 2, 2, 0, 0, -4, 3}, 0, "none"},
      {{4, 2, 1}, {1, 1, 0, 2, -1, 0, 2, 2}, 1, "add"},  // duplicates along the axis
      {{1, 3, 2}, {1, 0, 1, 1, 0, 0}, 2, "mul"},
  };
  for (size_t k = 0; k < elements.size(); ++k) {
    SCOPED_TRACE("ScatterElements " + std::to_string(k));
    const ElementsCase& c = elements[k];
    GraphBuilder b;
    b.seed = static_cast<uint32_t>(40 + k);
    std::string x = b.input("x", x_shape);
    std::string sig = b.node("Sigmoid", {x}, "sig", x_shape);
    std::string y = b.inferred("ScatterElements",
                               {sig, b.constant("idx", HostTensor::ints(c.idx_shape, c.idx)),
                                b.weights("up", c.idx_shape)},
                               "y", {{"axis", c.axis}, {"reduction", c.reduction}});
    b.g.outputs = {y};
    verify(b.g);
    Graph g = b.g;
    EXPECT_TRUE(lower_scatter_nd(g));
    verify(g);
    for (const Node& n : g.nodes) EXPECT_NE(n.op, "ScatterElements");
    expect_same_outputs(b.g, g, x_shape);
  }
  // Computed indices, and 17 rows adding to one position: left as they are.
  GraphBuilder b;
  std::string x = b.input("x", {4});
  std::string idx = b.input("idx", {1, 1});
  b.g.values[idx].dtype = DType::I64;
  b.g.outputs = {b.inferred("ScatterND", {x, idx, b.weights("u", {1})}, "y", {})};
  EXPECT_FALSE(lower_scatter_nd(b.g));
  GraphBuilder many;
  std::string xm = many.input("x", {4});
  many.g.outputs = {many.inferred(
      "ScatterND",
      {xm, many.constant("idx", HostTensor::ints({17, 1}, std::vector<int64_t>(17, 2))),
       many.weights("u", {17})},
      "y", {{"reduction", std::string("add")}})};
  EXPECT_FALSE(lower_scatter_nd(many.g));
}

// pad-convs: convolutions whose pads differ get a Pad node and one shared pad, so they have a
// workload (are tunable); the outputs are unchanged. Different strides stay untouched.
TEST(GraphPasses, PadsConvolutionsWhosePadsDiffer) {
  using V = std::vector<int64_t>;
  struct Case {
    Shape x, w;
    std::map<std::string, Attr> attrs;
    bool fires;
  };
  std::vector<Case> cases = {
      {{1, 4, 9, 8}, {5, 4, 1, 7}, {{"pads", V{0, 3, 0, 3}}}, true},                       // Inception's 1x7
      {{1, 4, 9, 8}, {5, 4, 7, 1}, {{"pads", V{3, 0, 3, 0}}, {"strides", V{2, 2}}}, true},  // 7x1, strided
      {{2, 3, 7, 6}, {3, 1, 4, 4}, {{"auto_pad", std::string("SAME_UPPER")}, {"group", int64_t{3}}}, true},
      {{1, 2, 6, 6}, {3, 2, 3, 3}, {{"pads", V{2, 1, 1, 2}}, {"dilations", V{2, 2}}}, true},
      {{1, 2, 6, 6}, {3, 2, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, false},                         // already one pad
      {{1, 2, 6, 6}, {3, 2, 3, 3}, {{"pads", V{0, 1, 0, 1}}, {"strides", V{1, 2}}}, false},  // strides differ
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    const Graph before = one_conv(c.x, c.w, c.attrs, static_cast<uint32_t>(40 + k));
    Graph g = before;
    EXPECT_EQ(pad_convs(g), c.fires);
    verify(g);
    // Before: untunable unless the pads were already one (case 4).
    EXPECT_EQ(extract_tasks(before).untunable.size(), k == 4 ? 0u : 1u);
    TaskList after = extract_tasks(g);
    EXPECT_EQ(after.untunable.size(), k == 5 ? 1u : 0u) << (after.untunable.empty() ? "" : after.untunable[0].reason);
    expect_same_outputs(before, g, c.x);
  }
}

// trim-conv-taps: taps that read only padding at every output position are dropped from the
// weights and the pads, the output the same. DeepLabv3's atrous rates past the feature map
// make a 3x3 kernel 1x1 (grouped and strided ones too); a side whose pads the trim would make
// negative keeps its taps; a kernel all of whose taps read the image somewhere stays as it is.
TEST(GraphPasses, ConvTapsThatReadOnlyPaddingAreDropped) {
  using V = std::vector<int64_t>;
  struct Case {
    Shape x, w;
    std::map<std::string, Attr> attrs;
    bool fires;
    V kernel, pads, dilations;  // after, where it fires
  };
  std::vector<Case> cases = {
      // Rate 24 over 20x20: only the centre tap meets the image.
      {{1, 8, 20, 20}, {4, 8, 3, 3}, {{"pads", V{24, 24, 24, 24}}, {"dilations", V{24, 24}}}, true, {1, 1},
       {0, 0, 0, 0}, {1, 1}},
      // Rows 4 high at rate 4: one tap; columns 6 wide padded by 2: only the centre tap meets
      // them too, but dropping the outer ones would make those pads -2, so the columns keep
      // all three.
      {{1, 3, 4, 6}, {2, 3, 3, 3}, {{"pads", V{4, 2, 4, 2}}, {"dilations", V{4, 4}}}, true, {1, 3},
       {0, 2, 0, 2}, {4, 4}},
      // Rate 12 over 20x20: every tap meets the image at some position.
      {{1, 4, 20, 20}, {4, 4, 3, 3}, {{"pads", V{12, 12, 12, 12}}, {"dilations", V{12, 12}}}, false, {}, {}, {}},
      {{1, 4, 7, 7}, {4, 4, 3, 3}, {{"pads", V{1, 1, 1, 1}}}, false, {}, {}, {}},
      // Grouped and strided, rate 5 over 4x4 padded by 5: the centre tap only.
      {{1, 4, 4, 4}, {4, 2, 3, 3}, {{"pads", V{5, 5, 5, 5}}, {"dilations", V{5, 5}}, {"strides", V{2, 2}},
       {"group", int64_t{2}}}, true, {1, 1}, {0, 0, 0, 0}, {1, 1}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    const Graph before = one_conv(c.x, c.w, c.attrs, static_cast<uint32_t>(60 + k));
    Graph g = before;
    EXPECT_EQ(trim_conv_taps(g), c.fires);
    verify(g);
    if (c.fires) {
      const Node& n = g.nodes.back();
      EXPECT_EQ(n.get_ints("kernel_shape", {}), c.kernel);
      EXPECT_EQ(n.get_ints("pads", {}), c.pads);
      EXPECT_EQ(n.get_ints("dilations", {}), c.dilations);
      EXPECT_EQ(g.value(n.inputs[1]).shape, (Shape{c.w[0], c.w[1], c.kernel[0], c.kernel[1]}));
    }
    EXPECT_EQ(g.value("y").shape, before.value("y").shape);
    expect_same_outputs(before, g, c.x);
  }
}

// split-conv-regions: a Conv whose taps read padding at many outputs (atrous rates near the map's
// size) becomes rectangles, each a Conv of only the taps that read the image at all its
// positions over the pixels they read (a Slice, or the input itself), concatenated back; the
// outputs the same. Under 20% of the products on padding (dilation 2 over 40x40: 7%), or too few
// products saved, it stays one Conv. Blocked (channel blocks of 16), the Slices and the
// Concats along height and width stay in the blocked layout, and the compiled model matches.
TEST(GraphPasses, ConvsReadingMuchPaddingSplitIntoRegions) {
  using V = std::vector<int64_t>;
  struct Case {
    Shape x, w;
    std::map<std::string, Attr> attrs;
    size_t pieces;  // 0: not split
    size_t slices;
  };
  std::vector<Case> cases = {
      // Rate 12 over 20x20: bands [0, 8) (taps 1-2), [8, 12) (tap 1), [12, 20) (taps 0-1) each
      // way; the corners read the whole input, the other five a Slice.
      {{1, 256, 20, 20}, {64, 256, 3, 3}, {{"pads", V{12, 12, 12, 12}}, {"dilations", V{12, 12}}}, 9, 5},
      // Strided: rate 12 over 40x40 at stride 2 (20x20 outputs), grouped.
      {{1, 512, 40, 40}, {128, 256, 3, 3}, {{"pads", V{12, 12, 12, 12}}, {"dilations", V{12, 12}}, {"strides", V{2, 2}},
        {"group", int64_t{2}}}, 9, 9},
      // Pads that differ, a map not square: columns [0, 6) (taps 0-2, every column), [6, 18)
      // (taps 0-1), [18, 30) (tap 0).
      {{1, 256, 20, 30}, {64, 256, 3, 3}, {{"pads", V{12, 0, 12, 24}}, {"dilations", V{12, 12}}}, 9, 7},
      // Dilation 2 over 40x40: 7% of the products on padding.
      {{1, 64, 40, 40}, {64, 64, 3, 3}, {{"pads", V{2, 2, 2, 2}}, {"dilations", V{2, 2}}}, 0, 0},
      // Rate 12 over 20x20 but 8 channels: 1 MFLOP saved.
      {{1, 8, 20, 20}, {8, 8, 3, 3}, {{"pads", V{12, 12, 12, 12}}, {"dilations", V{12, 12}}}, 0, 0},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    Graph before = one_conv(c.x, c.w, c.attrs, static_cast<uint32_t>(70 + k));
    if (k == 0) {  // a node already named as a rectangle would be: the rectangle takes another name
      before.nodes.insert(before.nodes.begin(), Node{"Conv_y.r0c0", "Relu", {"x"}, {before.add_float("decoy", c.x)}, {}});
      verify(before);
    }
    Graph g = before;
    EXPECT_EQ(split_conv_regions(g), c.pieces > 0);
    verify(g);
    std::map<std::string, int> ops;
    for (const Node& n : g.nodes) {
      ++ops[n.op];
      if (n.op == "Conv" && c.pieces) {
        EXPECT_EQ(n.get_ints("pads", {}), (V{0, 0, 0, 0})) << n.name;
      }
    }
    EXPECT_EQ(ops["Conv"], c.pieces ? static_cast<int>(c.pieces) : 1);
    if (k == 0) {
      EXPECT_EQ(ops["Relu"], 1);
    }
    EXPECT_EQ(ops["Slice"], static_cast<int>(c.slices));
    EXPECT_EQ(g.value("y").shape, before.value("y").shape);
    expect_same_outputs(before, g, c.x);
  }
  // Blocked and compiled, after a 1x1 Conv (as after a backbone): the rectangles' Slices and
  // Concats in blocks of 16 (a conversion in and one out only); the library's outputs the
  // reference's.
  GraphBuilder b;
  b.seed = 80;
  const std::string x = b.input("x", cases[0].x);
  const std::string h = b.inferred("Conv", {x, b.weights("w0", {256, 256, 1, 1})}, "h", {});
  b.g.outputs = {b.inferred("Conv", {h, b.weights("w", cases[0].w), b.weights("b", {64})}, "y", cases[0].attrs)};
  const Graph model = b.g;
  const Graph g = with_blocks_of_16(model);
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["ConvNCHWc"], 10);
  EXPECT_EQ(ops["LayoutTransform"], 2);
  EXPECT_EQ(ops["Slice"], 5);
  EXPECT_EQ(ops["Concat"], 4);  // three rows, then the rows
  const std::string so = tf::testing::temp_dir() + "/regions.so";
  tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
  compile_model(g, tf::host_target(), defaults, so, "regions", default_memory_budget(), false);
  std::map<std::string, HostTensor> in = {{"x", random_floats(cases[0].x, 7)}};
  ModelLibrary lib(so);
  std::vector<HostTensor> got;
  lib.run({&in.at("x")}, got);
  const HostTensor want = run_reference(model, in).at("y");
  ASSERT_EQ(got.at(0).shape, want.shape);
  float most = 0;  // sums of 256 x 256 and 256 x 9 products: rounding relative to their scale
  for (float v : want.f) most = std::max(most, std::fabs(v));
  for (int64_t k = 0; k < want.size(); ++k) ASSERT_NEAR(got[0].f[k], want.f[k], 1e-4 * (1 + most)) << k;
}

// einsum-to-matmul: two-operand Einsums that are matrix products become MatMul nodes (with
// Transposes and Reshapes) computing the same; the others stay.
TEST(GraphPasses, EinsumsThatAreMatrixProductsBecomeMatMuls) {
  struct Case {
    std::string equation;
    Shape a, b;
    bool rewritten;
  };
  std::vector<Case> cases = {
      {"B G H I D, B G H J D -> B G H I J", {2, 3, 2, 4, 5}, {2, 3, 2, 6, 5}, true},  // MaxViT
      {"BGHIJ,BGHJD->BGHID", {2, 3, 2, 4, 6}, {2, 3, 2, 6, 5}, true},
      {"ik,kj->ij", {3, 4}, {4, 5}, true},
      {"ij,kj->ik", {3, 4}, {5, 4}, true},
      {"bij,bjk->bki", {2, 3, 4}, {2, 4, 5}, true},
      {"xaby,ybc->acx", {2, 3, 4, 5}, {5, 4, 6}, true},  // two batch-free contractions
      {"cab,cd->dab", {4, 2, 3}, {4, 5}, true},           // 3-cycles on both sides
      {"i,i->", {7}, {7}, true},                          // a dot product
      {"i,j->ij", {3}, {4}, true},                        // an outer product
      {"ii,i->i", {3, 3}, {3}, false},                    // a diagonal
      {"ij,k->i", {3, 4}, {5}, false},                    // k summed out of one operand
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE(c.equation);
    GraphBuilder b;
    b.seed = static_cast<uint32_t>(60 + k);
    std::string x = b.input("x", c.a);
    std::vector<std::string> in = {x, b.weights("w", c.b)};
    std::map<std::string, Attr> attrs = {{"equation", c.equation}};
    b.g.outputs = {b.inferred("Einsum", in, "y", attrs)};
    verify(b.g);
    Graph g = b.g;
    EXPECT_EQ(einsum_to_matmul(g), c.rewritten);
    verify(g);
    int einsums = 0, matmuls = 0;
    for (const Node& n : g.nodes) {
      einsums += n.op == "Einsum";
      matmuls += n.op == "MatMul";
    }
    EXPECT_EQ(einsums, c.rewritten ? 0 : 1);
    EXPECT_EQ(matmuls, c.rewritten ? 1 : 0);
    expect_same_outputs(b.g, g, c.a);
  }
}

// A convolution whose filters the block does not divide, where padding them to a whole block
// adds at most 1/8 (31 -> 32, ShuffleNet's 58 -> 64), runs on padded filters in whole blocks,
// its output sliced back; past that it takes half blocks (24, 40: padding them by up to a third
// is only for values whose readers carry the padding on, PaddedChannelsFlowThroughPools; these
// are model outputs), or (10 -> 16) stays NCHW.
TEST(GraphPasses, FiltersArePaddedToWholeBlocksWhereThatIsCheap) {
  struct Case {
    int64_t K;
    const char* tail;  // of the task's workload
    int slices;
  };
  for (const Case& c :
       {Case{31, "K=32,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=8,oc_block=16,epilogue=bias)", 1},
        Case{58, "K=64,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=8,oc_block=16,epilogue=bias)", 1},
        Case{24, "K=24,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=8,oc_block=8,epilogue=bias)", 0},
        Case{40, "K=40,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=8,oc_block=8,epilogue=bias)", 0},
        Case{10, "K=10,R=3,S=3,stride=1,pad=1,dilation=1,epilogue=bias)", 0}}) {
    SCOPED_TRACE(c.K);
    GraphBuilder b;
    std::string x = b.input("x", {1, 8, 5, 6});
    b.g.outputs = {b.inferred("Conv", {x, b.weights("w", {c.K, 8, 3, 3}), b.weights("b", {c.K})},
                              "y", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}})};
    Graph g = with_blocks_of_16(b.g);
    TaskList t = extract_tasks(g);
    ASSERT_GE(t.tasks.size(), 1u);
    const std::string& w = t.tasks[0].workload;
    EXPECT_EQ(w.substr(w.size() - std::string(c.tail).size()), c.tail) << w;
    int slices = 0;
    for (const Node& n : g.nodes) slices += n.op == "Slice";
    EXPECT_EQ(slices, c.slices);
    EXPECT_EQ(g.value("y").shape, (Shape{1, c.K, 5, 6}));
    expect_same_outputs(b.g, g, {1, 8, 5, 6});
  }
}

// ShuffleNet-v2's branch: a 1x1 conv of 58 filters (no block divides them), ReLU, a depthwise
// 3x3 and a 1x1 conv reading 58 channels. pad-channels pads the first conv's filters to 64 and
// carries the zero channels through the ReLU and the depthwise conv into the last conv (zero
// weights for them), so every convolution is a blocked task of 64 channels and the chain
// converts back to NCHW only where the model's 58 channels are read (the ReLU's output is a
// model output here). An activation that makes the zeros another constant (Sigmoid's 0.5, a
// Clip from 0.5) carries the chain too: the depthwise conv's zero filters read the constant
// and make 0 again. One pad-channels does not know (Elu) ends the chain: what follows reads the
// model's 58 channels. Outputs stay the same either way.
TEST(GraphPasses, PaddedChannelsFlowThroughActivationsAndDepthwiseConvs) {
  struct Case {
    const char* act;
    std::vector<float> clip;  // Clip's min and max
    const char* depthwise;    // the depthwise task, up to its channels
    const char* last;         // the last conv's task, up to its filters
  };
  for (const Case& c :
       {Case{"Relu", {}, "depthwise_conv2d_nchwc(N=1,C=64,", "conv2d_nchwc(N=1,C=64,H=6,W=6,K=24,"},
        Case{"Clip", {0.0f, 6.0f}, "depthwise_conv2d_nchwc(N=1,C=64,", "conv2d_nchwc(N=1,C=64,H=6,W=6,K=24,"},
        Case{"Sigmoid", {}, "depthwise_conv2d_nchwc(N=1,C=64,", "conv2d_nchwc(N=1,C=64,H=6,W=6,K=24,"},
        Case{"Clip", {0.5f, 6.0f}, "depthwise_conv2d_nchwc(N=1,C=64,", "conv2d_nchwc(N=1,C=64,H=6,W=6,K=24,"},
        Case{"Elu", {}, "depthwise_conv2d_nchw(N=1,C=58,", "conv2d_nchwc(N=1,C=58,H=6,W=6,K=24,"}}) {
    SCOPED_TRACE(std::string(c.act) + (c.clip.empty() ? "" : " from " + std::to_string(c.clip[0])));
    GraphBuilder b;
    std::string x = b.input("x", {1, 8, 6, 6});
    std::string y1 = b.inferred("Conv", {x, b.weights("w1", {58, 8, 1, 1}), b.weights("b1", {58})}, "y1", {});
    std::vector<std::string> act_in = {y1};
    if (!c.clip.empty()) {
      act_in.push_back(b.constant("lo", HostTensor::floats({}, {c.clip[0]})));
      act_in.push_back(b.constant("hi", HostTensor::floats({}, {c.clip[1]})));
    }
    std::string a = b.inferred(c.act, act_in, "a", {});
    std::string d = b.inferred("Conv", {a, b.weights("w2", {58, 1, 3, 3}), b.weights("b2", {58})}, "d",
                               {{"group", int64_t{58}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    std::string y = b.inferred("Conv", {d, b.weights("w3", {24, 58, 1, 1}), b.weights("b3", {24})}, "y", {});
    b.g.outputs = {y, a};
    Graph g = with_blocks_of_16(b.g);
    std::vector<std::string> tasks = task_workloads(g);
    ASSERT_EQ(tasks.size(), 3u);
    EXPECT_EQ(tasks[0].rfind("conv2d_nchwc(N=1,C=8,H=6,W=6,K=64,", 0), 0u) << tasks[0];
    EXPECT_EQ(tasks[1].rfind(c.depthwise, 0), 0u) << tasks[1];
    EXPECT_EQ(tasks[2].rfind(c.last, 0), 0u) << tasks[2];
    EXPECT_EQ(g.value("a").shape, (Shape{1, 58, 6, 6}));
    expect_same_outputs(b.g, g, {1, 8, 6, 6});
  }
}

// RegNetY's block at 104 channels (no block of 16 divides them; groups of 8): 1x1 conv + ReLU,
// grouped 3x3 conv + ReLU, squeeze-and-excitation (global pool, 1x1 convs, Sigmoid, Mul), 1x1
// conv, a residual Add of a projection, ReLU. pad-channels carries 112 channels through all of
// it (the grouped conv, lane by lane, gains a 14th group of zero filters; the pool, Sigmoid, Mul and Add keep
// the extra channels constant), so the layout pass converts only the input, the output and
// the squeeze's pooled channels: before, the chain ended at the grouped conv and every block
// converted to NCHW and back around it. Groups of 24 at 120 channels: 128 would split a group,
// so the grouped conv reads the model's 120 channels and the chain ends there. (Padding to
// whole groups and blocks, 144, would add 1/5; and a grouped conv whose groups are 8 more than
// a multiple of 16 runs in blocks of 8 anyway, converting from the 1x1 convs' blocks of 16.)
// Outputs stay the same in each case.
TEST(GraphPasses, PaddedChannelsFlowThroughGroupedConvsAndExcitation) {
  struct Case {
    int64_t channels, width;  // the block's channels, and channels a group
    int64_t padded;           // the channels the convs making them pad to
    int64_t padded_tasks;     // tasks reading or writing the padded channels (6: all)
  };
  for (const Case& c : {Case{104, 8, 112, 6}, Case{120, 24, 128, 4}}) {
    SCOPED_TRACE(c.channels);
    const int64_t C = c.channels;
    GraphBuilder b;
    std::string x = b.input("x", {1, 48, 6, 6});
    auto conv = [&](const std::string& in, int64_t k, int64_t cin, int64_t r, const std::string& out,
                    int64_t group = 1) {
      std::map<std::string, Attr> a;
      if (r == 3) a["pads"] = std::vector<int64_t>{1, 1, 1, 1};
      if (group > 1) a["group"] = group;
      return b.inferred("Conv", {in, b.weights("w_" + out, {k, cin / group, r, r}), b.weights("b_" + out, {k})}, out, a);
    };
    std::string a = b.inferred("Relu", {conv(x, C, 48, 1, "a")}, "ar", {});
    std::string g = b.inferred("Relu", {conv(a, C, C, 3, "g", C / c.width)}, "gr", {});
    std::string p = b.inferred("GlobalAveragePool", {g}, "pool", {});
    std::string f1 = b.inferred("Relu", {conv(p, 26, C, 1, "fc1")}, "f1r", {});
    std::string s = b.inferred("Sigmoid", {conv(f1, C, 26, 1, "fc2")}, "s", {});
    std::string m = b.inferred("Mul", {s, g}, "m", {});
    std::string sum = b.inferred("Add", {conv(m, C, C, 1, "c"), conv(x, C, 48, 1, "proj")}, "sum", {});
    b.g.outputs = {b.inferred("Relu", {sum}, "y", {})};
    Graph gr = with_blocks_of_16(b.g);
    int64_t padded = 0;
    std::string grouped;
    for (const Task& t : extract_tasks(gr).tasks) {
      padded += t.workload.find("C=" + std::to_string(c.padded) + ",") != std::string::npos ||
                t.workload.find("K=" + std::to_string(c.padded) + ",") != std::string::npos;
      if (t.workload.find("group=") != std::string::npos || t.workload.find("width=") != std::string::npos)
        grouped = t.workload;
    }
    EXPECT_EQ(padded, c.padded_tasks);
    int transforms = 0;
    for (const Node& n : gr.nodes) transforms += n.op == "LayoutTransform";
    if (c.padded_tasks == 6) {
      const std::string P = std::to_string(c.padded);
      // Groups of 8 in blocks of 16: lane by lane (a depthwise convolution of width 8).
      EXPECT_EQ(grouped.rfind("depthwise_conv2d_nchwc(N=1,C=" + P + ",H=6,W=6,R=3,S=3,", 0), 0u) << grouped;
      EXPECT_NE(grouped.find(",width=" + std::to_string(c.width)), std::string::npos) << grouped;
      // The input to blocks and the output back; the pooled [1, 112, 1, 1] to NCHW for the
      // 26-filter conv no block divides, and its output to one block of 26.
      EXPECT_EQ(transforms, 4) << graph_to_text(gr);
    } else {
      EXPECT_NE(grouped.find("C=120,"), std::string::npos) << grouped;
      EXPECT_NE(grouped.find("group=5"), std::string::npos) << grouped;
    }
    EXPECT_EQ(gr.value("y").shape, (Shape{1, C, 6, 6}));
    expect_same_outputs(b.g, gr, {1, 48, 6, 6});
  }
}

// A stem's 24 filters, whose readers carry padding on (a ReLU, a max or average pool -- a
// window of zeros gives 0 -- then ShuffleNet-v2's branches: a depthwise conv, 1x1 convs), are
// padded to 32 (a third more, whole vectors of 16 instead of halves), and the pool and
// everything after it run in blocks of 16. A pool of a constant that is
// not 0 (Sigmoid's) ends the chain: an average pool would mix it with its padded positions, and
// the rule takes neither pool there.
TEST(GraphPasses, PaddedChannelsFlowThroughPools) {
  for (const std::string pool : {"MaxPool", "AveragePool", "SigmoidThenMaxPool"}) {
    SCOPED_TRACE(pool);
    GraphBuilder b;
    std::string x = b.input("x", {1, 3, 12, 12});
    std::string c = b.inferred("Conv", {x, b.weights("w", {24, 3, 3, 3}), b.weights("b", {24})}, "c",
                               {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
    const bool sigmoid = pool == "SigmoidThenMaxPool";
    std::string r = b.inferred(sigmoid ? "Sigmoid" : "Relu", {c}, "r", {});
    std::string p = b.inferred(sigmoid ? "MaxPool" : pool, {r}, "p",
                               {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                {"strides", std::vector<int64_t>{2, 2}},
                                {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    std::string d = b.inferred("Conv", {p, b.weights("wd", {24, 1, 3, 3}), b.weights("bd", {24})}, "d",
                               {{"group", int64_t{24}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.g.outputs = {b.inferred("Conv", {d, b.weights("w2", {16, 24, 1, 1})}, "y", {})};
    Graph g = with_blocks_of_16(b.g);
    std::vector<std::string> tasks = task_workloads(g);
    ASSERT_EQ(tasks.size(), 3u);
    EXPECT_EQ(tasks[0].rfind("conv2d_nchwc(N=1,C=3,H=12,W=12,K=32,", 0), 0u) << tasks[0];
    const char* depthwise = sigmoid ? "depthwise_conv2d_nchwc(N=1,C=24," : "depthwise_conv2d_nchwc(N=1,C=32,";
    EXPECT_EQ(tasks[1].rfind(depthwise, 0), 0u) << tasks[1];
    int slices = 0;
    for (const Node& n : g.nodes) slices += n.op == "Slice";
    EXPECT_EQ(slices, sigmoid ? 1 : 0);
    expect_same_outputs(b.g, g, {1, 3, 12, 12});
  }
}

// The extra channels' constant never grows: Sigmoid makes them 0.5, and what could grow a
// constant that is not 0 (the sum of two such values; LeakyRelu's slope) ends the chain, so the
// last conv reads the model's 58 channels. Outputs stay the same.
TEST(GraphPasses, PaddedChannelsNeverGrowTheirConstant) {
  for (const std::string tail : {"Add", "LeakyRelu"}) {
    SCOPED_TRACE(tail);
    GraphBuilder b;
    std::string x = b.input("x", {1, 8, 5, 5});
    auto sig = [&](const std::string& out) {
      std::string c = b.inferred("Conv", {x, b.weights("w_" + out, {58, 8, 1, 1}), b.weights("b_" + out, {58})},
                                 "c_" + out, {});
      return b.inferred("Sigmoid", {c}, out, {});
    };
    std::string s1 = sig("s1");
    std::string t = tail == "Add" ? b.inferred("Add", {s1, sig("s2")}, "t", {})
                                  : b.inferred("LeakyRelu", {s1}, "t", {{"alpha", 3.0f}});
    b.g.outputs = {b.inferred("Conv", {t, b.weights("w3", {24, 58, 1, 1})}, "y", {})};
    Graph g = with_blocks_of_16(b.g);
    std::vector<std::string> tasks = task_workloads(g);
    ASSERT_FALSE(tasks.empty());
    EXPECT_EQ(tasks.front().rfind("conv2d_nchwc(N=1,C=8,H=5,W=5,K=64,", 0), 0u) << tasks.front();
    EXPECT_EQ(tasks.back().rfind("conv2d_nchwc(N=1,C=58,H=5,W=5,K=24,", 0), 0u) << tasks.back();
    expect_same_outputs(b.g, g, {1, 8, 5, 5});
  }
}

// Grouped convolutions (ResNeXt's, RegNet's) are one tunable task each: lane by lane
// (depthwise_conv2d_nchwc width=C/G) where groups have as many filters as channels and a
// block holds whole groups; blocked (conv2d_nchwc group=G) where an output block lies in one
// group or holds whole groups and an input block divides the channels it reads, the weights
// made block-diagonal; else NCHW (conv2d_nchw group=G). Either way they compute what the
// Conv does.
TEST(GraphPasses, GroupedConvolutionsAreOneTaskEach) {
  using V = std::vector<int64_t>;
  struct Case {
    Shape x, w;
    std::map<std::string, Attr> attrs;
    bool bias;
    const char* workload;  // the task's, up to its epilogue
  };
  std::vector<Case> cases = {
      // 3 filters a group: no block of 16 or 8 fits: NCHW.
      {{1, 8, 6, 7},
       {12, 2, 3, 3},
       {{"group", int64_t{4}}, {"pads", V{1, 1, 1, 1}}},
       true,
       "conv2d_nchw(N=1,C=8,H=6,W=7,K=12,R=3,S=3,stride=1,pad=1,dilation=1,group=4"},
      // 8 filters a group: blocks of 16 hold two groups, reading their 2 x 4 channels.
      {{1, 16, 5, 5},
       {32, 4, 3, 3},
       {{"group", int64_t{4}}},
       false,
       "conv2d_nchwc(N=1,C=16,H=5,W=5,K=32,R=3,S=3,stride=1,pad=0,dilation=1,ic_block=8,oc_block="
       "16,group=4"},
      // A channel multiplier of 2 (one input channel, two filters a group).
      {{2, 32, 6, 6},
       {64, 1, 3, 3},
       {{"group", int64_t{32}}, {"pads", V{1, 1, 1, 1}}},
       true,
       "conv2d_nchwc(N=2,C=32,H=6,W=6,K=64,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=8,oc_block="
       "16,group=32"},
      // 32 filters a group: two blocks of 16 in each, strided.
      {{1, 64, 7, 7},
       {64, 32, 3, 3},
       {{"group", int64_t{2}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}},
       true,
       "conv2d_nchwc(N=1,C=64,H=7,W=7,K=64,R=3,S=3,stride=2,pad=1,dilation=1,ic_block=16,oc_block="
       "16,group=2"},
      // RegNet's groups of 8 at 48 channels, 1x1: groups of equal width in and out that a
      // block holds whole run lane by lane (a depthwise convolution of width 8).
      {{1, 48, 5, 5},
       {48, 8, 1, 1},
       {{"group", int64_t{6}}},
       false,
       "depthwise_conv2d_nchwc(N=1,C=48,H=5,W=5,R=1,S=1,stride=1,pad=0,dilation=1,block=16,width=8"},
      // ResNeXt's groups of 4, 3x3 strided: lane by lane too.
      {{1, 64, 9, 9},
       {64, 4, 3, 3},
       {{"group", int64_t{16}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}},
       true,
       "depthwise_conv2d_nchwc(N=1,C=64,H=9,W=9,R=3,S=3,stride=2,pad=1,dilation=1,block=16,width=4"},
      // RegNet's groups of 24 (K/G = C/G = 24): blocks of 16 straddle two groups, each
      // reading the 48 channels (3 input blocks of 16) of both.
      {{1, 96, 5, 5},
       {96, 24, 3, 3},
       {{"group", int64_t{4}}, {"pads", V{1, 1, 1, 1}}},
       true,
       "conv2d_nchwc(N=1,C=96,H=5,W=5,K=96,R=3,S=3,stride=1,pad=1,dilation=1,ic_block=16,oc_block="
       "16,group=4"},
      // Many groups (past the 256 the old per-group split took).
      {{1, 514, 2, 2},
       {514, 2, 1, 1},
       {{"group", int64_t{257}}},
       false,
       "conv2d_nchw(N=1,C=514,H=2,W=2,K=514,R=1,S=1,stride=1,pad=0,dilation=1,group=257"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const Case& c = cases[k];
    const Graph before = one_conv(c.x, c.w, c.attrs, static_cast<uint32_t>(80 + k), c.bias);
    Graph g = with_blocks_of_16(before);
    TaskList t = extract_tasks(g);
    EXPECT_TRUE(t.untunable.empty());
    ASSERT_EQ(t.tasks.size(), 1u);  // no Winograd alternative for groups
    EXPECT_EQ(t.tasks[0].workload.substr(0, t.tasks[0].workload.find(",epilogue=")), c.workload);
    EXPECT_NO_THROW(tf::parse_workload(t.tasks[0].workload));
    expect_same_outputs(before, g, c.x);
  }
}

namespace {

// Q [2, 3, Sq, 4] and K^T [2, 3, 4, Sk] (graph inputs), scores scaled by `scaling` (Mul or Div
// by 2, or none), a mask [1, 1, 1, Sk] added (or not), Softmax along `axis`, times V
// [2, 3, Sk, 5]. `returned`: the scores are an output too.
Graph attention_graph(int64_t queries, int64_t keys, const std::string& scaling, bool mask, int64_t axis = -1,
                      bool returned = false) {
  GraphBuilder b;
  std::string q = b.input("q", {2, 3, queries, 4}), kt = b.input("kt", {2, 3, 4, keys}),
              v = b.input("v", {2, 3, keys, 5});
  Shape scores = {2, 3, queries, keys};
  std::string s = b.node("MatMul", {q, kt}, "s", scores);
  if (!scaling.empty()) s = b.node(scaling, {s, b.constant("two", HostTensor::floats({}, {2.0f}))}, "scaled", scores);
  if (mask) s = b.node("Add", {b.input("mask", {1, 1, 1, keys}), s}, "masked", scores);
  std::string p = b.node("Softmax", {s}, "p", scores, {{"axis", axis}});
  b.node("MatMul", {p, v}, "o", {2, 3, queries, 5});
  b.g.outputs = {"o"};
  if (returned) b.g.outputs.push_back(s);
  verify(b.g);
  return b.g;
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

}  // namespace

// fuse-attention: the chain becomes one FusedAttention node on cuda targets, whose reference
// evaluation is the chain's (the same outputs bit for bit); with the scaling as a Mul or a Div
// (the mask on either side of the Add) or neither. Not where the scores are read elsewhere, the
// softmax is along another axis, a row of scores would not fit a block's shared memory, or the
// target is a CPU.
TEST(GraphPasses, FusesAttentionOnCudaTargets) {
  PassOptions cuda;
  cuda.tensor_cores = true;
  cuda.opt_level = 3;  // fuse-attention's level (slower than the chain on an H200)
  for (const char* scaling : {"Mul", "Div", ""}) {
    for (bool mask : {true, false}) {
      SCOPED_TRACE(std::string(scaling) + (mask ? " mask" : ""));
      Graph before = attention_graph(7, 9, scaling, mask);
      Graph g = before;
      run_passes(g, cuda);
      ASSERT_EQ(count_op(g, kFusedAttention), 1);
      EXPECT_EQ(count_op(g, "Softmax") + count_op(g, "MatMul"), 0);
      const Node& a = g.nodes.back();
      EXPECT_EQ(a.inputs.size(), mask ? 4u : 3u);
      EXPECT_EQ(a.get_float("scale", 1.0f), std::string(scaling) == "Mul" ? 2.0f : 1.0f);
      EXPECT_EQ(a.get_float("divisor", 1.0f), std::string(scaling) == "Div" ? 2.0f : 1.0f);
      std::map<std::string, HostTensor> in = {{"q", random_floats({2, 3, 7, 4}, 1)},
                                              {"kt", random_floats({2, 3, 4, 9}, 2)},
                                              {"v", random_floats({2, 3, 9, 5}, 3)}};
      if (mask) in["mask"] = random_floats({1, 1, 1, 9}, 4, -3, 0);
      EXPECT_EQ(run_reference(g, in).at("o").f, run_reference(before, in).at("o").f);
    }
  }
  {
    // A Transpose merging the heads back is taken in (perm), and the Reshape after it is then a
    // view: no kernel copies it (graph/memory_plan.h).
    Graph before = attention_graph(7, 9, "Div", true);
    GraphBuilder b;
    b.g = before;
    b.g.outputs.clear();
    std::string t = b.node("Transpose", {"o"}, "t", {2, 7, 3, 5}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
    b.node("Reshape", {t, b.constant("merged", HostTensor::ints({3}, {2, 7, 15}))}, "r", {2, 7, 15});
    b.node("MatMul", {"r", b.weights("wo", {15, 6})}, "y", {2, 7, 6});  // the output projection
    b.g.outputs = {"y"};
    verify(b.g);
    before = b.g;
    Graph g = before;
    run_passes(g, cuda);
    ASSERT_EQ(count_op(g, kFusedAttention), 1);
    EXPECT_EQ(count_op(g, "Transpose"), 0);
    for (const Node& n : g.nodes) {
      if (n.op == kFusedAttention) {
        EXPECT_EQ(n.get_ints("perm", {}), (std::vector<int64_t>{0, 2, 1, 3}));
      }
    }
    std::map<std::string, HostTensor> in = {{"q", random_floats({2, 3, 7, 4}, 1)},
                                            {"kt", random_floats({2, 3, 4, 9}, 2)},
                                            {"v", random_floats({2, 3, 9, 5}, 3)},
                                            {"mask", random_floats({1, 1, 1, 9}, 4, -3, 0)}};
    EXPECT_EQ(run_reference(g, in).at("y").f, run_reference(before, in).at("y").f);
    std::vector<FusedGroup> plan = plan_fusion(g);
    std::vector<InPlaceConcat> views = in_place_concats(g, plan);
    ASSERT_EQ(views.size(), 1u);
    EXPECT_EQ(views[0].output, "r");
    EXPECT_EQ(views[0].parts, (std::vector<std::pair<std::string, int64_t>>{{"t", 0}}));
    MemoryPlan m = plan_memory(g, without_in_place(plan, views), views);
    EXPECT_EQ(m.buffers.at("r").offset, m.buffers.at("t").offset);
    // At fp16 the output projection reads the view as float32: stored in 16 bits, it would need
    // a kernel of its own (a Cast cannot join the attention's kernel).
    Graph half = before;
    PassOptions fp16 = cuda;
    fp16.precision = Precision::Float16;
    run_passes(half, fp16);
    EXPECT_EQ(count_op(half, kTensorCoreMatMul), 1);
    EXPECT_EQ(half.sixteen_bit_values, 0);
    EXPECT_EQ(in_place_concats(half, plan_fusion(half)).size(), 1u);
  }
  auto fused = [&](Graph g, const PassOptions& o) {
    run_passes(g, o);
    return count_op(g, kFusedAttention);
  };
  EXPECT_EQ(fused(attention_graph(7, 9, "Div", true), PassOptions{2, {}, {}, nullptr, 16}), 0) << "a CPU target";
  EXPECT_EQ(fused(attention_graph(7, 9, "Div", true, /*axis=*/2), cuda), 0) << "softmax along the queries";
  EXPECT_EQ(fused(attention_graph(7, 9, "Div", true, -1, /*returned=*/true), cuda), 0) << "the scores returned";
  EXPECT_EQ(fused(attention_graph(7, 9, "Div", true), PassOptions{3, {"fuse-attention"}, {}, nullptr, 0, tf::Precision::Float32, true}), 0)
      << "disabled";
  EXPECT_EQ(fused(attention_graph(7, 9, "Div", true), PassOptions{2, {}, {}, nullptr, 0, tf::Precision::Float32, true}), 0)
      << "-O2";
  // A block's row of scores and probabilities and a row's margin (compiler/attention.h): 16 bytes
  // a key, 48 KiB of static shared memory at 3071 keys.
  EXPECT_EQ(fused(attention_graph(2, 3100, "Div", true), cuda), 0) << "too many keys";
  EXPECT_EQ(fused(attention_graph(2, 3000, "Div", true), cuda), 1) << "keys that fit";
}

// FusedAttention's shape inference refuses what its kernel cannot take, naming the value.
TEST(GraphPasses, FusedAttentionRefusesOperandsItCannotTake) {
  auto infer = [](const std::vector<Shape>& shapes, DType t = DType::F32) {
    Graph g;
    Node n{"att", kFusedAttention, {}, {"o"}, {}};
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::string name = "in" + std::to_string(k);
      g.values[name] = Value{name, k == 0 ? t : DType::F32, shapes[k], std::nullopt};
      n.inputs.push_back(name);
    }
    return infer_node(n, g, 17).at(0).shape;
  };
  EXPECT_EQ(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}}), (Shape{2, 5, 3}));
  EXPECT_EQ(infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}, {1, 6}}), (Shape{2, 5, 3}));
  using tf::testing::expect_user_error;
  expect_user_error([&] { infer({{5, 4}, {4, 6}, {6, 3}}); }, "rank of at least 3");
  expect_user_error([&] { infer({{2, 5, 4}, {3, 4, 6}, {2, 6, 3}}); }, "the same leading dimensions");
  expect_user_error([&] { infer({{2, 5, 4}, {2, 8, 6}, {2, 6, 3}}); }, "does not have q's depth 4");
  expect_user_error([&] { infer({{2, 5, 4}, {2, 4, 6}, {2, 7, 3}}); }, "does not have kt's 6 keys");
  expect_user_error([&] { infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}, {5, 7}}); }, "mask [5, 7] does not broadcast");
  expect_user_error([&] { infer({{2, 5, 4}, {2, 4, 6}, {2, 6, 3}}, DType::F16); }, "is float16, not float32");
  // Scores of 2^17 x 2^17 from a 2^17-row output: bounded like any tensor (2^32 elements).
  expect_user_error([&] { infer({{1, 131072, 1}, {1, 1, 131072}, {1, 131072, 1}}); },
                    "node 'att' (FusedAttention): the scores: shape [1, 131072, 131072] has more than 4294967296 elements");
  auto with_perm = [](std::vector<int64_t> perm) {
    Graph g;
    Node n{"att", kFusedAttention, {"q", "kt", "v"}, {"o"}, {{"perm", std::move(perm)}}};
    for (const auto& [name, s] : {std::pair{"q", Shape{2, 5, 4}}, {"kt", Shape{2, 4, 6}}, {"v", Shape{2, 6, 3}}})
      g.values[name] = Value{name, DType::F32, s, std::nullopt};
    return infer_node(n, g, 17).at(0).shape;
  };
  EXPECT_EQ(with_perm({1, 0, 2}), (Shape{5, 2, 3}));
  expect_user_error([&] { with_perm({0, 0, 2}); }, "perm [0, 0, 2] is not a permutation of the output's 3 dimensions");
  expect_user_error([&] { with_perm({0, 1}); }, "perm [0, 1] is not a permutation");
}

// FusedAttention's group takes in the groups computing its operands for it alone (Q's and
// K^T's Transposes), not one whose value is read elsewhere too (V's Relu, also returned
// negated), and nothing joins it after (its kind is opaque).
TEST(GraphFusion, AttentionTakesInTheLayoutOfItsOwnOperands) {
  GraphBuilder b;
  std::string x = b.input("x", {2, 4, 3}), y = b.input("y", {2, 5, 4});
  std::map<std::string, Attr> swap = {{"perm", std::vector<int64_t>{0, 2, 1}}};
  std::string q = b.node("Transpose", {b.node("Sigmoid", {x}, "xs", {2, 4, 3})}, "q", {2, 3, 4}, swap);
  std::string kt = b.node("Transpose", {y}, "kt", {2, 4, 5}, swap);
  std::string v = b.node("Relu", {y}, "v", {2, 5, 4});
  std::string o = b.node(kFusedAttention, {q, kt, v}, "o", {2, 3, 4});
  std::string after = b.node("Tanh", {o}, "after", {2, 3, 4});
  std::string neg = b.node("Neg", {v}, "neg", {2, 5, 4});
  b.g.outputs = {after, neg};
  verify(b.g);
  std::vector<FusedGroup> plan = plan_fusion(b.g);
  expect_runnable(b.g, plan);
  const FusedGroup* a = group_with(plan, "FusedAttention_o");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kind, OpKind::Opaque);
  EXPECT_EQ(a->nodes, (std::vector<std::string>{"Sigmoid_xs", "Transpose_q", "Transpose_kt", "FusedAttention_o"}));
  EXPECT_EQ(a->outputs, std::vector<std::string>{o});
  EXPECT_NE(group_with(plan, "Relu_v"), a);
  EXPECT_NE(group_with(plan, "Tanh_after"), a);
  for (const FusedGroup& f : plan) EXPECT_FALSE(f.nodes.empty());
}

// Views in place: a Reshape, and a Transpose that moves only dimensions of extent 1, alone in
// their groups, are parts at offset 0 of their outputs (no kernel; their buffers one); a
// Transpose that moves data, or a view of a model input or into a model output, is a kernel.
TEST(GraphMemory, ViewsAreComputedInPlace) {
  auto model = [](std::vector<int64_t> perm, bool input_view, bool output_view) {
    GraphBuilder b;
    std::string x = b.input("x", {1, 4, 6, 8});
    std::map<std::string, Attr> pool = {{"kernel_shape", std::vector<int64_t>{1, 1}}};
    std::string a = input_view ? x : b.node("MaxPool", {x}, "a", {1, 4, 6, 8}, pool);
    Shape ts = {1, 4, 6, 8};
    for (size_t d = 0; d < perm.size(); ++d) ts[d] = Shape{1, 4, 6, 8}[static_cast<size_t>(perm[d])];
    std::string t = b.node("Transpose", {a}, "t", ts, {{"perm", perm}});
    std::string r = b.node("Reshape", {b.node("MaxPool", {t}, "p", ts, pool), b.constant("s", HostTensor::ints({2}, {ts[0] * ts[1], 48}))},
                           "r", {ts[0] * ts[1], 48});
    std::string out = output_view ? r : b.node("MatMul", {r, b.weights("w", {48, 3})}, "out", {ts[0] * ts[1], 3});
    b.g.outputs = {out};
    verify(b.g);
    return b.g;
  };
  auto views = [](const Graph& g) {
    std::set<std::string> v;
    for (const InPlaceConcat& c : in_place_concats(g, plan_fusion(g))) v.insert(c.output);
    return v;
  };
  Graph g = model({1, 0, 2, 3}, false, false);
  EXPECT_EQ(views(g), (std::set<std::string>{"t", "r"}));
  std::vector<FusedGroup> groups = plan_fusion(g);
  std::vector<InPlaceConcat> in_place = in_place_concats(g, groups);
  MemoryPlan m = plan_memory(g, without_in_place(groups, in_place), in_place);
  EXPECT_EQ(m.buffers.at("t").offset, m.buffers.at("a").offset);
  EXPECT_EQ(m.buffers.at("r").offset, m.buffers.at("p").offset);
  EXPECT_EQ(views(model({0, 1, 3, 2}, false, false)), std::set<std::string>{"r"}) << "a Transpose that moves data";
  EXPECT_EQ(views(model({1, 0, 2, 3}, true, false)), std::set<std::string>{"r"}) << "a view of the model's input";
  EXPECT_EQ(views(model({1, 0, 2, 3}, false, true)), std::set<std::string>{"t"}) << "a view that is the model's output";
  // Compiled and run: the same outputs as the reference.
  const std::string so = tf::testing::temp_dir() + "/views.so";
  tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
  tf::graph::CompiledModel cm = compile_model(g, tf::host_target(), defaults, so, "views", default_memory_budget(), false);
  EXPECT_EQ(cm.kernels.size(), 3u);  // the pools and the product
  std::map<std::string, HostTensor> in = {{"x", random_floats({1, 4, 6, 8}, 5)}};
  ModelLibrary lib(so);
  std::vector<HostTensor> got;
  lib.run({&in.at("x")}, got);
  const HostTensor want = run_reference(g, in).at("out");
  ASSERT_EQ(got.at(0).shape, want.shape);
  for (int64_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[0].f[k], want.f[k], 1e-5) << k;
}

// At fp16 on cuda, a view of what a reduction (or anchor, or opaque node) makes is free, and a
// Cast after it would be a kernel: the value before the view is stored in 16 bits instead (its
// Cast in the LayerNorm's kernel, or the Relu's), and the view passes them on, in place.
TEST(GraphPasses, SixteenBitEdgesPassThroughFreeViews) {
  for (bool after_reduction : {true, false}) {
    SCOPED_TRACE(after_reduction ? "after a LayerNorm" : "after a Relu");
    GraphBuilder b;
    std::string x = b.input("x", {1, 8, 16});
    std::string h = after_reduction
                        ? b.node("LayerNormalization", {x, b.weights("gamma", {16}), b.weights("beta", {16})}, "h", {1, 8, 16},
                                 {{"axis", int64_t{-1}}})
                        : b.node("Relu", {x}, "h", {1, 8, 16});
    std::string t = b.node("Transpose", {h}, "t", {8, 1, 16}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    b.node("MatMul", {t, b.weights("w", {16, 4})}, "y", {8, 1, 4});
    b.g.outputs = {"y"};
    verify(b.g);
    Graph g = b.g;
    on_tensor_cores(g, Precision::Float16);
    EXPECT_EQ(g.sixteen_bit_values, 1);
    std::string stored;
    for (const Node& n : g.nodes)
      if (n.op == "Cast") stored = n.inputs[0];
    EXPECT_EQ(stored, h);
    EXPECT_EQ(g.value(t).dtype, DType::F16);
    // After the LayerNorm in place; after the Relu in its kernel (an injective node joins it).
    EXPECT_EQ(in_place_concats(g, plan_fusion(g)).size(), after_reduction ? 1u : 0u);
    EXPECT_EQ(plan_fusion(g).size(), after_reduction ? 3u : 2u);
    // A view of 16-bit values writes the same type, nothing else (refused by name).
    for (DType wrong : {DType::F32, DType::BF16}) {
      Graph bad = g;
      bad.value(t).dtype = wrong;
      try {
        verify(bad);
        ADD_FAILURE() << "a view of float16 values wrote " << dtype_name(wrong);
      } catch (const tf::UserError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("writes the ") + dtype_name(wrong) +
                                             " value '" + t + "'"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// A FusedAttention a model names itself with a one-element constant operand (read as a scalar,
// no tensor to index) is refused by name as not implemented.
TEST(GraphNodeTe, AttentionOfAOneElementConstantIsNotImplemented) {
  GraphBuilder b;
  std::string q = b.constant("q", HostTensor::floats({1, 1, 1}, {0.5f}));
  std::string kt = b.input("kt", {1, 1, 4}), v = b.input("v", {1, 4, 2});
  b.node(kFusedAttention, {q, kt, v}, "o", {1, 1, 2});
  b.g.outputs = {"o"};
  verify(b.g);
  tf::graph::ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return tf::graph::KernelConfig{}; };
  tf::testing::expect_user_error(
      [&] { compile_model(b.g, tf::host_target(), defaults, tf::testing::temp_dir() + "/one.so", "one", default_memory_budget(), false); },
      "compiling attention of a one-element constant input 0 is not implemented");
}
