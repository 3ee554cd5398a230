// Warp-level matrix products on tensor cores (ir::kMmaTF32, kMmaF16, kMmaBF16: compiler/ir.h),
// the first brick of the tensor-core templates: a GEMM written by hand in loop IR, each lane
// loading its fragments of A and B by the instruction's layout. Without a GPU here it runs in
// the threaded emulation of a block (tests/compiler/kernel_harness.cc), where a warp's 32
// threads meet at each product and exchange their fragments, so a fragment loaded from the
// wrong place gives a wrong C (the test with two fragments swapped fails); the PTX has the
// instruction and ptxas takes it; the targets without it refuse by name.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "base/bfloat16.h"
#include "base/error.h"
#include "base/float16.h"
#include "base/tf32.h"
#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/ir_printer.h"
#include "compiler/link.h"
#include "compiler/lower.h"
#include "tests/compiler/kernel_harness.h"

namespace tf {
namespace {
namespace fs = std::filesystem;
using ir::Expr;
using ir::Stmt;

using testing::count_of;

// Where a lane's operands of A (row offset from g, k offset) and B (k offset) are, for a
// product of depth `depth` (compiler/ir.h), in terms of t = lane % 4.
struct Fragment {
  int64_t row, k_times_t, k;  // A[g + row][k_times_t * t + k]
};
std::vector<Fragment> a_fragments(int64_t depth) {
  if (depth == 8) return {{0, 1, 0}, {8, 1, 0}, {0, 1, 4}, {8, 1, 4}};
  return {{0, 2, 0}, {0, 2, 1}, {8, 2, 0}, {8, 2, 1}, {0, 2, 8}, {0, 2, 9}, {8, 2, 8}, {8, 2, 9}};
}
std::vector<Fragment> b_fragments(int64_t depth) {  // B[k_times_t * t + k][g]
  if (depth == 8) return {{0, 1, 0}, {0, 1, 4}};
  return {{0, 2, 0}, {0, 2, 1}, {0, 2, 8}, {0, 2, 9}};
}

// C (M x N) = A (M x K) x B (K x N) with the warp-level product `mma`, all row-major, M a
// multiple of 16 and the block's warps (warp w computing rows w*16 + 16*i for i while they
// last), N a multiple of 8, K of the product's depth. Lane l: g = l / 4, t = l % 4. For each
// 16x8 tile of C its accumulators acc[0..3] start at 0 and take one product per step of K.
// With `swap`, A's operands 1 and 2 are loaded from each other's places (a wrong layout);
// `threads` > 0 launches that many threads instead of whole warps.
ir::LoweredFunc mma_gemm(const std::string& mma, int64_t M, int64_t N, int64_t K, int64_t warps,
                         bool swap = false, int64_t threads = 0) {
  const int64_t depth = ir::warp_mma_k(mma);
  Expr tx = ir::Var::make("tx"), mt = ir::Var::make("mt"), nt = ir::Var::make("nt"),
       ks = ir::Var::make("ks");
  Expr lane = tx % Expr(int64_t{32}), warp = tx / Expr(int64_t{32});
  Expr g = lane / Expr(int64_t{4}), t = lane % Expr(int64_t{4});
  const ir::Type f32 = ir::Type::float32();
  Expr row = (mt * Expr(warps) + warp) * Expr(int64_t{16}) + g;  // the lane's first row of C
  Expr k0 = ks * Expr(depth);
  Expr col_b = nt * Expr(int64_t{8}) + g;  // the column of B the lane holds
  auto k_of = [&](const Fragment& f) { return k0 + t * Expr(f.k_times_t) + Expr(f.k); };
  auto acc = [&](int64_t i) { return ir::Load::make(f32, "acc", Expr(i)); };
  std::vector<Expr> operands;
  for (const Fragment& f : a_fragments(depth)) {
    operands.push_back(ir::Load::make(f32, "A", (row + Expr(f.row)) * Expr(K) + k_of(f)));
  }
  if (swap) std::swap(operands[1], operands[2]);
  for (const Fragment& f : b_fragments(depth)) {
    operands.push_back(ir::Load::make(f32, "B", k_of(f) * Expr(N) + col_b));
  }
  for (int64_t i = 0; i < 4; ++i) operands.push_back(acc(i));
  Stmt step = ir::For::make(ks, Expr(int64_t{0}), Expr(K / depth), ir::ForKind::Serial,
                            ir::Store::make("acc", ir::Call::make(mma, operands),
                                            ir::Ramp::make(Expr(int64_t{0}), Expr(int64_t{1}), 4)));
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
  f.name = "gemm_" + mma + (swap ? "_swapped" : "");
  f.args = {{"A", {M, K}, ir::ArgRole::Input},
            {"B", {K, N}, ir::ArgRole::Input},
            {"C", {M, N}, ir::ArgRole::Output}};
  f.body = ir::For::make(tx, Expr(int64_t{0}), Expr(threads > 0 ? threads : 32 * warps),
                         ir::ForKind::ThreadIdxX, tiles);
  return f;
}


// What the product rounds its operands to.
float (*rounding(const std::string& mma))(float) {
  if (mma == ir::kMmaTF32) return round_tf32;
  return mma == ir::kMmaF16 ? static_cast<float (*)(float)>(round_f16)
                            : static_cast<float (*)(float)>(round_bf16);
}

const char* kProducts[] = {ir::kMmaTF32, ir::kMmaF16, ir::kMmaBF16};

// The emulated kernel's C and its largest differences from A x B with the operands rounded as
// the product rounds them (what the instruction computes) and as float32 (what it does not),
// relative to the largest |C|.
struct Errors {
  double vs_rounded = 0, vs_float = 0;
};
Errors run_with(float (*round)(float), const ir::LoweredFunc& f, int64_t M, int64_t N, int64_t K,
                const char* target = "cuda -arch=sm_80") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> bufs = {std::vector<float>(static_cast<size_t>(M * K)),
                                          std::vector<float>(static_cast<size_t>(K * N)),
                                          std::vector<float>(static_cast<size_t>(M * N), NAN)};
  for (int i = 0; i < 2; ++i) {
    for (float& v : bufs[i]) v = u(rng);
  }
  GpuLaunch launch = check_gpu_kernel(f, parse_target(target));
  EXPECT_EQ(testing::emulate_gpu_kernel(f, launch, bufs), 0);
  Errors r;
  double most = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double want_rounded = 0, want = 0;
      for (int64_t k = 0; k < K; ++k) {
        const float x = bufs[0][static_cast<size_t>(i * K + k)],
                    y = bufs[1][static_cast<size_t>(k * N + j)];
        want_rounded += double(round(x)) * round(y);
        want += double(x) * y;
      }
      double got = bufs[2][static_cast<size_t>(i * N + j)];
      if (std::isnan(got)) got = 1e30;  // an element no lane wrote
      r.vs_rounded = std::max(r.vs_rounded, std::fabs(got - want_rounded));
      r.vs_float = std::max(r.vs_float, std::fabs(got - want));
      most = std::max(most, std::fabs(want));
    }
  }
  r.vs_rounded /= most;
  r.vs_float /= most;
  return r;
}
Errors run(const std::string& mma, const ir::LoweredFunc& f, int64_t M, int64_t N, int64_t K) {
  return run_with(rounding(mma), f, M, N, K);
}

