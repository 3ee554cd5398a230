// ONNX import: models built here with the protobuf API. Shape arithmetic folds to constants;
// operators the node tests do not cover at opsets 11+ are checked by hand; every refusal
// names what is at fault.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <dlfcn.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/file_io.h"
#include "base/float16.h"
#include "graph/fusion.h"
#include "graph/image_loop.h"
#include "graph/import_recurrent.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "graph/onnx_import.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/quantize.h"
#include "graph/reference_run.h"
#include "graph/tasks.h"
#include "tests/graph/onnx_builder.h"

using namespace tf::graph;  // NOLINT

namespace {

using tf::graph::testing::ModelBuilder;
using tf::graph::testing::set_int;
using tf::graph::testing::set_ints;
using tf::graph::testing::set_string;
using tf::graph::testing::set_float;
using tf::str;
using tf::graph::testing::set_strings;

}  // namespace

// What PyTorch writes for x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat, Reshape.
TEST(OnnxImport, ShapeArithmeticFoldsToConstants) {
  ModelBuilder b;
  b.input("x", {2, 3, 4});
  b.ints("zero", {0});
  b.ints("minus_one", {-1});
  b.node("Shape", {"x"}, {"s"});
  auto* gather = b.node("Gather", {"s", "zero"}, {"n"});
  set_int(gather, "axis", 0);
  b.node("Concat", {"n", "minus_one"}, {"shape"});
  set_int(b.g->mutable_node(2), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.node("Relu", {"y"}, {"z"});
  b.output("z", {2, 12});
  Graph g = b.import();
  ASSERT_EQ(g.nodes.size(), 2u);  // Reshape and Relu; the shape computation is constants
  EXPECT_EQ(g.nodes[0].op, "Reshape");
  EXPECT_TRUE(g.is_constant("shape"));
  EXPECT_EQ(g.value("shape").constant->i, (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(g.value("z").shape, (Shape{2, 12}));
  HostTensor x = HostTensor::floats({2, 3, 4}, std::vector<float>(24));
  for (int k = 0; k < 24; ++k) x.f[k] = static_cast<float>(k - 12);
  HostTensor z = run_reference(g, {{"x", x}}).at("z");
  for (int k = 0; k < 24; ++k) EXPECT_EQ(z.f[k], std::max(0, k - 12));
}

// What PyTorch writes for x.std(): the element count as ReduceProd of a Gather of Shape
// (int64 reductions fold like the other shape arithmetic).
TEST(OnnxImport, IntegerReductionsFoldToConstants) {
  ModelBuilder b;
  b.input("x", {2, 3, 4});
  b.ints("first", {0});
  b.ints("rest", {1, 2});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "first"}, {"n"});
  b.node("Gather", {"s", "rest"}, {"dims"});
  b.node("ReduceProd", {"dims"}, {"count"});  // keepdims 1: [12]
  auto* largest = b.node("ReduceMax", {"dims"}, {"largest"});
  set_int(largest, "keepdims", 1);
  b.node("Concat", {"n", "count"}, {"shape"});
  set_int(b.g->mutable_node(b.g->node_size() - 1), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.ints("minus_one", {-1});
  b.node("Concat", {"largest", "minus_one"}, {"shape2"});
  set_int(b.g->mutable_node(b.g->node_size() - 1), "axis", 0);
  b.node("Reshape", {"y", "shape2"}, {"z"});
  b.output("z");
  Graph g = b.import();
  EXPECT_EQ(g.value("shape").constant->i, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(g.value("z").shape, (Shape{4, 6})) << "ReduceMax of [3, 4]";
  ASSERT_EQ(g.nodes.size(), 2u);  // the two Reshapes

  ModelBuilder big;
  big.input("x", {2});
  big.ints("dims", {int64_t{1} << 40, int64_t{1} << 40});
  big.node("ReduceProd", {"dims"}, {"p"}, "prod");
  big.node("Reshape", {"x", "p"}, {"y"});
  big.output("y");
  EXPECT_NE(big.error().find("node 'prod' (ReduceProd): the int64 result overflows"), std::string::npos)
      << big.error();
}

// Operators whose node tests are all older than opset 11 or use other element types.
TEST(OnnxImport, OperatorsWithoutOpset11NodeTests) {
  ModelBuilder b;
  b.input("x", {1, 2, 2, 2});
  b.node("GlobalAveragePool", {"x"}, {"avg"});
  b.node("GlobalMaxPool", {"x"}, {"max"});
  b.node("Softplus", {"x"}, {"sp"});
  auto* lse = b.node("ReduceLogSumExp", {"x"}, {"lse"});
  set_int(lse, "keepdims", 0);
  auto* to_int = b.node("Cast", {"x"}, {"xi"});
  set_int(to_int, "to", onnx::TensorProto::INT64);
  auto* back = b.node("Cast", {"xi"}, {"xf"});
  set_int(back, "to", onnx::TensorProto::FLOAT);
  b.ints("dims", {2, 3});
  b.node("ConstantOfShape", {"dims"}, {"zeros"});
  b.node("Shape", {"zeros"}, {"zshape"});
  b.node("Cast", {"zshape"}, {"zshape_f"});
  set_int(b.g->mutable_node(b.g->node_size() - 1), "to", onnx::TensorProto::FLOAT);
  for (const char* o : {"avg", "max", "sp", "lse", "xf", "zeros", "zshape_f"}) b.output(o);
  Graph g = b.import();
  std::vector<float> xs = {1.5f, -2.5f, 3, 4, -1, 0.25f, 7, -8};
  auto out = run_reference(g, {{"x", HostTensor::floats({1, 2, 2, 2}, xs)}});
  EXPECT_EQ(out.at("avg").shape, (Shape{1, 2, 1, 1}));
  EXPECT_FLOAT_EQ(out.at("avg").f[0], (1.5f - 2.5f + 3 + 4) / 4);
  EXPECT_FLOAT_EQ(out.at("avg").f[1], (-1 + 0.25f + 7 - 8) / 4);
  EXPECT_FLOAT_EQ(out.at("max").f[0], 4);
  EXPECT_FLOAT_EQ(out.at("max").f[1], 7);
  EXPECT_EQ(out.at("zeros").shape, (Shape{2, 3}));
  EXPECT_EQ(out.at("zeros").f, std::vector<float>(6, 0.0f));
  EXPECT_EQ(out.at("zshape_f").f, (std::vector<float>{2, 3}));
  double lse_want = 0;
  for (float v : xs) lse_want += std::exp(double(v));
  EXPECT_EQ(out.at("lse").shape, Shape{});
  EXPECT_NEAR(out.at("lse").f[0], std::log(lse_want), 1e-5);
  for (int k = 0; k < 8; ++k) {
    EXPECT_NEAR(out.at("sp").f[k], std::log1p(std::exp(double(xs[k]))), 1e-6);
    EXPECT_EQ(out.at("xf").f[k], static_cast<float>(static_cast<int64_t>(xs[k])));  // truncation
  }
}

TEST(OnnxImport, RefusalsNameWhatIsAtFault) {
  auto expect = [](const ModelBuilder& b, const std::string& want) {
    std::string e = b.error();
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  {
    ModelBuilder b(0);
    b.input("x", {2});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    expect(b, "test.onnx: opset 0 is not supported (1 to 25, those below 11 converted to 11; re-export");
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    b.node("NonZero", {"x"}, {"y"}, "nz");
    b.output("y");
    expect(
        b,
        "test.onnx: node 'nz' (NonZero): operator NonZero is not supported (supported: Abs, Acos, Acosh, Add");
  }
  {
    ModelBuilder b;
    b.input("x", {-1, 3});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    expect(b,
           "graph input 'x' has a dynamic dimension 0 ('batch'); give its size: --dim batch=N (or "
           "the input's "
           "shape: --input-shape x=d0,d1,...)");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    set_int(b.node("Softmax", {"x"}, {"y"}, "sm"), "temperature", 2);
    b.output("y");
    expect(b, "node 'sm' (Softmax): attribute 'temperature' is not supported (Softmax takes axis)");
  }
  {
    ModelBuilder b;
    b.input("x", {0, 3});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    expect(b, "graph input 'x' has an empty dimension 0; empty tensors are not supported");
  }
  {
    ModelBuilder b;
    b.input("x", {2}, onnx::TensorProto::INT32);
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    expect(
        b,
        "graph input 'x' is int32; model inputs must be float32, float16, bfloat16, int64 or bool");
  }
  // OneHot and CumSum: what decides the output must be constant and well formed.
  auto onehot = [&](std::vector<int64_t> depth, std::vector<float> values, std::string want) {
    ModelBuilder b;
    b.input("ids", {3}, onnx::TensorProto::INT64);
    b.ints("depth", std::move(depth));
    b.floats("values", std::move(values));
    b.node("OneHot", {"ids", "depth", "values"}, {"y"}, "oh");
    b.output("y");
    expect(b, want);
  };
  onehot({0}, {0, 1}, "node 'oh' (OneHot): depth 0 is not a positive size");
  onehot({2, 3}, {0, 1}, "node 'oh' (OneHot): depth must hold one value, not 2");
  onehot({4}, {0, 1, 2},
         "node 'oh' (OneHot): values must hold two elements (off, on), not shape [3]");
  onehot({int64_t{1} << 40}, {0, 1}, "(OneHot)");  // too big an output
  {
    ModelBuilder b;
    b.input("ids", {3}, onnx::TensorProto::INT64);
    b.input("depth", {1}, onnx::TensorProto::INT64);
    b.floats("values", {0, 1});
    b.node("OneHot", {"ids", "depth", "values"}, {"y"}, "oh");
    b.output("y");
    expect(b, "node 'oh' (OneHot): input 1 (depth, 'depth') is computed at run time");
  }
  auto cumsum = [&](std::vector<int64_t> axis, std::string want) {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.ints("axis", std::move(axis));
    b.node("CumSum", {"x", "axis"}, {"y"}, "cs");
    b.output("y");
    expect(b, want);
  };
  cumsum({0, 1}, "node 'cs' (CumSum): axis must be one integer, not 2 int64 values");
  cumsum({2}, "node 'cs' (CumSum): axis 2 is out of range for rank 2");
  {
    ModelBuilder b;
    b.input("x", {2, 3}, onnx::TensorProto::BOOL);
    b.ints("axis", {0});
    b.node("CumSum", {"x", "axis"}, {"y"}, "cs");
    b.output("y");
    expect(b, "node 'cs' (CumSum): input 0 ('x') is bool; this operator takes float32");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    set_int(b.node("Hardmax", {"x"}, {"y"}, "hm"), "axis", 2);
    b.output("y");
    expect(b, "node 'hm' (Hardmax): axis 2 is out of range for rank 2");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3}, onnx::TensorProto::INT64);
    b.node("Hardmax", {"x"}, {"y"}, "hm");
    b.output("y");
    expect(b, "node 'hm' (Hardmax): input 0 ('x') is int64; this operator takes float32");
  }
  {
    ModelBuilder b;
    b.input("x", {3});
    b.node("Trilu", {"x"}, {"y"}, "tri");
    b.output("y");
    expect(b, "node 'tri' (Trilu): input 0 [3] has rank below 2; Trilu needs a matrix");
  }
  {
    ModelBuilder b;
    b.input("x", {3, 3});
    b.ints("k", {1, 2});
    b.node("Trilu", {"x", "k"}, {"y"}, "tri");
    b.output("y");
    expect(b, "node 'tri' (Trilu): k must be one integer, not 2 int64 values");
  }
  {
    ModelBuilder b;
    b.input("x", {3, 4});
    b.ints("idx", {0, 1});  // rank 1, data rank 2
    b.node("GatherElements", {"x", "idx"}, {"y"}, "ge");
    b.output("y");
    expect(b, "node 'ge' (GatherElements): indices [2] must have the rank of data [3, 4]");
  }
  auto gather_nd = [&](std::vector<int64_t> idx_dims, int64_t batch, const std::string& want) {
    ModelBuilder b;
    b.input("x", {2, 3, 4});
    b.input("idx", std::move(idx_dims), onnx::TensorProto::INT64);
    set_int(b.node("GatherND", {"x", "idx"}, {"y"}, "gnd"), "batch_dims", batch);
    b.output("y");
    expect(b, want);
  };
  gather_nd({5, 4}, 0, "node 'gnd' (GatherND): indices end in 4; with batch_dims 0 that must be 1 to 3");
  gather_nd({5, 2}, 3, "node 'gnd' (GatherND): batch_dims 3 must be below the ranks of data [2, 3, 4]");
  gather_nd({3, 1}, 1, "node 'gnd' (GatherND): batch dimension 0 of indices [3, 1] differs from data's [2, 3, 4]");
  {
    ModelBuilder b;
    b.input("x", {3, 4});
    b.ints("idx", {0, 1});
    b.node("ScatterElements", {"x", "idx", "x"}, {"y"}, "se");
    b.output("y");
    expect(b,
           "node 'se' (ScatterElements): indices [2] and updates [3, 4] must have one shape, of "
           "data's rank [3, 4]");
  }
  auto depth_space = [&](const std::string& op, std::vector<int64_t> x, int64_t block,
                         const std::string& mode, const std::string& want) {
    ModelBuilder b;
    b.input("x", std::move(x));
    auto* n = b.node(op, {"x"}, {"y"}, "ds");
    set_int(n, "blocksize", block);
    if (!mode.empty()) {
      auto* a = n->add_attribute();
      a->set_name("mode");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(mode);
    }
    b.output("y");
    if (want.empty())
      EXPECT_EQ(b.error(), "");
    else
      expect(b, want);
  };
  depth_space("DepthToSpace", {1, 8, 2, 2}, 2, "CRD", "");  // imports
  depth_space("DepthToSpace", {1, 6, 2, 2}, 2, "",
              "node 'ds' (DepthToSpace): 6 channels are not a multiple of blocksize^2 = 4");
  depth_space("DepthToSpace", {1, 8, 2, 2}, 0, "", "node 'ds' (DepthToSpace): blocksize 0 is not a positive size");
  depth_space("DepthToSpace", {1, 8, 2, 2}, 2, "XYZ", "node 'ds' (DepthToSpace): mode 'XYZ' is not DCR or CRD");
  depth_space("DepthToSpace", {8, 2, 2}, 2, "", "node 'ds' (DepthToSpace): input 0 [8, 2, 2] must have rank 4 (NCHW)");
  depth_space("SpaceToDepth", {1, 2, 3, 4}, 2, "",
              "node 'ds' (SpaceToDepth): height 3 and width 4 must be multiples of blocksize 2");
  {
    ModelBuilder b;  // int64 inputs import; an operator of floats refuses them
    b.input("x", {2}, onnx::TensorProto::INT64);
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    expect(b, "node 'Relu_y' (Relu): input 0 ('x') is int64; this operator takes float32");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.input("shape", {2}, onnx::TensorProto::FLOAT);
    b.node("Relu", {"x"}, {"r"});
    b.node("Shape", {"r"}, {"s"});
    b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
    b.output("y");
    expect(b,
           "node 'reshape' (Reshape): input 1 (shape, 'shape') is computed at run time; tunefarm "
           "needs static shapes");
  }
  {
    // Declared sizes that differ are a warning, the computed shape kept (as ONNX Runtime
    // does: exporters' shape inference of ceil_mode pooling predates ONNX's rule); a declared
    // rank that differs is refused.
    ModelBuilder b;
    b.input("x", {2, 3});
    b.node("Relu", {"x"}, {"y"});
    b.output("y", {3, 2});
    EXPECT_EQ(b.error(), "");
    Graph g = b.import();
    EXPECT_EQ(g.value("y").shape, (Shape{2, 3}));
    ASSERT_EQ(g.import_warnings.size(), 1u);
    EXPECT_EQ(g.import_warnings[0],
              "test.onnx: graph output 'y' is declared as [3, 2] but computes [2, 3]; the computed "
              "shape is used");
    ModelBuilder r;
    r.input("x", {2, 3});
    r.node("Relu", {"x"}, {"y"});
    r.output("y", {2, 3, 1});
    expect(r, "graph output 'y' is declared with rank 3 but computes [2, 3]");
    ModelBuilder ok;  // as declared: no warning
    ok.input("x", {2, 3});
    ok.node("Relu", {"x"}, {"y"});
    ok.output("y", {2, 3});
    EXPECT_TRUE(ok.import().import_warnings.empty());
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.node("Relu", {"missing"}, {"y"}, "r");
    b.output("y");
    expect(b, "node 'r' (Relu) reads 'missing', which is not defined before it");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.input("w", {4, 3});
    b.node("MatMul", {"x", "w"}, {"y"}, "mm");
    b.output("y");
    expect(b, "node 'mm' (MatMul): inner dimensions differ: [2, 3] x [4, 3]");
  }
  {
    ModelBuilder b;
    b.input("x", {1, 3, 8, 8});
    b.input("w", {4, 2, 3, 3});
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    b.output("y");
    expect(b,
           "node 'conv' (Conv): weight [4, 2, 3, 3] expects 2 input channels, the input [1, 3, 8, "
           "8] has 3");
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    auto* t = b.g->add_initializer();
    t->set_name("ext");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    b.node("Add", {"x", "ext"}, {"y"});
    b.output("y");
    expect(b,
           "initializer 'ext': data stored outside the model file (external data) is not read here (compile, run, "
           "import and tune read it from the model file's directory; quantize and models sent as bytes do not)");
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    auto* t = b.g->add_initializer();
    t->set_name("short");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(3);
    t->add_float_data(1);
    b.node("Add", {"x", "short"}, {"y"});
    b.output("y");
    expect(b, "initializer 'short': holds 1 elements for shape [3]");
  }
  {
    // Sizes past the limit are refused before anything is allocated.
    ModelBuilder b;
    b.input("x", {2});
    b.ints("huge", {int64_t{1} << 20, int64_t{1} << 20});
    b.node("ConstantOfShape", {"huge"}, {"big"}, "cos");
    b.node("Add", {"x", "big"}, {"y"});
    b.output("y");
    expect(
        b,
        "node 'cos' (ConstantOfShape): shape [1048576, 1048576] has more than 4294967296 elements");
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    b.ints("shape", {int64_t{1} << 40, int64_t{1} << 40, -1});
    b.node("Reshape", {"x", "shape"}, {"y"}, "rs");
    b.output("y");
    expect(b,
           "node 'rs' (Reshape): shape [1099511627776, 1099511627776, 1] has more than 4294967296 "
           "elements");
  }
  // 1-D windows (run as 2-D ones of height 1): attributes of the wrong length, a 2-D weight.
  {
    ModelBuilder b;
    b.input("x", {1, 2, 9});
    auto* pool = b.node("MaxPool", {"x"}, {"y"}, "pool");
    auto* k = pool->add_attribute();
    k->set_name("kernel_shape");
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(2);
    k->add_ints(2);
    b.output("y");
    expect(b, "node 'pool' (MaxPool): kernel_shape [2, 2] has 2 values; the 1-D input [1, 2, 9] needs 1");
  }
  {
    ModelBuilder b;
    b.input("x", {1, 2, 9});
    b.input("w", {3, 2});
    b.node("Conv", {"x", "w"}, {"y"}, "conv");
    b.output("y");
    expect(b, "node 'conv' (Conv): weight 'w' [3, 2] must have rank 3 for the 1-D input [1, 2, 9]");
  }
  // Resize: an unknown mode, tf_crop_and_resize, both or neither of scales and sizes, a bad scale.
  for (auto [mode, coord, inputs, want] :
       std::vector<std::tuple<std::string, std::string, std::vector<std::string>, std::string>>{
           {"quintic", "half_pixel", {"x", "", "scales"}, "node 'rs' (Resize): mode 'quintic' is not supported (nearest, linear and cubic are)"},
           {"linear", "tf_crop_and_resize", {"x", "", "scales"}, "coordinate_transformation_mode 'tf_crop_and_resize' is not supported"},
           {"nearest", "half_pixel", {"x", "", "scales", "sizes"}, "node 'rs' (Resize): exactly one of scales and sizes must be given"},
           {"nearest", "half_pixel", {"x"}, "node 'rs' (Resize): exactly one of scales and sizes must be given"},
           {"nearest", "half_pixel", {"x", "", "negative"}, "node 'rs' (Resize): scale -2 on axis 3 is not a positive size factor"}}) {
    ModelBuilder b;
    b.input("x", {1, 2, 3, 4});
    b.floats("scales", {1, 1, 2, 2});
    b.floats("negative", {1, 1, 2, -2});
    b.ints("sizes", {1, 2, 6, 8});
    auto* rs = b.node("Resize", inputs, {"y"}, "rs");
    for (auto [name, value] : {std::pair{"mode", mode}, std::pair{"coordinate_transformation_mode", coord}}) {
      auto* a = rs->add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(value);
    }
    b.output("y");
    expect(b, want);
  }
  // ConvTranspose: output_padding not below the stride, a weight for other channels, pads
  // that leave no output.
  for (auto [weight, attr, values, want] :
       std::vector<std::tuple<std::vector<int64_t>, std::string, std::vector<int64_t>, std::string>>{
           {{2, 3, 3, 3}, "output_padding", {2, 0}, "node 'ct' (ConvTranspose): output_padding 2 must be less than the stride 2 or the dilation 1"},
           {{4, 3, 3, 3}, "group", {1}, "node 'ct' (ConvTranspose): weight [4, 3, 3, 3] and group 1 do not fit the input's 2 channels"},
           {{2, 3, 3, 3}, "pads", {5, 0, 5, 0}, "node 'ct' (ConvTranspose): the pads leave an output of -1x9"}}) {
    ModelBuilder b;
    b.input("x", {1, 2, 4, 4});
    b.floats("w", std::vector<float>(static_cast<size_t>(num_elements(weight)), 0.5f));
    b.g->mutable_initializer(b.g->initializer_size() - 1)->clear_dims();
    for (int64_t d : weight) b.g->mutable_initializer(b.g->initializer_size() - 1)->add_dims(d);
    auto* ct = b.node("ConvTranspose", {"x", "w"}, {"y"}, "ct");
    auto* a = ct->add_attribute();
    a->set_name(attr);
    if (values.size() == 1) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(values[0]);
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : values) a->add_ints(v);
    }
    auto* strides = ct->add_attribute();
    strides->set_name("strides");
    strides->set_type(onnx::AttributeProto::INTS);
    strides->add_ints(2);
    strides->add_ints(2);
    b.output("y");
    expect(b, want);
  }
  {
    ModelBuilder b;
    b.input("x", {1, 3, 4});
    b.floats("scale", {1, 1});
    b.floats("bias", {0, 0, 0});
    b.node("InstanceNormalization", {"x", "scale", "bias"}, {"y"}, "in");
    b.output("y");
    expect(b, "node 'in' (InstanceNormalization): scale [2] must be [3]");
  }
  // Einsum: an ellipsis, a label with two extents, an output label in no operand; Tile: a
  // repeat per axis.
  for (auto [equation, want] : std::vector<std::pair<std::string, std::string>>{
           {"...ij,...jk->...ik", "node 'es' (Einsum): equation '...ij,...jk->...ik': ellipsis ('...') is not supported"},
           {"ij,ij->i", "node 'es' (Einsum): label 'i' is 2 in one operand and 3 in another"},
           {"ij,jk->iz", "node 'es' (Einsum): equation 'ij,jk->iz': output label 'z' is in no operand"},
           {"ij->i", "node 'es' (Einsum): equation 'ij->i' has 1 operands; the node has 2 inputs"}}) {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.input("y", {3, 2});
    auto* es = b.node("Einsum", {"x", "y"}, {"z"}, "es");
    auto* a = es->add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(equation);
    b.output("z");
    expect(b, want);
  }
  {
    ModelBuilder b;
    for (const char* in : {"p", "q", "r"}) b.input(in, {int64_t{1} << 21});
    auto* es = b.node("Einsum", {"p", "q", "r"}, {"z"}, "es");
    auto* a = es->add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("a,b,c->");
    b.output("z");
    expect(b, "node 'es' (Einsum): equation 'a,b,c->' has a loop nest of more than 2^62 iterations");
  }
  {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.ints("repeats", {2});
    b.node("Tile", {"x", "repeats"}, {"y"}, "tile");
    b.output("y");
    expect(b, "node 'tile' (Tile): repeats [2] must have one value per axis of [2, 3]");
  }
  // Dropout in training mode: only with a ratio of 0 (the identity).
  for (float ratio : {0.0f, 0.5f}) {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.floats("ratio", {ratio});
    b.g->mutable_initializer(b.g->initializer_size() - 1)->clear_dims();
    auto* train = b.g->add_initializer();  // a scalar bool true
    train->set_name("train");
    train->set_data_type(onnx::TensorProto::BOOL);
    train->add_int32_data(1);
    b.node("Dropout", {"x", "ratio", "train"}, {"y", "mask"}, "drop");
    b.node("Relu", {"y"}, {"z"});
    b.output("z");
    if (ratio == 0) {
      Graph g = b.import();
      EXPECT_EQ(g.value("mask").dtype, DType::Bool);
      run_passes(g, PassOptions{});
      EXPECT_EQ(g.nodes.size(), 1u) << "the unread mask lets simplify-inference drop the Dropout";
    } else {
      expect(b, "node 'drop' (Dropout): training_mode=true with a ratio other than a constant 0 is not supported");
    }
  }
  // Pad: an unsupported mode, pads of the wrong length, padding that leaves a negative size.
  for (auto [mode, pad_values, want] :
       std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>>{
           {"wrap", {1, 1, 1, 1}, "node 'pad' (Pad): mode 'wrap' is not supported (constant, reflect and edge are; wrap from opset 19)"},
           {"constant", {1, 1, 1}, "node 'pad' (Pad): pads has 3 values; 2 axes need 4"},
           {"reflect", {0, -3, 0, -1}, "node 'pad' (Pad): pads -3 and -1 on axis 1 of size 3 leave no valid size"}}) {
    ModelBuilder b;
    b.input("x", {2, 3});
    b.ints("pads", pad_values);
    auto* pad = b.node("Pad", {"x", "pads"}, {"y"}, "pad");
    auto* a = pad->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    b.output("y");
    expect(b, want);
  }
  try {
    import_onnx_bytes(std::string("\x0a\xff\xff\xff\xff garbage", 12), "junk.onnx");
    ADD_FAILURE() << "imported garbage";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("junk.onnx: not an ONNX model"), std::string::npos)
        << e.what();
  }
  try {
    import_onnx("/nonexistent/model.onnx");
    ADD_FAILURE();
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/model.onnx"), std::string::npos)
        << e.what();
  }
}

// Shape arithmetic on hostile int64 values: overflows are errors, extreme slice bounds clamp,
// window sizes are bounded; nothing is undefined behaviour (the fuzz target checks this too,
// under UBSan).
// Initializers stored outside the model file (ONNX external data, as torch.onnx.export writes
// models past 2 GB: RegNetY-128GF, ViT-H/14) are read from the model's directory, at their
// offset, exactly their bytes; a location out of that directory (absolute, '..', a link out),
// a missing or short file, a wrong length or key is refused by name, reading nothing else.
TEST(OnnxImport, ExternalDataIsReadFromTheModelsDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tf-external-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  const std::vector<float> w = {1.5f, -2.25f, 3.0f};
  {
    std::ofstream f(dir / "sub" / "w.bin", std::ios::binary);
    f.write("12345678", 8);  // another tensor's bytes before ours
    f.write(reinterpret_cast<const char*>(w.data()), 12);
  }
  std::ofstream(dir / "..secret", std::ios::binary) << "not a path outside";
  fs::path outside = fs::temp_directory_path() / ("tf-external-outside-" + std::to_string(getpid()) + ".bin");
  std::ofstream(outside, std::ios::binary).write(reinterpret_cast<const char*>(w.data()), 12);
  fs::create_symlink(outside, dir / "link.bin");
  // A model reading initializer 'ext' from external data with these entries.
  auto model = [&](std::vector<std::pair<std::string, std::string>> entries, int type = onnx::TensorProto::FLOAT) {
    ModelBuilder b;
    b.input("x", {3});
    auto* t = b.g->add_initializer();
    t->set_name("ext");
    t->set_data_type(type);
    t->add_dims(3);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [k, v] : entries) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    b.node("Add", {"x", "ext"}, {"y"});
    b.output("y");
    const std::string path = (dir / "m.onnx").string();
    b.save(path);
    return path;
  };
  auto error = [&](const std::string& path) {
    try {
      import_onnx(path);
    } catch (const tf::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Graph g = import_onnx(model({{"location", "sub/w.bin"}, {"offset", "8"}, {"length", "12"}, {"checksum", "x"}}));
  ASSERT_TRUE(g.values.at("ext").constant);
  EXPECT_EQ(g.values.at("ext").constant->f, w);
  // Without a length: the tensor's bytes.
  g = import_onnx(model({{"location", "sub/w.bin"}, {"offset", "8"}}));
  EXPECT_EQ(g.values.at("ext").constant->f, w);
  auto refused = [&](std::vector<std::pair<std::string, std::string>> entries, const std::string& want,
                     int type = onnx::TensorProto::FLOAT) {
    const std::string e = error(model(std::move(entries), type));
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  // Without an offset: from the file's start.
  g = import_onnx(model({{"location", "sub/w.bin"}}));
  EXPECT_NE(g.values.at("ext").constant->f, w);
  refused({{"location", "sub/w.bin"}, {"offset", "12"}},
          "initializer 'ext': external data file 'sub/w.bin' has 20 bytes; the tensor needs 12 from offset 12");
  refused({{"location", "sub/w.bin"}, {"offset", "9223372036854775807"}}, "needs 12 from offset 9223372036854775807");
  refused({{"location", "sub/w.bin"}, {"length", "16"}}, "external data length 16 is not the 12 bytes");
  refused({{"location", "sub/w.bin"}, {"offset", "-8"}}, "external data offset '-8' is not a non-negative integer");
  refused({{"location", "sub/w.bin"}, {"offset", "8x"}}, "external data offset '8x' is not a non-negative integer");
  refused({{"location", "sub/w.bin"}, {"basepath", "/"}}, "external data key 'basepath' is not one of");
  refused({{"offset", "8"}}, "external data without a location");
  refused({{"location", "missing.bin"}}, "cannot open external data file 'missing.bin'");
  refused({{"location", "sub"}}, "external data 'sub' is not a regular file");
  refused({{"location", outside.string()}}, "is not a path inside the model's directory (absolute, or with '..')");
  refused({{"location", "sub/../../x.bin"}}, "is not a path inside the model's directory");
  refused({{"location", "link.bin"}}, "external data file 'link.bin' resolves outside the model's directory");
  refused({{"location", "sub/w.bin"}}, "element type string is not supported in external data", onnx::TensorProto::STRING);
  // A file name that merely starts with two dots is inside the directory.
  EXPECT_EQ(error(model({{"location", "..secret"}})), "");
  // A file the tuning service keeps among other users' models reads none (service/job_manager.cc).
  const std::string kept = model({{"location", "sub/w.bin"}, {"offset", "8"}});
  try {
    import_onnx(kept, {}, /*external_data=*/false);
    ADD_FAILURE() << "external data read where it must not be";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("external data) is not read here"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  fs::remove(outside);
}

TEST(OnnxImport, HostileIntegers) {
  auto error_of = [](const ModelBuilder& b) { return b.error(); };
  {
    ModelBuilder b;
    b.input("x", {2});
    b.ints("big", {INT64_MAX});
    b.ints("one", {1});
    b.node("Add", {"big", "one"}, {"s"}, "add");
    b.node("Reshape", {"x", "s"}, {"y"});
    b.output("y");
    EXPECT_NE(error_of(b).find("node 'add' (Add): int64 overflow in 9223372036854775807 Add 1"),
              std::string::npos)
        << error_of(b);
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    b.ints("zero", {0});
    b.ints("n", {7});
    b.node("Div", {"n", "zero"}, {"q"}, "div");
    b.node("Reshape", {"x", "q"}, {"y"});
    b.output("y");
    EXPECT_NE(error_of(b).find("node 'div' (Div): integer division by zero"), std::string::npos)
        << error_of(b);
  }
  {
    // Slice bounds at the int64 extremes clamp to the axis; a step of INT64_MIN is a step back.
    ModelBuilder b;
    b.input("x", {5});
    b.ints("starts", {INT64_MIN});
    b.ints("ends", {INT64_MAX});
    b.ints("axes", {0});
    b.ints("steps", {INT64_MAX});
    b.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
    b.ints("starts2", {INT64_MAX});
    b.ints("ends2", {INT64_MIN});
    b.ints("steps2", {INT64_MIN});
    b.node("Slice", {"x", "starts2", "ends2", "axes", "steps2"}, {"z"});
    b.output("y");
    b.output("z");
    Graph g = b.import();
    EXPECT_EQ(g.value("y").shape, Shape{1});
    EXPECT_EQ(g.value("z").shape, Shape{1});
    auto out = run_reference(g, {{"x", HostTensor::floats({5}, {1, 2, 3, 4, 5})}});
    EXPECT_EQ(out.at("y").f, std::vector<float>{1});
    EXPECT_EQ(out.at("z").f, std::vector<float>{5});
  }
  {
    ModelBuilder b;
    b.input("x", {1, 1, 4, 4});
    b.input("w", {1, 1, 1, 1});
    auto* conv = b.node("Conv", {"x", "w"}, {"y"}, "conv");
    auto* a = conv->add_attribute();
    a->set_name("strides");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(INT64_MAX);
    a->add_ints(1);
    b.output("y");
    EXPECT_NE(
        error_of(b).find("node 'conv' (Conv): stride 9223372036854775807 is not in [1, 2^30]"),
        std::string::npos)
        << error_of(b);
  }
  {
    ModelBuilder b;
    b.input("x", {2});
    b.ints("start", {INT64_MAX - 1});
    b.ints("limit", {INT64_MAX});
    b.ints("delta", {1});
    b.node("Range", {"start", "limit", "delta"}, {"r"});
    b.node("Cast", {"r"}, {"rf"});
    set_int(b.g->mutable_node(1), "to", onnx::TensorProto::FLOAT);
    b.node("Add", {"x", "rf"}, {"y"});
    b.output("y");
    EXPECT_EQ(error_of(b), "");  // one element, INT64_MAX - 1: no overflow
  }
}

namespace {

// A float tensor of the given dims as an initializer, filled from a fixed generator.
std::vector<float> add_random(ModelBuilder& b, const std::string& name, std::vector<int64_t> dims,
                              uint32_t& state, bool as_input) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(state >> 8) / float(1 << 24) * 2.0f - 1.0f;
  }
  if (as_input) {
    b.input(name, dims);
    return v;
  }
  auto* t = b.g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
  return v;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

}  // namespace

// RNN, GRU (linear_before_reset 0 and 1) and LSTM, reverse and bidirectional, both layouts,
// with biases and initial states, against the ONNX specification's equations written out
// here in double. The node tests cover the forward defaults; PyTorch's exports are checked
// by tests/graph/torch_models_test.py.
TEST(OnnxImport, RecurrentOpsMatchTheirEquationsWrittenOut) {
  const int64_t seq = 4, batch = 2, in = 3, H = 5;
  struct Case {
    const char* op;
    const char* direction;
    int64_t layout, lbr;
    bool weights_as_inputs;
  };
  for (Case c : {Case{"RNN", "reverse", 0, 0, false}, Case{"GRU", "bidirectional", 0, 0, false},
                 Case{"GRU", "reverse", 1, 1, true}, Case{"LSTM", "bidirectional", 1, 0, false},
                 Case{"LSTM", "reverse", 0, 0, true}}) {
    SCOPED_TRACE(std::string(c.op) + " " + c.direction + " layout " + std::to_string(c.layout));
    const std::string op = c.op;
    const int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;
    const int64_t dirs = std::string(c.direction) == "bidirectional" ? 2 : 1;
    const bool lstm = op == "LSTM";
    ModelBuilder b(14);
    uint32_t state = 12345;
    std::vector<int64_t> xdims = c.layout ? std::vector<int64_t>{batch, seq, in} : std::vector<int64_t>{seq, batch, in};
    std::vector<int64_t> hdims = c.layout ? std::vector<int64_t>{batch, dirs, H} : std::vector<int64_t>{dirs, batch, H};
    std::vector<float> X = add_random(b, "X", xdims, state, true);
    std::vector<float> W = add_random(b, "W", {dirs, gates * H, in}, state, c.weights_as_inputs);
    std::vector<float> R = add_random(b, "R", {dirs, gates * H, H}, state, c.weights_as_inputs);
    std::vector<float> B = add_random(b, "B", {dirs, 2 * gates * H}, state, false);
    std::vector<float> H0 = add_random(b, "h0", hdims, state, true);
    std::vector<float> C0 = lstm ? add_random(b, "c0", hdims, state, false) : std::vector<float>{};
    std::vector<std::string> ins = {"X", "W", "R", "B", "", "h0"};
    std::vector<std::string> outs = {"Y", "Y_h"};
    if (lstm) {
      ins.push_back("c0");
      outs.push_back("Y_c");
    }
    auto* n = b.node(op, ins, outs, "rec");
    set_int(n, "hidden_size", H);
    if (c.layout) set_int(n, "layout", 1);
    if (op == "GRU") set_int(n, "linear_before_reset", c.lbr);
    set_string(n, "direction", c.direction);
    for (const std::string& o : outs) b.output(o);
    Graph g = b.import();
    std::map<std::string, HostTensor> feeds;
    feeds["X"] = HostTensor::floats(xdims, X);
    feeds["h0"] = HostTensor::floats(hdims, H0);
    if (c.weights_as_inputs) {
      feeds["W"] = HostTensor::floats({dirs, gates * H, in}, W);
      feeds["R"] = HostTensor::floats({dirs, gates * H, H}, R);
    }
    // After the passes too (fold-constants slices and transposes the constant weights).
    Graph optimized = g;
    run_passes(optimized, PassOptions{2, {}, {}, nullptr});
    for (const Graph* version : {&g, &optimized}) {
      std::map<std::string, HostTensor> got = run_reference(*version, feeds);
      // Index helpers in the node's layout.
      auto xi = [&](int64_t t, int64_t bb, int64_t k) { return c.layout ? (bb * seq + t) * in + k : (t * batch + bb) * in + k; };
      auto hi = [&](int64_t d, int64_t bb, int64_t j) { return c.layout ? (bb * dirs + d) * H + j : (d * batch + bb) * H + j; };
      auto yi = [&](int64_t t, int64_t d, int64_t bb, int64_t j) {
        return c.layout ? ((bb * seq + t) * dirs + d) * H + j : ((t * dirs + d) * batch + bb) * H + j;
      };
      double worst = 0;
      for (int64_t d = 0; d < dirs; ++d) {
        std::vector<double> h(batch * H), cs(batch * H);
        for (int64_t bb = 0; bb < batch; ++bb) {
          for (int64_t j = 0; j < H; ++j) {
            h[bb * H + j] = H0[hi(d, bb, j)];
            if (lstm) cs[bb * H + j] = C0[hi(d, bb, j)];
          }
        }
        // Gate g's pre-activation parts: x W_g^T + Wb_g and h R_g^T + Rb_g (of row j).
        auto xw = [&](int64_t t, int64_t bb, int64_t gt, int64_t j) {
          double s = B[(d * 2 * gates * H) + gt * H + j];
          for (int64_t k = 0; k < in; ++k) s += X[xi(t, bb, k)] * W[((d * gates + gt) * H + j) * in + k];
          return s;
        };
        auto hr = [&](const std::vector<double>& hv, int64_t bb, int64_t gt, int64_t j) {
          double s = B[(d * 2 * gates * H) + gates * H + gt * H + j];
          for (int64_t k = 0; k < H; ++k) s += hv[bb * H + k] * R[((d * gates + gt) * H + j) * H + k];
          return s;
        };
        bool reverse = std::string(c.direction) == "reverse" || d == 1;
        for (int64_t step = 0; step < seq; ++step) {
          int64_t t = reverse ? seq - 1 - step : step;
          std::vector<double> nh(batch * H), nc(batch * H);
          for (int64_t bb = 0; bb < batch; ++bb) {
            for (int64_t j = 0; j < H; ++j) {
              if (op == "RNN") {
                nh[bb * H + j] = std::tanh(xw(t, bb, 0, j) + hr(h, bb, 0, j));
              } else if (lstm) {
                double i = sigmoid(xw(t, bb, 0, j) + hr(h, bb, 0, j));
                double o = sigmoid(xw(t, bb, 1, j) + hr(h, bb, 1, j));
                double f = sigmoid(xw(t, bb, 2, j) + hr(h, bb, 2, j));
                double g2 = std::tanh(xw(t, bb, 3, j) + hr(h, bb, 3, j));
                nc[bb * H + j] = f * cs[bb * H + j] + i * g2;
                nh[bb * H + j] = o * std::tanh(nc[bb * H + j]);
              } else {
                double z = sigmoid(xw(t, bb, 0, j) + hr(h, bb, 0, j));
                double r = sigmoid(xw(t, bb, 1, j) + hr(h, bb, 1, j));
                double hh;
                if (c.lbr) {
                  hh = std::tanh(xw(t, bb, 2, j) + r * hr(h, bb, 2, j));
                } else {
                  std::vector<double> rh(batch * H);
                  for (int64_t k = 0; k < H; ++k) {
                    double rk = sigmoid(xw(t, bb, 1, k) + hr(h, bb, 1, k));
                    rh[bb * H + k] = rk * h[bb * H + k];
                  }
                  hh = std::tanh(xw(t, bb, 2, j) + hr(rh, bb, 2, j));
                }
                nh[bb * H + j] = (1 - z) * hh + z * h[bb * H + j];
              }
            }
          }
          h = nh;
          if (lstm) cs = nc;
          for (int64_t bb = 0; bb < batch; ++bb) {
            for (int64_t j = 0; j < H; ++j)
              worst = std::max(worst, std::fabs(got.at("Y").f[yi(t, d, bb, j)] - h[bb * H + j]));
          }
        }
        for (int64_t bb = 0; bb < batch; ++bb) {
          for (int64_t j = 0; j < H; ++j) {
            worst = std::max(worst, std::fabs(got.at("Y_h").f[hi(d, bb, j)] - h[bb * H + j]));
            if (lstm) worst = std::max(worst, std::fabs(got.at("Y_c").f[hi(d, bb, j)] - cs[bb * H + j]));
          }
        }
      }
      EXPECT_EQ(got.at("Y").shape, c.layout ? Shape({batch, seq, dirs, H}) : Shape({seq, dirs, batch, H}));
      EXPECT_EQ(got.at("Y_h").shape, Shape(hdims));
      EXPECT_LT(worst, 1e-5) << (version == &g ? "as imported" : "after the passes");
    }
  }
}

TEST(OnnxImport, RecurrentRefusalsNameWhatIsAtFault) {
  // An LSTM over X [seq, 2, 3] with hidden size 4, changed by `edit`.
  auto lstm = [](int64_t seq, const std::function<void(ModelBuilder&, onnx::NodeProto*)>& edit) {
    ModelBuilder b(14);
    uint32_t state = 1;
    b.input("X", {seq, 2, 3});
    add_random(b, "W", {1, 16, 3}, state, false);
    add_random(b, "R", {1, 16, 4}, state, false);
    auto* n = b.node("LSTM", {"X", "W", "R"}, {"", "Y_h"}, "lstm");
    set_int(n, "hidden_size", 4);
    b.output("Y_h");
    edit(b, n);
    return b.error();
  };
  auto expect = [](const std::string& got, const std::string& want) {
    EXPECT_NE(got.find(want), std::string::npos) << "got: " << got;
  };
  // The valid model imports.
  EXPECT_EQ(lstm(5, [](ModelBuilder&, onnx::NodeProto*) {}), "");
  expect(lstm(5, [](ModelBuilder& b, onnx::NodeProto* n) {
           uint32_t s = 2;
           add_random(b, "P", {1, 12}, s, false);
           for (const char* in : {"", "", "", "", "P"}) n->add_input(in);
         }),
         "node 'lstm' (LSTM): peepholes (input P) are not supported");
  expect(lstm(5, [](ModelBuilder& b, onnx::NodeProto* n) {
           b.ints("lens", {5, 3});
           n->add_input("");
           n->add_input("lens");
         }),
         "sequence_lens 'lens' must be a constant of 2 values all equal to the sequence length 5");
  // The full length is accepted.
  EXPECT_EQ(lstm(5, [](ModelBuilder& b, onnx::NodeProto* n) {
              b.ints("lens", {5, 5});
              n->add_input("");
              n->add_input("lens");
            }),
            "");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "hidden_size", 5); }),
         "W 'W' has shape [1, 16, 3]; X [5, 2, 3], hidden_size 5 and direction forward need [1, 20, 3]");
  expect(lstm(5, [&](ModelBuilder&, onnx::NodeProto* n) { set_string(n, "direction", "sideways"); }),
         "direction 'sideways' is not supported");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "layout", 2); }),
         "layout 2 is not supported");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "input_forget", 1); }),
         "input_forget 1 is not supported");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) {
           auto* a = n->add_attribute();
           a->set_name("clip");
           a->set_type(onnx::AttributeProto::FLOAT);
           a->set_f(3);
         }),
         "attribute 'clip' is not supported");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_strings(n, "activations", {"Sigmoid", "ScaledTanh", "Tanh"}); }),
         "activation 'ScaledTanh' is not supported (Sigmoid, Tanh, Relu)");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_strings(n, "activations", {"Tanh"}); }),
         "has 1 activations; forward LSTM takes 3");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "speed", 1); }),
         "attribute 'speed' is not supported (LSTM takes");
  expect(lstm(kMaxRecurrentSteps + 1, [](ModelBuilder&, onnx::NodeProto*) {}),
         "sequence length 1025 x 1 directions is more than the 1024 time steps tunefarm unrolls in a model");
  // The budget is the model's: two LSTMs of 600 steps are refused at the second.
  expect(lstm(600, [](ModelBuilder& b, onnx::NodeProto*) {
           auto* m = b.node("LSTM", {"X", "W", "R"}, {"", "Y_h2"}, "lstm2");
           set_int(m, "hidden_size", 4);
           b.output("Y_h2");
         }),
         "node 'lstm2' (LSTM): sequence length 600 x 1 directions is more than the 1024 time steps "
         "tunefarm unrolls in a model (earlier recurrent nodes took 600)");
  expect(lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { n->set_input(1, ""); }),
         "node 'lstm' (LSTM): input 1 is required");
  {
    // A string list where a string is expected is named, not misread.
    std::string e = lstm(5, [](ModelBuilder&, onnx::NodeProto* n) { set_strings(n, "direction", {"forward"}); });
    expect(e, "attribute 'direction' must be a string");
  }
}

