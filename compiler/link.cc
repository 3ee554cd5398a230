#include "compiler/link.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "compiler/error.h"

extern char** environ;

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
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

namespace {

std::string find_lld() {
  if (const char* env = std::getenv("TUNEFARM_LLD")) return env;
  for (const char* p : {"/usr/bin/ld.lld-19", "/usr/lib/llvm-19/bin/ld.lld"}) {
    if (fs::exists(p)) return p;
  }
  return "ld.lld-19";
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

}  // namespace

void link_shared_library(const std::string& object_path, const std::string& out_path,
                         const Target& target, bool openmp, bool libm) {
  std::vector<std::string> argv = {find_lld(), "-shared", "--hash-style=gnu", "-z", "noexecstack",
                                   "-O1", "-o", out_path, object_path};
  if (openmp) {
    // libgomp's pool threads outlive every parallel region; if a host dlclose()d the kernel,
    // libgomp would be unmapped under them. A kernel that uses the pool stays loaded.
    argv.insert(argv.begin() + 1, {"-z", "nodelete"});
    argv.push_back(find_target_library(target, "libgomp.so.1", "libgomp1"));
  }
  if (libm) argv.push_back(find_target_library(target, "libm.so.6", "libc6"));
  CommandResult r = run_command(argv);
  if (r.exit_code != 0) {
    std::ostringstream cmd;
    for (const std::string& a : argv) cmd << a << " ";
    throw std::runtime_error(str("linking failed (exit ", r.exit_code, "): ", cmd.str(), "\n", r.output));
  }
}

}  // namespace tf
