// Models made to break the tools, generated here and given to the `tunefarm` command as a user
// would: a chain of 12,000 nodes (it overflowed the stack of every recursive IR walk), chains
// whose nodes read their input twice (2^n-node expressions once inlined), a Sum of thousands
// of operands, and tensors of 8 GiB from a 100-byte model. Each must compile and match the
// reference, or be refused with exit 2 and a message naming the node: never a signal, a hang
// or an allocation of what the model asks for.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/graph/onnx_builder.h"
#include "tests/sanitized.h"
#include "tests/temp_dir.h"

namespace tf::graph {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;
using testing::set_int;

std::string temp_dir() {
  static tf::testing::TempDir dir("tunefarm-hostile");
  return dir.path();
}

struct Result {
  int exit = -1;     // the exit status; -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
};

// Runs `tunefarm ARGS` through the shell (`prefix` first: a ulimit), in the temporary folder.
Result tunefarm(const std::string& args, const std::string& prefix = "") {
  std::string cmd = "cd " + temp_dir() + " && " + prefix + " exec " + TF_TUNEFARM + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  int status = pclose(p);
  if (WIFEXITED(status)) r.exit = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

std::string save(const ModelBuilder& b, const std::string& name) {
  b.save(temp_dir() + "/" + name);
  return name;
}

// x -> n nodes of `op` (with the constant c where it takes two inputs) -> y
ModelBuilder chain(int n, const std::string& op) {
  ModelBuilder b(13);
  b.input("x", {4, 8});
  b.floats("c", {0.5f});
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    std::string out = i + 1 == n ? "y" : "v" + std::to_string(i);
    if (op == "Add") b.node("Add", {prev, "c"}, {out});
    else b.node(op, {prev}, {out});
    prev = out;
  }
  b.output("y");
  return b;
}

// Compiles `model`, runs the library and the reference on the same input, and expects the
// same output.
void expect_compiles_and_matches(const std::string& model) {
  Result ref = tunefarm("run --model " + model + " --reference --output y=" + model + ".want.npy");
  ASSERT_EQ(ref.exit, 0) << ref.output;
  Result c = tunefarm("compile --model " + model + " -o " + model + ".so");
  ASSERT_EQ(c.exit, 0) << c.output;
  Result run = tunefarm("run --model " + model + ".so --expect " + model + ".want.npy");
  EXPECT_EQ(run.exit, 0) << run.output;
  EXPECT_NE(run.output.find("max error"), std::string::npos) << run.output;
}

TEST(HostileModels, AChainOfTwelveThousandNodesCompiles) {
  // Each Add joins its producer's kernel: before groups and inlined expressions were bounded
  // this one kernel was an expression 12,000 levels deep, and compile died of SIGSEGV.
  expect_compiles_and_matches(save(chain(12000, "Add"), "add_chain.onnx"));
}

TEST(HostileModels, ChainsReadingTheirInputTwiceStayBounded) {
  // Softsign is x / (1 + |x|): inlined 30 times, 2^30 nodes to every walk of the IR (the compile
  // never ended); bounded, some stages are computed into buffers of their own.
  expect_compiles_and_matches(save(chain(30, "Softsign"), "softsign_chain.onnx"));
}

TEST(HostileModels, LongChainsOfNodesReadingTheirInputSeveralTimes) {
  // Selu reads its input three times, HardSwish twice: 12,000 of them took 300 s and 11 GB
  // (Selu, stopped there) and 60 s (HardSwish) while each expression stayed within the node
  // bound; a stage read more than once is now computed once when its copies would be large.
  // Under the sanitizers 4,000 of them (60 s there at 12,000; tests/sanitized.h).
  expect_compiles_and_matches(save(chain(tf::testing::sweep(12000, 4000), "Selu"), "selu_chain.onnx"));
}

// A Sum of 20,000 operands was refused (its expression past the compiler's bounds); import now
// makes a wide Sum a tree of Sums of at most 64 operands (graph/onnx_import.h
// kMaxVariadicInputs), each combined pairwise.
TEST(HostileModels, AWideSumCompilesPairwise) {
  for (int operands : {300, 20000}) {
    ModelBuilder wide(13);
    wide.input("x", {4, 8});
    wide.node("Sum", std::vector<std::string>(operands, "x"), {"y"}, "wide");
    wide.output("y");
    expect_compiles_and_matches(save(wide, "sum" + std::to_string(operands) + ".onnx"));
  }
}

// ConstantOfShape([2^31]): 8 GiB of float32 from a 100-byte model. Run under a 4 GiB address
// space limit, where the default budget is a quarter of it: refused before any allocation
// (it allocated the 8 GiB and ended in std::bad_alloc, naming nothing).
TEST(HostileModels, ALargeConstantIsRefusedBeforeAllocating) {
  ModelBuilder b(13);
  b.ints("shape", {int64_t{1} << 31});
  b.node("ConstantOfShape", {"shape"}, {"y"}, "big");
  b.output("y");
  std::string m = save(b, "big_constant.onnx");
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit;  // AddressSanitizer reserves terabytes of address space: no ulimit -v
#else
  const std::string limit = "ulimit -v 4194304;";
#endif
  Result r = tunefarm("run --model " + m + " --reference", limit);
  EXPECT_EQ(r.signal, 0) << r.output;
  EXPECT_EQ(r.exit, 2) << r.output;
  // (a quarter of 4 GiB, or of a smaller cgroup limit)
  EXPECT_NE(r.output.find("node 'big' (ConstantOfShape): output 'y' float32 [2147483648] is 8.0 GiB, over the "
                          "memory budget of "),
            std::string::npos)
      << r.output;
  // With the budget given, the same.
  r = tunefarm("run --model " + m + " --reference --max-memory 512M");
  EXPECT_EQ(r.exit, 2) << r.output;
  EXPECT_NE(r.output.find("over the memory budget of 512.0 MiB (--max-memory"), std::string::npos) << r.output;
}

// Expand of a scalar input to [2^31]: what compile would build into the library (and a run
// allocate) is refused at compile time, naming the node.
TEST(HostileModels, CompileRefusesTensorsPastTheBudget) {
  ModelBuilder b(13);
  b.input("x", {1});
  b.ints("shape", {int64_t{1} << 31});
  b.node("Expand", {"x", "shape"}, {"y"}, "spread");
  b.output("y");
  Result r = tunefarm("compile --model " + save(b, "expand.onnx") + " --max-memory 1G -o expand.so");
  EXPECT_EQ(r.exit, 2) << r.output;
  EXPECT_NE(r.output.find("node 'spread' (Expand): output 'y' float32 [2147483648] is 8.0 GiB"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(temp_dir() + "/expand.so"));
  // A library is checked again where it runs: one compiled for a larger budget.
  ModelBuilder mid(13);
  mid.input("x", {1024, 1024});
  mid.node("Relu", {"x"}, {"y"}, "relu");
  mid.output("y");
  r = tunefarm("compile --model " + save(mid, "mid.onnx") + " -o mid.so");
  ASSERT_EQ(r.exit, 0) << r.output;
  r = tunefarm("run --model mid.so --max-memory 4M");
  EXPECT_EQ(r.exit, 2) << r.output;
  EXPECT_NE(r.output.find("mid.so: a run holds 8.0 MiB"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tf::graph
