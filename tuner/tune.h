// The tuning loop: search strategy -> builder -> runner -> measure callbacks, until the
// trials, the time budget or the patience run out, then a re-timing of the best few.
//
// Promises:
// - Resume: configs of this workload, target and template version already in the database
//   are never measured again; their results seed the strategy and the best so far. Configs
//   another run records while this one goes on (two jobs on one workload) are looked up
//   before each batch and taken from the database too.
// - The default config is measured first, alone, when it has no record yet, so every run
//   can say how much faster its best is than what an untuned compile gets, and the slow
//   cut below has a time to start from.
// - Fidelity (docs/tuning.md): a measurement of a contender (within 2x of the best so far)
//   whose samples spread more than max_spread around their median is disturbed and measured
//   once more (both are stored); at the end
//   the retime_top best configs and the default are re-timed in retime_rounds rounds,
//   interleaved, each measurement in a fresh process; after a round, a config whose paired
//   ratio to the default so far is above retime_drop is not timed again, and the re-timing
//   ends when only the default is left. Every measurement is a record. The
//   winner is the config with the lowest median of its round-by-round ratios to the default
//   (the default itself unless one is kVerdictMargin faster); with a database it is stored
//   as the run's verdict (db::Verdict), and the run's pick is the database's own answer
//   (db::robust_best, which takes the newest verdict), so `tune`, `query best` and compile
//   lookups name the same config. Without the default in the re-timing (it failed), the
//   ranking is by the re-timed medians and the database's robust ranking.
// - Results reach the MeasureCallbacks batch by batch (records committed, strategy fed,
//   progress shown); BOARD_LOST results are passed as lost, never as a candidate's result.
// - Hopeless candidates are cut short: with a best median B so far, a measurement's time limit
//   is (repeat + 4) x max(min_repeat_ms, slow_factor x B) + 1 s (samples, a warm-up of
//   about 3 calls, one spare), so one call that is slow_factor times slower than the best
//   ends as TIMEOUT instead of taking seconds.
// - Non-contenders are timed with one sample (cut_factor); the re-timing never cuts.
// - `stop` (set by a signal handler) ends the run after the batch in flight, without the
//   re-timing; what was measured is already committed.
// - Pipelining: where the runner's timings cannot be disturbed by builds on this machine
//   (Runner::overlaps_builds: GPU boards), a batch is built and measured in chunks of the
//   builder's or the runner's parallelism (workers, boards), whichever is larger, the next
//   chunk building while the last one measures, and the strategy proposes the next batch
//   while a batch measures, from what it knew before that batch (one batch behind; seeds go
//   first and are not looked ahead of); elsewhere (this CPU, CPU boards) nothing builds or
//   searches while something measures. TuneState says where the time went.
// - Same code: a config whose build is byte for byte the library (and launch) of one this run
//   measured already (knobs that change nothing for this workload: a 3x3 NCHWc convolution's
//   `chunk`, `unroll` of loops of extent 1) is not measured again. It counts as a trial, its
//   cost is that config's, it is not recorded (no measurement took place) and never re-timed.
#pragma once

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/database.h"
#include "tuner/builder.h"
#include "tuner/config_space.h"
#include "tuner/measure.h"
#include "tuner/runner.h"
#include "tuner/search_strategy.h"

