#include "runtime/model_abi.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "base/bfloat16.h"
#include "base/float16.h"

namespace tf {
namespace {

template <typename F>
F entry(void* handle, const std::string& path, const std::string& name) {
  void* p = dlsym(handle, name.c_str());
  if (!p) throw ModelLoadError(path + ": not a tunefarm model library (no " + name + ")");
  return reinterpret_cast<F>(p);
}

// A shape of rank `n` at `s` as the library declares it (`what` names it): ModelLoadError for
// a missing one, a negative dimension or too many elements.
std::vector<int64_t> checked_shape(const int64_t* s, int32_t n, const std::string& what) {
  if (n < 0 || n > 64 || (n > 0 && !s)) throw ModelLoadError(what + " has rank " + std::to_string(n));
  int64_t elements = 1;
  for (int32_t d = 0; d < n; ++d) {
    if (s[d] < 0 || (s[d] > 0 && elements > kModelMaxElements / s[d])) {
      throw ModelLoadError(what + ": dimension " + std::to_string(d) + " is " + std::to_string(s[d]) +
                           " (at most " + std::to_string(kModelMaxElements) + " elements in all)");
    }
    elements *= s[d];
  }
  return std::vector<int64_t>(s, s + n);
}

// The library's shape buckets (tf_model_num_buckets, tf_model_bucket_*_shape), each checked
// as the tables are; bucket 0 must be the tables' shapes. One bucket, the tables', for a
// library from before buckets.
std::vector<ModelBucket> describe_buckets(void* h, const std::string& path, const std::vector<ModelTensor>& inputs,
                                          const std::vector<ModelTensor>& outputs) {
  ModelBucket first;
  for (const ModelTensor& t : inputs) first.inputs.push_back(t.shape);
  for (const ModelTensor& t : outputs) first.outputs.push_back(t.shape);
  auto count = reinterpret_cast<int32_t (*)()>(dlsym(h, "tf_model_num_buckets"));
  if (!count) return {first};
  auto in_shape = entry<const int64_t* (*)(int32_t, int32_t)>(h, path, "tf_model_bucket_input_shape");
  auto out_shape = entry<const int64_t* (*)(int32_t, int32_t)>(h, path, "tf_model_bucket_output_shape");
  entry<int32_t (*)(int32_t, const void* const*, void* const*, void*)>(h, path, "tf_model_run_bucket");
  auto padded = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, "tf_model_bucket_padded"));
  const int32_t n = count();
  if (n < 1 || n > kModelMaxBuckets) {
    throw ModelLoadError(path + ": declares " + std::to_string(n) + " shape buckets (1 to " +
                         std::to_string(kModelMaxBuckets) + ")");
  }
  std::vector<ModelBucket> out;
  for (int32_t b = 0; b < n; ++b) {
    ModelBucket bucket;
    for (size_t i = 0; i < inputs.size(); ++i) {
      bucket.inputs.push_back(checked_shape(in_shape(b, static_cast<int32_t>(i)), static_cast<int32_t>(inputs[i].shape.size()),
                                            path + ": bucket " + std::to_string(b) + " input " + std::to_string(i)));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      bucket.outputs.push_back(checked_shape(out_shape(b, static_cast<int32_t>(i)), static_cast<int32_t>(outputs[i].shape.size()),
                                             path + ": bucket " + std::to_string(b) + " output " + std::to_string(i)));
    }
    bucket.padded = padded && padded(b) == 1;
    out.push_back(std::move(bucket));
  }
  if (out[0].inputs != first.inputs || out[0].outputs != first.outputs)
    throw ModelLoadError(path + ": bucket 0's shapes are not those of its input and output tables");
  return out;
}