// Why code generation for `t` refuses `f` (its UserError), or "compiled".
std::string codegen_refusal(const ir::LoweredFunc& f, const Target& t) {
  try {
    codegen_llvm(f, t, CodegenOutput::Asm);
  } catch (const UserError& e) {
    return std::string(e.what());
  }
  return std::string("compiled");
}

TEST(WarpMma, EmulatedWarpsComputeTheRoundedProduct) {
  for (const char* mma : kProducts) {
    const int64_t d = ir::warp_mma_k(mma);
    for (auto [M, N, K, warps] :
         {std::array<int64_t, 4>{16, 8, d, 1}, {32, 16, 3 * d, 2}, {64, 24, 5 * d, 2}}) {
      Errors r = run(mma, mma_gemm(mma, M, N, K, warps), M, N, K);
      std::string what = str(mma, " ", M, "x", N, "x", K, " in ", warps, " warps");
      std::printf(
          "figure: %s: largest difference from the product of rounded operands %.2g, from "
          "the float32 one %.2g (of the largest |C|)\n",
          what.c_str(), r.vs_rounded, r.vs_float);
      // The sums of float32 products in another order than the double reference's.
      EXPECT_LT(r.vs_rounded, 1e-5) << what;
      // TF32 and float16 keep 11 significant bits, bfloat16 8: the rounding shows.
      EXPECT_GT(r.vs_float, 1e-5) << what;
    }
    // Two fragments loaded from each other's places: the emulator builds A from the lanes'
    // registers by the instruction's layout, so the product is wrong.
    EXPECT_GT(run(mma, mma_gemm(mma, 32, 16, 3 * d, 2, true), 32, 16, 3 * d).vs_rounded, 0.05)
        << mma;
  }
}

