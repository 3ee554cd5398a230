// The `tunefarm` command line: one binary, one subcommand per task.
//
// Exit status: 0 on success, 2 for a mistake in what the user asked (bad workload, target,
// config or option; the message names it), 1 when the world failed (I/O, linking, a kernel
// that returned an error or computed a wrong answer).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <cmath>
#include <optional>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "compiler/driver.h"
#include "base/error.h"
#include "base/huge_pages.h"
#include "compiler/ir_printer.h"
#include "compiler/reference.h"
#include "compiler/schedule_templates.h"
#include "db/database.h"
#include "base/json_limits.h"
#include "cli/common.h"
#include "cli/farm_command.h"
#include "cli/model_command.h"
#include "cli/query_command.h"
#include "cli/service_command.h"
#include "service/service_client.h"
#include "cli/tune_command.h"
#include "tuner/config_space.h"
#include "tuner/measure.h"
#include "tuner/runner.h"
#include "tuner/tuning_records.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kDefaultTarget = "llvm -mcpu=native";

json parse_config_arg(const std::string& arg, const char* option = "--config") {
  if (arg.empty()) return json();
  std::string text = arg;
  if (arg[0] == '@') {
    std::ifstream f(arg.substr(1));
    if (!f) throw UserError(str(option, " ", arg, ": cannot read file ", arg.substr(1)));
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  try {
    return parse_json_bounded(text);
  } catch (const json::parse_error& e) {
    throw UserError(str(option, " ", arg, ": not valid JSON (", e.what(), ")"));
  } catch (const JsonRefused& e) {
    throw UserError(str(option, " ", arg, ": ", e.what()));
  }
}

struct CompileArgs {
  std::string model;
  int opt_level = 2;
  std::vector<std::string> disable;
  std::string workload, target = kDefaultTarget, config, name, emit = "so", out, db, libdevice, rocm_device_libs;
  std::vector<std::string> skip, dump;
  bool time_passes = false, list_passes = false, no_db = false, as_json = false;
  bool emulate_gpu = false;  // --model for a GPU target: its kernels run serially here
  bool pad_batch = false;    // --model: fewer rows of axis 0 may run a bucket padded
  cli::ServerArgs server;  // --server: the tuning service's database instead of a file
  std::string max_memory;  // --model: the memory budget
  std::string precision = "fp32";  // --model: --precision
  cli::DimArgs dims;               // --model: --dim, --input-shape
};

// The tuning database for a compile's lookup, read-only. The default one (from
// $TUNEFARM_DB or the home folder) may not exist yet: a compile never creates it, and then
// there is nothing tuned. A --db that names no file is a mistake.
std::unique_ptr<db::Database> lookup_database(const std::string& flag, bool disabled) {
  if (disabled) return nullptr;
  std::string path = db::database_path(flag);
  if (!std::filesystem::exists(path)) {
    if (!flag.empty()) throw UserError(str("--db ", flag, ": no tuning database at ", path));
    return nullptr;
  }
  return db::open_database(path, db::OpenMode::ReadOnly);
}

// The config a compile uses: --config, else the best tuned one, else the default, with one
// warning naming the workload and target unless the caller asked for no database at all.
ConfigChoice resolve_config(const std::string& config_arg, db::Database* db, const Workload& w,
                            const Target& t, bool no_db) {
  ConfigChoice c;
  c.config = parse_config_arg(config_arg);
  if (!c.config.is_null()) {
    c.source = "given";
    return c;
  }
  c = choose_config(db, w, t);
  if (c.config.is_null() && !no_db) {
    std::fprintf(stderr, "warning: no tuned config for %s on %s; using the default schedule\n",
                 w.canonical().c_str(), t.str().c_str());
  }
  return c;
}

int cmd_compile(const CompileArgs& a) {
  if (a.list_passes) {
    for (const PassInfo& p : lowering_passes()) {
      std::printf("%-18s %s%s\n", p.name, p.help, p.skippable ? "" : " (always runs)");
    }
    return 0;
  }
  if (!a.model.empty()) {
    if (!a.workload.empty()) throw UserError("compile: give --workload or --model, not both");
    if (!a.config.empty() || a.emit != "so" || !a.name.empty() || !a.dump.empty() ||
        a.time_passes) {
      throw UserError(
          "compile --model takes --target, --db/--no-db or --server, -O, --disable-pass, "
          "--skip-pass, "
          "--precision, --dim, --input-shape, --json and -o "
          "(--config, --emit, --name, --dump-pass and --time-passes are for single workloads)");
    }
    if (a.server.given() && (!a.db.empty() || a.no_db)) {
      throw UserError("--server names the database to take the configs from: it excludes --db and --no-db");
    }
    std::unique_ptr<db::Database> db = a.server.given() ? open_remote_database(cli::service_endpoint(a.server))
                                                        : lookup_database(a.db, a.no_db);
    cli::ModelCompileArgs m{a.model,     a.target, a.out,       a.disable,    a.opt_level,
                            a.as_json,   a.no_db,  db.get(),    a.max_memory, a.emulate_gpu,
                            a.precision, a.dims,   a.pad_batch, a.skip};
    return cli::compile_model_file(m);
  }
  if (a.workload.empty()) throw UserError("--workload (or --model) is required");
  cli::refuse_precision_without_model(a.precision);
  if (a.dims.given())
    throw UserError("--dim and --input-shape are for --model (a workload's sizes are in its spec)");
  if (!a.max_memory.empty()) throw UserError("--max-memory is for --model (a whole model)");
  if (a.emulate_gpu) throw UserError("--emulate-gpu is for --model (a whole model)");
  if (a.pad_batch) throw UserError("--pad-batch is for --model (a whole model)");
  if (a.out.empty()) throw UserError("-o OUT is required");
  // Both are read by code generation.
  if (!a.libdevice.empty()) setenv("TUNEFARM_LIBDEVICE", a.libdevice.c_str(), 1);
  if (!a.rocm_device_libs.empty()) setenv("TUNEFARM_ROCM_DEVICE_LIBS", a.rocm_device_libs.c_str(), 1);
  Workload w = parse_workload(a.workload);
  Target t = parse_target(a.target);
  EmitKind kind = parse_emit_kind(a.emit);
  bool to_stdout = a.out == "-";
  if (to_stdout && (kind == EmitKind::SharedLibrary || kind == EmitKind::Object)) {
    throw UserError(str("-o - (stdout) takes the text outputs (--emit loop-ir, llvm, asm), not --emit ", a.emit,
                        ": name a file"));
  }
  if (to_stdout && a.as_json) throw UserError("--json describes the written files; it cannot share stdout with -o -");
  LowerOptions opts;
  opts.skip = {a.skip.begin(), a.skip.end()};
  opts.dump = {a.dump.begin(), a.dump.end()};
  opts.dump_stream = &std::cerr;
  if (a.server.given() && (!a.db.empty() || a.no_db)) {
    throw UserError("--server names the database to take the config from: it excludes --db and --no-db");
  }
  std::unique_ptr<db::Database> db = a.server.given() && a.config.empty()
                                         ? open_remote_database(cli::service_endpoint(a.server))
                                         : lookup_database(a.db, a.no_db || !a.config.empty());
  ConfigChoice choice = resolve_config(a.config, db.get(), w, t, a.no_db);
  CompiledKernel k = compile_kernel(w, t, choice.config, choice.source, a.name, opts);
  k.tuned_from = choice.tuned_from;
  for (const std::string& n : k.lowered.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  if (to_stdout) {
    std::fputs(kernel_text(k, kind).c_str(), stdout);
  } else {
    write_kernel(k, kind, a.out);
  }
  if (a.time_passes) {
    for (const PassTiming& p : k.lowered.timings) std::fprintf(stderr, "pass %-18s %8.3f ms\n", p.pass.c_str(), p.ms);
  }
  if (to_stdout) return 0;
  if (a.as_json) {
    json out = kernel_metadata(k);
    out["output"] = fs::absolute(a.out).string();
    out["emit"] = a.emit;
    if (kind == EmitKind::SharedLibrary) out["sidecar"] = fs::absolute(a.out + ".json").string();
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("wrote %s%s\n", a.out.c_str(), kind == EmitKind::SharedLibrary ? (" and " + a.out + ".json").c_str() : "");
  return 0;
}

int cmd_describe(const std::string& spec, const std::string& target, bool as_json) {
  Workload w = parse_workload(spec);
  OpGraph g = build_op(w);
  Target t = parse_target(target);
  json d = {{"workload", w.canonical()}, {"op", w.op}, {"args", describe_args(g)}, {"flops", g.flops},
            {"target", t.str()}};
  std::optional<ConfigSpace> space;
  if (lookup_template(w, t)) {
    space.emplace(w, t);
    d["template"] = space->template_id();
    d["default_config"] = default_config(g, t);
    d["space"] = space->to_json();
  }
  if (as_json) {
    std::printf("%s\n", d.dump(2).c_str());
    return 0;
  }
  std::printf("workload  %s\nflops     %lld\nargs (call order):\n", w.canonical().c_str(),
              static_cast<long long>(g.flops));
  int i = 0;
  for (const json& arg : d["args"]) {
    std::string shape;
    for (const json& s : arg["shape"]) shape += (shape.empty() ? "" : ", ") + std::to_string(s.get<int64_t>());
    std::printf("  %d  %-8s %-6s %s[%s]\n", i++, arg["name"].get<std::string>().c_str(),
                arg["role"].get<std::string>().c_str(), arg["dtype"].get<std::string>().c_str(), shape.c_str());
  }
  if (!space) {
    std::printf("target    %s: no schedule template for %s%s yet\n", t.short_str().c_str(), w.op.c_str(),
                w.types.is_float32() ? "" : (" of " + w.types.str()).c_str());
    return 0;
  }
  std::printf("template  %s on %s\ndefault   %s\n", space->template_id().c_str(), t.short_str().c_str(),
              d["default_config"].dump().c_str());
  std::printf("space     %llu points, %s%llu worth building (the rest break the register or unroll budget)\nknobs:\n",
              static_cast<unsigned long long>(space->size()), space->valid_size_exact() ? "" : "about ",
              static_cast<unsigned long long>(space->valid_size()));
  for (const KnobSpec& k : space->knobs()) {
    std::string c;
    for (const json& v : k.candidates) c += (c.empty() ? "" : " ") + (v.is_string() ? v.get<std::string>() : v.dump());
    std::printf("  %-10s %-8s %s\n  %-10s %-8s %zu: %s\n", k.name.c_str(), knob_kind_name(k.kind), k.help.c_str(), "", "",
                k.candidates.size(), c.c_str());
  }
  return 0;
}

struct RunArgs {
  std::string workload, config, db, baseline;
  MeasureOptions measure;
  bool as_json = false, no_db = false;
};

// Removes the build folders of earlier runs whose process is gone (killed while compiling):
// `run -w`'s tunefarm-run-<pid> and `run --model M.onnx`'s tunefarm-model-<pid>.
void remove_stale_run_dirs() {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    std::string name = e.path().filename().string();
    size_t dash = name.rfind('-');
    if (dash == std::string::npos ||
        (name.rfind("tunefarm-run-", 0) != 0 && name.rfind("tunefarm-model-", 0) != 0)) {
      continue;
    }
    std::string pid = name.substr(dash + 1);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(std::stoi(pid), 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(e.path(), ec);
  }
}

// Compiles for this machine, then times and checks the kernel exactly as `tune --local` and
// the boards do: in a tunefarm-board-runner process of its own (tuner/runner.h).
int cmd_run(const RunArgs& a) {
  if (a.workload.empty()) throw UserError("--workload (or --model) is required");
  cli::check_measure_options(a.measure);
  Workload w = parse_workload(a.workload);
  Target t = host_target();
  // Open (creating if needed) the database first: a bad --db fails before any work.
  std::unique_ptr<db::Database> db = a.no_db ? nullptr : db::open_database(db::database_path(a.db));
  ConfigChoice choice = resolve_config(a.config, db.get(), w, t, a.no_db);
  LocalRunner runner;
  auto compile_start = std::chrono::steady_clock::now();
  CompiledKernel k = compile_kernel(w, t, choice.config, choice.source, "");
  k.tuned_from = choice.tuned_from;
  remove_stale_run_dirs();
  fs::path dir = fs::temp_directory_path() / ("tunefarm-run-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() { std::error_code ec; fs::remove_all(d, ec); }
  } cleanup{dir};
  std::string so = (dir / "kernel.so").string();
  write_kernel(k, EmitKind::SharedLibrary, so);
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  // --baseline: a second kernel of the workload, timed interleaved with this one.
  std::optional<CompiledKernel> base;
  std::string base_so;
  if (!a.baseline.empty()) {
    json bc = a.baseline == "default" ? json() : parse_config_arg(a.baseline, "--baseline");
    try {
      base = compile_kernel(w, t, bc, bc.is_null() ? "default" : "given", "");
    } catch (const UserError& e) {
      throw UserError(str("--baseline ", a.baseline, ": ", e.what()));
    }
    base_so = (dir / "baseline.so").string();
    write_kernel(*base, EmitKind::SharedLibrary, base_so);
  }

  const MeasureOptions& mo = a.measure;
  MeasureContext ctx(k.graph, mo);
  RunResult r = runner.run_one(ctx, so, k.name, base_so, base ? base->name : "");
  if (db) {
    CandidateInfo c{t.str(), template_name(w, t), k.config, compile_s, "local", ""};
    db->commit({make_record(k.graph, c, r, mo)});
  }
  if (!r.ok() && r.error != tunefarm::v1::WRONG_ANSWER) {
    std::fprintf(stderr, "error: %s: %s\n", error_code_name(r.error), r.error_msg.c_str());
    return 1;
  }
  double median = r.median_s();
  double gflops = static_cast<double>(k.graph.flops) / median * 1e-9;
  std::string check = !mo.check ? "skipped" : r.correctness == "ok" ? "ok" : r.correctness == "wrong" ? "wrong answer"
                                                                                                       : "unchecked (output too large to return)";
  json out = {{"workload", w.canonical()}, {"target", t.str()}, {"config", k.config},
              {"config_source", k.config_source}, {"median_s", median}, {"gflops", gflops},
              {"samples_s", r.samples_s}, {"number", r.number}, {"check", check},
              {"max_abs_error", r.max_abs_error}, {"tolerance", r.tolerance}};
  if (base) {
    out["baseline"] = {{"config", base->config}, {"config_source", base->config_source},
                       {"median_s", r.baseline_median_s()}, {"samples_s", r.baseline_samples_s}};
    out["speedup"] = r.speedup();
  }
  if (a.as_json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("workload  %s\ntarget    %s\nconfig    %s (%s)\ntime      %.6f ms (median of %d, %d calls each)\n"
                "speed     %.2f GFLOPS\ncheck     %s",
                w.canonical().c_str(), t.short_str().c_str(), k.config.dump().c_str(), k.config_source.c_str(),
                median * 1e3, mo.repeat, r.number, gflops, check.c_str());
    if (r.correctness != "unchecked") std::printf(" (max abs error %.2e, tolerance %.2e)", r.max_abs_error, r.tolerance);
    std::printf("\n");
    if (base) {
      std::printf("baseline  %s (%s): %.6f ms, interleaved with the kernel's samples\nspeedup   %.3fx over the "
                  "baseline (median of the %zu sample pairs' ratios)\n",
                  base->config.dump().c_str(), base->config_source.c_str(), r.baseline_median_s() * 1e3,
                  r.speedup(), std::min(r.samples_s.size(), r.baseline_samples_s.size()));
    }
    if (db) std::printf("recorded  in %s\n", db::database_path(a.db).c_str());
  }
  if (r.error == tunefarm::v1::WRONG_ANSWER) {
    std::fprintf(stderr, "error: kernel output differs from the reference (%s)\n", r.error_msg.c_str());
    return 1;
  }
  return 0;
}

// `compile` or `tune` of an ONNX model file of 64 MiB or more (its weights: base/huge_pages.h).
bool compiles_a_big_model(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "compile") != 0 && std::strcmp(argv[1], "tune") != 0)) return false;
  for (int i = 2; i < argc; ++i) {
    std::string path;
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
      path = argv[i + 1];
    } else if (std::strncmp(argv[i], "--model=", 8) == 0) {
      path = argv[i] + 8;
    } else {
      continue;
    }
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) >= (64u << 20) && !ec)
      return true;
  }
  return false;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  tf::use_huge_page_malloc(argv, tf::compiles_a_big_model(argc, argv));
  CLI::App app{"tunefarm: autotune tensor kernels for a farm of boards"};
  app.set_version_flag("--version", tf::toolchain_version());
  app.require_subcommand(1);

  tf::CompileArgs ca;
  CLI::App* compile = app.add_subcommand("compile", "Compile a workload into a kernel library (or IR, asm, object)");
  compile->add_option("--workload,-w", ca.workload, "workload spec, e.g. 'matmul(M=97,N=131,K=67)'");
  compile->add_option("--model", ca.model,
                      "an ONNX model to compile whole into one library (docs/models.md); for a cuda or rocm target the "
                      "library runs on that GPU, opening its driver when first called");
  compile->add_option("--opt-level,-O", ca.opt_level, "--model: graph optimisation level, 0 to 3")->capture_default_str();
  compile->add_option("--disable-pass", ca.disable, "--model: do not run this graph pass (repeatable)");
  compile->add_flag("--emulate-gpu", ca.emulate_gpu,
                    "--model with a GPU target: schedule every kernel for that GPU, then run its grid serially in a "
                    "library for this machine (a check of the GPU path's kernels and memory plan without a GPU; tensor-core "
                    "kernels, whose warps a serial grid cannot run, as generic kernels of the same rounding)");
  compile->add_flag(
      "--pad-batch", ca.pad_batch,
      "--model: calls with fewer rows of axis 0 than a shape bucket's run it padded (zero rows "
      "after theirs, the outputs' first rows kept: run --model and the Python package do it), "
      "where "
      "the model keeps those rows apart; refused by name where it does not");
  tf::cli::add_max_memory_option(compile, ca.max_memory);
  tf::cli::add_precision_option(compile, ca.precision);
  tf::cli::add_dim_options(compile, ca.dims);
  compile->add_option("--target,-t", ca.target, "target string, e.g. 'llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72'")
      ->capture_default_str();
  compile->add_option("--config,-c", ca.config, "schedule config as JSON, or @file");
  compile->add_option("--name", ca.name, "exported function name (default: the operator name)");
  compile->add_option("--libdevice", ca.libdevice,
                      "cuda: NVIDIA's libdevice.10.bc for exp, log, tanh (default: $TUNEFARM_LIBDEVICE, else "
                      "$CUDA_HOME, /usr/local/cuda or /usr/lib/cuda under nvvm/libdevice)");
  compile->add_option("--rocm-device-libs", ca.rocm_device_libs,
                      "rocm: the directory of the ROCm device libraries' ocml.bc, for tanh (default: "
                      "$TUNEFARM_ROCM_DEVICE_LIBS, else $ROCM_PATH/amdgcn/bitcode, /opt/rocm/amdgcn/bitcode, "
                      "/usr/lib/<arch>-linux-gnu/amdgcn/bitcode)");
  compile->add_option("--emit", ca.emit,
                      "output kind: so, obj, asm, llvm, loop-ir (for cuda, so is the PTX module and its sidecar; "
                      "for rocm, the .hsaco code object and its sidecar)")
      ->capture_default_str();
  compile->add_option("-o,--output", ca.out, "output file; - writes text outputs (loop-ir, llvm, asm) to stdout");
  compile->add_option("--skip-pass", ca.skip,
                      "skip a lowering pass (repeatable; with --model, in every kernel)");
  compile->add_option("--dump-pass", ca.dump, "print loop IR after a pass to stderr, or 'all' (repeatable)");
  compile->add_flag("--time-passes", ca.time_passes, "print the time of each lowering pass");
  compile->add_flag("--list-passes", ca.list_passes, "list the lowering passes and exit");
  compile->add_option("--db", ca.db, "tuning database to take the best config from (default: $TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db)");
  tf::cli::add_server_options(compile, ca.server, true);
  compile->add_flag("--no-db", ca.no_db, "do not look up a tuned config (use --config or the default, silently)");
  compile->add_flag("--json", ca.as_json, "print what was written (files, workload, target, config and its source) as JSON");

  std::string dw, dt = tf::kDefaultTarget;
  bool djson = false;
  CLI::App* describe = app.add_subcommand("describe", "Show a workload's arguments, shapes, FLOPs, default config and "
                                                      "the tuning space (knobs and their candidates)");
  describe->add_option("workload,--workload,-w", dw, "workload spec")->required();
  describe->add_option("--target,-t", dt, "target of the default config and the space")->capture_default_str();
  describe->add_flag("--json", djson, "print JSON");

  tf::RunArgs ra;
  CLI::App* run = app.add_subcommand("run", "Compile for this machine, run, time and check a kernel (or, with "
                                            "--model, run a whole model)");
  run->add_option("--workload,-w", ra.workload, "workload spec");
  tf::cli::ModelRunArgs mra;
  tf::cli::add_model_run_options(run, mra);
  run->add_option("--config,-c", ra.config, "schedule config as JSON, or @file");
  tf::cli::add_measure_options(run, ra.measure, tf::cli::kWarmup | tf::cli::kCheck);
  run->add_option("--baseline", ra.baseline,
                  "also time this config of the workload ('default': its default schedule; JSON or @file) on the "
                  "same inputs, interleaved sample by sample, and print the speedup over it (docs/tuning.md)");
  run->add_flag("--json", ra.as_json, "print JSON");
  run->add_option("--db", ra.db, "tuning database: the config comes from it and the measurement goes into it (default: $TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db)");
  run->add_flag("--no-db", ra.no_db, "neither look up nor record");

  tf::cli::QueryArgs qa;
  tf::cli::add_query_command(app, qa);
  tf::cli::FarmArgs fa;
  tf::cli::add_farm_command(app, fa);
  tf::cli::TuneArgs ta;
  tf::cli::add_tune_command(app, ta);
  tf::cli::ServiceArgs sa;
  tf::cli::add_service_commands(app, sa);
  tf::cli::ImportArgs ia;
  tf::cli::add_import_command(app, ia);
  tf::cli::QuantizeArgs quant;
  tf::cli::add_quantize_command(app, quant);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" with status 0; every real one is a usage error: status 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*compile) return tf::cmd_compile(ca);
    if (*describe) return tf::cmd_describe(dw, dt, djson);
    if (*run && !mra.model.empty()) {
      if (!ra.workload.empty()) throw tf::UserError("run: give --workload or --model, not both");
      if (!ra.baseline.empty()) throw tf::UserError("run --baseline is for single workloads, not --model");
      mra.json = ra.as_json;
      mra.repeat = ra.measure.repeat;
      mra.warmup_ms = ra.measure.min_warmup_ms;
      std::unique_ptr<tf::db::Database> db = tf::lookup_database(ra.db, ra.no_db || mra.reference);
      mra.db = db.get();
      tf::remove_stale_run_dirs();
      return tf::cli::run_model(mra);
    }
    if (*run) {
      if (!mra.max_memory.empty()) throw tf::UserError("--max-memory is for --model (a whole model)");
      if (mra.profile)
        throw tf::UserError("--profile times the kernels of a whole model: it is for --model");
      if (mra.dims.given())
        throw tf::UserError(
            "--dim and --input-shape are for --model (a workload's sizes are in its spec)");
      return tf::cmd_run(ra);
    }
    if (!qa.sub.empty()) return tf::cli::run_query(qa);
    if (!fa.sub.empty()) return tf::cli::run_farm(fa);
    if (*ta.cmd) return tf::cli::run_tune(ta);
    if (!sa.sub.empty()) return tf::cli::run_service_command(sa);
    if (*ia.cmd) return tf::cli::run_import(ia);
    if (*quant.cmd) return tf::cli::run_quantize(quant);
  } catch (const tf::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const tf::farm::FarmError& e) {
    return tf::cli::farm_error_exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
