// int8 GEMM, uint8 A x int8 B -> int32 C: tunefarm's default schedule (and, with --db, the
// tuned one) against oneDNN's dnnl_gemm_u8s8s32, measured in the same run, interleaved.
//
//   bench_int8_gemm [--sizes 512,1024 | --shapes MxNxK,...] [--threads 1,2] [--min-ms 300] [--db tuning.db]
//
// Prints GOPS (a multiply-add counts 2) of each, the ratio tunefarm / oneDNN for each shape
// and thread count, and each one's share of the int8 dot-product peak measured in the run
// (one thread's vpdpbusd throughput times the threads; 0 where the CPU has no VNNI), and
// checks that both computed the same C, exactly.
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/fma_peak.h"
#include "compiler/driver.h"
#include "db/database.h"
#include "runtime/kernel_library.h"
#include "tuner/tuning_records.h"

namespace {

using tf::bench::cpu_has;
using tf::bench::median_seconds;
using tf::bench::parse_list;

namespace fs = std::filesystem;

#if defined(__x86_64__)
// One thread's u8 x s8 dot-product peak, measured as fma_peak measures fp32: 12 independent
// chains of vpdpbusd (64 multiply-adds each), 20M steps.
#define TF_DOT_PEAK(V, SET1, DOT, MACS)                                                     \
  V a0 = SET1(1), a1 = SET1(2), a2 = SET1(3), a3 = SET1(4), a4 = SET1(5), a5 = SET1(6);      \
  V a6 = SET1(7), a7 = SET1(8), a8 = SET1(9), a9 = SET1(10), a10 = SET1(11), a11 = SET1(12); \
  V b = SET1(0x01010101), c = SET1(0x01010101);                                              \
  auto t0 = std::chrono::steady_clock::now();                                               \
  for (long i = 0; i < tf::bench::kPeakSteps; ++i) {                                        \
    a0 = DOT(a0, b, c), a1 = DOT(a1, b, c), a2 = DOT(a2, b, c), a3 = DOT(a3, b, c);         \
    a4 = DOT(a4, b, c), a5 = DOT(a5, b, c), a6 = DOT(a6, b, c), a7 = DOT(a7, b, c);         \
    a8 = DOT(a8, b, c), a9 = DOT(a9, b, c), a10 = DOT(a10, b, c), a11 = DOT(a11, b, c);     \
  }                                                                                         \
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  \
  V sum = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7 ^ a8 ^ a9 ^ a10 ^ a11;                      \
  int keep[MACS / 4];                                                                       \
  std::memcpy(keep, &sum, sizeof keep);                                                     \
  volatile int sink = keep[0];                                                              \
  (void)sink;                                                                               \
  return 12.0 * tf::bench::kPeakSteps * MACS * 2 / s * 1e-9;

__attribute__((target("avx512f,avx512vnni"))) double dot_peak_avx512() {
  TF_DOT_PEAK(__m512i, _mm512_set1_epi32, _mm512_dpbusd_epi32, 64)
}
__attribute__((target("avx2,avxvnni"))) double dot_peak_avxvnni() {
  TF_DOT_PEAK(__m256i, _mm256_set1_epi32, _mm256_dpbusd_avx_epi32, 32)
}
#undef TF_DOT_PEAK
#endif

// One thread's int8 dot-product peak in GOPS (the best of three), or 0 without VNNI.
double dot_peak_gops() {
  double best = 0;
#if defined(__x86_64__)
  for (int i = 0; i < 3; ++i) {
    if (cpu_has("avx512_vnni")) best = std::max(best, dot_peak_avx512());
    else if (cpu_has("avx_vnni")) best = std::max(best, dot_peak_avxvnni());
  }
#endif
  return best;
}

}  // namespace

