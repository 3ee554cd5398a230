#include "tests/compiler/kernel_harness.h"

#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "compiler/codegen_llvm.h"
#include "compiler/gpu.h"
#include "compiler/link.h"
#include "compiler/reference.h"
#include "compiler/schedule_templates.h"
#include "runtime/kernel_library.h"

namespace {
// The barrier of the block the calling thread emulates (run_gpu_emulated).
thread_local std::barrier<>* emulated_block = nullptr;
}  // namespace

// Called by kernels built from emulate_gpu_thread at each barrier (the test programs export
// it: ENABLE_EXPORTS).
extern "C" void tunefarm_emulated_barrier() { emulated_block->arrive_and_wait(); }

namespace tf::testing {
namespace fs = std::filesystem;

std::string Comparison::str() const {
  std::ostringstream os;
  os << "status " << status << ", max abs error " << check.max_abs_error << " at " << check.worst_index
     << " (tolerance " << check.tolerance << ")";
  return os.str();
}

std::vector<nlohmann::json> sample_configs(const Workload& w, const Target& t, int n) {
  OpGraph g = build_op(w);
  std::vector<nlohmann::json> out = {default_config(g, t)};
  std::vector<KnobSpec> space = knob_space(g, t);
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(w.canonical())));
  for (int tries = 0; static_cast<int>(out.size()) <= n && tries < 200; ++tries) {
    nlohmann::json c = nlohmann::json::object();
    for (const KnobSpec& k : space) c[k.name] = k.candidates[rng() % k.candidates.size()];
    c = complete_config(g, t, c);
    if (check_constraints(g, t, c).empty()) out.push_back(c);
  }
  return out;
}

std::string temp_dir() {
  static std::string dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "tunefarm-test-XXXXXX").string();
    std::string d = mkdtemp(tmpl.data());
    static struct Remove {
      std::string d;
      ~Remove() { std::error_code ec; fs::remove_all(d, ec); }
    } remove{d};
    return d;
  }();
  return dir;
}

std::unique_ptr<KernelLibrary> build_for_host(const ir::LoweredFunc& f) { return build_for(f, host_target()); }

std::unique_ptr<KernelLibrary> build_for(const ir::LoweredFunc& f, const Target& host) {
  static std::atomic<int> counter{0};
  std::string base = temp_dir() + "/k" + std::to_string(counter++);
  CodegenResult obj = codegen_llvm(f, host, CodegenOutput::Object);
  {
    std::ofstream o(base + ".o", std::ios::binary);
    o << obj.data;
  }
  link_shared_library(base + ".o", base + ".so", host, obj.uses_openmp, obj.uses_libm);
  return std::make_unique<KernelLibrary>(base + ".so", f.name);
}

Comparison run_and_compare(const OpGraph& g, const ir::LoweredFunc& f, uint64_t seed) {
  return run_and_compare(g, *build_for_host(f), seed);
}

namespace {

// The kernel's arguments for `g`: its inputs filled from `seed` on (fill_typed: as boards
// fill them), then its output filled with NaN (a kernel that skips an element cannot pass;
// an integer output with a byte pattern of its own).
std::vector<std::vector<float>> seeded_buffers(const OpGraph& g, uint64_t seed) {
  std::vector<std::vector<float>> bufs;
  for (const ir::Tensor& t : g.inputs) {
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    bufs.emplace_back(static_cast<size_t>(n));
    fill_typed(g.arg_dtype(t), bufs.back().data(), n, seed++);
  }
  int64_t out_n = 1;
  for (int64_t d : g.output->shape) out_n *= d;
  bufs.emplace_back(static_cast<size_t>(out_n), std::nanf(""));
  return bufs;
}

// The output (the last of `bufs`) against the reference on the inputs (the others).
Comparison compared(const OpGraph& g, const std::vector<std::vector<float>>& bufs, int status) {
  std::vector<const float*> inputs;
  for (size_t i = 0; i + 1 < bufs.size(); ++i) inputs.push_back(bufs[i].data());
  Comparison c;
  c.status = status;
  c.check = check_against_reference(g, inputs, bufs.back().data());
  return c;
}

}  // namespace

