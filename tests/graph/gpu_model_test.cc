// GPU model libraries (compile --model for cuda and rocm: runtime/gpu_model) on a machine
// without a GPU. The library's real path runs against the FAKE libcuda of tests/farm/fake_gpu,
// which keeps "device memory" in host memory and, given the same model compiled with
// --emulate-gpu, runs each launched kernel's emulation on the launch's arguments: so the
// library's own work (loading its modules, finding every kernel, the arena at the memory
// plan's offsets, constants uploaded once, split-K workspaces, int64 and bool conversions,
// output copies, the order of launches, errors) is checked against the reference evaluation.
// What it cannot check is the PTX itself, which only a GPU runs (bench/gpu_bench.py).
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_io.h"
#include "compiler/attention.h"
#include "compiler/link.h"
#include "compiler/lower.h"
#include "compiler/model_entry.h"
#include "compiler/operators.h"
#include "compiler/schedule_templates.h"
#include "compiler/target.h"
#include "graph/fusion.h"
#include "graph/memory_budget.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "graph/npy.h"
#include "graph/onnx_import.h"
#include "graph/reference_run.h"
#include "runtime/gpu_model/image.h"
#include "tests/graph/onnx_builder.h"

namespace fs = std::filesystem;
using nlohmann::json;
using tf::graph::testing::ModelBuilder;
using namespace tf::graph;  // NOLINT

namespace {

const std::string kFakeCudaDir = TF_FAKE_CUDA_DIR;
const std::string kTunefarm = TF_TUNEFARM;

class GpuModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tf-gpu-model-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Compiles `b` for `target` twice: the GPU library (`name`.so) and its emulation
  // (`name`.emu.so), with the aliases file the fake reads. Returns the graph compiled.
  // `configs`: the kernels' configs (default: every kernel's default); `precision`: the
  // products' (tf32, fp16, bf16: on tensor cores, emulated as generic kernels of their rounding).
  Graph compile_both(const ModelBuilder& b, const std::string& name,
                     const std::string& target = "cuda -arch=sm_80", ConfigLookup configs = nullptr,
                     tf::Precision precision = tf::Precision::Float32, int opt_level = 2,
                     const std::vector<std::string>& disabled = {}) {
    b.save(path(name + ".onnx"));
    tf::Target t = tf::parse_target(target);
    Graph g = load_model(path(name + ".onnx"), opt_level, disabled, channel_block(t), precision,
                         tensor_cores(t));
    if (!configs) configs = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
    compile_model(g, t, configs, path(name + ".so"), name);
    compile_model(g, t, configs, path(name + ".emu.so"), name, default_memory_budget(), true);
    write_aliases(name);
    return g;
  }
  // The aliases file the fake reads for `name`.so and its emulation `name`.emu.so: kernels the
  // emulation generated once under another's name, and launches of code the GPU library shares
  // on a grid of its own (which the emulation's kernel of that grid computes).
  void write_aliases(const std::string& name) const {
    std::ofstream aliases(path(name + ".aliases"));
    std::map<std::string, std::string> code;  // emulated kernel -> the function that has its code
    const json emulated = sidecar(name + ".emu.so"), gpu = sidecar(name + ".so");
    for (const json& k : emulated["kernels"]) {
      const std::string f = k["function"];
      code[f] = k.value("same_code_as", f);
      if (k.contains("same_code_as")) aliases << f << " " << code[f] << "\n";
    }
    for (const json& k : gpu["kernels"]) {
      if (!k.contains("same_code_as") || !k["launch"].contains("grid")) continue;
      const json& g = k["launch"]["grid"];
      aliases << k["same_code_as"].get<std::string>() << "@" << g[0] << "," << g[1] << "," << g[2]
              << " " << code.at(k["function"]) << "\n";
    }
  }
  json sidecar(const std::string& so) const { return json::parse(std::ifstream(path(so + ".json"))); }

  // `tunefarm ARGS` with the fake driver running `name`'s emulated kernels.
  tf::CommandResult tunefarm(const std::string& name, std::vector<std::string> args,
                             std::vector<std::string> env = {}) const {
    std::vector<std::string> argv = {"/usr/bin/env", "LD_LIBRARY_PATH=" + kFakeCudaDir,
                                     "TF_FAKE_CUDA_KERNELS=" + path(name + ".emu.so"),
                                     "TF_FAKE_CUDA_ALIASES=" + path(name + ".aliases"),
                                     "TF_FAKE_CUDA_LOG=" + path(name + ".log")};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(kTunefarm);
    argv.insert(argv.end(), args.begin(), args.end());
    return tf::run_command(argv);
  }

  fs::path dir_;
};

void initializer(ModelBuilder& b, const std::string& name, const std::vector<int64_t>& dims, uint32_t seed,
                 float scale = 0.5f) {
  auto* t = b.g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t k = 0; k < n; ++k) t->add_float_data(u(rng));
}

HostTensor random_floats(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(num_elements(s)));
  for (float& x : v) x = u(rng);
  return HostTensor::floats(s, v);
}

// As the node tests compare (onnx.backend.test's rtol 1e-3, atol 1e-5).
std::string compare(const HostTensor& want, const HostTensor& got) {
  if (want.shape != got.shape) return "shape " + shape_str(got.shape) + ", expected " + shape_str(want.shape);
  for (int64_t k = 0; k < want.size(); ++k) {
    double w = want.as_double(k), g = got.as_double(k);
    if (!(std::fabs(w - g) <= 1e-5 + 1e-3 * std::fabs(w)))
      return "element " + std::to_string(k) + " is " + std::to_string(g) + ", expected " + std::to_string(w);
  }
  return "";
}

// A small residual CNN: conv + relu, conv + residual add, pooling, a dense layer, softmax.
ModelBuilder conv_net() {
  ModelBuilder b;
  b.input("x", {1, 3, 16, 16});
  initializer(b, "w1", {8, 3, 3, 3}, 1);
  initializer(b, "b1", {8}, 2);
  initializer(b, "w2", {8, 8, 3, 3}, 3);
  initializer(b, "b2", {8}, 4);
  initializer(b, "wd", {10, 8}, 5);
  initializer(b, "bd", {10}, 6);
  tf::graph::testing::set_ints(b.node("Conv", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  tf::graph::testing::set_ints(b.node("Conv", {"r1", "w2", "b2"}, {"c2"}), "pads", {1, 1, 1, 1});
  b.node("Add", {"c2", "r1"}, {"s"});
  b.node("GlobalAveragePool", {"s"}, {"p"});
  b.node("Flatten", {"p"}, {"f"});
  tf::graph::testing::set_int(b.node("Gemm", {"f", "wd", "bd"}, {"d"}), "transB", 1);
  b.node("Softmax", {"d"}, {"y"});
  b.output("y", {1, 10});
  return b;
}

// The place and size of a GPU library's .tf_gpu_model section in its bytes, from its section
// headers ({0, 0} when it has none).
std::pair<size_t, size_t> model_section(const std::string& lib) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, lib.data(), sizeof eh);
  Elf64_Shdr names;
  std::memcpy(&names, lib.data() + eh.e_shoff + eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof names);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, lib.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (std::string(lib.data() + names.sh_offset + sh.sh_name) == ".tf_gpu_model")
      return {sh.sh_offset, sh.sh_size};
  }
  return {0, 0};
}

// Runs `lib` in this process on `inputs` (in the model's order).
std::vector<HostTensor> run_library(const std::string& so, const std::vector<HostTensor>& inputs) {
  ModelLibrary lib(so);
  std::vector<const HostTensor*> in;
  for (const HostTensor& t : inputs) in.push_back(&t);
  std::vector<HostTensor> out;
  lib.run(in, out);
  return out;
}

}  // namespace

// GPU libraries are linked by lld in this process, like CPU ones, and lld keeps a pointer to
// _GLOBAL_OFFSET_TABLE_ past the link that defined it (compiler/link.h): the runtime object
// every GPU library takes must not name the symbol. (The other tests here link GPU and CPU
// libraries one after the other in one process; the sanitizer pass runs them.)
TEST_F(GpuModel, TheRuntimeObjectNamesNoGlobalOffsetTable) {
  const std::string object = path("runtime.o");
  tf::write_file(object, std::string(tf::gpu_model_runtime_object()));
  tf::CommandResult r = tf::run_command({"nm", object});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tf_model_run"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("_GLOBAL_OFFSET_TABLE_"), std::string::npos) << r.output;
}