namespace tf {

// Why a search (one workload's, or a group's) ended; stored as stop_reason_name's text.
enum class StopReason {
  None,         // not ended
  Trials,       // the trial budget is spent ("trials")
  TimeBudget,   // "time-budget"
  EarlyStop,    // no better config in early_stop trials ("early-stop")
  Exhausted,    // the search has nothing left to propose ("exhausted")
  Interrupted,  // the stop flag ("interrupted")
};
// "trials", "time-budget", "early-stop", "exhausted", "interrupted"; "" for None.
const char* stop_reason_name(StopReason r);
// The reason named `text` (as stop_reason_name writes it); None for anything else.
StopReason parse_stop_reason(const std::string& text);

struct TuneOptions {
  int trials = 200;            // new configs to measure
  int batch = 8;               // configs built and measured together
  int early_stop = 0;          // stop after this many trials without a better config; 0: never
  double time_budget_s = 0;    // 0: none
  int retime_top = 3;          // configs re-timed at the end (plus the default)
  int retime_rounds = 3;
  // After each round of the re-timing but the last, configs whose median ratio to the default
  // over the rounds so far is above this are not timed again: they cannot come out
  // kVerdictMargin faster. 0: every round times them all. The rounds' paired ratios of a
  // config moved at most 21% on this 2-core VM in a 150-trial ResNet-18 tune --model (session
  // 90), and 21 of its 34 re-timed configs were 1.25x the default or slower in the first round.
  double retime_drop = 1.25;
  // Where the runner overlaps builds (GPU boards), propose the next batch while a batch measures
  // (the header's "Pipelining"); false: propose only between batches (tune --no-search-ahead).
  bool search_ahead = true;
  double max_spread = 0.10;    // (max - min) / median of samples above which a measurement is redone
  // Once something ran, a candidate is stopped (TIMEOUT) when one call takes this many times
  // the best median so far: it cannot win, and measuring it to the end would cost more than
  // many good ones. 0: only the runner's own limit.
  double slow_factor = 20;
  // A candidate whose fastest warm-up call takes more than this many times the best median
  // so far is not a contender: it gets one sample instead of `repeat` (and is re-measured in
  // full if that sample says it is a contender after all). 0: never cut.
  double cut_factor = 2;
  // How candidates are timed; the search takes no warm-up (measure.min_warmup_ms is not
  // used), the re-timing retime_warmup_ms.
  MeasureOptions measure;
  // The re-timing's shortest warm-up, ms; empty: the target's (retime_warmup_ms_for).
  std::optional<double> retime_warmup_ms;
  // measure.repeat and measure.min_repeat_ms are the defaults, which the target's replace
  // (sample_by_target); false where they were asked for (tune's --repeat or --min-repeat-ms,
  // a job file's repeat or min_repeat_ms).
  bool sampling_by_target = true;
  std::string run_uuid;
};

// The re-timing's shortest warm-up on `t` by default, ms. CPUs: 300 (a fresh runner process
// ran a 1.4 ms matmul 20-70% slow for its first 100-300 ms, docs/tuning.md). GPUs: 50; their
// board keeps one measuring process, warm from the search's kernels, and the runner's steadiness
// test still runs (on an H200, bert2's `tune --model` spent 20.2 of 25.9 s in 72 re-timings
// at 300 ms, session 89).
double retime_warmup_ms_for(const Target& t);

// How `t` measures what was not asked for: the re-timing's warm-up (retime_warmup_ms_for) where
// o.retime_warmup_ms is empty, and where o.sampling_by_target the samples, set in o.measure:
// on CPUs the defaults, 5 of at least 10 ms; on GPUs 3 of at least 5 ms, as their boards time
// a kernel by events over many calls (on an H200, 32-trial runs of a 1024^3 matmul and a 3x3
// convolution went from 3.1 to 4.3 and 4.9 candidates a second with the same verdicts, session
// 89). Called before a run's records are made, which say how they were sampled.
void sample_by_target(TuneOptions& o, const Target& t);

// One measured candidate.
struct Trial {
  uint64_t index = 0;
  nlohmann::json config;
  BuildResult build;
  RunResult result;
  bool retime = false;      // a re-timing at the end, not a new config
  bool remeasure = false;   // the second measurement of a disturbed one
  // A config whose build is the code of one measured before in this run (TuneLoop's "Same
  // code"): not measured, its cost that config's; `result` is empty.
  std::optional<uint64_t> same_code_as;
  bool lost() const { return result.error == tunefarm::v1::BOARD_LOST; }
};

struct TuneState {
  const ConfigSpace* space = nullptr;
  int trials_total = 0;
  int trials_done = 0;       // new configs measured this run
  int errors = 0;            // of those, failed (compile, run, wrong answer)
  int known = 0;             // configs found measured in the database
  int same_code = 0;         // of trials_done, built to the code of one measured before (not measured)
  int boards_lost = 0;
  double best_s = std::numeric_limits<double>::infinity();  // best median so far
  nlohmann::json best_config;
  double elapsed_s = 0;
  int since_improvement = 0;
  std::string phase = "search";  // search, retime, done
  // Where the time went, in seconds: building candidates, measuring them (uploads, the
  // boards' work and the waits for boards), and how much of the measuring had builds going
  // on beside it; the rest of elapsed_s is the search (cost model) and the database.
  double build_s = 0, measure_s = 0, overlap_s = 0;
  // The strategy's proposals made while a batch measured (part of measure_s, not of the rest).
  double search_ahead_s = 0;
  // The re-timing of the best at the end (its builds and measurements), part of elapsed_s:
  // the search's own rate is trials_done over elapsed_s less this.
  double retime_s = 0;
  int retime_dropped = 0;  // configs the re-timing stopped timing after a round (retime_drop)
  // The measuring's parts, summed over the measurements (`measured`, retimings included;
  // several boards measure at once, so these can add up to more than measure_s): uploads to
  // the boards, the measuring processes' module loads (the GPU driver's PTX JIT) and the rest
  // of their work (RunResult). What measure_s holds beyond them per measurement is starting
  // the measuring process, the network and waits for a board.
  int measured = 0;
  double upload_s = 0, load_s = 0, run_s = 0;
  int cubin_loads = 0;  // measurements whose module was a cubin (RunResult::cubin)
};

class MeasureCallback {
 public:
  virtual ~MeasureCallback() = default;
  virtual void on_results(const TuneState& state, const std::vector<Trial>& trials) = 0;
};

// Commits each batch's records (lost boards excepted) to the database in one transaction.
class CommitRecords : public MeasureCallback {
 public:
  CommitRecords(db::Database* db, const ConfigSpace& space, std::string device_key, std::string run_uuid,
                MeasureOptions o);
  void on_results(const TuneState& state, const std::vector<Trial>& trials) override;
  int64_t committed() const { return committed_; }