// ---- Hopper's warpgroup-level products (ir::kWgmmaF16, kWgmmaBF16) ----

// Where an operand's core matrices lie (compiler/ir.h kWgmmaF16): along K next to each other
// (lbo 128 bytes, sbo the 8-row groups' stride) or along the rows (sbo 128, lbo the K groups').
enum class CoreOrder { KFirst, RowsFirst };
struct CoreLayout {
  int64_t lbo, sbo;  // bytes
};
CoreLayout core_layout(CoreOrder o, int64_t rows, int64_t K) {
  if (o == CoreOrder::KFirst) return {128, 128 * (K / 8)};
  return {128 * (rows / 8), 128};
}
// The element index of (row r, k) in a buffer of uint16 laid out so.
Expr core_index(const CoreLayout& c, Expr r, Expr k) {
  auto i = [](int64_t v) { return Expr(v); };
  return r / i(8) * i(c.sbo / 2) + k / i(8) * i(c.lbo / 2) + r % i(8) * i(8) + k % i(8);
}

// C (M x N) = A (M x K) x B (K x N) (float32, row-major) with the warpgroup-level product
// `wgmma`: M = 64 x `groups` (warpgroup q computes rows 64q .. 64q + 63), N a multiple of 8 up
// to 256, K of 16. The block's threads round A and B to the product's type into shared buffers
// laid out by `order` (B by its columns: K-major), wait at a barrier, and each warpgroup takes
// one product per 16 of K into its threads' N / 2 accumulators (issued back to back, waited
// for after the last), which go to C by the instruction's layout (ir::wgmma_c). With `wrong`, A's descriptor has its byte offsets
// swapped (a layout the buffer does not have).
ir::LoweredFunc wgmma_gemm(const std::string& wgmma, int64_t N, int64_t K, int64_t groups, CoreOrder order,
                           bool wrong = false, int64_t threads = 0) {
  const int64_t M = 64 * groups, T = threads > 0 ? threads : 128 * groups, h = N / 2;
  auto i = [](int64_t v) { return Expr(v); };
  const ir::Type f32 = ir::Type::float32(), u16 = ir::Type::uint16();
  const char* narrow = wgmma == ir::kWgmmaBF16 ? ir::kFloatToBF16 : ir::kFloatToF16;
  Expr tx = ir::Var::make("tx"), e = ir::Var::make("e"), ks = ir::Var::make("ks");
  const CoreLayout la = core_layout(order, M, K), lb = core_layout(order, N, K);
  std::vector<Stmt> body;
  // Copies: element x = e * T + tx of A (m = x / K, k = x % K) and of B's transpose.
  auto copy = [&](const std::string& from, const std::string& to, int64_t rows, const CoreLayout& c, bool by_columns) {
    Expr x = e * i(T) + tx, r = x / i(K), k = x % i(K);
    Expr src = by_columns ? ir::Load::make(f32, from, k * i(N) + r) : ir::Load::make(f32, from, r * i(K) + k);
    Stmt st = ir::Store::make(to, ir::Call::make(narrow, {src}), core_index(c, r, k));
    return ir::For::make(e, i(0), i((rows * K + T - 1) / T), ir::ForKind::Serial,
                         ir::IfThenElse::make(x < i(rows * K), st));
  };
  body.push_back(copy("A", "As", M, la, false));
  body.push_back(copy("B", "Bs", N, lb, true));
  body.push_back(ir::Barrier::make());
  Expr group = tx / i(128), l = tx % i(128);
  std::vector<Stmt> tile;
  for (int64_t c = 0; c < h; ++c) tile.push_back(ir::Store::make("acc", ir::f32(0), i(c)));
  std::vector<Expr> args = {
      ir::Load::make(u16, "As", core_index(la, group * i(64), ks * i(16))), i(wrong ? la.sbo : la.lbo),
      i(wrong ? la.lbo : la.sbo), ir::Load::make(u16, "Bs", core_index(lb, i(0), ks * i(16))), i(lb.lbo), i(lb.sbo)};
  for (int64_t c = 0; c < h; ++c) args.push_back(ir::Load::make(f32, "acc", i(c)));
  const Expr all = ir::Ramp::make(i(0), i(1), static_cast<int>(h));
  tile.push_back(ir::For::make(ks, i(0), i(K / 16), ir::ForKind::Serial, ir::Store::make("acc", ir::Call::make(wgmma, args), all)));
  // The products are asynchronous on the GPU: their results are read after the wait.
  std::vector<Expr> accs = {Expr(int64_t{0})};  // none pending
  for (int64_t c = 0; c < h; ++c) accs.push_back(ir::Load::make(f32, "acc", i(c)));
  tile.push_back(ir::Store::make("acc", ir::Call::make(ir::kWgmmaWait, accs), all));
  // Element c of the thread's accumulators: row 16 w + g + 8 (c % 4 / 2), column 8 (c / 4) + 2 t + c % 2
  // (constant indices: the accumulators stay in registers).
  Expr w = l / i(32), g = l % i(32) / i(4), t = l % i(4);
  for (int64_t c = 0; c < h; ++c) {
    Expr row = group * i(64) + w * i(16) + g + i(c % 4 / 2 * 8), col = i(c / 4 * 8) + t * i(2) + i(c % 2);
    tile.push_back(ir::Store::make("C", ir::Load::make(f32, "acc", i(c)), row * i(N) + col));
  }
  body.push_back(ir::Allocate::make("acc", f32, h, ir::MemScope::Local, ir::Block::make(tile)));
  Stmt kernel = ir::Allocate::make(
      "As", u16, M * K, ir::MemScope::Shared,
      ir::Allocate::make("Bs", u16, N * K, ir::MemScope::Shared, ir::Block::make(body)));
  ir::LoweredFunc f;
  f.name = str("gemm_", wgmma, "_n", N, wrong ? "_wrong" : "");
  f.args = {{"A", {M, K}, ir::ArgRole::Input}, {"B", {K, N}, ir::ArgRole::Input}, {"C", {M, N}, ir::ArgRole::Output}};
  f.body = ir::For::make(tx, i(0), i(T), ir::ForKind::ThreadIdxX, kernel);
  return f;
}