// 3-D convolutions (imported as 2-D ones over depth folded into the batch) against the
// definition written out here: pads, strides, dilations, groups, bias, auto_pad.
TEST(OnnxImport, Conv3dMatchesItsDefinitionWrittenOut) {
  struct Case {
    std::vector<int64_t> x, w;  // [N, C, D, H, W], [M, C/group, kd, kh, kw]
    std::vector<int64_t> strides, dilations, pads;
    int64_t group;
    std::string auto_pad;
    bool bias, weights_as_input;
  };
  for (const Case& c : {Case{{1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 1, "", true, false},
                        Case{{2, 4, 7, 5, 6}, {4, 2, 2, 1, 3}, {2, 1, 2}, {2, 1, 1}, {0, 0, 1, 1, 0, 2}, 2, "", false, true},
                        Case{{1, 3, 6, 5, 5}, {2, 3, 3, 1, 1}, {2, 2, 1}, {1, 1, 1}, {}, 1, "SAME_UPPER", true, false},
                        Case{{1, 1, 4, 4, 4}, {1, 1, 1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {}, 1, "VALID", false, false}}) {
    SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w));
    ModelBuilder b(13);
    uint32_t state = 99;
    std::vector<float> X = add_random(b, "x", c.x, state, true);
    std::vector<float> W = add_random(b, "w", c.w, state, c.weights_as_input);
    std::vector<float> B = c.bias ? add_random(b, "b", {c.w[0]}, state, false) : std::vector<float>{};
    std::vector<std::string> ins = {"x", "w"};
    if (c.bias) ins.push_back("b");
    auto* n = b.node("Conv", ins, {"y"}, "conv3d");
    set_ints(n, "strides", c.strides);
    set_ints(n, "dilations", c.dilations);
    if (!c.pads.empty()) set_ints(n, "pads", c.pads);
    if (c.group != 1) set_int(n, "group", c.group);
    if (!c.auto_pad.empty()) set_string(n, "auto_pad", c.auto_pad);
    b.output("y");
    Graph g = b.import();
    // Pads of each axis (begin, end), as the spec computes them for auto_pad.
    std::vector<int64_t> pb(3), pe(3), out(3);
    for (int a = 0; a < 3; ++a) {
      int64_t in = c.x[2 + a], span = (c.w[2 + a] - 1) * c.dilations[a] + 1;
      if (c.auto_pad == "SAME_UPPER") {
        int64_t o = (in + c.strides[a] - 1) / c.strides[a];
        int64_t total = std::max<int64_t>(0, (o - 1) * c.strides[a] + span - in);
        pb[a] = total / 2;
        pe[a] = total - pb[a];
      } else if (!c.pads.empty()) {
        pb[a] = c.pads[a];
        pe[a] = c.pads[3 + a];
      }
      out[a] = (in + pb[a] + pe[a] - span) / c.strides[a] + 1;
    }
    const int64_t N = c.x[0], C = c.x[1], M = c.w[0], Cg = c.w[1], Mg = M / c.group;
    std::map<std::string, HostTensor> feeds = {{"x", HostTensor::floats(c.x, X)}};
    if (c.weights_as_input) feeds["w"] = HostTensor::floats(c.w, W);
    Graph optimized = g;
    run_passes(optimized, PassOptions{2, {}, {}, nullptr, 8});
    for (const Graph* version : {&g, &optimized}) {
      HostTensor y = run_reference(*version, feeds).at("y");
      ASSERT_EQ(y.shape, Shape({N, M, out[0], out[1], out[2]}));
      double worst = 0;
      for (int64_t nn = 0; nn < N; ++nn)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t od = 0; od < out[0]; ++od)
            for (int64_t oh = 0; oh < out[1]; ++oh)
              for (int64_t ow = 0; ow < out[2]; ++ow) {
                double s = c.bias ? B[m] : 0;
                for (int64_t ci = 0; ci < Cg; ++ci)
                  for (int64_t kd = 0; kd < c.w[2]; ++kd)
                    for (int64_t kh = 0; kh < c.w[3]; ++kh)
                      for (int64_t kw = 0; kw < c.w[4]; ++kw) {
                        int64_t id = od * c.strides[0] + kd * c.dilations[0] - pb[0];
                        int64_t ih = oh * c.strides[1] + kh * c.dilations[1] - pb[1];
                        int64_t iw = ow * c.strides[2] + kw * c.dilations[2] - pb[2];
                        if (id < 0 || ih < 0 || iw < 0 || id >= c.x[2] || ih >= c.x[3] || iw >= c.x[4]) continue;
                        int64_t cin = (m / Mg) * Cg + ci;
                        s += double(X[(((nn * C + cin) * c.x[2] + id) * c.x[3] + ih) * c.x[4] + iw]) *
                             W[(((m * Cg + ci) * c.w[2] + kd) * c.w[3] + kh) * c.w[4] + kw];
                      }
                int64_t at = (((nn * M + m) * out[0] + od) * out[1] + oh) * out[2] + ow;
                worst = std::max(worst, std::fabs(y.f[at] - s));
              }
      EXPECT_LT(worst, 1e-5) << (version == &g ? "as imported" : "after the passes");
    }
  }
  // Refusals name the node and the attribute.
  auto conv3d = [](const std::function<void(onnx::NodeProto*)>& edit) {
    ModelBuilder b(13);
    uint32_t state = 1;
    b.input("x", {1, 2, 4, 5, 5});
    add_random(b, "w", {3, 2, 3, 3, 3}, state, false);
    auto* n = b.node("Conv", {"x", "w"}, {"y"}, "c3");
    edit(n);
    b.output("y");
    return b.error();
  };
  EXPECT_EQ(conv3d([](onnx::NodeProto*) {}), "");
  std::string e = conv3d([&](onnx::NodeProto* n) { set_ints(n, "strides", {1, 1}); });
  EXPECT_NE(e.find("node 'c3' (Conv): strides [1, 1] has 2 values; the 3-D input [1, 2, 4, 5, 5] needs 3"), std::string::npos) << e;
  e = conv3d([&](onnx::NodeProto* n) { set_ints(n, "dilations", {3, 1, 1}); });
  EXPECT_NE(e.find("node 'c3' (Conv): the window's depth 7 is larger than the padded input's 4"), std::string::npos) << e;
  e = conv3d([&](onnx::NodeProto* n) { set_ints(n, "pads", {0, 0, -1, 0, 0, 0}); });
  EXPECT_NE(e.find("pads value -1 is not in [0, 2^30]"), std::string::npos) << e;
  e = conv3d([&](onnx::NodeProto* n) { set_ints(n, "kernel_shape", {65, 3, 3}); });
  EXPECT_NE(e.find("node 'c3' (Conv): a depth window of 65 taps is more than the 64 tunefarm unrolls"), std::string::npos) << e;
  e = conv3d([&](onnx::NodeProto* n) { set_ints(n, "kernel_shape", {3, 3, 2}); });
  EXPECT_NE(e.find("kernel_shape [3, 3, 2] differs from the weight's [3, 2, 3, 3, 3]"), std::string::npos) << e;
}

// 3-D MaxPool and AveragePool (2-D pooling per depth, then the depth window's taps combined)
// against the definition written out here, with the 2-D pooling's conventions: pads,
// strides, dilations (MaxPool), ceil_mode (whose overhang counts for nothing),
// count_include_pad, auto_pad.
TEST(OnnxImport, Pool3dMatchesItsDefinitionWrittenOut) {
  struct Case {
    std::string op;
    std::vector<int64_t> x, k, strides, dilations, pads;
    int64_t ceil_mode, count_include_pad;
    std::string auto_pad;
  };
  for (const Case& c : {Case{"MaxPool", {1, 2, 6, 7, 5}, {3, 3, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 0, 1, 1, 1}, 0, 0, ""},
                        Case{"MaxPool", {2, 1, 7, 5, 6}, {2, 2, 2}, {2, 1, 2}, {2, 1, 1}, {0, 0, 0, 0, 0, 0}, 1, 0, ""},
                        Case{"AveragePool", {1, 2, 7, 6, 5}, {3, 2, 3}, {2, 2, 1}, {1, 1, 1}, {1, 0, 1, 1, 1, 1}, 1, 0, ""},
                        Case{"AveragePool", {1, 3, 5, 5, 5}, {2, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 1, 1, ""},
                        Case{"AveragePool", {1, 1, 6, 4, 4}, {3, 2, 2}, {2, 1, 1}, {1, 1, 1}, {}, 0, 0, "SAME_UPPER"}}) {
    SCOPED_TRACE(c.op + " x " + shape_str(c.x) + " k " + shape_str(c.k));
    const bool is_max = c.op == "MaxPool";
    ModelBuilder b(13);
    uint32_t state = 5;
    std::vector<float> X = add_random(b, "x", c.x, state, true);
    // All negative for MaxPool: padding that took part as 0 instead of -inf would show.
    if (is_max) for (float& v : X) v -= 1.5f;
    auto* n = b.node(c.op, {"x"}, {"y"}, "pool3d");
    set_ints(n, "kernel_shape", c.k);
    set_ints(n, "strides", c.strides);
    if (is_max) set_ints(n, "dilations", c.dilations);
    if (!c.pads.empty()) set_ints(n, "pads", c.pads);
    if (c.ceil_mode) set_int(n, "ceil_mode", 1);
    if (c.count_include_pad) set_int(n, "count_include_pad", 1);
    if (!c.auto_pad.empty()) set_string(n, "auto_pad", c.auto_pad);
    b.output("y");
    Graph g = b.import();
    std::vector<int64_t> pb(3), pe(3), out(3), span(3);
    for (int a = 0; a < 3; ++a) {
      int64_t in = c.x[2 + a];
      span[a] = (c.k[a] - 1) * c.dilations[a] + 1;
      if (c.auto_pad == "SAME_UPPER") {
        int64_t o = (in + c.strides[a] - 1) / c.strides[a];
        int64_t total = std::max<int64_t>(0, (o - 1) * c.strides[a] + span[a] - in);
        pb[a] = total / 2;
        pe[a] = total - pb[a];
      } else if (!c.pads.empty()) {
        pb[a] = c.pads[a];
        pe[a] = c.pads[3 + a];
      }
      int64_t room = in + pb[a] + pe[a] - span[a];
      out[a] = (c.ceil_mode ? (room + c.strides[a] - 1) / c.strides[a] : room / c.strides[a]) + 1;
      if (c.ceil_mode && (out[a] - 1) * c.strides[a] >= in + pb[a]) --out[a];
    }
    HostTensor y = run_reference(g, {{"x", HostTensor::floats(c.x, X)}}).at("y");
    ASSERT_EQ(y.shape, Shape({c.x[0], c.x[1], out[0], out[1], out[2]}));
    double worst = 0;
    for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
      for (int64_t od = 0; od < out[0]; ++od)
        for (int64_t oh = 0; oh < out[1]; ++oh)
          for (int64_t ow = 0; ow < out[2]; ++ow) {
            double acc = is_max ? -INFINITY : 0;
            int64_t count = 0, padded = 0;
            for (int64_t kd = 0; kd < c.k[0]; ++kd)
              for (int64_t kh = 0; kh < c.k[1]; ++kh)
                for (int64_t kw = 0; kw < c.k[2]; ++kw) {
                  int64_t at[3] = {od * c.strides[0] - pb[0] + kd * c.dilations[0],
                                   oh * c.strides[1] - pb[1] + kh * c.dilations[1],
                                   ow * c.strides[2] - pb[2] + kw * c.dilations[2]};
                  bool in_pad = true, inside = true;
                  for (int a = 0; a < 3; ++a) {
                    in_pad = in_pad && at[a] < c.x[2 + a] + pe[a];
                    inside = inside && at[a] >= 0 && at[a] < c.x[2 + a];
                  }
                  padded += in_pad;
                  if (!inside) continue;
                  double v = X[((p * c.x[2] + at[0]) * c.x[3] + at[1]) * c.x[4] + at[2]];
                  acc = is_max ? std::max(acc, v) : acc + v;
                  ++count;
                }
            if (!is_max) acc /= double(c.count_include_pad ? padded : std::max<int64_t>(count, 1));
            int64_t i = ((p * out[0] + od) * out[1] + oh) * out[2] + ow;
            worst = std::max(worst, std::fabs(y.f[i] - acc));
          }
    EXPECT_LT(worst, 1e-5);
  }
  ModelBuilder b(13);
  b.input("x", {1, 1, 4, 4, 4});
  set_ints(b.node("MaxPool", {"x"}, {"y", "idx"}, "mp"), "kernel_shape", {2, 2, 2});
  b.output("y");
  b.output("idx");
  EXPECT_NE(b.error().find("node 'mp' (MaxPool): has 2 outputs; tunefarm supports 1 (no Indices)"), std::string::npos) << b.error();
}

// ArgMax and ArgMin (the node tests check ties and select_last_index): NaN is picked first, as
// numpy's argmax and argmin do; a constant input folds at import; an axis out of range is the
// node's error.
TEST(OnnxImport, ArgMaxAndArgMinPickTheFirstNaNAndFold) {
  ModelBuilder b(13);
  b.input("x", {2, 4});
  auto* mx = b.node("ArgMax", {"x"}, {"imax"}, "amax");
  set_int(mx, "axis", 1);
  auto* mn = b.node("ArgMin", {"x"}, {"imin"}, "amin");
  set_int(mn, "axis", 1);
  set_int(mn, "keepdims", 0);
  set_int(mn, "select_last_index", 1);
  b.output("imax");
  b.output("imin");
  Graph g = b.import();
  const float nan = std::nanf("");
  auto got = run_reference(g, {{"x", HostTensor::floats({2, 4}, {1, 5, 5, 0, 2, nan, 7, nan})}});
  EXPECT_EQ(got.at("imax").shape, Shape({2, 1}));
  EXPECT_EQ(got.at("imax").i, std::vector<int64_t>({1, 1}));
  EXPECT_EQ(got.at("imin").shape, Shape({2}));
  EXPECT_EQ(got.at("imin").i, std::vector<int64_t>({3, 1}));
  ModelBuilder c(13);
  c.floats("k", {3, 9, 9, 1});
  auto* n = c.node("ArgMax", {"k"}, {"i"}, "amax");
  set_int(n, "select_last_index", 1);
  c.output("i");
  Graph folded = c.import();
  ASSERT_TRUE(folded.nodes.empty());
  EXPECT_EQ(folded.value("i").constant->i, std::vector<int64_t>({2}));
  ModelBuilder e(13);
  e.input("x", {2, 4});
  set_int(e.node("ArgMax", {"x"}, {"i"}, "amax"), "axis", 2);
  e.output("i");
  EXPECT_NE(e.error().find("node 'amax' (ArgMax)"), std::string::npos) << e.error();
  EXPECT_NE(e.error().find("2"), std::string::npos) << e.error();
}

// Every operator's entry is whole: a fusion pattern (never a default: a forgotten injective or
// opaque operator would be fused into an anchor's epilogue), anchors exactly the operators with
// a workload, and an inference unless the importer expands it into others.
// QuantizeLinear and DequantizeLinear (QDQ models) import as float arithmetic on the
// quantized values: checked against the ONNX definitions computed here, per tensor (ties to
// even, saturation at both ends of uint8) and per channel (int8 weights along axis 0 and 1).
TEST(OnnxImport, QuantizeAndDequantizeMatchTheirDefinitions) {
  ModelBuilder b(13);
  b.input("x", {2, 3, 4});
  b.floats_shaped("s", {}, {0.1f});
  b.bytes("z", {}, {128}, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  b.node("DequantizeLinear", {"q", "s", "z"}, {"y"});
  // Weights [3, 4] of int8, one scale per row (axis 0) and per column (axis 1).
  std::vector<int32_t> w = {-128, -1, 0, 127, 5, -7, 9, 100, 3, 2, 1, -50};
  b.bytes("w", {3, 4}, w, onnx::TensorProto::INT8, false);
  b.floats("s_row", {0.5f, 0.25f, 2.0f});
  b.bytes("z_row", {3}, {0, 1, -2});
  auto* dq0 = b.node("DequantizeLinear", {"w", "s_row", "z_row"}, {"w_row"});
  set_int(dq0, "axis", 0);
  b.floats("s_col", {1.0f, 0.5f, 0.25f, 0.125f});
  b.node("DequantizeLinear", {"w", "s_col"}, {"w_col"});  // axis 1 by default; zero point 0
  b.output("y");
  b.output("w_row");
  b.output("w_col");
  Graph g = b.import();
  EXPECT_EQ(g.quantize_nodes, 4);
  HostTensor x = HostTensor::floats({2, 3, 4}, std::vector<float>(24));
  // Ties (0.25 / 0.1 = 2.5 -> 2, 0.35 -> 3.5 -> 4), saturation (-20 -> 0 after the zero
  // point, 30 -> 255) and plain values.
  const std::vector<float> xs = {0.25f, 0.35f, -0.25f, -20.0f, 30.0f, 0.0f, 1.234f, -1.234f, 12.7f, -12.8f, 0.05f, -0.05f};
  for (size_t k = 0; k < 24; ++k) x.f[k] = xs[k % xs.size()] * (k < 12 ? 1.0f : 0.5f);
  auto out = run_reference(g, {{"x", x}});
  for (size_t k = 0; k < 24; ++k) {
    float q = std::nearbyint(x.f[k] / 0.1f) + 128.0f;
    q = std::min(255.0f, std::max(0.0f, q));
    EXPECT_EQ(out.at("y").f[k], (q - 128.0f) * 0.1f) << "x = " << x.f[k];
  }
  const std::vector<float> srow = {0.5f, 0.25f, 2.0f}, zrow = {0, 1, -2}, scol = {1.0f, 0.5f, 0.25f, 0.125f};
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 4; ++c) {
      float v = static_cast<float>(w[r * 4 + c]);
      EXPECT_EQ(out.at("w_row").f[r * 4 + c], (v - zrow[r]) * srow[r]) << r << "," << c;
      EXPECT_EQ(out.at("w_col").f[r * 4 + c], v * scol[c]) << r << "," << c;
    }
  }
  // An int8 zero point (and opset 21's output_dtype saying the same) saturates to [-128, 127].
  ModelBuilder s(13);
  s.input("x", {4});
  s.floats_shaped("s", {}, {1.0f});
  s.bytes("z", {}, {-3});
  s.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  s.output("q");
  auto q = run_reference(s.import(), {{"x", HostTensor::floats({4}, {-200.0f, 200.0f, 1.5f, -1.5f})}}).at("q");
  EXPECT_EQ(q.f, (std::vector<float>{-128.0f, 127.0f, -1.0f, -5.0f}));
}

// tunefarm quantize's parameters, computed by hand: the activation's range over the samples
// (uint8, asymmetric, holding 0) and the weight's per-column scales (MatMul: axis 1).
TEST(Quantize, ScalesAndZeroPointsFollowTheCalibrationRanges) {
  ModelBuilder b(13);
  b.input("x", {2, 2});
  b.floats_shaped("w", {2, 3}, {0.5f, -2.0f, 0.0f, 1.0f, 0.25f, 0.0f});
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  std::vector<std::map<std::string, HostTensor>> samples = {{{"x", HostTensor::floats({2, 2}, {0.5f, 3.0f, -1.0f, 2.0f})}},
                                                            {{"x", HostTensor::floats({2, 2}, {0.0f, 1.0f, 0.5f, 2.5f})}}};
  tf::graph::QuantizeReport r;
  std::string out = quantize_model(b.m.SerializeAsString(), "mm.onnx", samples, {}, &r);
  EXPECT_EQ(r.activations, 1);
  EXPECT_EQ(r.weights, 1);
  EXPECT_EQ(r.nodes, 1);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(out));
  std::map<std::string, HostTensor> inits;
  for (const auto& t : m.graph().initializer()) inits[t.name()] = tensor_from_onnx(t, t.name());
  EXPECT_FALSE(inits.count("w"));  // the float weight is gone
  const float s = 4.0f / 255.0f;   // [-1, 3]
  EXPECT_EQ(inits.at("x_scale").f[0], s);
  EXPECT_EQ(inits.at("x_zero_point").f[0], std::nearbyint(1.0f / s));
  EXPECT_EQ(inits.at("x_zero_point").narrow, Narrow::Uint8);
  EXPECT_EQ(inits.at("w_scale").f, (std::vector<float>{1.0f / 127, 2.0f / 127, 1.0f}));  // an all-zero column: 1
  EXPECT_EQ(inits.at("w_quantized").f, (std::vector<float>{64, -127, 0, 127, 16, 0}));
  EXPECT_EQ(inits.at("w_quantized").narrow, Narrow::Int8);
  // The QDQ model runs, close to the float one.
  Graph q = import_onnx_bytes(out, "mm.int8.onnx");
  EXPECT_EQ(q.quantize_nodes, 3);
  HostTensor y = run_reference(q, samples[0]).at("y");
  EXPECT_NEAR(y.f[0], 0.5 * 0.5 + 3.0 * 1.0, 0.05);
  // A weight read twice, once through an Identity (as PyTorch exports copies of one weight):
  // both readers get the quantized weight.
  ModelBuilder shared(13);
  shared.input("x", {2, 2});
  shared.floats_shaped("w", {2, 2}, {0.5f, -2.0f, 1.0f, 0.25f});
  shared.node("Identity", {"w"}, {"w_copy"});
  shared.node("MatMul", {"x", "w"}, {"h"});
  shared.node("MatMul", {"h", "w_copy"}, {"y"});
  shared.output("y");
  tf::graph::QuantizeReport rs;
  onnx::ModelProto ms;
  ASSERT_TRUE(ms.ParseFromString(quantize_model(shared.m.SerializeAsString(), "shared.onnx", samples, {}, &rs)));
  EXPECT_EQ(rs.weights, 2);
  for (const auto& n : ms.graph().node()) {
    if (n.op_type() == "MatMul") {
      EXPECT_NE(n.input(1).find("_dequantized"), std::string::npos) << n.input(1);
    }
  }
  // Refusals.
  ModelBuilder relu(13);
  relu.input("x", {2});
  relu.node("Relu", {"x"}, {"y"});
  relu.output("y");
  EXPECT_THROW(quantize_model(relu.m.SerializeAsString(), "relu.onnx", samples, {}), tf::UserError);
  EXPECT_THROW(quantize_model(b.m.SerializeAsString(), "mm.onnx", {}, {}), tf::UserError);
  EXPECT_THROW(quantize_model(b.m.SerializeAsString(), "mm.onnx", {{{"z", samples[0].at("x")}}}, {}), tf::UserError);
}

