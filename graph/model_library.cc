#include "graph/model_library.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json_limits.h"
#include "compiler/model_entry.h"
#include "compiler/operators.h"
#include "compiler/workload.h"
#include "graph/element_types.h"
#include "graph/onnx_import.h"

namespace tf::graph {

static_assert(kRunnerMaxExactInt == kModelMaxExactInt, "the compiled runner and its loader disagree");
static_assert(kMaxShapeBuckets == kModelMaxBuckets, "the compiler and the loader disagree on the buckets");
namespace {

std::vector<TensorInfo> tensor_infos(const std::vector<ModelTensor>& ts) {
  std::vector<TensorInfo> out;
  for (const ModelTensor& t : ts) {
    out.push_back({t.name, Shape(t.shape.begin(), t.shape.end()),
                   dtype_of_element_type(static_cast<int32_t>(t.dtype))});
  }
  return out;
}

// ModelLibrary::profile's tally: each kernel call's nanoseconds and count, added to by the
// thread that made it, which noted the call's start (kernel calls do not nest).
struct KernelTally {
  std::vector<std::atomic<int64_t>> ns, calls;
  explicit KernelTally(size_t n) : ns(n), calls(n) {}
};

thread_local int64_t kernel_started_ns = 0;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void tally_kernel(void* ctx, int32_t call, int32_t end) {
  if (!end) {
    kernel_started_ns = steady_ns();
    return;
  }
  auto* t = static_cast<KernelTally*>(ctx);
  if (call < 0 || static_cast<size_t>(call) >= t->ns.size()) return;
  t->ns[static_cast<size_t>(call)].fetch_add(steady_ns() - kernel_started_ns,
                                             std::memory_order_relaxed);
  t->calls[static_cast<size_t>(call)].fetch_add(1, std::memory_order_relaxed);
}

// "tf_k12_conv2d_nchwc" / "tf_b1_k3_MatMul" -> "conv2d_nchwc" / "MatMul"; others as they are.
std::string kernel_kind(const std::string& function) {
  static const std::regex prefix("^tf_(b[0-9]+_)?k[0-9]+_");
  return std::regex_replace(function, prefix, "", std::regex_constants::format_first_only);
}

// Fills `calls`' names, workloads (or nodes) and FLOPs from the sidecar at `path` (its
// "kernels", one per call in order); "" when it did, else why not (nothing is changed).
std::string describe_from_sidecar(const std::string& path, std::vector<KernelTime>& calls) {
  using nlohmann::json;
  // A 64-bucket library of 2,000 kernels a bucket has a sidecar of about 40 MB.
  constexpr uintmax_t kMaxSidecarBytes = uintmax_t{256} << 20;
  std::error_code ec;
  if (const uintmax_t bytes = std::filesystem::file_size(path, ec); !ec && bytes > kMaxSidecarBytes)
    return str(path, " is ", bytes, " bytes, over the ", kMaxSidecarBytes >> 20,
               " MiB a sidecar may have");
  json j;
  try {
    j = parse_json_bounded(read_file(path));
  } catch (const std::exception& e) {
    return str(path, " is not a model sidecar (", e.what(), ")");
  }
  const json* ks =
      j.is_object() && j.contains("kernels") && j["kernels"].is_array() ? &j["kernels"] : nullptr;
  if (!ks || ks->size() != calls.size())
    return str(path, " does not list the library's ", calls.size(), " kernel calls");
  std::vector<KernelTime> out = calls;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& k = (*ks)[i];
    auto text = [&](const char* key) {
      return k.is_object() && k.contains(key) && k[key].is_string() ? k[key].get<std::string>()
                                                                    : "";
    };
    // The call is the kernel's function, or the function of the kernel with its code.
    if (text("function") != calls[i].function && text("same_code_as") != calls[i].function)
      return str(path, ": kernel ", i, " is not ", calls[i].function);
    KernelTime& t = out[i];
    t.function = text("function");
    t.kind = kernel_kind(t.function);
    t.what = text("workload");
    if (!t.what.empty()) {
      try {
        t.flops = build_op(parse_workload(t.what)).flops;
      } catch (const std::exception&) {
        t.flops = 0;  // a workload this build does not know: no rate
      }
    } else if (k.contains("nodes") && k["nodes"].is_array()) {
      for (const json& n : k["nodes"])
        if (n.is_string()) t.what += (t.what.empty() ? "" : ", ") + n.get<std::string>();
    }
  }
  calls = std::move(out);
  return "";
}

}  // namespace

