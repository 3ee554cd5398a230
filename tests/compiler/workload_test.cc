// Workload specs: parsing, defaults, the canonical form, and every error path.
#include <gtest/gtest.h>

#include <set>

#include "base/error.h"
#include "compiler/operator_table.h"
#include "compiler/operators.h"
#include "compiler/workload.h"

namespace tf {
namespace {

TEST(Workload, ParsesAndFillsDefaults) {
  Workload w = parse_workload("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,epilogue=bias_relu)");
  EXPECT_EQ(w.op, "conv2d_nchw");
  EXPECT_EQ(w.get("stride"), 1);
  EXPECT_EQ(w.get("dilation"), 1);
  EXPECT_EQ(w.get("pad"), 1);
  EXPECT_EQ(w.epilogue, Epilogue::BiasRelu);
}

// The operator table is the one place an operator is defined: each row has everything
// parse_workload, build_op and the reference need, and the footprint parse_workload bounds is
// the tensors build_op makes.
TEST(OperatorTable, EveryRowIsComplete) {
  std::vector<std::string> names;
  for (const OperatorDef& d : operator_table()) {
    names.push_back(d.name);
    EXPECT_EQ(find_operator(d.name), &d);
    EXPECT_FALSE(d.keys.empty()) << d.name;
    EXPECT_TRUE(d.footprint && d.build && d.reference) << d.name;
  }
  EXPECT_EQ(names, known_ops());
  EXPECT_EQ(find_operator("conv3d"), nullptr);
  OpGraph g = build_op(parse_workload("matmul(M=3,N=5,K=7)"));
  Footprint f = find_operator("matmul")->footprint(g.workload);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(*f.tensors[0].second, 21);
  EXPECT_EQ(*f.flops, g.flops);
}

TEST(Workload, CanonicalFormIsUniqueAndReparses) {
  Workload a = parse_workload("matmul( K=67 , M=97,N=131 )");
  Workload b = parse_workload("matmul(M=97,N=131,K=67,epilogue=none)");
  EXPECT_EQ(a.canonical(), "matmul(M=97,N=131,K=67,epilogue=none)");
  EXPECT_EQ(a.canonical(), b.canonical());
  EXPECT_EQ(parse_workload(a.canonical()).canonical(), a.canonical());
}

// const_b (B a constant the caller passes packed) is named only when set, so workload strings
// made before it existed stay the same; the kernel then takes B packed.
TEST(Workload, ConstantWeightsAreNamedOnlyWhenSet) {
  EXPECT_EQ(parse_workload("matmul(M=4,N=8,K=16,const_b=0)").canonical(), "matmul(M=4,N=8,K=16,epilogue=none)");
  Workload c = parse_workload("matmul(M=4,N=8,K=16,const_b=1,epilogue=relu)");
  EXPECT_EQ(c.canonical(), "matmul(M=4,N=8,K=16,const_b=1,epilogue=relu)");
  EXPECT_EQ(parse_workload(c.canonical()).canonical(), c.canonical());
  EXPECT_EQ(build_op(c).prepacked, std::set<std::string>{"B"});
  EXPECT_TRUE(build_op(parse_workload("matmul(M=4,N=8,K=16)")).prepacked.empty());
  try {
    parse_workload("matmul(M=4,N=8,K=16,const_b=2)");
    ADD_FAILURE() << "const_b=2 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("const_b=2 is not 0 or 1"), std::string::npos) << e.what();
  }
}

TEST(Workload, ShapesAndFlops) {
  OpGraph g = build_op(parse_workload("conv2d_nchw(N=2,C=3,H=13,W=11,K=5,R=3,S=2,stride=2,pad=2,dilation=2)"));
  // OH = (13 + 4 - 2*2 - 1)/2 + 1 = 7, OW = (11 + 4 - 2*1 - 1)/2 + 1 = 7
  EXPECT_EQ(g.output->shape, (std::vector<int64_t>{2, 5, 7, 7}));
  EXPECT_EQ(g.flops, 2 * 2 * 5 * 7 * 7 * 3 * 3 * 2);
  ASSERT_EQ(g.inputs.size(), 2u);
  OpGraph b = build_op(parse_workload("batch_matmul(B=2,M=3,N=4,K=5,epilogue=bias)"));
  ASSERT_EQ(b.inputs.size(), 3u);
  EXPECT_EQ(b.inputs[2]->name, "bias");
  EXPECT_EQ(b.inputs[2]->shape, (std::vector<int64_t>{4}));
}

struct BadSpec {
  const char* spec;
  const char* message;  // must appear in the error
};

class WorkloadErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(WorkloadErrors, NameTheProblem) {
  try {
    build_op(parse_workload(GetParam().spec));
    FAIL() << "accepted " << GetParam().spec;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, WorkloadErrors,
    ::testing::Values(
        BadSpec{"gemm(M=1,N=1,K=1)", "unknown operator 'gemm'"},
        BadSpec{"matmul(M=1,N=1)", "missing key K"},
        BadSpec{"matmul(M=1,N=1,K=1,Q=3)", "unknown key Q"},
        BadSpec{"matmul(M=0,N=1,K=1)", "M=0 must be at least 1"},
        BadSpec{"matmul(M=-4,N=1,K=1)", "M=-4 must be at least 1"},
        BadSpec{"matmul(M=x,N=1,K=1)", "M=x is not an integer"},
        BadSpec{"matmul(M=1,M=2,N=1,K=1)", "key M is given twice"},
        BadSpec{"matmul(M=1,N=1,K=1,epilogue=gelu)", "epilogue 'gelu'"},
        BadSpec{"matmul M=1", "not of the form"},
        BadSpec{"matmul(M=1,N=1,K)", "'K' is not key=value"},
        BadSpec{"matmul(M=1,N=1,K=1,)", "'' is not key=value"},
        BadSpec{"matmul(M=99999999999999,N=1,K=1)", "M=99999999999999 is larger than 2147483647"},
        BadSpec{"matmul(M=2147483648,N=1,K=1)", "M=2147483648 is larger than 2147483647"},
        // dilation*(R-1) wrapped around 64 bits and was accepted; the kernel then segfaulted.
        BadSpec{"conv2d_nchw(N=1,C=1,H=1,W=1,K=1,R=33554433,S=1,dilation=549755813888)",
                "dilation=549755813888 is larger than"},
        BadSpec{"conv2d_nhwc(N=1,H=2147483647,W=1,C=1,K=1,R=2147483647,S=1,dilation=2147483647)",
                "output size"},
        BadSpec{"depthwise_conv2d_nchw(N=1,C=1,H=1,W=1,R=1,S=1,pad=2147483647)",
                "tensor data_pad would have"},
        BadSpec{"batch_matmul(B=65536,M=65536,N=1,K=2)", "tensor A would have 8589934592 elements"},
        BadSpec{"conv2d_nchw(N=1,C=65537,H=65536,W=1,K=1,R=1,S=1)", "tensor data would have"},
        BadSpec{"matmul(M=65536,N=65536,K=65536)", "bytes together, over the limit"},
        BadSpec{"conv2d_nchw(N=1,C=1,H=2,W=2,K=1,R=3,S=3)", "output size"},
        BadSpec{"conv2d_nchw(N=1,C=1,H=8,W=8,K=1,R=3,S=3,stride=0)", "stride=0"},
        BadSpec{"depthwise_conv2d_nchw(N=1,C=1,H=5,W=5,R=3,S=3,dilation=3)", "output size"},
        BadSpec{"matmul(M=300000,N=300000,K=1)", "tensor C would have 90000000000 elements"},
        // Groups: both channel counts divided; float32; blocks that fit the groups.
        BadSpec{"conv2d_nchw(N=1,C=6,H=4,W=4,K=8,R=1,S=1,group=4)", "group=4 does not divide C=6"},
        BadSpec{"conv2d_nchw(N=1,C=8,H=4,W=4,K=6,R=1,S=1,group=4)", "group=4 does not divide K=6"},
        BadSpec{"conv2d_nchw(N=1,C=8,H=4,W=4,K=8,R=1,S=1,group=0)", "group=0 must be at least 1"},
        BadSpec{"conv2d_nchw(N=1,C=8,H=4,W=4,K=8,R=1,S=1,group=2,precision=fp16)",
                "group=2 at precision=fp16 is not implemented yet"},
        BadSpec{"conv2d_nchwc(N=1,C=24,H=4,W=4,K=24,R=1,S=1,ic_block=16,oc_block=8,group=4)",
                "ic_block=16 does not divide C=24"},
        BadSpec{"conv2d_nchwc(N=1,C=24,H=4,W=4,K=20,R=1,S=1,ic_block=8,oc_block=8,group=4)",
                "oc_block=8 does not divide K=20"},
        // Depthwise of width g: a group's channels in one block.
        BadSpec{"depthwise_conv2d_nchwc(N=1,C=24,H=4,W=4,R=3,S=3,block=8,width=3)",
                "width=3 does not divide block=8 (a group's channels must lie in one block)"},
        BadSpec{"depthwise_conv2d_nchwc(N=1,C=16,H=4,W=4,R=3,S=3,block=8,width=0)", "width=0 must be at least 1"},
        // Winograd's dilation: an output that is empty at that rate.
        BadSpec{"conv2d_winograd_nchwc(N=1,C=8,H=4,W=4,K=8,pad=1,dilation=3,ic_block=8,oc_block=8)",
                "output size 0x0 is empty (H=4 W=4 pad=1 dilation=3"}));

// group=G: each filter reads C/G channels (weights [K][C/G][R][S]; FLOPs by C/G); blocked, an
// output block reads its groups' channels: one group's, or (blocks holding several groups)
// each one's, its weights then [K/ob][span/ib][R][S][ib][ob].
TEST(Workload, GroupedConvolutionsReadTheirGroupsChannels) {
  OpGraph g = build_op(parse_workload("conv2d_nchw(N=1,C=8,H=5,W=5,K=12,R=3,S=3,group=4)"));
  EXPECT_EQ(g.inputs[1]->shape, (std::vector<int64_t>{12, 2, 3, 3}));
  EXPECT_EQ(g.flops, 2 * 12 * 3 * 3 * 2 * 3 * 3);
  EXPECT_EQ(parse_workload("conv2d_nchw(N=1,C=8,H=5,W=5,K=12,R=3,S=3,group=1)").canonical(),
            "conv2d_nchw(N=1,C=8,H=5,W=5,K=12,R=3,S=3,stride=1,pad=0,dilation=1,epilogue=none)");
  OpGraph in_group = build_op(parse_workload(
      "conv2d_nchwc(N=1,C=64,H=5,W=5,K=64,R=1,S=1,ic_block=16,oc_block=16,group=2)"));
  EXPECT_EQ(in_group.inputs[1]->shape,
            (std::vector<int64_t>{4, 2, 1, 1, 16, 16}));  // 32 channels a block reads
  OpGraph holds = build_op(parse_workload(
      "conv2d_nchwc(N=1,C=32,H=5,W=5,K=32,R=1,S=1,ic_block=16,oc_block=16,group=8)"));
  EXPECT_EQ(holds.inputs[1]->shape,
            (std::vector<int64_t>{2, 1, 1, 1, 16, 16}));  // 4 groups of 4: 16 channels
  EXPECT_EQ(holds.flops, 2 * 32 * 5 * 5 * 4);
  const NchwcGroups gr = nchwc_groups(
      parse_workload("conv2d_nchwc(N=1,C=32,H=5,W=5,K=64,R=1,S=1,ic_block=8,oc_block=16,group=8)"));
  EXPECT_EQ(gr.span(), 8);  // two groups of 8 filters and 4 channels
  EXPECT_EQ(gr.start(3), 24);
  EXPECT_TRUE(gr.exact());
  // Blocks of 16 over groups of 24 (RegNet's): block 1 (filters 16-31) straddles groups 0
  // and 1, so every block reads 48 channels (3 input blocks) from its first group's first
  // input block; the last (filters 80-95, group 3 from channel 72) starts at 48 to stay in C.
  const NchwcGroups straddle = nchwc_groups(
      parse_workload("conv2d_nchwc(N=1,C=96,H=5,W=5,K=96,R=3,S=3,ic_block=16,oc_block=16,group=4)"));
  EXPECT_FALSE(straddle.whole());
  EXPECT_EQ(straddle.span(), 48);
  EXPECT_DOUBLE_EQ(straddle.useful(), 0.5);
  std::vector<int64_t> starts;
  for (int64_t ko = 0; ko < 6; ++ko) starts.push_back(straddle.start(ko));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 0, 16, 48, 48, 48}));
  EXPECT_EQ(build_op(parse_workload("conv2d_nchwc(N=1,C=96,H=5,W=5,K=96,R=3,S=3,ic_block=16,oc_block=16,group=4)"))
                .inputs[1]
                ->shape,
            (std::vector<int64_t>{6, 3, 3, 3, 16, 16}));
  // Input blocks narrower than a group's channels at the block's start: 4 channels a group,
  // blocks of 16, so a block in one group still reads a whole input block.
  const NchwcGroups narrow = nchwc_groups(
      parse_workload("conv2d_nchwc(N=1,C=16,H=4,W=4,K=32,R=1,S=1,ic_block=16,oc_block=8,group=4)"));
  EXPECT_EQ(narrow.span(), 16);
  EXPECT_FALSE(narrow.exact());
  EXPECT_EQ(narrow.start(3), 0);
}

TEST(Workload, LargestAcceptedSizesAreExact) {
  // Exactly at the limits: accepted, with products computed without overflow.
  Workload w = parse_workload("matmul(M=65536,N=65536,K=1)");  // C has 2^32 elements
  EXPECT_EQ(w.get("M"), 65536);
  // dilation * (R - 1) + 1 spans all of H: one output row.
  Workload c = parse_workload("conv2d_nchw(N=1,C=1,H=2147483647,W=1,K=1,R=2,S=1,dilation=2147483646)");
  EXPECT_EQ(build_op(c).output->shape, (std::vector<int64_t>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace tf
