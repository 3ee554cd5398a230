// matmul with tunefarm's default schedule (and, with --db, the tuned one) against OpenBLAS
// sgemm, measured in the same run, interleaved.
//
//   bench_matmul [--sizes 512,1024,2048 | --shapes 1x1000x1024,97x131x67,12x128x128x64]
//                [--threads 1,2] [--min-ms 300] [--db tuning.db]
//
// A shape of four extents BxMxNxK is batch_matmul, against one OpenBLAS sgemm per batch
// (0.3.21 has no batched sgemm).
// Prints GFLOPS of each and the ratio tunefarm / OpenBLAS for each shape and thread count
// (with --db also tuned / OpenBLAS and tuned / default), and checks that all computed the
// same C. It also measures one thread's fp32 FMA peak and prints OpenBLAS's share of it, the
// ceiling of any ratio against OpenBLAS. OpenBLAS runs at its best: the core it picked is
// printed, and if it fell back to an old generic core on a CPU with AVX2 or AVX-512 (it
// misdetects some new x86 CPUs as Prescott), the benchmark re-runs itself with
// OPENBLAS_CORETYPE set to the right one.
#include <cblas.h>
#include <strings.h>

#include <cctype>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
using tf::bench::fma_peak_gflops;
using tf::bench::median_seconds;
using tf::bench::parse_list;

namespace fs = std::filesystem;


// Re-executes with a corrected OPENBLAS_CORETYPE when OpenBLAS picked a generic old core.
void ensure_openblas_core(char** argv) {
  std::string core = openblas_get_corename();
  while (!core.empty() && std::isspace(static_cast<unsigned char>(core.back()))) core.pop_back();
  std::printf("openblas core: %s\n", core.c_str());
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  static const char* kWeak[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Banias"};
  bool weak = std::any_of(std::begin(kWeak), std::end(kWeak), [&](const char* w) { return core == w; });
  // 0.3.21 also takes new AVX-512 CPUs (Zen 4/5) for Haswell and leaves half the width unused.
  if (cpu_has("avx512f") && strcasecmp(core.c_str(), "Haswell") == 0) weak = true;
  if (!weak) return;
  const char* better = cpu_has("avx512f") ? "SkylakeX" : cpu_has("avx2") ? "Haswell" : nullptr;
  if (!better || core == better) return;
  std::printf("openblas picked %s on a CPU with %s; re-running with OPENBLAS_CORETYPE=%s\n", core.c_str(),
              std::strcmp(better, "SkylakeX") == 0 ? "AVX-512" : "AVX2", better);
  std::fflush(stdout);
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);
  std::perror("execv");
}

}  // namespace

