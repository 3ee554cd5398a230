#include "tuner/tuning_curve.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "runtime/child_process.h"

namespace tf {

std::vector<TuningCurve> tuning_curves(const std::vector<db::MeasureRecord>& records,
                                       const std::vector<db::TuningRun>& runs) {
  std::map<std::string, const db::TuningRun*> by_uuid;
  for (const db::TuningRun& r : runs) by_uuid[r.uuid] = &r;
  std::vector<TuningCurve> out;
  std::map<std::string, size_t> at;  // run -> index in out
  std::map<std::string, std::set<std::string>> seen;
  for (const db::MeasureRecord& r : records) {
    auto [it, fresh] = at.try_emplace(r.run_uuid, out.size());
    if (fresh) {
      TuningCurve c;
      c.run = r.run_uuid;
      auto run = by_uuid.find(r.run_uuid);
      if (run != by_uuid.end()) c.strategy = run->second->strategy;
      c.target = r.target;
      out.push_back(std::move(c));
    }
    TuningCurve& c = out[it->second];
    CurvePoint p = c.points.empty() ? CurvePoint{} : c.points.back();
    const double cost = r.cost_s();
    const bool ok = std::isfinite(cost) && cost > 0;
    if (ok && (p.best_s == 0 || cost < p.best_s)) {
      p.best_s = cost;
      p.best_gflops = static_cast<double>(r.flops) / p.best_s / 1e9;
    }
    if (seen[r.run_uuid].insert(r.config_hash()).second) {
      ++p.trial;
      p.config_s = ok ? cost : 0;
      c.points.push_back(p);
    } else if (!c.points.empty()) {
      c.points.back() = p;
    }
  }
  return out;
}

std::string curves_csv(const std::vector<TuningCurve>& curves) {
  std::ostringstream o;
  o.precision(9);
  o << "run,strategy,target,trial,config_s,best_s,best_gflops\n";
  for (const TuningCurve& c : curves) {
    for (const CurvePoint& p : c.points) {
      o << c.run << "," << c.strategy << ",\"" << c.target << "\"," << p.trial << "," << p.config_s << "," << p.best_s << ","
        << p.best_gflops << "\n";
    }
  }
  return o.str();
}

namespace {

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string p = dir + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A gnuplot string literal: double quotes, with backslashes and quotes escaped.
std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') q += '\\';
    if (ch == '\n' || ch == '\r') ch = ' ';
    q += ch;
  }
  return q + "\"";
}

}  // namespace

void render_png(const std::vector<TuningCurve>& curves, const std::string& title, const std::string& path) {
  if (curves.empty()) throw UserError(str("no tuning runs to draw into ", path));
  std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    throw UserError("gnuplot is not installed (Debian package gnuplot-nox); use --csv for the data instead");
  }
  std::ostringstream s;
  s << "set terminal pngcairo size 1000,640 noenhanced\n"
    << "set output " << quoted(path) << "\n"
    << "set title " << quoted(title) << "\n"
    << "set xlabel \"configs measured\"\nset ylabel \"best GFLOPS so far\"\n"
    << "set key bottom right\nset grid\n";
  s << "plot ";
  for (size_t i = 0; i < curves.size(); ++i) {
    std::string label = (curves[i].strategy.empty() ? std::string("?") : curves[i].strategy) + " " +
                        (curves[i].run.empty() ? std::string("(no run)") : curves[i].run.substr(0, 8));
    s << (i ? ", " : "") << "'-' using 1:2 with steps linewidth 2 title " << quoted(label);
  }
  s << "\n";
  for (const TuningCurve& c : curves) {
    for (const CurvePoint& p : c.points) s << p.trial << " " << p.best_gflops << "\n";
    s << "e\n";
  }
  ChildResult r = run_child({gnuplot}, s.str(), 60);
  if (!r.started) throw UserError(str("cannot run gnuplot: ", r.err));
  if (r.timed_out || r.exit_status != 0 || !std::filesystem::exists(path)) {
    throw UserError(str("gnuplot could not draw ", path, " (exit ", r.exit_status, r.signal ? str(", signal ", r.signal) : "",
                        ")"));
  }
}

}  // namespace tf