Comparison run_and_compare(const OpGraph& g, KernelLibrary& lib, uint64_t seed,
                           const std::vector<ir::Schedule::Packing>& packed) {
  std::vector<std::vector<float>> bufs = seeded_buffers(g, seed);
  const std::vector<std::vector<float>> values = bufs;  // the reference reads them as floats
  // Typed arguments travel as their type's elements, as a board passes them (and packed: the
  // layout moves whole 4-byte elements).
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    store_as(g.arg_dtype(g.inputs[i]), bufs[i].data(), static_cast<int64_t>(bufs[i].size()));
    for (const ir::Schedule::Packing& p : packed) {
      if (p.input == g.inputs[i]->name) bufs[i] = pack_layout(bufs[i], g.inputs[i]->shape, p.dim, p.block);
    }
  }
  std::vector<float*> args;
  for (auto& b : bufs) args.push_back(b.data());
  int status = lib.call(args);
  std::vector<std::vector<float>> checked(values.begin(), values.end() - 1);
  checked.push_back(std::move(bufs.back()));
  load_as(g.output->dtype.str(), checked.back().data(), static_cast<int64_t>(checked.back().size()));
  return compared(g, checked, status);
}

int emulate_gpu_kernel(const ir::LoweredFunc& f, const GpuLaunch& launch, std::vector<std::vector<float>>& bufs) {
  EmulatedKernel k = emulate_gpu_thread(f);
  std::unique_ptr<KernelLibrary> lib = build_for_host(k.func);
  // One per block, shared by its threads.
  std::vector<std::vector<float>> shared;
  for (const auto& [name, size] : k.shared) shared.emplace_back(static_cast<size_t>(size));
  const auto& grid = launch.grid;
  const auto& block = launch.block;
  const int64_t threads = launch.threads_per_block();
  std::atomic<int> status{0};
  for (int64_t bz = 0; bz < grid[2]; ++bz) {
    for (int64_t by = 0; by < grid[1]; ++by) {
      for (int64_t bx = 0; bx < grid[0]; ++bx) {
        for (std::vector<float>& s : shared) std::fill(s.begin(), s.end(), std::nanf(""));
        std::barrier<> sync(threads);
        std::vector<std::thread> workers;
        for (int64_t t = 0; t < threads; ++t) {
          workers.emplace_back([&, t] {
            std::vector<float> ids = {float(bx), float(by), float(bz), float(t % block[0]),
                                      float(t / block[0] % block[1]), float(t / (block[0] * block[1]))};
            std::vector<float*> args;
            for (auto& b : bufs) args.push_back(b.data());
            for (auto& s : shared) args.push_back(s.data());
            args.push_back(ids.data());
            emulated_block = &sync;
            if (int s = lib->call(args)) status = s;
          });
        }
        for (std::thread& w : workers) w.join();
      }
    }
  }
  return status;
}

Comparison run_gpu_emulated(const OpGraph& g, const ir::LoweredFunc& f, const Target& t, uint64_t seed,
                            int64_t max_blocks) {
  GpuProgram p = split_gpu_program(f);
  std::vector<std::vector<float>> bufs = seeded_buffers(g, seed);
  // Workspaces after the arguments, NaN as uninitialized device memory may be.
  for (const auto& [name, size] : p.workspaces) bufs.emplace_back(static_cast<size_t>(size), std::nanf(""));
  int status = 0;
  for (const ir::LoweredFunc& k : p.kernels) {
    GpuLaunch launch = check_gpu_kernel(k, t);
    int64_t blocks = launch.grid[0] * launch.grid[1] * launch.grid[2];
    if (blocks > max_blocks) {
      throw std::runtime_error(str("run_gpu_emulated: kernel ", k.name, " has ", blocks, " blocks (at most ",
                                   max_blocks, " here)"));
    }
    if (int s = emulate_gpu_kernel(k, launch, bufs)) status = s;
  }
  bufs.resize(g.inputs.size() + 1);
  return compared(g, bufs, status);
}

}  // namespace tf::testing