// Entropy calibration clips a long tail where min-max keeps it: normal values with a few
// outliers at 60 get a range near the normal values' (TensorRT's thresholds for a normal
// distribution lie at 3-5 sigma), uniform ones keep nearly their whole range, and a one-sided
// (Relu) tensor keeps its floor at 0.
TEST(Quantize, EntropyCalibrationClipsLongTails) {
  auto range_of = [](const std::vector<float>& v, tf::graph::Calibration method) {
    const int64_t n = static_cast<int64_t>(v.size());
    ModelBuilder b(13);
    b.input("x", {1, n});
    b.floats_shaped("w", {n, 1}, std::vector<float>(static_cast<size_t>(n), 0.5f));
    b.node("MatMul", {"x", "w"}, {"y"});
    b.output("y");
    tf::graph::QuantizeOptions o;
    o.method = method;
    onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromString(quantize_model(b.m.SerializeAsString(), "e.onnx", {{{"x", HostTensor::floats({1, n}, v)}}}, o)));
    std::map<std::string, HostTensor> inits;
    for (const auto& t : m.graph().initializer()) inits[t.name()] = tensor_from_onnx(t, t.name());
    const float s = inits.at("x_scale").f[0], z = inits.at("x_zero_point").f[0];
    return std::pair<float, float>{-z * s, (255 - z) * s};
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> tail(20000);
  for (float& v : tail) v = normal(rng);
  for (int k = 0; k < 10; ++k) tail[static_cast<size_t>(k * 997)] = 60.0f;
  auto [lo_mm, hi_mm] = range_of(tail, tf::graph::Calibration::MinMax);
  auto [lo, hi] = range_of(tail, tf::graph::Calibration::Entropy);
  EXPECT_NEAR(hi_mm, 60.0f, 0.5f);
  EXPECT_GT(hi, 2.5f);
  EXPECT_LT(hi, 8.0f);
  EXPECT_LT(lo, -2.5f);
  EXPECT_GT(lo, -8.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> flat(20000);
  for (float& v : flat) v = uniform(rng);
  auto [flo, fhi] = range_of(flat, tf::graph::Calibration::Entropy);
  EXPECT_GT(fhi, 0.9f);
  EXPECT_LT(flo, -0.9f);
  std::vector<float> relu(20000);
  for (float& v : relu) v = std::max(0.0f, normal(rng));
  auto [rlo, rhi] = range_of(relu, tf::graph::Calibration::Entropy);
  std::printf("entropy ranges: tail [%g, %g], uniform [%g, %g], relu [%g, %g]\n", lo, hi, flo, fhi, rlo, rhi);
  EXPECT_EQ(rlo, 0.0f);
  EXPECT_GT(rhi, 2.0f);
  EXPECT_LT(rhi, 6.0f);
}

// `g` compiled for this machine with default configs and run on `inputs`: its outputs; how
// many of its kernels come from template `tmpl` in `from_template`.
std::vector<HostTensor> compile_and_run(const Graph& g, const std::vector<const HostTensor*>& inputs,
                                        const std::string& tmpl, int& from_template) {
  namespace fs = std::filesystem;
  static int builds = 0;  // a name each: a library loaded once stays loaded under its path
  fs::path so = fs::temp_directory_path() / ("tf-import-test-" + std::to_string(getpid()) + "-" + std::to_string(builds++) + ".so");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  CompiledModel cm = compile_model(g, tf::host_target(), defaults, so.string(), "test");
  from_template = 0;
  for (const ModelKernel& k : cm.kernels) from_template += k.template_name.rfind(tmpl, 0) == 0;
  std::vector<HostTensor> got;
  {
    ModelLibrary lib(so.string());
    lib.run(inputs, got);
  }
  fs::remove(so);
  fs::remove(so.string() + ".json");
  return got;
}

// Row reductions on CPUs keep 16 partial results per row, one per vector lane, over the row's
// whole multiples of 16, then those and the rest (graph/te_kit.h KeptReduction): Softmax,
// LogSoftmax and LayerNormalization over rows of lengths around the multiples (31 has no lane
// stage; 32 and 48 no rest; 33, 47 and 197 a rest of 1, 15 and 5), with large values that
// would overflow exp without the max, match the reference.
TEST(OnnxImport, RowReductionsWithARestMatchTheReference) {
  for (int64_t len : {31, 32, 33, 47, 48, 197}) {
    SCOPED_TRACE(len);
    ModelBuilder b;
    b.input("x", {3, len});
    std::vector<float> scale(static_cast<size_t>(len)), bias(static_cast<size_t>(len));
    for (int64_t k = 0; k < len; ++k) {
      scale[static_cast<size_t>(k)] = 0.5f + 0.01f * static_cast<float>(k);
      bias[static_cast<size_t>(k)] = std::sin(static_cast<float>(k));
    }
    b.floats("scale", scale);
    b.floats("bias", bias);
    b.node("Softmax", {"x"}, {"soft"});
    b.node("LogSoftmax", {"x"}, {"logsoft"});
    b.node("LayerNormalization", {"x", "scale", "bias"}, {"norm"});
    for (const char* o : {"soft", "logsoft", "norm"}) b.output(o);
    Graph g = b.import();
    std::vector<float> xs(static_cast<size_t>(3 * len));
    for (size_t k = 0; k < xs.size(); ++k) xs[k] = 40.0f * std::sin(0.7f * static_cast<float>(k)) + (k % 7 == 3 ? 60.0f : 0.0f);
    HostTensor x = HostTensor::floats({3, len}, xs);
    int from_template = 0;
    std::vector<HostTensor> got = compile_and_run(g, {&x}, "generic", from_template);
    auto want = run_reference(g, {{"x", x}});
    ASSERT_EQ(got.size(), 3u);
    const char* names[] = {"soft", "logsoft", "norm"};
    for (size_t o = 0; o < 3; ++o) {
      const std::vector<float>& w = want.at(names[o]).f;
      ASSERT_EQ(got[o].f.size(), w.size());
      for (size_t k = 0; k < w.size(); ++k)
        EXPECT_NEAR(got[o].f[k], w[k], 2e-5 * (1 + std::fabs(w[k]))) << names[o] << " element " << k;
    }
  }
}

// The graph after the passes (-O2, as compile --model), compiled for this CPU and run on x:
// every output in `outs` within 2e-5 of the reference evaluation's (`want`).
static void expect_compiled_as_reference(const Graph& g, const HostTensor& x, const std::map<std::string, HostTensor>& want,
                                  const std::vector<std::string>& outs) {
  Graph optimized = g;
  run_passes(optimized, PassOptions{2, {}, {}, nullptr});
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(optimized, {&x}, "generic", from_template);
  ASSERT_EQ(got.size(), outs.size());
  for (size_t o = 0; o < got.size(); ++o) {  // as doubles: float, int64 and bool outputs alike
    const HostTensor& w = want.at(outs[o]);
    ASSERT_EQ(got[o].size(), w.size()) << outs[o];
    for (int64_t k = 0; k < w.size(); ++k) {
      const double wv = w.as_double(k), gv = got[o].as_double(k);
      EXPECT_NEAR(gv, wv, 2e-5 * (1 + std::fabs(wv))) << outs[o] << " element " << k;
    }
  }
}

// Operators and attributes of opsets 18 to 25 against their definitions written out here
// (reference evaluation) and compiled (against the reference): Split's num_outputs (the last
// part smaller), Pad's wrap mode, ScatterElements' max and min, AveragePool's dilations, Gelu's
// tanh form, GroupNormalization per group (18) and per channel (21), RMSNormalization (23), LRN,
// and Resize's axes. TF_OPSET_MODELS_DIR=dir saves the model as dir/newer_opsets.onnx: the
// test graph_ort (ort_test.py) runs it in ONNX Runtime and compares every output with ours.
TEST(OnnxImport, NewerOpsetsMatchTheirDefinitions) {
  const int64_t N = 2, C = 6, H = 3, W = 5;
  std::vector<float> xs(static_cast<size_t>(N * C * H * W));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.37f * static_cast<float>(k)) * 2.0f + 0.1f;
  auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w) { return double(xs[static_cast<size_t>(((n * C + c) * H + h) * W + w)]); };
  ModelBuilder b(23);
  b.input("x", {N, C, H, W});
  auto* split = b.node("Split", {"x"}, {"s0", "s1", "s2"});
  set_int(split, "axis", 3);
  set_int(split, "num_outputs", 3);  // 5 -> 2, 2, 1
  b.ints("wrap_pads", {0, 0, 1, 2, 0, 0, 2, 3});
  set_string(b.node("Pad", {"x", "wrap_pads"}, {"wrap"}), "mode", "wrap");
  b.ints("sidx", {0, 0, 2});
  b.floats("supd", {5, 9, -5});
  b.ints("flat_shape", {-1});
  b.node("Reshape", {"x", "flat_shape"}, {"flat"});
  auto* smax = b.node("ScatterElements", {"flat", "sidx", "supd"}, {"smax"});
  set_string(smax, "reduction", "max");
  auto* avg = b.node("AveragePool", {"x"}, {"avg"});
  set_ints(avg, "kernel_shape", {2, 2});
  set_ints(avg, "dilations", {2, 3});
  set_string(b.node("Gelu", {"x"}, {"gelu"}), "approximate", "tanh");
  std::vector<float> cs, gs;
  for (int64_t c = 0; c < C; ++c) cs.push_back(0.5f + 0.25f * static_cast<float>(c));
  b.floats("cscale", cs);
  b.floats("cbias", {0, 1, 2, 3, 4, 5});
  set_int(b.node("GroupNormalization", {"x", "cscale", "cbias"}, {"gn"}), "num_groups", 2);
  b.floats("wscale", {1, 2, 3, 4, 5});
  set_int(b.node("RMSNormalization", {"x", "wscale"}, {"rms"}), "axis", 2);
  auto* lrn = b.node("LRN", {"x"}, {"lrn"});
  set_int(lrn, "size", 3);  // odd: ONNX Runtime refuses even sizes (LrnOfEvenSize, below)
  set_float(lrn, "alpha", 0.5f);
  b.floats("rscales", {2.0f, 0.5f});
  auto* rs = b.node("Resize", {"x", "", "rscales"}, {"rs"});
  set_ints(rs, "axes", {2, 1});
  const char* outs[] = {"s2", "wrap", "smax", "avg", "gelu", "gn", "rms", "lrn", "rs"};
  for (const char* o : outs) b.output(o);
  Graph g = b.import();
  HostTensor x = HostTensor::floats({N, C, H, W}, xs);
  auto want = run_reference(g, {{"x", x}});
  auto expect_all = [&](const char* name, const Shape& shape, const std::function<double(int64_t, int64_t, int64_t, int64_t)>& f,
                        double tol) {
    const HostTensor& t = want.at(name);
    ASSERT_EQ(t.shape, shape) << name;
    int64_t k = 0;
    for (int64_t n = 0; n < shape[0]; ++n)
      for (int64_t c = 0; c < shape[1]; ++c)
        for (int64_t h = 0; h < shape[2]; ++h)
          for (int64_t w = 0; w < shape[3]; ++w, ++k) EXPECT_NEAR(t.f[static_cast<size_t>(k)], f(n, c, h, w), tol) << name << " element " << k;
  };
  expect_all("s2", {N, C, H, 1}, [&](int64_t n, int64_t c, int64_t h, int64_t) { return at(n, c, h, 4); }, 0);
  expect_all("wrap", {N, C, H + 3, W + 5}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return at(n, c, (h - 1 + H) % H, (w - 2 + W) % W);
  }, 0);
  std::vector<float> scattered = xs;
  scattered[0] = std::max({xs[0], 5.0f, 9.0f});
  scattered[2] = std::max(xs[2], -5.0f);
  EXPECT_EQ(want.at("smax").f, scattered);
  expect_all("avg", {N, C, H - 2, W - 3}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return (at(n, c, h, w) + at(n, c, h, w + 3) + at(n, c, h + 2, w) + at(n, c, h + 2, w + 3)) / 4;
  }, 1e-6);
  expect_all("gelu", {N, C, H, W}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    double v = at(n, c, h, w);
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }, 1e-6);
  expect_all("gn", {N, C, H, W}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    const int64_t g0 = c / 3 * 3;  // 2 groups of 3 channels
    double mean = 0, var = 0;
    for (int64_t cc = g0; cc < g0 + 3; ++cc)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) mean += at(n, cc, hh, ww) / (3 * H * W);
    for (int64_t cc = g0; cc < g0 + 3; ++cc)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t ww = 0; ww < W; ++ww) var += std::pow(at(n, cc, hh, ww) - mean, 2) / (3 * H * W);
    return (at(n, c, h, w) - mean) / std::sqrt(var + 1e-5) * cs[static_cast<size_t>(c)] + double(c);
  }, 1e-5);
  expect_all("rms", {N, C, H, W}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    double ms = 0;
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t ww = 0; ww < W; ++ww) ms += std::pow(at(n, c, hh, ww), 2) / (H * W);
    return at(n, c, h, w) / std::sqrt(ms + 1e-5) * double(w + 1);
  }, 1e-5);
  expect_all("lrn", {N, C, H, W}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    double sq = 0;  // channels c - 1 .. c + 1 (size 3)
    for (int64_t cc = std::max<int64_t>(0, c - 1); cc <= std::min<int64_t>(C - 1, c + 1); ++cc) sq += std::pow(at(n, cc, h, w), 2);
    return at(n, c, h, w) / std::pow(1.0 + 0.5 / 3 * sq, 0.75);
  }, 1e-5);
  // axes [2, 1]: H doubled, C halved (nearest, half_pixel, round_prefer_floor).
  expect_all("rs", {N, C / 2, 2 * H, W}, [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    auto src = [](int64_t o, double s) { return static_cast<int64_t>(std::ceil((o + 0.5) / s - 0.5 - 0.5)); };
    return at(n, std::clamp<int64_t>(src(c, 0.5), 0, C - 1), std::clamp<int64_t>(src(h, 2.0), 0, H - 1), w);
  }, 0);
  // As compile --model: the passes (lower-scatter-nd makes a ScatterElements a Where), compiled.
  expect_compiled_as_reference(g, x, want, {std::begin(outs), std::end(outs)});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/newer_opsets.onnx");
}

// Opset 19's other forms, compiled against the reference evaluation here and compared with ONNX
// Runtime by graph_ort (TF_OPSET_MODELS_DIR=dir saves dir/opset19_forms.onnx): GroupNormalization
// with scale and bias per group (18), ScatterND and ScatterElements min, Resize to sizes kept to
// the aspect ratio (not_larger, not_smaller) and linear half_pixel_symmetric, AveragePool
// dilations with padding not counted, Split num_outputs along another axis.
TEST(OnnxImport, Opset19FormsCompileAsTheReference) {
  const int64_t N = 1, C = 4, H = 6, W = 7;
  std::vector<float> xs(static_cast<size_t>(N * C * H * W));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.29f * static_cast<float>(k) + 0.3f) * 1.7f;
  ModelBuilder b(19);
  b.input("x", {N, C, H, W});
  b.floats("gscale", {0.5f, 2.0f});
  b.floats("gbias", {-1.0f, 3.0f});
  set_int(b.node("GroupNormalization", {"x", "gscale", "gbias"}, {"gn"}), "num_groups", 2);
  b.ints("ndidx", {0, 2, 0, 2, 0, 1});  // [3, 2]: x[0, 2] twice and x[0, 1]
  b.ints("nd_shape", {3, 2});
  b.node("Reshape", {"ndidx", "nd_shape"}, {"ndidx2"});
  std::vector<float> upd;
  for (int64_t k = 0; k < 3 * H * W; ++k) upd.push_back(std::cos(0.7f * static_cast<float>(k)) * 1.2f);
  b.floats_shaped("ndupd", {3, H, W}, upd);
  set_string(b.node("ScatterND", {"x", "ndidx2", "ndupd"}, {"ndmin"}), "reduction", "min");
  b.ints("eidx", {1, 0, 6});
  b.floats("eupd", {-9.0f, 0.0f, 9.0f});
  b.ints("flat_shape", {-1});
  b.node("Reshape", {"x", "flat_shape"}, {"flat"});
  set_string(b.node("ScatterElements", {"flat", "eidx", "eupd"}, {"emin"}), "reduction", "min");
  b.ints("sizes", {9, 20});
  auto* keep = b.node("Resize", {"x", "", "", "sizes"}, {"keep_small"});
  set_ints(keep, "axes", {2, 3});
  set_string(keep, "mode", "linear");
  set_string(keep, "keep_aspect_ratio_policy", "not_larger");
  auto* big = b.node("Resize", {"x", "", "", "sizes"}, {"keep_big"});
  set_ints(big, "axes", {2, 3});
  set_string(big, "keep_aspect_ratio_policy", "not_smaller");
  b.floats("sym_scales", {1.0f, 1.0f, 1.5f, 0.6f});
  auto* sym = b.node("Resize", {"x", "", "sym_scales"}, {"symmetric"});
  set_string(sym, "mode", "linear");
  set_string(sym, "coordinate_transformation_mode", "half_pixel_symmetric");
  auto* avg = b.node("AveragePool", {"x"}, {"avg_pad"});
  set_ints(avg, "kernel_shape", {3, 2});
  set_ints(avg, "dilations", {2, 2});
  set_ints(avg, "pads", {2, 1, 1, 1});
  auto* split = b.node("Split", {"x"}, {"p0", "p1", "p2"});
  set_int(split, "axis", 3);
  set_int(split, "num_outputs", 3);  // 7 -> 3, 3, 1
  const char* outs[] = {"gn", "ndmin", "emin", "keep_small", "keep_big", "symmetric", "avg_pad", "p1", "p2"};
  for (const char* o : outs) b.output(o);
  Graph g = b.import();
  HostTensor x = HostTensor::floats({N, C, H, W}, xs);
  auto want = run_reference(g, {{"x", x}});
  // One scale for both axes: the smaller of 9 / 6 and 20 / 7 (7 * 1.5 = 10.5 rounds up), or the larger.
  EXPECT_EQ(want.at("keep_small").shape, (Shape{N, C, 9, 11}));
  EXPECT_EQ(want.at("keep_big").shape, (Shape{N, C, 17, 20}));
  EXPECT_EQ(want.at("p2").shape, (Shape{N, C, H, 1}));
  // As compile --model: the passes (lower-scatter-nd makes a ScatterElements a Where), compiled.
  expect_compiled_as_reference(g, x, want, {std::begin(outs), std::end(outs)});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/opset19_forms.onnx");
}

// Attention as ONNX's reference computes it (onnx/reference/ops/op_attention.py), naively:
// q [B, Hq, Sq, D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] (row-major), bias(b, h, i, j) added to
// the scaled (and soft-capped) scores; a row whose bias is -inf throughout gives zeros.
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                                    int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t T, int64_t D, int64_t Dv,
                                    double scale, double softcap, const std::function<double(int64_t, int64_t, int64_t, int64_t)>& bias) {
  std::vector<double> y(static_cast<size_t>(B * Hq * Sq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> sc(static_cast<size_t>(T));
        double top = -INFINITY, bias_top = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[static_cast<size_t>(((b * Hq + h) * Sq + i) * D + d)] * k[static_cast<size_t>(((b * Hkv + kh) * T + j) * D + d)];
          dot *= scale;
          if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
          const double bj = bias(b, h, i, j);
          bias_top = std::max(bias_top, bj);
          sc[static_cast<size_t>(j)] = dot + bj;
          top = std::max(top, sc[static_cast<size_t>(j)]);
        }
        if (bias_top == -INFINITY) continue;  // every key masked: zeros
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - top));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            y[static_cast<size_t>(((b * Hq + h) * Sq + i) * Dv + d)] +=
                sc[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(((b * Hkv + kh) * T + j) * Dv + d)];
      }
    }
  return y;
}

// Attention (opset 23) in three forms, each against naive_attention, then compiled against the
// reference evaluation; TF_OPSET_MODELS_DIR=dir saves dir/attention.onnx for graph_ort, which
// compares every output with ONNX Runtime's:
//   gqa: rank 3, 4 query heads over 2 key/value heads, is_causal with a past of 3 keys (the
//        causal limit offset by it), softcap 2, present_key and present_value written;
//   bmask: rank 4, a bool mask, one query row masked throughout (zeros), scale 0.3;
//   fmask: rank 4, -Q, a float mask [B, 1, Sq, T] added, -inf in places.
TEST(OnnxImport, AttentionMatchesItsDefinition) {
  const int64_t B = 2, S = 5, E = 24;
  std::vector<float> xs(static_cast<size_t>(B * S * E));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.53f * static_cast<float>(k) + 0.2f) * 1.3f;
  auto x_at = [&](int64_t b, int64_t s, int64_t e) { return double(xs[static_cast<size_t>((b * S + s) * E + e)]); };
  ModelBuilder b(23);
  b.input("x", {B, S, E});
  // gqa: K = x[..., 0:12], V = x[..., 12:24] as 2 heads of 6; past [2, 2, 3, 6].
  b.ints("c0", {0});
  b.ints("c12", {12});
  b.ints("c24", {24});
  b.ints("c2", {2});
  b.node("Slice", {"x", "c0", "c12", "c2"}, {"k3"});
  b.node("Slice", {"x", "c12", "c24", "c2"}, {"v3"});
  std::vector<float> pk, pv;
  for (int64_t k = 0; k < B * 2 * 3 * 6; ++k) {
    pk.push_back(std::cos(0.31f * static_cast<float>(k)));
    pv.push_back(std::sin(0.17f * static_cast<float>(k)) * 2.0f);
  }
  b.floats_shaped("past_k", {B, 2, 3, 6}, pk);
  b.floats_shaped("past_v", {B, 2, 3, 6}, pv);
  auto* gqa = b.node("Attention", {"x", "k3", "v3", "", "past_k", "past_v"}, {"gqa", "present_k", "present_v"});
  set_int(gqa, "q_num_heads", 4);
  set_int(gqa, "kv_num_heads", 2);
  set_int(gqa, "is_causal", 1);
  set_float(gqa, "softcap", 2.0f);
  // bmask: Q = x as [2, 4, 5, 6]; K = x[:, 0:3] as [2, 4, 3, 6]; V = -K.
  b.ints("q4_shape", {B, 4, S, 6});
  b.node("Reshape", {"x", "q4_shape"}, {"q4"});
  b.ints("c3", {3});
  b.ints("c1", {1});
  b.node("Slice", {"x", "c0", "c3", "c1"}, {"x3"});
  b.ints("k4_shape", {B, 4, 3, 6});
  b.node("Reshape", {"x3", "k4_shape"}, {"k4"});
  b.node("Neg", {"k4"}, {"v4"});
  b.bytes("bool_mask", {S, 3}, {1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0}, onnx::TensorProto::BOOL);  // row 1: no key
  auto* bm = b.node("Attention", {"q4", "k4", "v4", "bool_mask"}, {"bmask"});
  set_float(bm, "scale", 0.3f);
  std::vector<float> fm;  // [B, 1, S, 3] (ONNX Runtime wants the mask's rows to be Q's)
  for (int64_t k = 0; k < B * S * 3; ++k) fm.push_back(k % 7 == 5 ? -INFINITY : std::sin(1.3f * static_cast<float>(k)) * 2.0f);
  b.floats_shaped("float_mask", {B, 1, S, 3}, fm);
  b.node("Neg", {"q4"}, {"nq4"});  // its own scores (the same product twice would be one)
  b.node("Attention", {"nq4", "k4", "v4", "float_mask"}, {"fmask"});
  const char* outs[] = {"gqa", "present_k", "present_v", "bmask", "fmask"};
  for (const char* o : outs) b.output(o);
  Graph g = b.import();
  HostTensor x = HostTensor::floats({B, S, E}, xs);
  auto want = run_reference(g, {{"x", x}});
  auto expect_near = [&](const char* name, const Shape& shape, const std::vector<double>& w) {
    const HostTensor& t = want.at(name);
    ASSERT_EQ(t.shape, shape) << name;
    ASSERT_EQ(t.f.size(), w.size()) << name;
    for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(t.f[k], w[k], 1e-5 * (1 + std::fabs(w[k]))) << name << " element " << k;
  };
  {  // gqa: heads split from the features; K and V after the past.
    std::vector<double> q, k, v;
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < 6; ++d) q.push_back(x_at(bb, i, h * 6 + d));
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = 0; j < 8; ++j)
          for (int64_t d = 0; d < 6; ++d) {
            const size_t p = static_cast<size_t>(((bb * 2 + h) * 3 + j) * 6 + d);
            k.push_back(j < 3 ? pk[p] : x_at(bb, j - 3, h * 6 + d));
            v.push_back(j < 3 ? pv[p] : x_at(bb, j - 3, 12 + h * 6 + d));
          }
    std::vector<double> y = naive_attention(q, k, v, B, 4, 2, S, 8, 6, 6, 1 / std::sqrt(6.0), 2.0,
                                            [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i + 3 ? 0.0 : -INFINITY; });
    std::vector<double> merged;  // [B, S, heads * 6]
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t d = 0; d < 6; ++d) merged.push_back(y[static_cast<size_t>(((bb * 4 + h) * S + i) * 6 + d)]);
    expect_near("gqa", {B, S, E}, merged);
    expect_near("present_k", {B, 2, 8, 6}, k);
    expect_near("present_v", {B, 2, 8, 6}, v);
  }
  std::vector<double> q4(xs.begin(), xs.end()), k4, v4;
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t p = 0; p < 3 * E; ++p) {
      k4.push_back(xs[static_cast<size_t>(bb * S * E + p)]);
      v4.push_back(-k4.back());
    }
  const bool mask[S][3] = {{true, false, true}, {false, false, false}, {true, true, false}, {false, true, true}, {true, false, false}};
  expect_near("bmask", {B, 4, S, 6}, naive_attention(q4, k4, v4, B, 4, 4, S, 3, 6, 6, 0.3, 0, [&](int64_t, int64_t, int64_t i, int64_t j) {
    return mask[i][j] ? 0.0 : -INFINITY;
  }));
  std::vector<double> nq4;
  for (double e : q4) nq4.push_back(-e);
  expect_near("fmask", {B, 4, S, 6}, naive_attention(nq4, k4, v4, B, 4, 4, S, 3, 6, 6, 1 / std::sqrt(6.0), 0, [&](int64_t bb, int64_t, int64_t i, int64_t j) {
    return double(fm[static_cast<size_t>((bb * S + i) * 3 + j)]);
  }));
  for (int64_t bb = 0; bb < B; ++bb)  // the masked row is zeros, not NaN
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 6; ++d) EXPECT_EQ(want.at("bmask").f[static_cast<size_t>(((bb * 4 + h) * S + 1) * 6 + d)], 0.0f);
  // As compile --model: the passes (lower-scatter-nd makes a ScatterElements a Where), compiled.
  expect_compiled_as_reference(g, x, want, {std::begin(outs), std::end(outs)});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/attention.onnx");
}

// Opset 25's sliding windows (left 1, right 1, with is_causal: the key before and the query's
// own), a float mask of fewer keys than there are (the rest padded with -inf: ONNX Runtime
// refuses such masks) and Swish (24), against their definitions.
TEST(OnnxImport, AttentionWindowsAndSwish) {
  const int64_t S = 4, D = 3;
  std::vector<float> xs(static_cast<size_t>(S * D));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::cos(0.9f * static_cast<float>(k)) * 2.0f;
  ModelBuilder b(25);
  b.input("x", {1, 1, S, D});
  auto* att = b.node("Attention", {"x", "x", "x"}, {"win"});
  set_int(att, "is_causal", 1);
  set_int(att, "left_window_size", 1);
  set_int(att, "right_window_size", 1);
  set_float(b.node("Swish", {"x"}, {"swish"}), "alpha", 0.7f);
  const std::vector<float> short_mask{0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 0.0f, 1.0f, -2.0f};  // [S, 2] of 4 keys
  b.floats_shaped("short_mask", {S, 2}, short_mask);
  b.node("Attention", {"x", "x", "x", "short_mask"}, {"short"});
  b.output("win");
  b.output("swish");
  b.output("short");
  Graph g = b.import();
  HostTensor x = HostTensor::floats({1, 1, S, D}, xs);
  auto want = run_reference(g, {{"x", x}});
  std::vector<double> xd(xs.begin(), xs.end());
  std::vector<double> w = naive_attention(xd, xd, xd, 1, 1, 1, S, S, D, D, 1 / std::sqrt(double(D)), 0,
                                          [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i && i - j <= 1 ? 0.0 : -INFINITY; });
  for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(want.at("win").f[k], w[k], 1e-5) << k;
  for (size_t k = 0; k < xs.size(); ++k) EXPECT_NEAR(want.at("swish").f[k], xs[k] / (1 + std::exp(-0.7 * xs[k])), 1e-6) << k;
  std::vector<double> s = naive_attention(xd, xd, xd, 1, 1, 1, S, S, D, D, 1 / std::sqrt(double(D)), 0,
                                          [&](int64_t, int64_t, int64_t i, int64_t j) {
                                            return j < 2 ? double(short_mask[static_cast<size_t>(i * 2 + j)]) : -INFINITY;
                                          });
  for (size_t k = 0; k < s.size(); ++k) EXPECT_NEAR(want.at("short").f[k], s[k], 1e-5) << k;
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x}, "generic", from_template);
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < s.size(); ++k) EXPECT_NEAR(got[2].f[k], s[k], 2e-5) << k;
  for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(got[0].f[k], w[k], 2e-5) << k;
  for (size_t k = 0; k < xs.size(); ++k) EXPECT_NEAR(got[1].f[k], want.at("swish").f[k], 2e-6) << k;
}

// On cuda targets fuse-attention takes Attention's chain whole: with the guard of fully masked
// rows where the mask is a model input (zero_masked_rows), where a constant mask masks a row
// throughout (the guard folded to a constant, checked against the mask), and with no guard
// where none can act (causal, no past); with a soft cap (FusedAttention softcap). The fused
// graph evaluates as the imported one.
TEST(OnnxImport, AttentionFusesOnCudaTargets) {
  const int64_t H = 2, S = 4, D = 3;
  std::vector<float> xs(static_cast<size_t>(H * S * D));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.7f * static_cast<float>(k)) * 1.5f;
  const HostTensor x = HostTensor::floats({1, H, S, D}, xs);
  const HostTensor m = HostTensor::ints({S, S}, {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1}, DType::Bool);  // row 1: none
  for (const char* form : {"input mask", "constant mask", "causal", "softcap"}) {
    SCOPED_TRACE(form);
    const std::string f = form;
    ModelBuilder b(23);
    b.input("x", {1, H, S, D});
    std::vector<std::string> in = {"x", "x", "x"};
    if (f == "input mask") {
      b.input("m", {S, S}, onnx::TensorProto::BOOL);
      in.push_back("m");
    } else if (f == "constant mask") {
      b.bytes("m", {S, S}, {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1}, onnx::TensorProto::BOOL);
      in.push_back("m");
    }
    auto* a = b.node("Attention", in, {"y"});
    if (f == "causal" || f == "softcap") set_int(a, "is_causal", 1);
    if (f == "softcap") set_float(a, "softcap", 1.5f);
    b.output("y");
    const Graph imported = b.import();
    Graph g = imported;
    PassOptions cuda;
    cuda.tensor_cores = true;
    cuda.opt_level = 3;  // fuse-attention's level
    run_passes(g, cuda);
    int fused = 0, guarded = 0, capped = 0, softmaxes = 0;
    for (const Node& n : g.nodes) {
      fused += n.op == kFusedAttention;
      guarded += n.op == kFusedAttention && n.get_int("zero_masked_rows", 0) == 1;
      capped += n.op == kFusedAttention && n.get_float("softcap", 0.0f) == 1.5f;
      softmaxes += n.op == "Softmax" || n.op == "Tanh";
    }
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(softmaxes, 0);
    EXPECT_EQ(guarded, f == "causal" || f == "softcap" ? 0 : 1);
    EXPECT_EQ(capped, f == "softcap" ? 1 : 0);
    std::map<std::string, HostTensor> inputs = {{"x", x}};
    if (f == "input mask") inputs.emplace("m", m);
    const std::vector<float> want = run_reference(imported, inputs).at("y").f, got = run_reference(g, inputs).at("y").f;
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
    if (f == "input mask" || f == "constant mask") {  // query row 1 attends no key: zeros
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) EXPECT_EQ(got[static_cast<size_t>((h * S + 1) * D + d)], 0.0f);
    }
  }
}

// Elementwise and normalizing operators added in session 84, each output against its
// definition (libm in doubles), then compiled against the reference evaluation; NaN and inf
// made by the model (Sqrt of negatives, 1 / (x * 0)). TF_OPSET_MODELS_DIR=dir saves
// dir/functions.onnx for graph_ort (ONNX Runtime).
TEST(OnnxImport, MathAndNormalizingOperatorsMatchTheirDefinitions) {
  const int64_t N = 2, C = 3, H = 4, W = 5, total = N * C * H * W;
  std::vector<float> xs(static_cast<size_t>(total));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.41f * static_cast<float>(k) + 0.1f) * 0.95f;
  ModelBuilder b(18);
  b.input("x", {N, C, H, W});
  b.floats("five", {5.0f});
  b.floats("three", {3.0f});
  b.floats("one", {1.0f});
  b.floats("zero", {0.0f});
  b.node("Mul", {"x", "five"}, {"x5"});
  b.node("Abs", {"x"}, {"ax"});
  b.node("Mul", {"ax", "three"}, {"ax3"});
  b.node("Add", {"ax3", "one"}, {"x_ge1"});
  const char* unary[][2] = {{"Tan", "x"}, {"Sinh", "x5"}, {"Cosh", "x5"}, {"Asin", "x"}, {"Acos", "x"}, {"Atan", "x5"},
                            {"Asinh", "x5"}, {"Acosh", "x_ge1"}, {"Atanh", "x"}, {"Mish", "x5"}};
  std::vector<std::string> outs;
  for (const auto& [op, in] : unary) {
    outs.push_back(str(op, "_out"));
    b.node(op, {in}, {outs.back()});
  }
  auto* shrink = b.node("Shrink", {"x"}, {"shrink"});
  set_float(shrink, "lambd", 0.3f);
  set_float(shrink, "bias", 0.1f);
  b.node("Sqrt", {"x"}, {"sqrt"});  // NaN where x < 0
  b.node("IsNaN", {"sqrt"}, {"isnan"});
  b.node("Mul", {"x", "zero"}, {"zeros"});
  b.node("Reciprocal", {"zeros"}, {"infs"});  // +inf and -inf by x's sign
  b.node("IsInf", {"infs"}, {"isinf"});
  set_int(b.node("IsInf", {"infs"}, {"isinf_pos"}), "detect_negative", 0);
  b.ints("int_like", {0});
  b.node("Mul", {"x", "three"}, {"x3"});
  b.node("CastLike", {"x3", "int_like"}, {"castlike"});
  b.node("MeanVarianceNormalization", {"x"}, {"mvn"});
  set_int(b.node("LpNormalization", {"x"}, {"l2"}), "axis", 1);
  set_int(b.node("LpNormalization", {"x"}, {"l1"}), "p", 1);
  for (const char* o : {"shrink", "isnan", "isinf", "isinf_pos", "castlike", "mvn", "l2", "l1"}) outs.emplace_back(o);
  for (const std::string& o : outs) b.output(o);
  Graph g = b.import();
  HostTensor x = HostTensor::floats({N, C, H, W}, xs);
  auto want = run_reference(g, {{"x", x}});
  std::function<double(double)> defs[] = {
      [](double v) { return std::tan(v); }, [](double v) { return std::sinh(5 * v); }, [](double v) { return std::cosh(5 * v); },
      [](double v) { return std::asin(v); }, [](double v) { return std::acos(v); }, [](double v) { return std::atan(5 * v); },
      [](double v) { return std::asinh(5 * v); }, [](double v) { return std::acosh(3 * std::fabs(v) + 1); },
      [](double v) { return std::atanh(v); }, [](double v) { return 5 * v * std::tanh(std::log1p(std::exp(5 * v))); }};
  for (size_t o = 0; o < std::size(defs); ++o)
    for (int64_t k = 0; k < total; ++k) {
      const double w = defs[o](xs[static_cast<size_t>(k)]);
      EXPECT_NEAR(want.at(outs[o]).f[static_cast<size_t>(k)], w, 1e-5 * (1 + std::fabs(w))) << outs[o] << " element " << k;
    }
  double l2[N][H][W] = {}, l1[N][C][H] = {}, mean[C] = {}, sq[C] = {};
  for (int64_t k = 0; k < total; ++k) {
    const double v = xs[static_cast<size_t>(k)];
    const int64_t n = k / (C * H * W), c = k / (H * W) % C, h = k / W % H, w = k % W;
    l2[n][h][w] += v * v;
    l1[n][c][h] += std::fabs(v);
    mean[c] += v / (N * H * W);
    sq[c] += v * v / (N * H * W);
  }
  for (int64_t k = 0; k < total; ++k) {
    const size_t i = static_cast<size_t>(k);
    const double v = xs[i];
    const int64_t n = k / (C * H * W), c = k / (H * W) % C, h = k / W % H, w = k % W;
    EXPECT_NEAR(want.at("shrink").f[i], v < -0.3 ? v + 0.1 : v > 0.3 ? v - 0.1 : 0.0, 1e-6) << k;
    EXPECT_EQ(want.at("isnan").i[i], v < 0 ? 1 : 0) << k;
    EXPECT_EQ(want.at("isinf").i[i], 1) << k;
    EXPECT_EQ(want.at("isinf_pos").i[i], std::signbit(xs[i]) ? 0 : 1) << k;
    EXPECT_EQ(want.at("castlike").i[i], static_cast<int64_t>(xs[i] * 3.0f)) << k;  // toward zero
    EXPECT_NEAR(want.at("mvn").f[i], (v - mean[c]) / (std::sqrt(sq[c] - mean[c] * mean[c]) + 1e-9), 1e-4) << k;
    EXPECT_NEAR(want.at("l2").f[i], v / std::sqrt(l2[n][h][w]), 1e-6) << k;
    EXPECT_NEAR(want.at("l1").f[i], v / l1[n][c][h], 1e-6) << k;
  }
  EXPECT_EQ(want.at("castlike").dtype, DType::I64);
  expect_compiled_as_reference(g, x, want, outs);
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/functions.onnx");
}

// RotaryEmbedding (opset 23) against ONNX's definition written out: rank 3 with num_heads 4,
// half the head (4 of 6 features) rotated as halves, caches read at position_ids; and rank 4,
// the whole head rotated interleaved, caches [B, S, D / 2] without position_ids. Compiled
// against the reference; TF_OPSET_MODELS_DIR=dir saves dir/rotary.onnx for graph_ort.
TEST(OnnxImport, RotaryEmbeddingMatchesItsDefinition) {
  const int64_t B = 2, S = 5, H = 4, D = 6, P = 7;
  std::vector<float> xs(static_cast<size_t>(B * S * H * D));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.37f * static_cast<float>(k) + 0.5f) * 1.1f;
  ModelBuilder b(23);
  b.input("x", {B, S, H * D});
  std::vector<float> cos_p, sin_p, cos_b, sin_b;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < 2; ++j) {
      cos_p.push_back(std::cos(0.3f * static_cast<float>(p * (j + 1))));
      sin_p.push_back(std::sin(0.3f * static_cast<float>(p * (j + 1))));
    }
  for (int64_t k = 0; k < B * S * 3; ++k) {
    cos_b.push_back(std::cos(0.21f * static_cast<float>(k)));
    sin_b.push_back(std::sin(0.21f * static_cast<float>(k)));
  }
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 6, 5, 4, 3, 2};
  b.floats_shaped("cos_p", {P, 2}, cos_p);
  b.floats_shaped("sin_p", {P, 2}, sin_p);
  b.floats_shaped("cos_b", {B, S, 3}, cos_b);
  b.floats_shaped("sin_b", {B, S, 3}, sin_b);
  b.ints("pos_flat", pos);
  b.ints("pos_shape", {B, S});
  b.node("Reshape", {"pos_flat", "pos_shape"}, {"pos"});
  auto* r3 = b.node("RotaryEmbedding", {"x", "cos_p", "sin_p", "pos"}, {"rot3"});
  set_int(r3, "num_heads", H);
  set_int(r3, "rotary_embedding_dim", 4);
  b.ints("x4_shape", {B, H, S, D});  // not the heads of x: another tensor of that shape
  b.node("Reshape", {"x", "x4_shape"}, {"x4"});
  set_int(b.node("RotaryEmbedding", {"x4", "cos_b", "sin_b"}, {"rot4"}), "interleaved", 1);
  b.output("rot3");
  b.output("rot4");
  Graph g = b.import();
  HostTensor x = HostTensor::floats({B, S, H * D}, xs);
  auto want = run_reference(g, {{"x", x}});
  // rot3: x[b, s, h * D + d]; features 0..1 with 2..3 rotated, 4..5 kept.
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t ss = 0; ss < S; ++ss)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          auto at = [&](int64_t f) { return double(xs[static_cast<size_t>((bb * S + ss) * H * D + h * D + f)]); };
          const int64_t p = pos[static_cast<size_t>(bb * S + ss)], j = d % 2;
          const double c = cos_p[static_cast<size_t>(p * 2 + j)], sn = sin_p[static_cast<size_t>(p * 2 + j)];
          const double w = d >= 4 ? at(d) : d < 2 ? c * at(d) - sn * at(d + 2) : sn * at(d - 2) + c * at(d);
          EXPECT_NEAR(want.at("rot3").f[static_cast<size_t>((bb * S + ss) * H * D + h * D + d)], w, 1e-5) << bb << ss << h << d;
        }
  // rot4: x4[b, h, s, d] = xs in order; pairs (2j, 2j + 1) rotated by cos_b[b, s, j].
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t ss = 0; ss < S; ++ss)
        for (int64_t d = 0; d < D; ++d) {
          const size_t base = static_cast<size_t>(((bb * H + h) * S + ss) * D);
          const int64_t j = d / 2;
          const double c = cos_b[static_cast<size_t>((bb * S + ss) * 3 + j)], sn = sin_b[static_cast<size_t>((bb * S + ss) * 3 + j)];
          const double x1 = xs[base + static_cast<size_t>(2 * j)], x2 = xs[base + static_cast<size_t>(2 * j + 1)];
          EXPECT_NEAR(want.at("rot4").f[base + static_cast<size_t>(d)], d % 2 == 0 ? c * x1 - sn * x2 : sn * x1 + c * x2, 1e-5)
              << bb << h << ss << d;
        }
  Graph optimized = g;
  run_passes(optimized, PassOptions{2, {}, {}, nullptr});
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(optimized, {&x}, "generic", from_template);
  ASSERT_EQ(got.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    const std::vector<float>& w = want.at(o == 0 ? "rot3" : "rot4").f;
    ASSERT_EQ(got[o].f.size(), w.size());
    for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(got[o].f[k], w[k], 2e-6 * (1 + std::fabs(w[k]))) << o << " element " << k;
  }
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/rotary.onnx");
}

