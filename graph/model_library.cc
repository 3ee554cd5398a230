#include "graph/model_library.h"

#include <dlfcn.h>

#include <filesystem>

#include "compiler/codegen_runner.h"
#include "compiler/error.h"

namespace tf::graph {
namespace {

template <typename F>
F entry(void* handle, const std::string& path, const char* name) {
  void* p = dlsym(handle, name);
  if (!p) throw UserError(str(path, ": not a tunefarm model library (no ", name, ")"));
  return reinterpret_cast<F>(p);
}

std::vector<TensorInfo> describe(void* h, const std::string& path, const std::string& role) {
  auto count = entry<int32_t (*)()>(h, path, ("tf_model_num_" + role + "s").c_str());
  auto name = entry<const char* (*)(int32_t)>(h, path, ("tf_model_" + role + "_name").c_str());
  auto ndim = entry<int32_t (*)(int32_t)>(h, path, ("tf_model_" + role + "_ndim").c_str());
  auto shape = entry<const int64_t* (*)(int32_t)>(h, path, ("tf_model_" + role + "_shape").c_str());
  // Libraries from before outputs had types have no dtype table: all float32.
  auto dtype = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, ("tf_model_" + role + "_dtype").c_str()));
  std::vector<TensorInfo> out;
  for (int32_t i = 0; i < count(); ++i) {
    const int64_t* s = shape(i);
    int32_t t = dtype ? dtype(i) : 1;
    if (t != 1 && t != 7 && t != 9) throw UserError(str(path, ": ", role, " ", i, " has element type ", t));
    out.push_back({name(i), Shape(s, s + ndim(i)), t == 7 ? DType::I64 : t == 9 ? DType::Bool : DType::F32});
  }
  return out;
}

}  // namespace

ModelLibrary::ModelLibrary(const std::string& path) : path_(path) {
  if (!std::filesystem::is_regular_file(path))
    throw UserError(str(path, ": no such model library"));
  // dlopen needs a slash to take the path as a file, not a name to search for.
  std::string p = path.find('/') == std::string::npos ? "./" + path : path;
  handle_ = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw UserError(str(path, ": cannot load: ", dlerror()));
  try {
    run_ = entry<int (*)(const void* const*, void* const*, void*)>(handle_, path, "tf_model_run");
    workspace_bytes_ = entry<uint64_t (*)()>(handle_, path, "tf_model_workspace_bytes")();
    bool has_inputs = dlsym(handle_, "tf_model_input_name") != nullptr;
    if (has_inputs) inputs_ = describe(handle_, path, "input");
    outputs_ = describe(handle_, path, "output");
  } catch (...) {
    dlclose(handle_);
    throw;
  }
}

ModelLibrary::~ModelLibrary() {
  if (handle_) dlclose(handle_);
}

void ModelLibrary::run(const std::vector<const HostTensor*>& inputs,
                       std::vector<HostTensor>& outputs, void* workspace) const {
  if (inputs.size() != inputs_.size()) {
    throw UserError(
        str(path_, ": the model takes ", inputs_.size(), " inputs, not ", inputs.size()));
  }
  std::vector<const void*> in;
  std::vector<std::vector<uint8_t>> bool_inputs(
      inputs.size());  // one byte each, as the ABI takes them
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorInfo& want = inputs_[k];
    const HostTensor& t = *inputs[k];
    if (t.dtype != want.dtype || t.shape != want.shape) {
      throw UserError(str("input '", want.name, "' must be ", dtype_name(want.dtype),
                          shape_str(want.shape), ", not ", dtype_name(t.dtype),
                          shape_str(t.shape)));
    }
    if (t.dtype == DType::F32) {
      in.push_back(t.f.data());
      continue;
    }
    if (t.dtype == DType::I64) {  // the library checks the range (returning -2; see below)
      in.push_back(t.i.data());
      continue;
    }
    for (int64_t x : t.i) bool_inputs[k].push_back(x != 0);
    in.push_back(bool_inputs[k].data());
  }
  outputs.resize(outputs_.size());
  std::vector<void*> out;
  std::vector<std::vector<uint8_t>> bools(outputs_.size());  // one byte each, as the library writes them
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const TensorInfo& o = outputs_[k];
    int64_t n = num_elements(o.shape);
    // The data's size too: a default HostTensor has the shape of a rank-0 output, no data.
    size_t have = o.dtype == DType::F32 ? outputs[k].f.size() : outputs[k].i.size();
    if (outputs[k].shape != o.shape || outputs[k].dtype != o.dtype ||
        have != static_cast<size_t>(n)) {
      outputs[k] = o.dtype == DType::F32 ? HostTensor::floats(o.shape, std::vector<float>(n))
                                         : HostTensor::ints(o.shape, std::vector<int64_t>(n), o.dtype);
    }
    if (o.dtype == DType::Bool) {
      bools[k].resize(static_cast<size_t>(n));
      out.push_back(bools[k].data());
    } else {
      out.push_back(o.dtype == DType::F32 ? static_cast<void*>(outputs[k].f.data()) : outputs[k].i.data());
    }
  }
  int status = run_(in.data(), out.data(), workspace);
  if (status == -2) {
    // An int64 input beyond what float32 kernels hold exactly: name the first such element.
    for (size_t k = 0; k < inputs.size(); ++k) {
      const HostTensor& t = *inputs[k];
      for (size_t e = 0; t.dtype == DType::I64 && e < t.i.size(); ++e) {
        if (t.i[e] < -kRunnerMaxExactInt || t.i[e] > kRunnerMaxExactInt) {
          throw UserError(str("input '", inputs_[k].name, "': element ", e, " is ", t.i[e],
                              "; compiled models take int64 values within +-", kRunnerMaxExactInt,
                              " (2^24, exact in the float32 their kernels compute in)"));
        }
      }
    }
    throw UserError(str(path_, ": an int64 input holds a value beyond +-", kRunnerMaxExactInt));
  }
  if (status != 0) {
    throw std::runtime_error(str(path_, ": the model ran out of memory (workspace of ",
                                 workspace_bytes_, " bytes, or a kernel's own buffers)"));
  }
  for (size_t k = 0; k < outputs_.size(); ++k) {
    for (size_t e = 0; e < bools[k].size(); ++e) outputs[k].i[e] = bools[k][e];
  }
}

void ModelLibrary::run_raw(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                           void* workspace) const {
  TF_CHECK(inputs.size() == inputs_.size() && outputs.size() == outputs_.size(), "run_raw: ", inputs.size(),
           " inputs and ", outputs.size(), " outputs for a model of ", inputs_.size(), " and ", outputs_.size());
  int status = run_(inputs.data(), outputs.data(), workspace);
  if (status == -2) {
    throw UserError(str(path_, ": an int64 input holds a value beyond +-", kRunnerMaxExactInt,
                        " (2^24, exact in the float32 the kernels compute in)"));
  }
  if (status != 0) {
    throw std::runtime_error(str(path_, ": the model ran out of memory (workspace of ", workspace_bytes_,
                                 " bytes, or a kernel's own buffers)"));
  }
}

}  // namespace tf::graph
