// The ONNX backend node tests shipped in Debian's libonnx-testdata: every test whose model
// imports (its operators, attributes and types are supported) must reproduce the expected
// outputs with the reference evaluation, and, compiled into a model library, with the compiled
// kernels. Tests that do not import must fail with a clear "not supported" kind of error,
// those that do not compile with a "not implemented yet" one, and enough of them must run for
// the checks to mean something.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/bfloat16.h"
#include "base/error.h"
#include "compiler/link.h"
#include "compiler/target.h"
#include "graph/model_compiler.h"
#include "graph/model_library.h"
#include "graph/onnx_import.h"
#include "graph/ops.h"
#include "graph/pass.h"
#include "graph/reference_run.h"
#include "tests/sanitized.h"

namespace fs = std::filesystem;
using namespace tf::graph;  // NOLINT

namespace {

const char* kNodeTests = "/usr/share/libonnx-testdata/data/node";

// Compares like onnx.backend.test (rtol 1e-3, atol 1e-7), with atol raised to 1e-5 for
// float32 results of transcendental functions computed in another order.
std::string compare(const HostTensor& want, const HostTensor& got) {
  if (want.shape != got.shape)
    return "shape " + shape_str(got.shape) + ", expected " + shape_str(want.shape);
  if (holds_floats(want.dtype) != holds_floats(got.dtype)) return "element type differs";
  for (int64_t k = 0; k < want.size(); ++k) {
    double w = want.as_double(k), g = got.as_double(k);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && w == g) continue;
    if (!(std::fabs(w - g) <= 1e-5 + 1e-3 * std::fabs(w))) {
      return "element " + std::to_string(k) + " is " + std::to_string(g) + ", expected " +
             std::to_string(w);
    }
  }
  return "";
}

// A data set's tensor as the model's value of type `want` takes it: float16 and bfloat16 data
// as floats of that type (ONNX's test data keeps bfloat16 as uint16 bits).
HostTensor read_as(const std::string& path, DType want) {
  onnx::TensorProto t;
  std::ifstream f(path, std::ios::binary);
  if (t.ParseFromIstream(&f) && t.data_type() == onnx::TensorProto::UINT16 && want == DType::BF16) {
    std::vector<float> v;
    if (t.has_raw_data()) {
      for (size_t k = 0; k + 1 < t.raw_data().size(); k += 2) {
        uint16_t h;
        std::memcpy(&h, t.raw_data().data() + k, 2);
        v.push_back(tf::bf16_value(h));
      }
    } else {
      for (int32_t h : t.int32_data()) v.push_back(tf::bf16_value(static_cast<uint16_t>(h)));
    }
    return HostTensor::floats(Shape(t.dims().begin(), t.dims().end()), std::move(v), DType::BF16);
  }
  HostTensor h = read_tensor_file(path);
  if (is_storage16(want) && h.dtype == DType::F32) h.dtype = want;
  return h;
}

// ONNX 1.12's data for a Cast to bfloat16 truncate; ONNX's Cast rounds to nearest even since
// 1.14, as PyTorch's .bfloat16() and tunefarm do: that test's expected output is its input so
// rounded.
void expect_current_definition(const std::string& name, const HostTensor& input, HostTensor& want) {
  if (name != "test_cast_FLOAT_to_BFLOAT16") return;
  for (size_t k = 0; k < want.f.size(); ++k) want.f[k] = tf::round_bf16(input.f[k]);
}

}  // namespace

// The node tests pass shapes, axes and indices (int64, bool) and Resize's scales as graph
// inputs; tunefarm needs them static, so they become initializers holding the data set's values.
std::string with_constant_int_inputs(const fs::path& model, const fs::path& set,
                                     std::vector<std::string>& float_inputs) {
  onnx::ModelProto m;
  std::ifstream f(model, std::ios::binary);
  if (!m.ParseFromIstream(&f)) return "";
  int k = 0;
  for (const auto& vi : m.graph().input()) {
    fs::path data = set / ("input_" + std::to_string(k++) + ".pb");
    const int elem = vi.type().has_tensor_type() ? vi.type().tensor_type().elem_type()
                                                 : onnx::TensorProto::FLOAT;
    bool is_float = elem == onnx::TensorProto::FLOAT || elem == onnx::TensorProto::FLOAT16 ||
                    elem == onnx::TensorProto::BFLOAT16;  // 16-bit inputs too (docs/precision.md)
    if (is_float && vi.type().has_tensor_type()) {
      // Where the data have the declared shape (CastLike's `like` in ONNX 1.12's data does not:
      // a constant then, as models would have it).
      onnx::TensorProto t;
      std::ifstream tf(data, std::ios::binary);
      const auto& dims = vi.type().tensor_type().shape().dim();
      is_float = t.ParseFromIstream(&tf) && t.dims_size() == dims.size();
      for (int d = 0; is_float && d < dims.size(); ++d) is_float = dims[d].dim_value() == t.dims(d);
    }
    // Resize's scales and OneHot's depth decide the output shape: constants too, as models
    // have them.
    bool decides_shape = false;
    for (const auto& node : m.graph().node()) {
      decides_shape |= node.op_type() == "Resize" && node.input_size() > 2 && node.input(2) == vi.name();
      decides_shape |=
          node.op_type() == "OneHot" && node.input_size() > 1 && node.input(1) == vi.name();
      // QuantizeLinear's and DequantizeLinear's scale and zero point: constants in models.
      for (int k = 1; k < 3; ++k) {
        decides_shape |= (node.op_type() == "QuantizeLinear" || node.op_type() == "DequantizeLinear") &&
                         node.input_size() > k && node.input(k) == vi.name();
      }
    }
    if (is_float && !decides_shape) {
      float_inputs.push_back(data.string());
      continue;
    }
    onnx::TensorProto t;
    std::ifstream tf(data, std::ios::binary);
    if (!t.ParseFromIstream(&tf)) return "";
    t.set_name(vi.name());
    *m.mutable_graph()->add_initializer() = t;
  }
  return m.SerializeAsString();
}