// The sidecar of a GPU library says where its kernels are and how each is launched; the
// library says it is one for cuda, and tf_model_workspace_bytes is 0 (the arena is on the
// device).
TEST_F(GpuModel, CompilesForCudaWithPtxInsideAndALaunchPerKernel) {
  compile_both(conv_net(), "cnn");
  json sc = sidecar("cnn.so");
  EXPECT_EQ(sc["target"], "cuda -arch=sm_80");
  EXPECT_TRUE(sc["emulates"].is_null());
  EXPECT_EQ(sc["device_code"]["format"], "ptx");
  EXPECT_GE(sc["device_code"]["modules"].get<int>(), 1);
  for (const json& k : sc["kernels"]) {
    ASSERT_TRUE(k.contains("launch")) << k.dump();
    EXPECT_GE(k["launch"]["block"][0].get<int>(), 1);
    EXPECT_FALSE(k.contains("same_code_as"));
  }
  // The PTX is in the library (the driver compiles it when the model first runs).
  std::ifstream f(path("cnn.so"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(bytes.find(".target sm_80"), std::string::npos);
  EXPECT_NE(bytes.find(".visible .entry " + sc["kernels"][0]["function"].get<std::string>() + "("), std::string::npos);
  void* h = dlopen(path("cnn.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto kind = reinterpret_cast<const char* (*)()>(dlsym(h, "tf_model_device_kind"));
  ASSERT_NE(kind, nullptr);
  EXPECT_STREQ(kind(), "cuda");
  auto ws = reinterpret_cast<uint64_t (*)()>(dlsym(h, "tf_model_workspace_bytes"));
  EXPECT_EQ(ws(), 0u);
  EXPECT_NE(dlsym(h, "tf_model_run_device"), nullptr);
  EXPECT_EQ(dlsym(h, "tf_model_set_profiler"), nullptr);
  dlclose(h);
  // Per-kernel profiles are for CPU libraries (bench/gpu_profile.py times GPU kernels).
  ModelLibrary lib(path("cnn.so"));
  try {
    lib.profile([] {});
    ADD_FAILURE() << "a GPU library was profiled";
  } catch (const tf::UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("per-kernel profiles of cuda libraries are not implemented"),
        std::string::npos)
        << e.what();
  }
}

// Through `tunefarm run --model` (the host entry point): the fake driver runs the emulated
// kernels in the library's launch order on its arena and constants; the outputs match the
// reference, every kernel is launched, and device memory is allocated on the first call only.
TEST_F(GpuModel, RunsThroughTheDriverAndMatchesTheReference) {
  Graph g = compile_both(conv_net(), "cnn");
  HostTensor x = random_floats({1, 3, 16, 16}, 7);
  write_npy(path("x.npy"), x);
  HostTensor want = run_reference(g, {{"x", x}}).at("y");
  for (int repeat : {1, 4}) {
    fs::remove(path("cnn.log"));
    tf::CommandResult r = tunefarm("cnn", {"run", "--model", path("cnn.so"), "--input", path("x.npy"), "--output",
                                           path("y.npy"), "--repeat", std::to_string(repeat), "--warmup-ms", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cuda GPU"), std::string::npos) << r.output;
    EXPECT_EQ(compare(want, read_npy(path("y.npy"))), "");
    std::ifstream log(path("cnn.log"));
    std::string text((std::istreambuf_iterator<char>(log)), {});
    const json sc = sidecar("cnn.so");
    for (const json& k : sc["kernels"])
      EXPECT_NE(text.find("launch " + k["function"].get<std::string>() + " "), std::string::npos) << text;
    // Arena, constants, one input, one output: once, however many calls.
    size_t allocs = 0;
    for (size_t at = 0; (at = text.find("alloc ", at)) != std::string::npos; ++at) ++allocs;
    EXPECT_EQ(allocs, 4u) << text;
  }
}

// `run --model --profile` (docs/models.md, "Profiling"): the emulated library (a CPU one) times
// each kernel, named as its sidecar names it; the GPU library is refused by name before any call.
TEST_F(GpuModel, ProfileTimesTheEmulatedLibrarysKernelsAndRefusesTheGpuOne) {
  compile_both(conv_net(), "cnn");
  tf::CommandResult r = tunefarm("cnn", {"run", "--model", path("cnn.emu.so"), "--profile",
                                         "--json", "--repeat", "3", "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json out = json::parse(r.output.substr(r.output.find('{')));
  const json& p = out["profile"];
  EXPECT_EQ(p["runs"], 3);
  const json sc = sidecar("cnn.emu.so");
  ASSERT_EQ(p["kernels"].size(), sc["kernels"].size()) << p.dump(1);
  std::set<std::string> workloads, seen;
  for (const json& k : sc["kernels"])
    if (k.contains("workload")) workloads.insert(k["workload"].get<std::string>());
  double kinds = 0, kernels = 0;
  for (const json& k : p["kernels"]) {
    EXPECT_EQ(k["calls"], 3) << k.dump();
    EXPECT_FALSE(k["what"].get<std::string>().empty()) << k.dump();
    EXPECT_EQ(k["function"].get<std::string>().find(k["kind"].get<std::string>()),
              k["function"].get<std::string>().size() - k["kind"].get<std::string>().size())
        << k.dump();
    if (workloads.count(k["what"].get<std::string>())) seen.insert(k["what"].get<std::string>());
    kernels += k["ms_per_run"].get<double>();
  }
  EXPECT_EQ(seen, workloads);
  for (const json& k : p["kinds"]) kinds += k["ms_per_run"].get<double>();
  EXPECT_NEAR(kinds, kernels, 1e-9 + 1e-9 * kernels);
  EXPECT_NEAR(p["kernel_ms_per_run"].get<double>(), kernels, 1e-9 + 1e-9 * kernels);
  r = tunefarm("cnn", {"run", "--model", path("cnn.emu.so"), "--profile", "--repeat", "2",
                       "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile   2 runs with each kernel timed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\nby kind\n"), std::string::npos) << r.output;
  fs::remove(path("cnn.log"));
  r = tunefarm("cnn", {"run", "--model", path("cnn.so"), "--profile", "--warmup-ms", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("per-kernel profiles of cuda libraries are not implemented "
                          "(bench/gpu_profile.py profiles "
                          "them on the GPU)"),
            std::string::npos)
      << r.output;
  std::ifstream log(path("cnn.log"));
  const std::string launched((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(launched.find("launch "), std::string::npos)
      << "the GPU library ran before the refusal:\n"
      << launched;
}

// An atrous convolution whose taps read padding at most outputs (rate 12 over 20x20) runs as
// split-conv-regions' rectangles on GPUs too: nine Convs, Slices and Concats along the height
// and width, each a kernel of its own, matching the reference.
TEST_F(GpuModel, AtrousConvolutionRegionsRunThroughTheDriver) {
  ModelBuilder b;
  b.input("x", {1, 256, 20, 20});
  initializer(b, "w", {64, 256, 3, 3}, 11, 0.05f);
  initializer(b, "b", {64}, 12);
  onnx::NodeProto* conv = b.node("Conv", {"x", "w", "b"}, {"c"});
  tf::graph::testing::set_ints(conv, "pads", {12, 12, 12, 12});
  tf::graph::testing::set_ints(conv, "dilations", {12, 12});
  b.node("Relu", {"c"}, {"y"});
  b.output("y", {1, 64, 20, 20});
  Graph g = compile_both(b, "aspp");
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["Conv"], 9);
  EXPECT_EQ(ops["Concat"], 4);
  HostTensor x = random_floats({1, 256, 20, 20}, 8);
  write_npy(path("x.npy"), x);
  tf::CommandResult r = tunefarm("aspp", {"run", "--model", path("aspp.so"), "--input", path("x.npy"), "--output",
                                          path("y.npy"), "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(run_reference(g, {{"x", x}}).at("y"), read_npy(path("y.npy"))), "");
}

// A model at --precision fp16 and bf16 (convolutions and the Gemm on tensor cores, their weights
// and the values only they read stored in 16 bits): the GPU library's own work on 16-bit
// constants and edges, through the fake driver running the emulation (each tensor-core kernel a
// generic kernel of the same rounding), matches the reference evaluation of the same rounding.
TEST_F(GpuModel, TensorCoreModelsRunThroughTheDriverAndMatchTheReference) {
  for (tf::Precision p : {tf::Precision::Float16, tf::Precision::BFloat16}) {
    const std::string name = std::string("cnn_") + tf::precision_name(p);
    Graph g = compile_both(conv_net(), name, "cuda -arch=sm_90", nullptr, p);
    EXPECT_EQ(g.tensor_core_nodes, 3) << name;
    const json emu = sidecar(name + ".emu.so");
    EXPECT_EQ(emu["emulated_products"], 3) << name;
    HostTensor x = random_floats({1, 3, 16, 16}, 7);
    write_npy(path("x.npy"), x);
    HostTensor want = run_reference(g, {{"x", x}}).at("y");
    tf::CommandResult r =
        tunefarm(name, {"run", "--model", path(name + ".so"), "--input", path("x.npy"), "--output", path("y.npy"),
                        "--repeat", "1", "--warmup-ms", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(compare(want, read_npy(path("y.npy"))), "") << name;
    std::ifstream log(path(name + ".log"));
    std::string text((std::istreambuf_iterator<char>(log)), {});
    const json sc = sidecar(name + ".so");
    for (const json& k : sc["kernels"])
      EXPECT_NE(text.find("launch " + k["function"].get<std::string>() + " "), std::string::npos) << text;
  }
}

// At --precision tf32 a product's constant float32 weights are read as [N][K] (trans_b=1, so
// dense_tc.cuda reads B's fragments by ldmatrix): a MatMul's [K][N] weights and a Gemm's
// transB=0 ones transposed once (once for two products sharing them), a Gemm's transB=1 ones
// kept as they are. Through the fake
// driver running the emulation (which reads the weights as the workload says): the reference
// evaluation of the same rounding; a weight transposed the wrong way fails it.
TEST_F(GpuModel, Tf32ProductsReadTheirWeightsAlongK) {
  ModelBuilder b;
  b.input("x", {2, 5, 24});
  initializer(b, "w1", {24, 40}, 1);  // MatMul [K][N]
  initializer(b, "w2", {16, 40}, 2);  // Gemm transB=1: [N][K]
  initializer(b, "b2", {16}, 3);
  initializer(b, "w3", {16, 12}, 4);  // Gemm transB=0: [K][N]
  b.node("MatMul", {"x", "w1"}, {"h1"});
  b.node("Relu", {"x"}, {"rx"});
  b.node("MatMul", {"rx", "w1"}, {"h2"});  // the same weights
  b.node("Add", {"h1", "h2"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("Reshape", {"r", "shape"}, {"r2"});
  tf::graph::testing::set_int(b.node("Gemm", {"r2", "w2", "b2"}, {"g"}), "transB", 1);
  b.node("Gemm", {"g", "w3"}, {"y"});
  b.output("y", {10, 12});
  {
    auto* t = b.g->add_initializer();
    t->set_name("shape");
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(2);
    t->add_int64_data(10);
    t->add_int64_data(40);
  }
  Graph g = compile_both(b, "tf32w", "cuda -arch=sm_90", nullptr, tf::Precision::TF32);
  EXPECT_EQ(g.tensor_core_nodes, 4);
  int along_k = 0;
  std::set<std::string> w1_given;  // the constants the two products of w1 read
  const json sc = sidecar("tf32w.so");
  for (const json& k : sc["kernels"]) {
    const std::string w = k.value("workload", "");
    if (w.rfind("matmul(", 0) != 0) continue;
    EXPECT_NE(w.find("trans_b=1"), std::string::npos) << w;
    EXPECT_NE(w.find("precision=tf32"), std::string::npos) << w;
    EXPECT_EQ(w.find("const_b"), std::string::npos) << w;
    if (w.find("N=40,K=24") != std::string::npos) w1_given.insert(k["args"][1].get<std::string>());
    ++along_k;
  }
  EXPECT_EQ(along_k, 4);
  EXPECT_EQ(w1_given.size(), 1u);  // transposed once
  HostTensor x = random_floats({2, 5, 24}, 7);
  write_npy(path("x.npy"), x);
  HostTensor want = run_reference(g, {{"x", x}}).at("y");
  tf::CommandResult r =
      tunefarm("tf32w", {"run", "--model", path("tf32w.so"), "--input", path("x.npy"), "--output",
                         path("y.npy"), "--repeat", "1", "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want, read_npy(path("y.npy"))), "");
}

// A post-norm transformer's pattern at --precision fp16: a LayerNorm output that products read
// through views (turned sequence-first; reshaped) and a residual Add reads too, stored in 16
// bits by the LayerNorm's kernel; without read-views-in-products the views pass the 16 bits on
// (the first in place, no kernel; the second a kernel copying them, as the first took the
// place), with it the products read them; the Add reads them through a widening Cast in its
// kernel. Through the fake driver running the emulation: the reference evaluation of the same
// rounding, exactly.
TEST_F(GpuModel, SixteenBitValuesPassThroughViewsAndWideningCasts) {
  ModelBuilder b;
  b.input("x", {1, 8, 16});
  initializer(b, "gamma", {16}, 1);
  initializer(b, "beta", {16}, 2);
  initializer(b, "w1", {16, 12}, 3);
  initializer(b, "w2", {16, 10}, 4);
  b.ints("shape", {8, 16});
  tf::graph::testing::set_int(b.node("LayerNormalization", {"x", "gamma", "beta"}, {"ln"}), "axis",
                              -1);
  tf::graph::testing::set_ints(b.node("Transpose", {"ln"}, {"t"}), "perm", {1, 0, 2});
  b.node("MatMul", {"t", "w1"}, {"q"});
  b.node("Reshape", {"ln", "shape"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"k"});
  b.node("Add", {"ln", "x"}, {"y"});
  b.output("q", {8, 1, 12});
  b.output("k", {8, 10});
  b.output("y", {1, 8, 16});
  // The views as kernels and in place, as without read-views-in-products (below: with it).
  Graph g = compile_both(b, "ln16", "cuda -arch=sm_90", nullptr, tf::Precision::Float16, 2,
                         {"read-views-in-products"});
  EXPECT_EQ(g.sixteen_bit_values, 1);
  int views16 = 0, widening = 0;
  for (const Node& n : g.nodes) {
    if ((n.op == "Transpose" || n.op == "Reshape") && g.value(n.outputs[0]).dtype == DType::F16)
      ++views16;
    if (n.op == "Cast" && !n.has(kStorageCast)) ++widening;
  }
  EXPECT_EQ(views16, 2);
  EXPECT_EQ(widening, 1);
  const json sc = sidecar("ln16.so");
  EXPECT_EQ(sc["in_place"].size(), 1u) << sc["in_place"].dump();
  for (const json& k : sc["kernels"]) {
    if (k.value("workload", "").rfind("matmul(", 0) == 0) {
      EXPECT_NE(k["workload"].get<std::string>().find(",dtype=float16,"), std::string::npos)
          << k.dump();
    }
  }
  HostTensor x = random_floats({1, 8, 16}, 9);
  write_npy(path("x.npy"), x);
  auto want = run_reference(g, {{"x", x}});
  tf::CommandResult r =
      tunefarm("ln16", {"run", "--model", path("ln16.so"), "--input", path("x.npy"), "--output",
                        "q=" + path("q.npy"), "--output", "k=" + path("k.npy"), "--output",
                        "y=" + path("y.npy"), "--repeat", "1", "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* o : {"q", "k", "y"})
    EXPECT_EQ(compare(want.at(o), read_npy(path(std::string(o) + ".npy"))), "") << o << "\n"
                                                                                << r.output;
  // With read-views-in-products (the default) the products read both views themselves: two
  // views of one value, of which memory planning would compute only the first in place
  // (graph/memory_plan.h view_in_place_by_itself), so the second's copy kernel is gone and
  // nothing is in place.
  Graph gv = compile_both(b, "ln16v", "cuda -arch=sm_90", nullptr, tf::Precision::Float16);
  EXPECT_TRUE(gv.products_read_views);
  const json sv = sidecar("ln16v.so");
  EXPECT_EQ(sv["in_place"].size(), 0u) << sv["in_place"].dump();
  EXPECT_EQ(sv["kernels"].size() + 1, sc["kernels"].size()) << sv.dump(1);
  auto want_v = run_reference(gv, {{"x", x}});
  r = tunefarm("ln16v", {"run", "--model", path("ln16v.so"), "--input", path("x.npy"), "--output",
                         "q=" + path("qv.npy"), "--output", "k=" + path("kv.npy"), "--output",
                         "y=" + path("yv.npy"), "--repeat", "1", "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* o : {"q", "k", "y"})
    EXPECT_EQ(compare(want_v.at(o), read_npy(path(std::string(o) + "v.npy"))), "") << o << "\n"
                                                                                   << r.output;
}

// The failures a user can meet say what happened: no driver, a device that does not exist,
// a kernel that fails, the wrong kind of device.
TEST_F(GpuModel, DriverFailuresAreClearErrors) {
  compile_both(conv_net(), "cnn");
  std::string so = path("cnn.so");
  // No driver (LD_LIBRARY_PATH without the fake; skipped where a real driver is installed).
  if (void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); real == nullptr && !fs::exists("/usr/lib/x86_64-linux-gnu/libcuda.so.1")) {
    tf::CommandResult r = tf::run_command({"/usr/bin/env", "LD_LIBRARY_PATH=" + path("nothing"), kTunefarm, "run",
                                           "--model", so, "--warmup-ms", "0"});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("this model runs on cuda GPUs and the driver's library (libcuda.so.1) did not load"),
              std::string::npos)
        << r.output;
  }
  tf::CommandResult r = tunefarm("cnn", {"run", "--model", so, "--device", "cuda:1", "--warmup-ms", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cuda:1 cuDeviceGet failed"), std::string::npos) << r.output;
  std::string second = sidecar("cnn.so")["kernels"][1]["function"];
  r = tunefarm("cnn", {"run", "--model", so, "--warmup-ms", "0"}, {"TF_FAKE_CUDA_FAIL_LAUNCH=" + second});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("launching kernel " + second + " failed: CUDA_ERROR_LAUNCH_FAILED"), std::string::npos)
      << r.output;
  // Out of device memory: the arena (or the constants) do not fit.
  r = tunefarm("cnn", {"run", "--model", so, "--warmup-ms", "0"}, {"TF_FAKE_CUDA_MEMORY=1024"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("allocating the model's device memory (arena and constants) failed: CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos)
      << r.output;
  r = tunefarm("cnn", {"run", "--model", so, "--device", "rocm:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device rocm:0: " + so + " runs on cuda GPUs"), std::string::npos) << r.output;
  r = tunefarm("cnn", {"run", "--model", so, "--device", "cuda:x"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'cuda:x' is not cpu, cuda:N or rocm:N"), std::string::npos) << r.output;
  r = tunefarm("cnn", {"run", "--model", path("cnn.emu.so"), "--device", "cuda:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("runs on this machine's CPU"), std::string::npos) << r.output;
}

// A first call that fails (out of device memory) leaves the modules it loaded loaded: the
// device can no longer change, and the next calls load none again (the one with memory runs).
// In this process, the fake driver loaded first by its path.
TEST_F(GpuModel, AFailedFirstCallIsRetriedWithoutReloadingModules) {
  Graph g = compile_both(conv_net(), "retry");
  const int64_t modules = sidecar("retry.so")["device_code"]["modules"];
  HostTensor x = random_floats({1, 3, 16, 16}, 7);
  HostTensor want = run_reference(g, {{"x", x}}).at("y");
  ASSERT_NE(dlopen((kFakeCudaDir + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  setenv("TF_FAKE_CUDA_KERNELS", path("retry.emu.so").c_str(), 1);
  setenv("TF_FAKE_CUDA_ALIASES", path("retry.aliases").c_str(), 1);
  setenv("TF_FAKE_CUDA_LOG", path("retry.log").c_str(), 1);
  setenv("TF_FAKE_CUDA_MEMORY", "1024", 1);
  ModelLibrary lib(path("retry.so"));
  std::vector<const HostTensor*> in{&x};
  std::vector<HostTensor> out;
  try {
    lib.run(in, out);
    ADD_FAILURE() << "ran in 1 KiB of device memory";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << e.what();
  }
  void* h = dlopen(path("retry.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto set_device = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, "tf_model_set_device"));
  if (set_device(1) != -3) {
    ADD_FAILURE() << "moved to device 1 with the modules loaded on device 0";
    set_device(0);
  }
  EXPECT_THROW(lib.run(in, out), std::exception);  // still out of memory
  unsetenv("TF_FAKE_CUDA_MEMORY");
  lib.run(in, out);
  unsetenv("TF_FAKE_CUDA_LOG");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(compare(want, out[0]), "");
  std::ifstream log(path("retry.log"));
  int loads = 0;
  for (std::string line; std::getline(log, line);) loads += line.rfind("module ", 0) == 0;
  EXPECT_EQ(loads, modules) << "modules loaded again after the failed call";
  dlclose(h);
}

// A matmul with a long reduction, which the default GPU schedule splits (split-K: the partial
// sums into a workspace, then their sum, two launches of one call), followed by a bias and a
// GELU; with its input an output as well (a copy after the kernels).
TEST_F(GpuModel, SplitKWorkspacesAndOutputCopies) {
  ModelBuilder b;
  b.input("a", {16, 2048});
  initializer(b, "w", {2048, 32}, 11, 0.05f);
  initializer(b, "bias", {32}, 12);
  b.node("MatMul", {"a", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"z"});
  b.node("Relu", {"z"}, {"y"});
  b.node("Identity", {"a"}, {"a_out"});
  b.output("y", {16, 32});
  b.output("a_out", {16, 2048});
  Graph g = compile_both(b, "mm");
  bool split = false;
  const json sc = sidecar("mm.so");
  for (const json& k : sc["kernels"]) split |= k["launch"].contains("then");
  ASSERT_TRUE(split) << "the default schedule no longer splits this matmul: pick a longer reduction\n"
                     << sidecar("mm.so").dump(1);
  // Every launch passes as many arguments as its kernel's PTX entry takes (the call's
  // arguments, then the workspaces), which the emulation alone would not notice.
  std::ifstream f(path("mm.so"), std::ios::binary);
  tf::GpuModelImage image;
  ASSERT_EQ(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f)), {}), image), "");
  for (const tf::GpuModelImage::Launch& l : image.launches) {
    const std::string& ptx = image.modules[static_cast<size_t>(l.module)];
    size_t at = ptx.find(".visible .entry " + l.function + "(");
    ASSERT_NE(at, std::string::npos) << l.function;
    size_t params = 0;
    for (size_t p = at, end = ptx.find(')', at); (p = ptx.find(".param", p + 1)) < end;) ++params;
    EXPECT_EQ(params, l.args.size()) << l.function;
  }
  HostTensor a = random_floats({16, 2048}, 13);
  write_npy(path("a.npy"), a);
  std::map<std::string, HostTensor> want = run_reference(g, {{"a", a}});
  tf::CommandResult r = tunefarm("mm", {"run", "--model", path("mm.so"), "--input", path("a.npy"), "--output",
                                        "y=" + path("y.npy"), "--output", "a_out=" + path("a_out.npy"),
                                        "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want.at("y"), read_npy(path("y.npy"))), "");
  EXPECT_EQ(compare(a, read_npy(path("a_out.npy"))), "");
  std::ifstream log(path("mm.log"));
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("_step2 grid="), std::string::npos) << text;
}

// A kernel whose shared tiles exceed the static 48 KiB (here a given config: 4 stages of
// 32-deep K chunks, 69,632 bytes) takes them from dynamic shared memory: the model's runtime
// allows its function that much (cuFuncSetAttribute) when it loads the kernels, else the
// driver would refuse the launch (the fake does, as the real one).
TEST_F(GpuModel, KernelsPast48KiBOfSharedMemoryGetTheirDynamicMemory) {
  ModelBuilder b;
  b.input("a", {128, 256});
  initializer(b, "w", {256, 128}, 21, 0.1f);
  b.node("MatMul", {"a", "w"}, {"y"});
  b.output("y", {128, 128});
  ConfigLookup big = [](const tf::Workload& w, const tf::Target& t) {
    KernelConfig k;
    if (w.op != "matmul") return k;
    k.config = tf::complete_config(tf::build_op(w), t,
                                   {{"shared", true}, {"stages", 4}, {"block_k", 32}, {"warps_m", 4}, {"warps_n", 2},
                                    {"lanes_n", 8}, {"tile_m", 4}, {"tile_n", 4}, {"split_k", 1}});
    k.source = "given";
    return k;
  };
  Graph g = compile_both(b, "big", "cuda -arch=sm_80", big);
  std::string function;
  const json side = sidecar("big.so");
  for (const json& k : side["kernels"]) {
    if (k["launch"]["dynamic_shared_bytes"].get<int64_t>() > 0) {
      EXPECT_EQ(k["launch"]["dynamic_shared_bytes"], 69632) << k.dump();
      function = k["function"].get<std::string>();
    }
  }
  ASSERT_FALSE(function.empty()) << "no kernel past 48 KiB: " << side.dump(1);
  HostTensor a = random_floats({128, 256}, 22);
  write_npy(path("a.npy"), a);
  std::map<std::string, HostTensor> want = run_reference(g, {{"a", a}});
  tf::CommandResult r = tunefarm("big", {"run", "--model", path("big.so"), "--input", path("a.npy"), "--output",
                                         "y=" + path("y.npy"), "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want.at("y"), read_npy(path("y.npy"))), "");
  std::ifstream log(path("big.log"));
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("dynamic_shared " + function + " 69632\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shared=69632\n"), std::string::npos) << text;

  // A device that allows less (the fake told to refuse past 64 KiB): the library refuses to
  // load, naming the kernel, its bytes and the driver's error, and nothing is launched.
  r = tunefarm("big", {"run", "--model", path("big.so"), "--input", path("a.npy"), "--warmup-ms", "0"},
               {"TF_FAKE_CUDA_MAX_SHARED=65536", "TF_FAKE_CUDA_LOG=" + path("small.log")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kernel " + function + " needs 69632 bytes of shared memory, which the device refused"),
            std::string::npos)
      << r.output;
  std::ifstream small(path("small.log"));
  std::string small_text((std::istreambuf_iterator<char>(small)), {});
  EXPECT_EQ(small_text.find("launch"), std::string::npos) << small_text;
}

// int64 and bool inputs and outputs: converted to float32 into the arena on the way in, and
// back after the kernels (an ArgMax's int64, a comparison's bool), through the host entry
// point and the device one (tf_model_run_device on the caller's "device" buffers, which the
// fake keeps in host memory); an int64 input beyond 2^24 is refused by name.
TEST_F(GpuModel, IntegerAndBoolTensorsAndTheDeviceEntryPoint) {
  ModelBuilder b;
  b.input("ids", {2, 5}, onnx::TensorProto::INT64);
  b.input("mask", {2, 5}, onnx::TensorProto::BOOL);
  initializer(b, "table", {12, 6}, 21);
  b.node("Gather", {"table", "ids"}, {"e"});
  tf::graph::testing::set_int(b.node("ArgMax", {"e"}, {"best"}), "axis", 2);
  tf::graph::testing::set_ints(b.node("ReduceMean", {"e"}, {"sum"}), "axes", {2});
  tf::graph::testing::set_int(b.g->mutable_node(b.g->node_size() - 1), "keepdims", 0);
  b.node("Not", {"mask"}, {"unmask"});
  b.output("best", {2, 5, 1});
  b.output("sum", {2, 5});
  b.output("unmask", {2, 5});
  // The outputs' element types as ONNX says them.
  b.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  b.g->mutable_output(2)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  Graph g = compile_both(b, "ints");
  HostTensor ids = HostTensor::ints({2, 5}, {0, 3, 11, 7, 7, 1, 2, 9, 10, 4});
  HostTensor mask = HostTensor::ints({2, 5}, {1, 0, 0, 1, 1, 0, 1, 0, 1, 0}, DType::Bool);
  std::map<std::string, HostTensor> want = run_reference(g, {{"ids", ids}, {"mask", mask}});

  // In this process: the fake driver loaded first (by its path), so the library's
  // dlopen("libcuda.so.1") finds it by its soname.
  void* fake = dlopen((kFakeCudaDir + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(fake, nullptr) << dlerror();
  setenv("TF_FAKE_CUDA_KERNELS", path("ints.emu.so").c_str(), 1);
  setenv("TF_FAKE_CUDA_ALIASES", path("ints.aliases").c_str(), 1);
  std::vector<HostTensor> got = run_library(path("ints.so"), {ids, mask});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(compare(want.at("best"), got[0]), "");
  EXPECT_EQ(compare(want.at("sum"), got[1]), "");
  EXPECT_EQ(compare(want.at("unmask"), got[2]), "");
  EXPECT_EQ(got[0].dtype, DType::I64);
  EXPECT_EQ(got[2].dtype, DType::Bool);

  // The device entry point on caller-owned buffers (host memory is the fake's device memory).
  void* h = dlopen(path("ints.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto run_device = reinterpret_cast<int32_t (*)(const uint64_t*, const uint64_t*, void*)>(dlsym(h, "tf_model_run_device"));
  ASSERT_NE(run_device, nullptr);
  std::vector<int64_t> best(10, -1);
  std::vector<float> sum(10, NAN);
  std::vector<uint8_t> unmask(10, 7), mask_bytes(mask.i.begin(), mask.i.end());
  uint64_t in[2] = {reinterpret_cast<uint64_t>(ids.i.data()), reinterpret_cast<uint64_t>(mask_bytes.data())};
  uint64_t out[3] = {reinterpret_cast<uint64_t>(best.data()), reinterpret_cast<uint64_t>(sum.data()),
                     reinterpret_cast<uint64_t>(unmask.data())};
  ASSERT_EQ(run_device(in, out, nullptr), 0);
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(best[k], want.at("best").i[k]) << k;
    EXPECT_NEAR(sum[k], want.at("sum").f[k], 1e-5) << k;
    EXPECT_EQ(unmask[k], want.at("unmask").i[k]) << k;
  }
  // A misaligned device buffer (the kernels' 128-bit accesses need 16 bytes) is refused.
  std::vector<float> wide(11, 0);
  uint64_t shifted[3] = {out[0], reinterpret_cast<uint64_t>(wide.data()) | 4, out[2]};
  EXPECT_EQ(run_device(in, shifted, nullptr), -3);
  auto error_now = reinterpret_cast<const char* (*)()>(dlsym(h, "tf_model_last_error"));
  EXPECT_NE(std::string(error_now()).find("output 1 at 0x"), std::string::npos) << error_now();
  EXPECT_NE(std::string(error_now()).find("is not 16-byte aligned"), std::string::npos) << error_now();
  std::vector<int64_t> far = ids.i;
  far[3] = (int64_t{1} << 24) + 1;
  in[0] = reinterpret_cast<uint64_t>(far.data());
  EXPECT_EQ(run_device(in, out, nullptr), -2);
  auto last_error = reinterpret_cast<const char* (*)()>(dlsym(h, "tf_model_last_error"));
  EXPECT_NE(std::string(last_error()).find("int64 beyond +-2^24"), std::string::npos) << last_error();
  // The device is chosen before the first call, not after.
  auto set_device = reinterpret_cast<int32_t (*)(int32_t)>(dlsym(h, "tf_model_set_device"));
  EXPECT_EQ(set_device(0), 0);
  EXPECT_EQ(set_device(1), -3);
  EXPECT_NE(std::string(last_error()).find("choose its device before the first call"), std::string::npos);
  dlclose(h);
  unsetenv("TF_FAKE_CUDA_KERNELS");
  unsetenv("TF_FAKE_CUDA_ALIASES");
}

// Shape buckets on a GPU (compile --model --dim batch=1,3 for cuda): one library, one launch
// plan per bucket over the same modules and the weights uploaded once; tf_model_run and
// tf_model_run_device are bucket 0's, tf_model_run_bucket / _device_bucket / _shaped and
// ModelLibrary::run take the others, each matching the reference at its size through the
// driver; a bucket or shapes the library has not are refused (-4) by name, and `tunefarm run`
// takes the bucket of its input's shape.
TEST_F(GpuModel, ShapeBucketsRunTheirOwnPlansThroughTheDriver) {
  ModelBuilder b;
  b.input("x", {-1, 3, 12, 12});
  initializer(b, "w1", {8, 3, 3, 3}, 31);
  initializer(b, "b1", {8}, 32);
  initializer(b, "wd", {8, 10}, 33);
  tf::graph::testing::set_ints(b.node("Conv", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("GlobalAveragePool", {"r1"}, {"p"});
  b.node("Flatten", {"p"}, {"f"});
  b.node("MatMul", {"f", "wd"}, {"y"});
  b.output("y");
  b.save(path("bk.onnx"));
  const tf::Target t = tf::parse_target("cuda -arch=sm_80");
  const std::vector<int64_t> sizes = {1, 3};
  std::vector<Graph> graphs;
  for (int64_t n : sizes) {
    graphs.push_back(load_model(path("bk.onnx"), 2, {}, channel_block(t), tf::Precision::Float32,
                                tensor_cores(t), InputBinding{{{"batch", n}}, {}}));
  }
  std::vector<const Graph*> buckets;
  for (const Graph& g : graphs) buckets.push_back(&g);
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  CompiledModel cm = compile_model(buckets, t, defaults, path("bk.so"), "bk");
  compile_model(buckets, t, defaults, path("bk.emu.so"), "bk", default_memory_budget(), true);
  CompiledModel one = compile_model(graphs[1], t, defaults, path("one.so"), "one");
  write_aliases("bk");
  ASSERT_EQ(cm.buckets.size(), 2u);
  EXPECT_EQ(cm.constant_bytes, one.constant_bytes);  // the weights once
  EXPECT_EQ(sidecar("bk.so")["buckets"][1]["inputs"][0]["shape"], json({3, 3, 12, 12}));
  // The board's reader: two plans, bucket 0's read; the constants once.
  std::ifstream f(path("bk.so"), std::ios::binary);
  const std::string lib((std::istreambuf_iterator<char>(f)), {});
  tf::GpuModelImage image, image_one;
  ASSERT_EQ(tf::read_gpu_model_image(lib, image), "");
  EXPECT_EQ(image.buckets, 2);
  EXPECT_EQ(image.inputs.at(0).elements, 1 * 3 * 12 * 12);
  std::ifstream f1(path("one.so"), std::ios::binary);
  ASSERT_EQ(
      tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f1)), {}), image_one),
      "");
  EXPECT_EQ(image_one.buckets, 1);
  EXPECT_EQ(image.constants.size(), image_one.constants.size());
  {
    // Every plan is checked: bucket 1's with its module table swapped is not bucket 0's; one
    // past the section's plans is cut short.
    const auto [at, size] = model_section(lib);
    ASSERT_GT(size, 0u);
    uint64_t plan_at, plan_bytes;
    std::memcpy(&plan_at, lib.data() + at + 8, 8);
    std::memcpy(&plan_bytes, lib.data() + at + 16, 8);
    int64_t words0;
    std::memcpy(&words0, lib.data() + at + plan_at + 8 * 11, 8);
    ASSERT_LT(static_cast<uint64_t>(8 * words0), plan_bytes);
    std::string bad = lib;
    tf::GpuModelImage out;
    if (image.modules.size() >= 2) {  // (one module per core, up to 8)
      const size_t modules1 =
          at + plan_at + 8 * (static_cast<size_t>(words0) + 12 + 2 * 2);  // plan 1's module table
      std::swap_ranges(bad.begin() + static_cast<std::ptrdiff_t>(modules1),
                       bad.begin() + static_cast<std::ptrdiff_t>(modules1 + 16),
                       bad.begin() + static_cast<std::ptrdiff_t>(modules1 + 16));
      EXPECT_NE(tf::read_gpu_model_image(bad, out).find("bucket 1's plan: its modules are not bucket 0's"),
                std::string::npos)
          << tf::read_gpu_model_image(bad, out);
    }
    bad = lib;
    const int64_t more = words0 + 1;  // plan 1 starts a word late: a plan past the section's end
    std::memcpy(bad.data() + at + plan_at + 8 * 11, &more, 8);
    EXPECT_NE(tf::read_gpu_model_image(bad, out).find("its plan is damaged"), std::string::npos);
  }

  void* fake = dlopen((kFakeCudaDir + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(fake, nullptr) << dlerror();
  setenv("TF_FAKE_CUDA_KERNELS", path("bk.emu.so").c_str(), 1);
  setenv("TF_FAKE_CUDA_ALIASES", path("bk.aliases").c_str(), 1);
  std::vector<HostTensor> xs, want;
  for (size_t k = 0; k < sizes.size(); ++k) {
    xs.push_back(random_floats({sizes[k], 3, 12, 12}, 40 + static_cast<uint32_t>(k)));
    want.push_back(run_reference(graphs[k], {{"x", xs[k]}}).at("y"));
  }
  {
    ModelLibrary ml(path("bk.so"));
    ASSERT_EQ(ml.num_buckets(), 2);
    for (size_t k : {1, 0, 1}) {  // each bucket, and back: the plans share the arena
      std::vector<HostTensor> got;
      ml.run({&xs[k]}, got);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(compare(want[k], got[0]), "") << "batch " << sizes[k];
    }
  }
  {
    // --pad-batch: 2 rows run bucket 1 (3 rows) padded, the same kernels (bk.so's, compiled
    // alike), its first two rows the model's at batch 2.
    compile_model(buckets, t, defaults, path("bkp.so"), "bk", default_memory_budget(), false,
                  /*pad_batch=*/true);
    ModelLibrary ml(path("bkp.so"));
    EXPECT_TRUE(ml.bucket_padded(1));
    HostTensor x2 = random_floats({2, 3, 12, 12}, 44);
    const Graph g2 = load_model(path("bk.onnx"), 2, {}, channel_block(t), tf::Precision::Float32,
                                tensor_cores(t), InputBinding{{{"batch", 2}}, {}});
    std::vector<HostTensor> got;
    ml.run({&x2}, got);
    ASSERT_EQ(got.size(), 1u);
    const HostTensor want2 = run_reference(g2, {{"x", x2}}).at("y");
    EXPECT_EQ(compare(want2, got[0]), "");
    // The C ABI's tf_model_run_shaped pads on the host the same way.
    void* hp = dlopen(path("bkp.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(hp, nullptr) << dlerror();
    auto shaped_p =
        reinterpret_cast<int32_t (*)(const int64_t* const*, const void* const*, void* const*,
                                     void*)>(dlsym(hp, "tf_model_run_shaped"));
    ASSERT_NE(shaped_p, nullptr);
    std::vector<float> y2(21, -7.0f);
    const void* in2[1] = {x2.f.data()};
    void* out2[1] = {y2.data()};
    const int64_t d2[4] = {2, 3, 12, 12}, d4[4] = {4, 3, 12, 12};
    const int64_t* s2[1] = {d2};
    const int64_t* s4[1] = {d4};
    ASSERT_EQ(shaped_p(s2, in2, out2, nullptr), 0);
    EXPECT_EQ(compare(want2,
                      HostTensor::floats({2, 10}, std::vector<float>(y2.begin(), y2.begin() + 20))),
              "");
    EXPECT_EQ(y2[20], -7.0f);
    EXPECT_EQ(shaped_p(s4, in2, out2, nullptr), -4);
    dlclose(hp);
  }
  // The C ABI: by bucket and by shape, on host buffers and on "device" ones.
  void* h = dlopen(path("bk.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto num = reinterpret_cast<int32_t (*)()>(dlsym(h, "tf_model_num_buckets"));
  auto shaped =
      reinterpret_cast<int32_t (*)(const int64_t* const*, const void* const*, void* const*, void*)>(
          dlsym(h, "tf_model_run_shaped"));
  auto by_bucket = reinterpret_cast<int32_t (*)(int32_t, const void* const*, void* const*, void*)>(
      dlsym(h, "tf_model_run_bucket"));
  auto device_bucket =
      reinterpret_cast<int32_t (*)(int32_t, const uint64_t*, const uint64_t*, void*)>(
          dlsym(h, "tf_model_run_device_bucket"));
  auto last_error = reinterpret_cast<const char* (*)()>(dlsym(h, "tf_model_last_error"));
  ASSERT_TRUE(num && shaped && by_bucket && device_bucket && last_error);
  EXPECT_EQ(num(), 2);
  std::vector<float> y(30, NAN);
  const void* ins[1] = {xs[1].f.data()};
  void* outs[1] = {y.data()};
  const int64_t dims3[4] = {3, 3, 12, 12}, dims2[4] = {2, 3, 12, 12};
  const int64_t* at3[1] = {dims3};
  const int64_t* at2[1] = {dims2};
  ASSERT_EQ(shaped(at3, ins, outs, nullptr), 0) << last_error();
  EXPECT_EQ(compare(want[1], HostTensor::floats({3, 10}, y)), "");
  std::fill(y.begin(), y.end(), NAN);
  const uint64_t din[1] = {reinterpret_cast<uint64_t>(xs[1].f.data())};
  const uint64_t dout[1] = {reinterpret_cast<uint64_t>(y.data())};
  ASSERT_EQ(device_bucket(1, din, dout, nullptr), 0) << last_error();
  EXPECT_EQ(compare(want[1], HostTensor::floats({3, 10}, y)), "");
  EXPECT_EQ(shaped(at2, ins, outs, nullptr), -4);
  EXPECT_NE(
      std::string(last_error()).find("no shape bucket of the library's 2 has these input shapes"),
      std::string::npos)
      << last_error();
  EXPECT_EQ(by_bucket(2, ins, outs, nullptr), -4);
  EXPECT_NE(std::string(last_error()).find("no shape bucket 2: the library has 2 (0 to 1)"),
            std::string::npos)
      << last_error();
  EXPECT_EQ(device_bucket(-1, din, dout, nullptr), -4);
  dlclose(h);
  unsetenv("TF_FAKE_CUDA_KERNELS");
  unsetenv("TF_FAKE_CUDA_ALIASES");

  // The command line runs the bucket of the input's shape through the driver.
  write_npy(path("x3.npy"), xs[1]);
  tf::CommandResult r = tunefarm("bk", {"run", "--model", path("bk.so"), "--input", path("x3.npy"),
                                        "--output", path("y3.npy"), "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want[1], read_npy(path("y3.npy"))), "");
  std::ifstream log(path("bk.log"));
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  const json sc = sidecar("bk.so");
  for (const json& k : sc["kernels"]) {
    const std::string launched = "launch " + k["function"].get<std::string>() + " ";
    if (k["bucket"] == 1 && !k.contains("same_code_as")) {
      EXPECT_NE(text.find(launched), std::string::npos) << text;
    }
  }
}

// rocm: the kernels as one .hsaco code object per module inside the library, which HIP
// loads; without ROCm here, running it says the HIP library did not load.
TEST_F(GpuModel, CompilesForRocmWithCodeObjectsInside) {
  ModelBuilder b = conv_net();
  b.save(path("cnn.onnx"));
  tf::Target t = tf::parse_target("rocm -mcpu=gfx90a");
  Graph g = load_model(path("cnn.onnx"), 2, {}, channel_block(t));
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  compile_model(g, t, defaults, path("cnn.so"), "cnn");
  json sc = sidecar("cnn.so");
  EXPECT_EQ(sc["device_code"]["format"], "hsaco");
  std::ifstream f(path("cnn.so"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(bytes.find("amdgcn-amd-amdhsa--gfx90a"), std::string::npos);
  if (dlopen("libamdhip64.so", RTLD_NOW | RTLD_NOLOAD) == nullptr && !fs::exists("/opt/rocm")) {
    tf::CommandResult r = tf::run_command({kTunefarm, "run", "--model", path("cnn.so"), "--warmup-ms", "0"});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("this model runs on rocm GPUs and the driver's library (libamdhip64.so) did not load"),
              std::string::npos)
        << r.output;
  }
}

// A board reads an uploaded GPU model as data (runtime/gpu_model/image.h): anything damaged
// or out of range in it is refused by name, before a driver sees it.
TEST_F(GpuModel, BoardsRefuseDamagedModelImages) {
  compile_both(conv_net(), "cnn");
  std::ifstream f(path("cnn.so"), std::ios::binary);
  const std::string lib((std::istreambuf_iterator<char>(f)), {});
  tf::GpuModelImage image;
  ASSERT_EQ(tf::read_gpu_model_image(lib, image), "");
  EXPECT_EQ(image.platform, tf::TargetKind::Cuda);
  EXPECT_EQ(image.inputs.size(), 1u);
  size_t launches = 0;
  const json sc = sidecar("cnn.so");
  for (const json& k : sc["kernels"]) launches += 1 + k["launch"].value("then", json::array()).size();
  EXPECT_EQ(image.launches.size(), launches);
  const auto [at, size] = model_section(lib);
  ASSERT_GT(size, 0u);
  uint64_t plan_at;
  std::memcpy(&plan_at, lib.data() + at + 8, 8);
  // Word `w` of the plan set to `v`, or bytes cut: what the reader says.
  auto with_word = [&](size_t w, int64_t v) {
    std::string bad = lib;
    std::memcpy(bad.data() + at + plan_at + 8 * w, &v, 8);
    tf::GpuModelImage out;
    return tf::read_gpu_model_image(bad, out);
  };
  const size_t first_launch = 12 + 2 * (image.inputs.size() + image.outputs.size() + image.modules.size());
  struct Case {
    size_t word;
    int64_t value;
    const char* says;
  } cases[] = {
      {0, 7, "no magic number"},
      {1, 3, "platform 3"},
      {5, -1, "-1 launches"},
      {5, 1 << 20, "1048576 launches (at most 100000)"},
      {8, int64_t{1} << 40, "an arena of 1099511627776 bytes"},
      {12, int64_t{1} << 40, "a tensor of 1099511627776 elements"},
      {13, 3, "element type 3"},
      {first_launch, 99, "launch 0 of module 99"},
      {first_launch + 1, int64_t{1} << 40, "launch 0 has no kernel name"},
      {first_launch + 5, 2048, "has a grid or block dimension out of range"},
      {first_launch + 8, int64_t{1} << 30, "bytes of shared memory"},
      {first_launch + 9, 100000, "takes 100000 arguments"},
      {first_launch + 10, 9, "it ends early"},
      {first_launch + 11, int64_t{1} << 40, "argument 0 lies outside the model's buffers"},
      {11, 5, "a plan of 5 words"},
      {11, int64_t{1} << 40, "a plan of 1099511627776 words"},
  };
  for (const Case& c : cases) {
    std::string why = with_word(c.word, c.value);
    EXPECT_NE(why.find(c.says), std::string::npos) << "word " << c.word << " = " << c.value << ": " << why;
  }
  tf::GpuModelImage out;
  EXPECT_NE(tf::read_gpu_model_image(lib.substr(0, at + size / 2), out).find("an ELF file without readable section headers"),
            std::string::npos);
  EXPECT_NE(tf::read_gpu_model_section(std::string(lib.data() + at, 40), out).find("not a GPU model (no magic number)"),
            std::string::npos);
  std::string header = lib.substr(at, size);
  uint64_t huge = uint64_t{1} << 62;
  std::memcpy(header.data() + 16, &huge, 8);
  EXPECT_NE(tf::read_gpu_model_section(header, out).find("section is truncated"), std::string::npos);
  EXPECT_NE(tf::read_gpu_model_image("#!/bin/sh\n", out).find("not an ELF file"), std::string::npos);
  std::ifstream cpu(path("cnn.emu.so"), std::ios::binary);
  EXPECT_NE(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(cpu)), {}), out)
                .find("not a GPU model library (no .tf_gpu_model section"),
            std::string::npos);
}

// Reductions with few outputs over long rows are spread over threads on GPUs. A softmax
// over 1000 classes and a mean and a max over two axes of 150 elements: a block per output
// (its row), the threads' partial results in shared memory, combined by a tree and the first
// thread:
// one kernel per reduction, but the softmax's two and its row are one kernel (a block per
// row: the row's max and sum in shared memory, then its elements). A sum of everything (an output of rank 0) and rows of 40,000:
// split in two kernels (slices per output, then their combination). The tails (1000, 150,
// 40,000 and 2,100 are not multiples of the threads or slices) contribute the combiner's
// identity. Through the library and the fake driver, against the reference.
TEST_F(GpuModel, LongReductionsAreSpreadOverThreads) {
  ModelBuilder b;
  b.input("x", {4, 1000});
  b.input("z", {2, 3, 50});
  b.input("w", {3, 700});
  b.input("long", {2, 40000});
  tf::graph::testing::set_int(b.node("Softmax", {"x"}, {"p"}), "axis", -1);
  onnx::NodeProto* mean = b.node("ReduceMean", {"z"}, {"m"});
  tf::graph::testing::set_ints(mean, "axes", {1, 2});
  tf::graph::testing::set_int(mean, "keepdims", 0);
  onnx::NodeProto* top = b.node("ReduceMax", {"z"}, {"t"});
  tf::graph::testing::set_ints(top, "axes", {1, 2});
  tf::graph::testing::set_int(top, "keepdims", 0);
  tf::graph::testing::set_int(b.node("ReduceSum", {"w"}, {"all"}), "keepdims", 0);
  onnx::NodeProto* rows = b.node("ReduceMean", {"long"}, {"rows"});
  tf::graph::testing::set_ints(rows, "axes", {1});
  tf::graph::testing::set_int(rows, "keepdims", 0);
  b.output("p", {4, 1000});
  b.output("m", {2});
  b.output("t", {2});
  b.output("all", {});
  b.output("rows", {2});
  Graph g = compile_both(b, "red");
  const json sc = sidecar("red.so");
  int blocks = 0;
  for (const json& k : sc["kernels"]) {
    std::vector<json> launches{k["launch"]};
    for (const json& then : k["launch"].value("then", json::array())) launches.push_back(then);
    const std::string node = k["nodes"][0];
    for (const json& l : launches) {
      // A block reduction: the threads of a block share their partial results.
      if (l["static_shared_bytes"].get<int64_t>() > 0) {
        ++blocks;
        EXPECT_GE(l["block"][0].get<int64_t>(), 32) << l.dump();
        // The threads' partial results and their tree's level of fan-in 8 (one reduction's at
        // a time: threads + threads / 8 floats), and the softmax's max and sum of its row.
        const int64_t threads = l["block"][0].get<int64_t>();
        EXPECT_EQ(l["static_shared_bytes"].get<int64_t>(),
                  4 * (threads + threads / 8) + (node.find("Softmax") != std::string::npos ? 8 : 0))
            << l.dump();
      }
    }
    if (node.find("Softmax") != std::string::npos) {
      EXPECT_FALSE(k["launch"].contains("then")) << k.dump();
    }
    if (node == "ReduceSum_all" || node == "ReduceMean_rows") {
      // Split: the first kernel's threads reduce slices of the one or two outputs.
      const json& first = k["launch"];
      EXPECT_EQ(first["static_shared_bytes"], 0) << node;
      EXPECT_GE(first["grid"][0].get<int64_t>() * first["block"][0].get<int64_t>(), 64) << node;
      EXPECT_TRUE(first.contains("then")) << node;
    }
  }
  EXPECT_EQ(blocks, 3) << "the softmax, the mean and the max: a block per row or output\n" << sc.dump(1);
  HostTensor x = random_floats({4, 1000}, 31), z = random_floats({2, 3, 50}, 32), w = random_floats({3, 700}, 33),
             lng = random_floats({2, 40000}, 34);
  write_npy(path("x.npy"), x);
  write_npy(path("z.npy"), z);
  write_npy(path("w.npy"), w);
  write_npy(path("long.npy"), lng);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}, {"z", z}, {"w", w}, {"long", lng}});
  std::vector<std::string> args{"run", "--model", path("red.so"), "--warmup-ms", "0"};
  for (const char* i : {"x", "z", "w", "long"}) {
    args.insert(args.end(), {"--input", std::string(i) + "=" + path(std::string(i) + ".npy")});
  }
  for (const char* o : {"p", "m", "t", "all", "rows"}) {
    args.insert(args.end(), {"--output", std::string(o) + "=" + path(std::string(o) + ".npy")});
  }
  tf::CommandResult r = tunefarm("red", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* o : {"p", "m", "t", "all", "rows"})
    EXPECT_EQ(compare(want.at(o), read_npy(path(std::string(o) + ".npy"))), "") << o;
}

// compile --model --skip-pass: every kernel of a model is lowered without the passes named
// (what a lowering pass gains, measured on a whole model), the sidecar says which, and the
// results do not change. A LayerNorm (a block reduction whose scale and bias early_loads moves
// before its barriers) and a product (a template): early_loads skipped changes the LayerNorm's
// PTX and not the product's; every skippable pass skipped changes the product's too (the
// template's lowering takes the options), and that build runs through the driver and matches
// the reference. A name that is no pass is refused before anything is written.
TEST_F(GpuModel, KernelsAreLoweredWithoutTheSkippedPasses) {
  ModelBuilder b;
  b.input("x", {4, 768});
  initializer(b, "gamma", {768}, 1);
  initializer(b, "beta", {768}, 2);
  initializer(b, "w", {768, 24}, 3);
  tf::graph::testing::set_int(b.node("LayerNormalization", {"x", "gamma", "beta"}, {"ln"}), "axis",
                              -1);
  b.node("MatMul", {"ln", "w"}, {"y"});
  b.output("y", {4, 24});
  b.save(path("m.onnx"));
  const tf::Target t = tf::parse_target("cuda -arch=sm_90");
  Graph g = load_model(path("m.onnx"), 2, {}, channel_block(t));
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  const int64_t budget = default_memory_budget();
  tf::LowerOptions early, all;
  early.skip = {"early_loads"};
  for (const tf::PassInfo& p : tf::lowering_passes()) {
    if (p.skippable) all.skip.insert(p.name);
  }
  ASSERT_GE(all.skip.size(), 8u);
  compile_model({&g}, t, defaults, path("base.so"), "m");
  compile_model({&g}, t, defaults, path("early.so"), "m", budget, false, false, early);
  compile_model({&g}, t, defaults, path("all.so"), "all", budget, false, false, all);
  compile_model({&g}, t, defaults, path("all.emu.so"), "all", budget, true, false, all);
  write_aliases("all");
  EXPECT_FALSE(sidecar("base.so").contains("skipped_passes"));
  EXPECT_EQ(sidecar("early.so")["skipped_passes"], json::array({"early_loads"}));
  EXPECT_EQ(sidecar("all.so")["skipped_passes"].size(), all.skip.size());
  EXPECT_EQ(sidecar("all.emu.so")["skipped_passes"].size(), all.skip.size());

  // Each kernel's PTX entry, by the kernel's role: "product" (a workload's) or "rows".
  auto entries = [&](const std::string& so) {
    std::ifstream f(path(so), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), {});
    std::map<std::string, std::string> out;
    const json sc = sidecar(so);
    for (const json& k : sc["kernels"]) {
      const std::string fn = k["function"];
      const size_t at = bytes.find(".entry " + fn + "(");
      if (at == std::string::npos) continue;
      const size_t end = bytes.find("\n}\n", at);
      out[k.contains("workload") ? "product" : "rows"] = bytes.substr(at, end - at);
    }
    return out;
  };
  auto base = entries("base.so"), no_early = entries("early.so"), none = entries("all.so");
  ASSERT_EQ(base.size(), 2u) << sidecar("base.so").dump(1);
  ASSERT_EQ(no_early.size(), 2u);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(base["product"] == no_early["product"])
      << "early_loads skipped changed the product's PTX";
  EXPECT_TRUE(base["rows"] != no_early["rows"])
      << "early_loads skipped left the LayerNorm's PTX as it was";
  EXPECT_TRUE(base["product"] != none["product"])
      << "every pass skipped left the product's PTX as it was";

  HostTensor x = random_floats({4, 768}, 5);
  write_npy(path("x.npy"), x);
  const HostTensor want = run_reference(g, {{"x", x}}).at("y");
  tf::CommandResult r =
      tunefarm("all", {"run", "--model", path("all.so"), "--input", path("x.npy"), "--output",
                       path("y.npy"), "--repeat", "1", "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want, read_npy(path("y.npy"))), "");

  tf::LowerOptions bad;
  bad.skip = {"early_load"};
  try {
    compile_model({&g}, t, defaults, path("bad.so"), "m", budget, false, false, bad);
    ADD_FAILURE() << "a pass that does not exist was taken";
  } catch (const tf::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'early_load'"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path("bad.so")));
  EXPECT_FALSE(fs::exists(path("bad.so.json")));
}

// Kernels whose GPU code is the same but for their names (two dense layers of one shape, other
// weights) are generated once: the second launches the first's code with its own arguments
// (same_code_as in the sidecar, no PTX entry of its own). Through the fake driver against the
// reference.
// A kernel's buffers are its GPU kernel's parameters, which hold 4,352 bytes (PTX before ISA
// 8.1: 544 pointers; ptxas refuses more and the driver would not load the model). Wide nodes
// (a Concat, Sum, Max, Min and Mean of 600 values, as an unrolled GRU of 600 steps joins its
// outputs) are imported as trees of at most kMaxVariadicInputs inputs, and a chain of Concats
// that each add 60 values stops taking nodes at kMaxGroupInputs: every kernel stays within
// its parameters, and the library runs through the driver and matches the reference.
TEST_F(GpuModel, WideNodesStayWithinAKernelsParameters) {
  constexpr int kValues = 600;
  ModelBuilder b;
  b.input("x", {2, 3});
  std::vector<std::string> m;
  for (int k = 0; k < kValues; ++k) {
    b.floats("c" + std::to_string(k), {0.01f * static_cast<float>(k % 97) - 0.5f});
    m.push_back("m" + std::to_string(k));
    b.node("Mul", {"x", "c" + std::to_string(k)}, {m.back()});
  }
  tf::graph::testing::set_int(b.node("Concat", m, {"cat"}), "axis", 0);
  b.node("Relu", {"cat"}, {"y0"});
  b.node("Sum", m, {"y1"});
  b.node("Max", m, {"y2"});
  b.node("Min", std::vector<std::string>(m.begin(), m.begin() + 100), {"y3"});
  b.node("Mean", m, {"y4"});
  std::string chain;
  for (int j = 0; j < kValues / 60; ++j) {
    std::vector<std::string> in;
    if (!chain.empty()) in.push_back(chain);
    in.insert(in.end(), m.begin() + 60 * j, m.begin() + 60 * (j + 1));
    chain = "chain" + std::to_string(j);
    tf::graph::testing::set_int(b.node("Concat", in, {chain}), "axis", 0);
  }
  b.node("Relu", {chain}, {"y5"});
  const std::vector<std::string> outs = {"y0", "y1", "y2", "y3", "y4", "y5"};
  for (const std::string& o : outs) b.output(o);
  Graph g = compile_both(b, "wide");
  for (const tf::graph::Node& n : g.nodes)
    EXPECT_LE(n.inputs.size(), tf::graph::kMaxVariadicInputs) << n.where();
  const json sc = sidecar("wide.so");
  size_t widest = 0;
  for (const json& k : sc["kernels"]) {
    EXPECT_LE(k["args"].size() * sizeof(void*), 4352u)
        << k["function"] << " takes " << k["args"].size();
    widest = std::max(widest, k["args"].size());
  }
  EXPECT_GE(widest, 60u) << "the Concats' kernels";
  HostTensor x = random_floats({2, 3}, 11);
  write_npy(path("x.npy"), x);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}});
  std::vector<std::string> args = {"run",      "--model", path("wide.so"), "--input", path("x.npy"),
                                   "--repeat", "1"};
  for (const std::string& o : outs) {
    args.push_back("--output");
    args.push_back(o + "=" + path(o + ".npy"));
  }
  tf::CommandResult r = tunefarm("wide", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& o : outs)
    EXPECT_EQ(compare(want.at(o), read_npy(path(o + ".npy"))), "") << o;
  // And compiled for this CPU (a Concat's inputs picked by a balanced tree of selects).
  const tf::Target cpu = tf::host_target();
  Graph gc =
      load_model(path("wide.onnx"), 2, {}, channel_block(cpu), tf::Precision::Float32, false);
  compile_model(
      gc, cpu, [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; },
      path("wide_cpu.so"), "wide");
  std::vector<HostTensor> got = run_library(path("wide_cpu.so"), {x});
  ASSERT_EQ(got.size(), outs.size());
  for (size_t o = 0; o < outs.size(); ++o)
    EXPECT_EQ(compare(want.at(outs[o]), got[o]), "") << outs[o];
  // The mean divides the tree's sum by the count.
  double mean = 0;
  for (int k = 0; k < kValues; ++k) mean += x.f[0] * (0.01 * (k % 97) - 0.5);
  EXPECT_NEAR(want.at("y4").f[0], mean / kValues, 1e-5);
}

// The groups an attention kernel takes in (Q, K and V computed for it alone, fusion.h
// take_operands) count toward kMaxGroupInputs too: Q, K and V each a Sum of 64 inputs plus 30
// more added one by one (one group of 94 inputs, 31 nodes) made one kernel of 283 parameters,
// past the GPU runtime's 256 (and the fake's).
TEST_F(GpuModel, AnAttentionTakesInOperandsWithinAKernelsParameters) {
  constexpr int kSummed = 64, kAdded = 30;
  const Shape qs = {1, 2, 8, 4}, ks = {1, 2, 4, 8}, vs = {1, 2, 8, 4};
  ModelBuilder b;
  std::map<std::string, HostTensor> inputs;
  auto sum_of = [&](const std::string& name, const Shape& s, uint32_t seed) {
    std::vector<std::string> terms;
    for (int k = 0; k < kSummed + kAdded; ++k) {
      terms.push_back(name + std::to_string(k));
      b.input(terms.back(), s);
      inputs[terms.back()] = random_floats(s, seed + static_cast<uint32_t>(k));
    }
    std::string acc = name + "_sum";
    b.node("Sum", std::vector<std::string>(terms.begin(), terms.begin() + kSummed), {acc});
    for (int k = kSummed; k < kSummed + kAdded; ++k) {
      const std::string next = name + "_add" + std::to_string(k);
      b.node("Add", {acc, terms[k]}, {next});
      acc = next;
    }
    return acc;
  };
  const std::string q = sum_of("q", qs, 1000), kt = sum_of("k", ks, 2000),
                    v = sum_of("v", vs, 3000);
  b.node("MatMul", {q, kt}, {"s"});
  b.floats("c", {0.125f});
  b.node("Mul", {"s", "c"}, {"scaled"});
  tf::graph::testing::set_int(b.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", v}, {"o"});
  b.output("o", {1, 2, 8, 4});
  Graph g =
      compile_both(b, "wide_attention", "cuda -arch=sm_80", nullptr, tf::Precision::Float32, 3);
  int fused = 0;
  for (const Node& n : g.nodes) fused += n.op == kFusedAttention;
  EXPECT_EQ(fused, 1);
  const json sc = sidecar("wide_attention.so");
  size_t widest = 0;
  size_t taken_in = 0;
  for (const json& k : sc["kernels"]) {
    widest = std::max(widest, k["args"].size());
    if (k["template"] == "attention") taken_in = k["nodes"].size() - 1;
  }
  EXPECT_LE(widest, tf::graph::kMaxGroupInputs + 1) << "inputs and the output";
  EXPECT_GE(taken_in, 31u) << "one operand's group is still taken in: " << sc.dump(1);
  std::vector<std::string> args{"run",         "--model",  path("wide_attention.so"),
                                "--warmup-ms", "0",        "--repeat",
                                "1",           "--output", path("wide_attention.out.npy")};
  for (const auto& [name, t] : inputs) {
    write_npy(path(name + ".npy"), t);
    args.push_back("--input");
    args.push_back(name + "=" + path(name + ".npy"));
  }
  tf::CommandResult r = tunefarm("wide_attention", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(run_reference(g, inputs).at("o"), read_npy(path("wide_attention.out.npy"))), "")
      << r.output;
}

TEST_F(GpuModel, RepeatedLayersShareTheirCode) {
  ModelBuilder b;
  b.input("x", {4, 64});
  initializer(b, "w1", {64, 64}, 51);
  initializer(b, "b1", {64}, 52);
  initializer(b, "w2", {64, 64}, 53);
  initializer(b, "b2", {64}, 54);
  b.node("MatMul", {"x", "w1"}, {"m1"});
  b.node("Add", {"m1", "b1"}, {"a1"});
  b.node("Relu", {"a1"}, {"h1"});
  b.node("MatMul", {"h1", "w2"}, {"m2"});
  b.node("Add", {"m2", "b2"}, {"a2"});
  b.node("Relu", {"a2"}, {"y"});
  b.output("y", {4, 64});
  Graph g = compile_both(b, "rep");
  const json sc = sidecar("rep.so");
  ASSERT_EQ(sc["kernels"].size(), 2u) << sc.dump(1);
  const std::string first = sc["kernels"][0]["function"], second = sc["kernels"][1]["function"];
  EXPECT_EQ(sc["kernels"][1].value("same_code_as", ""), first) << sc.dump(1);
  std::ifstream f(path("rep.so"), std::ios::binary);
  tf::GpuModelImage image;
  ASSERT_EQ(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f)), {}), image), "");
  std::string ptx;
  for (const std::string& m : image.modules) ptx += m;
  EXPECT_NE(ptx.find(".entry " + first + "("), std::string::npos);
  EXPECT_EQ(ptx.find(".entry " + second + "("), std::string::npos) << "the repeated layer's code was generated again";
  HostTensor x = random_floats({4, 64}, 55);
  write_npy(path("x.npy"), x);
  tf::CommandResult r = tunefarm("rep", {"run", "--model", path("rep.so"), "--input", path("x.npy"), "--output",
                                         path("y.npy"), "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(run_reference(g, {{"x", x}}).at("y"), read_npy(path("y.npy"))), "");
}

// Elementwise kernels give each thread 4 neighbours of the innermost dimension when it is a
// multiple of 4 and enough threads remain: 128-bit loads and stores in the PTX. Through the
// fake driver against the reference; every module assembles with ptxas where CUDA is installed.
TEST_F(GpuModel, ElementwiseKernelsUseVectorAccesses) {
  ModelBuilder b;
  b.input("x", {1, 64, 56, 56});
  b.input("y", {1, 64, 56, 56});
  b.input("odd", {3, 5, 7});
  b.floats("half", {0.5f});
  b.node("Add", {"x", "y"}, {"s"});
  b.node("Relu", {"s"}, {"r"});
  b.node("Mul", {"r", "half"}, {"out"});
  b.node("Sigmoid", {"odd"}, {"odd_out"});
  b.output("out", {1, 64, 56, 56});
  b.output("odd_out", {3, 5, 7});
  Graph g = compile_both(b, "ew");
  std::ifstream f(path("ew.so"), std::ios::binary);
  tf::GpuModelImage image;
  ASSERT_EQ(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f)), {}), image), "");
  std::string ptx;
  for (const std::string& m : image.modules) ptx += m;
  EXPECT_NE(ptx.find(".v4.f32"), std::string::npos) << "no 128-bit access in the elementwise kernel";
  EXPECT_NE(ptx.find("st.global.v4.f32"), std::string::npos);
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (fs::exists(ptxas)) {
    for (size_t m = 0; m < image.modules.size(); ++m) {
      std::string file = path("ew" + std::to_string(m) + ".ptx");
      std::ofstream(file) << image.modules[m];
      tf::CommandResult r = tf::run_command({ptxas, "-arch=sm_80", file, "-o", path("ew.cubin")});
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
  }
  HostTensor x = random_floats({1, 64, 56, 56}, 41), y = random_floats({1, 64, 56, 56}, 42),
             odd = random_floats({3, 5, 7}, 43);
  write_npy(path("x.npy"), x);
  write_npy(path("y.npy"), y);
  write_npy(path("odd.npy"), odd);
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}, {"y", y}, {"odd", odd}});
  tf::CommandResult r = tunefarm("ew", {"run", "--model", path("ew.so"), "--input", "x=" + path("x.npy"), "--input",
                                        "y=" + path("y.npy"), "--input", "odd=" + path("odd.npy"), "--output",
                                        "out=" + path("out.npy"), "--output", "odd_out=" + path("odd_out.npy"),
                                        "--warmup-ms", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(want.at("out"), read_npy(path("out.npy"))), "");
  EXPECT_EQ(compare(want.at("odd_out"), read_npy(path("odd_out.npy"))), "");
}

// Self-attention as BERT's exporters write it: one wide product for Q, K and V sliced apart,
// each split into heads by Reshape and Transpose, Q scaled, the scores' product, Softmax, the
// values' product, the heads merged back by Transpose and Reshape before the output projection.
// At -O2 on cuda (graph read-views-in-products) the products read Q, K^T, V and the merged heads
// through those views inside their own kernels: the four kernels that only copied them are gone,
// in float32 (dense.cuda), TF32 and float16 (dense_tc.cuda; Q, K and V stored in 16 bits); through
// the fake driver against the reference, each module assembling with ptxas where CUDA is
// installed.
TEST_F(GpuModel, ProductsReadAttentionsOperandsThroughTheHeadSplit) {
  const int64_t tokens = 13, heads = 3, depth = 8, width = heads * depth;
  ModelBuilder b;
  b.input("x", {1, tokens, width});
  initializer(b, "wqkv", {width, 3 * width}, 71);
  initializer(b, "bqkv", {3 * width}, 72);
  initializer(b, "wo", {width, width}, 73);
  initializer(b, "bo", {width}, 74);
  b.ints("heads", {1, tokens, heads, depth});
  b.ints("back", {1, tokens, width});
  b.ints("axis2", {2});
  b.floats("scale", {std::sqrt(float(depth))});
  b.node("MatMul", {"x", "wqkv"}, {"qkv0"});
  b.node("Add", {"qkv0", "bqkv"}, {"qkv"});
  const char* parts[] = {"q", "k", "v"};
  for (int64_t p = 0; p < 3; ++p) {
    const std::string n = parts[p];
    b.ints(n + "_from", {p * width});
    b.ints(n + "_to", {(p + 1) * width});
    b.node("Slice", {"qkv", n + "_from", n + "_to", "axis2"}, {n + "2"});
    b.node("Reshape", {n + "2", "heads"}, {n + "4"});
    tf::graph::testing::set_ints(
        b.node("Transpose", {n + "4"}, {n + "h"}), "perm",
        p == 1 ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 2, 1, 3});
  }
  b.node("Div", {"qh", "scale"}, {"qs"});
  b.node("MatMul", {"qs", "kh"}, {"scores"});
  tf::graph::testing::set_int(b.node("Softmax", {"scores"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "vh"}, {"o"});
  tf::graph::testing::set_ints(b.node("Transpose", {"o"}, {"o2"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"o2", "back"}, {"merged"});
  b.node("MatMul", {"merged", "wo"}, {"y0"});
  b.node("Add", {"y0", "bo"}, {"y"});
  b.output("y", {1, tokens, width});
  const HostTensor x = random_floats({1, tokens, width}, 75);
  write_npy(path("x.npy"), x);
  for (tf::Precision p : {tf::Precision::Float32, tf::Precision::TF32, tf::Precision::Float16}) {
    const std::string name = std::string("heads_") + tf::precision_name(p);
    SCOPED_TRACE(name);
    Graph g = compile_both(b, name, "cuda -arch=sm_80", nullptr, p);
    EXPECT_TRUE(g.products_read_views);
    // The same model without the pass: the views are kernels of their own.
    const tf::Target t = tf::parse_target("cuda -arch=sm_80");
    Graph apart = load_model(path(name + ".onnx"), 2, {"read-views-in-products"}, 0, p, true);
    EXPECT_FALSE(apart.products_read_views);
    compile_model(
        apart, t, [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; },
        path(name + ".apart.so"), name);
    const json sc = sidecar(name + ".so"), sa = sidecar(name + ".apart.so");
    EXPECT_EQ(sc["kernels"].size() + 4, sa["kernels"].size()) << sc.dump(1);
    int viewing = 0;
    for (const json& k : sc["kernels"]) {
      bool views = false;
      for (const json& n : k["nodes"]) {
        const std::string node = n;
        views = views || node.rfind("Slice", 0) == 0 || node.rfind("Transpose", 0) == 0;
      }
      if (!views) continue;
      ++viewing;
      // Every view is read by a product: the scores' (Q, K^T), the values' (V) and the
      // projection's (the merged heads).
      EXPECT_NE(k.value("workload", ""), "") << k.dump();
      EXPECT_EQ(k["template"].get<std::string>().rfind("dense", 0), 0u) << k.dump();
    }
    EXPECT_EQ(viewing, 3) << sc.dump(1);
    std::ifstream f(path(name + ".so"), std::ios::binary);
    tf::GpuModelImage image;
    ASSERT_EQ(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f)), {}), image),
              "");
    const char* ptxas = "/usr/local/cuda/bin/ptxas";
    for (size_t m = 0; fs::exists(ptxas) && m < image.modules.size(); ++m) {
      std::string file = path(name + std::to_string(m) + ".ptx");
      std::ofstream(file) << image.modules[m];
      tf::CommandResult r =
          tf::run_command({ptxas, "-arch=sm_80", file, "-o", path(name + ".cubin")});
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    tf::CommandResult r =
        tunefarm(name, {"run", "--model", path(name + ".so"), "--input", path("x.npy"), "--output",
                        path(name + ".y.npy"), "--repeat", "1", "--warmup-ms", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(compare(run_reference(g, {{"x", x}}).at("y"), read_npy(path(name + ".y.npy"))), "")
        << r.output;
  }
}

// Views of a product no template computes stay kernels of their own: a batch product whose
// second operand is broadcast over the batch has no workload, so the fusion group that took
// both operands' views in (read-views-in-products) is compiled as the views' kernels, each for
// the operand it makes, and the product's generic kernel. Through the fake driver against the
// reference.
TEST_F(GpuModel, ViewsOfAProductNoTemplateTakesStayKernels) {
  ModelBuilder b;
  b.input("x", {1, 3, 5, 4});
  b.input("y", {1, 1, 6, 5});
  tf::graph::testing::set_ints(b.node("Transpose", {"x"}, {"xt"}), "perm",
                               {0, 1, 3, 2});  // [1,3,4,5]
  tf::graph::testing::set_ints(b.node("Transpose", {"y"}, {"yt"}), "perm",
                               {0, 1, 3, 2});  // [1,1,5,6]
  b.node("MatMul", {"xt", "yt"}, {"z"});       // [1,3,4,6]
  b.output("z", {1, 3, 4, 6});
  Graph g = compile_both(b, "broadcast_view", "cuda -arch=sm_80");
  EXPECT_TRUE(g.products_read_views);
  const std::vector<FusedGroup> plan = plan_fusion(g);
  ASSERT_EQ(plan.size(), 1u);  // the views in the product's group
  EXPECT_EQ(plan[0].nodes, (std::vector<std::string>{"Transpose_xt", "Transpose_yt", "MatMul_z"}));
  const json sc = sidecar("broadcast_view.so");
  ASSERT_EQ(sc["kernels"].size(), 3u) << sc.dump(1);
  EXPECT_EQ(sc["kernels"][0]["nodes"], json::array({"Transpose_xt"})) << sc.dump(1);
  EXPECT_EQ(sc["kernels"][1]["nodes"], json::array({"Transpose_yt"})) << sc.dump(1);
  EXPECT_EQ(sc["kernels"][2]["nodes"], json::array({"MatMul_z"})) << sc.dump(1);
  for (const json& k : sc["kernels"]) EXPECT_EQ(k["template"], "generic") << k.dump();
  std::map<std::string, HostTensor> in{{"x", random_floats({1, 3, 5, 4}, 81)},
                                       {"y", random_floats({1, 1, 6, 5}, 82)}};
  std::vector<std::string> args{"run",      "--model",     path("broadcast_view.so"),
                                "--output", path("z.npy"), "--repeat",
                                "1",        "--warmup-ms", "0"};
  for (const auto& [name, t] : in) {
    write_npy(path(name + ".npy"), t);
    args.insert(args.end(), {"--input", name + "=" + path(name + ".npy")});
  }
  tf::CommandResult r = tunefarm("broadcast_view", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(compare(run_reference(g, in).at("z"), read_npy(path("z.npy"))), "") << r.output;
}

// Multi-head attention as exporters write it (projections, Reshape and Transpose into heads,
// MatMul(Q, K^T), a scaling, a mask, Softmax, MatMul(., V), Transpose and Reshape back) is one
// attention kernel at -O3 (graph fuse-attention, compiler/attention.h) that reads Q, K and V through
// the layout operators; through the fake driver against the reference of the unfused graph,
// each module assembling with ptxas where CUDA is installed. Self-attention with a mask and a
// Div (13 tokens: a tail of query rows), cross-attention with a Mul (5 queries, 70 keys: fewer
// keys than threads), and a bare 4-D product chain of many heads (32 rows a block).
TEST_F(GpuModel, AttentionIsOneKernelThatReadsThroughTheHeadSplit) {
  struct Case {
    std::string name;
    int64_t queries, keys, heads, depth;
    bool mask, divide, projections;
    int64_t batch = 1;
  };
  for (const Case& c : {Case{"self", 13, 13, 3, 8, true, true, true}, Case{"cross", 5, 70, 2, 16, false, false, true},
                        Case{"bare", 128, 128, 32, 4, false, true, false, 2}}) {
    SCOPED_TRACE(c.name);
    const int64_t width = c.heads * c.depth;
    ModelBuilder b;
    auto perm = [&](const std::string& in, const std::string& out, std::vector<int64_t> p) {
      tf::graph::testing::set_ints(b.node("Transpose", {in}, {out}), "perm", std::move(p));
    };
    std::map<std::string, HostTensor> inputs;
    auto input = [&](const std::string& name, const Shape& s, uint32_t seed) {
      b.input(name, s);
      inputs[name] = random_floats(s, seed);
    };
    std::string q = "q", kt = "kt", v = "v";
    if (c.projections) {
      input("x", {1, c.queries, width}, 61);
      const std::string kv = c.keys == c.queries ? "x" : "y";
      if (kv == "y") input("y", {1, c.keys, width}, 62);
      for (const char* w : {"wq", "wk", "wv"}) initializer(b, w, {width, width}, static_cast<uint32_t>(w[1]));
      b.ints("q_heads", {1, c.queries, c.heads, c.depth});
      b.ints("kv_heads", {1, c.keys, c.heads, c.depth});
      b.ints("back", {1, c.queries, width});
      b.node("MatMul", {"x", "wq"}, {"xq"});
      b.node("MatMul", {kv, "wk"}, {"xk"});
      b.node("MatMul", {kv, "wv"}, {"xv"});
      b.node("Reshape", {"xq", "q_heads"}, {"q4"});
      b.node("Reshape", {"xk", "kv_heads"}, {"k4"});
      b.node("Reshape", {"xv", "kv_heads"}, {"v4"});
      perm("q4", "q", {0, 2, 1, 3});
      perm("k4", "kt", {0, 2, 3, 1});
      perm("v4", "v", {0, 2, 1, 3});
    } else {
      input("q", {c.batch, c.heads, c.queries, c.depth}, 63);
      input("kt", {c.batch, c.heads, c.depth, c.keys}, 64);
      input("v", {c.batch, c.heads, c.keys, c.depth}, 65);
    }
    b.node("MatMul", {q, kt}, {"s"});
    b.floats("c", {c.divide ? std::sqrt(float(c.depth)) : 0.25f});
    b.node(c.divide ? "Div" : "Mul", {"s", "c"}, {"scaled"});
    std::string scores = "scaled";
    if (c.mask) {
      input("mask", {1, 1, 1, c.keys}, 66);
      for (int64_t k = 0; k < c.keys; k += 3) inputs["mask"].f[k] = -10000.0f;  // masked keys
      b.node("Add", {"scaled", "mask"}, {"masked"});
      scores = "masked";
    }
    tf::graph::testing::set_int(b.node("Softmax", {scores}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", v}, {"o"});
    std::string out = "o";
    if (c.projections) {
      perm("o", "o2", {0, 2, 1, 3});
      b.node("Reshape", {"o2", "back"}, {"y_out"});
      out = "y_out";
      b.output(out, {1, c.queries, width});
    } else {
      b.output(out, {c.batch, c.heads, c.queries, c.depth});
    }
    // -O3: fuse-attention's level (slower than the unfused chain on an H200, session 87).
    Graph g = compile_both(b, c.name, "cuda -arch=sm_80", nullptr, tf::Precision::Float32, 3);
    int fused = 0;
    for (const Node& n : g.nodes) fused += n.op == kFusedAttention;
    EXPECT_EQ(fused, 1);
    // At -O2 the chain stays unfused.
    Graph o2 = load_model(path(c.name + ".onnx"), 2, {}, 0, tf::Precision::Float32, true);
    for (const Node& n : o2.nodes) EXPECT_NE(n.op, kFusedAttention);
    // The reference of the graph as written (no target: nothing fused).
    Graph unfused = load_model(path(c.name + ".onnx"), 2, {}, 0, tf::Precision::Float32, false);
    for (const Node& n : unfused.nodes) EXPECT_NE(n.op, kFusedAttention);
    const json sc = sidecar(c.name + ".so");
    int attention = 0;
    for (const json& k : sc["kernels"]) {
      if (k["template"] != "attention") continue;
      ++attention;
      // Q, K and V's Reshapes and Transposes are inside it.
      int layout = 0;
      for (const json& n : k["nodes"]) layout += n.get<std::string>().rfind("Transpose", 0) == 0;
      EXPECT_EQ(layout, c.projections ? 3 : 0) << k.dump();
      EXPECT_EQ(k["launch"]["block"][0], tf::kAttentionThreads) << k.dump();
      EXPECT_GT(k["launch"]["static_shared_bytes"].get<int64_t>(), 0) << k.dump();
    }
    EXPECT_EQ(attention, 1) << sc.dump(1);
    // Projections: Q, K and V (two or three kernels), attention, the transpose back.
    if (c.projections) {
      EXPECT_LE(sc["kernels"].size(), 5u) << sc.dump(1);
    }
    std::ifstream f(path(c.name + ".so"), std::ios::binary);
    tf::GpuModelImage image;
    ASSERT_EQ(tf::read_gpu_model_image(std::string((std::istreambuf_iterator<char>(f)), {}), image), "");
    const char* ptxas = "/usr/local/cuda/bin/ptxas";
    for (size_t m = 0; fs::exists(ptxas) && m < image.modules.size(); ++m) {
      std::string file = path(c.name + std::to_string(m) + ".ptx");
      std::ofstream(file) << image.modules[m];
      tf::CommandResult r = tf::run_command({ptxas, "-arch=sm_80", file, "-o", path(c.name + ".cubin")});
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    std::vector<std::string> args{"run", "--model", path(c.name + ".so"), "--warmup-ms", "0", "--output",
                                  path(c.name + ".out.npy")};
    for (const auto& [name, t] : inputs) {
      write_npy(path(name + ".npy"), t);
      args.insert(args.end(), {"--input", name + "=" + path(name + ".npy")});
    }
    tf::CommandResult r = tunefarm(c.name, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(compare(run_reference(unfused, inputs).at(out), read_npy(path(c.name + ".out.npy"))), "");
  }
}