 private:
  db::Database* db_;
  const ConfigSpace& space_;
  std::string device_key_, run_uuid_;
  MeasureOptions opts_;
  int64_t committed_ = 0;
};

struct RetimeResult {
  nlohmann::json config;
  std::vector<double> medians_s;   // one per measurement in the re-timing
  double median_of_medians_s = 0;  // 0 when it failed
  bool is_default = false;
  double ratio_to_default = 0;     // median over the rounds of its time / the default's; 0: none
};

// A config replaces the default only if the re-timing's paired ratio says it is this much
// faster: on a busy machine a ratio of 0.99 is as likely noise as a win.
constexpr double kVerdictMargin = 0.02;

struct TuneSummary {
  TuneState state;
  std::vector<RetimeResult> retimed;   // best first; empty when not re-timed
  nlohmann::json best_config;          // null when nothing ran correctly
  double best_s = 0;                   // its median of medians (db::robust_best); else best median
  int64_t best_measurements = 0;       // its correct records, when the pick came from the database
  double default_s = 0;                // the default config's, when known
  bool interrupted = false;
  StopReason stop_reason = StopReason::None;
};

// The loop of tune(), a batch at a time, for callers that interleave several workloads (the
// tuning service's task scheduler, service/job.h). Construction reads the database (resume).
class TuneLoop {
 public:
  TuneLoop(const ConfigSpace& space, SearchStrategy& strategy, Builder& builder, Runner& runner, db::Database* db,
           const TuneOptions& opts, std::vector<MeasureCallback*> callbacks, const std::atomic<bool>* stop = nullptr);
  ~TuneLoop();
  // Measures one batch of at most min(opts.batch, max_new) new configs (the default config
  // alone first) and tells the callbacks. Returns false, measuring nothing, once the search
  // is over (trials, time budget, early stop, exhausted, stop flag): stop_reason() says why.
  bool step(int max_new = std::numeric_limits<int>::max());
  // Configs to measure before the strategy's next proposals, after the default (the template's
  // seed configs, queued when the loop starts; tune --model passes a task's sibling's new best:
  // the same operator and shape with another epilogue). Configs of another space, pruned ones,
  // the default and ones already measured or queued (proposed ahead too) are skipped; returns
  // how many were queued.
  int seed(const std::vector<nlohmann::json>& configs);
  // How many seeds wait to be measured.
  size_t seeds_queued() const { return seeds_.size(); }
  // Ends the search for a reason of the caller's (e.g. the group's budget is spent), unless it
  // has ended already.
  void end_search(StopReason reason);
  StopReason stop_reason() const { return sum_.stop_reason; }
  const TuneState& state() const { return sum_.state; }
  // Re-times the best few (unless stopped) and summarises. Call once, after the search.
  TuneSummary finish();

