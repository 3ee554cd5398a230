// The lowering pipeline: Schedule -> verified loop IR, as one straight-line list of passes.
//
// Every pass has a name and a line of help (lowering_passes()), and the same wrapper runs
// each one, so any pass can be skipped, timed, dumped and verified from the command line:
//   tunefarm compile ... --skip-pass unroll_loops --dump-pass all --time-passes
// Skipping a pass never changes the results a kernel computes, only how fast it runs:
// loops that a skipped pass would have unrolled or vectorized run as serial loops.
#pragma once

#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/schedule.h"

namespace tf {

struct PassInfo {
  const char* name;
  const char* help;
  bool skippable;
};

// The passes in the order they run.
const std::vector<PassInfo>& lowering_passes();

struct LowerOptions {
  std::set<std::string> skip;         // pass names; an unknown name is a UserError
  std::set<std::string> dump;         // pass names whose output is printed, or "all"
  std::ostream* dump_stream = nullptr;
  bool verify_each = true;            // verify after every pass, not only at the end
  // Stops after this pass (the IR is then not ready for code generation); empty: run all.
  // The cost model reads loops before unrolling and vectorizing remove them.
  std::string stop_after;
};

struct PassTiming {
  std::string pass;
  double ms;
};

struct LowerResult {
  ir::LoweredFunc func;
  std::vector<PassTiming> timings;
  std::vector<std::string> notes;  // e.g. loops left serial, with the reason
};

// UserError naming the first pass name in `options` (skip, dump, stop_after) that is not a
// pass ("all" aside for dump), or a skip of a pass that always runs. lower() checks its options;
// callers that lower many kernels with one set (a model) check it once, up front.
void check_lower_options(const LowerOptions& options);

LowerResult lower(ir::Schedule& sch, const std::vector<ir::Tensor>& inputs, const std::string& name,
                  const LowerOptions& options = {});

}  // namespace tf