// GridSample of opset 20 (opset 16's 2-D forms run as ONNX's node tests): volumes (3 spatial
// axes) linear with zeros and nearest with reflection, images cubic with border and linear
// with reflection far outside the input, and one spatial axis; positions from -1.6 to 1.6.
// Compiled against the reference here; TF_OPSET_MODELS_DIR=dir saves dir/gridsample.onnx
// (all but the one-axis form, which ONNX Runtime does not take) for graph_ort.
TEST(OnnxImport, GridSampleCompilesAsTheReference) {
  const int64_t N = 2, C = 3, D = 3, H = 4, W = 5;
  std::vector<float> xs(static_cast<size_t>(N * C * D * H * W));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(0.23f * static_cast<float>(k) + 0.7f) * 2.0f;
  auto grid = [](const std::string& name, ModelBuilder& b, std::vector<int64_t> shape, float phase) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<float> g;
    for (int64_t k = 0; k < count; ++k) g.push_back(std::sin(0.77f * static_cast<float>(k) + phase) * 1.6f);
    b.floats_shaped(name, shape, g);
  };
  for (bool one_axis : {false, true}) {
    SCOPED_TRACE(one_axis ? "one spatial axis" : "two and three");
    ModelBuilder b(20);
    b.input("x", {N, C, D, H, W});
    std::vector<std::string> outs;
    auto sample = [&](const std::string& out, const std::string& in, const std::string& g, const char* mode, const char* padding,
                      int64_t align) {
      auto* n = b.node("GridSample", {in, g}, {out});
      set_string(n, "mode", mode);
      set_string(n, "padding_mode", padding);
      set_int(n, "align_corners", align);
      outs.push_back(out);
    };
    if (one_axis) {
      b.ints("x1_shape", {N, C, D * H * W});
      b.node("Reshape", {"x", "x1_shape"}, {"x1"});
      grid("g1", b, {N, 7, 1}, 0.2f);
      sample("lin1", "x1", "g1", "linear", "reflection", 0);
      sample("cub1", "x1", "g1", "cubic", "zeros", 1);
    } else {
      grid("g3", b, {N, 2, 3, 4, 3}, 0.1f);
      sample("vol_lin", "x", "g3", "linear", "zeros", 0);
      sample("vol_near", "x", "g3", "nearest", "reflection", 1);
      b.ints("x2_shape", {N, C * D, H, W});
      b.node("Reshape", {"x", "x2_shape"}, {"x2"});
      grid("g2", b, {N, 3, 6, 2}, 0.4f);
      sample("img_cubic", "x2", "g2", "cubic", "border", 0);
      sample("img_lin", "x2", "g2", "linear", "reflection", 0);
      sample("img_cubic_refl", "x2", "g2", "cubic", "reflection", 1);
      sample("img_near", "x2", "g2", "nearest", "zeros", 0);
    }
    for (const std::string& o : outs) b.output(o);
    Graph g = b.import();
    HostTensor x = HostTensor::floats({N, C, D, H, W}, xs);
    auto want = run_reference(g, {{"x", x}});
    for (const std::string& o : outs) {
      double largest = 0;
      for (float v : want.at(o).f) largest = std::max(largest, std::fabs(double(v)));
      EXPECT_GT(largest, 0.1) << o << " samples something";
    }
    expect_compiled_as_reference(g, x, want, outs);
    if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR"); dir && !one_axis) b.save(std::string(dir) + "/gridsample.onnx");
  }
  // Hostile positions (huge, infinite, NaN): every mode and padding reads inside the input,
  // the reference and the kernel alike: finite results within what weights summing to 1 (cubic:
  // whose magnitudes sum to at most 1.5 an axis) make of X's values. (They need not agree: a
  // reflection of 1e30 in float32 and in doubles lands in different places.)
  ModelBuilder b(20);
  b.input("x", {1, 2, 3, 4});
  const float inf = std::numeric_limits<float>::infinity();
  b.floats_shaped("g", {1, 1, 6, 2}, {1e30f, -1e30f, inf, -inf, std::nanf(""), 0.5f, -3e9f, 7e12f, 0.25f, -inf, 2.0f, 1e20f});
  std::vector<std::string> outs;
  for (const char* mode : {"linear", "nearest", "cubic"})
    for (const char* padding : {"zeros", "border", "reflection"}) {
      outs.push_back(str(mode, "_", padding));
      auto* n = b.node("GridSample", {"x", "g"}, {outs.back()});
      set_string(n, "mode", mode);
      set_string(n, "padding_mode", padding);
    }
  for (const std::string& o : outs) b.output(o);
  Graph g = b.import();
  std::vector<float> small(24);
  for (size_t k = 0; k < small.size(); ++k) small[k] = static_cast<float>(k) - 10.0f;
  HostTensor x = HostTensor::floats({1, 2, 3, 4}, small);
  auto want = run_reference(g, {{"x", x}});
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x}, "generic", from_template);
  ASSERT_EQ(got.size(), outs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    ASSERT_EQ(got[o].f.size(), 12u);
    for (size_t k = 0; k < got[o].f.size(); ++k)
      for (float v : {got[o].f[k], want.at(outs[o]).f[k]}) {
        EXPECT_TRUE(std::isfinite(v)) << outs[o] << " " << k;
        EXPECT_LE(std::fabs(v), 13.0f * 1.5f * 1.5f) << outs[o] << " " << k;
      }
  }
}

// Model-local functions are inlined: a function calling another twice, an attribute passed
// by ref_attr_name (and left out where the call has none: the operator's default), an output
// the call leaves out, and the function's names kept apart from the graph's and each call's. Refusals name
// the function and what is wrong. TF_OPSET_MODELS_DIR=dir saves dir/local_functions.onnx for
// graph_ort.
namespace {
onnx::FunctionProto* add_function(ModelBuilder& b, const std::string& name, std::vector<std::string> in,
                                  std::vector<std::string> out, int64_t opset = 17) {
  onnx::FunctionProto* f = b.m.add_functions();
  f->set_name(name);
  f->set_domain("custom");
  for (const auto& i : in) f->add_input(i);
  for (const auto& o : out) f->add_output(o);
  auto* os = f->add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  auto* own = f->add_opset_import();  // its calls of the domain's functions (ONNX Runtime wants it)
  own->set_domain("custom");
  own->set_version(1);
  return f;
}
onnx::NodeProto* function_node(onnx::FunctionProto* f, const std::string& op, std::vector<std::string> in,
                               std::vector<std::string> out, const std::string& domain = "") {
  onnx::NodeProto* n = f->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}
void ref_attribute(onnx::NodeProto* n, const std::string& name, const std::string& ref) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_ref_attr_name(ref);
  a->set_type(onnx::AttributeProto::FLOAT);
}
void custom_domain(ModelBuilder& b) {
  auto* os = b.m.add_opset_import();
  os->set_domain("custom");
  os->set_version(1);
}
}  // namespace

TEST(OnnxImport, ModelLocalFunctionsAreInlined) {
  ModelBuilder b(17);
  custom_domain(b);
  b.input("x", {2, 3});
  b.floats("s", {0.5f, -2.0f, 4.0f});
  // Scaled(X, S) -> (Y, Unused): Y = LeakyRelu(X * S, alpha = the call's "slope"); t is a name
  // the graph also uses.
  auto* scaled = add_function(b, "Scaled", {"X", "S"}, {"Y", "Unused"});
  function_node(scaled, "Mul", {"X", "S"}, {"t"});
  ref_attribute(function_node(scaled, "LeakyRelu", {"t"}, {"Y"}), "alpha", "slope");
  function_node(scaled, "Neg", {"t"}, {"Unused"});
  // Twice(X, S) -> Z: Scaled(Scaled(X, S), S) with slope 0.25, then without a slope.
  auto* twice = add_function(b, "Twice", {"X", "S"}, {"Z"});
  auto* inner = function_node(twice, "Scaled", {"X", "S"}, {"a", "unused1"}, "custom");
  auto* slope = inner->add_attribute();
  slope->set_name("slope");
  slope->set_f(0.25f);
  slope->set_type(onnx::AttributeProto::FLOAT);
  function_node(twice, "Scaled", {"a", "S"}, {"Z", "unused2"}, "custom");
  b.node("Relu", {"x"}, {"t"});  // the graph's own "t"
  b.node("Twice", {"t", "s"}, {"y"})->set_domain("custom");
  b.output("y");
  Graph g = b.import();
  std::vector<float> xs = {-1.0f, 2.0f, -3.0f, 4.0f, 0.5f, -0.25f};
  HostTensor x = HostTensor::floats({2, 3}, xs);
  const std::vector<float> got = run_reference(g, {{"x", x}}).at("y").f;
  const float sc[3] = {0.5f, -2.0f, 4.0f};
  for (size_t k = 0; k < xs.size(); ++k) {
    float v = std::max(xs[k], 0.0f) * sc[k % 3];
    v = v < 0 ? v * 0.25f : v;  // the first call's slope
    v *= sc[k % 3];
    v = v < 0 ? v * 0.01f : v;  // the second call: LeakyRelu's default
    EXPECT_FLOAT_EQ(got[k], v) << k;
  }
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/local_functions.onnx");
  {  // a call that leaves out the function's second output (ONNX Runtime refuses such calls)
    ModelBuilder m(17);
    custom_domain(m);
    m.input("x", {3});
    auto* f = add_function(m, "Two", {"X"}, {"Y", "W"});
    function_node(f, "Neg", {"X"}, {"W"});
    function_node(f, "Abs", {"W"}, {"Y"});
    m.node("Two", {"x"}, {"y"})->set_domain("custom");
    m.output("y");
    Graph one = m.import();
    EXPECT_EQ(run_reference(one, {{"x", HostTensor::floats({3}, {-1.5f, 0.0f, 2.0f})}}).at("y").f,
              (std::vector<float>{1.5f, 0.0f, 2.0f}));
  }
  auto refused = [](const std::function<void(ModelBuilder&)>& build, const std::string& want) {
    ModelBuilder m(17);
    custom_domain(m);
    m.input("x", {2});
    build(m);
    m.output("y");
    const std::string e = m.error();
    EXPECT_NE(e.find(want), std::string::npos) << "want: " << want << "\ngot: " << e;
  };
  refused([](ModelBuilder& m) {
    function_node(add_function(m, "F", {"X"}, {"Y"}, 13), "Relu", {"X"}, {"Y"});
    m.node("F", {"x"}, {"y"})->set_domain("custom");
  }, "test.onnx: function 'custom.F' imports opset 13 of the default domain; the model's is 17");
  refused([](ModelBuilder& m) {
    function_node(add_function(m, "Loop", {"X"}, {"Y"}), "Loop", {"X"}, {"Y"}, "custom");
    m.node("Loop", {"x"}, {"y"}, "call")->set_domain("custom");
  }, "functions call each other more than 32 deep (recursion is not allowed)");
  refused([](ModelBuilder& m) {
    function_node(add_function(m, "F", {"X"}, {"Y"}), "Relu", {"X"}, {"Y"});
    function_node(add_function(m, "F", {"X"}, {"Y"}), "Relu", {"X"}, {"Y"});
    m.node("F", {"x"}, {"y"})->set_domain("custom");
  }, "test.onnx: function 'custom.F' is defined twice");
  refused([](ModelBuilder& m) {
    function_node(add_function(m, "F", {"X"}, {"Y"}), "Relu", {"X"}, {"Y"});
    m.node("F", {"x", "x"}, {"y"}, "two")->set_domain("custom");
  }, "node 'two' (custom.F) has 2 inputs and 1 outputs; the function takes 1 and 1");
  refused([](ModelBuilder& m) {  // calls doubling at every level: bounded, not a hang
    for (int level = 0; level < 24; ++level) {
      auto* f = add_function(m, str("L", level), {"X"}, {"Y"});
      if (level == 23) {
        function_node(f, "Relu", {"X"}, {"Y"});
        continue;
      }
      function_node(f, str("L", level + 1), {"X"}, {"a"}, "custom");
      function_node(f, str("L", level + 1), {"a"}, {"Y"}, "custom");
    }
    m.node("L0", {"x"}, {"y"})->set_domain("custom");
  }, "test.onnx: the model's functions make more than 100000 calls");
}

// LRN of even size, which ONNX allows (and ONNX Runtime refuses): the window of channel c is
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)], one channel more after c than before.
TEST(OnnxImport, LrnOfEvenSize) {
  const int64_t C = 7, HW = 3;
  std::vector<float> xs(static_cast<size_t>(C * HW));
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::cos(0.61f * static_cast<float>(k)) * 1.5f;
  ModelBuilder b(13);
  b.input("x", {1, C, HW});
  auto* lrn = b.node("LRN", {"x"}, {"y"});
  set_int(lrn, "size", 4);
  set_float(lrn, "alpha", 0.5f);
  set_float(lrn, "beta", 0.6f);
  set_float(lrn, "bias", 2.0f);
  b.output("y");
  Graph g = b.import();
  HostTensor x = HostTensor::floats({1, C, HW}, xs);
  const std::vector<float> want = run_reference(g, {{"x", x}}).at("y").f;
  ASSERT_EQ(want.size(), xs.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < HW; ++p) {
      double sq = 0;  // channels c - 1 .. c + 2
      for (int64_t cc = std::max<int64_t>(0, c - 1); cc <= std::min<int64_t>(C - 1, c + 2); ++cc)
        sq += std::pow(double(xs[static_cast<size_t>(cc * HW + p)]), 2);
      const double v = xs[static_cast<size_t>(c * HW + p)] / std::pow(2.0 + 0.5 / 4 * sq, 0.6);
      EXPECT_NEAR(want[static_cast<size_t>(c * HW + p)], v, 1e-5) << "channel " << c << " position " << p;
    }
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x}, "generic", from_template);
  ASSERT_EQ(got.size(), 1u);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[0].f[k], want[k], 2e-5 * (1 + std::fabs(want[k]))) << k;
}

// What those opsets add is refused before them, and what tunefarm does not implement says so.
TEST(OnnxImport, NewerOpsetRefusalsNameWhatIsAtFault) {
  auto expect = [](int64_t opset, const std::function<void(ModelBuilder&)>& build, const std::string& want) {
    ModelBuilder b(opset);
    b.input("x", {1, 4, 3, 3});
    build(b);
    b.output("y");
    std::string e = b.error();
    EXPECT_NE(e.find(want), std::string::npos) << "want: " << want << "\ngot: " << e;
  };
  expect(26, [](ModelBuilder& b) { b.node("Relu", {"x"}, {"y"}); }, "opset 26 is not supported (1 to 25, those below 11 converted to 11");
  expect(17, [](ModelBuilder& b) {
    auto* s = b.node("Split", {"x"}, {"y", "z"});
    set_int(s, "num_outputs", 2);
  }, "num_outputs 2 is an attribute from opset 18 (the model's is 17)");
  expect(18, [](ModelBuilder& b) {
    auto* s = b.node("Split", {"x"}, {"y", "z"});
    set_int(s, "axis", 1);
    set_int(s, "num_outputs", 3);
  }, "num_outputs 3 differs from the node's 2 outputs");
  expect(18, [](ModelBuilder& b) {
    b.ints("p", {0, 0, 1, 1, 0, 0, 1, 1});
    set_string(b.node("Pad", {"x", "p"}, {"y"}), "mode", "wrap");
  }, "mode 'wrap' is not supported (constant, reflect and edge are; wrap from opset 19)");
  expect(17, [](ModelBuilder& b) {
    b.floats("s", {1, 1});
    set_int(b.node("GroupNormalization", {"x", "s", "s"}, {"y"}), "num_groups", 2);
  }, "GroupNormalization is an operator of opset 18 and later (the model's is 17)");
  expect(21, [](ModelBuilder& b) {
    b.floats("s", {1, 1});
    set_int(b.node("GroupNormalization", {"x", "s", "s"}, {"y"}), "num_groups", 2);
  }, "scale [2] must be [4] at opset 21 (one per channel)");
  expect(18, [](ModelBuilder& b) {
    b.floats("s", {1, 1, 1});
    set_int(b.node("GroupNormalization", {"x", "s", "s"}, {"y"}), "num_groups", 3);
  }, "num_groups 3 does not divide the 4 channels");
  expect(23, [](ModelBuilder& b) {
    b.floats("s", {1, 1, 1});
    set_int(b.node("RMSNormalization", {"x", "s"}, {"y"}), "stash_type", 10);
  }, "stash_type 10 is not supported");
  expect(23, [](ModelBuilder& b) {
    b.floats("s", {1, 1});
    b.node("RMSNormalization", {"x", "s"}, {"y"});
  }, "scale [2] does not broadcast to the normalized shape [3]");
  expect(13, [](ModelBuilder& b) { b.node("LRN", {"x"}, {"y"}); }, "attribute 'size' is required");
  expect(22, [](ModelBuilder& b) { b.node("Attention", {"x", "x", "x"}, {"y"}); },
         "Attention is an operator of opset 23 and later (the model's is 22)");
  // Attention of x as [1, 3, 12] (rank 3) with these head counts (0: the attribute left out).
  auto rank3_attention = [](int64_t q_heads, int64_t kv_heads) {
    return [=](ModelBuilder& b) {
      b.ints("s", {1, 3, 12});
      b.node("Reshape", {"x", "s"}, {"x3"});
      auto* a = b.node("Attention", {"x3", "x3", "x3"}, {"y"});
      if (q_heads) set_int(a, "q_num_heads", q_heads);
      if (kv_heads) set_int(a, "kv_num_heads", kv_heads);
    };
  };
  expect(23, rank3_attention(0, 0), "Q, K and V of rank 3 need the attributes q_num_heads and kv_num_heads");
  expect(23, rank3_attention(5, 5), "Q [1, 3, 12]: its 12 features do not split into 5 heads");
  expect(23, rank3_attention(3, 2), "K's head size 6 differs from Q's 4");
  expect(23, [](ModelBuilder& b) {
    b.ints("s", {1, 3, 4, 3});
    b.node("Reshape", {"x", "s"}, {"k"});
    b.node("Attention", {"x", "k", "k"}, {"y"});
  }, "Q's 4 heads are not a multiple of K's and V's 3");
  expect(24, [](ModelBuilder& b) {
    b.ints("len", {3});
    b.node("Attention", {"x", "x", "x", "", "", "", "len"}, {"y"});
  }, "nonpad_kv_seqlen (a length per sequence, known at run time) is not supported");
  expect(23, [](ModelBuilder& b) { b.node("Attention", {"x", "x", "x"}, {"y", "", "", "qk"}); },
         "output qk_matmul_output is not supported");
  expect(23, [](ModelBuilder& b) { set_int(b.node("Attention", {"x", "x", "x"}, {"y"}), "softmax_precision", 10); },
         "softmax_precision 10 is not supported (1: float32)");
  expect(23, [](ModelBuilder& b) { b.node("Attention", {"x", "x", "x", "", "x"}, {"y"}); },
         "past_key and past_value must be given together");
  expect(24, [](ModelBuilder& b) { set_int(b.node("Attention", {"x", "x", "x"}, {"y"}), "left_window_size", 2); },
         "left_window_size is an attribute from opset 25 (the model's is 24)");
  expect(25, [](ModelBuilder& b) { set_int(b.node("Attention", {"x", "x", "x"}, {"y"}), "right_window_size", -3); },
         "right_window_size -3 must be -1 (unbounded) or more");
  expect(23, [](ModelBuilder& b) { set_int(b.node("Attention", {"x", "x", "x"}, {"y"}), "is_causal", 2); },
         "is_causal 2 must be 0 or 1");
  expect(23, [](ModelBuilder& b) {
    b.ints("m", {0, 1, 0});
    b.node("Attention", {"x", "x", "x", "m"}, {"y"});
  }, "attn_mask 'm' is int64; it must be bool or float32");
  expect(23, [](ModelBuilder& b) {
    b.floats("m", {0, 0, 0, 0});
    b.node("Attention", {"x", "x", "x", "m"}, {"y"});
  }, "attn_mask [4] has more keys than the 3 there are");
  expect(23, [](ModelBuilder& b) {
    b.floats_shaped("m", {2, 3}, {0, 0, 0, 0, 0, 0});
    b.node("Attention", {"x", "x", "x", "m"}, {"y"});
  }, "attn_mask [2, 3] does not broadcast to the scores [1, 4, 3, 3]");
  expect(23, [](ModelBuilder& b) {
    b.ints("s", {1, 4, 3, 3, 1});
    b.node("Reshape", {"x", "s"}, {"x5"});
    b.node("Attention", {"x5", "x5", "x5"}, {"y"});
  }, "Q [1, 4, 3, 3, 1] must have rank 3 or 4");
  expect(23, [](ModelBuilder& b) { b.node("Swish", {"x"}, {"y"}); }, "Swish is an operator of opset 24 and later (the model's is 23)");
  expect(23, [](ModelBuilder& b) {
    b.floats_shaped("c", {3, 2}, {1, 1, 1, 1, 1, 1});
    set_int(b.node("RotaryEmbedding", {"x", "c", "c"}, {"y"}), "rotary_embedding_dim", 3);
  }, "rotary_embedding_dim 3 must be even and in [2, 3] (the head size)");
  expect(23, [](ModelBuilder& b) {
    b.floats_shaped("c", {1, 3, 2}, {1, 1, 1, 1, 1, 1});
    set_int(b.node("RotaryEmbedding", {"x", "c", "c"}, {"y"}), "rotary_embedding_dim", 2);
  }, "cos_cache [1, 3, 2] must be [1, 3, 1] (without position_ids)");
  expect(23, [](ModelBuilder& b) {
    b.ints("s", {1, 3, 12});
    b.node("Reshape", {"x", "s"}, {"x3"});
    b.floats_shaped("c", {1, 3, 1}, {1, 1, 1});
    b.node("RotaryEmbedding", {"x3", "c", "c"}, {"y"});
  }, "X [1, 3, 12] of rank 3 needs num_heads dividing its 12 features (num_heads 0)");
  expect(23, [](ModelBuilder& b) {
    b.floats_shaped("c", {4, 1}, {1, 1, 1, 1});
    b.floats("p", {0, 1, 2});
    set_int(b.node("RotaryEmbedding", {"x", "c", "c", "p"}, {"y"}), "rotary_embedding_dim", 2);
  }, "position_ids 'p' is float32 [3]; it must be int64 [1, 3]");
  expect(11, [](ModelBuilder& b) { set_int(b.node("LpNormalization", {"x"}, {"y"}), "p", 3); }, "p 3 is not 1 or 2");
  expect(13, [](ModelBuilder& b) { set_ints(b.node("MeanVarianceNormalization", {"x"}, {"y"}), "axes", {0, 4}); },
         "axis 4 is out of range for X [1, 4, 3, 3]");
  expect(16, [](ModelBuilder& b) {
    b.floats_shaped("g", {1, 2, 2, 2}, std::vector<float>(8, 0.0f));
    set_string(b.node("GridSample", {"x", "g"}, {"y"}), "mode", "linear");
  }, "mode 'linear' is not one of bilinear, nearest, bicubic (opset 16)");
  expect(20, [](ModelBuilder& b) {
    b.floats_shaped("g", {1, 2, 2, 2}, std::vector<float>(8, 0.0f));
    set_string(b.node("GridSample", {"x", "g"}, {"y"}), "padding_mode", "wrap");
  }, "padding_mode 'wrap' is not one of zeros, border, reflection");
  expect(20, [](ModelBuilder& b) {
    b.floats_shaped("g", {1, 2, 2, 3}, std::vector<float>(12, 0.0f));
    b.node("GridSample", {"x", "g"}, {"y"});
  }, "grid [1, 2, 2, 3] must be [1, output positions..., 2] for X [1, 4, 3, 3]");
  expect(16, [](ModelBuilder& b) {
    b.ints("s", {1, 4, 9});
    b.node("Reshape", {"x", "s"}, {"x3"});
    b.floats_shaped("g", {1, 2, 1}, std::vector<float>(2, 0.0f));
    b.node("GridSample", {"x3", "g"}, {"y"});
  }, "X [1, 4, 9]: opset 16's GridSample takes rank 4 (N, C, H, W)");
  expect(20, [](ModelBuilder& b) {
    b.ints("starts", {0});
    b.ints("ends", {0});
    b.ints("axes", {2});
    b.node("Slice", {"x", "starts", "ends", "axes"}, {"empty"});
    b.floats_shaped("g", {1, 2, 2, 2}, std::vector<float>(8, 0.0f));
    b.node("GridSample", {"empty", "g"}, {"y"});
  }, "X [1, 4, 0, 3] has no positions along spatial axis 0 to sample [1, 4, 2, 2] from");
  expect(20, [](ModelBuilder& b) { set_string(b.node("Gelu", {"x"}, {"y"}), "approximate", "erf"); },
         "approximate 'erf' is not one of none, tanh");
  expect(19, [](ModelBuilder& b) {
    b.floats("sc", {1, 1, 0.5f, 0.5f});
    auto* r = b.node("Resize", {"x", "", "sc"}, {"y"});
    set_string(r, "mode", "linear");
    set_int(r, "antialias", 1);
  }, "antialias when linear interpolation makes axis 2 smaller (3 -> 1) is not implemented");
  expect(17, [](ModelBuilder& b) {
    auto* p = b.node("AveragePool", {"x"}, {"y"});
    set_ints(p, "kernel_shape", {2, 2});
    set_ints(p, "dilations", {1, 1});
  }, "AveragePool takes dilations from opset 19 (the model's is 17)");
  expect(17, [](ModelBuilder& b) {
    b.floats("d", {1, 2, 3});
    b.ints("i", {0, 1, 0});
    auto* s = b.node("ScatterElements", {"d", "i", "d"}, {"y"});
    set_string(s, "reduction", "max");
  }, "reduction 'max' is not supported (none, add and mul are; max and min from opset 18)");
}

// ONNX Runtime's QOperator format and dynamic quantization import as the Q/DQ arithmetic
// that defines them: QLinearMatMul and QLinearConv (per-channel weights, an int32 bias) give
// what the same model written with QuantizeLinear/DequantizeLinear gives, and fold-qdq makes
// int8 kernels of them; DynamicQuantizeLinear -> MatMulInteger and ConvInteger compute their
// definitions.
TEST(OnnxImport, QOperatorAndIntegerOperatorsAreTheirQdqArithmetic) {
  auto build = [](bool qoperator) {
    ModelBuilder b(13);
    b.input("x", {1, 8, 5, 5});
    b.floats_shaped("xs", {}, {0.05f});
    b.bytes("xz", {}, {128}, onnx::TensorProto::UINT8);
    std::vector<int32_t> w(16 * 8 * 3 * 3), wm(8 * 6);
    for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int32_t>((k * 37) % 255) - 127;
    for (size_t k = 0; k < wm.size(); ++k) wm[k] = static_cast<int32_t>((k * 53) % 200) - 100;
    b.bytes("w", {16, 8, 3, 3}, w);
    std::vector<float> ws(16);
    for (size_t k = 0; k < 16; ++k) ws[k] = 0.001f * static_cast<float>(k + 1);
    b.floats("ws", ws);
    b.bytes("wz", {16}, std::vector<int32_t>(16, 0));
    b.floats_shaped("ys", {}, {0.2f});
    b.bytes("yz", {}, {10}, onnx::TensorProto::UINT8);
    auto* bias = b.g->add_initializer();
    bias->set_name("bias");
    bias->set_data_type(onnx::TensorProto::INT32);
    bias->add_dims(16);
    for (int k = 0; k < 16; ++k) bias->add_int32_data(k * 300 - 2000);
    b.bytes("wm", {8, 6}, wm);
    b.floats_shaped("wms", {}, {0.01f});
    b.bytes("wmz", {}, {0});
    b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
    if (qoperator) {
      auto* c = b.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"}, {"cq"});
      set_ints(c, "pads", {1, 1, 1, 1});
    } else {
      // The same with Q/DQ: DQ(x), DQ(w) per channel, the bias as floats, Q(y).
      b.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
      auto* dw = b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"});
      set_int(dw, "axis", 0);
      std::vector<float> bf(16);
      for (int k = 0; k < 16; ++k) bf[static_cast<size_t>(k)] = static_cast<float>((k * 300 - 2000) * 0.05 * ws[static_cast<size_t>(k)]);
      b.floats("bf", bf);
      auto* c = b.node("Conv", {"xd", "wd", "bf"}, {"c"});
      set_ints(c, "pads", {1, 1, 1, 1});
      b.node("QuantizeLinear", {"c", "ys", "yz"}, {"cq"});
    }
    b.node("DequantizeLinear", {"cq", "ys", "yz"}, {"y"});
    // A QLinearMatMul on the input's rows, quantized again ([25, 8]).
    b.node("Reshape", {"x", "shape"}, {"xf"});
    b.node("QuantizeLinear", {"xf", "xs", "xz"}, {"xr"});
    b.ints("shape", {25, 8});
    if (qoperator) {
      b.node("QLinearMatMul", {"xr", "xs", "xz", "wm", "wms", "wmz", "ys", "yz"}, {"mq"});
    } else {
      b.node("DequantizeLinear", {"xr", "xs", "xz"}, {"xrd"});
      b.node("DequantizeLinear", {"wm", "wms", "wmz"}, {"wmd"});
      b.node("MatMul", {"xrd", "wmd"}, {"m"});
      b.node("QuantizeLinear", {"m", "ys", "yz"}, {"mq"});
    }
    b.node("DequantizeLinear", {"mq", "ys", "yz"}, {"y2"});
    b.output("y");
    b.output("y2");
    return b.import();
  };
  Graph qop = build(true), qdq = build(false);
  HostTensor x = HostTensor::floats({1, 8, 5, 5}, std::vector<float>(200));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(0.37f * static_cast<float>(k)) * 4.0f;
  auto a = run_reference(qop, {{"x", x}}), want = run_reference(qdq, {{"x", x}});
  for (const char* y : {"y", "y2"}) {
    ASSERT_EQ(a.at(y).shape, want.at(y).shape) << y;
    for (int64_t k = 0; k < want.at(y).size(); ++k) EXPECT_NEAR(a.at(y).f[k], want.at(y).f[k], 1e-5) << y << "[" << k << "]";
  }
  // fold-qdq makes int8 kernels of both products, and the compiled model agrees.
  Graph folded = qop;
  PassOptions o;
  o.channel_block = tf::host_target().vector_lanes();
  run_passes(folded, o);
  EXPECT_EQ(folded.int8_nodes, 2);
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(folded, {&x}, "q", from_template);
  EXPECT_EQ(from_template, 2);
  for (size_t i = 0; i < 2; ++i) {
    const HostTensor& w = want.at(i == 0 ? "y" : "y2");
    int off = 0;
    for (int64_t k = 0; k < w.size(); ++k) off += std::fabs(got[i].f[k] - w.f[k]) > 0.2f * 1.01f;  // one step
    EXPECT_EQ(off, 0) << i;
  }

  // DynamicQuantizeLinear -> MatMulInteger (the computed zero point) and ConvInteger.
  ModelBuilder d(13);
  d.input("x", {3, 4});
  d.node("DynamicQuantizeLinear", {"x"}, {"q", "s", "z"});
  std::vector<int32_t> wi = {1, -2, 3, 4, -5, 6, 7, -8};
  d.bytes("wi", {4, 2}, wi);
  d.node("MatMulInteger", {"q", "wi", "z"}, {"mi"});
  d.input("c", {1, 2, 2, 2});
  d.bytes("cw", {2, 2, 1, 1}, {1, -1, 2, 3});
  d.bytes("cz", {}, {3}, onnx::TensorProto::UINT8);
  d.node("ConvInteger", {"c", "cw", "cz"}, {"ci"});
  for (const char* o : {"mi", "s", "z", "ci"}) d.output(o);
  Graph dg = d.import();
  const std::vector<float> xv = {-1.0f, 0.5f, 2.0f, 0.25f, 3.0f, -0.75f, 1.5f, 0.0f, -2.5f, 1.0f, 0.125f, 2.75f};
  HostTensor cx = HostTensor::floats({1, 2, 2, 2}, {5, 6, 7, 8, 0, 1, 2, 3});
  auto r = run_reference(dg, {{"x", HostTensor::floats({3, 4}, xv)}, {"c", cx}});
  const float s = (3.0f - -2.5f) / 255.0f, z = std::nearbyint(2.5f / s);
  EXPECT_FLOAT_EQ(r.at("s").f[0], s);
  EXPECT_EQ(r.at("z").f[0], z);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        float q = std::min(255.0f, std::max(0.0f, std::nearbyint(xv[static_cast<size_t>(i * 4 + k)] / s) + z));
        sum += (q - z) * wi[static_cast<size_t>(k * 2 + j)];
      }
      EXPECT_EQ(r.at("mi").f[static_cast<size_t>(i * 2 + j)], sum) << i << "," << j;
    }
  // ConvInteger, 1x1: out[k][p] = sum_c (c[c][p] - 3) * cw[k][c].
  for (int k = 0; k < 2; ++k)
    for (int p = 0; p < 4; ++p) {
      const float* cv = cx.f.data();
      const float want_ci = (cv[p] - 3) * (k == 0 ? 1 : 2) + (cv[4 + p] - 3) * (k == 0 ? -1 : 3);
      EXPECT_EQ(r.at("ci").f[static_cast<size_t>(k * 4 + p)], want_ci) << k << "," << p;
    }
  // A QLinearMatMul without a zero point, and a DynamicQuantizeLinear without its three
  // outputs, are refused by name.
  ModelBuilder hole(13);
  hole.input("x", {2, 2});
  hole.floats_shaped("s", {}, {0.5f});
  hole.bytes("z", {}, {0}, onnx::TensorProto::UINT8);
  hole.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  hole.node("QLinearMatMul", {"q", "s", "", "q", "s", "z", "s", "z"}, {"y"});
  hole.output("y");
  EXPECT_NE(hole.error().find("(QLinearMatMul): input 2 is required"), std::string::npos) << hole.error();
  ModelBuilder bad(13);
  bad.input("x", {2});
  bad.node("DynamicQuantizeLinear", {"x"}, {"q"});
  bad.output("q");
  EXPECT_NE(bad.error().find("has 1 outputs; it makes y, y_scale and y_zero_point"), std::string::npos) << bad.error();
}

