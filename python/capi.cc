// libtunefarm_python: the compiled half of the Python package, as a plain C ABI that
// python/tunefarm/_tunefarm.py calls through ctypes. It replaces a pybind11 extension, which
// is built for one Python (Debian's 3.11 here) and would not import in the GPU server's 3.12
// venv; a C library loads in any CPython (or PyPy), so the same package and library run
// wherever the tunefarm program does (the bundle carries both). The array checks (types,
// shapes, contiguity) are the Python side's; models and kernels are loaded and called here,
// compiling and the database are the same library calls the command line makes.
//
// Every function that can fail returns 0, or 1 for bad input (a UserError or bad JSON:
// Python raises ValueError) or 2 for another failure (RuntimeError), with the message in
// tfpy_error(). Text results (JSON) are in tfpy_result(). Both are per thread and last until
// the thread's next call. Handles are freed by their close function.
#include <omp.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "compiler/driver.h"
#include "compiler/operators.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "db/database.h"
#include "db/query_json.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "runtime/kernel_library.h"
#include "tuner/model_comparison.h"
#include "tuner/tuning_records.h"

#define TFPY_EXPORT extern "C" __attribute__((visibility("default")))

namespace tf::python {
namespace {

thread_local std::string last_error, last_result;

// Runs `f`, mapping what it throws to the return codes above.
template <typename F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const UserError& e) {
    last_error = e.what();
    return 1;
  } catch (const nlohmann::json::exception& e) {
    last_error = std::string("bad JSON: ") + e.what();
    return 1;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 2;
  }
}

nlohmann::json describe(const std::vector<graph::TensorInfo>& ts) {
  nlohmann::json out = nlohmann::json::array();
  for (const graph::TensorInfo& t : ts)
    out.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", graph::dtype_name(t.dtype)}});
  return out;
}

struct Model {
  std::unique_ptr<graph::ModelLibrary> lib;
  std::string path;
};

struct Kernel {
  nlohmann::json info;  // metadata, args (name, shape, dtype), runs_here
  std::unique_ptr<KernelLibrary> lib;
};


}  // namespace
}  // namespace tf::python

using namespace tf;          // NOLINT
using namespace tf::python;  // NOLINT

TFPY_EXPORT const char* tfpy_error(void) { return last_error.c_str(); }
TFPY_EXPORT const char* tfpy_result(void) { return last_result.c_str(); }

TFPY_EXPORT int tfpy_model_open(const char* path, void** handle) {
  return guarded([&] {
    auto m = std::make_unique<Model>();
    m->lib = std::make_unique<graph::ModelLibrary>(path);
    m->path = path;
    nlohmann::json buckets = nlohmann::json::array();
    for (int b = 0; b < m->lib->num_buckets(); ++b)
      buckets.push_back({{"inputs", describe(m->lib->bucket_inputs(b))},
                         {"outputs", describe(m->lib->bucket_outputs(b))},
                         {"padded", m->lib->bucket_padded(b)}});
    last_result = nlohmann::json{{"inputs", describe(m->lib->inputs())},
                                 {"outputs", describe(m->lib->outputs())},
                                 {"buckets", buckets},
                                 {"device_kind", m->lib->device_kind()}}
                      .dump();
    *handle = m.release();
  });
}

TFPY_EXPORT void tfpy_model_close(void* handle) { delete static_cast<Model*>(handle); }

// Runs the model on buffers the caller checked against the inputs and outputs of shape bucket
// `bucket` (contiguous, the ABI's element types and shapes). `threads` > 0 sets this thread's
// OpenMP team size first (the library's pool follows omp_get_max_threads(), as PyTorch's does).
TFPY_EXPORT int tfpy_model_run(void* handle, const void* const* inputs, void* const* outputs,
                               int threads, int bucket) {
  return guarded([&] {
    const Model& m = *static_cast<Model*>(handle);
    if (bucket < 0 || bucket >= m.lib->num_buckets())
      throw UserError(str(m.path, ": no shape bucket ", bucket, " (it has ", m.lib->num_buckets(), ")"));
    if (threads > 0) omp_set_num_threads(threads);
    m.lib->run_raw(std::vector<const void*>(inputs, inputs + m.lib->inputs().size()),
                   std::vector<void*>(outputs, outputs + m.lib->outputs().size()), nullptr, bucket);
  });
}

