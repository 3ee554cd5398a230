// _tunefarm: the compiled half of the Python package (python/tunefarm/__init__.py is the
// other). Models and kernels are loaded and called here, NumPy arrays passed to them without
// copies when they are C-contiguous and of the model's element type; compiling and the
// database are the same library calls the command line makes. Errors reach Python as
// ValueError (bad input: a UserError), RuntimeError (a failure) or TypeError (a wrong type).
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/driver.h"
#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/target.h"
#include "compiler/workload.h"
#include "db/database.h"
#include "db/query_json.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "runtime/kernel_library.h"
#include "tuner/tuning_records.h"

namespace py = pybind11;

namespace tf::python {
namespace {

// JSON to Python objects through the json module: the facts keep the exact shape of
// `tunefarm query --json` (db/query_json.h).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

py::dtype numpy_dtype(graph::DType t) {
  switch (t) {
    case graph::DType::F32: return py::dtype::of<float>();
    case graph::DType::I64: return py::dtype::of<int64_t>();
    case graph::DType::Bool: return py::dtype::of<bool>();
  }
  return py::dtype::of<float>();
}

py::list describe(const std::vector<graph::TensorInfo>& ts) {
  py::list out;
  for (const graph::TensorInfo& t : ts) {
    py::dict d;
    d["name"] = t.name;
    d["shape"] = py::tuple(py::cast(t.shape));
    d["dtype"] = graph::dtype_name(t.dtype);
    out.append(d);
  }
  return out;
}

// `a` as the model's tensor `t`: the array itself when it is C-contiguous and of t's element
// type, else a ValueError/TypeError naming the tensor, what it must be and what it is.
// `a` as an array of `want` (named `type_name`) and shape `t.shape`, or a TypeError or
// ValueError naming the argument.
py::array checked_as(const py::handle& a, const graph::TensorInfo& t, const py::dtype& want, const std::string& type_name,
                     const char* role) {
  if (!py::isinstance<py::array>(a)) {
    throw py::type_error(str(role, " '", t.name, "' must be a NumPy array (or a PyTorch tensor through "
                             "tunefarm.optimize), not ", std::string(py::str(py::type::of(a).attr("__name__")))));
  }
  py::array arr = py::reinterpret_borrow<py::array>(a);
  if (!arr.dtype().is(want) && !arr.dtype().equal(want)) {
    throw py::type_error(str(role, " '", t.name, "' must be ", type_name, ", not ", std::string(py::str(arr.dtype()))));
  }
  graph::Shape shape(arr.shape(), arr.shape() + arr.ndim());
  if (shape != t.shape) {
    throw py::value_error(str(role, " '", t.name, "' must have shape ", graph::shape_str(t.shape), ", not ",
                              graph::shape_str(shape)));
  }
  if (!(arr.flags() & py::array::c_style)) {
    if (std::string(role) == "output") {
      throw py::value_error(str("output '", t.name, "' must be C-contiguous (the model writes it in place)"));
    }
    return py::array::ensure(arr, py::array::c_style | py::array::forcecast);  // a copy, only here
  }
  return arr;
}

py::array checked(const py::handle& a, const graph::TensorInfo& t, const char* role) {
  return checked_as(a, t, numpy_dtype(t.dtype), graph::dtype_name(t.dtype), role);
}

// A kernel argument's NumPy type (float32, int8, uint8, int32).
py::dtype kernel_dtype(const ir::Type& t) {
  if (t == ir::Type::int8()) return py::dtype::of<int8_t>();
  if (t == ir::Type::uint8()) return py::dtype::of<uint8_t>();
  if (t == ir::Type::int32()) return py::dtype::of<int32_t>();
  return py::dtype::of<float>();
}

class Model {
 public:
  explicit Model(const std::string& path) : lib_(std::make_unique<graph::ModelLibrary>(path)), path_(path) {}

  py::list inputs() const { return describe(lib_->inputs()); }
  py::list outputs() const { return describe(lib_->outputs()); }
  const std::string& path() const { return path_; }

