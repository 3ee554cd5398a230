#include "cli/query_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <filesystem>
#include <iostream>

#include "base/error.h"
#include "base/file_io.h"
#include "db/database.h"
#include "db/jsonl.h"
#include "db/query_json.h"
#include "cli/common.h"
#include "service/service_client.h"
#include "tuner/tuning_curve.h"
#include "tuner/tuning_records.h"

namespace tf::cli {

namespace {

using json = nlohmann::json;

// Aligned columns for people.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print() const {
    std::vector<size_t> width(rows_[0].size(), 0);
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
      }
      std::printf("%s\n", line.c_str());
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string median_ms(const db::MeasureRecord& r) {
  auto m = r.median_s();
  return m && r.error_code == "ok" ? fmt("%.4f", *m * 1e3) : "-";
}

std::string gflops(const db::MeasureRecord& r) {
  auto m = r.median_s();
  return m && r.error_code == "ok" ? fmt("%.2f", double(r.flops) / *m * 1e-9) : "-";
}

// A target as tables show it: without the -mattr feature list (--json keeps it whole).
std::string short_target(const std::string& t) {
  size_t at = t.find(" -mattr=");
  if (at == std::string::npos) return t;
  size_t end = t.find(' ', at + 1);
  return t.substr(0, at) + (end == std::string::npos ? "" : t.substr(end));
}

void print_records(const std::vector<db::MeasureRecord>& rs, bool as_json) {
  if (as_json) {
    json a = json::array();
    for (const auto& r : rs) a.push_back(db::record_query_json(r));
    std::printf("%s\n", a.dump(2).c_str());
    return;
  }
  Table t({"id", "measured (UTC)", "workload", "target", "median ms", "GFLOPS", "status", "config"});
  for (const auto& r : rs) {
    t.add({std::to_string(r.id), utc_time(r.measured_at), r.workload, short_target(r.target), median_ms(r), gflops(r),
           r.error_code == "ok" ? r.correctness : r.error_code, r.config.dump()});
  }
  t.print();
  if (rs.empty()) std::printf("(no records)\n");
}


int query_best(db::Database& db, const QueryArgs& a) {
  if (a.workload.empty()) {
    print_records(db.best_per_pair(), a.json);
    return 0;
  }
  Workload w = parse_workload(a.workload);
  Target t = parse_target(a.target.empty() ? "llvm -mcpu=native" : a.target);
  db::BestResult b = db.best(lookup_key(w, t));
  if (a.json) {
    std::printf("%s\n", db::best_json(w.canonical(), t.str(), b).dump(2).c_str());
    return 0;
  }
  std::printf("workload  %s\ntarget    %s\ntier      %s\n", w.canonical().c_str(), t.str().c_str(),
              db::tier_name(b.tier));
  if (b.tier == db::MatchTier::None) {
    std::printf("no tuned config: compiles use the default schedule\n");
    return 0;
  }
  if (b.tier != db::MatchTier::Exact) {
    std::printf("from      %s on %s", b.record.workload.c_str(), b.record.target.c_str());
    if (b.tier == db::MatchTier::NearestShape) std::printf(" (shape distance %.3f)", b.distance);
    std::printf("\n");
  }
  std::printf("config    %s\nmedian    %s ms (median of the medians of %lld measurement%s)\nspeed     %s GFLOPS\n"
              "record    %lld, measured %s UTC\n",
              b.record.config.dump().c_str(), median_ms(b.record).c_str(), static_cast<long long>(b.measurements),
              b.measurements == 1 ? "" : "s", gflops(b.record).c_str(), static_cast<long long>(b.record.id),
              utc_time(b.record.measured_at).c_str());
  return 0;
}

int query_stats(db::Database& db, const QueryArgs& a) {
  db::Stats s = db.stats();
  if (a.json) {
    json pairs = json::array();
    for (const auto& p : s.per_pair) {
      pairs.push_back({{"workload", p.workload}, {"target", p.target}, {"records", p.records}, {"ok", p.ok}});
    }
    std::printf("%s\n", json{{"records", s.records}, {"workloads", s.workloads}, {"targets", s.targets},
                              {"runs", s.runs}, {"per_pair", pairs}, {"errors", s.errors},
                              {"per_run", s.per_run}, {"file_bytes", s.file_bytes}}
                            .dump(2)
                            .c_str());
    return 0;
  }
  std::printf("records %lld, workloads %lld, targets %lld, runs %lld, file %.1f KiB\n\n",
              static_cast<long long>(s.records), static_cast<long long>(s.workloads),
              static_cast<long long>(s.targets), static_cast<long long>(s.runs), s.file_bytes / 1024.0);
  Table pairs({"workload", "target", "records", "ok"});
  for (const auto& p : s.per_pair) pairs.add({p.workload, short_target(p.target), std::to_string(p.records), std::to_string(p.ok)});
  pairs.print();
  std::printf("\n");
  Table errors({"error code", "records"});
  for (const auto& [code, n] : s.errors) errors.add({code, std::to_string(n)});
  errors.print();
  std::printf("\n");
  Table runs({"run", "records"});
  for (const auto& [run, n] : s.per_run) runs.add({run.empty() ? "(none)" : run, std::to_string(n)});
  runs.print();
  return 0;
}

int query_runs(db::Database& db, const QueryArgs& a) {
  std::vector<db::TuningRun> runs = db.runs();
  if (a.json) {
    json arr = json::array();
    for (const auto& r : runs) arr.push_back(db::run_json(r));
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  Table t({"run", "status", "started (UTC)", "user", "host", "strategy", "records/budget", "workload"});
  for (const auto& r : runs) {
    t.add({r.uuid, r.status, utc_time(r.started_at), r.user, r.host, r.strategy,
           std::to_string(r.records) + "/" + std::to_string(r.budget), r.workload});
  }
  t.print();
  if (runs.empty()) std::printf("(no runs)\n");
  return 0;
}

// What tuning bought whole models (tune --model --local), newest first; --target filters.
int query_models(db::Database& db, const QueryArgs& a) {
  std::vector<db::ModelResult> models;
  for (db::ModelResult& m : db.model_results()) {
    if (a.target.empty() || m.target == a.target) models.push_back(std::move(m));
  }
  auto ratio = [](double num, double den) { return den > 0 ? num / den : 0.0; };
  if (a.json) {
    json arr = json::array();
    for (const db::ModelResult& m : models) arr.push_back(db::model_result_json(m));
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  Table t({"model", "sha256", "target", "board", "tuned ms", "default ms", "speedup", "estimate ms", "kernels tuned",
           "measured (UTC)"});
  char buf[4][32];
  for (const db::ModelResult& m : models) {
    std::snprintf(buf[0], sizeof buf[0], "%.3f", m.tuned_s * 1e3);
    std::snprintf(buf[1], sizeof buf[1], "%.3f", m.default_s * 1e3);
    std::snprintf(buf[2], sizeof buf[2], "%.2fx", ratio(m.default_s, m.tuned_s));
    std::snprintf(buf[3], sizeof buf[3], "%.3f", m.estimate_s * 1e3);
    t.add({m.model, m.model_hash.substr(0, 12), m.target, m.device_key, buf[0], buf[1], buf[2],
           m.estimate_s > 0 ? buf[3] : "-", std::to_string(m.tuned_kernels) + "/" + std::to_string(m.tunable_kernels),
           utc_time(m.measured_at)});
  }
  t.print();
  if (models.empty()) std::printf("(no models: tune --model M.onnx --local records one)\n");
  return 0;
}

int query_export(db::Database& db, const QueryArgs& a) {
  db::HistoryFilter f{canonical_workload(a.workload), canonical_target(a.target), 0};
  // The service's verdicts stay with it (its own lookups use them): export its records.
  const bool verdicts = !a.server.given();
  if (!verdicts) std::fprintf(stderr, "note: verdicts are not exported over --server; records are\n");
  if (a.file == "-") {
    db::export_jsonl(db, f, std::cout, verdicts);
    return 0;
  }
  // Written under a temporary name and renamed: a failed export leaves neither a half file
  // nor the temporary.
  AtomicFile file(a.file);
  std::ofstream out(file.temp_path());
  if (!out) throw db::DbError("export: cannot write " + a.file);
  db::ExportResult n = db::export_jsonl(db, f, out, verdicts);
  out.close();
  if (!out) throw db::DbError("export: cannot write " + a.file);
  try {
    file.commit();
  } catch (const std::runtime_error&) {
    throw db::DbError("export: cannot write " + a.file);
  }
  std::fprintf(stderr, "exported %lld records and %lld verdicts to %s\n", static_cast<long long>(n.records),
               static_cast<long long>(n.verdicts), a.file.c_str());
  return 0;
}

int query_import(db::Database& db, const QueryArgs& a) {
  db::ImportResult r;
  if (a.file == "-") {
    r = db::import_jsonl(db, std::cin);
  } else {
    if (std::filesystem::is_directory(a.file)) throw UserError("import: " + a.file + " is a directory");
    std::ifstream in(a.file);
    if (!in) throw UserError("import: cannot read " + a.file);
    r = db::import_jsonl(db, in);
  }
  for (const std::string& e : r.errors) std::fprintf(stderr, "error: %s: %s\n", a.file.c_str(), e.c_str());
  if (a.json) {
    std::printf("%s\n", json{{"lines", r.lines}, {"added", r.added}, {"verdicts", r.verdicts},
                              {"duplicates", r.duplicates}, {"rejected", r.errors.size()}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("read %lld lines: %lld added, %lld verdicts added, %lld already present, %zu rejected\n",
                static_cast<long long>(r.lines), static_cast<long long>(r.added), static_cast<long long>(r.verdicts),
                static_cast<long long>(r.duplicates), r.errors.size());
  }
  return r.errors.empty() ? 0 : 1;
}

int query_distill(db::Database& db, const QueryArgs& a) {
  db::DistillResult r = db.distill(a.keep, a.dry_run);
  if (a.json) {
    json per = json::array();
    for (const auto& p : r.removed_per_pair) per.push_back({{"workload", p.workload}, {"target", p.target}, {"removed", p.records}});
    std::printf("%s\n", json{{"dry_run", a.dry_run}, {"kept", r.kept}, {"removed", r.removed}, {"per_pair", per}}
                            .dump(2)
                            .c_str());
    return 0;
  }
  Table t({"workload", "target", a.dry_run ? "would remove" : "removed"});
  for (const auto& p : r.removed_per_pair) t.add({p.workload, short_target(p.target), std::to_string(p.records)});
  t.print();
  std::printf("%s %lld records, keeping %lld (the best %lld per workload and target)\n",
              a.dry_run ? "would remove" : "removed", static_cast<long long>(r.removed),
              static_cast<long long>(r.kept), static_cast<long long>(a.keep));
  return 0;
}

int query_curve(db::Database& db, const QueryArgs& a) {
  std::vector<TuningCurve> curves = tuning_curves(db.history({a.workload, a.target, 0}), db.runs());
  if (curves.empty()) throw UserError(str("no records of ", a.workload, a.target.empty() ? "" : " on " + a.target));
  if (a.csv) std::printf("%s", curves_csv(curves).c_str());
  if (a.json) {
    json arr = json::array();
    for (const TuningCurve& c : curves) {
      json pts = json::array();
      for (const CurvePoint& p : c.points) pts.push_back({p.trial, p.config_s, p.best_s, p.best_gflops});
      arr.push_back({{"run", c.run}, {"strategy", c.strategy}, {"target", c.target}, {"points", pts}});
    }
    std::printf("%s\n", arr.dump().c_str());
  }
  if (!a.output.empty()) {
    render_png(curves, a.workload, a.output);
    std::fprintf(stderr, "wrote %s: %zu runs\n", a.output.c_str(), curves.size());
  }
  return 0;
}

// The local database a query reads (or, for import and distill, writes).
std::unique_ptr<db::Database> open_query_database(const QueryArgs& a) {
  std::string path = db::database_path(a.db);
  bool writes = a.sub == "import" || (a.sub == "distill" && !a.dry_run);
  // Queries never create or migrate a database; a missing file is an empty answer.
  if (!writes && path != ":memory:" && !std::filesystem::exists(path)) {
    throw UserError("no tuning database at " + path + " (tune or import first, or pass --db)");
  }
  return db::open_database(path, writes ? db::OpenMode::ReadWrite : db::OpenMode::ReadOnly);
}

}  // namespace

void add_query_command(CLI::App& app, QueryArgs& a) {
  CLI::App* q = app.add_subcommand("query", "Query the tuning database (tables, or --json)");
  q->require_subcommand(1);
  auto common = [&](CLI::App* s, bool filters) {
    s->add_option("--db", a.db, "database file (default: $TUNEFARM_DB, else ~/.local/share/tunefarm/tuning.db)");
    if (filters) {
      s->add_option("--workload,-w", a.workload, "only this workload");
      s->add_option("--target,-t", a.target, "only this target");
    }
    s->add_flag("--json", a.json, "print JSON");
    if (s->get_name() != "import" && s->get_name() != "distill") add_server_options(s, a.server, true);
    s->callback([&a, s] { a.sub = s->get_name(); });
  };
  CLI::App* best = q->add_subcommand("best", "Best config per workload and target; with --workload, the lookup a compile would do (target default: this machine)");
  common(best, true);
  CLI::App* top = q->add_subcommand("top", "The fastest records");
  common(top, true);
  top->add_option("-k", a.k, "how many")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  CLI::App* hist = q->add_subcommand("history", "Records in time order (the data of a tuning curve)");
  common(hist, true);
  hist->add_option("--limit", a.limit, "at most this many (0: all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  CLI::App* curve = q->add_subcommand("curve", "Best GFLOPS so far against configs measured, per tuning run of a workload "
                                               "(PNG through gnuplot, or --csv / --json)");
  common(curve, true);
  curve->add_option("-o,--output", a.output, "PNG file to draw");
  curve->add_flag("--csv", a.csv, "print the curves as CSV (run,strategy,target,trial,config_s,best_s,best_gflops)");
  common(q->add_subcommand("stats", "Counts per workload and target, per run, per error code; file size"), false);
  common(q->add_subcommand("runs", "Tuning runs and their status"), false);
  CLI::App* models = q->add_subcommand("models", "What tuning bought whole models (tune --model --local): the tuned "
                                                 "and default builds' latencies, timed side by side");
  common(models, false);
  models->add_option("--target,-t", a.target, "only this target");
  CLI::App* exp = q->add_subcommand("export", "Write records as JSON lines (FILE, or - for stdout)");
  common(exp, true);
  exp->add_option("file", a.file, "output file")->required();
  CLI::App* imp = q->add_subcommand("import", "Add records from a JSON lines file, or - for stdin (idempotent)");
  common(imp, false);
  imp->add_option("file", a.file, "input file, or - for stdin")->required();
  CLI::App* dist = q->add_subcommand("distill", "Keep only the best N records per workload and target");
  common(dist, false);
  dist->add_option("--keep", a.keep, "records to keep per workload and target")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  dist->add_flag("--dry-run", a.dry_run, "only say what would be removed");
}

int run_query_impl(const QueryArgs& a);

int run_query(const QueryArgs& a) {
  try {
    return run_query_impl(a);
  } catch (const farm::FarmError& e) {
    return farm_error_exit(e);
  }
}

int run_query_impl(const QueryArgs& a) {
  if (a.sub == "curve") {
    if (a.workload.empty()) throw UserError("query curve needs --workload W");
    if (a.output.empty() && !a.csv && !a.json) throw UserError("query curve needs -o FILE.png, --csv or --json");
  }
  std::unique_ptr<db::Database> db;
  if (a.server.given()) {
    if (!a.db.empty()) throw UserError("--db and --server exclude each other: a local file, or the tuning service's");
    db = open_remote_database(service_endpoint(a.server));
  } else {
    db = open_query_database(a);
  }
  QueryArgs args = a;
  if (a.sub != "best") {
    args.workload = canonical_workload(a.workload);
    args.target = canonical_target(a.target);
  }
  if (a.sub == "best") return query_best(*db, args);
  if (a.sub == "top") {
    print_records(db->top_k(args.workload, args.target, a.k), a.json);
    return 0;
  }
  if (a.sub == "history") {
    print_records(db->history({args.workload, args.target, a.limit}), a.json);
    return 0;
  }
  if (a.sub == "curve") return query_curve(*db, args);
  if (a.sub == "stats") return query_stats(*db, args);
  if (a.sub == "runs") return query_runs(*db, args);
  if (a.sub == "models") return query_models(*db, args);
  if (a.sub == "export") return query_export(*db, args);
  if (a.sub == "import") return query_import(*db, args);
  return query_distill(*db, args);
}

}  // namespace tf::cli