std::vector<KernelTime> ModelProfile::ran_longest_first() const {
  std::vector<KernelTime> out;
  for (const KernelTime& t : calls)
    if (t.calls > 0) out.push_back(t);
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelTime& x, const KernelTime& y) { return x.seconds > y.seconds; });
  return out;
}

void ModelLibrary::check_profiler() const {
  if (std::string why = abi_->why_no_profiler(); !why.empty()) throw UserError(why);
}

ModelProfile ModelLibrary::profile(const std::function<void()>& run) const {
  check_profiler();
  const std::vector<ModelCall>& calls = abi_->calls();
  KernelTally tally(calls.size());
  abi_->set_profiler(&tally_kernel, &tally);
  struct Off {
    const ModelAbi& abi;
    ~Off() { abi.set_profiler(nullptr, nullptr); }
  } off{*abi_};
  ModelProfile p;
  const auto start = std::chrono::steady_clock::now();
  run();
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < calls.size(); ++i) {
    p.calls.push_back({calls[i].function, kernel_kind(calls[i].function), "", 0, calls[i].bucket,
                       tally.calls[i].load(), static_cast<double>(tally.ns[i].load()) * 1e-9});
  }
  const std::string sidecar = path_ + ".json";
  if (std::filesystem::exists(sidecar)) p.sidecar_problem = describe_from_sidecar(sidecar, p.calls);
  return p;
}

ModelLibrary::ModelLibrary(const std::string& path) : path_(path) {
  try {
    abi_ = std::make_unique<ModelAbi>(path);
  } catch (const ModelLoadError& e) {
    throw UserError(e.what());
  }
  inputs_ = tensor_infos(abi_->inputs());
  outputs_ = tensor_infos(abi_->outputs());
}

ModelLibrary::~ModelLibrary() = default;