// ONNX Runtime's quantized elementwise, pooling and concatenation operators (domain
// com.microsoft: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
// QLinearGlobalAveragePool with channels first and last, QLinearAveragePool) give what the same
// model written with QuantizeLinear, the float operator and DequantizeLinear gives; an int8
// output without a zero point is int8 (negative values kept); the domain is checked both ways.
// (QLinearConcat's inputs with zero points once expanded into nodes of one name.)
TEST(OnnxImport, MicrosoftQuantizedOperatorsAreTheirQdqArithmetic) {
  auto build = [](bool contrib) {
    ModelBuilder b(13);
    auto* ms = b.m.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
    b.input("x", {1, 4, 3, 3});
    b.input("x2", {1, 4, 3, 3});
    // Scale and zero point per value: x, x2, add, mul, sigmoid, leaky, concat, gap, pool, gap2.
    const std::vector<std::pair<float, int32_t>> qp = {{0.03f, 128}, {0.02f, 100}, {0.05f, 120}, {0.04f, 90},
                                                       {0.004f, 3},  {0.05f, 30},  {0.06f, 70},  {0.01f, 50},
                                                       {0.02f, 60},  {0.015f, 40}};
    for (size_t k = 0; k < qp.size(); ++k) {
      b.floats_shaped(str("s", k), {}, {qp[k].first});
      b.bytes(str("z", k), {}, {qp[k].second}, onnx::TensorProto::UINT8);
    }
    b.node("QuantizeLinear", {"x", "s0", "z0"}, {"q0"});
    b.node("QuantizeLinear", {"x2", "s1", "z1"}, {"q1"});
    auto ms_node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
      auto* n = b.node(op, in, {out});
      n->set_domain("com.microsoft");
      return n;
    };
    // The reference form: DQ each input, the float operator, Q to `out` with (scale, zero) k.
    auto qdq = [&](const std::string& op, const std::vector<std::pair<std::string, int>>& in, int k,
                   const std::string& out, const std::function<void(onnx::NodeProto*)>& attrs = nullptr) {
      std::vector<std::string> xs;
      for (const auto& [v, kk] : in) {
        xs.push_back(str(out, "_", v, "_d"));
        b.node("DequantizeLinear", {v, str("s", kk), str("z", kk)}, {xs.back()});
      }
      auto* n = b.node(op, xs, {out + "_f"});
      if (attrs) attrs(n);
      b.node("QuantizeLinear", {out + "_f", str("s", k), str("z", k)}, {out});
    };
    if (contrib) {
      ms_node("QLinearAdd", {"q0", "s0", "z0", "q1", "s1", "z1", "s2", "z2"}, "add");
      ms_node("QLinearMul", {"add", "s2", "z2", "q0", "s0", "z0", "s3", "z3"}, "mul");
      ms_node("QLinearSigmoid", {"mul", "s3", "z3", "s4", "z4"}, "sig");
      set_float(ms_node("QLinearLeakyRelu", {"add", "s2", "z2", "s5", "z5"}, "leaky"), "alpha", 0.2f);
      set_int(ms_node("QLinearConcat", {"s6", "z6", "sig", "s4", "z4", "leaky", "s5", "z5"}, "cat"), "axis", 1);
      ms_node("QLinearGlobalAveragePool", {"cat", "s6", "z6", "s7", "z7"}, "gap");
      auto* pool = ms_node("QLinearAveragePool", {"cat", "s6", "z6", "s8", "z8"}, "pool");
      set_ints(pool, "kernel_shape", {2, 2});
      set_ints(b.node("Transpose", {"mul"}, {"mul_nhwc"}), "perm", {0, 2, 3, 1});
      set_int(ms_node("QLinearGlobalAveragePool", {"mul_nhwc", "s3", "z3", "s9", "z9"}, "gap2"), "channels_last", 1);
    } else {
      qdq("Add", {{"q0", 0}, {"q1", 1}}, 2, "add");
      qdq("Mul", {{"add", 2}, {"q0", 0}}, 3, "mul");
      qdq("Sigmoid", {{"mul", 3}}, 4, "sig");
      qdq("LeakyRelu", {{"add", 2}}, 5, "leaky", [](onnx::NodeProto* n) { set_float(n, "alpha", 0.2f); });
      qdq("Concat", {{"sig", 4}, {"leaky", 5}}, 6, "cat", [](onnx::NodeProto* n) { set_int(n, "axis", 1); });
      qdq("GlobalAveragePool", {{"cat", 6}}, 7, "gap");
      qdq("AveragePool", {{"cat", 6}}, 8, "pool", [](onnx::NodeProto* n) { set_ints(n, "kernel_shape", {2, 2}); });
      qdq("GlobalAveragePool", {{"mul", 3}}, 9, "gap2_nchw");
      set_ints(b.node("Transpose", {"gap2_nchw"}, {"gap2"}), "perm", {0, 2, 3, 1});
    }
    for (const auto& [v, k] : std::vector<std::pair<std::string, int>>{{"gap", 7}, {"pool", 8}, {"gap2", 9}, {"cat", 6}}) {
      b.node("DequantizeLinear", {v, str("s", k), str("z", k)}, {"y_" + v});
      b.output("y_" + v);
    }
    return b.import();
  };
  Graph contrib = build(true), qdq = build(false);
  HostTensor x = HostTensor::floats({1, 4, 3, 3}, std::vector<float>(36)), x2 = x;
  for (size_t k = 0; k < 36; ++k) {
    x.f[k] = std::sin(0.7f * static_cast<float>(k)) * 3.0f;
    x2.f[k] = std::cos(0.3f * static_cast<float>(k)) * 2.0f;
  }
  auto got = run_reference(contrib, {{"x", x}, {"x2", x2}}), want = run_reference(qdq, {{"x", x}, {"x2", x2}});
  for (const char* y : {"y_gap", "y_pool", "y_gap2", "y_cat"}) {
    ASSERT_EQ(got.at(y).shape, want.at(y).shape) << y;
    for (int64_t k = 0; k < want.at(y).size(); ++k) EXPECT_EQ(got.at(y).f[k], want.at(y).f[k]) << y << "[" << k << "]";
  }
  EXPECT_EQ(got.at("y_gap2").shape, (Shape{1, 1, 1, 4}));
  EXPECT_EQ(got.at("y_cat").shape, (Shape{1, 8, 3, 3}));

  // int8 without an output zero point: the output is int8, so negative sums stay negative.
  ModelBuilder i8(13);
  i8.input("x", {4});
  i8.floats_shaped("s", {}, {0.1f});
  i8.bytes("z", {}, {0}, onnx::TensorProto::INT8);
  i8.floats_shaped("cs", {}, {0.1f});
  i8.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  i8.node("QLinearAdd", {"q", "s", "z", "q", "s", "z", "cs"}, {"c"})->set_domain("com.microsoft");
  i8.node("DequantizeLinear", {"c", "cs", "z"}, {"y"});
  i8.output("y");
  auto r = run_reference(i8.import(), {{"x", HostTensor::floats({4}, {-1.0f, -8.0f, 0.3f, 9.0f})}});
  EXPECT_EQ(r.at("y").f, (std::vector<float>{-2.0f, -12.8f, 0.6f, 12.7f}));

  // The domain: a com.microsoft QLinearAdd written in the default domain, another
  // com.microsoft operator, a per-channel scale, a missing scale.
  auto error_of = [](const std::string& op, const std::string& domain, std::vector<std::string> in) {
    ModelBuilder e(13);
    e.input("x", {1, 2, 2, 2});
    e.floats_shaped("s", {}, {0.1f});
    e.floats("s2", {0.1f, 0.2f});
    e.bytes("z", {}, {0}, onnx::TensorProto::UINT8);
    e.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
    e.node(op, in, {"y"})->set_domain(domain);
    e.output("y");
    return e.error();
  };
  std::string e1 = error_of("QLinearAdd", "", {"q", "s", "z", "q", "s", "z", "s", "z"});
  EXPECT_NE(e1.find("QLinearAdd is an operator of domain 'com.microsoft'; this node is in the default domain"), std::string::npos) << e1;
  std::string e2 = error_of("QAttention", "com.microsoft", {"q"});
  EXPECT_NE(e2.find("is in domain 'com.microsoft', of which only QLinearAdd, QLinearAveragePool"), std::string::npos) << e2;
  std::string e3 = error_of("QLinearMul", "com.microsoft", {"q", "s2", "z", "q", "s", "z", "s", "z"});
  EXPECT_NE(e3.find("input 1 ('s2') has shape [2]; QLinearMul takes one scale and one zero point per tensor"), std::string::npos) << e3;
  std::string e4 = error_of("QLinearSigmoid", "com.microsoft", {"q", "s", "z", "", "z"});
  EXPECT_NE(e4.find("(QLinearSigmoid): input 3 is missing"), std::string::npos) << e4;
  std::string e5 = error_of("Relu", "com.example", {"x"});
  EXPECT_NE(e5.find("is in domain 'com.example'; only the default ONNX domain"), std::string::npos) << e5;
}

// A float16 model (weights stored in float16 as raw bytes and in int32_data, a bfloat16
// bias, Casts to float16 around the product, float32 inputs and outputs as converters'
// keep_io_types writes) imports with every value held as float32: the weights' exact values,
// the Casts keeping theirs; compiled for this machine it computes the float32 product.
// float16 model inputs and outputs are refused naming the value and what to do.
TEST(OnnxImport, Float16ModelsComputeInFloat32) {
  ModelBuilder b;
  b.input("x", {2, 4});
  auto* c16 = b.node("Cast", {"x"}, {"xh"});
  set_int(c16, "to", onnx::TensorProto::FLOAT16);
  // Weights [4, 3]: halves with an exact float value each (1, -2, 0.5, 65504, 2^-24, ...).
  const std::vector<uint16_t> wh = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8400,
                                    0x3555, 0x0000, 0xB800, 0x4200, 0x2E66, 0x3C01};
  const std::vector<float> wf = {1.0f, -2.0f, 0.5f, 65504.0f, 0x1p-24f, -0x1p-14f,
                                 0.333251953125f, 0.0f, -0.5f, 3.0f, 0.099975586f, 1.0009765625f};
  auto* w = b.g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT16);
  w->add_dims(4);
  w->add_dims(3);
  std::string raw(wh.size() * 2, '\0');
  std::memcpy(raw.data(), wh.data(), raw.size());
  w->set_raw_data(raw);
  b.node("MatMul", {"xh", "w"}, {"p"});
  auto* bias = b.g->add_initializer();  // int32_data holds bfloat16 bit patterns
  bias->set_name("bias");
  bias->set_data_type(onnx::TensorProto::BFLOAT16);
  bias->add_dims(3);
  for (uint16_t v : {uint16_t{0x3F80}, uint16_t{0xC040}, uint16_t{0x3E80}}) bias->add_int32_data(v);  // 1, -3, 0.25
  b.node("Add", {"p", "bias"}, {"q"});
  auto* c32 = b.node("Cast", {"q"}, {"y"});
  set_int(c32, "to", onnx::TensorProto::FLOAT);
  b.output("y");
  Graph g = b.import();
  const HostTensor& wt = *g.value("w").constant;
  for (size_t k = 0; k < wf.size(); ++k) EXPECT_EQ(wt.f[k], wf[k]) << k;
  HostTensor x = HostTensor::floats({2, 4}, {1.0f, 2.0f, -1.0f, 0.5f, 0.25f, -4.0f, 8.0f, 1.0f});
  std::vector<float> want(6);
  const float bv[3] = {1.0f, -3.0f, 0.25f};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double sum = bv[j];
      for (int k = 0; k < 4; ++k) sum += double(x.f[static_cast<size_t>(i * 4 + k)]) * wf[static_cast<size_t>(k * 3 + j)];
      want[static_cast<size_t>(i * 3 + j)] = static_cast<float>(sum);
    }
  HostTensor ref = run_reference(g, {{"x", x}}).at("y");
  for (size_t k = 0; k < 6; ++k) EXPECT_FLOAT_EQ(ref.f[k], want[k]) << k;
  Graph compiled = g;
  PassOptions o;
  o.channel_block = tf::host_target().vector_lanes();
  run_passes(compiled, o);
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(compiled, {&x}, "dense", from_template);
  ASSERT_EQ(got.size(), 1u);
  for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(got[0].f[k], want[k], 1e-3 * std::fabs(want[k]) + 1e-6) << k;
}

// `f` throws a UserError whose message holds `want`.
void expect_error(const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no UserError; expected: " << want;
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// Dynamic input dimensions sized at import (InputBinding: --dim, --input-shape): a named one
// wherever its name appears, an unnamed one through the input's whole shape; the graph is then
// static (its Reshape's target computed from the bound shape); what cannot be bound is refused
// naming the value.
TEST(OnnxImport, DynamicDimensionsAreBoundByNameOrShape) {
  ModelBuilder b;
  b.input("x", {-1, 3});
  b.input("z", {-1, 3});
  b.node("Add", {"x", "z"}, {"s"});
  b.node("Shape", {"s"}, {"shape"});
  b.node("Reshape", {"s", "shape"}, {"y"});
  b.output("y");
  const std::string bytes = b.m.SerializeAsString();
  InputBinding bind;
  bind.dims["batch"] = 5;
  Graph g = import_onnx_bytes(bytes, "test.onnx", bind);
  EXPECT_EQ(g.value("x").shape, (Shape{5, 3}));
  EXPECT_EQ(g.value("z").shape, (Shape{5, 3}));
  EXPECT_EQ(g.value("y").shape, (Shape{5, 3}));
  HostTensor x = HostTensor::floats({5, 3}, std::vector<float>(15, 1.5f));
  EXPECT_EQ(run_reference(g, {{"x", x}, {"z", x}}).at("y").f, std::vector<float>(15, 3.0f));
  // Unsized, the refusal names every dynamic dimension (here the one).
  expect_error([&] { import_onnx_bytes(bytes, "test.onnx"); },
               "test.onnx has the dynamic dimensions batch; give each a size with --dim NAME=SIZE");
  // The whole shape instead (an input's static dimension must agree).
  InputBinding shapes;
  shapes.shapes["x"] = {2, 3};
  shapes.shapes["z"] = {2, 3};
  EXPECT_EQ(import_onnx_bytes(bytes, "test.onnx", shapes).value("y").shape, (Shape{2, 3}));
  // Unbound, a name the model lacks, an unnamed dimension.
  expect_error([&] { import_onnx_bytes(bytes, "test.onnx"); },
               "graph input 'x' has a dynamic dimension 0 ('batch'); give its size: --dim batch=N");
  InputBinding extra = bind;
  extra.dims["seq"] = 7;
  expect_error([&] { import_onnx_bytes(bytes, "test.onnx", extra); },
               "--dim seq=7: test.onnx has no symbolic dimension 'seq' (its inputs have: batch)");
  ModelBuilder unnamed;
  unnamed.input("x", {-1, 3});
  unnamed.g->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->clear_dim_param();
  unnamed.node("Relu", {"x"}, {"y"});
  unnamed.output("y");
  expect_error([&] { unnamed.import(); },
               "graph input 'x' has a dynamic dimension 0 without a name; give the input's shape: "
               "--input-shape x=d0,d1,...");
  InputBinding x43;
  x43.shapes["x"] = {4, 3};
  EXPECT_EQ(import_onnx_bytes(unnamed.m.SerializeAsString(), "test.onnx", x43).value("y").shape,
            (Shape{4, 3}));
  // The command line's text.
  InputBinding parsed = parse_binding({"batch=8", "seq=128"}, {"x=1,3,224,224"});
  EXPECT_EQ(parsed.dims, (std::map<std::string, int64_t>{{"batch", 8}, {"seq", 128}}));
  EXPECT_EQ(parsed.shapes.at("x"), (Shape{1, 3, 224, 224}));
  expect_error(
      [] {
        parse_binding({"batch=8", "batch=4"}, {});
      },
      "--dim batch=4: dimension 'batch' is given twice");
  expect_error([] { parse_binding({"batch=2147483649"}, {}); },
               "--dim batch=2147483649: '2147483649' is not a size (an integer from 1 to 2^31)");
  expect_error([] { parse_binding({"batch=8x"}, {}); }, "'8x' is not a size");
  expect_error([] { parse_binding({"=8"}, {}); }, "--dim =8: expected name=size");
  expect_error([] { parse_binding({}, {"x=1,,2"}); }, "--input-shape x=1,,2: '' is not a size");
  expect_error([] { parse_binding({}, {"x"}); }, "--input-shape x: expected input=d0,d1,...");
}

// One image at a time (graph/image_loop.h): a batch of a model that keeps its images apart runs
// as the graph at one image, once per slice of axis 0 of every input and output, on a workspace
// of one image; the results are the batch's. image_loop refuses, naming the node or value, the
// models that mix images, and the pass marks only models where it pays.
TEST(ImageLoop, ABatchRunsOneImageAtATimeWhereTheModelKeepsImagesApart) {
  namespace fs = std::filesystem;
  ModelBuilder b;
  b.input("x", {-1, 3, 8, 8});
  b.input("k", {-1, 5}, onnx::TensorProto::INT64);
  std::vector<float> w(4 * 3 * 3 * 3), m(256 * 5);
  for (size_t e = 0; e < w.size(); ++e) w[e] = std::sin(0.41f * static_cast<float>(e));
  for (size_t e = 0; e < m.size(); ++e) m[e] = 0.1f * std::cos(0.23f * static_cast<float>(e));
  b.floats_shaped("w", {4, 3, 3, 3}, w);
  b.floats("bias", {0.1f, -0.2f, 0.3f, 0.0f});
  b.floats_shaped("m", {256, 5}, m);
  set_ints(b.node("Conv", {"x", "w", "bias"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  b.node("Flatten", {"r"}, {"f"});
  b.node("MatMul", {"f", "m"}, {"p"});
  set_int(b.node("Cast", {"k"}, {"kf"}), "to", onnx::TensorProto::FLOAT);
  b.node("Add", {"p", "kf"}, {"s"});
  set_int(b.node("Softmax", {"s"}, {"y"}), "axis", -1);
  b.output("y");
  b.output("r");
  const std::string bytes = b.m.SerializeAsString();
  const int64_t n = 4;
  PassOptions o;
  o.channel_block = channel_block(tf::host_target());
  Graph g = import_onnx_bytes(bytes, "test.onnx", {{{"batch", n}}, {}});
  run_passes(g, o);
  EXPECT_FALSE(g.one_image_at_a_time);  // 4 images of 1 KB: the batch fits any cache
  std::string why;
  std::optional<ImageLoop> loop = image_loop(g, &why);
  ASSERT_TRUE(loop) << why;
  EXPECT_EQ(loop->images, n);
  EXPECT_EQ(loop->per_image.value("x").shape, (Shape{1, 3, 8, 8}));
  EXPECT_EQ(loop->per_image.value("y").shape, (Shape{1, 5}));
  EXPECT_FALSE(pays_per_image(*loop));
  // Marked, a library runs one image at a time; unmarked, the batch at once. Both are the batch's.
  Graph whole = g;
  g.one_image_at_a_time = true;
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  fs::path so = fs::temp_directory_path() / ("tf-image-loop-test-" + std::to_string(getpid()) + ".so");
  CompiledModel one = compile_model(g, tf::host_target(), defaults, so.string(), "test");
  CompiledModel all = compile_model(whole, tf::host_target(), defaults, so.string() + ".all.so", "test");
  EXPECT_EQ(one.images, n);
  EXPECT_EQ(all.images, 1);
  EXPECT_EQ(one.sidecar("test")["images"], n);
  EXPECT_EQ(one.inputs[0]["shape"], nlohmann::json({4, 3, 8, 8}));
  EXPECT_EQ(one.outputs[1]["shape"], nlohmann::json({4, 4, 8, 8}));
  // A workspace slot of one image for each thread that may run images of its own (4 images: 4).
  EXPECT_EQ(one.memory.arena_bytes % 4, 0);
  EXPECT_LT(one.memory.arena_bytes / 4, all.memory.arena_bytes);
  // The tasks of a CPU target are the per-image graph's, as the library compiles them.
  auto has_batch = [](const TaskList& t, const std::string& size) {
    for (const Task& task : t.tasks)
      if (task.workload.find("(N=" + size + ",") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_batch(extract_tasks(g, tf::host_target()), "1"));
  EXPECT_FALSE(has_batch(extract_tasks(g, tf::host_target()), "4"));
  EXPECT_TRUE(has_batch(extract_tasks(whole, tf::host_target()), "4"));
  std::vector<float> xs(static_cast<size_t>(n * 3 * 64));
  for (size_t e = 0; e < xs.size(); ++e) xs[e] = std::cos(0.17f * static_cast<float>(e));
  HostTensor x = HostTensor::floats({n, 3, 8, 8}, xs);
  std::vector<int64_t> ks(static_cast<size_t>(n * 5));
  for (size_t e = 0; e < ks.size(); ++e) ks[e] = static_cast<int64_t>(e % 7) - 3;
  HostTensor k = HostTensor::ints({n, 5}, ks);
  const auto want = run_reference(whole, {{"x", x}, {"k", k}});
  // Teams of 1 (the images one after another), 2 and 4 threads (each image on a thread of its
  // own where the machine has the CPUs; the pool caps the team at them), and 8 (more threads
  // than images and slots: one after another again, each kernel on the team).
  for (const fs::path& lib_path : {so, fs::path(so.string() + ".all.so")}) {
    ModelLibrary lib(lib_path.string());
    EXPECT_EQ(lib.inputs()[0].shape, (Shape{n, 3, 8, 8}));
    // The team size is libgomp's (the library's pool reads omp_get_max_threads).
    void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(gomp, nullptr) << dlerror();
    auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(gomp, "omp_set_num_threads"));
    auto get_threads = reinterpret_cast<int (*)()>(dlsym(gomp, "omp_get_max_threads"));
    ASSERT_TRUE(set_threads && get_threads);
    const int before = get_threads();
    for (int threads : {1, 2, 4, 8}) {
      set_threads(threads);
      std::vector<HostTensor> got;
      lib.run({&x, &k}, got);
      ASSERT_EQ(got.size(), 2u);
      for (size_t out = 0; out < 2; ++out) {
        const std::vector<float>& w_out = want.at(out == 0 ? "y" : "r").f;
        ASSERT_EQ(got[out].f.size(), w_out.size());
        for (size_t e = 0; e < w_out.size(); ++e)
          ASSERT_NEAR(got[out].f[e], w_out[e], 1e-4)
              << lib_path << ", " << threads << " threads, output " << out << " element " << e;
      }
      // Profiled: each kernel called once an image, on whichever thread runs the image.
      std::vector<KernelTime> times = lib.profile([&] { lib.run({&x, &k}, got); }).calls;
      ASSERT_EQ(times.size(), (lib_path == so ? one : all).kernels.size());
      for (const KernelTime& t : times)
        EXPECT_EQ(t.calls, lib_path == so ? n : 1)
            << lib_path << ", " << threads << " threads, " << t.function;
      // An int64 input out of range in the third image: that image's conversion fails, the
      // call returns -2 whichever thread ran it, and the error names the element.
      HostTensor bad = k;
      bad.i[2 * 5 + 1] = int64_t{1} << 30;
      expect_error([&] { lib.run({&x, &bad}, got); }, "input 'k': element 11 is 1073741824");
    }
    set_threads(before);
    dlclose(gomp);
  }
  for (const fs::path& p : {so, fs::path(so.string() + ".json"), fs::path(so.string() + ".all.so"),
                            fs::path(so.string() + ".all.so.json")})
    fs::remove(p);
  // What mixes images, refused by name.
  auto refused = [](const std::function<void(ModelBuilder&)>& body, int64_t batch, const std::string& want) {
    ModelBuilder mb;
    mb.input("x", {-1, 5});
    body(mb);
    mb.output("y");
    Graph mg = import_onnx_bytes(mb.m.SerializeAsString(), "test.onnx", {{{"batch", batch}}, {}});
    std::string reason;
    EXPECT_FALSE(image_loop(mg, &reason)) << want;
    EXPECT_NE(reason.find(want), std::string::npos) << "reason: " << reason;
  };
  refused([](ModelBuilder& mb) { set_int(mb.node("Softmax", {"x"}, {"y"}), "axis", 0); }, 4,
          "node 'Softmax_y' (Softmax) mixes the rows of axis 0");
  refused([](ModelBuilder& mb) {
    set_ints(mb.node("Transpose", {"x"}, {"t"}), "perm", {1, 0});
    set_ints(mb.node("Transpose", {"t"}, {"y"}), "perm", {1, 0});
  }, 4, "'t' (node 'Transpose_t' (Transpose)) is [5, 4] at 4 images and [5, 1] at one: axis 0 is not the images' alone");
  refused(
      [](ModelBuilder& mb) {  // a constant of the batch's rows, each its own
        std::vector<float> c(20, 1.0f);
        c[17] = 2.0f;
        mb.floats_shaped("c", {4, 5}, c);
        mb.node("Add", {"x", "c"}, {"y"});
      },
      4, "'y' (node 'Add_y' (Add)) is [4, 5] at 4 images and [4, 5] at one");
  refused([](ModelBuilder& mb) {
    mb.ints("starts", {-1});
    mb.ints("ends", {-100});
    mb.ints("axes", {0});
    mb.ints("steps", {-1});
    mb.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  }, 4, "(Slice) mixes the rows of axis 0");
  refused([](ModelBuilder& mb) {
    mb.ints("axes", {0});
    mb.node("ReduceSum", {"x", "axes"}, {"s"});
    mb.node("Add", {"x", "s"}, {"y"});
  }, 4, "'s' (node 'ReduceSum_s' (ReduceSum)) is [1, 5] at 4 images");
  refused([](ModelBuilder& mb) {  // shifted by a row: the shape stays, the images do not
    mb.ints("pads", {1, 0, -1, 0});
    mb.node("Pad", {"x", "pads"}, {"y"});
  }, 4, "(Pad) mixes the rows of axis 0");
  refused([](ModelBuilder& mb) {  // constant indices: a shape of their own
    mb.ints("order", {3, 2, 1, 0});
    mb.node("Gather", {"x", "order"}, {"y"});
  }, 4, "'y' (node 'Gather_y' (Gather)) is [4, 5] at 4 images and [4, 5] at one");
  refused([](ModelBuilder& mb) {  // indices per image, gathering along the images
    mb.input("k", {-1}, onnx::TensorProto::INT64);
    mb.node("Gather", {"x", "k"}, {"y"});
  }, 4, "(Gather) mixes the rows of axis 0");
  {  // Pad, Slice, Gather and Softmax along the other axis keep the images apart.
    ModelBuilder mb;
    mb.input("x", {-1, 5});
    mb.ints("pads", {0, 1, 0, 2});
    mb.node("Pad", {"x", "pads"}, {"p"});
    mb.ints("starts", {1});
    mb.ints("ends", {7});
    mb.ints("axes", {1});
    mb.node("Slice", {"p", "starts", "ends", "axes"}, {"s"});
    mb.ints("cols", {4, 0, 2});
    set_int(mb.node("Gather", {"s", "cols"}, {"t"}), "axis", 1);
    set_int(mb.node("Softmax", {"t"}, {"y"}), "axis", 1);
    mb.output("y");
    Graph mg = import_onnx_bytes(mb.m.SerializeAsString(), "test.onnx", {{{"batch", 4}}, {}});
    std::string reason;
    EXPECT_TRUE(image_loop(mg, &reason)) << reason;
  }
  {  // Shapes folded from the batch's (an exporter's Concat(Shape(x)[0], ...) at --dim batch=4):
     // one image's graph reads them with 1 in element 0. Reshape, Expand and Resize's sizes; a
     // CumSum and a TopK along another axis. Each image's rows are the batch's.
    ModelBuilder mb;
    mb.input("x", {-1, 6});
    mb.ints("split", {4, 1, 2, 3});
    mb.node("Reshape", {"x", "split"}, {"r"});
    mb.ints("wide", {4, 2, 2, 3});
    mb.node("Expand", {"r", "wide"}, {"e"});
    mb.ints("sizes", {4, 2, 4, 6});
    mb.node("Resize", {"e", "", "", "sizes"}, {"z"});
    mb.ints("last", {3});
    mb.node("CumSum", {"z", "last"}, {"c"});
    mb.ints("k", {2});
    mb.node("TopK", {"c", "k"}, {"t", "idx"});
    // Constants of the batch's equal rows (zeros made for the bound batch, indices expanded to
    // it): an elementwise operator's, and GatherElements' indices along another axis.
    std::vector<float> bias(4 * 2 * 4 * 2);
    for (size_t e = 0; e < bias.size(); ++e) bias[e] = 0.25f * static_cast<float>(e % 16);
    mb.floats_shaped("bias", {4, 2, 4, 2}, bias);
    mb.node("Add", {"t", "bias"}, {"b"});
    std::vector<int64_t> pick(4 * 2 * 4 * 3);
    for (size_t e = 0; e < pick.size(); ++e) pick[e] = static_cast<int64_t>((e % 24) * 7 / 3 % 2);
    mb.ints("pick_flat", pick);
    mb.ints("pick_shape", {4, 2, 4, 3});
    mb.node("Reshape", {"pick_flat", "pick_shape"}, {"pick"});  // folded at import
    set_int(mb.node("GatherElements", {"b", "pick"}, {"y"}), "axis", 3);
    mb.output("y");
    Graph mg = import_onnx_bytes(mb.m.SerializeAsString(), "test.onnx", {{{"batch", 4}}, {}});
    std::string reason;
    std::optional<ImageLoop> folded = image_loop(mg, &reason);
    ASSERT_TRUE(folded) << reason;
    EXPECT_EQ(folded->per_image.value("y").shape, (Shape{1, 2, 4, 3}));
    std::vector<float> xs(24);
    for (size_t e = 0; e < xs.size(); ++e) xs[e] = std::sin(0.7f * static_cast<float>(e));
    const HostTensor batch = run_reference(mg, {{"x", HostTensor::floats({4, 6}, xs)}}).at("y");
    const size_t row = batch.f.size() / 4;
    for (size_t i = 0; i < 4; ++i) {
      std::vector<float> one_x(xs.begin() + static_cast<std::ptrdiff_t>(6 * i),
                               xs.begin() + static_cast<std::ptrdiff_t>(6 * i + 6));
      const HostTensor one =
          run_reference(folded->per_image, {{"x", HostTensor::floats({1, 6}, one_x)}}).at("y");
      EXPECT_EQ(one.f,
                std::vector<float>(batch.f.begin() + static_cast<std::ptrdiff_t>(row * i),
                                   batch.f.begin() + static_cast<std::ptrdiff_t>(row * (i + 1))))
          << "image " << i;
    }
  }
  {  // A strided ConvTranspose, lowered to zeros inserted by Reshapes and Pads (whose shapes
     // name the batch), keeps the images apart.
    ModelBuilder mb;
    mb.input("x", {-1, 2, 3, 3});
    mb.floats_shaped("w", {2, 3, 2, 2}, std::vector<float>(24, 0.5f));
    set_ints(mb.node("ConvTranspose", {"x", "w"}, {"y"}), "strides", {2, 2});
    mb.output("y");
    Graph mg = import_onnx_bytes(mb.m.SerializeAsString(), "test.onnx", {{{"batch", 4}}, {}});
    PassOptions po;
    po.channel_block = channel_block(tf::host_target());
    run_passes(mg, po);
    bool lowered = true;
    for (const Node& n : mg.nodes) lowered = lowered && n.op != "ConvTranspose";
    EXPECT_TRUE(lowered);
    std::string reason;
    EXPECT_TRUE(image_loop(mg, &reason)) << reason;
  }
  {  // An embedding: Gather along axis 0 of a constant table by each image's indices.
    ModelBuilder mb;
    mb.input("ids", {-1, 3}, onnx::TensorProto::INT64);
    std::vector<float> table(40);
    for (size_t e = 0; e < table.size(); ++e) table[e] = 0.1f * static_cast<float>(e);
    mb.floats_shaped("table", {10, 4}, table);
    mb.node("Gather", {"table", "ids"}, {"y"});
    mb.output("y");
    Graph mg = import_onnx_bytes(mb.m.SerializeAsString(), "test.onnx", {{{"batch", 4}}, {}});
    std::string reason;
    std::optional<ImageLoop> embedding = image_loop(mg, &reason);
    ASSERT_TRUE(embedding) << reason;
    EXPECT_EQ(embedding->per_image.value("y").shape, (Shape{1, 3, 4}));
  }
  refused(
      [](ModelBuilder& mb) {  // the rows of two images as one, then apart again
        mb.ints("pairs", {2, 10});
        mb.node("Reshape", {"x", "pairs"}, {"t"});
        mb.ints("back", {4, 5});
        mb.node("Reshape", {"t", "back"}, {"y"});
      },
      4, "node 'Reshape_t' (Reshape) does not take one image");
  refused(
      [](ModelBuilder& mb) {
        mb.ints("first", {0});
        mb.node("CumSum", {"x", "first"}, {"y"});
      },
      4, "(CumSum) mixes the rows of axis 0");
  refused([](ModelBuilder& mb) { mb.node("Relu", {"x"}, {"y"}); }, 1, "axis 0 has 1 image");
  refused([](ModelBuilder& mb) {  // a second output of the batch's size, from constants alone
    mb.floats_shaped("c", {4, 5}, std::vector<float>(20, 1.0f));
    mb.node("Relu", {"x"}, {"y"});
    mb.node("Neg", {"c"}, {"z"});
    mb.output("z");
  }, 4, "output 'z' is computed from constants alone");
  // When it pays: a batch past the cache, work enough per kernel, few weights read per image.
  ImageLoop big;
  big.images = 32;
  big.largest_bytes = 3 << 20;
  big.kernels = 59;
  big.flops = 8.2e9;
  big.streamed_weight_bytes = 8 << 20;  // ResNet-50's classifier
  EXPECT_TRUE(pays_per_image(big));
  ImageLoop small_batch = big;
  small_batch.images = 1;
  EXPECT_FALSE(pays_per_image(small_batch));
  ImageLoop little_work = big;
  little_work.flops = 59 * 4e6;
  little_work.streamed_weight_bytes = 0;
  EXPECT_FALSE(pays_per_image(little_work));
  ImageLoop mlp = big;
  mlp.streamed_weight_bytes = int64_t{1} << 30;
  EXPECT_FALSE(pays_per_image(mlp));
}

// A model's kernels are lowered on all cores at once (ModelBuilder::lower_all), once all are
// planned: the library is the one made lowering them one at a time (as a dump of the passes
// does, in order), byte for byte, sidecar and all, and it computes what the reference does.
TEST(ModelCompiler, KernelsLoweredOnAllCoresMakeTheLibraryOfOneAtATime) {
  namespace fs = std::filesystem;
  ModelBuilder b;
  b.input("x", {4, 16});
  // 12 products of different widths, each with its activation, then a Softmax and a
  // reduction: templated kernels with fused tails and generic ones, 14 or more.
  std::string v = "x";
  int64_t width = 16;
  for (int k = 0; k < 12; ++k) {
    const int64_t n = 8 + 4 * k;
    std::vector<float> w(static_cast<size_t>(width * n));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = 0.3f * std::sin(0.11f * static_cast<float>(i + 7 * k));
    b.floats_shaped(str("w", k), {width, n}, w);
    b.node("MatMul", {v, str("w", k)}, {str("m", k)});
    b.node(k % 3 == 0 ? "Tanh" : k % 3 == 1 ? "Sigmoid" : "Relu", {str("m", k)}, {str("a", k)});
    v = str("a", k);
    width = n;
  }
  b.node("Softmax", {v}, {"s"});
  b.node("ReduceMax", {"s"}, {"y"});
  b.output("y");
  Graph g = import_onnx_bytes(b.m.SerializeAsString(), "test.onnx");
  run_passes(g, PassOptions{2, {}, {}, nullptr, tf::host_target().vector_lanes()});
  const fs::path dir = fs::temp_directory_path() / ("tf-lower-all-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  // Both written under one name, the second after the first is read and moved away.
  const std::string so = (dir / "model.so").string();
  CompiledModel all = compile_model({&g}, tf::host_target(), defaults, so, "test");
  ASSERT_GE(all.kernels.size(), 14u);
  const std::string all_so = tf::read_file(so), all_json = tf::read_file(so + ".json");
  std::vector<HostTensor> got;
  HostTensor x = HostTensor::floats({4, 16}, std::vector<float>(64));
  for (size_t i = 0; i < x.f.size(); ++i) x.f[i] = std::cos(0.3f * static_cast<float>(i));
  {
    ModelLibrary lib(so);
    lib.run({&x}, got);
  }
  fs::rename(so, dir / "all.so");
  tf::LowerOptions one_at_a_time;
  one_at_a_time.dump = {"all"};
  std::ostringstream dumped;
  one_at_a_time.dump_stream = &dumped;
  CompiledModel serial = compile_model({&g}, tf::host_target(), defaults, so, "test",
                                       default_memory_budget(), false, false, one_at_a_time);
  EXPECT_NE(dumped.str().find(all.kernels.back().function), std::string::npos);
  EXPECT_EQ(serial.kernels.size(), all.kernels.size());
  EXPECT_TRUE(tf::read_file(so) == all_so) << "the library lowered on all cores differs";
  EXPECT_EQ(tf::read_file(so + ".json"), all_json);
  auto want = run_reference(g, {{"x", x}});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].f.size(), want.at("y").f.size());
  for (size_t i = 0; i < got[0].f.size(); ++i)
    EXPECT_NEAR(got[0].f[i], want.at("y").f[i], 1e-5) << i;
  fs::remove_all(dir);
}

// Input x [batch, 16] (batch a named dynamic dimension) times constant weights [16, 24], then a
// Relu into `relu`: the start of the shape-bucket tests' models.
void add_batch_matmul_relu(ModelBuilder& b, const std::string& relu) {
  b.input("x", {-1, 16});
  std::vector<float> w(16 * 24);
  for (size_t k = 0; k < w.size(); ++k) w[k] = std::sin(0.37f * static_cast<float>(k));
  b.floats_shaped("w", {16, 24}, w);
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Relu", {"m"}, {relu});
}

// Shape buckets (--dim batch=1,3,8): one library computes the model at every listed size, each
// bucket with kernels of its own and the weights embedded once; tf_model_run is bucket 0's,
// tf_model_run_shaped and ModelLibrary::run take the bucket of the inputs' shapes and refuse
// (status -4, a UserError naming the shapes) shapes no bucket has. The command line's lists
// make one binding per combination.
TEST(ModelLibrary, ShapeBucketsRunTheBucketOfTheInputsShapes) {
  namespace fs = std::filesystem;
  ModelBuilder b;
  add_batch_matmul_relu(b, "y");
  b.output("y");
  const std::string bytes = b.m.SerializeAsString();
  const std::vector<int64_t> sizes = {1, 3, 8};
  std::vector<Graph> graphs;
  for (int64_t n : sizes) graphs.push_back(import_onnx_bytes(bytes, "test.onnx", {{{"batch", n}}, {}}));
  std::vector<const Graph*> buckets;
  for (const Graph& g : graphs) buckets.push_back(&g);
  fs::path so = fs::temp_directory_path() / ("tf-buckets-test-" + std::to_string(getpid()) + ".so");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  CompiledModel cm = compile_model(buckets, tf::host_target(), defaults, so.string(), "test");
  CompiledModel one = compile_model(graphs[0], tf::host_target(), defaults, so.string() + ".one.so", "test");
  EXPECT_EQ(cm.constant_bytes, one.constant_bytes);  // the weights once, not per bucket
  ASSERT_EQ(cm.buckets.size(), 3u);
  EXPECT_EQ(cm.buckets[2].inputs[0]["shape"], nlohmann::json({8, 16}));
  std::set<int> kernel_buckets;
  for (const ModelKernel& k : cm.kernels) {
    kernel_buckets.insert(k.bucket);
    EXPECT_EQ(k.function.rfind(str("tf_b", k.bucket, "_k"), 0), 0u) << k.function;
  }
  EXPECT_EQ(kernel_buckets, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(cm.sidecar("test")["buckets"].size(), 3u);
  {
    ModelLibrary lib(so.string());
    ASSERT_EQ(lib.num_buckets(), 3);
    EXPECT_EQ(lib.inputs()[0].shape, (Shape{1, 16}));
    EXPECT_EQ(lib.bucket_outputs(2)[0].shape, (Shape{8, 24}));
    EXPECT_EQ(lib.bucket_of({{3, 16}}), 1);
    EXPECT_EQ(lib.bucket_of({{4, 16}}), -1);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t n = sizes[k];
      std::vector<float> xs(static_cast<size_t>(n * 16));
      for (size_t e = 0; e < xs.size(); ++e) xs[e] = std::cos(0.11f * static_cast<float>(e) + static_cast<float>(n));
      HostTensor x = HostTensor::floats({n, 16}, xs);
      std::vector<HostTensor> got;
      lib.run({&x}, got);
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(got[0].shape, (Shape{n, 24}));
      const std::vector<float> want = run_reference(graphs[k], {{"x", x}}).at("y").f;
      for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[0].f[e], want[e], 1e-4) << "batch " << n << " element " << e;
    }
    HostTensor x4 = HostTensor::floats({4, 16}, std::vector<float>(64, 1.0f));
    std::vector<HostTensor> got;
    try {
      lib.run({&x4}, got);
      ADD_FAILURE() << "a shape no bucket has ran";
    } catch (const tf::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("no shape bucket takes inputs of shapes [4, 16]; its buckets take [1, 16]; "
                                           "[3, 16]; [8, 16]"),
                std::string::npos)
          << e.what();
    }
  }
  // The C ABI as a C caller sees it.
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto num = reinterpret_cast<int32_t (*)()>(dlsym(h, "tf_model_num_buckets"));
  auto shape = reinterpret_cast<const int64_t* (*)(int32_t, int32_t)>(dlsym(h, "tf_model_bucket_input_shape"));
  auto of = reinterpret_cast<int32_t (*)(const int64_t* const*)>(dlsym(h, "tf_model_bucket_of"));
  auto shaped = reinterpret_cast<int32_t (*)(const int64_t* const*, const void* const*, void* const*, void*)>(
      dlsym(h, "tf_model_run_shaped"));
  auto by_bucket = reinterpret_cast<int32_t (*)(int32_t, const void* const*, void* const*, void*)>(
      dlsym(h, "tf_model_run_bucket"));
  ASSERT_TRUE(num && shape && of && shaped && by_bucket);
  EXPECT_EQ(num(), 3);
  ASSERT_NE(shape(2, 0), nullptr);
  EXPECT_EQ(shape(2, 0)[0], 8);
  EXPECT_EQ(shape(3, 0), nullptr);
  EXPECT_EQ(shape(0, 1), nullptr);
  EXPECT_EQ(shape(-1, 0), nullptr);
  const int64_t s3[] = {3, 16}, s5[] = {5, 16}, s3x8[] = {3, 8};
  const int64_t* const at3[] = {s3};
  const int64_t* const at5[] = {s5};
  const int64_t* const bad_rank_size[] = {s3x8};
  EXPECT_EQ(of(at3), 1);
  EXPECT_EQ(of(at5), -1);
  EXPECT_EQ(of(bad_rank_size), -1);
  EXPECT_EQ(of(nullptr), -1);
  std::vector<float> x(3 * 16, 0.5f), y(3 * 24, -1.0f), y2(3 * 24, -2.0f);
  const void* ins[] = {x.data()};
  void* outs[] = {y.data()};
  void* outs2[] = {y2.data()};
  EXPECT_EQ(shaped(at3, ins, outs, nullptr), 0);
  EXPECT_EQ(by_bucket(1, ins, outs2, nullptr), 0);
  EXPECT_EQ(y, y2);
  EXPECT_NE(y[0], -1.0f);
  EXPECT_EQ(shaped(at5, ins, outs, nullptr), -4);
  EXPECT_EQ(by_bucket(3, ins, outs, nullptr), -4);
  EXPECT_EQ(by_bucket(-1, ins, outs, nullptr), -4);
  dlclose(h);
  for (const fs::path& p : {so, fs::path(so.string() + ".json"), fs::path(so.string() + ".one.so"),
                            fs::path(so.string() + ".one.so.json")})
    fs::remove(p);
  // The command line: one binding per combination, the first --dim varying slowest.
  std::vector<InputBinding> all = parse_bindings({"batch=1,8", "seq=128,384"}, {});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1].dims, (std::map<std::string, int64_t>{{"batch", 1}, {"seq", 384}}));
  EXPECT_EQ(all[2].dims, (std::map<std::string, int64_t>{{"batch", 8}, {"seq", 128}}));
  expect_error([] { parse_bindings({"batch=1,8,1"}, {}); }, "--dim batch=1,8,1: size 1 is given twice");
  expect_error([] { parse_bindings({"batch=1,"}, {}); }, "--dim batch=1,: '' is not a size");
  expect_error([] { parse_bindings({"a=1,2,3,4,5,6,7,8", "b=1,2,3,4,5,6,7,8,9"}, {}); },
               "--dim: the sizes given make more than 64 shape buckets (one per combination); give fewer");
  expect_error([] { parse_binding({"batch=1,8"}, {}); },
               "--dim batch=1,8: several sizes (shape buckets) are for compile --model and tune --model; give one size here");
}