// A GPU library's call on device addresses of shape bucket `bucket` and a stream; queued, not
// waited for.
TFPY_EXPORT int tfpy_model_run_device(void* handle, const uint64_t* inputs, const uint64_t* outputs,
                                      void* stream, int bucket) {
  return guarded([&] {
    const Model& m = *static_cast<Model*>(handle);
    if (bucket < 0 || bucket >= m.lib->num_buckets())
      throw UserError(
          str(m.path, ": no shape bucket ", bucket, " (it has ", m.lib->num_buckets(), ")"));
    m.lib->run_device(std::vector<uint64_t>(inputs, inputs + m.lib->inputs().size()),
                      std::vector<uint64_t>(outputs, outputs + m.lib->outputs().size()), stream,
                      bucket);
  });
}

// The shape bucket inputs of `shapes_json` ([[2, 3, 224, 224], ...], one per input) run padded
// in (compile --pad-batch), as the library chooses it, to *bucket; -1 when none.
TFPY_EXPORT int tfpy_model_padded_bucket(void* handle, const char* shapes_json, int* bucket) {
  return guarded([&] {
    const Model& m = *static_cast<Model*>(handle);
    const nlohmann::json j = nlohmann::json::parse(shapes_json, nullptr, false);
    std::vector<graph::Shape> shapes;
    bool ok = j.is_array();
    for (const nlohmann::json& s : ok ? j : nlohmann::json::array()) {
      ok = ok && s.is_array();
      graph::Shape shape;
      for (const nlohmann::json& d : ok ? s : nlohmann::json::array()) {
        ok = ok && d.is_number_integer();
        if (ok) shape.push_back(d.get<int64_t>());
      }
      shapes.push_back(std::move(shape));
    }
    if (!ok)
      throw UserError(str("input shapes are not a list of lists of integers: ",
                          std::string(shapes_json).substr(0, 200)));
    *bucket = m.lib->padded_bucket_of(shapes);
  });
}

TFPY_EXPORT int tfpy_model_set_device(void* handle, int index) {
  return guarded([&] { static_cast<Model*>(handle)->lib->set_device(index); });
}

// The seconds of each of `calls` calls, timed here one at a time after `warmup` untimed ones:
// the C ABI's own time in this process (bench/python_overhead.py compares a call from Python
// with it). `seconds` holds `calls` values.
TFPY_EXPORT int tfpy_model_time_calls(void* handle, const void* const* inputs, void* const* outputs,
                                      int calls, int warmup, int threads, int bucket, double* seconds) {
  return guarded([&] {
    const Model& m = *static_cast<Model*>(handle);
    if (bucket < 0 || bucket >= m.lib->num_buckets())
      throw UserError(str(m.path, ": no shape bucket ", bucket, " (it has ", m.lib->num_buckets(), ")"));
    std::vector<const void*> in(inputs, inputs + m.lib->inputs().size());
    std::vector<void*> out(outputs, outputs + m.lib->outputs().size());
    if (threads > 0) omp_set_num_threads(threads);
    for (int k = 0; k < warmup; ++k) m.lib->run_raw(in, out, nullptr, bucket);
    for (int k = 0; k < calls; ++k) {
      auto t = std::chrono::steady_clock::now();
      m.lib->run_raw(in, out, nullptr, bucket);
      seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    }
  });
}

