// Test helpers: compile a lowered kernel with the real LLVM pipeline and lld, load it, run it
// on seeded inputs and compare with the reference implementation.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "compiler/gpu.h"
#include "compiler/ir.h"
#include "compiler/operators.h"
#include "compiler/schedule.h"
#include "compiler/reference.h"
#include "compiler/target.h"
#include "runtime/kernel_library.h"
#include "tests/sanitized.h"

namespace tf::testing {

struct Comparison {
  OutputCheck check;  // against the reference, by the rule every tunefarm check uses
  int status = 0;     // the kernel's return value
  bool ok() const { return status == 0 && check.ok(); }
  std::string str() const;
};

// Compiles `f` for the host with the real pipeline (LLVM, lld) and loads it.
std::unique_ptr<KernelLibrary> build_for_host(const ir::LoweredFunc& f);
// The same for another CPU target of this machine's architecture (its code must run here).
std::unique_ptr<KernelLibrary> build_for(const ir::LoweredFunc& f, const Target& t);

// Compiles `f` for the host, runs it on inputs seeded from `seed`, compares with the reference.
Comparison run_and_compare(const OpGraph& g, const ir::LoweredFunc& f, uint64_t seed = 7);
// The same with a kernel built already (from `g`); callable from several threads at once.
// Inputs the kernel takes packed (CompiledKernel::packed) are passed so, as a board does.
Comparison run_and_compare(const OpGraph& g, KernelLibrary& lib, uint64_t seed = 7,
                           const std::vector<ir::Schedule::Packing>& packed = {});

// Runs the GPU function `f` for target `t` on the CPU: each of its kernels in turn
// (compiler/gpu.h split_gpu_program; workspaces start as NaN), a block's GPU threads as fibers
// on the calling thread (emulate_gpu_thread), blocks one after another: each thread copies only
// its share of shared tiles, barriers synchronize (the threads run one after another between
// them, upwards in even blocks and downwards in odd ones: where a barrier is missing, a thread
// reads what the others have not written yet, or overwrites what they have not read), shared
// memory starts as NaN at each block (a read of an element no thread wrote shows in the output),
// and a barrier some threads never reach stops the program (a deadlock, named); compares with
// the reference. Small grids only: a kernel of more than `max_blocks` blocks is a
// std::runtime_error.
Comparison run_gpu_emulated(const OpGraph& g, const ir::LoweredFunc& f, const Target& t, uint64_t seed = 7,
                            int64_t max_blocks = 64);

// One kernel of a GPU program on the CPU, as run_gpu_emulated runs each: blocks one after
// another, each with its threads as fibers; `bufs` are the kernel's arguments. Returns its status.
int emulate_gpu_kernel(const ir::LoweredFunc& f, const GpuLaunch& launch, std::vector<std::vector<float>>& bufs);

// The default config of `w` on `t` and up to `n` random ones from its knob space that pass the
// constraints (the same ones each run: seeded by the workload's text); under the sanitizers
// the default and one (tests/sanitized.h).
std::vector<nlohmann::json> sample_configs(const Workload& w, const Target& t, int n);


// How often `what` occurs in `text` (instructions in assembly).
size_t count_of(const std::string& text, const std::string& what);

// Expects `f` to throw a UserError whose message contains `part`.
inline void expect_user_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no UserError; expected one containing: " << part;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// A fresh directory for one test's files, removed at exit.
std::string temp_dir();

}  // namespace tf::testing