TEST(OnnxNodeTests, SupportedOnesMatchTheExpectedOutputs) {
  if (!fs::exists(kNodeTests))
    GTEST_SKIP() << kNodeTests << " is missing (Debian's libonnx-testdata)";
  int ran = 0, skipped = 0;
  std::map<std::string, int> ops_run;
  std::map<std::string, int> skip_reasons;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeTests)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    std::string name = dir.filename().string();
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().rfind("test_data_set", 0) == 0) sets.push_back(e.path());
    }
    bool imported = false;
    for (const fs::path& set : sets) {
      std::vector<std::string> float_inputs;
      std::string bytes = with_constant_int_inputs(dir / "model.onnx", set, float_inputs);
      ASSERT_FALSE(bytes.empty()) << name;
      Graph g;
      try {
        g = import_onnx_bytes(bytes, name);
      } catch (const tf::UserError& e) {
        std::string why = e.what();
        // Only refusals of unsupported features are skips; anything else is a bug.
        bool refusal = why.find("not supported") != std::string::npos ||
                       why.find("dynamic dimension") != std::string::npos ||
                       why.find("must be float32") != std::string::npos ||
                       why.find("takes float32") != std::string::npos ||
                       why.find("(2-D only)") != std::string::npos ||
                       why.find("must have rank 4") != std::string::npos ||
                       why.find("tunefarm supports") != std::string::npos ||
                       why.find("computed at run time") != std::string::npos;
        EXPECT_TRUE(refusal) << name << ": " << why;
        ++skipped;
        std::string reason = why.substr(why.find(": ") + 2);
        ++skip_reasons[reason.substr(0, 60)];
        break;
      }
      imported = true;
      std::map<std::string, HostTensor> inputs, expected;
      ASSERT_EQ(float_inputs.size(), g.inputs.size()) << name;
      for (size_t k = 0; k < g.inputs.size(); ++k)
        inputs[g.inputs[k]] = read_as(float_inputs[k], g.value(g.inputs[k]).dtype);
      for (size_t k = 0; k < g.outputs.size(); ++k) {
        expected[g.outputs[k]] = read_as((set / ("output_" + std::to_string(k) + ".pb")).string(),
                                         g.value(g.outputs[k]).dtype);
        if (!g.inputs.empty())
          expect_current_definition(name, inputs[g.inputs[0]], expected[g.outputs[k]]);
      }
      // As imported, and after the graph passes at -O3 (which must not change the values).
      Graph optimized = g;
      run_passes(optimized, PassOptions{3, {}, {}, nullptr});
      for (const Graph* version : {&g, &optimized}) {
        std::map<std::string, HostTensor> got;
        try {
          got = run_reference(*version, inputs);
        } catch (const tf::UserError& e) {
          ADD_FAILURE() << name << ": " << e.what();
          continue;
        }
        for (const auto& [out, want] : expected) {
          std::string diff = compare(want, got.at(out));
          EXPECT_EQ(diff, "") << name << " output " << out
                              << (version == &g ? "" : " after the passes");
        }
      }
      // The model's operators, including those folded at import.
      onnx::ModelProto m;
      m.ParseFromString(bytes);
      for (const auto& n : m.graph().node()) ++ops_run[n.op_type()];
    }
    if (imported) ++ran;
  }
  std::printf("ONNX node tests: %d ran, %d refused as unsupported\n", ran, skipped);
  for (const auto& [reason, count] : skip_reasons)
    std::printf("  %4d x %s\n", count, reason.c_str());
  EXPECT_GE(ran, 250) << "too few node tests import for this to mean much";
  // Every supported operator is exercised (the node tests of opsets 1 to 10 too, converted to
  // opset 11 at import), but ReduceLogSumExp, CumSum and Einsum, whose node tests are of float64 or
  // int32 (tests/graph/import_test.cc and passes_test.cc check them), Gelu (opset 20;
  // recognize-composites makes it, tests/graph/torch_models_test.py checks it),
  // GroupNormalization, RMSNormalization, Attention, Swish, RotaryEmbedding and Mish (opsets 18
  // to 24, newer than these node tests) and LpNormalization (no node test): import_test.cc's
  // NewerOpsetsMatchTheirDefinitions, AttentionMatchesItsDefinition, AttentionWindowsAndSwish,
  // RotaryEmbeddingMatchesItsDefinition, MathAndNormalizingOperatorsMatchTheirDefinitions;
  // graph_ort against ONNX Runtime), and
  // tunefarm's own blocked-layout operators (graph/layout.h; tests/graph/passes_test.cc) and
  // the QLinear operators, MatMulInteger and ConvInteger (their node tests take uint8 and
  // int8 model inputs, which tunefarm refuses, or give int32 outputs; tests/graph/import_test.cc
  // checks them) and the com.microsoft QLinear operators (no ONNX node tests; import_test.cc),
  // QMatMul, QConvNCHWc, QDepthwiseNCHWc and QuantizeU8 (fold-qdq and int8-edges make them; tests/graph/import_test.cc), and MatMulBF16, ConvNCHWcBF16,
  // MatMulFP16, ConvNCHWcFP16, MatMulTensorCore and ConvTensorCore (auto-mixed-precision at --precision bf16 and
  // fp16; passes_test.cc, tests/graph/precision_test.py), and FusedAttention (fuse-attention on cuda
  // targets; passes_test.cc, gpu_model_test.cc, tests/compiler/gpu_test.cc).
  for (const std::string& op : supported_ops()) {
    if (op == "ReduceLogSumExp" || op == "CumSum" || op == "Einsum" || op == "Gelu" || op == "ConvNCHWc" ||
        op == "GroupNormalization" || op == "RMSNormalization" || op == "Attention" || op == "Swish" ||
        op == "RotaryEmbedding" || op == "Mish" || op == "LpNormalization" ||
        op == "LayoutTransform" ||
        op == "QMatMul" || op == "QConvNCHWc" || op == "QDepthwiseNCHWc" || op == "QuantizeU8" ||
        op == "MatMulBF16" || op == "ConvNCHWcBF16" || op == "MatMulFP16" || op == "ConvNCHWcFP16" ||
        op == "MatMulTensorCore" || op == "ConvTensorCore" || op == kFusedAttention ||
        op == "MatMulInteger" || op == "ConvInteger" || op.rfind("QLinear", 0) == 0) {
      continue;
    }
    EXPECT_GT(ops_run[op], 0) << "no node test exercises " << op;
  }
}

