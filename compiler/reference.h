// Plain reference implementations of every operator: the ground truth for tests and for
// correctness checks of tuned kernels. Written for clarity (the products row by row, the rows
// shared out over the cores, so that a tuner checks a large GEMM in a second); accumulation is in
// double so the reference is more accurate than any float32 kernel it checks.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/operators.h"
#include "compiler/workload.h"

namespace tf {

// `inputs` in call order (as build_op lists them); `output` has the output's size.
void reference_compute(const Workload& w, const std::vector<const float*>& inputs, float* output);

// How far a kernel's output is from the reference on the same inputs.
struct OutputCheck {
  double max_abs_error = 0;  // worst |output - reference| (OpGraph::check_relative: over max(1, |reference|)); NaN counts as infinite
  double tolerance = 0;      // allowed: 1e-5 + 2e-7 per term each output element sums
  int64_t worst_index = -1;
  bool ok() const { return max_abs_error <= tolerance; }
};

// The one correctness rule of tunefarm (tests, `tunefarm run`, `tunefarm farm measure`):
// computes the reference of `g` on `inputs` (call order) and compares `output` with it. The
// tolerance grows with the reduction size, as float32 accumulation error does for inputs in
// [-1, 1] (the range fill_random produces).
OutputCheck check_against_reference(const OpGraph& g, const std::vector<const float*>& inputs, const float* output);

// The same comparison with a reference output computed earlier (reference_compute of g's
// workload on the same inputs), for checking many candidates of one workload.
OutputCheck compare_with_reference(const OpGraph& g, const float* reference, const float* output);

}  // namespace tf