  // Runs the model: `inputs` in the model's order; `outputs` (optional) arrays to write into,
  // else new ones. `threads` > 0 sets this thread's OpenMP thread count first (the library's
  // pool follows omp_get_max_threads(), as PyTorch's does).
  py::list run(const py::sequence& inputs, const py::object& outputs, int threads) const {
    const auto& outs = lib_->outputs();
    std::vector<py::array> keep;
    std::vector<const void*> in = input_pointers(inputs, keep);
    py::list result;
    std::vector<void*> out;
    if (outputs.is_none()) {
      out = new_outputs(result);
    } else {
      py::sequence given = outputs;
      if (static_cast<size_t>(py::len(given)) != outs.size()) {
        throw py::value_error(str("the model has ", outs.size(), " output", outs.size() == 1 ? "" : "s", ", not ",
                                  py::len(given)));
      }
      for (size_t k = 0; k < outs.size(); ++k) {
        py::array a = checked(given[k], outs[k], "output");
        if (!a.writeable()) throw py::value_error(str("output '", outs[k].name, "' is read-only"));
        out.push_back(a.mutable_data());
        result.append(a);
      }
    }
    {
      py::gil_scoped_release unlocked;
      if (threads > 0) omp_set_num_threads(threads);
      lib_->run_raw(in, out);
    }
    return result;
  }

  // Runs the model on inputs given as addresses (PyTorch tensors' data_ptr()) that the caller
  // checked against `inputs` (contiguous, CPU, the element type and shape): the tensors stay
  // alive in the caller for the call. New output arrays.
  py::list run_addresses(const std::vector<uintptr_t>& inputs, int threads) const {
    check_input_count(inputs.size());
    std::vector<const void*> in;
    for (uintptr_t a : inputs) in.push_back(reinterpret_cast<const void*>(a));
    py::list result;
    std::vector<void*> out = new_outputs(result);
    py::gil_scoped_release unlocked;
    if (threads > 0) omp_set_num_threads(threads);
    lib_->run_raw(in, out);
    return result;
  }

  // A GPU library's call on device addresses (CUDA tensors' data_ptr(), checked by the
  // caller) and a stream (torch.cuda.current_stream().cuda_stream); queued, not waited for.
  void run_device(const std::vector<uint64_t>& inputs, const std::vector<uint64_t>& outputs, uintptr_t stream) const {
    py::gil_scoped_release unlocked;
    lib_->run_device(inputs, outputs, reinterpret_cast<void*>(stream));
  }
  const std::string& device_kind() const { return lib_->device_kind(); }
  void set_device(int index) const { lib_->set_device(index); }

  // The seconds of each of `calls` calls on `inputs` timed in C++, one at a time, after
  // `warmup` untimed ones: the C ABI's own time, in this process, for comparing a call from
  // Python with (bench/python_overhead.py).
  std::vector<double> time_calls(const py::sequence& inputs, int calls, int warmup, int threads) const {
    if (calls < 1 || warmup < 0) throw py::value_error(str("calls must be at least 1 (", calls, ") and warmup 0 or more (", warmup, ")"));
    std::vector<py::array> keep;
    std::vector<const void*> in = input_pointers(inputs, keep);
    py::list outs;
    std::vector<void*> out = new_outputs(outs);
    if (threads > 0) omp_set_num_threads(threads);
    std::vector<double> s;
    py::gil_scoped_release unlocked;
    for (int k = 0; k < warmup; ++k) lib_->run_raw(in, out);
    for (int k = 0; k < calls; ++k) {
      auto t = std::chrono::steady_clock::now();
      lib_->run_raw(in, out);
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    return s;
  }

 private:
  void check_input_count(size_t n) const {
    size_t want = lib_->inputs().size();
    if (n != want) throw py::value_error(str("the model takes ", want, " input", want == 1 ? "" : "s", ", not ", n));
  }

  // `inputs` checked against the model's (checked(): a non-contiguous one is copied into
  // `keep`), as the pointers the C ABI takes; `keep` holds them for the call.
  std::vector<const void*> input_pointers(const py::sequence& inputs, std::vector<py::array>& keep) const {
    const auto& ins = lib_->inputs();
    check_input_count(static_cast<size_t>(py::len(inputs)));
    std::vector<const void*> in;
    for (size_t k = 0; k < ins.size(); ++k) {
      keep.push_back(checked(inputs[k], ins[k], "input"));
      in.push_back(keep.back().data());
    }
    return in;
  }

  // New arrays for the model's outputs, appended to `result`; the pointers the C ABI takes.
  std::vector<void*> new_outputs(py::list& result) const {
    std::vector<void*> out;
    for (const graph::TensorInfo& t : lib_->outputs()) {
      py::array a(numpy_dtype(t.dtype), std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()));
      out.push_back(a.mutable_data());
      result.append(a);
    }
    return out;
  }