// Every node test that imports, compiled after the passes at -O2 and run through the
// library's C ABI: for this machine, or (`gpu`) with every kernel scheduled for a GPU and run
// serially on this machine (compile_model's emulate_gpu). Those that do not compile must say
// compiling the node is not implemented yet; anything else (a crash, a wrong value, another
// error) fails. Returns how many compiled.
//
// `through_driver` (with `gpu`): the library compiled for the GPU itself (runtime/gpu_model),
// run through its C ABI in this process against the FAKE libcuda (tests/farm/fake_gpu), which
// runs each launched kernel's emulation from the emulated build (which runs and is matched
// itself first): the GPU library's launch plan (constants, arena offsets, workspaces,
// conversions, copies, literal outputs) on every node test; how many in *driven_out.
static int compile_node_tests(const tf::Target* gpu, int* refused_out, bool through_driver = false,
                              int* driven_out = nullptr) {
  fs::path tmp = fs::temp_directory_path() / ("tf-node-compile-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  tf::Target host = tf::host_target();
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  int compiled = 0, refused = 0, driven_count = 0;
  std::map<std::string, int> refusals;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeTests)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  int index = 0;
  for (const fs::path& dir : dirs) {
    std::string name = dir.filename().string();
    fs::path set = dir / "test_data_set_0";
    if (!fs::exists(set)) continue;
    // Under the sanitizers the CPU builds take every other test (a family's variants run the
    // same host code: test_add, test_add_bcast, ...), the emulated GPU builds every sixth, and
    // the GPU libraries through the driver every twelfth (tests/sanitized.h); the release pass
    // all of them.
    const int k = index++;
    if (!tf::testing::sampled(k, gpu ? 6 : 2)) continue;
    const bool driven = through_driver && tf::testing::sampled(k, 12);
    std::vector<std::string> float_inputs;
    std::string bytes = with_constant_int_inputs(dir / "model.onnx", set, float_inputs);
    Graph g;
    try {
      g = import_onnx_bytes(bytes, name);
    } catch (const tf::UserError&) {
      continue;  // the test above checks the refusal
    }
    // As `compile --model` runs them: the layout pass with the target's vector width (none
    // on GPUs).
    const tf::Target& t = gpu ? *gpu : host;
    run_passes(g, PassOptions{2, {}, {}, nullptr, channel_block(t)});
    // The library for this machine, or for a GPU, emulated (its grid run serially here); then,
    // where `driven`, the GPU library itself through the fake driver, which runs the emulated
    // library's kernels at its launches.
    std::vector<std::string> libraries = {(tmp / (name + ".so")).string()};
    try {
      compile_model(g, t, defaults, libraries[0], name, default_memory_budget(), gpu != nullptr);
      if (driven) {
        libraries.push_back((tmp / (name + ".gpu.so")).string());
        compile_model(g, t, defaults, libraries[1], name, default_memory_budget(), false);
        std::ofstream aliases(tmp / (name + ".aliases"));
        const nlohmann::json side = nlohmann::json::parse(std::ifstream(libraries[0] + ".json"));
        for (const nlohmann::json& k : side["kernels"]) {
          if (k.contains("same_code_as")) aliases << k["function"].get<std::string>() << " " << k["same_code_as"].get<std::string>() << "\n";
        }
        setenv("TF_FAKE_CUDA_KERNELS", libraries[0].c_str(), 1);
        setenv("TF_FAKE_CUDA_ALIASES", (tmp / (name + ".aliases")).c_str(), 1);
      }
    } catch (const tf::UserError& e) {
      std::string why = e.what();
      EXPECT_NE(why.find("is not implemented yet"), std::string::npos) << name << ": " << why;
      ++refused;
      size_t at = why.find("compiling ");
      ++refusals[at == std::string::npos ? why.substr(0, 60) : why.substr(at, 40)];
      continue;
    }
    for (const std::string& so : libraries) {
      const char* how = !gpu ? "" : so == libraries[0] ? ", emulated" : ", through the fake driver";
      ModelLibrary lib(so);
      std::vector<HostTensor> inputs;
      for (size_t k = 0; k < float_inputs.size(); ++k)
        inputs.push_back(read_as(float_inputs[k], lib.inputs()[k].dtype));
      std::vector<const HostTensor*> in;
      for (const HostTensor& t : inputs) in.push_back(&t);
      std::vector<HostTensor> got;
      lib.run(in, got);
      for (size_t k = 0; k < got.size(); ++k) {
        HostTensor want = read_as((set / ("output_" + std::to_string(k) + ".pb")).string(),
                                  lib.outputs()[k].dtype);
        if (!inputs.empty()) expect_current_definition(name, inputs[0], want);
        EXPECT_EQ(compare(want, got[k]), "") << name << " output " << k << " (compiled"
                                             << (gpu ? " for " + gpu->str() : "") << how << ")";
      }
    }
    ++compiled;
    if (driven) ++driven_count;
  }
  fs::remove_all(tmp);
  std::printf("ONNX node tests compiled%s: %d ran, %d refused as not implemented\n",
              gpu ? (" for " + gpu->str() + ", emulated").c_str() : "", compiled, refused);
  if (through_driver)
    std::printf("  of them, %d also as GPU libraries through the fake driver\n", driven_count);
  for (const auto& [reason, count] : refusals) std::printf("  %4d x %s\n", count, reason.c_str());
  if (refused_out) *refused_out = refused;
  if (driven_out) *driven_out = driven_count;
  return compiled;
}