float (*wgmma_rounding(const std::string& wgmma))(float) {
  return wgmma == ir::kWgmmaBF16 ? static_cast<float (*)(float)>(round_bf16) : static_cast<float (*)(float)>(round_f16);
}

const char* kGroupProducts[] = {ir::kWgmmaF16, ir::kWgmmaBF16};

TEST(Wgmma, EmulatedWarpgroupsComputeTheRoundedProduct) {
  for (const char* wgmma : kGroupProducts) {
    for (CoreOrder order : {CoreOrder::KFirst, CoreOrder::RowsFirst}) {
      for (auto [N, K, groups] : {std::array<int64_t, 3>{8, 16, 1}, {64, 48, 2}, {256, 32, 1}}) {
        const int64_t M = 64 * groups;
        Errors r = run_with(wgmma_rounding(wgmma), wgmma_gemm(wgmma, N, K, groups, order), M, N, K, "cuda -arch=sm_90");
        std::string what = str(wgmma, " ", M, "x", N, "x", K, order == CoreOrder::KFirst ? " k-first" : " rows-first");
        std::printf("figure: %s: largest difference from the product of rounded operands %.2g, from the float32 one "
                    "%.2g (of the largest |C|)\n",
                    what.c_str(), r.vs_rounded, r.vs_float);
        EXPECT_LT(r.vs_rounded, 1e-5) << what;
        EXPECT_GT(r.vs_float, 1e-5) << what;
      }
    }
    // A descriptor whose byte offsets are swapped reads other elements: the emulator decodes it.
    EXPECT_GT(run_with(wgmma_rounding(wgmma), wgmma_gemm(wgmma, 64, 48, 2, CoreOrder::KFirst, true), 128, 64, 48,
                       "cuda -arch=sm_90")
                  .vs_rounded,
              0.05)
        << wgmma;
  }
}