std::vector<ModelTensor> describe(void* h, const std::string& path, const std::string& role) {
  auto count = entry<int32_t (*)()>(h, path, "tf_model_num_" + role + "s");
  auto name = entry<const char* (*)(int32_t)>(h, path, "tf_model_" + role + "_name");
  auto ndim = entry<int32_t (*)(int32_t)>(h, path, "tf_model_" + role + "_ndim");
  auto shape = entry<const int64_t* (*)(int32_t)>(h, path, "tf_model_" + role + "_shape");
  // Libraries from before outputs had types have no dtype table: all float32.
  auto dtype = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, ("tf_model_" + role + "_dtype").c_str()));
  std::vector<ModelTensor> out;
  for (int32_t i = 0; i < count(); ++i) {
    const int64_t* s = shape(i);
    int32_t n = ndim(i);
    int32_t t = dtype ? dtype(i) : 1;
    if (!tf_dtype_known(t)) {
      throw ModelLoadError(path + ": " + role + " " + std::to_string(i) + " has element type " + std::to_string(t));
    }
    std::vector<int64_t> dims = checked_shape(s, n, path + ": " + role + " " + std::to_string(i));
    const char* nm = name(i);
    out.push_back({nm ? nm : "", std::move(dims), static_cast<ModelDType>(t)});
  }
  return out;
}

// The library's kernel calls (tf_model_num_calls, tf_model_call_function, tf_model_call_bucket),
// each named and of one of its `buckets`: ModelLoadError otherwise.
std::vector<ModelCall> describe_calls(void* h, const std::string& path, size_t buckets) {
  auto count = entry<int32_t (*)()>(h, path, "tf_model_num_calls");
  auto function = entry<const char* (*)(int32_t)>(h, path, "tf_model_call_function");
  auto bucket = entry<int32_t (*)(int32_t)>(h, path, "tf_model_call_bucket");
  const int32_t n = count();
  if (n < 0 || n > kModelMaxCalls) {
    throw ModelLoadError(path + ": declares " + std::to_string(n) + " kernel calls (at most " +
                         std::to_string(kModelMaxCalls) + ")");
  }
  std::vector<ModelCall> out;
  for (int32_t i = 0; i < n; ++i) {
    const char* f = function(i);
    const int32_t b = bucket(i);
    if (!f || b < 0 || static_cast<size_t>(b) >= buckets)
      throw ModelLoadError(path + ": kernel call " + std::to_string(i) +
                           " has no function or bucket");
    out.push_back({std::string(f, strnlen(f, 256)), b});
  }
  return out;
}

}  // namespace

int64_t ModelTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelTensor::bytes() const { return elements() * model_dtype_bytes(dtype); }

ModelAbi::ModelAbi(const std::string& path) : path_(path) {
  if (path.find('\0') != std::string::npos) {
    throw ModelLoadError("the model library path \"" + path.substr(0, path.find('\0')) + "\\0...\" has a NUL byte in it");
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) throw ModelLoadError(path + ": no such model library");
  // The loader maps the file and reads what its headers point at: a file cut short, damaged or
  // of another machine would crash it (SIGBUS) or read as "no such file". It is checked first.
  {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ModelLoadError(path + ": cannot read: " + std::strerror(errno));
    void* map = st.st_size > 0 ? ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    ::close(fd);
    if (st.st_size > 0 && map == MAP_FAILED) throw ModelLoadError(path + ": cannot read: " + std::strerror(errno));
    std::string why = check_kernel_library(std::string_view(static_cast<const char*>(map), static_cast<size_t>(st.st_size)));
    if (map) ::munmap(map, static_cast<size_t>(st.st_size));
    if (!why.empty()) throw ModelLoadError(path + ": not a model library for this machine: " + why);
  }
  // dlopen needs a slash to take the path as a file, not a name to search for.
  std::string p = path.find('/') == std::string::npos ? "./" + path : path;
  handle_ = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw ModelLoadError(path + ": cannot load: " + dlerror());
  try {
    run_ = entry<int (*)(const void* const*, void* const*, void*)>(handle_, path, "tf_model_run");
    workspace_bytes_ = entry<uint64_t (*)()>(handle_, path, "tf_model_workspace_bytes")();
    if (dlsym(handle_, "tf_model_input_name") != nullptr) inputs_ = describe(handle_, path, "input");
    outputs_ = describe(handle_, path, "output");
    buckets_ = describe_buckets(handle_, path, inputs_, outputs_);
    run_bucket_ = reinterpret_cast<int32_t (*)(int32_t, const void* const*, void* const*, void*)>(
        dlsym(handle_, "tf_model_run_bucket"));
    padded_bucket_of_ = reinterpret_cast<int32_t (*)(const int64_t* const*, int64_t*)>(
        dlsym(handle_, "tf_model_padded_bucket_of"));
    if (!padded_bucket_of_ && std::any_of(buckets_.begin(), buckets_.end(),
                                          [](const ModelBucket& b) { return b.padded; })) {
      throw ModelLoadError(
          path +
          ": has padded shape buckets but no tf_model_padded_bucket_of (built by an older "
          "tunefarm): compile it again");
    }
    last_error_ = reinterpret_cast<const char* (*)()>(dlsym(handle_, "tf_model_last_error"));
    set_device_ = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(handle_, "tf_model_set_device"));
    run_device_ =
        reinterpret_cast<int32_t (*)(const uint64_t*, const uint64_t*, void*)>(dlsym(handle_, "tf_model_run_device"));
    run_device_bucket_ =
        reinterpret_cast<int32_t (*)(int32_t, const uint64_t*, const uint64_t*, void*)>(
            dlsym(handle_, "tf_model_run_device_bucket"));
    if (auto kind = reinterpret_cast<const char* (*)()>(dlsym(handle_, "tf_model_device_kind"))) {
      const char* k = kind();
      device_kind_ = k ? std::string(k).substr(0, 16) : "";
    }
    if (dlsym(handle_, "tf_model_set_profiler") != nullptr)
      calls_ = describe_calls(handle_, path, buckets_.size());
    set_profiler_ =
        reinterpret_cast<void (*)(ModelProfilerFn, void*)>(dlsym(handle_, "tf_model_set_profiler"));
  } catch (...) {
    dlclose(handle_);
    throw;
  }
}