TEST(OnnxNodeTests, CompiledModelsMatchTheExpectedOutputs) {
  if (!fs::exists(kNodeTests))
    GTEST_SKIP() << kNodeTests << " is missing (Debian's libonnx-testdata)";
  int compiled = compile_node_tests(nullptr, nullptr);
  EXPECT_GE(compiled, tf::testing::kSanitized ? 100 : 200) << "too few node tests compile for this to mean much";
}

// The same models with their kernels scheduled for a CUDA GPU (the dense and convolution
// templates' hierarchy, a 1-D grid for every other kernel) and run serially here: the GPU
// path's kernels and memory plan against the ONNX expected outputs. Then the same through the
// GPU library's own runtime: compiled for cuda (PTX and launch plan), run through the FAKE
// driver, which runs the emulated build's kernels where the library launches them, on the
// library's device buffers.
TEST(OnnxNodeTests, GpuLibrariesMatchTheExpectedOutputsEmulatedAndThroughTheFakeDriver) {
  if (!fs::exists(kNodeTests))
    GTEST_SKIP() << kNodeTests << " is missing (Debian's libonnx-testdata)";
  // Loaded first, by its path: the libraries' dlopen("libcuda.so.1") finds it by its soname.
  void* fake = dlopen(TF_FAKE_CUDA_DIR "/libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(fake, nullptr) << dlerror();
  tf::Target cuda = tf::parse_target("cuda -arch=sm_90");
  int driven = 0;
  int compiled = compile_node_tests(&cuda, nullptr, /*through_driver=*/true, &driven);
  unsetenv("TF_FAKE_CUDA_KERNELS");
  unsetenv("TF_FAKE_CUDA_ALIASES");
  EXPECT_GE(compiled, tf::testing::kSanitized ? 30 : 190) << "too few node tests compile for a GPU for this to mean much";
  EXPECT_GE(driven, tf::testing::kSanitized ? 15 : 190)
      << "too few GPU libraries ran through the driver";
}

// Models cross-compiled for aarch64 (a Raspberry Pi 4's cortex-a72) run under qemu-aarch64
// through a cross-built harness that calls the library's C ABI, and match the expected
// outputs: convolutions (tuned templates), pooling, normalization, softmax, reductions, data
// movement, transcendental math, rounding, Mod and Where (a bool condition).
TEST(OnnxNodeTests, CompiledForAarch64UnderQemu) {
  if (!fs::exists(kNodeTests))
    GTEST_SKIP() << kNodeTests << " is missing (Debian's libonnx-testdata)";
  if (tf::run_command({"qemu-aarch64", "-version"}).exit_code != 0)
    GTEST_SKIP() << "qemu-aarch64 is not installed (Debian package qemu-user)";
  const char* tests[] = {
      "test_conv_with_strides_padding",
      "test_conv_with_strides_and_asymmetric_padding",
      "test_gemm_all_attributes",
      "test_matmul_4d",
      "test_maxpool_2d_pads",
      "test_averagepool_2d_pads_count_include_pad",
      "test_batchnorm_epsilon",
      "test_layer_normalization_4d_axis1",
      "test_softmax_axis_1",
      "test_logsoftmax_axis_0",
      "test_reduce_mean_keepdims_example",
      "test_concat_3d_axis_1",
      "test_split_variable_parts_2d",
      "test_slice_neg_steps",
      "test_transpose_all_permutations_3",
      "test_erf",
      "test_tanh",
      "test_sigmoid",
      "test_clip_example",
      "test_exp",
      "test_floor",
      "test_round",
      "test_mod_mixed_sign_float32",
      "test_where_example",
  };
  fs::path tmp = fs::temp_directory_path() / ("tf-node-a64-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  tf::Target a64 = tf::parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72");
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  int ran = 0;
  for (const char* name : tests) {
    fs::path dir = fs::path(kNodeTests) / name, set = dir / "test_data_set_0";
    ASSERT_TRUE(fs::exists(set)) << name;
    std::vector<std::string> float_inputs;
    std::string bytes = with_constant_int_inputs(dir / "model.onnx", set, float_inputs);
    Graph g = import_onnx_bytes(bytes, name);
    run_passes(g, PassOptions{2, {}, {}, nullptr, a64.vector_lanes()});
    std::string base = (tmp / name).string();
    compile_model(g, a64, defaults, base + ".so", name);
    // No -L: the arm64 multiarch loader and libraries under / (see tests/compiler/aarch64_test.cc).
    std::vector<std::string> argv = {"qemu-aarch64", TF_AARCH64_MODEL_HARNESS, base + ".so"};
    for (size_t k = 0; k < float_inputs.size(); ++k) {
      HostTensor t = read_tensor_file(float_inputs[k]);
      std::string path = base + ".in" + std::to_string(k);
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.f.data()),
                                                  static_cast<std::streamsize>(t.f.size() * 4));
      argv.push_back(path);
    }
    for (size_t k = 0; k < g.outputs.size(); ++k) argv.push_back(base + ".out" + std::to_string(k));
    tf::CommandResult r = tf::run_command(argv);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      HostTensor want = read_tensor_file((set / ("output_" + std::to_string(k) + ".pb")).string());
      HostTensor got = HostTensor::floats(want.shape, std::vector<float>(want.size()));
      std::ifstream f(base + ".out" + std::to_string(k), std::ios::binary);
      f.read(reinterpret_cast<char*>(got.f.data()), static_cast<std::streamsize>(got.f.size() * 4));
      ASSERT_TRUE(f) << name << ": short output " << k;
      EXPECT_EQ(compare(want, got), "") << name << " output " << k << " (aarch64 under qemu)";
    }
    ++ran;
  }
  fs::remove_all(tmp);
  EXPECT_EQ(ran, static_cast<int>(std::size(tests)));
}

