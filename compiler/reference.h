// Plain reference implementations of every operator: the ground truth for tests and for
// correctness checks of tuned kernels. Written for clarity, not speed; accumulation is in
// double so the reference is more accurate than any float32 kernel it checks.
#pragma once

#include <vector>

#include "compiler/workload.h"

namespace tf {

// `inputs` in call order (as build_op lists them); `output` has the output's size.
void reference_compute(const Workload& w, const std::vector<const float*>& inputs, float* output);

}  // namespace tf
