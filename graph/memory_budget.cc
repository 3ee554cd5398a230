#include "graph/memory_budget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "base/error.h"
#include "graph/pass.h"

namespace tf::graph {

namespace {

// The cgroup (v2) memory limit of this process, or INT64_MAX.
int64_t cgroup_limit() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return INT64_MAX;
  std::ifstream f("/sys/fs/cgroup" + path + "/memory.max");
  std::string v;
  if (!(f >> v) || v == "max") return INT64_MAX;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return INT64_MAX;
  }
}

// a + b, saturating at INT64_MAX.
int64_t add_bytes(int64_t a, int64_t b) { return b > INT64_MAX - a ? INT64_MAX : a + b; }

int64_t resource_limit(int which) {
  struct rlimit r{};
  if (getrlimit(which, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return INT64_MAX;
  return static_cast<int64_t>(std::min<rlim_t>(r.rlim_cur, INT64_MAX));
}

}  // namespace

int64_t default_memory_budget() {
  int64_t physical = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  if (physical <= 0) physical = int64_t{4} << 30;
  int64_t usable = std::min({physical, cgroup_limit(), resource_limit(RLIMIT_AS), resource_limit(RLIMIT_DATA)});
  return std::max<int64_t>(usable / 4, int64_t{1} << 20);
}

int64_t parse_memory_size(const std::string& flag, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return UserError(str(flag, " '", text, "': ", why,
                         " (bytes, or a number with K, M, G or T: 512M, 8G)"));
  };
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw bad("not a size");
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  static const std::map<std::string, double> units = {
      {"", 1}, {"B", 1}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0}};
  auto u = units.find(unit);
  if (u == units.end()) throw bad("unknown unit");
  double bytes = value * u->second;
  if (!std::isfinite(bytes) || bytes < 1) throw bad("not a positive size");
  if (bytes >= 9.2e18) throw bad("too large");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return str(bytes, " bytes");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

int64_t tensor_bytes(DType dtype, const Shape& shape) {
  int64_t n = dtype == DType::F32 ? 4 : dtype == DType::U8 ? 1 : is_storage16(dtype) ? 2 : 8;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  }
  return n;
}

void check_tensor_budget(const std::string& what, DType dtype, const Shape& shape, int64_t budget) {
  int64_t bytes = tensor_bytes(dtype, shape);
  if (bytes <= budget) return;
  throw UserError(str(what, " ", dtype_name(dtype), " ", shape_str(shape), " is ",
                      bytes == INT64_MAX ? std::string("over 8 EiB") : format_bytes(bytes),
                      ", over the memory budget of ", format_bytes(budget),
                      " (--max-memory; by default a quarter of this machine's memory)"));
}

void check_input_budgets(const Graph& g, int64_t budget) {
  for (const std::string& name : g.inputs) {
    check_tensor_budget(str("input '", name, "'"), g.value(name).dtype, g.value(name).shape, budget);
  }
}

void check_output_budgets(const Graph& g, const Node& n, int64_t budget) {
  for (const std::string& o : n.outputs) {
    if (o.empty()) continue;
    check_tensor_budget(str("node '", n.name, "' (", n.op, "): output '", o, "'"), g.value(o).dtype,
                        g.value(o).shape, budget);
  }
}

void check_run_budget(const std::string& holds, int64_t workspace, const std::vector<int64_t>& tensor_bytes,
                      int64_t budget) {
  int64_t total = workspace;
  for (int64_t b : tensor_bytes) total = add_bytes(total, b);
  if (total <= budget) return;
  throw UserError(str(holds, " ", format_bytes(total), " (inputs, outputs and a workspace of ", format_bytes(workspace),
                      "), over the memory budget of ", format_bytes(budget), " (--max-memory)"));
}

void check_reference_memory(const Graph& g, int64_t budget) {
  // The index of each computed value's last reader (graph outputs live to the end).
  const std::map<std::string, size_t> last_use = last_readers(g);
  std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  auto bytes_of = [&](const std::string& name) {
    const Value& v = g.value(name);
    return tensor_bytes(v.dtype, v.shape);
  };
  check_input_budgets(g, budget);
  int64_t live = 0;
  for (const std::string& name : g.inputs) live = add_bytes(live, bytes_of(name));  // held by the caller throughout
  if (live > budget) {
    throw UserError(str("the model's inputs take ", format_bytes(live), ", over the memory budget of ",
                        format_bytes(budget), " (--max-memory)"));
  }
  std::multimap<size_t, int64_t> frees;  // after node k, these bytes go
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    check_output_budgets(g, n, budget);
    for (const std::string& o : n.outputs) {
      if (o.empty()) continue;
      int64_t bytes = bytes_of(o);
      live = add_bytes(live, bytes);
      auto it = last_use.find(o);
      if (!outputs.count(o)) frees.insert({it == last_use.end() ? k : it->second, bytes});
    }
    if (live > budget) {
      throw UserError(str("node '", n.name, "' (", n.op, "): the reference evaluation would hold ", format_bytes(live),
                          " of tensors at once there, over the memory budget of ", format_bytes(budget),
                          " (--max-memory)"));
    }
    auto [lo, hi] = frees.equal_range(k);
    for (auto it = lo; it != hi; ++it) live -= it->second;
    frees.erase(lo, hi);
  }
}

}  // namespace tf::graph