// A small CNN with constant weights, so transform-conv-layout puts its convolutions in blocks
// of NEON's 4 floats (conv + Relu, depthwise stride 2 + Clip, 1x1 conv + residual Add,
// MaxPool), cross-compiled for aarch64 and run under qemu, against the reference evaluation
// of the graph as built.
TEST(OnnxNodeTests, BlockedConvolutionsForAarch64UnderQemu) {
  if (tf::run_command({"qemu-aarch64", "-version"}).exit_code != 0)
    GTEST_SKIP() << "qemu-aarch64 is not installed (Debian package qemu-user)";
  Graph g;
  uint32_t seed = 3;
  auto value = [&](const std::string& n, const Shape& s) {
    g.values[n] = Value{n, DType::F32, s, std::nullopt};
  };
  auto weights = [&](const std::string& n, const Shape& s) {
    HostTensor t = HostTensor::floats(s, std::vector<float>(num_elements(s)));
    for (float& v : t.f)
      v = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
    g.values[n] = Value{n, DType::F32, s, t};
  };
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                  const Shape& s, std::map<std::string, Attr> attrs = {}) {
    value(out, s);
    g.nodes.push_back(Node{op + "_" + out, op, std::move(in), {out}, std::move(attrs)});
  };
  value("x", {1, 3, 10, 10});
  g.inputs = {"x"};
  weights("w1", {8, 3, 3, 3});
  weights("b1", {8});
  weights("wd", {8, 1, 3, 3});
  weights("wp", {8, 8, 1, 1});
  g.values["lo"] = Value{"lo", DType::F32, {}, HostTensor::floats({}, {0.0f})};
  g.values["hi"] = Value{"hi", DType::F32, {}, HostTensor::floats({}, {0.5f})};
  std::vector<int64_t> one = {1, 1, 1, 1};
  node("Conv", {"x", "w1", "b1"}, "c1", {1, 8, 10, 10}, {{"pads", one}});
  node("Relu", {"c1"}, "r1", {1, 8, 10, 10});
  node("Conv", {"r1", "wd"}, "d", {1, 8, 5, 5},
       {{"pads", one}, {"strides", std::vector<int64_t>{2, 2}}, {"group", int64_t{8}}});
  node("Clip", {"d", "lo", "hi"}, "c", {1, 8, 5, 5});
  node("Conv", {"c", "wp"}, "p", {1, 8, 5, 5});
  node("Add", {"p", "c"}, "s", {1, 8, 5, 5});
  node("MaxPool", {"s"}, "y", {1, 8, 2, 2},
       {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  g.outputs = {"y"};
  verify(g);
  HostTensor x = HostTensor::floats({1, 3, 10, 10}, std::vector<float>(300));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(static_cast<float>(k));
  HostTensor want = run_reference(g, {{"x", x}}).at("y");

  tf::Target a64 = tf::parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72");
  run_passes(g, PassOptions{2, {}, {}, nullptr, a64.vector_lanes()});
  int convs = 0;
  for (const Node& n : g.nodes) convs += n.op == "ConvNCHWc";
  ASSERT_EQ(convs, 3);
  fs::path tmp = fs::temp_directory_path() / ("tf-blocked-a64-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  std::string base = (tmp / "cnn").string();
  ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; };
  compile_model(g, a64, defaults, base + ".so", "cnn");
  std::ofstream(base + ".in0", std::ios::binary)
      .write(reinterpret_cast<const char*>(x.f.data()),
             static_cast<std::streamsize>(x.f.size() * 4));
  tf::CommandResult r = tf::run_command(
      {"qemu-aarch64", TF_AARCH64_MODEL_HARNESS, base + ".so", base + ".in0", base + ".out0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  HostTensor got = HostTensor::floats(want.shape, std::vector<float>(want.size()));
  std::ifstream f(base + ".out0", std::ios::binary);
  f.read(reinterpret_cast<char*>(got.f.data()), static_cast<std::streamsize>(got.f.size() * 4));
  ASSERT_TRUE(f) << "short output";
  EXPECT_EQ(compare(want, got), "") << "(aarch64 under qemu, blocked layouts)";
  fs::remove_all(tmp);
}

// compile --model takes a 3x3 stride-1 convolution's Winograd kernel (its weights transformed
// at compile time) unless the lookup says the direct one was tuned for this very workload and
// the Winograd one was not, or both were and the direct one ran faster; either way the model
// matches the reference evaluation of the graph as built (conv + bias + Relu, then conv +
// residual Add + Relu).
TEST(ModelCompiler, TakesTheWinogradConvolutionUnlessTheDirectOneWasTunedFaster) {
  Graph g;
  uint32_t seed = 11;
  auto value = [&](const std::string& n, const Shape& s) { g.values[n] = Value{n, DType::F32, s, std::nullopt}; };
  auto weights = [&](const std::string& n, const Shape& s) {
    HostTensor t = HostTensor::floats(s, std::vector<float>(num_elements(s)));
    for (float& v : t.f) v = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 1023) / 2048.0f - 0.25f;
    g.values[n] = Value{n, DType::F32, s, t};
  };
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out, const Shape& s,
                  std::map<std::string, Attr> attrs = {}) {
    value(out, s);
    g.nodes.push_back(Node{op + "_" + out, op, std::move(in), {out}, std::move(attrs)});
  };
  const Shape act = {1, 32, 13, 11};
  value("x", {1, 16, 13, 11});
  g.inputs = {"x"};
  weights("w1", {32, 16, 3, 3});
  weights("b1", {32});
  weights("w2", {32, 32, 3, 3});
  weights("b2", {32});
  std::vector<int64_t> one = {1, 1, 1, 1};
  node("Conv", {"x", "w1", "b1"}, "c1", act, {{"pads", one}});
  node("Relu", {"c1"}, "r1", act);
  node("Conv", {"r1", "w2", "b2"}, "c2", act, {{"pads", one}});
  node("Add", {"c2", "r1"}, "s", act);
  node("Relu", {"s"}, "y", act);
  g.outputs = {"y"};
  verify(g);
  HostTensor x = HostTensor::floats({1, 16, 13, 11}, std::vector<float>(16 * 13 * 11));
  for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(static_cast<float>(k));
  HostTensor want = run_reference(g, {{"x", x}}).at("y");

  tf::Target host = tf::host_target();
  run_passes(g, PassOptions{2, {}, {}, nullptr, host.vector_lanes()});
  fs::path tmp = fs::temp_directory_path() / ("tf-winograd-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  // Each kernel's exact median in the database (0: not tuned), and whether the Winograd
  // kernels are compiled.
  struct Case {
    double winograd_s, direct_s;
    bool winograd;
  };
  const Case cases[] = {{1e-3, 2e-3, true}, {3e-3, 2e-3, false}, {0, 2e-3, false},
                        {0, 0, true},       {1.99e-3, 2e-3, false},  // within 2%
                        {3e-3, 0, true}};
  int index = 0;
  for (const Case& c : cases) {
    // Under the sanitizers the 1st, 3rd and 5th (Winograd tuned faster, only the direct one
    // tuned, a tie within 2%): each is a whole model compile there (tests/sanitized.h).
    if (!tf::testing::sampled(index++, 2)) continue;
    std::string what = tf::str("Winograd tuned at ", c.winograd_s, " s, direct at ", c.direct_s, " s");
    ConfigLookup lookup = [&](const tf::Workload& w, const tf::Target&) {
      double s = w.op == "conv2d_winograd_nchwc" ? c.winograd_s : c.direct_s;
      if (s == 0) return KernelConfig{nlohmann::json(), "default", nullptr};
      return KernelConfig{nlohmann::json(), "tuned (exact)", {{"tier", "exact"}, {"median_s", s}}};
    };
    std::string so = (tmp / "m.so").string();
    CompiledModel cm = compile_model(g, host, lookup, so, "cnn");
    int wino = 0;
    for (const ModelKernel& k : cm.kernels) wino += k.template_name == "conv2d_winograd_nchwc.cpu.v1";
    EXPECT_EQ(wino, c.winograd ? 2 : 0) << what;
    ModelLibrary lib(so);
    std::vector<HostTensor> got;
    lib.run({&x}, got);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].shape, want.shape);
    double worst = 0;
    for (int64_t k = 0; k < want.size(); ++k)
      worst = std::max(worst, std::fabs(want.as_double(k) - got[0].as_double(k)) / (1 + std::fabs(want.as_double(k))));
    EXPECT_LT(worst, 1e-4) << what;
  }
  fs::remove_all(tmp);
}

