// Warp-level matrix products on tensor cores (ir::kMmaTF32, compiler/ir.h), the first brick of
// the tensor-core templates: a GEMM written by hand in loop IR, each lane loading its fragments
// of A and B by the instruction's layout. Without a GPU here it runs in the threaded emulation
// of a block (tests/compiler/kernel_harness.cc), where a warp's 32 threads meet at each product
// and exchange their fragments, so a fragment loaded from the wrong place gives a wrong C (the
// test with two fragments swapped fails); the PTX has the instruction and ptxas takes it; the
// targets without it refuse by name.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/link.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {
namespace fs = std::filesystem;
using ir::Expr;
using ir::Stmt;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// C (M x N) = A (M x K) x B (K x N), all row-major, M a multiple of 16 and the block's warps
// (one block of warps_m warps, warp w computing rows w*16 + 16*i for i while they last), N and
// K multiples of 8. Lane l: g = l / 4, t = l % 4. For each 16x8 tile of C its accumulators
// acc[0..3] start at 0 and take one mma per 8 of K. With `swap`, a1 and a2 are loaded from each
// other's places (a wrong layout); `threads` > 0 launches that many threads instead of whole warps.
ir::LoweredFunc mma_gemm(int64_t M, int64_t N, int64_t K, int64_t warps, bool swap = false,
                         int64_t threads = 0) {
  Expr tx = ir::Var::make("tx"), mt = ir::Var::make("mt"), nt = ir::Var::make("nt"),
       ks = ir::Var::make("ks");
  Expr lane = tx % Expr(int64_t{32}), warp = tx / Expr(int64_t{32});
  Expr g = lane / Expr(int64_t{4}), t = lane % Expr(int64_t{4});
  const ir::Type f32 = ir::Type::float32();
  Expr row = (mt * Expr(warps) + warp) * Expr(int64_t{16}) + g;  // the lane's first row of C
  Expr k0 = ks * Expr(int64_t{8});
  Expr col_b = nt * Expr(int64_t{8}) + g;  // the column of B the lane holds
  auto a = [&](Expr r, Expr k) { return ir::Load::make(f32, "A", r * Expr(K) + k); };
  auto b = [&](Expr k) { return ir::Load::make(f32, "B", k * Expr(N) + col_b); };
  auto acc = [&](int64_t i) { return ir::Load::make(f32, "acc", Expr(i)); };
  Expr a1 = a(row + Expr(int64_t{8}), k0 + t), a2 = a(row, k0 + t + Expr(int64_t{4}));
  if (swap) std::swap(a1, a2);
  Expr mma = ir::Call::make(
      ir::kMmaTF32, {a(row, k0 + t), a1, a2, a(row + Expr(int64_t{8}), k0 + t + Expr(int64_t{4})),
                     b(k0 + t), b(k0 + t + Expr(int64_t{4})), acc(0), acc(1), acc(2), acc(3)});
  Stmt step = ir::For::make(
      ks, Expr(int64_t{0}), Expr(K / 8), ir::ForKind::Serial,
      ir::Store::make("acc", mma, ir::Ramp::make(Expr(int64_t{0}), Expr(int64_t{1}), 4)));
  std::vector<Stmt> body;
  for (int64_t i = 0; i < 4; ++i) body.push_back(ir::Store::make("acc", ir::f32(0), Expr(i)));
  body.push_back(step);
  Expr col_c = nt * Expr(int64_t{8}) + t * Expr(int64_t{2});
  for (int64_t i = 0; i < 4; ++i) {
    Expr r = row + Expr(int64_t{i / 2 * 8});
    body.push_back(ir::Store::make("C", acc(i), r * Expr(N) + col_c + Expr(int64_t{i % 2})));
  }
  Stmt tile = ir::Allocate::make("acc", f32, 4, ir::MemScope::Local, ir::Block::make(body));
  Stmt tiles =
      ir::For::make(mt, Expr(int64_t{0}), Expr(M / 16 / warps), ir::ForKind::Serial,
                    ir::For::make(nt, Expr(int64_t{0}), Expr(N / 8), ir::ForKind::Serial, tile));
  ir::LoweredFunc f;
  f.name = swap ? "mma_gemm_swapped" : "mma_gemm";
  f.args = {{"A", {M, K}, ir::ArgRole::Input},
            {"B", {K, N}, ir::ArgRole::Input},
            {"C", {M, N}, ir::ArgRole::Output}};
  f.body = ir::For::make(tx, Expr(int64_t{0}), Expr(threads > 0 ? threads : 32 * warps),
                         ir::ForKind::ThreadIdxX, tiles);
  return f;
}

// cvt.rna.tf32.f32, as the emulator and the GPU round: 10 bits of mantissa, ties away from 0.
float tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & ~0x1FFFu;
  std::memcpy(&x, &bits, 4);
  return x;
}