 private:
  bool stopped() const;
  bool search_over();
  void notify(const std::vector<Trial>& trials);
  std::vector<Trial> measure(const std::vector<uint64_t>& indices);
  // measure(), and where the runner overlaps builds (the header's "Pipelining") the strategy's
  // proposals for the next batch at the same time, queued in ahead_.
  std::vector<Trial> measure_looking_ahead(const std::vector<uint64_t>& batch);
  // Builds `configs` and measures them into `builds` and `results` (sized as configs),
  // overlapping the two where the runner allows (the header's "Pipelining").
  void build_and_run(const std::vector<nlohmann::json>& configs, std::vector<BuildResult>& builds,
                     std::vector<RunResult>& results, std::vector<std::optional<uint64_t>>& same_code);
  // The builder's and runner's calls, their time added to the state's (and their start and
  // end in `took`).
  struct Interval {
    double start, end;
  };
  std::vector<BuildResult> timed_build(const std::vector<nlohmann::json>& configs, Interval* took = nullptr);
  std::vector<RunResult> timed_run(const std::vector<BuildResult>& builds, Interval* took = nullptr);
  // timed_run of the builds whose code this run has not measured yet: a build that is byte for
  // byte (library and launch, its config aside) one measured before in this run, or earlier in
  // `builds`, is not measured; same_code[k] names that config (sized as builds).
  std::vector<RunResult> run_new_code(const std::vector<BuildResult>& builds,
                                      std::vector<std::optional<uint64_t>>& same_code, Interval* took = nullptr);
  // A measurement's parts (RunResult's upload_s, load_s, run_s) added to the state's.
  void add_parts(const RunResult& r);
  // Drops from `batch` the configs another run measured since this one started (a job on the
  // same workload at the same time), taking their results from the database instead.
  std::vector<uint64_t> skip_measured_elsewhere(const std::vector<uint64_t>& batch);

  const ConfigSpace& space_;
  SearchStrategy& strategy_;
  Builder& builder_;
  Runner& runner_;
  TuneOptions opts_;
  db::Database* db_;
  std::vector<MeasureCallback*> callbacks_;
  const std::atomic<bool>* stop_;
  double start_;
  std::unique_ptr<MeasureContext> ctx_;
  std::map<uint64_t, std::vector<double>> medians_;  // per config: its measurements' costs
  std::map<std::string, uint64_t> code_;  // digest of a measured build (code_digest) -> its config
  std::set<uint64_t> same_code_;          // configs not measured: their code was (Trial::same_code_as)
  std::optional<uint64_t> default_;
  std::vector<uint64_t> seeds_;  // queued by seed(), measured first in order
  std::vector<uint64_t> ahead_;  // proposed while the last batch measured, measured next
  TuneSummary sum_;
};

TuneSummary tune(const ConfigSpace& space, SearchStrategy& strategy, Builder& builder, Runner& runner,
                 db::Database* db, const TuneOptions& opts, const std::vector<MeasureCallback*>& callbacks,
                 const std::atomic<bool>* stop = nullptr);

// Whether a measurement's samples are too spread to trust: (max - min) / median > max_spread.
bool disturbed(const std::vector<double>& samples_s, double max_spread);

}  // namespace tf
