#include "base/error.h"

#include <cstdio>
#include <cstdlib>

namespace tf::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "internal error at %s:%d: check '%s' failed: %s\n", file, line, cond,
               msg.c_str());
  std::abort();
}

}  // namespace tf::detail