// A small graph of convolutions over a float input x [shape], built by `body` with seeded
// weights (`weights`, `node`), compiled with default schedules for the host after the passes:
// its kernels' workloads, and the largest difference of the library's output from the
// reference evaluation of the graph as built (relative to 1 + |value|).
struct SmallConvModel {
  Graph g;
  uint32_t seed = 23;
  void value(const std::string& n, const Shape& s) { g.values[n] = Value{n, DType::F32, s, std::nullopt}; }
  void weights(const std::string& n, const Shape& s) {
    HostTensor t = HostTensor::floats(s, std::vector<float>(num_elements(s)));
    for (float& v : t.f) v = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 1023) / 2048.0f - 0.25f;
    g.values[n] = Value{n, DType::F32, s, t};
  }
  void node(const std::string& op, std::vector<std::string> in, const std::string& out, const Shape& s,
            std::map<std::string, Attr> attrs = {}) {
    value(out, s);
    g.nodes.push_back(Node{op + "_" + out, op, std::move(in), {out}, std::move(attrs)});
  }
  // Compiles (g's input "x" of `shape`, output "y") and runs it.
  std::pair<std::vector<std::string>, double> compile_and_compare(const Shape& shape, const std::string& name) {
    value("x", shape);
    g.inputs = {"x"};
    g.outputs = {"y"};
    verify(g);
    HostTensor x = HostTensor::floats(shape, std::vector<float>(num_elements(shape)));
    for (size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::sin(static_cast<float>(k));
    HostTensor want = run_reference(g, {{"x", x}}).at("y");
    tf::Target host = tf::host_target();
    run_passes(g, PassOptions{2, {}, {}, nullptr, host.vector_lanes()});
    fs::path tmp = fs::temp_directory_path() / ("tf-" + name + "-" + std::to_string(getpid()));
    fs::create_directories(tmp);
    std::string so = (tmp / "m.so").string();
    ConfigLookup defaults = [](const tf::Workload&, const tf::Target&) {
      return KernelConfig{nlohmann::json(), "default", nullptr};
    };
    CompiledModel cm = compile_model(g, host, defaults, so, name);
    std::vector<std::string> workloads;
    for (const ModelKernel& k : cm.kernels) workloads.push_back(k.workload);
    ModelLibrary lib(so);
    std::vector<HostTensor> got;
    lib.run({&x}, got);
    double worst = std::numeric_limits<double>::infinity();
    if (got.size() == 1 && got[0].shape == want.shape) {
      worst = 0;
      for (int64_t k = 0; k < want.size(); ++k)
        worst = std::max(worst, std::fabs(want.as_double(k) - got[0].as_double(k)) / (1 + std::fabs(want.as_double(k))));
    }
    fs::remove_all(tmp);
    return {workloads, worst};
  }
};