TEST(Wgmma, TargetsWithoutItRefuseByName) {
  for (const char* wgmma : kGroupProducts) {
    ir::LoweredFunc f = wgmma_gemm(wgmma, 64, 16, 1, CoreOrder::KFirst);
    // sm_80 and sm_89 have warp-level products only.
    for (const char* arch : {"sm_80", "sm_89"}) {
      std::string old_gpu = codegen_refusal(f, parse_target(str("cuda -arch=", arch)));
      EXPECT_NE(old_gpu.find(str("uses ", wgmma, " (Hopper's warpgroup-level tensor cores), which cuda -arch=", arch,
                                 " does not have: only sm_90 has it")),
                std::string::npos)
          << old_gpu;
    }
    std::string amd = codegen_refusal(f, parse_target("rocm -mcpu=gfx90a"));
    EXPECT_NE(amd.find(str("uses ", wgmma, " (Hopper's warpgroup-level tensor cores), which rocm")), std::string::npos)
        << amd;
    std::string partial = codegen_refusal(wgmma_gemm(wgmma, 64, 16, 1, CoreOrder::KFirst, false, 96), parse_target("cuda -arch=sm_90"));
    EXPECT_NE(partial.find("(a warpgroup-level product) in blocks of 96 threads: it needs whole warpgroups, a "
                           "multiple of 128"),
              std::string::npos)
        << partial;
    ir::LoweredFunc serial = f;
    serial.body = serialize_gpu_bindings(f.body);
    std::string cpu = codegen_refusal(serial, host_target());
    EXPECT_NE(cpu.find("it runs on a GPU, or in the threaded emulation of a block"), std::string::npos) << cpu;
  }
  // Operands the instruction cannot take: an internal error (the compiler makes these calls)
  // that says which.
  Expr a = ir::Load::make(ir::Type::uint16(), "As", Expr(int64_t{0}));
  Expr f32 = ir::Load::make(ir::Type::float32(), "As", Expr(int64_t{0}));
  auto args = [&](Expr x, int64_t lbo, int64_t sbo, int accumulators) {
    std::vector<Expr> v = {x, Expr(lbo), Expr(sbo), a, Expr(int64_t{128}), Expr(int64_t{256})};
    for (int i = 0; i < accumulators; ++i) v.push_back(ir::f32(0));
    return v;
  };
  EXPECT_EQ(ir::Call::make(ir::kWgmmaF16, args(a, 128, 256, 4)).type(), ir::Type::float32().with_lanes(4));
  const char* want = "takes a uint16 Load of A in shared memory, its leading and stride byte offsets";
  EXPECT_DEATH(ir::Call::make(ir::kWgmmaF16, args(a, 120, 256, 4)), want);  // not a multiple of 16
  EXPECT_DEATH(ir::Call::make(ir::kWgmmaF16, args(a, 128, int64_t{1} << 18, 4)), want);  // past the field
  EXPECT_DEATH(ir::Call::make(ir::kWgmmaF16, args(f32, 128, 256, 4)), want);  // not 16-bit
  EXPECT_DEATH(ir::Call::make(ir::kWgmmaF16, args(a, 128, 256, 2)), "got 8 arguments");  // N = 4
}

