// matmul with tunefarm's default schedule against OpenBLAS sgemm, measured in the same run.
//
//   bench_matmul [--sizes 512,1024,2048] [--threads 1,2] [--min-ms 300]
//
// Prints GFLOPS of both and the ratio tunefarm / OpenBLAS for each size and thread count,
// and checks that both computed the same C. OpenBLAS runs at its best: the core it picked is
// printed, and if it fell back to an old generic core on a CPU with AVX2 or AVX-512 (it
// misdetects some new x86 CPUs as Prescott), the benchmark re-runs itself with
// OPENBLAS_CORETYPE set to the right one.
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/driver.h"
#include "proto/kernel_library.h"

namespace {

namespace fs = std::filesystem;

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// Re-executes with a corrected OPENBLAS_CORETYPE when OpenBLAS picked a generic old core.
void ensure_openblas_core(char** argv) {
  std::string core = openblas_get_corename();
  std::printf("openblas core: %s\n", core.c_str());
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  static const char* kWeak[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Banias"};
  bool weak = std::any_of(std::begin(kWeak), std::end(kWeak), [&](const char* w) { return core == w; });
  if (!weak) return;
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : nullptr;
  if (!better) return;
  std::printf("openblas picked %s on a CPU with %s; re-running with OPENBLAS_CORETYPE=%s\n", core.c_str(),
              std::strcmp(better, "SkylakeX") == 0 ? "AVX-512" : "AVX2", better);
  std::fflush(stdout);
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);
  std::perror("execv");
}

template <typename F>
double median_seconds(F&& run, double min_ms) {
  run();  // warm-up
  std::vector<double> samples;
  auto start_all = std::chrono::steady_clock::now();
  while (samples.size() < 5 ||
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_all).count() < min_ms) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (samples.size() >= 200) break;
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {512, 1024, 2048}, threads = {1, 2};
  double min_ms = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--sizes") sizes = parse_list(argv[i + 1]);
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
  fs::path dir = fs::temp_directory_path() / ("tunefarm-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);

  std::printf("%6s %7s %14s %14s %8s\n", "size", "threads", "tunefarm GF/s", "openblas GF/s", "ratio");
  bool all_ok = true;
  for (int n : sizes) {
    std::string spec = "matmul(M=" + std::to_string(n) + ",N=" + std::to_string(n) + ",K=" + std::to_string(n) + ")";
    tf::CompiledKernel k = tf::compile_kernel(tf::parse_workload(spec), target, nlohmann::json(), "default", "");
    std::string so = (dir / ("mm" + std::to_string(n) + ".so")).string();
    tf::write_kernel(k, tf::EmitKind::SharedLibrary, so);
    tf::KernelLibrary lib(so, k.name);
    size_t elems = static_cast<size_t>(n) * n;
    std::vector<float> a(elems), b(elems), c(elems), c_ref(elems);
    tf::fill_random(a.data(), static_cast<int64_t>(elems), 1);
    tf::fill_random(b.data(), static_cast<int64_t>(elems), 2);
    double flops = 2.0 * n * n * n;
    for (int t : threads) {
      omp_set_num_threads(t);
      openblas_set_num_threads(t);
      double ours = median_seconds([&] { lib.call({a.data(), b.data(), c.data()}); }, min_ms);
      double blas = median_seconds([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c_ref.data(), n);
      }, min_ms);
      double max_err = 0;
      for (size_t i = 0; i < elems; ++i) max_err = std::max(max_err, double(std::fabs(c[i] - c_ref[i])));
      bool ok = max_err <= 1e-3 * std::sqrt(double(n));
      all_ok &= ok;
      std::printf("%6d %7d %14.1f %14.1f %8.2f%s\n", n, t, flops / ours * 1e-9, flops / blas * 1e-9, blas / ours,
                  ok ? "" : "  RESULTS DIFFER");
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::printf("ratio = tunefarm GFLOPS / OpenBLAS GFLOPS (default schedule, untuned)\n");
  return all_ok ? 0 : 1;
}
