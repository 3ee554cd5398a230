#include "compiler/link.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <lld/Common/Driver.h>
#include <llvm/Support/raw_ostream.h>

#include <mutex>

#include "base/error.h"
#include "base/file_io.h"
#include "compiler/codegen_llvm.h"

extern char** environ;
LLD_HAS_DRIVER(elf)

namespace tf {
namespace fs = std::filesystem;

CommandResult run_command(const std::vector<std::string>& argv) {
  TF_CHECK(!argv.empty(), "empty command");
  int pipefd[2];
  if (pipe(pipefd) != 0) return {-1, "pipe failed"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return {-1, str("cannot start ", argv[0], ": ", std::strerror(rc))};
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

namespace {

// TUNEFARM_LLD where set (the Python package of a bundle sets it: the running program is then
// Python), else Debian's lld-19, else an ld.lld next to the running program (scripts/bundle.sh
// puts one there, for machines without LLVM), else ld.lld-19 in PATH.
std::string find_lld() {
  if (const char* env = std::getenv("TUNEFARM_LLD")) return env;
  for (const char* p : {"/usr/bin/ld.lld-19", "/usr/lib/llvm-19/bin/ld.lld"}) {
    if (fs::exists(p)) return p;
  }
  std::error_code ec;
  fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "ld.lld";
  if (!ec && fs::exists(beside)) return beside.string();
  return "ld.lld-19";
}

// Links with lld's ELF driver in this process: starting ld.lld costs more than the link of a
// kernel (measured: 75 ms to start, against ~5 ms of linking). lld keeps global state, so one
// link at a time; after a crash it says it cannot run again, and later links start ld.lld.
// Returns nullopt when the in-process linker is not usable.
//
// Only on the process's main thread: lld's output file registers LLVM's signal handlers, and
// the first thread to do so gets an alternate signal stack of LLVM's (malloc'd) when the one it
// has is smaller than LLVM wants; when that thread is one that later exits, AddressSanitizer's
// thread teardown unmaps "its" alternate stack and aborts the process ("failed to deallocate",
// seen in the tuning service, whose jobs compile their models on job threads). Other threads
// start ld.lld (75 ms).
std::optional<CommandResult> link_in_process(const std::vector<std::string>& argv) {
  if (gettid() != getpid()) return std::nullopt;
  static std::mutex mu;
  static bool usable = true;
  std::lock_guard<std::mutex> lock(mu);
  if (!usable) return std::nullopt;
  std::vector<const char*> args = {"ld.lld"};
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(argv[i].c_str());
  std::string out;
  llvm::raw_string_ostream os(out);
  lld::Result r = lld::lldMain(args, os, os, {{lld::Gnu, &lld::elf::link}});
  usable = r.canRunAgain;
  os.flush();
  return CommandResult{r.retCode, out};
}

// The Debian package that holds `base` (libgomp1, libc6) for the target's architecture: the
// native one on the host's architecture, a cross package otherwise.
std::string package_for(const Target& t, const std::string& base) {
  Target host = host_target();
  if (t.arch_name() == host.arch_name()) return base;
  std::string arch = t.arch_name();
  return base + "-" + (arch == "aarch64" ? "arm64" : arch == "arm" ? "armhf" : arch == "x86_64" ? "amd64" : arch) +
         "-cross";
}

// A system library of the target's architecture, e.g. libgomp.so.1 for aarch64; when it is
// missing, the error names the Debian package that holds it (`package`, for the host's
// architecture).
std::string find_target_library(const Target& t, const std::string& file, const std::string& package) {
  std::string multiarch = t.multiarch();
  for (const std::string& dir : {"/usr/lib/" + multiarch, "/lib/" + multiarch, "/usr/" + multiarch + "/lib"}) {
    fs::path p = fs::path(dir) / file;
    if (fs::exists(p)) return p.string();
  }
  throw std::runtime_error(str(file, " for ", t.arch_name(), " was not found in /usr/lib/", multiarch,
                               ", /lib/", multiarch, " or /usr/", multiarch, "/lib (install ",
                               package_for(t, package), ")"));
}

void run_linker(const std::vector<std::string>& argv) {
  // $TUNEFARM_LLD names a linker program to run instead.
  std::optional<CommandResult> in_process;
  if (!std::getenv("TUNEFARM_LLD")) in_process = link_in_process(argv);
  CommandResult r = in_process ? *in_process : run_command(argv);
  if (r.exit_code != 0) {
    std::ostringstream cmd;
    for (const std::string& a : argv) cmd << a << " ";
    throw std::runtime_error(str("linking failed (exit ", r.exit_code, "): ", cmd.str(), "\n", r.output));
  }
}

}  // namespace

void link_shared_library(const std::string& object_path, const std::string& out_path,
                         const Target& target, bool openmp, bool libm) {
  link_shared_library(std::vector<std::string>{object_path}, out_path, target, openmp, libm);
}

void link_shared_library(const std::vector<std::string>& objects, const std::string& out_path,
                         const Target& target, bool openmp, bool libm, bool nodelete) {
  // -Bsymbolic: calls between the objects bind inside the library, whatever else is loaded.
  std::vector<std::string> argv = {find_lld(), "-shared", "--hash-style=gnu", "-z", "noexecstack",
                                   "-Bsymbolic", "-O1", "-o", out_path};
  argv.insert(argv.end(), objects.begin(), objects.end());
  if (nodelete && !openmp) argv.insert(argv.begin() + 1, {"-z", "nodelete"});
  if (openmp) {
    // The thread pool's workers (compiler/thread_pool_ir.h) outlive every parallel loop and
    // run the library's code; if a host dlclose()d it, that code would be unmapped under
    // them. A kernel that uses the pool stays loaded. libgomp sizes the teams.
    argv.insert(argv.begin() + 1, {"-z", "nodelete"});
    argv.push_back(find_target_library(target, "libgomp.so.1", "libgomp1"));
  }
  if (libm) argv.push_back(find_target_library(target, "libm.so.6", "libc6"));
  run_linker(argv);
}

void link_amdgpu_code_object(const std::string& object_path, const std::string& out_path) {
  run_linker({find_lld(), "-shared", "-o", out_path, object_path});
}

std::string gpu_device_module(const std::vector<ir::LoweredFunc>& funcs, const Target& target, const std::string& tmp) {
  if (target.kind == TargetKind::Cuda) return codegen_llvm(funcs, target, CodegenOutput::Asm).data;
  TemporaryFiles temps;
  const std::string object = temps.add(tmp + ".o");
  const std::string code = temps.add(str(tmp, ".", target.info().module_format));
  write_file(object, codegen_llvm(funcs, target, CodegenOutput::Object).data);
  link_amdgpu_code_object(object, code);
  return read_file(code);
}

}  // namespace tf
