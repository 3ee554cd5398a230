// Errors in the compiler come in two kinds, and each has its own tool.
//
// A mistake in what the user asked for (a bad workload spec, an invalid schedule config, an
// unknown target) throws UserError, whose message names the problem and the offending value.
// The CLI catches it, prints "error: <message>" and exits with status 2.
//
// A bug in our own code trips TF_CHECK, which aborts with the file, line and a message. It is
// never used for conditions a user can cause.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tf {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

// Builds a message from any streamable values: str("extent ", n, " of ", name).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

using detail::str;

}  // namespace tf

#define TF_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) ::tf::detail::check_failed(__FILE__, __LINE__, #cond, ::tf::str(__VA_ARGS__)); \
  } while (0)
