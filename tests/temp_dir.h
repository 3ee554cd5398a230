// A scratch directory for one test process: made on first use, removed when the process exits.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tf::testing {

// $TMPDIR/PREFIX-XXXXXX, removed with everything in it when the process that made it exits
// (a forked child that exits leaves it to its parent). TUNEFARM_KEEP_TEST_TMP=1 keeps it, to
// look at what a failing test left there. Use one per process, as a function-local static:
//   std::string temp_dir() { static testing::TempDir d("tunefarm-farm"); return d.path(); }
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) : owner_(getpid()) {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + t);
    path_ = t;
  }
  ~TempDir() {
    const char* keep = getenv("TUNEFARM_KEEP_TEST_TMP");
    if (getpid() != owner_ || (keep && *keep && std::string(keep) != "0")) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  pid_t owner_;
  std::string path_;
};

}  // namespace tf::testing