ModelAbi::~ModelAbi() {
  if (handle_) dlclose(handle_);
}

int ModelAbi::run(const void* const* inputs, void* const* outputs, void* workspace) const {
  return run_(inputs, outputs, workspace);
}

int ModelAbi::run_bucket(int b, const void* const* inputs, void* const* outputs, void* workspace) const {
  if (b < 0 || b >= static_cast<int>(buckets_.size())) return kModelNoBucket;
  if (b == 0) return run_(inputs, outputs, workspace);
  return run_bucket_(b, inputs, outputs, workspace);
}

int ModelAbi::bucket_of(const std::vector<std::vector<int64_t>>& shapes) const {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].inputs == shapes) return static_cast<int>(b);
  return -1;
}

int ModelAbi::padded_bucket_of(const std::vector<std::vector<int64_t>>& shapes,
                               int64_t* rows) const {
  if (!padded_bucket_of_ || shapes.size() != inputs_.size() || shapes.empty()) return -1;
  std::vector<const int64_t*> dims;
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].size() != inputs_[k].shape.size() || shapes[k].empty())
      return -1;  // the ABI reads its rank
    dims.push_back(shapes[k].data());
  }
  int64_t n = 0;
  const int b = padded_bucket_of_(dims.data(), &n);
  if (b >= 0 && rows) *rows = n;
  return b >= 0 && b < static_cast<int>(buckets_.size()) ? b : -1;
}

std::vector<ModelTensor> ModelAbi::bucket_inputs(int b) const {
  std::vector<ModelTensor> out = inputs_;
  for (size_t i = 0; i < out.size(); ++i) out[i].shape = buckets_.at(static_cast<size_t>(b)).inputs[i];
  return out;
}

std::vector<ModelTensor> ModelAbi::bucket_outputs(int b) const {
  std::vector<ModelTensor> out = outputs_;
  for (size_t i = 0; i < out.size(); ++i) out[i].shape = buckets_.at(static_cast<size_t>(b)).outputs[i];
  return out;
}

int ModelAbi::run_device(const uint64_t* inputs, const uint64_t* outputs, void* stream,
                         int b) const {
  if (!run_device_) throw std::runtime_error(path_ + ": a CPU model takes host buffers, not device ones");
  if (b < 0 || b >= static_cast<int>(buckets_.size())) return kModelNoBucket;
  if (b == 0) return run_device_(inputs, outputs, stream);
  // (A library of several buckets has it: describe_buckets found them.)
  if (!run_device_bucket_)
    throw std::runtime_error(path_ + ": the library has no tf_model_run_device_bucket");
  return run_device_bucket_(b, inputs, outputs, stream);
}