void ModelLibrary::run(const std::vector<const HostTensor*>& inputs,
                       std::vector<HostTensor>& outputs, void* workspace) const {
  if (inputs.size() != inputs_.size()) {
    throw UserError(
        str(path_, ": the model takes ", inputs_.size(), " inputs, not ", inputs.size()));
  }
  // The bucket whose shapes the inputs have (a library of one that pads nothing: bucket 0,
  // checked below), or the one they run padded.
  int bucket = 0;
  if (num_buckets() > 1 || abi_->buckets()[0].padded) {
    std::vector<Shape> shapes;
    for (const HostTensor* t : inputs) shapes.push_back(t->shape);
    bucket = bucket_of(shapes);
    int64_t rows = 0;
    if (int padded = bucket < 0 ? padded_bucket_of(shapes, &rows) : -1; padded >= 0) {
      run_padded(inputs, outputs, workspace, padded, rows);
      return;
    }
    if (bucket < 0) {
      std::string have, served;
      for (const HostTensor* t : inputs) have += (have.empty() ? "" : ", ") + shape_str(t->shape);
      for (int b = 0; b < num_buckets(); ++b) {
        std::string one;
        for (const TensorInfo& t : bucket_inputs(b)) one += (one.empty() ? "" : ", ") + shape_str(t.shape);
        served += str(b == 0 ? "" : "; ", one);
      }
      std::string pads = padded_sizes();
      if (!pads.empty()) pads = str(" (and fewer rows of axis 0 than ", pads, ", padded)");
      throw UserError(str(path_, ": no shape bucket takes inputs of shapes ", have,
                          "; its buckets take ", served, pads));
    }
  }
  const std::vector<TensorInfo> want_in = bucket == 0 ? inputs_ : bucket_inputs(bucket);
  const std::vector<TensorInfo> want_out = bucket == 0 ? outputs_ : bucket_outputs(bucket);
  std::vector<const void*> in;
  std::vector<std::vector<uint8_t>> bool_inputs(
      inputs.size());  // one byte each, as the ABI takes them
  std::vector<std::vector<uint16_t>> bits16(inputs.size());  // float16 and bfloat16 inputs' bits
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorInfo& want = want_in[k];
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
    if (is_storage16(t.dtype)) {  // values of the type (rounded if they were not)
      for (float x : t.f) bits16[k].push_back(storage16_bits(t.dtype, x));
      in.push_back(bits16[k].data());
      continue;
    }
    for (int64_t x : t.i) bool_inputs[k].push_back(x != 0);
    in.push_back(bool_inputs[k].data());
  }
  outputs.resize(outputs_.size());
  std::vector<void*> out;
  std::vector<std::vector<uint8_t>> bools(outputs_.size());  // one byte each, as the library writes them
  std::vector<std::vector<uint16_t>> out16(outputs_.size());  // float16 and bfloat16 outputs' bits
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const TensorInfo& o = want_out[k];
    int64_t n = num_elements(o.shape);
    // The data's size too: a default HostTensor has the shape of a rank-0 output, no data.
    size_t have = holds_floats(o.dtype) ? outputs[k].f.size() : outputs[k].i.size();
    if (outputs[k].shape != o.shape || outputs[k].dtype != o.dtype ||
        have != static_cast<size_t>(n)) {
      outputs[k] = holds_floats(o.dtype)
                       ? HostTensor::floats(o.shape, std::vector<float>(n), o.dtype)
                       : HostTensor::ints(o.shape, std::vector<int64_t>(n), o.dtype);
    }
    if (is_storage16(o.dtype)) {
      out16[k].resize(static_cast<size_t>(n));
      out.push_back(out16[k].data());
    } else if (o.dtype == DType::Bool) {
      bools[k].resize(static_cast<size_t>(n));
      out.push_back(bools[k].data());
    } else {
      out.push_back(o.dtype == DType::F32 ? static_cast<void*>(outputs[k].f.data()) : outputs[k].i.data());
    }
  }
  int status = abi_->run_bucket(bucket, in.data(), out.data(), workspace);
  if (status == kModelIntOutOfRange) {
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
  }
  check_status(status);
  for (size_t k = 0; k < outputs_.size(); ++k) {
    for (size_t e = 0; e < bools[k].size(); ++e) outputs[k].i[e] = bools[k][e];
    for (size_t e = 0; e < out16[k].size(); ++e)
      outputs[k].f[e] = storage16_value(outputs_[k].dtype, out16[k][e]);
  }
}

void ModelLibrary::run_device(const std::vector<uint64_t>& inputs,
                              const std::vector<uint64_t>& outputs, void* stream,
                              int bucket) const {
  TF_CHECK(inputs.size() == inputs_.size() && outputs.size() == outputs_.size(), "run_device: ", inputs.size(),
           " inputs and ", outputs.size(), " outputs for a model of ", inputs_.size(), " and ", outputs_.size());
  TF_CHECK(bucket >= 0 && bucket < num_buckets(), "run_device: bucket ", bucket, " of ",
           num_buckets());
  int status = abi_->run_device(inputs.data(), outputs.data(), stream, bucket);
  check_status(status);
}

