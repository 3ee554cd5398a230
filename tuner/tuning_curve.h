// Tuning curves: the best-so-far speed of each tuning run against the number of configs it
// had measured, the picture users compare runs and strategies with.
//
// Promises: one curve per run of the workload (records of no run form one curve), points in
// measuring order, one point per new config (a re-measurement or re-timing of a config
// already seen can lower the best but adds no trial); failed records count as trials that
// did not improve. render_png() draws them with gnuplot and says clearly when gnuplot is
// missing or fails.
#pragma once

#include <string>
#include <vector>

#include "db/records.h"

namespace tf {

struct CurvePoint {
  int trial = 0;        // configs measured so far in this run
  double config_s = 0;  // the median of this trial's config (0 when it failed)
  double best_s = 0;    // best median so far (0 while nothing ran correctly)
  double best_gflops = 0;
};

struct TuningCurve {
  std::string run;       // run uuid, or "" for records of no run
  std::string strategy;  // from the runs table, when known
  std::string target;
  std::vector<CurvePoint> points;
};

// Records in measuring order (Database::history), runs as Database::runs() lists them.
std::vector<TuningCurve> tuning_curves(const std::vector<db::MeasureRecord>& records,
                                       const std::vector<db::TuningRun>& runs);

// CSV: run,strategy,target,trial,config_s,best_s,best_gflops.
std::string curves_csv(const std::vector<TuningCurve>& curves);

// Draws the curves (best GFLOPS against trials) into a PNG at `path` with gnuplot. Throws
// UserError when gnuplot is not installed (naming the package) or fails.
void render_png(const std::vector<TuningCurve>& curves, const std::string& title, const std::string& path);

}  // namespace tf