std::vector<std::string> starting_with(const std::vector<std::string>& all, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& s : all)
    if (s.rfind(prefix, 0) == 0) out.push_back(s);
  return out;
}

// Atrous (dilated) 3x3 convolutions take Winograd kernels of their residue classes: DeepLab's
// rate-2 layer over 16x16 in tiles of 4 (8 rows a class, whole tiles), a rate-3 one in tiles
// of 2 (6 rows a class: tiles of 4 would cover 24 rows for 16), and a rate-6 one over the
// same map none (3 rows a class: tiles of 2 would cover 24, tiles of 4 48); the model
// matches the reference evaluation (conv + bias + Relu, conv + residual Add + Relu, conv).
TEST(ModelCompiler, DilatedConvolutionsRunAsWinogradTilesOfTheirResidueClasses) {
  SmallConvModel m;
  auto atrous = [](int64_t d) -> std::map<std::string, Attr> {
    return {{"pads", std::vector<int64_t>(4, d)}, {"dilations", std::vector<int64_t>{d, d}}};
  };
  const Shape act = {1, 32, 16, 16};
  m.weights("w1", {32, 16, 3, 3});
  m.weights("b1", {32});
  m.weights("w2", {32, 32, 3, 3});
  m.weights("b2", {32});
  m.weights("w3", {32, 32, 3, 3});
  m.node("Conv", {"x", "w1", "b1"}, "c1", act, atrous(2));
  m.node("Relu", {"c1"}, "r1", act);
  m.node("Conv", {"r1", "w2", "b2"}, "c2", act, atrous(3));
  m.node("Add", {"c2", "r1"}, "s", act);
  m.node("Relu", {"s"}, "r2", act);
  m.node("Conv", {"r2", "w3"}, "y", act, atrous(6));
  auto [workloads, worst] = m.compile_and_compare({1, 16, 16, 16}, "atrous");
  std::vector<std::string> wino = starting_with(workloads, "conv2d_winograd_nchwc("),
                           direct = starting_with(workloads, "conv2d_nchwc(");
  ASSERT_EQ(wino.size(), 2u);
  EXPECT_NE(wino[0].find(",tile=4,dilation=2,"), std::string::npos) << wino[0];
  EXPECT_NE(wino[1].find(",tile=2,dilation=3,"), std::string::npos) << wino[1];
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_NE(direct[0].find(",dilation=6,"), std::string::npos) << direct[0];
  EXPECT_LT(worst, 1e-4);
}

