// Test helpers: compile a lowered kernel with the real LLVM pipeline and lld, load it, run it
// on seeded inputs and compare with the reference implementation.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/operators.h"
#include "compiler/target.h"

namespace tf::testing {

struct Comparison {
  double max_abs_error = 0;  // worst |kernel - reference|
  double tolerance = 0;      // allowed, from the reduction size
  int64_t worst_index = -1;
  int status = 0;            // the kernel's return value
  bool ok() const { return status == 0 && max_abs_error <= tolerance; }
  std::string str() const;
};

// Compiles `f` for the host, runs it on inputs seeded from `seed`, compares with the reference.
Comparison run_and_compare(const OpGraph& g, const ir::LoweredFunc& f, uint64_t seed = 7);

// A fresh directory for one test's files, removed at exit.
std::string temp_dir();

// Number of terms each output element sums (C*R*S, K, ...), for the tolerance.
int64_t reduction_size(const OpGraph& g);

}  // namespace tf::testing