static int run(int argc, char** argv) {
  std::vector<int> sizes = {512, 1024}, threads = {1, 2};
  std::vector<std::array<int, 3>> shapes;
  std::string db_path;
  double min_ms = 300;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: bench_int8_gemm [--sizes 512,1024 | --shapes MxNxK,...] [--threads 1,2] [--min-ms 300] "
                  "[--db tuning.db]\n");
      return 0;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--sizes") sizes = parse_list(argv[i + 1]);
    else if (a == "--shapes") {
      std::stringstream ss(argv[i + 1]);
      for (std::string item; std::getline(ss, item, ',');) {
        int m, n, k;
        char end;
        if (std::sscanf(item.c_str(), "%dx%dx%d%c", &m, &n, &k, &end) != 3 || m < 1 || n < 1 || k < 1) {
          std::fprintf(stderr, "--shapes: %s is not MxNxK of positive extents\n", item.c_str());
          return 2;
        }
        shapes.push_back({m, n, k});
      }
    } else if (a == "--db") db_path = argv[i + 1];
    else if (a == "--threads") threads = parse_list(argv[i + 1]);
    else if (a == "--min-ms") min_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  tf::Target target = tf::host_target();
  std::printf("target: %s\n", target.str().c_str());
  const double peak = dot_peak_gops();
  if (peak > 0) std::printf("int8 dot-product peak of one thread, measured: %.1f GOPS\n", peak);
  else std::printf("no VNNI on this CPU: no int8 dot-product peak to compare with\n");
  std::unique_ptr<tf::db::Database> db;
  if (!db_path.empty()) db = tf::db::open_database(db_path, tf::db::OpenMode::ReadOnly);
  fs::path dir = fs::temp_directory_path() / ("tunefarm-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  if (shapes.empty()) {
    for (int n : sizes) shapes.push_back({n, n, n});
  }
  std::printf("%16s %7s %10s %10s %10s %8s %8s %8s %8s\n", "shape", "threads", "ours GOPS", "config", "onednn GOPS",
              "ours/dnn", "ours/pk", "dnn/pk", "check");
  bool all_ok = true;
  double log_ratio = 0;
  int ratios = 0;
  for (auto [m, n, kk] : shapes) {
    std::string spec = "matmul(M=" + std::to_string(m) + ",N=" + std::to_string(n) + ",K=" + std::to_string(kk) +
                       ",dtype=uint8,weight_dtype=int8)";
    tf::Workload w = tf::parse_workload(spec);
    tf::ConfigChoice tuned = tf::choose_config(db.get(), w, target);
    tf::CompiledKernel k = tf::compile_kernel(w, target, tuned.config, tuned.config.is_null() ? "default" : "tuned", "");
    std::string so = (dir / ("int8_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(kk) + ".so")).string();
    tf::write_kernel(k, tf::EmitKind::SharedLibrary, so);
    tf::KernelLibrary lib(so, k.name);
    // fill_typed's values, as boards fill int8 arguments.
    std::vector<float> av(size_t(m) * kk), bv(size_t(kk) * n);
    tf::fill_typed("uint8", av.data(), static_cast<int64_t>(av.size()), 1);
    tf::fill_typed("int8", bv.data(), static_cast<int64_t>(bv.size()), 2);
    std::vector<uint8_t> a(av.begin(), av.end());
    std::vector<int8_t> b(bv.begin(), bv.end());
    std::vector<int32_t> c(size_t(m) * n), c_ref(size_t(m) * n);
    const int32_t zero = 0;
    double ops = 2.0 * m * n * kk;
    for (int t : threads) {
      omp_set_num_threads(t);
      double ours = INFINITY, dnn = INFINITY;
      for (int round = 0; round < 3; ++round) {
        ours = std::min(ours, median_seconds([&] { lib.call({reinterpret_cast<float*>(a.data()), reinterpret_cast<float*>(b.data()),
                                                             reinterpret_cast<float*>(c.data())}); },
                                             min_ms / 3));
        dnn = std::min(dnn, median_seconds([&] {
          dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, kk, 1.0f, a.data(), kk, 0, b.data(), n, 0, 0.0f, c_ref.data(), n, &zero);
        }, min_ms / 3));
      }
      bool ok = c == c_ref;
      all_ok &= ok;
      char shape[48];
      std::snprintf(shape, sizeof shape, "%dx%dx%d", m, n, kk);
      log_ratio += std::log(dnn / ours);
      ++ratios;
      auto of_peak = [&](double s) {
        char buf[16] = "-";
        if (peak > 0) std::snprintf(buf, sizeof buf, "%.2f", ops / s * 1e-9 / (peak * t));
        return std::string(buf);
      };
      std::printf("%16s %7d %10.1f %10s %10.1f %8.2f %8s %8s %8s\n", shape, t, ops / ours * 1e-9,
                  tuned.config.is_null() ? "default" : "tuned", ops / dnn * 1e-9, dnn / ours, of_peak(ours).c_str(),
                  of_peak(dnn).c_str(), ok ? "same" : "DIFFER");
    }
  }
  std::printf("geometric mean of tunefarm / oneDNN: %.2f\n", std::exp(log_ratio / ratios));
  std::printf("ratios are GOPS over GOPS; ours/pk and dnn/pk: GOPS over threads x the one-thread dot-product peak\n");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return all_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return tf::bench::guarded_main("bench_int8_gemm", [&] { return run(argc, argv); });
}