static int run(int argc, char** argv) {
  std::vector<int> sizes = {512, 1024, 2048}, threads = {1, 2};
  std::vector<std::array<int, 4>> shapes;  // batch (0: plain matmul), M, N, K
  std::string db_path;
  double min_ms = 300;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: bench_matmul [--sizes 512,1024,2048 | --shapes MxNxK|BxMxNxK,...] [--threads 1,2] "
                  "[--min-ms 300] [--db tuning.db]\n");
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
        int bt, m, n, k;
        char end;
        if (std::sscanf(item.c_str(), "%dx%dx%dx%d%c", &bt, &m, &n, &k, &end) == 4 && bt > 0 && m > 0 && n > 0 &&
            k > 0) {
          shapes.push_back({bt, m, n, k});
        } else if (std::sscanf(item.c_str(), "%dx%dx%d%c", &m, &n, &k, &end) == 3 && m > 0 && n > 0 && k > 0) {
          shapes.push_back({0, m, n, k});
        } else {
          std::fprintf(stderr, "--shapes: %s is not MxNxK (matmul) or BxMxNxK (batch_matmul) of positive extents\n",
                       item.c_str());
          return 2;
        }
      }
    } else if (a == "--db") db_path = argv[i + 1];
    else if (a == "--threads") threads = parse_list(argv[i + 1]);
    else if (a == "--min-ms") min_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  ensure_openblas_core(argv);
  tf::Target target = tf::host_target();
  std::printf("target: %s\n", target.str().c_str());
  double peak = fma_peak_gflops();
  if (peak > 0) std::printf("fp32 FMA peak of one thread, measured: %.1f GFLOPS\n", peak);
  std::unique_ptr<tf::db::Database> db;
  if (!db_path.empty()) db = tf::db::open_database(db_path, tf::db::OpenMode::ReadOnly);
  fs::path dir = fs::temp_directory_path() / ("tunefarm-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);

  if (shapes.empty()) {
    for (int n : sizes) shapes.push_back({0, n, n, n});
  }
  std::printf("%16s %7s %12s %12s %12s %9s %9s %9s %9s\n", "shape", "threads", "default GF/s", "tuned GF/s",
              "openblas GF/s", "def/blas", "tuned/blas", "tuned/def", "blas/peak");
  bool all_ok = true;
  double log_ratio = 0;
  int ratios = 0;
  for (auto [bt, m, n, kk] : shapes) {
    // batch_matmul: OpenBLAS has no batched sgemm in 0.3.21; it runs one sgemm per batch.
    int batches = std::max(bt, 1);
    std::string mnk = "M=" + std::to_string(m) + ",N=" + std::to_string(n) + ",K=" + std::to_string(kk) + ")";
    std::string spec = bt ? "batch_matmul(B=" + std::to_string(bt) + "," + mnk : "matmul(" + mnk;
    tf::Workload w = tf::parse_workload(spec);
    tf::ConfigChoice tuned = tf::choose_config(db.get(), w, target);
    auto build = [&](const nlohmann::json& config, const std::string& tag) {
      tf::CompiledKernel k = tf::compile_kernel(w, target, config, "bench", "");
      std::string so = (dir / (tag + std::to_string(bt) + "x" + std::to_string(m) + "x" + std::to_string(n) + "x" +
                               std::to_string(kk) + ".so"))
                           .string();
      tf::write_kernel(k, tf::EmitKind::SharedLibrary, so);
      return std::make_unique<tf::KernelLibrary>(so, k.name);
    };
    auto def = build(nlohmann::json(), "def");
    auto tun = tuned.config.is_null() ? nullptr : build(tuned.config, "tuned");
    size_t sa = size_t(m) * kk, sb = size_t(kk) * n, sc = size_t(m) * n;
    std::vector<float> a(sa * batches), b(sb * batches), c(sc * batches), c2(sc * batches), c_ref(sc * batches);
    tf::fill_random(a.data(), static_cast<int64_t>(a.size()), 1);
    tf::fill_random(b.data(), static_cast<int64_t>(b.size()), 2);
    double flops = 2.0 * batches * m * n * kk;
    for (int t : threads) {
      omp_set_num_threads(t);
      openblas_set_num_threads(t);
      // Interleaved: three rounds of each, the best round's median kept for each.
      double ours = INFINITY, blas = INFINITY, best = INFINITY;
      for (int round = 0; round < 3; ++round) {
        ours = std::min(ours, median_seconds([&] { def->call({a.data(), b.data(), c.data()}); }, min_ms / 3));
        blas = std::min(blas, median_seconds([&] {
          for (int i = 0; i < batches; ++i) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, kk, 1.0f, a.data() + i * sa, kk,
                        b.data() + i * sb, n, 0.0f, c_ref.data() + i * sc, n);
          }
        }, min_ms / 3));
        if (tun) best = std::min(best, median_seconds([&] { tun->call({a.data(), b.data(), c2.data()}); }, min_ms / 3));
      }
      double max_err = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        max_err = std::max(max_err, double(std::fabs(c[i] - c_ref[i])));
        if (tun) max_err = std::max(max_err, double(std::fabs(c2[i] - c_ref[i])));
      }
      bool ok = max_err <= 1e-3 * std::sqrt(double(kk));
      all_ok &= ok;
      char shape[48];
      if (bt) std::snprintf(shape, sizeof shape, "%dx%dx%dx%d", bt, m, n, kk);
      else std::snprintf(shape, sizeof shape, "%dx%dx%d", m, n, kk);
      double top = tun ? std::min(best, ours) : ours;
      log_ratio += std::log(blas / top);
      ++ratios;
      char of_peak[16] = "-";
      if (peak > 0) std::snprintf(of_peak, sizeof of_peak, "%.2f", flops / blas * 1e-9 / (peak * t));
      if (tun) {
        std::printf("%16s %7d %12.1f %12.1f %12.1f %9.2f %9.2f %9.2f %9s%s\n", shape, t, flops / ours * 1e-9,
                    flops / best * 1e-9, flops / blas * 1e-9, blas / ours, blas / best, ours / best, of_peak,
                    ok ? "" : "  RESULTS DIFFER");
      } else {
        std::printf("%16s %7d %12.1f %12s %12.1f %9.2f %9s %9s %9s%s\n", shape, t, flops / ours * 1e-9, "-",
                    flops / blas * 1e-9, blas / ours, "-", "-", of_peak, ok ? "" : "  RESULTS DIFFER");
      }
    }
  }
  std::printf("geometric mean of (best of default and tuned) / OpenBLAS: %.2f\n", std::exp(log_ratio / ratios));
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::printf("ratios are GFLOPS over GFLOPS; tuned = the config a compile takes from --db (%s); blas/peak = "
              "OpenBLAS's GFLOPS over threads x the one-thread FMA peak\n",
              db_path.empty() ? "none given" : db_path.c_str());
  return all_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return tf::bench::guarded_main("bench_matmul", [&] { return run(argc, argv); });
}