// Per-kernel profiles (docs/models.md, "Profiling"): the library lists its kernel calls, every
// bucket's in order, as the sidecar lists its kernels; its profiler is called around each call
// of the bucket that runs, and not at all once it is off.
TEST(ModelLibrary, ProfileTimesEveryKernelCallAndIsOffOtherwise) {
  namespace fs = std::filesystem;
  ModelBuilder b;
  add_batch_matmul_relu(b, "r");
  set_int(b.node("Softmax", {"r"}, {"y"}), "axis", -1);
  b.output("y");
  const std::string bytes = b.m.SerializeAsString();
  std::vector<Graph> graphs;
  for (int64_t n : {1, 3})
    graphs.push_back(import_onnx_bytes(bytes, "test.onnx", {{{"batch", n}}, {}}));
  fs::path so = fs::temp_directory_path() / ("tf-profile-test-" + std::to_string(getpid()) + ".so");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  CompiledModel cm =
      compile_model({&graphs[0], &graphs[1]}, tf::host_target(), defaults, so.string(), "test");
  ASSERT_GE(cm.kernels.size(), 4u);  // two kernels or more a bucket
  HostTensor x = HostTensor::floats({3, 16}, std::vector<float>(48, 0.25f));
  std::vector<HostTensor> got;
  {
    ModelLibrary lib(so.string());
    const ModelProfile p = lib.profile([&] {
      for (int r = 0; r < 3; ++r) lib.run({&x}, got);  // bucket 1
    });
    const std::vector<KernelTime>& times = p.calls;
    ASSERT_EQ(times.size(), cm.kernels.size());
    double total = 0;
    for (size_t i = 0; i < times.size(); ++i) {
      const ModelKernel& k = cm.kernels[i];
      EXPECT_EQ(times[i].function, k.function);  // as the sidecar names it
      std::string nodes;
      for (const std::string& node : k.nodes) nodes += (nodes.empty() ? "" : ", ") + node;
      EXPECT_EQ(times[i].what, k.workload.empty() ? nodes : k.workload);
      EXPECT_EQ(times[i].flops > 0, !k.workload.empty()) << k.function;
      EXPECT_EQ(times[i].bucket, k.bucket);
      EXPECT_EQ(times[i].calls, k.bucket == 1 ? 3 : 0) << k.function;
      if (k.bucket != 1) {
        EXPECT_EQ(times[i].seconds, 0.0);
      }
      total += times[i].seconds;
    }
    EXPECT_GT(total, 0.0);
    EXPECT_GE(p.seconds, total);  // the run's own time holds its kernels' (one thread)
    // The calls that ran, longest first.
    const std::vector<KernelTime> ran = p.ran_longest_first();
    size_t in_bucket_1 = 0;
    for (const ModelKernel& k : cm.kernels) in_bucket_1 += k.bucket == 1;
    ASSERT_EQ(ran.size(), in_bucket_1);
    for (size_t i = 0; i < ran.size(); ++i) {
      EXPECT_EQ(ran[i].bucket, 1) << ran[i].function;
      if (i > 0) {
        EXPECT_GE(ran[i - 1].seconds, ran[i].seconds);
      }
    }
    // Off after it, also when the run throws.
    std::vector<KernelTime> again = lib.profile([] {}).calls;
    for (const KernelTime& t : again) EXPECT_EQ(t.calls, 0) << t.function;
    // Without a sidecar that describes the calls: the functions called, and why not.
    std::ofstream(so.string() + ".json") << "{\"kernels\": []}";
    const ModelProfile undescribed = lib.profile([] {});
    again = undescribed.calls;
    EXPECT_EQ(undescribed.sidecar_problem, so.string() + ".json does not list the library's " +
                                               std::to_string(cm.kernels.size()) + " kernel calls");
    for (size_t i = 0; i < again.size(); ++i) {
      const ModelKernel& k = cm.kernels[i];
      EXPECT_EQ(again[i].function, k.same_code_as.empty() ? k.function : k.same_code_as);
      EXPECT_EQ(again[i].what, "");
    }
    fs::resize_file(so.string() + ".json", (uintmax_t{256} << 20) + 1);  // sparse
    EXPECT_EQ(lib.profile([] {}).sidecar_problem,
              so.string() + ".json is 268435457 bytes, over the 256 MiB a sidecar may have");
    fs::remove(so.string() + ".json");
    EXPECT_EQ(lib.profile([] {}).sidecar_problem, "");
    HostTensor wrong = HostTensor::floats({4, 16}, std::vector<float>(64, 0.25f));
    expect_error([&] { (void)lib.profile([&] { lib.run({&wrong}, got); }); },
                 "no shape bucket takes inputs");
  }
  // The C ABI: the calls' table, and a profiler set, then taken away.
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto num_calls = reinterpret_cast<int32_t (*)()>(dlsym(h, "tf_model_num_calls"));
  auto function = reinterpret_cast<const char* (*)(int32_t)>(dlsym(h, "tf_model_call_function"));
  auto bucket = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, "tf_model_call_bucket"));
  auto set =
      reinterpret_cast<void (*)(tf::ModelProfilerFn, void*)>(dlsym(h, "tf_model_set_profiler"));
  auto by_bucket = reinterpret_cast<int32_t (*)(int32_t, const void* const*, void* const*, void*)>(
      dlsym(h, "tf_model_run_bucket"));
  ASSERT_TRUE(num_calls && function && bucket && set && by_bucket);
  const auto n = static_cast<int32_t>(cm.kernels.size());
  EXPECT_EQ(num_calls(), n);
  EXPECT_EQ(function(n), nullptr);
  EXPECT_EQ(function(-1), nullptr);
  EXPECT_EQ(bucket(n), -1);
  EXPECT_EQ(bucket(0), 0);
  EXPECT_EQ(bucket(n - 1), 1);
  struct Seen {
    std::vector<std::pair<int32_t, int32_t>> events;
  } seen;
  set(
      [](void* ctx, int32_t call, int32_t end) {
        static_cast<Seen*>(ctx)->events.push_back({call, end});
      },
      &seen);
  std::vector<float> y(3 * 24);
  const void* ins[] = {x.f.data()};
  void* outs[] = {y.data()};
  ASSERT_EQ(by_bucket(1, ins, outs, nullptr), 0);
  std::vector<std::pair<int32_t, int32_t>> want;
  for (int32_t i = 0; i < n; ++i) {
    if (cm.kernels[static_cast<size_t>(i)].bucket != 1) continue;
    want.push_back({i, 0});
    want.push_back({i, 1});
  }
  EXPECT_EQ(seen.events, want);
  set(nullptr, nullptr);
  ASSERT_EQ(by_bucket(1, ins, outs, nullptr), 0);
  EXPECT_EQ(seen.events.size(), want.size());
  dlclose(h);
  for (const fs::path& p : {so, fs::path(so.string() + ".json")}) fs::remove(p);
}

// compile --pad-batch: fewer rows of axis 0 than a bucket's run the next larger bucket padded
// (ModelLibrary::run pads with zero rows and keeps the outputs' first rows), matching the model
// at their own size; the library says which buckets may (tf_model_bucket_padded: not batch 1's);
// more rows than any bucket's are refused naming the padded sizes; a model that mixes the rows
// of axis 0 (a softmax over them) and a library of batch 1 alone are refused by name.
// A library whose buckets may run padded but that cannot say which one (built before
// tf_model_padded_bucket_of, the one definition of that choice) is refused by name at load: the
// runtime has no copy of the rule to fall back on. Made here by the C compiler, the ABI's tables
// by hand. So are libraries without a per-kernel profiler (built before it: refused by name
// when profiled) and with a table of kernel calls that is not one (refused at load).
TEST(ModelLibrary, PaddedBucketsWithoutTheirChoiceAreRefusedAtLoad) {
  namespace fs = std::filesystem;
  if (std::system("cc --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no C compiler (cc)";
  const fs::path dir = fs::temp_directory_path() / ("tf-old-padded-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto build = [&](const std::string& name, bool choice, const std::string& more = "") {
    std::ofstream(dir / (name + ".c"))
        << R"(#include <stdint.h>
static const int64_t in[2] = {3, 16}, out[2] = {3, 24};
int32_t tf_model_run(const void* const* i, void* const* o, void* w) { return 0; }
uint64_t tf_model_workspace_bytes(void) { return 0; }
int32_t tf_model_num_inputs(void) { return 1; }
const char* tf_model_input_name(int32_t i) { return "x"; }
int32_t tf_model_input_ndim(int32_t i) { return 2; }
const int64_t* tf_model_input_shape(int32_t i) { return in; }
int32_t tf_model_num_outputs(void) { return 1; }
const char* tf_model_output_name(int32_t i) { return "y"; }
int32_t tf_model_output_ndim(int32_t i) { return 2; }
const int64_t* tf_model_output_shape(int32_t i) { return out; }
int32_t tf_model_num_buckets(void) { return 1; }
const int64_t* tf_model_bucket_input_shape(int32_t b, int32_t i) { return b == 0 && i == 0 ? in : 0; }
const int64_t* tf_model_bucket_output_shape(int32_t b, int32_t i) { return b == 0 && i == 0 ? out : 0; }
int32_t tf_model_run_bucket(int32_t b, const void* const* i, void* const* o, void* w) { return 0; }
int32_t tf_model_bucket_padded(int32_t b) { return b == 0; }
)"
        << (choice ? "int32_t tf_model_padded_bucket_of(const int64_t* const* s, int64_t* r) { *r "
                     "= s[0][0]; return s[0][0] == 2 ? 0 : -1; }\n"
                   : "")
        << more;
    const fs::path so = dir / (name + ".so");
    const std::string cmd =
        "cc -shared -fPIC -o " + so.string() + " " + (dir / (name + ".c")).string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return so.string();
  };
  const std::string old = build("old", false);
  expect_error([&] { ModelLibrary lib(old); },
               old +
                   ": has padded shape buckets but no tf_model_padded_bucket_of (built by an older "
                   "tunefarm): "
                   "compile it again");
  // With it, the library's answer is ModelLibrary's (the rows too), whatever the tables say.
  const std::string now = build("now", true);
  ModelLibrary lib(now);
  int64_t rows = 0;
  EXPECT_EQ(lib.padded_bucket_of({{2, 16}}, &rows), 0);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(lib.padded_bucket_of({{1, 16}}), -1);
  EXPECT_EQ(lib.padded_bucket_of({{2, 16, 1}}), -1);        // another rank: not asked
  EXPECT_EQ(lib.padded_bucket_of({{2, 16}, {2, 16}}), -1);  // another count of inputs
  expect_error([&] { (void)lib.profile([] {}); },
               now + ": has no per-kernel profiler (compiled before it): compile it again");
  expect_error([&] { lib.check_profiler(); },
               now + ": has no per-kernel profiler (compiled before it): compile it again");
  const std::string profiler =
      "typedef void (*hook)(void*, int32_t, int32_t);\n"
      "void tf_model_set_profiler(hook f, void* c) {}\n"
      "const char* tf_model_call_function(int32_t i) { return i == 0 ? \"tf_k0_MatMul\" : 0; }\n";
  expect_error(
      [&] {
        ModelLibrary l(build("many", true,
                             profiler + "int32_t tf_model_num_calls(void) { return 1 << 21; }\n"
                                        "int32_t tf_model_call_bucket(int32_t i) { return 0; }\n"));
      },
      ": declares 2097152 kernel calls (at most 1048576)");
  expect_error(
      [&] {
        ModelLibrary l(build("nameless", true,
                             profiler + "int32_t tf_model_num_calls(void) { return 2; }\n"
                                        "int32_t tf_model_call_bucket(int32_t i) { return 0; }\n"));
      },
      ": kernel call 1 has no function or bucket");
  expect_error(
      [&] {
        ModelLibrary l(build("elsewhere", true,
                             profiler + "int32_t tf_model_num_calls(void) { return 1; }\n"
                                        "int32_t tf_model_call_bucket(int32_t i) { return 1; }\n"));
      },
      ": kernel call 0 has no function or bucket");
  expect_error(
      [&] {
        ModelLibrary l(
            build("untabled", true, "void tf_model_set_profiler(void* f, void* c) {}\n"));
      },
      ": not a tunefarm model library (no tf_model_num_calls)");
  fs::remove_all(dir);
}

TEST(ModelLibrary, PadBatchRunsFewerRowsInTheNextBucketWhereTheRowsAreApart) {
  namespace fs = std::filesystem;
  auto model = [](const char* softmax_axis) {
    ModelBuilder b;
    b.input("x", {-1, 16});
    std::vector<float> w(16 * 24);
    for (size_t k = 0; k < w.size(); ++k) w[k] = std::sin(0.29f * static_cast<float>(k));
    b.floats_shaped("w", {16, 24}, w);
    b.node("MatMul", {"x", "w"}, {"m"});
    tf::graph::testing::set_int(b.node("Softmax", {"m"}, {"y"}), "axis", std::atoi(softmax_axis));
    b.output("y");
    return b.m.SerializeAsString();
  };
  auto graphs_at = [](const std::string& bytes, const std::vector<int64_t>& sizes) {
    std::vector<Graph> graphs;
    for (int64_t n : sizes)
      graphs.push_back(import_onnx_bytes(bytes, "test.onnx", {{{"batch", n}}, {}}));
    return graphs;
  };
  auto pointers = [](const std::vector<Graph>& graphs) {
    std::vector<const Graph*> out;
    for (const Graph& g : graphs) out.push_back(&g);
    return out;
  };
  fs::path so =
      fs::temp_directory_path() / ("tf-pad-batch-test-" + std::to_string(getpid()) + ".so");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  const std::vector<Graph> graphs = graphs_at(model("1"), {1, 3, 8});
  CompiledModel cm = compile_model(pointers(graphs), tf::host_target(), defaults, so.string(),
                                   "test", default_memory_budget(), false, /*pad_batch=*/true);
  ASSERT_EQ(cm.buckets.size(), 3u);
  EXPECT_FALSE(cm.buckets[0].padded);
  EXPECT_TRUE(cm.buckets[1].padded && cm.buckets[2].padded);
  EXPECT_EQ(cm.sidecar("test")["pad_batch"], true);
  {
    ModelLibrary lib(so.string());
    EXPECT_FALSE(lib.bucket_padded(0));
    EXPECT_TRUE(lib.bucket_padded(2));
    int64_t rows = 0;
    EXPECT_EQ(lib.padded_bucket_of({{2, 16}}, &rows), 1);
    EXPECT_EQ(rows, 2);
    EXPECT_EQ(lib.padded_bucket_of({{5, 16}}), 2);
    EXPECT_EQ(lib.padded_bucket_of({{5, 17}}), -1);
    EXPECT_EQ(lib.padded_bucket_of({{9, 16}}), -1);
    for (int64_t n : {2, 5, 3}) {
      std::vector<float> xs(static_cast<size_t>(n * 16));
      for (size_t e = 0; e < xs.size(); ++e)
        xs[e] = std::cos(0.07f * static_cast<float>(e) + static_cast<float>(n));
      HostTensor x = HostTensor::floats({n, 16}, xs);
      std::vector<HostTensor> got;
      lib.run({&x}, got);
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(got[0].shape, (Shape{n, 24}));
      const std::vector<Graph> at_n = graphs_at(model("1"), {n});
      const std::vector<float> want = run_reference(at_n[0], {{"x", x}}).at("y").f;
      for (size_t e = 0; e < want.size(); ++e)
        EXPECT_NEAR(got[0].f[e], want[e], 1e-5) << "batch " << n << " element " << e;
    }
    HostTensor x9 = HostTensor::floats({9, 16}, std::vector<float>(9 * 16, 1.0f));
    std::vector<HostTensor> got;
    expect_error([&] { lib.run({&x9}, got); },
                 "no shape bucket takes inputs of shapes [9, 16]; its buckets take [1, 16]; "
                 "[3, 16]; [8, 16] (and fewer rows of axis 0 than 3, 8, padded)");
  }
  // The C ABI's table.
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto padded = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, "tf_model_bucket_padded"));
  ASSERT_NE(padded, nullptr);
  EXPECT_EQ(padded(0), 0);
  EXPECT_EQ(padded(1), 1);
  EXPECT_EQ(padded(2), 1);
  EXPECT_EQ(padded(3), 0);
  EXPECT_EQ(padded(-1), 0);
  // tf_model_padded_bucket_of: the choice itself (ModelLibrary, the GPU runtime and Python ask
  // it): the padded bucket of fewest rows that holds them, the rows to *rows; 1 row has its
  // own bucket but may also run padded; none for other widths, more rows, 0 rows, no shapes.
  auto choose = reinterpret_cast<int32_t (*)(const int64_t* const*, int64_t*)>(
      dlsym(h, "tf_model_padded_bucket_of"));
  ASSERT_NE(choose, nullptr);
  {
    int64_t rows = -1;
    const int64_t d1[2] = {1, 16}, d3[2] = {3, 16}, d4[2] = {4, 16}, d8[2] = {8, 16},
                  d9[2] = {9, 16}, d0[2] = {0, 16}, dw[2] = {2, 17};
    auto of = [&](const int64_t* d, int64_t* r) {
      const int64_t* at[1] = {d};
      return choose(at, r);
    };
    EXPECT_EQ(of(d3, &rows), 1);
    EXPECT_EQ(rows, 3);
    EXPECT_EQ(of(d4, &rows), 2);
    EXPECT_EQ(rows, 4);
    EXPECT_EQ(of(d8, nullptr), 2);
    EXPECT_EQ(of(d1, &rows), 1);
    EXPECT_EQ(rows, 1);
    rows = -1;
    EXPECT_EQ(of(d9, &rows), -1);
    EXPECT_EQ(of(d0, &rows), -1);
    EXPECT_EQ(of(dw, &rows), -1);
    EXPECT_EQ(rows, -1);  // untouched when none
    const int64_t* missing[1] = {nullptr};
    EXPECT_EQ(choose(missing, &rows), -1);
    EXPECT_EQ(choose(nullptr, &rows), -1);
  }
  // tf_model_run_shaped pads too: 2 rows in bucket 1, the caller's buffers of 2 rows.
  auto shaped =
      reinterpret_cast<int32_t (*)(const int64_t* const*, const void* const*, void* const*, void*)>(
          dlsym(h, "tf_model_run_shaped"));
  ASSERT_NE(shaped, nullptr);
  {
    std::vector<float> xs(2 * 16);
    for (size_t e = 0; e < xs.size(); ++e) xs[e] = std::sin(0.13f * static_cast<float>(e));
    std::vector<float> y(2 * 24 + 1, -7.0f);  // one float past the rows: left alone
    const void* ins[1] = {xs.data()};
    void* outs[1] = {y.data()};
    const int64_t dims2[2] = {2, 16}, dims9[2] = {9, 16}, dims2w[2] = {2, 17};
    const int64_t* at2[1] = {dims2};
    ASSERT_EQ(shaped(at2, ins, outs, nullptr), 0);
    const std::vector<float> want =
        run_reference(graphs_at(model("1"), {2})[0], {{"x", HostTensor::floats({2, 16}, xs)}})
            .at("y")
            .f;
    for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(y[e], want[e], 1e-5) << e;
    EXPECT_EQ(y.back(), -7.0f);
    const int64_t* at9[1] = {dims9};
    const int64_t* at2w[1] = {dims2w};
    EXPECT_EQ(shaped(at9, ins, outs, nullptr), -4);
    EXPECT_EQ(shaped(at2w, ins, outs, nullptr), -4);
    EXPECT_EQ(shaped(nullptr, ins, outs, nullptr), -4);
  }
  dlclose(h);
  fs::remove(so);
  fs::remove(so.string() + ".json");
  // A softmax over the rows mixes them: padding would change every row's result.
  const std::vector<Graph> mixing = graphs_at(model("0"), {1, 4});
  expect_error(
      [&] {
        compile_model(pointers(mixing), tf::host_target(), defaults, so.string(), "test",
                      default_memory_budget(), false, true);
      },
      "--pad-batch: bucket 1 (x [4, 16]) cannot be padded up to: the rows of axis 0 are not kept "
      "apart (");
  const std::vector<Graph> one = graphs_at(model("1"), {1});
  expect_error(
      [&] {
        compile_model(pointers(one), tf::host_target(), defaults, so.string(), "test",
                      default_memory_budget(), false, true);
      },
      "--pad-batch: no bucket has more than one row of axis 0 to pad up to");
  EXPECT_FALSE(fs::exists(so));
}

// A model's entry points run its kernels with denormals flushed to zero (compiler/fp_control.h):
// a product below 2^-126 is 0 and a denormal input reads as 0, on the caller's thread and on
// the pool's workers alike (the elementwise kernels here are parallel loops; each call is
// checked, so a worker that kept IEEE denormals fails some call), and the caller's own
// floating-point control is what it was after the call, flushing or not.
TEST(ModelLibrary, DenormalsAreFlushedWithinACallAndTheCallersModeKept) {
  namespace fs = std::filesystem;
  constexpr int64_t n = 1 << 17;
  ModelBuilder b;
  b.input("x", {1, n});
  b.floats("small", {std::ldexp(1.0f, -20)});
  b.floats("large", {std::ldexp(1.0f, 20)});
  b.node("Mul", {"x", "small"}, {"y"});
  b.node("Mul", {"x", "large"}, {"z"});
  b.output("y");
  b.output("z");
  Graph g = import_onnx_bytes(b.m.SerializeAsString(), "test.onnx");
  fs::path so = fs::temp_directory_path() / ("tf-denormals-test-" + std::to_string(getpid()) + ".so");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  compile_model(g, tf::host_target(), defaults, so.string(), "test");
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto run = reinterpret_cast<int32_t (*)(const void* const*, void* const*, void*)>(dlsym(h, "tf_model_run"));
  ASSERT_NE(run, nullptr);
  // x: 2^-110 (times 2^-20: a denormal product), 1, and 2^-130 (a denormal input: times 2^20
  // it would be 2^-110, a normal float).
  std::vector<float> x(n);
  for (int64_t e = 0; e < n; ++e) x[e] = e % 3 == 0 ? std::ldexp(1.0f, -110) : e % 3 == 1 ? 1.0f : std::ldexp(1.0f, -130);
  ASSERT_GT(x[2], 0.0f);  // the test's own arithmetic keeps denormals
  std::vector<float> y(n), z(n);
  const void* ins[] = {x.data()};
  void* outs[] = {y.data(), z.data()};
  for (int call = 0; call < 20; ++call) {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned before = call % 2 ? (_mm_getcsr() | 0x8040u) : (_mm_getcsr() & ~0x8040u);
    _mm_setcsr(before);
#endif
    std::fill(y.begin(), y.end(), -1.0f);
    std::fill(z.begin(), z.end(), -1.0f);
    ASSERT_EQ(run(ins, outs, nullptr), 0);
#if defined(__x86_64__) || defined(__i386__)
    EXPECT_EQ(_mm_getcsr(), before) << "call " << call;
    _mm_setcsr(before & ~0x8040u);
#endif
    int64_t kept = 0;
    for (int64_t e = 0; e < n; ++e) {
      const float want_y = e % 3 == 1 ? std::ldexp(1.0f, -20) : 0.0f;
      const float want_z = e % 3 == 1 ? std::ldexp(1.0f, 20) : e % 3 == 0 ? std::ldexp(1.0f, -90) : 0.0f;
      kept += y[e] != want_y || z[e] != want_z;
    }
    EXPECT_EQ(kept, 0) << "call " << call << ": elements computed with IEEE denormals (or wrong)";
  }
  dlclose(h);
  for (const fs::path& p : {so, fs::path(so.string() + ".json")}) fs::remove(p);
}

// A model with float16 / bfloat16 inputs and outputs (docs/precision.md): each 16-bit input is
// read through a Cast to float32, each 16-bit output written by a storage Cast from the float32
// value the nodes compute (renamed); the reference rounds the output to the type; compiled for
// this machine the library takes and returns 16-bit elements. verify() keeps 16-bit values at
// the edges; what the import refuses names the value.
TEST(OnnxImport, SixteenBitInputsAndOutputsAreCastAtTheEdges) {
  for (int type : {onnx::TensorProto::FLOAT16, onnx::TensorProto::BFLOAT16}) {
    const bool f16 = type == onnx::TensorProto::FLOAT16;
    const DType dt = f16 ? DType::F16 : DType::BF16;
    ModelBuilder b;
    b.input("x", {2, 3}, type);
    b.node("Mul", {"x", "x"}, {"y"});
    b.node("Relu", {"y"}, {"z"});
    b.output("y", {2, 3}, type);
    b.output("z", {2, 3}, type);
    Graph g = b.import();
    EXPECT_EQ(g.value("x").dtype, dt);
    EXPECT_EQ(g.value("y").dtype, dt);
    EXPECT_EQ(g.value("z").dtype, dt);
    ASSERT_EQ(g.nodes.size(), 5u);
    EXPECT_EQ(g.nodes[0].op, "Cast");
    EXPECT_EQ(g.nodes[0].inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(g.value(g.nodes[0].outputs[0]).dtype, DType::F32);
    EXPECT_EQ(g.nodes[1].inputs,
              (std::vector<std::string>{g.nodes[0].outputs[0], g.nodes[0].outputs[0]}));
    EXPECT_EQ(g.nodes[2].inputs[0], "y_float32");  // Relu reads the float32 product, not the output
    EXPECT_TRUE(g.nodes[3].has(kStorageCast));
    // 1 + 2^-11 squared is a tie in float16 (rounds to 1 + 2^-10, even); 300^2 past bfloat16's 8
    // bits.
    const float tie = 1.0f + 0x1p-11f;
    HostTensor x = HostTensor::floats(
        {2, 3}, {f16 ? tf::round_f16(tie) : 1.0f, -2.0f, 0.5f, 300.0f, f16 ? 255.0f : 3.0f, 0.1f},
        dt);
    for (float& v : x.f) v = f16 ? tf::round_f16(v) : tf::round_bf16(v);
    auto ref = run_reference(g, {{"x", x}});
    ASSERT_EQ(ref.at("y").dtype, dt);
    for (size_t k = 0; k < 6; ++k) {
      const float sq = x.f[k] * x.f[k];
      const float want = f16 ? tf::round_f16(sq) : tf::round_bf16(sq);
      EXPECT_EQ(ref.at("y").f[k], want) << k;
      EXPECT_EQ(ref.at("z").f[k], std::max(want, 0.0f)) << k;
    }
    Graph compiled = g;
    PassOptions o;
    o.channel_block = tf::host_target().vector_lanes();
    run_passes(compiled, o);
    int from_template = 0;
    std::vector<HostTensor> got = compile_and_run(compiled, {&x}, "none", from_template);
    ASSERT_EQ(got.size(), 2u);
    for (size_t k = 0; k < 6; ++k) {
      EXPECT_EQ(got[0].dtype, dt);
      EXPECT_EQ(got[0].f[k], ref.at("y").f[k]) << k;
      EXPECT_EQ(got[1].f[k], ref.at("z").f[k]) << k;
    }
  }
  // An input given back as it is stays the input (no Cast).
  ModelBuilder same;
  same.input("x", {2}, onnx::TensorProto::FLOAT16);
  same.output("x", {2}, onnx::TensorProto::FLOAT16);
  EXPECT_TRUE(same.import().nodes.empty());
  ModelBuilder other;
  other.input("x", {2}, onnx::TensorProto::FLOAT16);
  other.output("x", {2}, onnx::TensorProto::BFLOAT16);
  EXPECT_NE(other.error().find(
                "graph output 'x' is declared bfloat16 but is the model's input of type float16"),
            std::string::npos)
      << other.error();
  ModelBuilder shape;
  shape.input("x", {2, 3}, onnx::TensorProto::FLOAT16);
  shape.node("Shape", {"x"}, {"s"});
  shape.output("s", {2}, onnx::TensorProto::FLOAT16);
  EXPECT_NE(shape.error().find("graph output 's' is declared float16 but is int64"),
            std::string::npos)
      << shape.error();
  ModelBuilder own;
  own.input("x", {2});
  auto* c = own.node("Cast", {"x"}, {"y"});
  set_int(c, "to", onnx::TensorProto::FLOAT16);
  set_int(c, kStorageCast, 1);
  own.output("y");
  EXPECT_NE(own.error().find(
                "node 'Cast_y' (Cast) has the attribute 'tf_storage', which is tunefarm's own"),
            std::string::npos)
      << own.error();
  // verify(): a 16-bit value read by anything but a Cast to float32, or written by anything but
  // a storage Cast.
  ModelBuilder ok;
  ok.input("x", {2}, onnx::TensorProto::FLOAT16);
  ok.node("Relu", {"x"}, {"y"});
  ok.output("y");
  Graph g = ok.import();
  Graph bad = g;
  bad.nodes[1].inputs[0] = "x";
  try {
    verify(bad);
    ADD_FAILURE() << "verify took a Relu of a float16 value";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "reads the float16 value 'x'; float16 and bfloat16 values are a model's inputs"),
              std::string::npos)
        << e.what();
  }
  bad = g;
  bad.values.at("y").dtype = DType::BF16;
  try {
    verify(bad);
    ADD_FAILURE() << "verify took a Relu writing bfloat16";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "writes the bfloat16 value 'y'; only a storage Cast writes float16 or bfloat16"),
              std::string::npos)
        << e.what();
  }
}