// With $TF_WARP_MMA_PTX_DIR set, the PTX of each product's GEMM is also written there, with
// manifest.json, for bench/gpu_mma_check.py to run on a real GPU (the layouts against the
// hardware, not only against this emulator's reading of them).
TEST(WarpMma, PtxHasTheInstructionAndPtxasTakesIt) {
  const std::string ptxas = "/usr/local/cuda/bin/ptxas";
  const char* dump = std::getenv("TF_WARP_MMA_PTX_DIR");
  nlohmann::json manifest = nlohmann::json::array();
  const std::map<std::string, std::pair<std::string, std::string>> instruction = {
      {ir::kMmaTF32, {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "cvt.rna.tf32.f32"}},
      {ir::kMmaF16, {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "cvt.rn.f16.f32"}},
      {ir::kMmaBF16, {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "cvt.rn.bf16"}}};
  for (const char* mma : kProducts) {
    const int64_t d = ir::warp_mma_k(mma);
    for (const char* arch : {"sm_80", "sm_90"}) {
      std::string what = str(mma, " ", arch);
      std::string ptx =
          codegen_llvm(mma_gemm(mma, 64, 24, 5 * d, 2),
                       parse_target(std::string("cuda -arch=") + arch), CodegenOutput::Asm)
              .data;
      const auto& [op, cvt] = instruction.at(mma);
      EXPECT_EQ(count_of(ptx, op), 1) << what << "\n" << ptx;
      EXPECT_GE(count_of(ptx, cvt), 1) << what << "\n" << ptx;
      if (dump && *dump) {
        fs::create_directories(dump);
        std::string file = std::string(mma) + "_" + arch + ".ptx";
        std::ofstream(fs::path(dump) / file) << ptx;
        manifest.push_back({{"ptx", file},
                            {"kernel", "gemm_" + std::string(mma)},
                            {"product", mma},
                            {"arch", arch},
                            {"M", 64},
                            {"N", 24},
                            {"K", 5 * d},
                            {"threads", 64}});
      }
      if (!fs::exists(ptxas)) continue;
      std::string path = testing::temp_dir() + "/" + mma + "_" + arch + ".ptx";
      std::ofstream(path) << ptx;
      CommandResult r =
          run_command({ptxas, "-v", std::string("-arch=") + arch, path, "-o", path + ".cubin"});
      EXPECT_EQ(r.exit_code, 0) << what << ": " << r.output;
      EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos)
          << what << ": " << r.output;
    }
  }
  // The warpgroup-level products: sm_90 alone, whose module becomes sm_90a (the instruction's).
  for (const char* wgmma : kGroupProducts) {
    const char* type = wgmma == std::string(ir::kWgmmaBF16) ? "bf16" : "f16";
    for (auto [N, K, groups] : {std::array<int64_t, 3>{64, 48, 2}, {256, 32, 1}}) {
      ir::LoweredFunc f = wgmma_gemm(wgmma, N, K, groups, CoreOrder::KFirst);
      std::string what = str(wgmma, " N ", N);
      std::string ptx = codegen_llvm(f, parse_target("cuda -arch=sm_90"), CodegenOutput::Asm).data;
      EXPECT_NE(ptx.find(".target sm_90a"), std::string::npos) << what << "\n" << ptx;
      EXPECT_EQ(count_of(ptx, str("wgmma.mma_async.sync.aligned.m64n", N, "k16.f32.", type, ".", type)), 1)
          << what << "\n" << ptx;
      EXPECT_EQ(count_of(ptx, "wgmma.commit_group.sync.aligned"), 1) << what;  // in the loop
      EXPECT_EQ(count_of(ptx, "wgmma.wait_group.sync.aligned 0"), 1) << what;  // after it
      // Each thread's stores to shared memory fenced for the async proxy before the barrier.
      EXPECT_EQ(count_of(ptx, "fence.proxy.async.shared::cta"), 1) << what;
      EXPECT_EQ(count_of(ptx, "bar.sync"), 1) << what;
      if (dump && *dump) {
        std::string file = str(f.name, "_sm_90a.ptx");
        std::ofstream(fs::path(dump) / file) << ptx;
        manifest.push_back({{"ptx", file}, {"kernel", f.name}, {"product", wgmma}, {"arch", "sm_90a"},
                            {"M", 64 * groups}, {"N", N}, {"K", K}, {"threads", 128 * groups}});
      }
      if (!fs::exists(ptxas)) continue;
      std::string path = testing::temp_dir() + "/" + f.name + ".ptx";
      std::ofstream(path) << ptx;
      CommandResult r = run_command({ptxas, "-v", "-arch=sm_90a", path, "-o", path + ".cubin"});
      EXPECT_EQ(r.exit_code, 0) << what << ": " << r.output;
      EXPECT_NE(r.output.find("0 bytes spill stores"), std::string::npos) << what << ": " << r.output;
      // The accumulators in registers (no stack frame); ptxas serializes a wgmma it cannot
      // prove safe, and says so.
      EXPECT_NE(r.output.find(" 0 bytes stack frame"), std::string::npos) << what << ": " << r.output;
      EXPECT_EQ(r.output.find("erializ"), std::string::npos) << what << ": " << r.output;
    }
  }
  if (!fs::exists(ptxas))
    std::printf("note: no %s here: the PTX was not assembled\n", ptxas.c_str());
  if (dump && *dump) std::ofstream(fs::path(dump) / "manifest.json") << manifest.dump(1) << "\n";
}

