#include "runtime/spawn.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace tf {

pid_t spawn_in_group(const std::vector<std::string>& args, int stdin_fd, int stdout_fd, std::string* err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
  // Only stdin, stdout and stderr reach the child: a listening socket, a database file or a
  // client's connection opened without O_CLOEXEC elsewhere in this process must not.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *err = "cannot start " + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

int reap_group(pid_t pid, rusage* usage) {
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);
  int status = 0;
  rusage ignored{};
  while (wait4(pid, &status, 0, usage ? usage : &ignored) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace tf