// fold-qdq: a MatMul of uint8 activations x per-column int8 weights and a Gemm of
// int8 (symmetric, zero point -3) activations x transposed per-row int8 weights with a bias
// become QMatMul nodes; a product whose weights have a zero point stays a MatMul. The folded
// graph computes what the QDQ graph does (reference evaluation of both), and so does the
// model compiled for this machine (int8 kernels: qdense.cpu).
TEST(OnnxImport, QdqMatMulsFoldIntoInt8Kernels) {
  ModelBuilder b(13);
  b.input("x", {3, 5, 12});
  b.input("x2", {4, 9});
  b.floats_shaped("s", {}, {0.02f});
  b.bytes("z", {}, {100}, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  std::vector<int32_t> w(12 * 7), wt(6 * 9);
  for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int32_t>((k * 37) % 255) - 127;
  for (size_t k = 0; k < wt.size(); ++k) wt[k] = static_cast<int32_t>((k * 53) % 256) - 128;
  b.bytes("w", {12, 7}, w);
  b.floats("ws", {0.01f, 0.02f, 0.03f, 0.015f, 0.005f, 0.04f, 0.025f});
  b.node("DequantizeLinear", {"w", "ws"}, {"wd"});  // axis 1: per column
  b.node("MatMul", {"xd", "wd"}, {"y"});
  b.floats_shaped("s2", {}, {0.05f});
  b.bytes("z2", {}, {-3});
  b.node("QuantizeLinear", {"x2", "s2", "z2"}, {"x2q"});
  b.node("DequantizeLinear", {"x2q", "s2", "z2"}, {"x2d"});
  b.bytes("wt", {6, 9}, wt);
  b.floats("wts", {0.1f, 0.2f, 0.05f, 0.07f, 0.3f, 0.01f});
  set_int(b.node("DequantizeLinear", {"wt", "wts"}, {"wtd"}), "axis", 0);
  b.floats("bias", {1.0f, -2.0f, 0.5f, 0.0f, 3.0f, -1.5f});
  set_int(b.node("Gemm", {"x2d", "wtd", "bias"}, {"y2"}), "transB", 1);
  // Weights with a zero point of their own: not folded.
  b.bytes("wz", {7}, {0, 0, 5, 0, 0, 0, 0});
  b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wzd"});
  b.node("MatMul", {"xd", "wzd"}, {"y3"});
  b.output("y");
  b.output("y2");
  b.output("y3");
  const Graph qdq = b.import();
  Graph g = qdq;
  const tf::Target host = tf::host_target();
  std::vector<PassReport> reports = run_passes(g, PassOptions{2, {}, {}, nullptr, channel_block(host)});
  int folded = 0, matmuls = 0;
  for (const Node& n : g.nodes) {
    folded += n.op == "QMatMul";
    matmuls += n.op == "MatMul";
  }
  EXPECT_EQ(folded, 2);
  EXPECT_EQ(matmuls, 1);
  EXPECT_EQ(g.int8_nodes, 2);
  // Without a CPU target (a GPU, the reference run) nothing folds.
  Graph gpu = qdq;
  run_passes(gpu, PassOptions{2, {}, {}, nullptr, 0});
  EXPECT_EQ(gpu.int8_nodes, 0);
  // Inputs that hit ties, both ends of the range and plain values.
  HostTensor x = HostTensor::floats({3, 5, 12}, std::vector<float>(180)), x2 = HostTensor::floats({4, 9}, std::vector<float>(36));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = k % 17 == 0 ? 0.03f : k % 13 == 0 ? 9.0f : std::sin(0.7f * k) * 2.5f;
  for (size_t k = 0; k < x2.f.size(); ++k) x2.f[k] = k % 11 == 0 ? -9.0f : std::cos(0.3f * k) * 4.0f;
  const std::map<std::string, HostTensor> feeds = {{"x", x}, {"x2", x2}};
  auto want = run_reference(qdq, feeds), folded_ref = run_reference(g, feeds);
  auto close = [](const HostTensor& a, const HostTensor& b, const std::string& what) {
    ASSERT_EQ(a.f.size(), b.f.size()) << what;
    for (size_t k = 0; k < a.f.size(); ++k) EXPECT_NEAR(a.f[k], b.f[k], 1e-5 * (1 + std::fabs(a.f[k]))) << what << " " << k;
  };
  for (const char* y : {"y", "y2", "y3"}) close(want.at(y), folded_ref.at(y), std::string("folded reference ") + y);
  // Compiled: the QMatMuls are qmatmul kernels with int8 weights packed at compile time.
  int qkernels = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x, &x2}, "qdense.cpu", qkernels);
  EXPECT_EQ(qkernels, 2);
  ASSERT_EQ(got.size(), 3u);
  close(want.at("y"), got[0], "compiled y");
  close(want.at("y2"), got[1], "compiled y2");
  close(want.at("y3"), got[2], "compiled y3");
}

// fold-qdq's convolutions: transform-conv-layout makes a QDQ Conv a QConvNCHWc of the
// quantized input's float source (padding, stride, a bias, a Relu after it); a 3-channel
// first convolution (a block of 3: no quads) stays a float ConvNCHWc, and so does every
// convolution with fold-qdq disabled. Reference and compiled outputs match the QDQ graph's.
TEST(OnnxImport, QdqConvolutionsFoldIntoInt8Kernels) {
  ModelBuilder b(13);
  b.input("x", {1, 3, 10, 10});
  b.floats_shaped("s0", {}, {0.03f});
  b.bytes("z0", {}, {120}, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "s0", "z0"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s0", "z0"}, {"xd"});
  auto weights = [&](const std::string& name, int64_t K, int64_t C, int64_t R, int seed) {
    std::vector<int32_t> w(static_cast<size_t>(K * C * R * R));
    for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int32_t>((k * 29 + seed * 7) % 255) - 127;
    b.bytes(name, {K, C, R, R}, w);
    std::vector<float> s(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) s[static_cast<size_t>(k)] = 0.002f + 0.0005f * static_cast<float>((k * 5 + seed) % 7);
    b.floats(name + "_s", s);
    set_int(b.node("DequantizeLinear", {name, name + "_s"}, {name + "_d"}), "axis", 0);
  };
  auto conv = [&](const std::string& in, const std::string& w, const std::string& out, std::vector<int64_t> pads,
                  std::vector<int64_t> strides, const std::string& bias) {
    std::vector<std::string> ins = {in, w + "_d"};
    if (!bias.empty()) ins.push_back(bias);
    auto* n = b.node("Conv", ins, {out});
    set_ints(n, "pads", pads);
    set_ints(n, "strides", strides);
  };
  weights("w0", 16, 3, 3, 1);
  conv("xd", "w0", "c0", {1, 1, 1, 1}, {1, 1}, "");
  b.node("Relu", {"c0"}, {"r0"});
  b.floats_shaped("s1", {}, {0.01f});
  b.bytes("z1", {}, {0}, onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"r0", "s1", "z1"}, {"r0q"});
  b.node("DequantizeLinear", {"r0q", "s1", "z1"}, {"r0d"});
  weights("w1", 32, 16, 3, 2);
  std::vector<float> bias(32);
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = 0.1f * static_cast<float>(k % 5) - 0.2f;
  b.floats("bias1", bias);
  conv("r0d", "w1", "c1", {1, 1, 1, 1}, {2, 2}, "bias1");
  b.node("Relu", {"c1"}, {"y"});
  b.output("y");
  const Graph qdq = b.import();
  const tf::Target host = tf::host_target();
  auto passes = [&](std::set<std::string> disabled) {
    Graph g = qdq;
    run_passes(g, PassOptions{2, std::move(disabled), {}, nullptr, channel_block(host)});
    std::map<std::string, int> ops;
    for (const Node& n : g.nodes) ++ops[n.op];
    return std::make_pair(g, ops);
  };
  auto [g, ops] = passes({});
  EXPECT_EQ(ops["QConvNCHWc"], 1);
  EXPECT_EQ(ops["ConvNCHWc"], 1);
  EXPECT_EQ(g.int8_nodes, 1);
  EXPECT_EQ(passes({"fold-qdq"}).second["QConvNCHWc"], 0);
  HostTensor x = HostTensor::floats({1, 3, 10, 10}, std::vector<float>(300));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(0.37f * static_cast<float>(k)) * 3.0f;
  auto want = run_reference(qdq, {{"x", x}}).at("y"), folded = run_reference(g, {{"x", x}}).at("y");
  ASSERT_EQ(want.f.size(), folded.f.size());
  for (size_t k = 0; k < want.f.size(); ++k) EXPECT_NEAR(want.f[k], folded.f[k], 1e-5 * (1 + std::fabs(want.f[k]))) << k;
  int qkernels = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x}, "qconv2d_nchwc.cpu", qkernels);
  EXPECT_EQ(qkernels, 1);
  ASSERT_EQ(got.size(), 1u);
  for (size_t k = 0; k < want.f.size(); ++k) EXPECT_NEAR(want.f[k], got[0].f[k], 1e-5 * (1 + std::fabs(want.f[k]))) << k;
}

// Depthwise QDQ convolutions become QDepthwiseNCHWc (qdepthwise_conv2d_nchwc kernels): a 3x3
// one with a bias and Relu, then a 5x5 strided one that reads the first's output as uint8
// (int8-edges). Reference and compiled outputs match the QDQ graph's.
TEST(OnnxImport, QdqDepthwiseConvolutionsFoldIntoInt8Kernels) {
  ModelBuilder b(13);
  const int64_t C = 16;
  b.input("x", {1, C, 11, 10});
  auto qdq = [&](const std::string& in, const std::string& out, float scale, int32_t zero) {
    b.floats_shaped(out + "_s", {}, {scale});
    b.bytes(out + "_z", {}, {zero}, onnx::TensorProto::UINT8);
    b.node("QuantizeLinear", {in, out + "_s", out + "_z"}, {out + "_q"});
    b.node("DequantizeLinear", {out + "_q", out + "_s", out + "_z"}, {out});
  };
  auto depthwise = [&](const std::string& in, const std::string& out, int64_t R, int64_t stride, bool bias) {
    std::vector<int32_t> w(static_cast<size_t>(C * R * R));
    for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int32_t>((k * 41 + static_cast<size_t>(R)) % 255) - 127;
    b.bytes(out + "_w", {C, 1, R, R}, w);
    std::vector<float> s(static_cast<size_t>(C));
    for (size_t k = 0; k < s.size(); ++k) s[k] = 0.003f + 0.001f * static_cast<float>(k % 5);
    b.floats(out + "_ws", s);
    set_int(b.node("DequantizeLinear", {out + "_w", out + "_ws"}, {out + "_wd"}), "axis", 0);
    std::vector<std::string> ins = {in, out + "_wd"};
    if (bias) {
      std::vector<float> bv(static_cast<size_t>(C));
      for (size_t k = 0; k < bv.size(); ++k) bv[k] = 0.05f * static_cast<float>(k % 7) - 0.1f;
      b.floats(out + "_b", bv);
      ins.push_back(out + "_b");
    }
    auto* n = b.node("Conv", ins, {out});
    set_int(n, "group", C);
    const int64_t p = R / 2;
    set_ints(n, "pads", {p, p, p, p});
    set_ints(n, "strides", {stride, stride});
  };
  qdq("x", "xd", 0.02f, 120);
  depthwise("xd", "d1", 3, 1, true);
  b.node("Relu", {"d1"}, {"r1"});
  qdq("r1", "r1d", 0.01f, 0);
  depthwise("r1d", "y", 5, 2, false);
  b.output("y");
  const Graph qdq_graph = b.import();
  Graph g = qdq_graph;
  run_passes(g, PassOptions{2, {}, {}, nullptr, channel_block(tf::host_target())});
  int folded = 0, u8 = 0;
  for (const Node& n : g.nodes) {
    if (n.op != "QDepthwiseNCHWc") continue;
    ++folded;
    u8 += g.value(n.inputs[0]).dtype == DType::U8;
    EXPECT_NE(anchor_workload(g, n).spec.find("qdepthwise_conv2d_nchwc("), std::string::npos);
  }
  EXPECT_EQ(folded, 2);
  EXPECT_EQ(u8, 1);
  EXPECT_EQ(g.int8_nodes, 2);
  HostTensor x = HostTensor::floats({1, C, 11, 10}, std::vector<float>(static_cast<size_t>(C * 110)));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(0.53f * static_cast<float>(k)) * 2.0f;
  auto want = run_reference(qdq_graph, {{"x", x}}).at("y"), ref = run_reference(g, {{"x", x}}).at("y");
  int from_template = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x}, "depthwise_conv2d_nchwc.cpu", from_template);
  EXPECT_EQ(from_template, 2);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.f.size(), got[0].f.size());
  // The kernels sum exactly and scale in float32; where the first output lands on a rounding
  // tie of r1's grid (0.01), float rounding may put it one step over: the second then
  // differs by that step times a weight (at most 0.01 x 127 x 0.007). Few may; none by more.
  int stepped = 0;
  for (size_t k = 0; k < want.f.size(); ++k) {
    EXPECT_NEAR(ref.f[k], want.f[k], 1e-5 * (1 + std::fabs(want.f[k]))) << k;
    const float d = std::fabs(got[0].f[k] - want.f[k]);
    stepped += d > 1e-5f * (1 + std::fabs(want.f[k]));
    EXPECT_LT(d, 0.01f * 127 * 0.007f * 2) << k;
  }
  EXPECT_LE(stepped, static_cast<int>(want.f.size()) / 50);
}

// int8-edges: a value only int8 kernels read, all with one input scale and zero point, is
// quantized once by a QuantizeU8 that fuses into its producer's epilogue, and its readers take
// uint8 (dtype=uint8 workloads). Here: a Relu after an int8 conv (one reader), a conv's output
// that two int8 convs read through one DequantizeLinear, a Relu between two int8 MatMuls, a
// Sigmoid of a model input (a generic kernel that writes uint8); a value that is also a model
// output stays float32. The results are the same bit for bit,
// reference and compiled, with the pass and without it, and no kernel is added.
TEST(OnnxImport, Int8KernelsPassUint8BetweenThem) {
  ModelBuilder b(13);
  b.input("x", {1, 16, 9, 9});
  b.input("x2", {5, 24});
  auto qdq = [&](const std::string& in, const std::string& out, float scale, int32_t zero, bool u8) {
    b.floats_shaped(out + "_s", {}, {scale});
    b.bytes(out + "_z", {}, {zero}, u8 ? onnx::TensorProto::UINT8 : onnx::TensorProto::INT8);
    b.node("QuantizeLinear", {in, out + "_s", out + "_z"}, {out + "_q"});
    b.node("DequantizeLinear", {out + "_q", out + "_s", out + "_z"}, {out});
  };
  int seed = 0;
  auto weights = [&](const std::string& name, const std::vector<int64_t>& shape, int64_t axis) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int32_t> w(static_cast<size_t>(n));
    for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<int32_t>((k * 29 + static_cast<size_t>(seed) * 7) % 255) - 127;
    b.bytes(name, shape, w);
    std::vector<float> s(static_cast<size_t>(shape[static_cast<size_t>(axis)]));
    for (size_t k = 0; k < s.size(); ++k) s[k] = 0.002f + 0.0005f * static_cast<float>((k * 5 + static_cast<size_t>(seed)) % 7);
    b.floats(name + "_s", s);
    set_int(b.node("DequantizeLinear", {name, name + "_s"}, {name + "_d"}), "axis", axis);
    ++seed;
  };
  auto conv = [&](const std::string& in, const std::string& out, int64_t R, int64_t stride) {
    weights(out + "_w", {16, 16, R, R}, 0);
    auto* n = b.node("Conv", {in, out + "_w_d"}, {out});
    const int64_t p = R / 2;
    set_ints(n, "pads", {p, p, p, p});
    set_ints(n, "strides", {stride, stride});
  };
  qdq("x", "xd", 0.02f, 128, true);
  conv("xd", "ca", 3, 1);
  b.node("Relu", {"ca"}, {"r1"});
  qdq("r1", "r1d", 0.05f, 0, true);
  conv("r1d", "cb", 1, 1);
  qdq("cb", "cbd", 0.1f, -3, false);  // int8 activations: uint8 ones with 128 added
  conv("cbd", "y", 3, 2);
  conv("cbd", "y3", 1, 1);
  qdq("y", "yd", 0.1f, 10, true);  // y is a model output too: it stays float32
  conv("yd", "y4", 1, 1);
  qdq("x2", "x2d", 0.03f, 100, true);
  weights("m1", {24, 32}, 1);
  b.node("MatMul", {"x2d", "m1_d"}, {"mm1"});
  b.node("Relu", {"mm1"}, {"r2"});
  qdq("r2", "r2d", 0.04f, 0, true);
  weights("m2", {32, 8}, 1);
  b.node("MatMul", {"r2d", "m2_d"}, {"y2"});
  // A producer that is no product: the Sigmoid and the QuantizeU8 make one generic kernel.
  b.input("x3", {3, 24});
  b.node("Sigmoid", {"x3"}, {"sg"});
  qdq("sg", "sgd", 1.0f / 255.0f, 0, true);
  weights("m3", {24, 8}, 1);
  b.node("MatMul", {"sgd", "m3_d"}, {"y5"});
  for (const char* y : {"y", "y2", "y3", "y4", "y5"}) b.output(y);
  const Graph qdq_graph = b.import();
  const tf::Target host = tf::host_target();
  auto passes = [&](std::set<std::string> disabled) {
    Graph g = qdq_graph;
    run_passes(g, PassOptions{2, std::move(disabled), {}, nullptr, channel_block(host)});
    return g;
  };
  const Graph g = passes({}), plain = passes({"int8-edges"});
  int quantize = 0, u8_readers = 0, int8 = 0;
  for (const Node& n : g.nodes) {
    quantize += n.op == "QuantizeU8";
    if (n.op != "QMatMul" && n.op != "QConvNCHWc") continue;
    ++int8;
    if (g.value(n.inputs[0]).dtype != DType::U8) continue;
    ++u8_readers;
    EXPECT_NE(anchor_workload(g, n).spec.find(",dtype=uint8,weight_dtype=int8"), std::string::npos) << n.name;
  }
  EXPECT_EQ(int8, 8);
  EXPECT_EQ(quantize, 4);  // r1, cb (two readers), r2, sg
  EXPECT_EQ(u8_readers, 5);
  for (const Node& n : plain.nodes) EXPECT_NE(n.op, "QuantizeU8");
  HostTensor x = HostTensor::floats({1, 16, 9, 9}, std::vector<float>(16 * 81)), x2 = HostTensor::floats({5, 24}, std::vector<float>(120));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(0.37f * static_cast<float>(k)) * 2.0f;
  for (size_t k = 0; k < x2.f.size(); ++k) x2.f[k] = std::cos(0.41f * static_cast<float>(k)) * 3.0f;
  HostTensor x3 = HostTensor::floats({3, 24}, std::vector<float>(72));
  for (size_t k = 0; k < x3.f.size(); ++k) x3.f[k] = std::sin(0.9f * static_cast<float>(k)) * 4.0f;
  const std::map<std::string, HostTensor> feeds = {{"x", x}, {"x2", x2}, {"x3", x3}};
  auto want = run_reference(plain, feeds), ref = run_reference(g, feeds);
  int generic = 0, generic_plain = 0;
  std::vector<HostTensor> got = compile_and_run(g, {&x, &x2, &x3}, "generic", generic);
  std::vector<HostTensor> got_plain = compile_and_run(plain, {&x, &x2, &x3}, "generic", generic_plain);
  EXPECT_EQ(generic, generic_plain);
  ASSERT_EQ(got.size(), 5u);
  ASSERT_EQ(got_plain.size(), 5u);
  const char* names[] = {"y", "y2", "y3", "y4", "y5"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ref.at(names[i]).f, want.at(names[i]).f) << names[i];
    EXPECT_EQ(got[i].f, got_plain[i].f) << names[i];
    EXPECT_GT(*std::max_element(got[i].f.begin(), got[i].f.end()), 0.0f) << names[i];
  }
}

// QMatMul is an operator of the graph (a model may name it, but cannot give it int8 weights:
// only QuantizeLinear and DequantizeLinear read int8 tensors): its operands are checked.
TEST(OnnxImport, QMatMulRefusalsNameWhatIsAtFault) {
  ModelBuilder b(13);
  b.input("x", {2, 4});
  b.bytes("w", {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  b.floats("ws", {0.1f});
  b.floats("xs", {0.5f});
  b.floats("xz", {3});
  b.node("QMatMul", {"x", "w", "ws", "xs", "xz"}, {"y"}, "qm");
  b.output("y");
  auto error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const tf::UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error([&] { b.import(); }).find("node 'qm' (QMatMul) reads 'w' of int8"), std::string::npos);
  // Float weights from a file: refused by the operator.
  ModelBuilder f(13);
  f.input("x", {2, 4});
  f.floats_shaped("w", {4, 3}, std::vector<float>(12, 1.0f));
  f.floats("ws", {0.1f});
  f.floats("xs", {0.5f});
  f.floats("xz", {3});
  f.node("QMatMul", {"x", "w", "ws", "xs", "xz"}, {"y"}, "qm");
  f.output("y");
  EXPECT_NE(error([&] { f.import(); }).find("node 'qm' (QMatMul): weight must be int8 values of shape [4, N], not [4, 3]"),
            std::string::npos);
  // The other operands, on a graph whose weights are int8 (as fold-qdq makes it).
  Graph g;
  g.values["x"] = Value{"x", DType::F32, {2, 4}, std::nullopt};
  g.inputs = {"x"};
  HostTensor w = HostTensor::floats({4, 3}, std::vector<float>(12, -5.0f));
  w.narrow = Narrow::Int8;
  g.add_constant("w", w);
  Node n{"qm", "QMatMul", {"x", "w", "ws", "xs", "xz"}, {"y"}, {}};
  auto with = [&](std::vector<float> ws, float xs, float xz) {
    g.values.erase("ws");
    g.values.erase("xs");
    g.values.erase("xz");
    g.add_constant("ws", HostTensor::floats({static_cast<int64_t>(ws.size())}, ws));
    g.add_constant("xs", HostTensor::floats({1}, {xs}));
    g.add_constant("xz", HostTensor::floats({1}, {xz}));
    return error([&] { infer_node(n, g, 13); });
  };
  EXPECT_EQ(with({0.1f}, 0.5f, 3), "no error");
  EXPECT_EQ(with({0.1f}, 0.0f, 3), "node 'qm' (QMatMul): input scale 0 is not a positive finite number");
  EXPECT_EQ(with({0.1f}, 0.5f, 300), "node 'qm' (QMatMul): input zero point 300 is not an integer in [0, 255]");
  EXPECT_EQ(with({0.1f}, 0.5f, 2.5f), "node 'qm' (QMatMul): input zero point 2.5 is not an integer in [0, 255]");
  EXPECT_EQ(with({0.1f, 0.2f}, 0.5f, 3), "node 'qm' (QMatMul): weight scale has 2 values for 3 columns");
  EXPECT_EQ(with({NAN}, 0.5f, 3), "node 'qm' (QMatMul): weight scale nan is not a positive finite number");
  // QConvNCHWc: the blocks and the window.
  Graph c;
  auto conv = [&](const Shape& x, int64_t oc_block, std::vector<int64_t> pads) {
    c = Graph{};
    c.values["x"] = Value{"x", DType::F32, x, std::nullopt};
    c.inputs = {"x"};
    HostTensor cw = HostTensor::floats({16, x[1] * x[4], 3, 3}, std::vector<float>(static_cast<size_t>(16 * x[1] * x[4] * 9), 1.0f));
    cw.narrow = Narrow::Int8;
    c.add_constant("w", cw);
    c.add_constant("ws", HostTensor::floats({1}, {0.1f}));
    c.add_constant("xs", HostTensor::floats({1}, {0.5f}));
    c.add_constant("xz", HostTensor::floats({1}, {3}));
    Node q{"qc", "QConvNCHWc", {"x", "w", "ws", "xs", "xz"}, {"y"}, {{"oc_block", oc_block}, {"pads", pads}}};
    return error([&] { infer_node(q, c, 13); });
  };
  EXPECT_EQ(conv({1, 2, 5, 5, 8}, 16, {1, 1, 1, 1}), "no error");
  EXPECT_EQ(conv({1, 2, 5, 5, 8}, 5, {1, 1, 1, 1}), "node 'qc' (QConvNCHWc): oc_block 5 does not divide the 16 filters");
  EXPECT_EQ(conv({1, 2, 5, 5, 6}, 16, {1, 1, 1, 1}),
            "node 'qc' (QConvNCHWc): input block 6 is not a multiple of 4 (the kernel reads quads of channels)");
  EXPECT_EQ(conv({1, 2, 5, 5, 8}, 16, {1, 0, 1, 0}), "node 'qc' (QConvNCHWc): pads [1, 0, 1, 0] differ");
  // QDepthwiseNCHWc: one weight channel per channel.
  conv({1, 2, 5, 5, 8}, 16, {1, 1, 1, 1});
  Node d{"qd", "QDepthwiseNCHWc", {"x", "w", "ws", "xs", "xz"}, {"y"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}};
  EXPECT_EQ(error([&] { infer_node(d, c, 13); }),
            "node 'qd' (QDepthwiseNCHWc): weight must be int8 values of shape [16, 1, R, S], not [16, 16, 3, 3]");
  // QuantizeU8 (int8-edges makes it; a model may name it too): its parameters and input.
  Graph u;
  u.values["x"] = Value{"x", DType::F32, {2, 4}, std::nullopt};
  u.values["i"] = Value{"i", DType::I64, {2, 4}, std::nullopt};
  u.inputs = {"x", "i"};
  auto quantize = [&](const std::string& in, float scale, int64_t zero) {
    Node q{"q8", "QuantizeU8", {in}, {"y"}, {{"scale", scale}, {"zero_point", zero}}};
    return error([&] { infer_node(q, u, 13); });
  };
  EXPECT_EQ(quantize("x", 0.5f, 3), "no error");
  EXPECT_EQ(quantize("x", 0.0f, 3), "node 'q8' (QuantizeU8): scale 0 is not a positive finite number");
  EXPECT_EQ(quantize("x", INFINITY, 3), "node 'q8' (QuantizeU8): scale inf is not a positive finite number");
  EXPECT_EQ(quantize("x", 0.5f, 256), "node 'q8' (QuantizeU8): zero_point 256 is not in [0, 255]");
  EXPECT_EQ(quantize("i", 0.5f, 3), "node 'q8' (QuantizeU8): input must be float32, not int64");
  // A model may name QuantizeU8, but its uint8 result is no model output (the ABI has no
  // uint8) and no other operator's input.
  for (const std::string reader : {"", "Cast", "Identity"}) {
    ModelBuilder m(13);
    m.input("x", {4});
    auto* q = m.node("QuantizeU8", {"x"}, {"q"});
    set_float(q, "scale", 0.1f);
    set_int(q, "zero_point", 3);
    if (!reader.empty()) {
      auto* r = m.node(reader, {"q"}, {"y"}, "r");
      if (reader == "Cast") set_int(r, "to", onnx::TensorProto::FLOAT);
    }
    m.output(reader.empty() ? "q" : "y");
    EXPECT_NE(m.error().find(reader.empty() ? "graph output 'q' is uint8; model outputs must be float32, int64 or bool"
                                            : "node 'r' (" + reader + "): input 0 ('q') is uint8, which only the int8 "
                                              "products (QMatMul, QConvNCHWc, QDepthwiseNCHWc) read, as their data"),
              std::string::npos)
        << reader << ": " << m.error();
  }
  // QMatMul reads float32 or uint8.
  g.values["xi"] = Value{"xi", DType::I64, {2, 4}, std::nullopt};
  Node ni{"qm", "QMatMul", {"xi", "w", "ws", "xs", "xz"}, {"y"}, {}};
  EXPECT_EQ(error([&] { infer_node(ni, g, 13); }), "node 'qm' (QMatMul): input must be float32 or uint8 of rank 2 or more, not int64 [2, 4]");
}

// Operators imported as others (a 1-D Conv as a 2-D one) refuse a node without an output.
TEST(OnnxImport, ExpandedNodesWithoutOutputsAreRefused) {
  ModelBuilder b(13);
  b.input("x", {1, 2, 8});
  b.floats_shaped("w", {3, 2, 3}, std::vector<float>(18, 0.5f));
  b.node("Conv", {"x", "w"}, {"y"}, "conv1d")->clear_output();
  b.node("Relu", {"x"}, {"r"});
  b.output("r");
  EXPECT_NE(b.error().find("node 'conv1d' (Conv) has no output"), std::string::npos) << b.error();
}

TEST(OnnxImport, QuantizeRefusalsNameWhatIsAtFault) {
  // QuantizeLinear(x [1, 3, 2], scale, zero point) edited by `edit`.
  auto model = [](const std::function<void(ModelBuilder&, onnx::NodeProto*)>& edit) {
    ModelBuilder b(13);
    b.input("x", {1, 3, 2});
    b.floats_shaped("s", {}, {0.5f});
    b.bytes("z", {}, {10}, onnx::TensorProto::UINT8);
    auto* n = b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, "quant");
    b.output("q");
    edit(b, n);
    return b.error();
  };
  auto expect = [](const std::string& got, const std::string& want) {
    EXPECT_NE(got.find(want), std::string::npos) << "got: " << got;
  };
  EXPECT_EQ(model([](ModelBuilder&, onnx::NodeProto*) {}), "");
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    expect(model([&](ModelBuilder& b, onnx::NodeProto* n) {
             b.floats_shaped("bad", {}, {bad});
             n->set_input(1, "bad");
           }),
           "node 'quant' (QuantizeLinear): scale " + tf::str(bad) + " at index 0 is not a positive finite number");
  }
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { n->set_input(1, "x"); }), "scale 'x' is not a constant");
  // (Found by fuzz_onnx: a node without outputs.)
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { n->clear_output(); }),
         "node 'quant' (QuantizeLinear): has no output");
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { n->set_output(0, ""); }),
         "node 'quant' (QuantizeLinear): has no output");
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.floats_shaped("zf", {}, {1.0f});
           n->set_input(2, "zf");
         }),
         "zero point is float32; it must be int8 or uint8");
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.floats("s3", {0.5f, 0.25f, 1.0f});
           n->set_input(1, "s3");
         }),
         "zero point has shape [], scale [3]; they must match");
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.floats("s4", {0.5f, 0.25f, 1.0f, 2.0f});
           b.bytes("z4", {4}, {0, 0, 0, 0}, onnx::TensorProto::UINT8);
           n->set_input(1, "s4");
           n->set_input(2, "z4");
         }),
         "per-channel scale has 4 values for axis 1 of extent 3 (input [1, 3, 2])");
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.floats("s3", {0.5f, 0.25f, 1.0f});
           b.bytes("z3", {3}, {0, 0, 0}, onnx::TensorProto::UINT8);
           n->set_input(1, "s3");
           n->set_input(2, "z3");
           set_int(n, "axis", 5);
         }),
         "axis 5 is out of range for input of rank 3");
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "block_size", 2); }),
         "block_size 2 (blocked quantization) is not supported");
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "output_dtype", 21); }),
         "output_dtype 21 is not supported (2: uint8, 3: int8)");
  expect(model([](ModelBuilder&, onnx::NodeProto* n) { set_int(n, "output_dtype", 3); }),
         "output_dtype 3 differs from the zero point's type");
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.bytes("big", {}, {300}, onnx::TensorProto::UINT8, false);
           n->set_input(2, "big");
         }),
         "initializer 'big': value 300 is out of the range of uint8");
  // int8 data feeds only the quantization operators (an Add would compute on it as floats).
  {
    ModelBuilder b(13);
    b.input("x", {2});
    b.bytes("k", {2}, {3, 4}, onnx::TensorProto::UINT8);
    b.node("Add", {"x", "k"}, {"y"}, "add");
    b.output("y");
    expect(b.error(), "node 'add' (Add) reads 'k' of uint8; int8 and uint8 tensors are not supported but as "
                      "operands of the quantization operators");
  }
  expect(model([](ModelBuilder& b, onnx::NodeProto* n) {
           b.bytes("short", {4}, {1, 2});
           n->set_input(2, "short");
         }),
         "initializer 'short': raw data has 2 bytes for 4 elements");
}

TEST(OpRegistry, EveryOperatorIsComplete) {
  int anchors = 0, expanded = 0;
  for (const std::string& op : supported_ops()) {
    const OpDef* d = find_op(op);
    ASSERT_NE(d, nullptr) << op;
    ASSERT_TRUE(d->pattern.has_value()) << op << " has no fusion pattern (describe() in its graph/ops_*.cc entry)";
    EXPECT_EQ(*d->pattern == OpKind::Anchor, d->workload != nullptr) << op;
    EXPECT_EQ(op_kind(op), *d->pattern) << op;
    EXPECT_TRUE(d->infer || d->expand) << op << " has neither an inference nor an expansion";
    for (const std::string& a : d->attributes) EXPECT_FALSE(a.empty()) << op;
    anchors += *d->pattern == OpKind::Anchor;
    expanded += d->expand != nullptr;
  }
  // MatMul, Gemm, Conv, ConvNCHWc, QMatMul, QConvNCHWc, QDepthwiseNCHWc, MatMulBF16,
  // ConvNCHWcBF16, MatMulFP16, ConvNCHWcFP16, MatMulTensorCore, ConvTensorCore
  EXPECT_EQ(anchors, 13);
  EXPECT_GE(expanded, 7);  // RNN, GRU, LSTM; Conv, ConvTranspose, MaxPool, AveragePool
  // The facts that used to live in lists beside the registry, spot-checked.
  EXPECT_EQ(op_kind("Transpose"), OpKind::Injective);
  EXPECT_EQ(op_kind("Softmax"), OpKind::Reduction);
  EXPECT_EQ(op_kind("TopK"), OpKind::Opaque);
  EXPECT_EQ(op_kind("Relu"), OpKind::Elementwise);
  EXPECT_TRUE(find_op("Gather")->int64_exact);
  EXPECT_FALSE(find_op("Exp")->int64_exact);
  EXPECT_EQ(find_op("Gemm")->transposed_weight, std::string("transB"));
  EXPECT_EQ(find_op("ConvNCHWc")->bias_axis, OpDef::BiasAxis::BlockedChannel);
}

// An operator the importer expands (an LSTM) goes through its entry's checks first: an
// attribute it does not take is refused naming it, as for any other operator.
TEST(OpRegistry, ExpandedOperatorsAreCheckedByTheirEntry) {
  Node n{"lstm", "LSTM", {"x", "w", "r"}, {"y"}, {}};
  n.attrs["bogus"] = int64_t{1};
  try {
    check_node(n);
    FAIL() << "an unknown attribute of LSTM was accepted";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("attribute 'bogus' is not supported (LSTM takes"), std::string::npos) << e.what();
  }
  Node two{"lstm", "LSTM", {"x", "w"}, {"y"}, {}};
  try {
    check_node(two);
    FAIL() << "an LSTM of 2 inputs was accepted";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("takes from 3 to 8 inputs, not 2"), std::string::npos) << e.what();
  }
}

// If, Loop and Scan are written out at import (graph/import_control_flow.h): an If on a test
// of the input's shape (its condition folds) takes its branch, whose initializer and reads of
// the graph's values resolve; a Loop of a constant trip count carries its value through three
// iterations with an If inside whose condition folds per iteration (Relu in the first, Neg
// after), its scan output stacked; a while Loop stops when its condition folds false; a Scan
// runs its input in reverse, its scan output stacked along axis 1. Checked against the
// definitions written out here (reference evaluation) and compiled against the reference;
// TF_OPSET_MODELS_DIR=dir saves dir/control_flow.onnx for graph_ort (ONNX Runtime runs the
// If, Loops and Scan as they are).
namespace {
onnx::GraphProto* graph_attribute(onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* g = a->mutable_g();
  g->set_name(n->name() + "_" + name);
  return g;
}
void typed(onnx::ValueInfoProto* vi, const std::string& name, int32_t type, std::vector<int64_t> dims = {},
           bool ranked = true) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  if (!ranked) return;
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}
onnx::NodeProto* sub_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out[0]);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}
void scalar_initializer(onnx::GraphProto* g, const std::string& name, int32_t type, int64_t v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  if (type == onnx::TensorProto::FLOAT) {
    t->add_float_data(static_cast<float>(v) / 2);  // halves: 0.5 for 1
  } else if (type == onnx::TensorProto::BOOL) {
    t->add_int32_data(static_cast<int32_t>(v));
  } else {
    t->add_int64_data(v);
  }
}
constexpr int32_t kF32 = onnx::TensorProto::FLOAT, kI64 = onnx::TensorProto::INT64, kBool = onnx::TensorProto::BOOL;
// A model of input x [2] and output y (opset 17; constants "yes", a true bool, and "five", an
// int64 5) that `build` completes, whose import must fail with a message holding `want`.
void expect_refused(const std::function<void(ModelBuilder&)>& build, const std::string& want) {
  ModelBuilder m(17);
  m.input("x", {2});
  scalar_initializer(m.g, "yes", kBool, 1);
  scalar_initializer(m.g, "five", kI64, 5);
  build(m);
  m.output("y");
  const std::string e = m.error();
  EXPECT_NE(e.find(want), std::string::npos) << "want: " << want << "\ngot: " << e;
}
}  // namespace

