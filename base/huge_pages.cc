#include "base/huge_pages.h"

#include <sys/auxv.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tf {

namespace {

// Set in the re-executed process's environment: "=" + the caller's GLIBC_TUNABLES, or "-" where
// the caller had none.
constexpr const char* kCallerTunables = "TUNEFARM_CALLER_GLIBC_TUNABLES";
constexpr const char* kTunable = "glibc.malloc.hugetlb";

[[maybe_unused]] void restore(const char* saved) {  // unused in sanitizer builds
  if (saved[0] == '=') {
    setenv("GLIBC_TUNABLES", saved + 1, 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
  unsetenv(kCallerTunables);
}

}  // namespace

void use_huge_page_malloc(char** argv, bool wanted) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)argv;
  (void)wanted;
  return;
#else
  if (const char* saved = std::getenv(kCallerTunables)) {
    restore(std::string(saved).c_str());
    return;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!wanted || (tunables && std::strstr(tunables, kTunable))) return;
  // Started by naming the dynamic loader (ld-linux-x86-64.so.2 ./tunefarm ...): /proc/self/exe
  // is the loader, which the kernel ran without an interpreter (no AT_BASE).
  if (getauxval(AT_BASE) == 0) return;
  const std::string caller = tunables ? std::string("=") + tunables : std::string("-");
  const std::string updated = (tunables && *tunables ? std::string(tunables) + ":" : std::string()) + kTunable + "=1";
  setenv(kCallerTunables, caller.c_str(), 1);
  setenv("GLIBC_TUNABLES", updated.c_str(), 1);
  execv("/proc/self/exe", argv);
  restore(caller.c_str());  // not re-executed (no /proc): on as before
#endif
}

}  // namespace tf
