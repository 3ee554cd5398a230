#include "tuner/tune.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/enum_names.h"
#include "base/file_io.h"
#include "base/hash.h"
#include "tuner/tuning_records.h"

namespace tf {

namespace {
constexpr EnumName<StopReason> kStopReasons[] = {
    {StopReason::None, ""},           {StopReason::Trials, "trials"},       {StopReason::TimeBudget, "time-budget"},
    {StopReason::EarlyStop, "early-stop"}, {StopReason::Exhausted, "exhausted"}, {StopReason::Interrupted, "interrupted"}};
}  // namespace

const char* stop_reason_name(StopReason r) { return enum_name(kStopReasons, r); }

StopReason parse_stop_reason(const std::string& text) {
  return enum_from_name(kStopReasons, text).value_or(StopReason::None);
}

namespace pb = tunefarm::v1;
using db::combined_cost;
using json = nlohmann::json;

bool disturbed(const std::vector<double>& s, double max_spread) {
  if (s.size() < 2) return false;
  auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  double med = db::median_of(s);
  return med > 0 && (*hi - *lo) / med > max_spread;
}

CommitRecords::CommitRecords(db::Database* db, const ConfigSpace& space, std::string device_key, std::string run_uuid,
                             MeasureOptions o)
    : db_(db), space_(space), device_key_(std::move(device_key)), run_uuid_(std::move(run_uuid)), opts_(o) {}

void CommitRecords::on_results(const TuneState&, const std::vector<Trial>& trials) {
  if (!db_) return;
  std::vector<db::MeasureRecord> recs;
  for (const Trial& t : trials) {
    if (t.lost() || t.same_code_as) continue;  // nothing was measured
    CandidateInfo c{space_.target().str(), space_.template_id(), t.config, t.build.compile_s, device_key_, run_uuid_};
    recs.push_back(make_record(space_.graph(), c, t.result, opts_));
  }
  if (!recs.empty()) committed_ += db_->commit(recs);
}

namespace {

double cost_of(const RunResult& r) { return r.ok() ? r.median_s() : std::numeric_limits<double>::infinity(); }

// Runs `side` (when given) on a thread of its own while `main` runs on this one, and returns
// once both have ended, rethrowing main's exception, else side's.
void beside(const std::function<void()>& side, const std::function<void()>& main) {
  std::exception_ptr side_error;
  std::thread t;
  if (side) {
    t = std::thread([&] {
      try {
        side();
      } catch (...) {
        side_error = std::current_exception();
      }
    });
  }
  try {
    main();
  } catch (...) {
    if (t.joinable()) t.join();
    throw;
  }
  if (t.joinable()) t.join();
  if (side_error) std::rethrow_exception(side_error);
}

// The median over the rounds of config k's time over config d's (0 when no round timed both).
double paired_ratio(const std::vector<std::vector<double>>& rounds, size_t k, size_t d) {
  std::vector<double> ratios;
  for (const std::vector<double>& row : rounds) {
    if (std::isfinite(row[k]) && std::isfinite(row[d]) && row[d] > 0) ratios.push_back(row[k] / row[d]);
  }
  return ratios.empty() ? 0 : db::median_of(ratios);
}

// What a build runs, as a digest: its library's bytes (the PTX of a CUDA kernel, whose cubin is
// made from it) and its description less the config that asked for it (launch, arguments);
// "" for a failed build or an unreadable library.
std::string code_digest(const BuildResult& b) {
  if (!b.ok() || b.so_path.empty()) return "";
  std::string code;
  try {
    code = read_file(b.so_path);
  } catch (const std::exception&) {
    return "";
  }
  json sidecar = read_sidecar_json(b.so_path);
  if (sidecar.is_object()) {
    for (const char* k : {"config", "config_source", "tuned_from"}) sidecar.erase(k);
  }
  return sha256_hex(code) + sha256_hex(sidecar.dump());
}

// The records of earlier runs for this space: per index, the medians of its correct
// measurements, or a failure.
std::map<uint64_t, std::vector<double>> earlier_results(db::Database* db, const ConfigSpace& space) {
  std::map<uint64_t, std::vector<double>> out;
  if (!db) return out;
  db::HistoryFilter f;
  f.workload = space.workload().canonical();
  f.target = space.target().str();
  for (const db::MeasureRecord& r : db->history(f)) {
    if (r.template_name != space.template_id()) continue;
    std::optional<uint64_t> i = space.index_of(r.config);
    if (!i) continue;
    if (r.error_code != "board_lost") out[*i].push_back(r.cost_s());
  }
  return out;
}

}  // namespace

TuneLoop::TuneLoop(const ConfigSpace& space, SearchStrategy& strategy, Builder& builder, Runner& runner,
                   db::Database* db, const TuneOptions& opts, std::vector<MeasureCallback*> callbacks,
                   const std::atomic<bool>* stop)
    : space_(space),
      strategy_(strategy),
      builder_(builder),
      runner_(runner),
      opts_(opts),
      db_(db),
      callbacks_(std::move(callbacks)),
      stop_(stop),
      start_(steady_seconds()),
      ctx_(std::make_unique<MeasureContext>(space.graph(), opts.measure)) {
  // The search compares hundreds of candidates timed alike: it skips the warm-up, which only
  // the re-timing of the best pays (TuneOptions::retime_warmup_ms).
  ctx_->set_min_warmup_ms(0);
  TuneState& st = sum_.state;
  st.space = &space;
  st.trials_total = opts.trials;
  medians_ = earlier_results(db, space);
  // Resume: what the database knows feeds the strategy and the best so far.
  std::vector<Observation> prior;
  for (const auto& [i, v] : medians_) {
    double c = combined_cost(v);
    prior.push_back({i, c});
    if (c < st.best_s) {
      st.best_s = c;
      st.best_config = space.to_config(i);
    }
  }
  st.known = static_cast<int>(prior.size());
  strategy.observe(prior);
  default_ = space.default_index();
  // The template's corners of the space first (those the space prunes are skipped).
  seed(space.template_seeds());
}

TuneLoop::~TuneLoop() = default;

bool TuneLoop::stopped() const { return stop_ && stop_->load(); }

void TuneLoop::notify(const std::vector<Trial>& trials) {
  sum_.state.elapsed_s = steady_seconds() - start_;
  for (MeasureCallback* cb : callbacks_) cb->on_results(sum_.state, trials);
}

void TuneLoop::add_parts(const RunResult& r) {
  ++sum_.state.measured;
  sum_.state.upload_s += r.upload_s;
  sum_.state.load_s += r.load_s;
  sum_.state.run_s += r.run_s;
  sum_.state.cubin_loads += r.cubin ? 1 : 0;
}

std::vector<BuildResult> TuneLoop::timed_build(const std::vector<json>& configs, Interval* took) {
  Interval t{steady_seconds(), 0};
  std::vector<BuildResult> b = builder_.build(space_.workload(), space_.target(), configs);
  t.end = steady_seconds();
  sum_.state.build_s += t.end - t.start;
  if (took) *took = t;
  return b;
}

std::vector<RunResult> TuneLoop::timed_run(const std::vector<BuildResult>& builds, Interval* took) {
  Interval t{steady_seconds(), 0};
  std::vector<RunResult> r = runner_.run(*ctx_, builds);
  t.end = steady_seconds();
  sum_.state.measure_s += t.end - t.start;
  for (const RunResult& one : r) add_parts(one);
  if (took) *took = t;
  return r;
}

std::vector<RunResult> TuneLoop::run_new_code(const std::vector<BuildResult>& builds,
                                              std::vector<std::optional<uint64_t>>& same_code, Interval* took) {
  std::vector<RunResult> out(builds.size());
  same_code.assign(builds.size(), std::nullopt);
  std::vector<BuildResult> todo;
  std::vector<size_t> todo_at;
  std::map<std::string, size_t> here;             // digest -> the position measured for it now
  std::vector<std::pair<size_t, size_t>> copies;  // (position, the position of its twin here)
  for (size_t k = 0; k < builds.size(); ++k) {
    const std::string digest = code_digest(builds[k]);
    if (!digest.empty()) {
      if (auto it = code_.find(digest); it != code_.end()) {
        same_code[k] = it->second;
        continue;
      }
      if (auto it = here.find(digest); it != here.end()) {
        copies.push_back({k, it->second});
        continue;
      }
      here[digest] = k;
    }
    todo.push_back(builds[k]);
    todo_at.push_back(k);
  }
  std::vector<RunResult> measured = timed_run(todo, took);
  for (size_t i = 0; i < todo_at.size(); ++i) out[todo_at[i]] = std::move(measured[i]);
  auto index_at = [&](size_t k) { return space_.index_of(builds[k].config); };
  for (const auto& [digest, k] : here) {
    // A lost board measured nothing: the code is measured again when it comes up again.
    if (out[k].error != pb::BOARD_LOST && index_at(k)) code_[digest] = *index_at(k);
  }
  for (const auto& [k, twin] : copies) {
    if (out[twin].error == pb::BOARD_LOST || !index_at(twin)) {
      out[k] = out[twin];  // lost with it
    } else {
      same_code[k] = *index_at(twin);
    }
  }
  return out;
}

void TuneLoop::build_and_run(const std::vector<json>& configs, std::vector<BuildResult>& builds,
                             std::vector<RunResult>& results, std::vector<std::optional<uint64_t>>& same_code) {
  const size_t n = configs.size();
  same_code.assign(n, std::nullopt);
  // A chunk keeps every builder worker and every board busy; where builds overlap
  // measurements, at most half the batch (but a chunk a board), so that a builder with more
  // workers than the batch has candidates (16 cores, batches of 8) still builds the second
  // half while the first measures.
  const bool overlap = runner_.overlaps_builds();
  const size_t boards = static_cast<size_t>(std::max(1, runner_.parallelism()));
  size_t chunk = std::max(boards, static_cast<size_t>(std::max(1, builder_.parallelism())));
  if (overlap) chunk = std::min(chunk, std::max(boards, (n + 1) / 2));
  if (!overlap || n <= chunk) {
    builds = timed_build(configs);
    results = run_new_code(builds, same_code);
    return;
  }
  // Chunk k measures while chunk k+1 builds (on another thread: one build() at a time, and
  // the builder keeps the previous batch's libraries, which are being measured).
  auto slice = [&](size_t from) {
    return std::vector<json>(configs.begin() + static_cast<std::ptrdiff_t>(from),
                             configs.begin() + static_cast<std::ptrdiff_t>(std::min(n, from + chunk)));
  };
  std::vector<BuildResult> ready = timed_build(slice(0));
  for (size_t from = 0; from < n; from += chunk) {
    std::vector<BuildResult> next;
    Interval building{0, 0}, measuring{0, 0};
    std::vector<RunResult> measured;
    std::vector<std::optional<uint64_t>> twins;
    std::function<void()> build_next;
    if (from + chunk < n) build_next = [&] { next = timed_build(slice(from + chunk), &building); };
    beside(build_next, [&] { measured = run_new_code(ready, twins, &measuring); });
    sum_.state.overlap_s +=
        std::max(0.0, std::min(measuring.end, building.end) - std::max(measuring.start, building.start));
    for (size_t k = 0; k < ready.size(); ++k) {
      builds[from + k] = std::move(ready[k]);
      results[from + k] = std::move(measured[k]);
      same_code[from + k] = twins[k];
    }
    ready = std::move(next);
  }
}

// Builds and measures `indices`; disturbed measurements are measured once more.
std::vector<Trial> TuneLoop::measure(const std::vector<uint64_t>& indices) {
  const TuneState& st = sum_.state;
  if (opts_.slow_factor > 0 && std::isfinite(st.best_s) && opts_.measure.timeout_s == 0) {
    const MeasureOptions& m = opts_.measure;
    ctx_->set_timeout_s((m.repeat + 4) * std::max(m.min_repeat_ms / 1e3, opts_.slow_factor * st.best_s) + 1);
  }
  if (opts_.cut_factor > 0 && std::isfinite(st.best_s)) ctx_->set_cut_slower_than_s(opts_.cut_factor * st.best_s);
  std::vector<json> configs;
  for (uint64_t i : indices) configs.push_back(space_.to_config(i));
  std::vector<BuildResult> builds(configs.size());
  std::vector<RunResult> results(configs.size());
  std::vector<std::optional<uint64_t>> same_code;  // sized by build_and_run
  build_and_run(configs, builds, results, same_code);
  std::vector<Trial> trials;
  std::vector<BuildResult> again;
  std::vector<size_t> again_at;
  for (size_t k = 0; k < indices.size(); ++k) {
    trials.push_back({indices[k], configs[k], builds[k], results[k], false, false, same_code[k]});
    if (same_code[k]) continue;
    // Noise only matters for contenders: a disturbed measurement is redone when it is
    // within 2x of the best so far.
    bool contender = !std::isfinite(st.best_s) || results[k].median_s() <= 2 * st.best_s;
    // A cut one whose sample says it is a contender had a disturbed warm-up.
    if (results[k].ok() && contender && (results[k].cut || disturbed(results[k].samples_s, opts_.max_spread))) {
      again.push_back(builds[k]);
      again_at.push_back(k);
    }
  }
  if (!again.empty() && !stopped()) {
    ctx_->set_cut_slower_than_s(0);
    std::vector<RunResult> redo = timed_run(again);
    for (size_t k = 0; k < redo.size(); ++k) {
      size_t at = again_at[k];
      trials.push_back({indices[at], configs[at], builds[at], redo[k], false, true, std::nullopt});
    }
  }
  return trials;
}

std::vector<Trial> TuneLoop::measure_looking_ahead(const std::vector<uint64_t>& batch) {
  TuneState& st = sum_.state;
  const int left = opts_.trials - st.trials_done - static_cast<int>(batch.size());
  const size_t want = static_cast<size_t>(std::max(0, std::min(opts_.batch, left)));
  if (!opts_.search_ahead || !runner_.overlaps_builds() || !seeds_.empty() ||
      ahead_.size() >= want || stopped())
    return measure(batch);
  std::vector<uint64_t> proposed;
  Interval proposing{0, 0};
  std::vector<Trial> trials;
  beside(
      [&] {
        proposing.start = steady_seconds();
        proposed = strategy_.propose(want - ahead_.size());
        proposing.end = steady_seconds();
      },
      [&] { trials = measure(batch); });
  st.search_ahead_s += proposing.end - proposing.start;
  ahead_.insert(ahead_.end(), proposed.begin(), proposed.end());
  return trials;
}

std::vector<uint64_t> TuneLoop::skip_measured_elsewhere(const std::vector<uint64_t>& batch) {
  if (!db_) return batch;
  const std::string workload = space_.workload().canonical(), target = space_.target().str();
  std::vector<uint64_t> keep;
  bool any = false;
  for (uint64_t i : batch) {
    if (!medians_.count(i) && db_->measured(workload, target, db::config_hash(space_.to_config(i)))) {
      any = true;
    } else {
      keep.push_back(i);
    }
  }
  if (!any) return batch;
  TuneState& st = sum_.state;
  std::map<uint64_t, std::vector<double>> now = earlier_results(db_, space_);
  std::vector<Observation> obs;
  for (uint64_t i : batch) {
    if (std::find(keep.begin(), keep.end(), i) != keep.end()) continue;
    auto it = now.find(i);
    if (it == now.end()) {  // measured, but lost or of another template: measure it here
      keep.push_back(i);
      continue;
    }
    medians_[i] = it->second;
    double c = combined_cost(it->second);
    obs.push_back({i, c});
    ++st.known;
    if (c < st.best_s) {
      st.best_s = c;
      st.best_config = space_.to_config(i);
    }
  }
  strategy_.observe(obs);
  return keep;
}

bool TuneLoop::search_over() {
  TuneState& st = sum_.state;
  if (sum_.stop_reason != StopReason::None) return true;
  if (stopped()) {
    sum_.interrupted = true;
    sum_.stop_reason = StopReason::Interrupted;
  } else if (st.trials_done >= opts_.trials) {
    sum_.stop_reason = StopReason::Trials;
  } else if (opts_.time_budget_s > 0 && steady_seconds() - start_ >= opts_.time_budget_s) {
    sum_.stop_reason = StopReason::TimeBudget;
  } else if (opts_.early_stop > 0 && st.since_improvement >= opts_.early_stop) {
    sum_.stop_reason = StopReason::EarlyStop;
  }
  return sum_.stop_reason != StopReason::None;
}

bool TuneLoop::step(int max_new) {
  TuneState& st = sum_.state;
  if (search_over()) return false;
  size_t n = static_cast<size_t>(std::max(1, std::min({opts_.batch, opts_.trials - st.trials_done, max_new})));
  std::vector<uint64_t> batch;
  if (default_ && !medians_.count(*default_) && st.trials_done == 0) {
    // The default goes alone: once its time is known, hopeless candidates of the next
    // batches are cut short (slow_factor) instead of running to the runner's limit.
    // Marks it seen (a failure for now; its real cost follows with the batch's results).
    strategy_.observe({{*default_, std::numeric_limits<double>::infinity()}});
    batch.push_back(*default_);
  } else {
    // Seeds first, marked seen like the default; the strategy fills the rest of the batch.
    while (!seeds_.empty() && batch.size() < n) {
      uint64_t i = seeds_.front();
      seeds_.erase(seeds_.begin());
      if (medians_.count(i) || same_code_.count(i)) continue;
      strategy_.observe({{i, std::numeric_limits<double>::infinity()}});
      batch.push_back(i);
    }
    // Then what the strategy proposed while the last batch measured, then new proposals.
    while (!ahead_.empty() && batch.size() < n) {
      uint64_t i = ahead_.front();
      ahead_.erase(ahead_.begin());
      if (medians_.count(i) || same_code_.count(i) ||
          std::find(batch.begin(), batch.end(), i) != batch.end())
        continue;
      batch.push_back(i);
    }
    if (batch.size() < n) {
      for (uint64_t i : strategy_.propose(n - batch.size())) batch.push_back(i);
    }
  }
  if (batch.empty()) {
    sum_.stop_reason = StopReason::Exhausted;
    return false;
  }
  batch = skip_measured_elsewhere(batch);
  if (batch.empty()) return true;  // all were known; the strategy has learnt them
  std::vector<Trial> trials = measure_looking_ahead(batch);
  std::vector<Observation> obs;
  std::set<uint64_t> counted;
  std::vector<const Trial*> twins;  // same code as a measured config: counted after them
  for (const Trial& t : trials) {
    if (t.same_code_as) {
      twins.push_back(&t);
      continue;
    }
    if (t.lost()) {
      ++st.boards_lost;
      continue;
    }
    std::vector<double>& v = medians_[t.index];
    v.push_back(cost_of(t.result));
    if (t.remeasure) continue;
    counted.insert(t.index);
  }
  for (uint64_t i : counted) {
    double c = combined_cost(medians_[i]);
    obs.push_back({i, c});
    ++st.trials_done;
    if (!std::isfinite(c)) ++st.errors;
    if (c < st.best_s) {
      st.best_s = c;
      st.best_config = space_.to_config(i);
      st.since_improvement = 0;
    } else {
      ++st.since_improvement;
    }
  }
  // A config built to a measured config's code costs what that one does (never better: its
  // twin was counted first).
  for (const Trial* t : twins) {
    auto m = medians_.find(*t->same_code_as);
    const double c = m == medians_.end() ? std::numeric_limits<double>::infinity() : combined_cost(m->second);
    obs.push_back({t->index, c});
    counted.insert(t->index);
    same_code_.insert(t->index);
    ++st.trials_done;
    ++st.same_code;
    if (!std::isfinite(c)) ++st.errors;
    ++st.since_improvement;
  }
  // The strategy learns of every proposed point, lost ones included (as failures), so
  // they are not proposed again in this run; a later run measures them.
  for (uint64_t i : batch) {
    if (!counted.count(i)) obs.push_back({i, std::numeric_limits<double>::infinity()});
  }
  strategy_.observe(obs);
  notify(trials);
  return true;
}

int TuneLoop::seed(const std::vector<nlohmann::json>& configs) {
  int queued = 0;
  for (const nlohmann::json& c : configs) {
    std::optional<uint64_t> i = space_.index_of(c);  // none: not a point of this space
    if (!i || !space_.valid(*i) || medians_.count(*i) || same_code_.count(*i) || i == default_ ||
        std::find(seeds_.begin(), seeds_.end(), *i) != seeds_.end() ||
        std::find(ahead_.begin(), ahead_.end(), *i) != ahead_.end())
      continue;
    seeds_.push_back(*i);
    ++queued;
  }
  return queued;
}

void TuneLoop::end_search(StopReason reason) {
  if (sum_.stop_reason == StopReason::None && !search_over()) sum_.stop_reason = reason;
}

TuneSummary TuneLoop::finish() {
  TuneState& st = sum_.state;
  if (sum_.stop_reason == StopReason::None) search_over();
  if (stopped()) {
    sum_.interrupted = true;
    sum_.stop_reason = StopReason::Interrupted;
  }
  // Re-time the best few and the default, interleaved, in fresh processes.
  std::vector<std::pair<double, uint64_t>> ranked;
  for (const auto& [i, v] : medians_) {
    double c = combined_cost(v);
    if (std::isfinite(c)) ranked.push_back({c, i});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<uint64_t> top;
  for (const auto& [c, i] : ranked) {
    if (static_cast<int>(top.size()) >= opts_.retime_top) break;
    top.push_back(i);
  }
  const std::optional<uint64_t>& def = default_;
  if (def && medians_.count(*def) && std::isfinite(combined_cost(medians_[*def])) &&
      std::find(top.begin(), top.end(), *def) == top.end()) {
    top.push_back(*def);
  }
  bool paired = false;  // best_s and default_s were timed in the same rounds
  if (!sum_.interrupted && opts_.retime_rounds > 0 && top.size() > 1) {
    st.phase = "retime";
    const double retime_start = steady_seconds();
    std::map<uint64_t, std::vector<double>> fresh;
    std::vector<json> configs;
    for (uint64_t i : top) configs.push_back(space_.to_config(i));
    std::vector<BuildResult> builds = timed_build(configs);
    ctx_->set_timeout_s(opts_.measure.timeout_s);  // the re-timed are all fast: the runner's own limit
    ctx_->set_cut_slower_than_s(0);                 // and all are timed in full, the default too
    ctx_->set_min_warmup_ms(opts_.retime_warmup_ms.value_or(retime_warmup_ms_for(space_.target())));
    const auto d = def ? std::find(top.begin(), top.end(), *def) : top.end();
    // [round][k]: the cost, NaN where the board was lost or k was not timed in that round
    std::vector<std::vector<double>> rounds;
    std::vector<size_t> live(top.size());  // the positions timed in the next round
    std::iota(live.begin(), live.end(), size_t{0});
    for (int round = 0; round < opts_.retime_rounds && !stopped(); ++round) {
      std::vector<BuildResult> timed;
      for (size_t k : live) timed.push_back(builds[k]);
      std::vector<RunResult> results = timed_run(timed);
      std::vector<Trial> trials;
      std::vector<double> row(top.size(), std::numeric_limits<double>::quiet_NaN());
      for (size_t j = 0; j < live.size(); ++j) {
        const size_t k = live[j];
        trials.push_back({top[k], configs[k], builds[k], results[j], true, false, std::nullopt});
        if (results[j].error != pb::BOARD_LOST)
          fresh[top[k]].push_back(row[k] = cost_of(results[j]));
      }
      rounds.push_back(std::move(row));
      notify(trials);
      // Sequential: a config the rounds so far put above retime_drop x the default is not
      // timed again, and once only the default is left the re-timing ends.
      if (d == top.end() || opts_.retime_drop <= 0 || round + 1 >= opts_.retime_rounds) continue;
      const size_t dk = static_cast<size_t>(d - top.begin());
      std::erase_if(live, [&](size_t k) {
        const bool drop = k != dk && paired_ratio(rounds, k, dk) > opts_.retime_drop;
        st.retime_dropped += drop ? 1 : 0;
        return drop;
      });
      if (live.size() <= 1) break;
    }
    st.retime_s = steady_seconds() - retime_start;
    sum_.interrupted = stopped();
    for (size_t k = 0; k < top.size(); ++k) {
      RetimeResult r;
      r.config = configs[k];
      r.medians_s = fresh[top[k]];
      double c = combined_cost(r.medians_s);
      r.median_of_medians_s = std::isfinite(c) ? c : 0;
      r.is_default = def && top[k] == *def;
      if (d != top.end()) r.ratio_to_default = paired_ratio(rounds, k, static_cast<size_t>(d - top.begin()));
      sum_.retimed.push_back(r);
    }
    // With the default among them, configs are ranked by their paired ratios to it (timed in
    // the same rounds, so a busy minute slows both), and the default (unless it failed here)
    // stays unless one beats it by kVerdictMargin; else by their medians.
    auto key = [&](const RetimeResult& r) {
      if (d != top.end()) {
        if (r.is_default) return r.median_of_medians_s > 0 ? 1 - kVerdictMargin : INFINITY;
        return r.ratio_to_default > 0 ? r.ratio_to_default : INFINITY;
      }
      return r.median_of_medians_s > 0 ? r.median_of_medians_s : INFINITY;
    };
    std::stable_sort(sum_.retimed.begin(), sum_.retimed.end(),
                     [&](const RetimeResult& a, const RetimeResult& b) { return key(a) < key(b); });
    const RetimeResult& w = sum_.retimed[0];
    const double speedup = w.is_default ? 1.0 : 1.0 / w.ratio_to_default;
    // (A speedup past db::kMaxSeconds would be a broken timer, not a verdict.)
    if (db_ && d != top.end() && !sum_.interrupted && std::isfinite(key(w)) && speedup <= db::kMaxSeconds) {
      db_->add_verdict({space_.workload().canonical(), space_.target().str(), space_.template_id(),
                        db::config_hash(w.config), opts_.run_uuid, speedup, unix_now()});
    }
    for (const RetimeResult& r : sum_.retimed) {
      if (r.is_default && r.median_of_medians_s > 0) sum_.default_s = r.median_of_medians_s;
    }
    if (w.median_of_medians_s > 0) {
      sum_.best_config = w.config;
      sum_.best_s = w.median_of_medians_s;
      paired = d != top.end();
      // The winner's time as the rounds compared it with the default: the default's median
      // times its ratio (medians of a few busy rounds can disagree with the ratios: BERT's
      // 3072x768 winner had ratios of 0.94 but medians of 7.1 against 5.0 ms).
      if (paired && !w.is_default && sum_.default_s > 0 && w.ratio_to_default > 0) {
        sum_.best_s = sum_.default_s * w.ratio_to_default;
      }
    }
  }
  // The run's pick is the database's answer to `query best` and compile lookups: the same
  // ranking over every record of this space, the re-timings included, so the three agree.
  if (db_) {
    db::BestResult b = db_->best(lookup_key(space_.workload(), space_.target()));
    if (b.tier == db::MatchTier::Exact && b.record.template_name == space_.template_id()) {
      // The same config as the verdict's winner when there is one: the time the re-timing
      // gave it beside the default stays the time reported.
      if (!paired || b.record.config != sum_.best_config) sum_.best_s = b.robust_median_s;
      sum_.best_config = b.record.config;
      sum_.best_measurements = b.measurements;
    }
  }
  if (sum_.best_config.is_null() && std::isfinite(st.best_s)) {
    sum_.best_config = st.best_config;
    sum_.best_s = st.best_s;
  }
  if (sum_.default_s == 0 && def && medians_.count(*def)) {
    double c = combined_cost(medians_[*def]);
    if (std::isfinite(c)) sum_.default_s = c;
  }
  // The default as the best: one time for both (two statistics of one config read as a
  // speedup that is not there).
  if (def && sum_.default_s > 0 && sum_.best_config == space_.to_config(*def)) sum_.best_s = sum_.default_s;
  if (sum_.interrupted) sum_.stop_reason = StopReason::Interrupted;
  st.phase = "done";
  st.elapsed_s = steady_seconds() - start_;
  return sum_;
}

double retime_warmup_ms_for(const Target& t) { return t.is_gpu() ? 50 : 300; }

void sample_by_target(TuneOptions& o, const Target& t) {
  if (!o.retime_warmup_ms) o.retime_warmup_ms = retime_warmup_ms_for(t);
  if (!o.sampling_by_target) return;
  if (t.is_gpu()) {
    o.measure.repeat = 3;
    o.measure.min_repeat_ms = 5;
  }
  o.sampling_by_target = false;
}

TuneSummary tune(const ConfigSpace& space, SearchStrategy& strategy, Builder& builder, Runner& runner,
                 db::Database* db, const TuneOptions& opts, const std::vector<MeasureCallback*>& callbacks,
                 const std::atomic<bool>* stop) {
  TuneLoop loop(space, strategy, builder, runner, db, opts, callbacks, stop);
  while (loop.step()) {
  }
  return loop.finish();
}

}  // namespace tf