  std::unique_ptr<graph::ModelLibrary> lib_;
  std::string path_;
};

// The configs of the database at `db` ("" for none: default schedules).
graph::ConfigLookup lookup_in(db::Database* database) {
  return [database](const Workload& w, const Target& t) {
    ConfigChoice c = choose_config(database, w, t);
    return graph::KernelConfig{c.config, c.source, c.tuned_from};
  };
}

py::dict compile_model(const std::string& onnx, const std::string& out, const std::string& target, const std::string& db,
                       int opt_level, int64_t max_memory) {
  Target t = target.empty() ? host_target() : parse_target(target);
  std::unique_ptr<db::Database> database = db.empty() ? nullptr : db::open_database(db, db::OpenMode::ReadOnly);
  graph::CompiledModel cm;
  {
    py::gil_scoped_release unlocked;
    graph::Graph g = graph::load_model(onnx, opt_level, {}, graph::channel_block(t));
    cm = graph::compile_model(g, t, lookup_in(database.get()), out, onnx,
                              max_memory > 0 ? max_memory : graph::default_memory_budget());
  }
  py::dict d;
  d["library"] = out;
  d["target"] = t.str();
  d["kernels"] = cm.kernels.size();
  d["tunable"] = cm.tunable();
  d["tuned"] = cm.tunable() - cm.untuned();
  d["workspace_bytes"] = cm.memory.arena_bytes;
  return d;
}

class Kernel {
 public:
  Kernel(const std::string& workload, const std::string& target, const std::string& config_json,
         const std::string& db, const std::string& out) {
    Workload w = parse_workload(workload);
    Target t = target.empty() ? host_target() : parse_target(target);
    nlohmann::json config;
    std::string source = "default";
    if (!config_json.empty()) {
      config = nlohmann::json::parse(config_json);
      source = "given";
    } else if (!db.empty()) {
      std::unique_ptr<db::Database> database = db::open_database(db, db::OpenMode::ReadOnly);
      ConfigChoice c = choose_config(database.get(), w, t);
      config = c.config;
      source = c.source;
    }
    CompiledKernel k = compile_kernel(w, t, config, source, "");
    write_kernel(k, EmitKind::SharedLibrary, out);
    meta_ = kernel_metadata(k);
    for (const ir::Tensor& in : k.graph.inputs) {
      shapes_.push_back(in->shape);
      types_.push_back(in->dtype);
    }
    shapes_.push_back(k.graph.output->shape);
    types_.push_back(k.graph.output->dtype);
    for (const ir::Tensor& in : k.graph.inputs) names_.push_back(in->name);
    names_.push_back(k.graph.output->name);
    if (t.is_cpu() && t.arch_name() == host_target().arch_name()) lib_ = std::make_unique<KernelLibrary>(out, k.name);
  }

  py::object metadata() const { return to_python(meta_); }