TEST(WarpMma, TargetsWithoutTensorCoresRefuseByName) {
  for (const char* mma : kProducts) {
    const int64_t d = ir::warp_mma_k(mma);
    ir::LoweredFunc f = mma_gemm(mma, 16, 8, d, 1);
    std::string old_gpu = codegen_refusal(f, parse_target("cuda -arch=sm_75"));
    EXPECT_NE(old_gpu.find(str("uses ", mma,
                               " (tensor cores), which cuda -arch=sm_75 does not have: they need "
                               "sm_80 or later")),
              std::string::npos)
        << old_gpu;
    std::string amd = codegen_refusal(f, parse_target("rocm -mcpu=gfx90a"));
    EXPECT_NE(amd.find(str("uses ", mma, " (NVIDIA tensor cores), which rocm")), std::string::npos)
        << amd;
    // A block that is not whole warps.
    std::string partial =
        codegen_refusal(mma_gemm(mma, 16, 8, d, 1, false, 48), parse_target("cuda -arch=sm_90"));
    EXPECT_NE(partial.find("(a warp-level product) in blocks of 48 threads: it needs whole warps, "
                           "a multiple of 32"),
              std::string::npos)
        << partial;
    // Serialized, as --emulate-gpu runs a model's kernels, the lanes cannot meet.
    ir::LoweredFunc serial = f;
    serial.body = serialize_gpu_bindings(f.body);
    std::string cpu = codegen_refusal(serial, host_target());
    EXPECT_NE(cpu.find("it runs on a GPU, or in the threaded emulation of a block"),
              std::string::npos)
        << cpu;
    EXPECT_NE(cpu.find("--emulate-gpu"), std::string::npos) << cpu;
  }
}

}  // namespace
}  // namespace tf
