#include "tuner/cli/model_command.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "compiler/error.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"
#include "graph/tasks.h"

namespace tf::cli {

using nlohmann::json;

void add_import_command(CLI::App& app, ImportArgs& a) {
  a.cmd = app.add_subcommand("import", "Import an ONNX model: its graph after the graph passes and the tunable tasks");
  a.cmd->add_option("model", a.model, "the .onnx file");
  a.cmd->add_option("--opt-level,-O", a.opt_level, "graph optimisation level, 0 to 3")->capture_default_str();
  a.cmd->add_option("--disable-pass", a.disable, "do not run this graph pass (repeatable)");
  a.cmd->add_option("--dump-pass", a.dump, "print the graph after this pass to stderr, or 'all' (repeatable)");
  a.cmd->add_flag("--list-passes", a.list_passes, "list the graph passes and exit");
  a.cmd->add_flag("--json", a.json, "print JSON");
}

int run_import(const ImportArgs& a) {
  using namespace graph;  // NOLINT
  if (a.list_passes) {
    for (const PassInfo& p : graph_passes()) std::printf("%-32s O%d  %s\n", p.name, p.opt_level, p.help);
    return 0;
  }
  if (a.model.empty()) throw UserError("import: name the .onnx model file");
  Graph g = import_onnx(a.model);
  GraphStats imported = graph_stats(g);
  size_t nodes_imported = g.nodes.size();
  PassOptions opts;
  opts.opt_level = a.opt_level;
  opts.disabled = {a.disable.begin(), a.disable.end()};
  opts.dump = {a.dump.begin(), a.dump.end()};
  opts.dump_sink = [](const std::string& pass, const Graph& gr) {
    std::fprintf(stderr, "// after %s\n%s", pass.c_str(), graph_to_text(gr).c_str());
  };
  std::vector<PassReport> reports = run_passes(g, opts);
  GraphStats after = graph_stats(g);
  TaskList tasks = extract_tasks(g);

  auto tensors = [&](const std::vector<std::string>& names) {
    json out = json::array();
    for (const std::string& n : names) {
      const Value& v = g.value(n);
      out.push_back({{"name", n}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape}});
    }
    return out;
  };
  json j = {{"model", a.model}, {"graph", g.name}, {"opset", g.opset}, {"inputs", tensors(g.inputs)},
            {"outputs", tensors(g.outputs)}, {"parameters", after.parameters},
            {"constant_bytes", after.constant_bytes}, {"nodes_imported", nodes_imported},
            {"nodes", g.nodes.size()}, {"ops_imported", imported.ops}, {"ops", after.ops}};
  j["passes"] = json::array();
  for (const PassReport& r : reports) {
    j["passes"].push_back({{"name", r.name}, {"ran", r.ran}, {"fired", r.changed}, {"ms", r.ms}, {"nodes_after", r.nodes_after}});
  }
  j["tasks"] = json::array();
  for (const Task& t : tasks.tasks) {
    j["tasks"].push_back({{"workload", t.workload}, {"count", t.nodes.size()}, {"flops", t.flops}, {"nodes", t.nodes}});
  }
  j["untunable"] = json::array();
  for (const Untunable& u : tasks.untunable) j["untunable"].push_back({{"node", u.node}, {"op", u.op}, {"reason", u.reason}});
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model     %s (graph '%s', opset %lld)\n", a.model.c_str(), g.name.c_str(), static_cast<long long>(g.opset));
  for (const char* side : {"inputs", "outputs"}) {
    for (const json& t : j[side]) {
      std::printf("%-9s %s %s %s\n", side == std::string("inputs") ? "input" : "output", t["name"].get<std::string>().c_str(),
                  t["dtype"].get<std::string>().c_str(), shape_str(t["shape"].get<Shape>()).c_str());
    }
  }
  std::printf("params    %lld floats (%.1f MB of constants)\n", static_cast<long long>(after.parameters),
              static_cast<double>(after.constant_bytes) / 1e6);
  std::printf("nodes     %zu imported, %zu after passes\n", nodes_imported, g.nodes.size());
  std::string ops;
  for (const auto& [op, n] : after.ops) ops += str(ops.empty() ? "" : ", ", op, " x", n);
  std::printf("ops       %s\n", ops.empty() ? "(none)" : ops.c_str());
  std::printf("\npasses (-O%d)\n", a.opt_level);
  for (const PassReport& r : reports) {
    std::printf("  %-32s %s\n", r.name.c_str(),
                !r.ran ? "skipped" : str(r.changed ? "fired " : "nothing", "  ", r.nodes_after, " nodes  ",
                                         static_cast<int>(r.ms * 1000) / 1000.0, " ms").c_str());
  }
  std::printf("\ntasks (%zu distinct)\n", tasks.tasks.size());
  for (const Task& t : tasks.tasks) {
    std::printf("  %3zu x %-90s %.3g GFLOP\n", t.nodes.size(), t.workload.c_str(), static_cast<double>(t.flops) / 1e9);
  }
  for (const Untunable& u : tasks.untunable) {
    std::printf("  not tunable: node '%s' (%s): %s\n", u.node.c_str(), u.op.c_str(), u.reason.c_str());
  }
  return 0;
}

}  // namespace tf::cli
