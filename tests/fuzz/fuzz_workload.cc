// Fuzzes workload specs and target strings: the first line is a workload, the rest a target.
// A spec is either refused with UserError or builds its operator graph; nothing else (no
// crash, no other exception, no overflow caught by UBSan) is acceptable.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/target.h"
#include "compiler/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  size_t nl = text.find('\n');
  std::string spec = text.substr(0, nl), target = nl == std::string::npos ? "" : text.substr(nl + 1);
  try {
    tf::Workload w = tf::parse_workload(spec);
    tf::OpGraph g = tf::build_op(w);
    if (g.flops < 0) __builtin_trap();
    if (tf::parse_workload(w.canonical()).canonical() != w.canonical()) __builtin_trap();
  } catch (const tf::UserError&) {
  }
  if (!target.empty()) {
    try {
      tf::Target t = tf::parse_target(target);
      (void)t.vector_lanes();
    } catch (const tf::UserError&) {
    }
  }
  return 0;
}