std::string ModelAbi::last_error() const {
  const char* e = last_error_ ? last_error_() : nullptr;
  return e ? std::string(e, strnlen(e, 1024)) : "";
}

std::string ModelAbi::why_no_profiler() const {
  if (set_profiler_) return "";
  return path_ +
         (device_kind_.empty()
              ? std::string(": has no per-kernel profiler (compiled before it): compile it again")
              : ": per-kernel profiles of " + device_kind_ +
                    " libraries are not implemented (bench/gpu_profile.py profiles them on the "
                    "GPU)");
}

void ModelAbi::set_profiler(ModelProfilerFn fn, void* ctx) const {
  if (!set_profiler_) throw std::runtime_error(why_no_profiler());
  set_profiler_(fn, ctx);
}

void ModelAbi::set_device(int index) const {
  if (!set_device_) {
    if (index != 0) throw std::runtime_error(path_ + ": a CPU model runs on this machine's CPU, not on device " + std::to_string(index));
    return;
  }
  if (set_device_(index) != 0) throw std::runtime_error(path_ + ": " + last_error());
}

ModelBuffers make_model_buffers(const ModelAbi& m, uint64_t seed) {
  return make_model_buffers(m.inputs(), m.outputs(), seed);
}

ModelBuffers make_model_buffers(const std::vector<ModelTensor>& inputs, const std::vector<ModelTensor>& outputs,
                                uint64_t seed) {
  ModelBuffers b;
  auto storage = [](const ModelTensor& t) { return std::vector<uint64_t>(static_cast<size_t>((t.bytes() + 7) / 8)); };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ModelTensor& t = inputs[i];
    b.inputs.push_back(storage(t));
    void* data = b.inputs.back().data();
    int64_t n = t.elements();
    if (t.dtype == ModelDType::F32) {
      fill_random(static_cast<float*>(data), n, seed + i);
    } else if (t.dtype == ModelDType::F16 || t.dtype == ModelDType::BF16) {
      std::vector<float> r(static_cast<size_t>(n));
      fill_random(r.data(), n, seed + i);
      auto* bits = static_cast<uint16_t*>(data);
      for (int64_t e = 0; e < n; ++e) {
        const float x = r[static_cast<size_t>(e)];
        bits[e] = t.dtype == ModelDType::F16 ? f16_bits(x) : bf16_bits(x);
      }
    } else if (t.dtype == ModelDType::Bool) {
      std::vector<float> r(static_cast<size_t>(n));
      fill_random(r.data(), n, seed + i);
      auto* bytes = static_cast<uint8_t*>(data);
      for (int64_t e = 0; e < n; ++e) bytes[e] = r[static_cast<size_t>(e)] < 0;
    }  // int64: zeros
  }
  for (const ModelTensor& t : outputs) b.outputs.push_back(storage(t));
  for (auto& v : b.inputs) b.input_ptrs.push_back(v.data());
  for (auto& v : b.outputs) b.output_ptrs.push_back(v.data());
  return b;
}

std::string model_signature_mismatch(const std::vector<ModelTensor>& a_inputs, const std::vector<ModelTensor>& a_outputs,
                                     const std::vector<ModelTensor>& b_inputs, const std::vector<ModelTensor>& b_outputs,
                                     const std::string& a, const std::string& b) {
  auto same = [](const std::vector<ModelTensor>& x, const std::vector<ModelTensor>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].shape != y[i].shape || x[i].dtype != y[i].dtype) return false;
    }
    return true;
  };
  if (!same(a_inputs, b_inputs)) return b + " takes other inputs than " + a;
  if (!same(a_outputs, b_outputs)) return b + " has other outputs than " + a;
  return "";
}

std::string model_signature_mismatch(const ModelAbi& a, const ModelAbi& b) {
  return model_signature_mismatch(a.inputs(), a.outputs(), b.inputs(), b.outputs(), a.path(), b.path());
}

TimingOptions model_timing_options(const ModelTimingSettings& s) {
  TimingOptions o;
  o.number = s.calls;
  o.repeat = s.rounds;
  o.min_repeat_ms = s.min_repeat_ms;
  o.rewarm_ms = s.rewarm_ms;
  o.min_warmup_ms = s.min_warmup_ms;
  return o;
}

}  // namespace tf