// `calls` calls of bucket `bucket` after `warmup` untimed ones, each kernel timed
// (graph::ModelLibrary::profile). The result is JSON: runs, seconds (the calls' own, end to
// end), sidecar_problem, and kernels: each kernel call that ran (function, kind, what, flops,
// bucket, calls, seconds over all runs), the longest first.
TFPY_EXPORT int tfpy_model_profile(void* handle, const void* const* inputs, void* const* outputs,
                                   int calls, int warmup, int threads, int bucket) {
  return guarded([&] {
    const Model& m = *static_cast<Model*>(handle);
    if (bucket < 0 || bucket >= m.lib->num_buckets())
      throw UserError(
          str(m.path, ": no shape bucket ", bucket, " (it has ", m.lib->num_buckets(), ")"));
    if (calls < 1 || warmup < 0)
      throw UserError(
          str("calls must be at least 1 (", calls, ") and warmup 0 or more (", warmup, ")"));
    std::vector<const void*> in(inputs, inputs + m.lib->inputs().size());
    std::vector<void*> out(outputs, outputs + m.lib->outputs().size());
    if (threads > 0) omp_set_num_threads(threads);
    m.lib->check_profiler();  // refused before any call
    for (int k = 0; k < warmup; ++k) m.lib->run_raw(in, out, nullptr, bucket);
    graph::ModelProfile p = m.lib->profile([&] {
      for (int k = 0; k < calls; ++k) m.lib->run_raw(in, out, nullptr, bucket);
    });
    nlohmann::json ks = nlohmann::json::array();
    for (const graph::KernelTime& t : p.ran_longest_first()) {
      ks.push_back({{"function", t.function},
                    {"kind", t.kind},
                    {"what", t.what},
                    {"flops", t.flops},
                    {"bucket", t.bucket},
                    {"calls", t.calls},
                    {"seconds", t.seconds}});
    }
    last_result = nlohmann::json{
        {"runs", calls},
        {"seconds", p.seconds},
        {"sidecar_problem", p.sidecar_problem},
        {"kernels",
         ks}}.dump();
  });
}

// Compiles an ONNX model into `out` ("" target: this machine; "" db: default schedules);
// `dims_json` sizes its dynamic dimensions: {"dims": {name: size}, "input_shapes": {input:
// [sizes]}} ("" or {}: none), and "pad_batch": true is compile --pad-batch. The result is JSON:
// library, target, kernels, tunable, tuned, workspace_bytes.
TFPY_EXPORT int tfpy_compile_model(const char* onnx, const char* out, const char* target,
                                   const char* db, int opt_level, int64_t max_memory,
                                   const char* precision, const char* dims_json) {
  return guarded([&] {
    Target t = *target ? parse_target(target) : host_target();
    const graph::Precision p = graph::parse_precision(*precision ? precision : "fp32");
    // One graph per shape bucket ({"dims": {"batch": [1, 8, 32]}}), usually one.
    nlohmann::json dims = *dims_json ? nlohmann::json::parse(dims_json) : nlohmann::json::object();
    const bool pad_batch = dims.is_object() && dims.value("pad_batch", false);
    if (dims.is_object()) dims.erase("pad_batch");
    const std::vector<graph::InputBinding> binds = graph::bindings_from_json(dims, "dims_json");
    std::unique_ptr<db::Database> database =
        *db ? db::open_database(db, db::OpenMode::ReadOnly) : nullptr;
    std::vector<graph::Graph> graphs;
    for (const graph::InputBinding& bind : binds) graphs.push_back(load_model_for_target(onnx, t, opt_level, {}, p, bind));
    std::vector<const graph::Graph*> buckets;
    for (const graph::Graph& g : graphs) buckets.push_back(&g);
    graph::CompiledModel cm = compile_model_with(
        buckets, t, database.get(), out, onnx,
        max_memory > 0 ? max_memory : graph::default_memory_budget(), false, pad_batch);
    last_result = nlohmann::json{{"library", out},
                                 {"target", t.str()},
                                 {"kernels", cm.kernels.size()},
                                 {"tunable", cm.tunable()},
                                 {"tuned", cm.tunable() - cm.untuned()},
                                 {"workspace_bytes", cm.memory.arena_bytes},
                                 {"buckets", std::max<size_t>(cm.buckets.size(), 1)}}
                      .dump();
  });
}