// The emulated kernel's C and the largest differences from A x B with the operands rounded to
// TF32 (what the instruction computes) and as float32 (what it does not), relative to the
// largest |C|.
struct Errors {
  double vs_tf32 = 0, vs_float = 0;
};
Errors run(const ir::LoweredFunc& f, int64_t M, int64_t N, int64_t K) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> bufs = {std::vector<float>(static_cast<size_t>(M * K)),
                                          std::vector<float>(static_cast<size_t>(K * N)),
                                          std::vector<float>(static_cast<size_t>(M * N), NAN)};
  for (int i = 0; i < 2; ++i) {
    for (float& v : bufs[i]) v = u(rng);
  }
  GpuLaunch launch = check_gpu_kernel(f, parse_target("cuda -arch=sm_80"));
  EXPECT_EQ(testing::emulate_gpu_kernel(f, launch, bufs), 0);
  Errors r;
  double most = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double want_tf32 = 0, want = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float x = bufs[0][static_cast<size_t>(i * K + k)],
                    y = bufs[1][static_cast<size_t>(k * N + j)];
        want_tf32 += double(tf32(x)) * tf32(y);
        want += double(x) * y;
      }
      double got = bufs[2][static_cast<size_t>(i * N + j)];
      if (std::isnan(got)) got = 1e30;  // an element no lane wrote
      r.vs_tf32 = std::max(r.vs_tf32, std::fabs(got - want_tf32));
      r.vs_float = std::max(r.vs_float, std::fabs(got - want));
      most = std::max(most, std::fabs(want));
    }
  }
  r.vs_tf32 /= most;
  r.vs_float /= most;
  return r;
}

TEST(WarpMma, EmulatedWarpsComputeTheTf32Product) {
  for (auto [M, N, K, warps] :
       {std::array<int64_t, 4>{16, 8, 8, 1}, {32, 16, 24, 2}, {64, 24, 40, 2}}) {
    Errors r = run(mma_gemm(M, N, K, warps), M, N, K);
    std::string what = str(M, "x", N, "x", K, " in ", warps, " warps");
    std::printf(
        "figure: %s: largest difference from the TF32 product %.2g, from the float32 one %.2g (of "
        "the "
        "largest |C|)\n",
        what.c_str(), r.vs_tf32, r.vs_float);
    // The sums of float32 products in another order than the double reference's.
    EXPECT_LT(r.vs_tf32, 1e-5) << what;
    // TF32 keeps 11 significant bits: the rounding shows against float32 operands.
    EXPECT_GT(r.vs_float, 1e-5) << what;
  }
  // Two fragments loaded from each other's places: the emulator builds A from the lanes'
  // registers by the instruction's layout, so the product is wrong.
  EXPECT_GT(run(mma_gemm(32, 16, 24, 2, true), 32, 16, 24).vs_tf32, 0.05);
}

TEST(WarpMma, PtxHasTheInstructionAndPtxasTakesIt) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  for (const char* arch : {"sm_80", "sm_90"}) {
    std::string ptx =
        codegen_llvm(mma_gemm(64, 24, 40, 2), parse_target(std::string("cuda -arch=") + arch),
                     CodegenOutput::Asm)
            .data;
    EXPECT_EQ(count_of(ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), 1)
        << arch << "\n"
        << ptx;
    EXPECT_EQ(count_of(ptx, "cvt.rna.tf32.f32"), 6) << arch << "\n" << ptx;
    if (!fs::exists(ptxas)) continue;
    std::string path = testing::temp_dir() + "/mma_" + arch + ".ptx";
    std::ofstream(path) << ptx;
    CommandResult r =
        run_command({ptxas, "-v", std::string("-arch=") + arch, path, "-o", path + ".cubin"});
    EXPECT_EQ(r.exit_code, 0) << arch << ": " << r.output;
    EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << arch << ": " << r.output;
  }
  if (!fs::exists(ptxas))
    std::printf("note: no %s here: the PTX was not assembled\n", ptxas.c_str());
}

TEST(WarpMma, TargetsWithoutTensorCoresRefuseByName) {
  auto refusal = [](const ir::LoweredFunc& f, const Target& t) {
    try {
      codegen_llvm(f, t, CodegenOutput::Asm);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  ir::LoweredFunc f = mma_gemm(16, 8, 8, 1);
  EXPECT_NE(refusal(f, parse_target("cuda -arch=sm_75"))
                .find("uses mma_m16n8k8_tf32 (TF32 tensor cores), which cuda "
                      "-arch=sm_75 does not have: they need sm_80 or later"),
            std::string::npos)
      << refusal(f, parse_target("cuda -arch=sm_75"));
  EXPECT_NE(refusal(f, parse_target("rocm -mcpu=gfx90a"))
                .find("uses mma_m16n8k8_tf32 (NVIDIA tensor cores), which"),
            std::string::npos)
      << refusal(f, parse_target("rocm -mcpu=gfx90a"));
  // A block that is not whole warps.
  std::string partial = refusal(mma_gemm(16, 8, 8, 1, false, 48), parse_target("cuda -arch=sm_90"));
  EXPECT_NE(partial.find("uses mma_m16n8k8_tf32 (a warp-level product) in blocks of 48 threads: it "
                         "needs whole warps, "
                         "a multiple of 32"),
            std::string::npos)
      << partial;
  // Serialized, as --emulate-gpu runs a model's kernels, the lanes cannot meet.
  ir::LoweredFunc serial = f;
  serial.body = serialize_gpu_bindings(f.body);
  std::string cpu = refusal(serial, host_target());
  EXPECT_NE(cpu.find("it runs on a GPU, or in the threaded emulation of a block"),
            std::string::npos)
      << cpu;
  EXPECT_NE(cpu.find("--emulate-gpu"), std::string::npos) << cpu;
}

}  // namespace
}  // namespace tf