TEST(OnnxImport, ControlFlowIsWrittenOut) {
  const std::vector<float> xs = {-1.5f, 2.0f, -0.25f, 3.0f, -4.0f, 0.75f};
  const float ks[3] = {1.5f, -2.0f, 0.5f};
  ModelBuilder b(17);
  b.input("x", {2, 3});
  b.ints("zero", {0});
  b.ints("two", {2});
  scalar_initializer(b.g, "three", kI64, 3);
  scalar_initializer(b.g, "yes", kBool, 1);
  scalar_initializer(b.g, "one_i", kI64, 1);
  scalar_initializer(b.g, "two_i", kI64, 2);
  scalar_initializer(b.g, "half", kF32, 1);
  b.floats_shaped("s0", {3}, {0.0f, 0.0f, 0.0f});
  b.node("Shape", {"x"}, {"shape"});
  b.node("Gather", {"shape", "zero"}, {"rows"});
  b.node("Equal", {"rows", "two"}, {"two_rows"});
  auto* if_node = b.node("If", {"two_rows"}, {"a"}, "choose");
  onnx::GraphProto* then_g = graph_attribute(if_node, "then_branch");
  auto* k = then_g->add_initializer();
  k->set_name("k");
  k->set_data_type(kF32);
  k->add_dims(3);
  for (float v : ks) k->add_float_data(v);
  sub_node(then_g, "Mul", {"x", "k"}, {"scaled"});
  typed(then_g->add_output(), "scaled", kF32, {2, 3});
  onnx::GraphProto* else_g = graph_attribute(if_node, "else_branch");
  sub_node(else_g, "Neg", {"x"}, {"negated"});
  typed(else_g->add_output(), "negated", kF32, {2, 3});
  // for i in 0..2: v2 = v + i; r = i < 1 ? Relu(v2) : -v2; scan r * 0.5; v = r.
  auto* loop = b.node("Loop", {"three", "yes", "a"}, {"final", "trace"}, "for_loop");
  onnx::GraphProto* body = graph_attribute(loop, "body");
  typed(body->add_input(), "i", kI64);
  typed(body->add_input(), "c", kBool);
  typed(body->add_input(), "v", kF32, {2, 3});
  set_int(sub_node(body, "Cast", {"i"}, {"fi"}), "to", kF32);
  sub_node(body, "Add", {"v", "fi"}, {"v2"});
  sub_node(body, "Less", {"i", "one_i"}, {"first"});
  auto* inner = sub_node(body, "If", {"first"}, {"r"});
  onnx::GraphProto* relu_g = graph_attribute(inner, "then_branch");
  sub_node(relu_g, "Relu", {"v2"}, {"relu"});
  typed(relu_g->add_output(), "relu", kF32, {2, 3});
  onnx::GraphProto* neg_g = graph_attribute(inner, "else_branch");
  sub_node(neg_g, "Neg", {"v2"}, {"neg"});
  typed(neg_g->add_output(), "neg", kF32, {2, 3});
  sub_node(body, "Mul", {"r", "half"}, {"w"});
  sub_node(body, "Identity", {"c"}, {"c2"});
  typed(body->add_output(), "c2", kBool);
  typed(body->add_output(), "r", kF32, {2, 3});
  typed(body->add_output(), "w", kF32, {2, 3});
  // while (j < 2 after the step): u doubled three times.
  auto* while_loop = b.node("Loop", {"", "yes", "final"}, {"doubled"}, "while_loop");
  onnx::GraphProto* wbody = graph_attribute(while_loop, "body");
  typed(wbody->add_input(), "j", kI64);
  typed(wbody->add_input(), "c", kBool);
  typed(wbody->add_input(), "u", kF32, {2, 3});
  sub_node(wbody, "Add", {"u", "u"}, {"u2"});
  sub_node(wbody, "Less", {"j", "two_i"}, {"more"});
  typed(wbody->add_output(), "more", kBool);
  typed(wbody->add_output(), "u2", kF32, {2, 3});
  // Scan over x's rows in reverse: s += row; out = s * row, stacked along axis 1.
  auto* scan = b.node("Scan", {"s0", "x"}, {"sum", "prods"}, "scan");
  set_int(scan, "num_scan_inputs", 1);
  set_ints(scan, "scan_input_directions", {1});
  set_ints(scan, "scan_output_axes", {1});
  onnx::GraphProto* sbody = graph_attribute(scan, "body");
  typed(sbody->add_input(), "s", kF32, {3});
  typed(sbody->add_input(), "row", kF32, {3});
  sub_node(sbody, "Add", {"s", "row"}, {"s2"});
  sub_node(sbody, "Mul", {"s2", "row"}, {"o"});
  typed(sbody->add_output(), "s2", kF32, {3});
  typed(sbody->add_output(), "o", kF32, {3});
  const char* outs[] = {"a", "final", "trace", "doubled", "sum", "prods"};
  for (const char* o : outs) b.output(o);
  Graph g = b.import();
  for (const Node& n : g.nodes) EXPECT_TRUE(n.op != "If" && n.op != "Loop" && n.op != "Scan") << n.where();
  // The If, the inner If once an iteration, two Loops (3 + 3 iterations) and the Scan (2 steps).
  EXPECT_EQ(g.written_out.ifs, 4);
  EXPECT_EQ(g.written_out.loops, 2);
  EXPECT_EQ(g.written_out.scans, 1);
  EXPECT_EQ(g.written_out.iterations, 8);
  EXPECT_EQ(g.written_out.sequence_ops, 0);
  EXPECT_EQ(g.value("trace").shape, (Shape{3, 2, 3}));
  EXPECT_EQ(g.value("prods").shape, (Shape{3, 2}));

  // The definitions.
  std::vector<float> a(6), v(6), trace, doubled(6), sum(3, 0.0f), prods(6);
  for (size_t e = 0; e < 6; ++e) a[e] = xs[e] * ks[e % 3];
  v = a;
  for (int i = 0; i < 3; ++i) {
    for (size_t e = 0; e < 6; ++e) {
      const float v2 = v[e] + static_cast<float>(i);
      v[e] = i < 1 ? std::max(v2, 0.0f) : -v2;
      trace.push_back(v[e] * 0.5f);
    }
  }
  for (size_t e = 0; e < 6; ++e) doubled[e] = v[e] * 8.0f;
  for (int t = 0; t < 2; ++t) {
    const int row = 1 - t;
    for (int c = 0; c < 3; ++c) {
      sum[static_cast<size_t>(c)] += xs[static_cast<size_t>(row * 3 + c)];
      prods[static_cast<size_t>(c * 2 + t)] = sum[static_cast<size_t>(c)] * xs[static_cast<size_t>(row * 3 + c)];
    }
  }
  const std::map<std::string, std::vector<float>> defs = {{"a", a},          {"final", v},  {"trace", trace},
                                                          {"doubled", doubled}, {"sum", sum}, {"prods", prods}};
  HostTensor x = HostTensor::floats({2, 3}, xs);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
  for (const auto& [name, def] : defs) {
    ASSERT_EQ(want.at(name).f.size(), def.size()) << name;
    for (size_t e = 0; e < def.size(); ++e) EXPECT_FLOAT_EQ(want.at(name).f[e], def[e]) << name << " " << e;
  }
  expect_compiled_as_reference(g, x, want, {std::begin(outs), std::end(outs)});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/control_flow.onnx");
}

// What cannot be written out is refused by name: conditions known only at run time (an If's, a
// Loop's after some iteration), loops without an end, too many iterations, scan outputs of no
// iteration, bodies that do not fit their node, a condition that is not one bool.
TEST(OnnxImport, ControlFlowRefusals) {
  const auto refused = expect_refused;
  auto branches = [](onnx::NodeProto* n) {
    for (const char* which : {"then_branch", "else_branch"}) {
      onnx::GraphProto* g = graph_attribute(n, which);
      sub_node(g, "Relu", {"x"}, {str(which, "_r")});
      typed(g->add_output(), str(which, "_r"), kF32);
    }
  };
  refused([&](ModelBuilder& m) {  // a run-time condition selects, but only outputs of one shape
    m.node("ReduceSum", {"x"}, {"total"});
    m.floats("zero", {0.0f});
    m.node("Greater", {"total", "zero"}, {"positive"});
    auto* n = m.node("If", {"positive"}, {"y"}, "data_if");
    onnx::GraphProto* then_g = graph_attribute(n, "then_branch");
    sub_node(then_g, "Relu", {"x"}, {"r"});
    typed(then_g->add_output(), "r", kF32);
    onnx::GraphProto* else_g = graph_attribute(n, "else_branch");
    sub_node(else_g, "ReduceSum", {"x"}, {"s"});
    typed(else_g->add_output(), "s", kF32);
  }, "test.onnx: node 'data_if' (If): its condition 'positive' is computed at run time, so both branches are computed "
     "and each output selected, but output 0 is float32[2] in then_branch and float32[1] in else_branch");
  refused([&](ModelBuilder& m) {
    m.ints("n", {1});
    branches(m.node("If", {"n"}, {"y"}, "int_if"));
  }, "node 'int_if' (If): its condition 'n' is int64[1]; it must be one bool");
  refused([&](ModelBuilder& m) {
    m.node("SequenceConstruct", {"x"}, {"s"});
    branches(m.node("If", {"s"}, {"y"}, "seq_if"));
  }, "node 'seq_if' (If): its condition 's' is not a tensor defined before it");
  refused([&](ModelBuilder& m) {
    auto* n = m.node("If", {"yes"}, {"y"}, "one_branch");
    graph_attribute(n, "else_branch");
  }, "node 'one_branch' (If): has no attribute 'then_branch'");
  auto loop_body = [](onnx::NodeProto* n, const std::string& cond_from) {
    onnx::GraphProto* body = graph_attribute(n, "body");
    typed(body->add_input(), "i", kI64);
    typed(body->add_input(), "c", kBool);
    typed(body->add_input(), "v", kF32);
    sub_node(body, "Neg", {"v"}, {"v2"});
    if (cond_from == "data") {
      sub_node(body, "ReduceMax", {"v2"}, {"big"});
      sub_node(body, "Cast", {"big"}, {"c2"});
      set_int(body->mutable_node(body->node_size() - 1), "to", kBool);
    } else {
      sub_node(body, "Identity", {"c"}, {"c2"});
    }
    typed(body->add_output(), "c2", kBool);
    typed(body->add_output(), "v2", kF32);
    typed(body->add_output(), "v2", kF32);  // a scan output too
    return body;
  };
  refused([&](ModelBuilder& m) { loop_body(m.node("Loop", {"", "", "x"}, {"y"}, "forever"), "c"); },
          "node 'forever' (Loop): has neither a trip count M nor a condition: it would run forever");
  refused([&](ModelBuilder& m) { loop_body(m.node("Loop", {"", "yes", "x"}, {"y"}, "data_loop"), "data"); },
          "node 'data_loop' (Loop): iteration 0's condition 'data_loop/iter0/c2' is computed at run time and the trip "
          "count is not given; tunefarm compiles one static graph, so such a loop needs a constant trip count of at "
          "most 4096");
  refused([&](ModelBuilder& m) {  // a run-time condition with a scan output (loop_body has one)
    loop_body(m.node("Loop", {"five", "yes", "x"}, {"last", "y"}, "data_scan"), "data");
  }, "node 'data_scan' (Loop): iteration 0's condition 'data_scan/iter0/c2' is computed at run time, so its 1 scan "
     "outputs would have a length known only at run time");
  refused([&](ModelBuilder& m) {
    scalar_initializer(m.g, "many", kI64, 5000);
    loop_body(m.node("Loop", {"many", "", "x"}, {"y"}, "long_loop"), "c");
  }, "node 'long_loop' (Loop): unrolling Loops and Scans makes more than 4096 iterations in the model");
  refused([&](ModelBuilder& m) {  // nested loops count every inner iteration: 100 x 100 is refused
    scalar_initializer(m.g, "hundred", kI64, 100);
    auto* outer = m.node("Loop", {"hundred", "", "x"}, {"y"}, "outer");
    onnx::GraphProto* body = graph_attribute(outer, "body");
    typed(body->add_input(), "i", kI64);
    typed(body->add_input(), "c", kBool);
    typed(body->add_input(), "v", kF32);
    onnx::GraphProto* inner = graph_attribute(sub_node(body, "Loop", {"hundred", "", "v"}, {"v2"}), "body");
    typed(inner->add_input(), "j", kI64);
    typed(inner->add_input(), "d", kBool);
    typed(inner->add_input(), "u", kF32);
    sub_node(inner, "Neg", {"u"}, {"u2"});
    sub_node(inner, "Identity", {"d"}, {"d2"});
    typed(inner->add_output(), "d2", kBool);
    typed(inner->add_output(), "u2", kF32);
    sub_node(body, "Identity", {"c"}, {"c2"});
    typed(body->add_output(), "c2", kBool);
    typed(body->add_output(), "v2", kF32);
  }, "unrolling Loops and Scans makes more than 4096 iterations in the model");
  refused([&](ModelBuilder& m) {
    scalar_initializer(m.g, "none", kI64, 0);
    loop_body(m.node("Loop", {"none", "", "x"}, {"last", "y"}, "empty_loop"), "c");
  }, "node 'empty_loop' (Loop): runs no iteration, so its scan output 'y' would be empty");
  refused([&](ModelBuilder& m) {
    scalar_initializer(m.g, "one", kI64, 1);
    onnx::GraphProto* body = loop_body(m.node("Loop", {"one", "", "x", "x"}, {"y"}, "misfit"), "c");
    (void)body;
  }, "node 'misfit' (Loop): its body has 3 inputs; with 2 loop-carried values it must have 4");
  refused([&](ModelBuilder& m) {
    auto* scan = m.node("Scan", {"x"}, {"y"}, "scan");
    set_int(scan, "num_scan_inputs", 2);
    graph_attribute(scan, "body");
  }, "node 'scan' (Scan): num_scan_inputs 2 is not between 1 and its 1 inputs");
  refused([&](ModelBuilder& m) {  // a body output nothing computes (found by fuzz_onnx)
    auto* scan = m.node("Scan", {"x", "x"}, {"last", "y"}, "lost");
    set_int(scan, "num_scan_inputs", 1);
    onnx::GraphProto* body = graph_attribute(scan, "body");
    typed(body->add_input(), "s", kF32);
    typed(body->add_input(), "e", kF32);
    sub_node(body, "Add", {"s", "e"}, {"s2"});
    typed(body->add_output(), "s2", kF32);
    typed(body->add_output(), "nowhere", kF32);
  }, "node 'lost' (Scan): its body's output 'nowhere' is never computed");
  refused([&](ModelBuilder& m) {  // a run-time If selects tensors only
    m.node("ReduceSum", {"x"}, {"total"});
    m.floats("zero", {0.0f});
    m.node("Greater", {"total", "zero"}, {"positive"});
    auto* n = m.node("If", {"positive"}, {"s"}, "seq_out");
    for (const char* which : {"then_branch", "else_branch"}) {
      onnx::GraphProto* g = graph_attribute(n, which);
      sub_node(g, "SequenceConstruct", {"x"}, {str(which, "_s")});
      g->add_output()->set_name(str(which, "_s"));
    }
    set_int(m.node("ConcatFromSequence", {"s"}, {"y"}), "axis", 0);
  }, "node 'seq_out' (If): its condition 'positive' is computed at run time and output 0 is a sequence; only tensors "
     "can be selected at run time");
  refused([&](ModelBuilder& m) {  // a run-time Loop condition selects carried values of one shape only
    auto* loop = m.node("Loop", {"five", "yes", "x"}, {"y"}, "growing");
    onnx::GraphProto* body = graph_attribute(loop, "body");
    typed(body->add_input(), "i", kI64);
    typed(body->add_input(), "c", kBool);
    typed(body->add_input(), "v", kF32);
    sub_node(body, "Concat", {"v", "v"}, {"v2"});
    set_int(body->mutable_node(0), "axis", 0);
    sub_node(body, "ReduceMax", {"v2"}, {"big"});
    sub_node(body, "Cast", {"big"}, {"more"});
    set_int(body->mutable_node(2), "to", kBool);
    typed(body->add_output(), "more", kBool);
    typed(body->add_output(), "v2", kF32);
  }, "node 'growing' (Loop): its condition is computed at run time, so each iteration's values are selected by it, "
     "but loop-carried value 0 is float32[8] after an iteration and float32[4] before it");
  refused([&](ModelBuilder& m) {  // an attribute If does not take: not ignored
    auto* n = m.node("If", {"yes"}, {"y"}, "extra");
    branches(n);
    set_int(n, "unroll", 1);
  }, "test.onnx: node 'extra' (If): attribute 'unroll' is not supported (If takes else_branch, then_branch)");
  refused([&](ModelBuilder& m) {  // a graph attribute on another operator
    auto* n = m.node("Relu", {"x"}, {"y"}, "odd");
    graph_attribute(n, "body");
  }, "node 'odd' (Relu): attribute 'body': subgraphs (but If's, Loop's and Scan's)");
}

// Sequences are lists of the graph's values at import: a Loop appends Tanh(v) to a
// loop-carried sequence three times and ConcatFromSequence stacks it (new_axis, as a scripted
// PyTorch list append and torch.stack export); SplitToSequence into pieces of 2 and SequenceAt
// of the last; SequenceConstruct, SequenceInsert at the front, SequenceErase and a
// concatenation; SequenceLength; an If whose branches give sequences. Checked against the
// definitions and compiled; TF_OPSET_MODELS_DIR=dir saves dir/sequences.onnx for graph_ort.
TEST(OnnxImport, SequencesAreListsAtImport) {
  const std::vector<float> xs = {-1.5f, 2.0f, -0.25f, 3.0f, -4.0f, 0.75f};
  ModelBuilder b(17);
  b.input("x", {2, 3});
  scalar_initializer(b.g, "three", kI64, 3);
  scalar_initializer(b.g, "two_i", kI64, 2);
  scalar_initializer(b.g, "one_i", kI64, 1);
  scalar_initializer(b.g, "last", kI64, -1);
  scalar_initializer(b.g, "front", kI64, 0);
  scalar_initializer(b.g, "yes", kBool, 1);
  b.node("SequenceEmpty", {}, {"empty"});
  auto* loop = b.node("Loop", {"three", "", "x", "empty"}, {"v_final", "seq_final"}, "appends");
  onnx::GraphProto* body = graph_attribute(loop, "body");
  typed(body->add_input(), "i", kI64);
  typed(body->add_input(), "c", kBool);
  typed(body->add_input(), "v", kF32, {2, 3});
  auto* seq_in = body->add_input();
  seq_in->set_name("s");
  seq_in->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(kF32);
  sub_node(body, "Tanh", {"v"}, {"t"});
  sub_node(body, "SequenceInsert", {"s", "t"}, {"s2"});
  sub_node(body, "Identity", {"c"}, {"c2"});
  typed(body->add_output(), "c2", kBool);
  typed(body->add_output(), "t", kF32, {2, 3});
  *body->add_output() = *seq_in;
  body->mutable_output(2)->set_name("s2");
  auto* stack = b.node("ConcatFromSequence", {"seq_final"}, {"stacked"});
  set_int(stack, "axis", 1);
  set_int(stack, "new_axis", 1);
  auto* split = b.node("SplitToSequence", {"x", "two_i"}, {"pieces"});
  set_int(split, "axis", 1);
  b.node("SequenceAt", {"pieces", "last"}, {"last_piece"});
  b.node("Mul", {"x", "x"}, {"x2"});
  b.node("SequenceConstruct", {"x", "x2"}, {"pair"});
  b.node("Neg", {"x"}, {"nx"});
  b.node("SequenceInsert", {"pair", "nx", "front"}, {"three_seq"});
  b.node("SequenceErase", {"three_seq", "one_i"}, {"two_seq"});
  set_int(b.node("ConcatFromSequence", {"two_seq"}, {"joined"}), "axis", 0);
  b.node("SequenceLength", {"three_seq"}, {"count"});
  auto* choose = b.node("If", {"yes"}, {"chosen"}, "choose_seq");
  for (const char* which : {"then_branch", "else_branch"}) {
    onnx::GraphProto* g = graph_attribute(choose, which);
    sub_node(g, "SequenceConstruct", {std::string(which) == "then_branch" ? "x2" : "x"}, {"one"});
    auto* o = g->add_output();
    o->set_name("one");
    o->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(kF32);
  }
  set_int(b.node("ConcatFromSequence", {"chosen"}, {"from_if"}), "axis", 0);
  const char* outs[] = {"stacked", "last_piece", "joined", "count", "from_if"};
  for (const char* o : outs) b.output(o);
  Graph g = b.import();
  EXPECT_EQ(g.value("stacked").shape, (Shape{2, 3, 3}));
  EXPECT_EQ(g.value("last_piece").shape, (Shape{2, 1}));
  EXPECT_EQ(g.value("joined").shape, (Shape{4, 3}));
  HostTensor x = HostTensor::floats({2, 3}, xs);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
  // stacked[r][k][c]: tanh applied k + 1 times to x[r][c].
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      float v = xs[static_cast<size_t>(r * 3 + c)];
      for (int k = 0; k < 3; ++k) {
        v = std::tanh(v);
        EXPECT_FLOAT_EQ(want.at("stacked").f[static_cast<size_t>((r * 3 + k) * 3 + c)], v) << r << " " << k << " " << c;
      }
      const float xv = xs[static_cast<size_t>(r * 3 + c)];
      EXPECT_FLOAT_EQ(want.at("joined").f[static_cast<size_t>(r * 3 + c)], -xv);            // Neg, front
      EXPECT_FLOAT_EQ(want.at("joined").f[static_cast<size_t>((2 + r) * 3 + c)], xv * xv);  // x erased
      EXPECT_FLOAT_EQ(want.at("from_if").f[static_cast<size_t>(r * 3 + c)], xv * xv);
    }
  EXPECT_FLOAT_EQ(want.at("last_piece").f[0], xs[2]);
  EXPECT_FLOAT_EQ(want.at("last_piece").f[1], xs[5]);
  EXPECT_EQ(want.at("count").i, (std::vector<int64_t>{3}));
  expect_compiled_as_reference(g, x, want, {std::begin(outs), std::end(outs)});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/sequences.onnx");

  const auto refused = expect_refused;
  refused([](ModelBuilder& m) { m.node("SequenceConstruct", {"x"}, {"y"}); },
          "graph output 'y' is a sequence; sequences are not supported as a model's outputs");
  refused([](ModelBuilder& m) {
    m.node("SequenceConstruct", {"x"}, {"s"});
    m.node("Relu", {"s"}, {"y"}, "relu_of_seq");
  }, "node 'relu_of_seq' (Relu) reads the sequence 's'; sequences are not supported as its inputs (only the sequence operators, If, Loop and "
     "Scan take them)");
  refused([](ModelBuilder& m) {
    m.node("SequenceConstruct", {"x"}, {"s"});
    m.node("SequenceAt", {"s", "five"}, {"y"}, "far");
  }, "node 'far' (SequenceAt): its position 5 is out of range for a sequence of 1 tensors");
  refused([](ModelBuilder& m) {
    m.node("SequenceEmpty", {}, {"s"});
    set_int(m.node("ConcatFromSequence", {"s"}, {"y"}, "nothing"), "axis", 0);
  }, "node 'nothing' (ConcatFromSequence): concatenates the empty sequence 's'");
  refused([](ModelBuilder& m) { m.node("SequenceAt", {"x", "five"}, {"y"}, "not_seq"); },
          "node 'not_seq' (SequenceAt): input 0 'x' is a tensor; it must be a sequence");
  refused([](ModelBuilder& m) {
    m.node("SequenceEmpty", {}, {"s"});
    m.node("SequenceErase", {"s"}, {"y"}, "erase_empty");
  }, "node 'erase_empty' (SequenceErase): erases from the empty sequence 's'");
  refused([](ModelBuilder& m) {  // inserting at the front copies the list: 2,000 of them are bounded
    scalar_initializer(m.g, "many", kI64, 2000);
    scalar_initializer(m.g, "front", kI64, 0);
    m.node("SequenceEmpty", {}, {"empty"});
    auto* loop = m.node("Loop", {"many", "", "empty"}, {"filled"}, "fronts");
    onnx::GraphProto* body = graph_attribute(loop, "body");
    typed(body->add_input(), "i", kI64);
    typed(body->add_input(), "c", kBool);
    auto* s = body->add_input();
    s->set_name("s");
    s->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(kF32);
    sub_node(body, "SequenceInsert", {"s", "x", "front"}, {"s2"});
    sub_node(body, "Identity", {"c"}, {"c2"});
    typed(body->add_output(), "c2", kBool);
    *body->add_output() = *s;
    body->mutable_output(1)->set_name("s2");
    set_int(m.node("ConcatFromSequence", {"filled"}, {"y"}), "axis", 0);
  }, "the sequence operators copy more than 1000000 entries in the model");
}

// An If whose condition is known only at run time (a scripted `if x.sum() > 0`): both branches
// are computed and the output selected by the condition (Where), so the library gives each
// input its branch's result: then (x * 2) for a positive sum, else (-x) otherwise; compiled
// against the reference for both. TF_OPSET_MODELS_DIR=dir saves dir/runtime_if.onnx for graph_ort.
TEST(OnnxImport, IfOnARunTimeConditionSelectsItsBranch) {
  ModelBuilder b(17);
  b.input("x", {3});
  b.floats("zero", {0.0f});
  b.floats("two", {2.0f});
  b.node("ReduceSum", {"x"}, {"total"});
  set_int(b.g->mutable_node(0), "keepdims", 0);
  b.node("Greater", {"total", "zero"}, {"positive"});
  auto* n = b.node("If", {"positive"}, {"y"}, "data_if");
  onnx::GraphProto* then_g = graph_attribute(n, "then_branch");
  sub_node(then_g, "Mul", {"x", "two"}, {"doubled"});
  typed(then_g->add_output(), "doubled", kF32, {3});
  onnx::GraphProto* else_g = graph_attribute(n, "else_branch");
  sub_node(else_g, "Neg", {"x"}, {"negated"});
  typed(else_g->add_output(), "negated", kF32, {3});
  b.output("y");
  Graph g = b.import();
  EXPECT_EQ(g.written_out.ifs, 1);
  EXPECT_EQ(g.written_out.ifs_selected, 1);
  for (const std::vector<float>& xs : {std::vector<float>{1.0f, 2.0f, -0.5f}, std::vector<float>{-1.0f, 0.25f, 0.5f}}) {
    HostTensor x = HostTensor::floats({3}, xs);
    std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
    const bool positive = xs[0] + xs[1] + xs[2] > 0;
    for (size_t k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(want.at("y").f[k], positive ? xs[k] * 2 : -xs[k]) << k;
    expect_compiled_as_reference(g, x, want, {"y"});
  }
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/runtime_if.onnx");
}

// EyeLike folds at import (its shape is its input's): ones on the diagonal shifted by k, of the
// input's type or its dtype attribute; refusals name the rank and the type.
TEST(OnnxImport, EyeLikeFoldsToItsDiagonal) {
  ModelBuilder b(17);
  b.input("x", {3, 4});
  set_int(b.node("EyeLike", {"x"}, {"eye"}), "k", 1);
  b.node("Mul", {"x", "eye"}, {"y"});
  auto* below = b.node("EyeLike", {"x"}, {"below"});
  set_int(below, "k", -2);
  set_int(below, "dtype", 7);
  auto* none = b.node("EyeLike", {"x"}, {"none"});
  set_int(none, "k", int64_t{1} << 62);
  set_int(none, "dtype", 9);
  b.output("y");
  b.output("below");
  b.output("none");
  Graph g = b.import();
  EXPECT_TRUE(g.value("below").constant.has_value());
  EXPECT_EQ(g.value("below").dtype, DType::I64);
  EXPECT_EQ(g.value("none").dtype, DType::Bool);
  std::vector<float> xs(12);
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = static_cast<float>(k) + 1.0f;
  HostTensor x = HostTensor::floats({3, 4}, xs);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const size_t at = static_cast<size_t>(r * 4 + c);
      EXPECT_EQ(want.at("y").f[at], c == r + 1 ? xs[at] : 0.0f) << r << " " << c;
      EXPECT_EQ(want.at("below").i[at], c == r - 2 ? 1 : 0) << r << " " << c;
      EXPECT_EQ(want.at("none").i[at], 0);
    }
  }
  expect_compiled_as_reference(g, x, want, {"y", "below", "none"});
  auto refused = [](int64_t rank, int64_t dtype, const std::string& why) {
    ModelBuilder m(17);
    m.input("x", rank == 2 ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{2, 2, 2});
    auto* n = m.node("EyeLike", {"x"}, {"y"}, "eye");
    if (dtype) set_int(n, "dtype", dtype);
    m.output("y");
    EXPECT_NE(m.error().find(why), std::string::npos) << m.error();
  };
  refused(3, 0, "node 'eye' (EyeLike): input must be rank 2, not [2, 2, 2]");
  refused(2, 11, "node 'eye' (EyeLike): dtype 11 is not supported");
}

// What the conversion of older opsets refuses, by name: a model the converter cannot take,
// opset 8's Scan (another operator than opset 9's), and int32 results of MatMulInteger as a
// model's output (float32 values inside).
TEST(OnnxImport, OlderOpsetRefusals) {
  auto expect = [](const ModelBuilder& b, const std::string& want) {
    std::string e = b.error();
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  {
    ModelBuilder b(9);
    b.input("x", {2, 3});
    b.node("NoSuchOp", {"x"}, {"y"}, "odd");
    b.output("y");
    expect(b, "test.onnx: node 'odd' (NoSuchOp): operator NoSuchOp is not supported: ONNX has no such operator at opset 9");
  }
  {
    ModelBuilder b(10);
    b.input("x", {2, 3});
    b.node("Relu", {"undefined_value"}, {"y"});
    b.output("y");
    expect(b, "test.onnx: this model of opset 10 is not supported: ONNX's version converter could not raise it to "
              "opset 11 (Input undefined_value is undefined!); re-export with opset_version 11 to 25");
  }
  {
    ModelBuilder b(8);
    b.input("x", {2, 3});
    b.node("Relu", {"x", "x"}, {"y"});
    b.output("y");
    expect(b, "test.onnx: node 'Relu_y' (Relu): not ONNX's Relu of opset 8: Node (Relu_y) has input size 2 not in "
              "range [min=1, max=1]");
  }
  {
    // What the converter would dereference unchecked: a missing IR version, an output nothing
    // computes.
    ModelBuilder b(9);
    b.input("x", {2, 3});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    b.m.clear_ir_version();
    expect(b, "test.onnx: a model of opset 9 without an IR version of 2 or more (it has 0) is not supported");
    ModelBuilder c(9);
    c.input("x", {2, 3});
    c.node("Relu", {"x"}, {"y"});
    c.output("nowhere");
    expect(c, "test.onnx: graph output 'nowhere' is never computed");
  }
  {
    ModelBuilder b(8);
    b.input("x", {1, 3, 2});
    b.node("Scan", {"", "x"}, {"y"}, "scan8");
    b.output("y");
    expect(b, "test.onnx: node 'scan8' (Scan): Scan of opset 8 (a batch axis and sequence_lens) is not supported");
  }
  {
    ModelBuilder b(10);
    b.bytes("a", {2, 3}, {1, 2, 3, 4, 5, 6}, onnx::TensorProto::UINT8);
    b.bytes("w", {3, 4}, {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12}, onnx::TensorProto::INT8);
    b.node("MatMulInteger", {"a", "w"}, {"y"});
    b.output("y", {2, 4}, onnx::TensorProto::INT32);
    expect(b, "test.onnx: graph output 'y' is declared int32 but computed as float32 (MatMulInteger, ConvInteger): "
              "int32 results as a model's outputs are not supported");
  }
  {
    ModelBuilder b(9);
    b.input("x", {2, 3});
    auto* n = b.node("Relu", {"x"}, {"y"}, "elsewhere");
    n->set_domain("com.microsoft");
    b.output("y");
    expect(b, "test.onnx: node 'elsewhere' (Relu): operators of domain 'com.microsoft' in a model of opset 9 are not supported");
  }
}

// Models of opsets 1 to 10 are raised to opset 11 by ONNX's version converter at import:
// Upsample becomes Resize, and the attributes that later became inputs (Slice's starts and
// ends, Pad's pads and value, Clip's min and max, TopK's k) become constants. An opset 9
// model of each is compiled against the reference; TF_OPSET_MODELS_DIR=dir saves it as
// dir/old_opset.onnx, which graph_ort runs through ONNX Runtime as written (opset 9).
TEST(OnnxImport, OlderOpsetsAreConvertedAtImport) {
  ModelBuilder b(9);
  b.input("x", {1, 2, 3, 4});
  b.floats("scales", {1.0f, 1.0f, 2.0f, 2.0f});
  set_string(b.node("Upsample", {"x", "scales"}, {"up"}), "mode", "nearest");
  auto* slice = b.node("Slice", {"up"}, {"cut"});
  set_ints(slice, "starts", {1, 1});
  set_ints(slice, "ends", {5, 7});
  set_ints(slice, "axes", {2, 3});
  auto* pad = b.node("Pad", {"cut"}, {"padded"});
  set_ints(pad, "pads", {0, 0, 1, 0, 0, 0, 0, 1});
  set_float(pad, "value", 0.5f);
  auto* clip = b.node("Clip", {"padded"}, {"clipped"});
  set_float(clip, "min", -0.75f);
  set_float(clip, "max", 1.25f);
  b.floats("gamma", {1.5f, 0.5f});
  b.floats("beta", {0.1f, -0.2f});
  b.floats("mean", {0.2f, -0.1f});
  b.floats("var", {0.8f, 1.3f});
  b.node("BatchNormalization", {"clipped", "gamma", "beta", "mean", "var"}, {"normed"});
  set_int(b.node("TopK", {"normed"}, {"top", "where"}), "k", 3);
  set_ints(b.node("Unsqueeze", {"top"}, {"y"}), "axes", {0});
  b.output("y");
  b.output("where");
  Graph g = b.import();
  EXPECT_EQ(g.opset, 11);
  EXPECT_EQ(g.opset_converted_from, 9);
  std::vector<float> xs(24);
  for (size_t k = 0; k < xs.size(); ++k) xs[k] = 1.6f * std::sin(0.7f * static_cast<float>(k) + 0.3f);
  HostTensor x = HostTensor::floats({1, 2, 3, 4}, xs);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
  ASSERT_EQ(want.at("y").shape, (Shape{1, 1, 2, 5, 3}));
  // One row by hand: channel 0, padded row 1 (the Slice's row 0, the upsampled row 1: x's row
  // 0), columns 1..6 of the upsampled row then the pad: x[0][0][0][0,1,1,2,2,3] and 0.5.
  std::vector<float> row;
  for (int c : {0, 1, 1, 2, 2, 3}) row.push_back(xs[static_cast<size_t>(c)]);
  row.push_back(0.5f);
  for (float& v : row) v = (std::clamp(v, -0.75f, 1.25f) - 0.2f) / std::sqrt(0.8f + 1e-5f) * 1.5f + 0.1f;
  std::vector<float> sorted = row;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(want.at("y").f[static_cast<size_t>(3 + k)], sorted[static_cast<size_t>(k)], 1e-5f) << k;
  expect_compiled_as_reference(g, x, want, {"y", "where"});
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/old_opset.onnx");
}

// A Loop whose condition is known only at run time (a `break` in a scripted for loop), under a
// constant trip count: every iteration is computed and its carried value selected while the
// condition holds. v halves while its largest element is over 1, at most 5 times; an input
// that stops after 2 halvings and one that runs all 5. Compiled against the reference;
// TF_OPSET_MODELS_DIR=dir saves dir/runtime_loop.onnx for graph_ort.
TEST(OnnxImport, LoopOfARunTimeConditionSelectsItsIterations) {
  ModelBuilder b(17);
  b.input("x", {3});
  scalar_initializer(b.g, "five", kI64, 5);
  scalar_initializer(b.g, "yes", kBool, 1);
  b.floats("half", {0.5f});
  b.floats("one", {1.0f});
  auto* loop = b.node("Loop", {"five", "yes", "x"}, {"y"}, "halving");
  onnx::GraphProto* body = graph_attribute(loop, "body");
  typed(body->add_input(), "i", kI64);
  typed(body->add_input(), "c", kBool);
  typed(body->add_input(), "v", kF32, {3});
  sub_node(body, "Mul", {"v", "half"}, {"v2"});
  set_int(sub_node(body, "ReduceMax", {"v2"}, {"big"}), "keepdims", 0);
  sub_node(body, "Greater", {"big", "one"}, {"more"});
  typed(body->add_output(), "more", kBool, {1});
  typed(body->add_output(), "v2", kF32, {3});
  b.output("y");
  Graph g = b.import();
  EXPECT_EQ(g.written_out.iterations, 5);
  for (const std::vector<float>& xs : {std::vector<float>{3.0f, -1.0f, 0.5f}, std::vector<float>{100.0f, 7.0f, -2.0f}}) {
    std::vector<float> v = xs;
    for (int i = 0; i < 5; ++i) {
      for (float& e : v) e *= 0.5f;
      if (*std::max_element(v.begin(), v.end()) <= 1.0f) break;
    }
    HostTensor x = HostTensor::floats({3}, xs);
    std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
    for (size_t k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(want.at("y").f[k], v[k]) << xs[0] << " " << k;
    expect_compiled_as_reference(g, x, want, {"y"});
  }
  if (const char* dir = std::getenv("TF_OPSET_MODELS_DIR")) b.save(std::string(dir) + "/runtime_loop.onnx");
}