// Grouped convolutions whose groups have as many filters as channels, whole in a block (ResNeXt's
// 4 and 8, RegNet's 8), compile lane by lane (depthwise_conv2d_nchwc of their width), with the
// epilogue and a residual tail fused, and match the reference evaluation: groups of 4 (3x3,
// bias + Relu), groups of 8 (3x3 strided, then an Add of a 1x1 projection, Relu), and groups
// of 16 (a block each: the blocked conv2d_nchwc).
TEST(ModelCompiler, GroupedConvolutionsRunLaneByLane) {
  SmallConvModel m;
  std::map<std::string, Attr> pad1 = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  auto grouped = [&](int64_t g, int64_t stride) {
    std::map<std::string, Attr> a = pad1;
    a["group"] = g;
    a["strides"] = std::vector<int64_t>{stride, stride};
    return a;
  };
  m.weights("w1", {64, 4, 3, 3});
  m.weights("b1", {64});
  m.weights("w2", {64, 8, 3, 3});
  m.weights("wp", {64, 64, 1, 1});
  m.weights("w3", {64, 16, 3, 3});
  m.node("Conv", {"x", "w1", "b1"}, "c1", {1, 64, 12, 10}, grouped(16, 1));
  m.node("Relu", {"c1"}, "r1", {1, 64, 12, 10});
  m.node("Conv", {"r1", "w2"}, "c2", {1, 64, 6, 5}, grouped(8, 2));
  m.node("Conv", {"r1", "wp"}, "p", {1, 64, 6, 5}, {{"strides", std::vector<int64_t>{2, 2}}});
  m.node("Add", {"c2", "p"}, "s", {1, 64, 6, 5});
  m.node("Relu", {"s"}, "r2", {1, 64, 6, 5});
  m.node("Conv", {"r2", "w3"}, "y", {1, 64, 6, 5}, grouped(4, 1));
  auto [workloads, worst] = m.compile_and_compare({1, 64, 12, 10}, "lanes");
  std::vector<std::string> lanes = starting_with(workloads, "depthwise_conv2d_nchwc(");
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_NE(lanes[0].find(",block=16,width=4,epilogue=bias_relu)"), std::string::npos) << lanes[0];
  EXPECT_NE(lanes[1].find("stride=2,pad=1,dilation=1,block=16,width=8,"), std::string::npos) << lanes[1];
  std::vector<std::string> blocked = starting_with(workloads, "conv2d_nchwc(");
  ASSERT_EQ(blocked.size(), 2u);  // the projection, and the groups of 16
  EXPECT_NE(blocked[1].find(",group=4,"), std::string::npos) << blocked[1];
  EXPECT_LT(worst, 1e-4);
}

// NaN in, NaN out, as in PyTorch and ONNX Runtime, for every max/min-like operator, compiled
// (Relu fused into a convolution's epilogue too) and in the reference evaluators: Relu made
// NaN 0 (maxnum) and the pools and clamps dropped it.
TEST(ModelCompiler, NaNPropagatesThroughMaxMinClipReluAndPools) {
  Graph g;
  const Shape s = {1, 8, 6, 6};
  auto value = [&](const std::string& n, const Shape& sh) { g.values[n] = Value{n, DType::F32, sh, std::nullopt}; };
  auto constant = [&](const std::string& n, const Shape& sh, float v) {
    g.values[n] = Value{n, DType::F32, sh, HostTensor::floats(sh, std::vector<float>(num_elements(sh), v))};
  };
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out, const Shape& sh,
                  std::map<std::string, Attr> attrs = {}) {
    value(out, sh);
    g.nodes.push_back(Node{op + "_" + out, op, std::move(in), {out}, std::move(attrs)});
  };
  value("x", s);
  value("y", s);
  g.inputs = {"x", "y"};
  constant("lo", {}, 0.0f);
  constant("hi", {}, 6.0f);
  constant("w", {8, 8, 1, 1}, 0.125f);
  node("Relu", {"x"}, "relu", s);
  node("Clip", {"x", "lo", "hi"}, "clip", s);
  node("Max", {"x", "y"}, "max", s);
  node("Min", {"y", "x"}, "min", s);
  node("HardSigmoid", {"x"}, "hsig", s);
  node("MaxPool", {"x"}, "pool", {1, 8, 3, 3},
       {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  node("ReduceMax", {"x"}, "rmax", {1, 8, 6, 1}, {{"axes", std::vector<int64_t>{3}}, {"keepdims", int64_t{1}}});
  node("Conv", {"x", "w"}, "conv", s);
  node("Relu", {"conv"}, "crelu", s);
  g.outputs = {"relu", "clip", "max", "min", "hsig", "pool", "rmax", "crelu"};
  verify(g);
  const float nan = std::nanf("");
  HostTensor x = HostTensor::floats(s, std::vector<float>(num_elements(s))), y = x;
  for (size_t k = 0; k < x.f.size(); ++k) {
    x.f[k] = std::sin(static_cast<float>(k)) * 8;
    y.f[k] = std::cos(static_cast<float>(k)) * 8;
  }
  const std::vector<size_t> nans = {0, 7, 40, 41, 100, 287};
  for (size_t k : nans) x.f[k] = nan;
  std::map<std::string, HostTensor> want = run_reference(g, {{"x", x}, {"y", y}});
  for (const char* out : {"relu", "clip", "max", "min", "hsig"}) {
    for (size_t k : nans) EXPECT_TRUE(std::isnan(want.at(out).f[k])) << out << " reference, element " << k;
  }
  EXPECT_TRUE(std::isnan(want.at("pool").f[0]));  // the window of x[0]
  EXPECT_TRUE(std::isnan(want.at("rmax").f[0]));  // the row of x[0]
  EXPECT_FALSE(std::isnan(want.at("pool").f[1]));

  tf::Target host = tf::host_target();
  run_passes(g, PassOptions{2, {}, {}, nullptr, host.vector_lanes()});
  fs::path tmp = fs::temp_directory_path() / ("tf-nan-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  std::string so = (tmp / "nan.so").string();
  compile_model(g, host, [](const tf::Workload&, const tf::Target&) { return KernelConfig{}; }, so, "nan");
  ModelLibrary lib(so);
  std::vector<HostTensor> got;
  lib.run({&x, &y}, got);
  ASSERT_EQ(got.size(), g.outputs.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const HostTensor& w = want.at(g.outputs[i]);
    ASSERT_EQ(w.shape, got[i].shape) << g.outputs[i];
    for (int64_t k = 0; k < w.size(); ++k) {
      EXPECT_EQ(std::isnan(w.f[k]), std::isnan(got[i].f[k])) << g.outputs[i] << " element " << k;
    }
    EXPECT_EQ(compare(w, got[i]), "") << g.outputs[i];
  }
  fs::remove_all(tmp);
}