void ModelLibrary::check_status(int status) const {
  if (status == 0) return;
  if (status == kModelIntOutOfRange) {
    throw UserError(str(path_, ": an int64 input holds a value beyond +-", kRunnerMaxExactInt,
                        " (2^24, exact in the float32 the kernels compute in)"));
  }
  if (std::string why = abi_->last_error(); !why.empty()) throw std::runtime_error(str(path_, ": ", why));
  if (status == kModelOutOfMemory) {
    throw std::runtime_error(str(path_, ": the model ran out of memory (workspace of ", abi_->workspace_bytes(),
                                 " bytes, or a kernel's own buffers)"));
  }
  throw std::runtime_error(str(path_, ": the model failed (status ", status, ")"));
}

void ModelLibrary::run_raw(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                           void* workspace, int bucket) const {
  TF_CHECK(inputs.size() == inputs_.size() && outputs.size() == outputs_.size(), "run_raw: ", inputs.size(),
           " inputs and ", outputs.size(), " outputs for a model of ", inputs_.size(), " and ", outputs_.size());
  TF_CHECK(bucket >= 0 && bucket < num_buckets(), "run_raw: bucket ", bucket, " of ", num_buckets());
  int status = abi_->run_bucket(bucket, inputs.data(), outputs.data(), workspace);
  check_status(status);
}

int ModelLibrary::num_buckets() const { return static_cast<int>(abi_->buckets().size()); }

std::vector<TensorInfo> ModelLibrary::bucket_inputs(int b) const { return tensor_infos(abi_->bucket_inputs(b)); }

std::vector<TensorInfo> ModelLibrary::bucket_outputs(int b) const { return tensor_infos(abi_->bucket_outputs(b)); }

int ModelLibrary::padded_bucket_of(const std::vector<Shape>& shapes, int64_t* rows) const {
  return abi_->padded_bucket_of(shapes, rows);
}

std::string ModelLibrary::padded_sizes() const {
  std::string out;
  for (int b = 0; b < num_buckets(); ++b)
    if (bucket_padded(b))
      out +=
          str(out.empty() ? "" : ", ", abi_->buckets()[static_cast<size_t>(b)].inputs.at(0).at(0));
  return out;
}

// The first `rows` rows of axis 0 of `t` in a zero-filled tensor of `shape` (more rows), or
// (shape with fewer rows) the first rows of `t`.
static HostTensor rows_of(const HostTensor& t, const Shape& shape, int64_t rows) {
  const int64_t row = t.shape[0] > 0 ? num_elements(t.shape) / t.shape[0] : 0;
  const auto n = static_cast<std::ptrdiff_t>(rows * row);
  if (holds_floats(t.dtype)) {
    std::vector<float> f(static_cast<size_t>(num_elements(shape)), 0.0f);
    std::copy(t.f.begin(), t.f.begin() + n, f.begin());
    return HostTensor::floats(shape, std::move(f), t.dtype);
  }
  std::vector<int64_t> i(static_cast<size_t>(num_elements(shape)), 0);
  std::copy(t.i.begin(), t.i.begin() + n, i.begin());
  return HostTensor::ints(shape, std::move(i), t.dtype);
}

void ModelLibrary::run_padded(const std::vector<const HostTensor*>& inputs,
                              std::vector<HostTensor>& outputs, void* workspace, int bucket,
                              int64_t rows) const {
  const std::vector<TensorInfo> want = bucket_inputs(bucket);
  std::vector<HostTensor> padded;
  for (size_t k = 0; k < inputs.size(); ++k)
    padded.push_back(rows_of(*inputs[k], want[k].shape, rows));
  std::vector<const HostTensor*> in;
  for (const HostTensor& t : padded) in.push_back(&t);
  std::vector<HostTensor> out;
  run(in, out, workspace);
  outputs.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    Shape shape = out[k].shape;
    shape.at(0) = rows;
    outputs[k] = rows_of(out[k], shape, rows);
  }
}

int ModelLibrary::bucket_of(const std::vector<Shape>& shapes) const {
  std::vector<std::vector<int64_t>> s;
  for (const Shape& x : shapes) s.emplace_back(x.begin(), x.end());
  return abi_->bucket_of(s);
}

}  // namespace tf::graph