// Compiles one kernel into the shared library `out` with `config_json` ("": the database's
// tuned config, else the default); the result is JSON: metadata (the sidecar), args (each
// argument's name, shape and dtype: its inputs, then its output) and runs_here (compiled for
// this machine's architecture, so tfpy_kernel_call can call it).
TFPY_EXPORT int tfpy_kernel_open(const char* workload, const char* target, const char* config_json,
                                 const char* db, const char* out, void** handle) {
  return guarded([&] {
    Workload w = parse_workload(workload);
    Target t = *target ? parse_target(target) : host_target();
    nlohmann::json config;
    std::string source = "default";
    if (*config_json) {
      config = nlohmann::json::parse(config_json);
      source = "given";
    } else if (*db) {
      std::unique_ptr<db::Database> database = db::open_database(db, db::OpenMode::ReadOnly);
      ConfigChoice c = choose_config(database.get(), w, t);
      config = c.config;
      source = c.source;
    }
    CompiledKernel k = compile_kernel(w, t, config, source, "");
    write_kernel(k, EmitKind::SharedLibrary, out);
    auto kernel = std::make_unique<Kernel>();
    nlohmann::json args = nlohmann::json::array();
    for (const ir::Tensor& in : k.graph.inputs) {
      // 16-bit float inputs by their type (NumPy's float16, or the uint16 bits of bfloat16).
      std::string dtype = k.graph.arg_dtype(in);
      if (dtype != kFloat16Elements && dtype != kBFloat16Elements) dtype = in->dtype.str();
      args.push_back({{"name", in->name}, {"shape", in->shape}, {"dtype", dtype}});
    }
    const ir::Tensor& o = k.graph.output;
    args.push_back({{"name", o->name}, {"shape", o->shape}, {"dtype", o->dtype.str()}});
    const bool here = t.is_cpu() && t.arch_name() == host_target().arch_name();
    if (here) kernel->lib = std::make_unique<KernelLibrary>(out, k.name);
    kernel->info = {{"metadata", kernel_metadata(k)}, {"args", args}, {"runs_here", here}};
    last_result = kernel->info.dump();
    *handle = kernel.release();
  });
}

TFPY_EXPORT void tfpy_kernel_close(void* handle) { delete static_cast<Kernel*>(handle); }

// Calls the kernel on buffers the caller checked against its arguments; a non-zero status of
// the kernel (out of memory) is a failure.
TFPY_EXPORT int tfpy_kernel_call(void* handle, float* const* args, int count) {
  return guarded([&] {
    const Kernel& k = *static_cast<Kernel*>(handle);
    if (!k.lib) throw UserError("this kernel was compiled for another target: it cannot run here");
    if (int status = k.lib->call(std::vector<float*>(args, args + count))) {
      throw std::runtime_error(str("the kernel failed (status ", status, ": out of memory)"));
    }
  });
}

TFPY_EXPORT int tfpy_db_open(const char* path, void** handle) {
  return guarded([&] { *handle = db::open_database(path, db::OpenMode::ReadOnly).release(); });
}

TFPY_EXPORT void tfpy_db_close(void* handle) { delete static_cast<db::Database*>(handle); }

// What `tunefarm query <what> --json` prints: "best" (of `workload` on `target`, this machine
// for ""; every pair's best for a "" workload), "runs" or "models".
TFPY_EXPORT int tfpy_db_query(void* handle, const char* what, const char* workload,
                              const char* target) {
  return guarded([&] {
    db::Database& d = *static_cast<db::Database*>(handle);
    const std::string q = what;
    nlohmann::json a = nlohmann::json::array();
    if (q == "best" && *workload) {
      Workload w = parse_workload(workload);
      Target t = *target ? parse_target(target) : host_target();
      a = db::best_json(w.canonical(), t.str(), d.best(lookup_key(w, t)));
    } else if (q == "best") {
      for (const db::MeasureRecord& r : d.best_per_pair()) a.push_back(db::record_query_json(r));
    } else if (q == "runs") {
      for (const db::TuningRun& r : d.runs()) a.push_back(db::run_json(r));
    } else if (q == "models") {
      for (const db::ModelResult& m : d.model_results()) a.push_back(db::model_result_json(m));
    } else {
      throw UserError(str("tfpy_db_query: no query '", q, "' (best, runs, models)"));
    }
    last_result = a.dump();
  });
}

TFPY_EXPORT const char* tfpy_host_target(void) {
  last_result = host_target().str();
  return last_result.c_str();
}

TFPY_EXPORT const char* tfpy_default_database(void) {
  last_result = db::database_path("");
  return last_result.c_str();
}
