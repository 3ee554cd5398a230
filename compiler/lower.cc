#include "compiler/lower.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "base/error.h"
#include "compiler/early_loads.h"
#include "compiler/ir_mutator.h"
#include "compiler/ir_printer.h"
#include "compiler/merge_barriers.h"
#include "compiler/partition_loops.h"
#include "compiler/schedule_ops.h"
#include "compiler/simplify.h"
#include "compiler/tensorize.h"
#include "compiler/unroll_loops.h"
#include "compiler/vectorize_loops.h"
#include "compiler/verify.h"

namespace tf {

const std::vector<PassInfo>& lowering_passes() {
  static const std::vector<PassInfo> passes = {
      {"schedule_ops", "build loop nests from the schedule, infer bounds, flatten buffers", false},
      {"simplify", "fold constants, cancel index terms, drop proven guards and unit loops", true},
      {"tensorize", "replace loops marked by Stage::tensorize with warp-level products", false},
      {"partition_loops", "peel shifted last tiles off loops so the main part indexes aligned",
       true},
      {"unroll_loops", "replace loops marked unrolled by copies of their body", true},
      {"pair_fragments", "load two tiles' fragments of B by one four-matrix ldmatrix", true},
      {"wgmma_waits",
       "wait for runs of warpgroup-level products (wgmma) before anything else reads them", false},
      {"merge_barriers", "drop a block barrier right after another, with nothing between them",
       true},
      {"vectorize_loops", "turn loops marked vectorized into vector operations", true},
      {"simplify_vectors", "simplify again, folding ramps into contiguous accesses", true},
      {"early_loads", "load a GPU block's inputs that its barriers hold up before the barriers",
       true},
  };
  return passes;
}

void check_lower_options(const LowerOptions& options) {
  auto find = [](const std::string& name) -> const PassInfo* {
    for (const PassInfo& p : lowering_passes()) {
      if (name == p.name) return &p;
    }
    return nullptr;
  };
  for (const std::string& s : options.skip) {
    const PassInfo* p = find(s);
    if (!p) throw UserError(str("unknown pass '", s, "' (see tunefarm compile --list-passes)"));
    if (!p->skippable) throw UserError(str("pass ", s, " cannot be skipped"));
  }
  for (const std::string& s : options.dump) {
    if (s != "all" && !find(s))
      throw UserError(
          str("unknown pass '", s, "' to dump (see tunefarm compile --list-passes, or all)"));
  }
  if (!options.stop_after.empty() && !find(options.stop_after))
    throw UserError(str("unknown pass '", options.stop_after, "' to stop after"));
}

LowerResult lower(ir::Schedule& sch, const std::vector<ir::Tensor>& inputs, const std::string& name,
                  const LowerOptions& options) {
  check_lower_options(options);

  LowerResult r;
  bool vectors_lowered = false;
  // Runs one pass over the function body with timing, dumping and verification.
  auto run = [&](const char* pass, const std::function<ir::Stmt(const ir::Stmt&)>& fn) {
    bool skipped = options.skip.count(pass) > 0;
    auto start = std::chrono::steady_clock::now();
    if (!skipped) r.func.body = fn(r.func.body);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    r.timings.push_back({pass, ms});
    if (options.verify_each) ir::verify(r.func, pass, vectors_lowered);
    if (options.dump_stream && (options.dump.count("all") || options.dump.count(pass))) {
      *options.dump_stream << "// after " << pass << (skipped ? " (skipped)" : "") << "\n"
                           << ir::to_string(r.func);
    }
  };

  auto start = std::chrono::steady_clock::now();
  r.func = ir::schedule_to_loops(sch, inputs, name);
  r.timings.push_back({"schedule_ops",
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()});
  if (options.dump_stream && (options.dump.count("all") || options.dump.count("schedule_ops"))) {
    *options.dump_stream << "// after schedule_ops\n" << ir::to_string(r.func);
  }
  if (options.verify_each) ir::verify(r.func, "schedule_ops", false);
  auto done = [&](const char* pass) { return options.stop_after == pass; };
  if (done("schedule_ops")) return r;

  // Simplify first: unrolling and vectorizing want constant extents and clean indices.
  run("simplify", [](const ir::Stmt& s) { return ir::simplify(s); });
  if (done("simplify")) return r;
  // Before any loop is unrolled: the marked nests as lowering built them.
  std::vector<ir::TensorizeMark> marks;
  for (ir::Stage* st : sch.stages()) {
    for (const auto& [var, intrinsic] : st->tensorized()) marks.push_back({st->name(), var, intrinsic});
  }
  run("tensorize", [&](const ir::Stmt& s) { return ir::tensorize(s, marks); });
  if (done("tensorize")) return r;
  // Peel shifted tail tiles, then simplify so the main loops lose their mins.
  run("partition_loops", [](const ir::Stmt& s) { return ir::simplify(ir::partition_loops(s)); });
  if (done("partition_loops")) return r;
  // Unroll before vectorizing so an unrolled loop around a vector loop yields straight-line
  // vector code with constant offsets, which LLVM keeps in registers.
  run("unroll_loops", [](const ir::Stmt& s) { return ir::unroll_loops(s); });
  if (done("unroll_loops")) return r;
  run("pair_fragments", [](const ir::Stmt& s) { return ir::pair_fragment_loads(s); });
  if (done("pair_fragments")) return r;
  run("wgmma_waits", [](const ir::Stmt& s) { return ir::insert_wgmma_waits(s); });
  if (done("wgmma_waits")) return r;
  run("merge_barriers", [](const ir::Stmt& s) { return ir::merge_barriers(s); });
  if (done("merge_barriers")) return r;
  if (options.skip.count("vectorize_loops")) r.func.body = ir::devectorize_loops(r.func.body);
  vectors_lowered = true;
  run("vectorize_loops", [&](const ir::Stmt& s) { return ir::vectorize_loops(s, &r.notes); });
  // Vectorizing leaves Ramp arithmetic behind; folding it exposes contiguous accesses.
  run("simplify_vectors", [](const ir::Stmt& s) { return ir::simplify(s); });
  if (done("simplify_vectors")) return r;
  // The inputs the kernel reads and never writes.
  std::set<std::string> read_only;
  for (const ir::BufferArg& a : r.func.args) {
    if (a.role == ir::ArgRole::Input) read_only.insert(a.name);
  }
  ir::post_order(
      r.func.body, [](const ir::Expr&) {},
      [&](const ir::Stmt& s) {
        if (const ir::Store* st = s.as<ir::Store>()) read_only.erase(st->buffer);
      });
  run("early_loads", [&](const ir::Stmt& s) { return ir::early_loads(s, read_only); });
  ir::verify(r.func, "lower", vectors_lowered);
  return r;
}

}  // namespace tf