  // Calls the kernel on arrays of its arguments' types (float32; uint8, int8 and int32 for
  // integer workloads): its inputs, then its output (written in place).
  void call(const py::args& args) const {
    if (!lib_) throw py::value_error("this kernel was compiled for another target: it cannot run here");
    if (args.size() != shapes_.size()) {
      throw py::value_error(str("the kernel takes ", shapes_.size(), " arrays (its inputs, then its output), not ",
                                args.size()));
    }
    std::vector<float*> ptrs;
    std::vector<py::array> keep;
    for (size_t k = 0; k < shapes_.size(); ++k) {
      graph::TensorInfo t{names_[k], shapes_[k], graph::DType::F32};
      bool output = k + 1 == shapes_.size();
      keep.push_back(checked_as(args[k], t, kernel_dtype(types_[k]), types_[k].str(), output ? "output" : "input"));
      if (output && !keep.back().writeable()) throw py::value_error(str("output '", names_[k], "' is read-only"));
      ptrs.push_back(static_cast<float*>(keep.back().mutable_data()));
    }
    int status;
    {
      py::gil_scoped_release unlocked;
      status = lib_->call(ptrs);
    }
    if (status != 0) throw std::runtime_error(str("the kernel failed (status ", status, ": out of memory)"));
  }

 private:
  nlohmann::json meta_;
  std::vector<graph::Shape> shapes_;
  std::vector<ir::Type> types_;
  std::vector<std::string> names_;
  std::unique_ptr<KernelLibrary> lib_;
};

class Database {
 public:
  explicit Database(const std::string& path) : db_(db::open_database(path, db::OpenMode::ReadOnly)) {}

  py::object best(const std::string& workload, const std::string& target) {
    Workload w = parse_workload(workload);
    Target t = target.empty() ? host_target() : parse_target(target);
    return to_python(db::best_json(w.canonical(), t.str(), db_->best(lookup_key(w, t))));
  }
  py::object best_all() {
    nlohmann::json a = nlohmann::json::array();
    for (const db::MeasureRecord& r : db_->best_per_pair()) a.push_back(db::record_query_json(r));
    return to_python(a);
  }
  py::object runs() {
    nlohmann::json a = nlohmann::json::array();
    for (const db::TuningRun& r : db_->runs()) a.push_back(db::run_json(r));
    return to_python(a);
  }
  py::object models() {
    nlohmann::json a = nlohmann::json::array();
    for (const db::ModelResult& m : db_->model_results()) a.push_back(db::model_result_json(m));
    return to_python(a);
  }

 private:
  std::unique_ptr<db::Database> db_;
};

}  // namespace
}  // namespace tf::python

PYBIND11_MODULE(_tunefarm, m) {
  using namespace tf::python;  // NOLINT
  m.doc() = "tunefarm's compiled core (use the tunefarm package)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tf::UserError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(PyExc_ValueError, (std::string("bad JSON: ") + e.what()).c_str());
    }
  });
  py::class_<Model>(m, "Model")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("inputs", &Model::inputs)
      .def_property_readonly("outputs", &Model::outputs)
      .def_property_readonly("path", &Model::path)
      .def("run", &Model::run, py::arg("inputs"), py::arg("outputs") = py::none(), py::arg("threads") = 0)
      .def("run_addresses", &Model::run_addresses, py::arg("inputs"), py::arg("threads") = 0)
      .def("run_device", &Model::run_device, py::arg("inputs"), py::arg("outputs"), py::arg("stream"))
      .def_property_readonly("device_kind", &Model::device_kind)
      .def("set_device", &Model::set_device, py::arg("index"))
      .def("time_calls", &Model::time_calls, py::arg("inputs"), py::arg("calls"), py::arg("warmup") = 10,
           py::arg("threads") = 0);
  py::class_<Kernel>(m, "Kernel")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&>(),
           py::arg("workload"), py::arg("target"), py::arg("config"), py::arg("db"), py::arg("out"))
      .def_property_readonly("metadata", &Kernel::metadata)
      .def("__call__", &Kernel::call);
  py::class_<Database>(m, "Database")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("best", &Database::best, py::arg("workload"), py::arg("target") = "")
      .def("best_all", &Database::best_all)
      .def("runs", &Database::runs)
      .def("models", &Database::models);
  m.def("compile_model", &compile_model, py::arg("onnx"), py::arg("out"), py::arg("target") = "", py::arg("db") = "",
        py::arg("opt_level") = 2, py::arg("max_memory") = 0);
  m.def("host_target", [] { return tf::host_target().str(); });
  m.def("default_database", [] { return tf::db::database_path(""); });
}
