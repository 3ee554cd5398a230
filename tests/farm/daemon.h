// Daemons (tracker, boards) started as child processes by the C++ farm tests, each with its
// output in a log file, ready once the log says where it listens.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace tf::farm {

// A daemon started as a child process, its output in a file.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Daemon() { stop(SIGKILL); }

  // Waits for "listening on HOST:PORT" in the log; returns the port, 0 on failure.
  int port(int timeout_ms = 10000) {
    std::regex re("listening on [^ ]*:([0-9]+)");
    for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms); std::chrono::steady_clock::now() < end;) {
      std::smatch m;
      std::string text = log();
      if (std::regex_search(text, m, re)) return std::stoi(m[1]);
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  bool wait_for_log(const std::string& text, int timeout_ms) {
    for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms); std::chrono::steady_clock::now() < end;) {
      if (log().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  pid_t pid() const { return pid_; }
  bool exited() {
    if (pid_ <= 0) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = status;
      pid_ = -1;
      return true;
    }
    return false;
  }
  int stop(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
      waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
    return status_;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int status_ = 0;
};

}  // namespace tf::farm
