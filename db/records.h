// What the tuning database stores: measurement records, tuning runs, and lookup results.
//
// These are plain values. The database (db/database.h) assigns ids and keeps them; the JSON
// lines format (db/jsonl.h) moves them between databases. Times are seconds, timestamps are
// Unix seconds (UTC).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tf::db {

// How a kernel was timed (see the farm's measurement protocol).
struct MeasureSettings {
  int number = 1;            // calls per sample
  int repeat = 1;            // samples
  double min_repeat_ms = 0;  // lower bound on one sample's duration
  bool flush = false;        // caches flushed before each sample
  double cooldown_ms = 0;    // pause between samples
};

// The median of `v`: the middle value, or the mean of the middle two for an even count; 0
// for none. The one median of tunefarm (records, runners, the CLI, query).
double median_of(std::vector<double> v);

// A config's cost over several measurements (medians, +inf for a failed one): +inf when any
// failed, else the median; +inf for none. How the tuner and the cost model count a config.
double combined_cost(const std::vector<double>& medians);

// Error codes of a measurement; "ok" means it ran and was timed.
const std::vector<std::string>& error_codes();

// One measurement of one config of one workload on one device.
struct MeasureRecord {
  int64_t id = 0;                 // assigned by the database; 0 before commit
  std::string workload;           // canonical spec, e.g. matmul(M=64,N=64,K=64,epilogue=none)
  std::string op;                 // matmul
  nlohmann::json params;          // integer shape parameters by name, e.g. {"M":64,...}
  int64_t flops = 0;              // floating point operations of one call
  std::string target;             // canonical target string
  std::string arch;               // x86_64, aarch64, cuda, rocm
  std::string device_key;         // farm key (rpi4, cuda-sm80) or "local"
  std::string device_model;       // CPU or GPU model name, free text
  std::string toolchain;          // compiler versions, free text
  std::string template_name;      // schedule template and version, e.g. dense.cpu.v1
  nlohmann::json config;          // the schedule config (every knob)
  std::vector<double> samples_s;  // per-call time of each sample, seconds; empty on error
  MeasureSettings settings;
  std::string error_code = "ok";  // one of error_codes()
  std::string error_msg;
  double compile_s = 0;           // time to build the kernel, seconds
  double measured_at = 0;         // Unix seconds
  std::string correctness = "unchecked";  // ok, wrong, unchecked
  std::string run_uuid;           // the tuning run it belongs to, or empty

  // Median of samples_s; nullopt when there are none.
  std::optional<double> median_s() const;
  // The median of a correct measurement (ok and not a wrong answer), else +inf.
  double cost_s() const;
  // Stable 16-hex-digit digest of the canonical JSON of `config`.
  std::string config_hash() const;
  // Stable digest of what identifies the measurement (workload, target, device, template,
  // config, samples, time); importing a record with a known identity adds nothing.
  std::string identity() const;
};

std::string config_hash(const nlohmann::json& config);

// Bounds check_record enforces on every field, so a record from an import or a buggy writer
// cannot make later readers misbehave (a timestamp gmtime cannot convert, a NaN median).
constexpr size_t kMaxNameLength = 4096;           // workload, target, key, model, template ...
constexpr size_t kMaxErrorMsgLength = 65536;
constexpr size_t kMaxConfigLength = 65536;        // characters of the config's JSON
constexpr size_t kMaxSamples = 100000;
constexpr int64_t kMaxParamValue = (int64_t{1} << 31) - 1;  // as the workload parser's limit
constexpr int64_t kMaxFlops = int64_t{1} << 62;
constexpr double kMaxSeconds = 1e6;               // a sample, a compile, a pause
constexpr double kMaxTimestamp = 253402300799.0;  // 9999-12-31 23:59:59 UTC

// Checks what the database schema cannot: required fields set and of bounded length, a known
// error code and correctness, integer shape parameters, samples that are positive finite
// times, settings and timestamps in range. Throws std::invalid_argument naming the field and
// the value.
void check_record(const MeasureRecord& r);

struct TuningRun {
  std::string uuid;
  std::string user;
  std::string host;
  std::string strategy;   // random, xgb, manual, ...
  int64_t budget = 0;     // measurements planned
  std::string workload;   // canonical, or empty for a run over several
  std::string target;
  double started_at = 0;
  double finished_at = 0;  // 0 while running
  std::string status = "running";  // running, done, failed, cancelled (by a user), interrupted
                                   // (its process stopped or died first)
  int64_t records = 0;     // filled in by Database::runs()
};

// A job of the tuning service (service/job.h): what was asked, by whom, and how far it got.
struct JobRow {
  int64_t id = 0;                 // assigned by the database
  std::string user;
  std::string state = "queued";   // queued, running, done, failed, cancelled
  int64_t priority = 0;           // higher runs first
  nlohmann::json spec;            // the job as submitted
  nlohmann::json progress;        // kept current by the service while it runs
  std::string reason;             // why it failed or was cancelled
  double submitted_at = 0, started_at = 0, finished_at = 0;  // Unix seconds; 0: not yet
};

// Which lookup rule found a config, from the most to the least specific.
enum class MatchTier {
  Exact,         // same workload, same target string
  SameArch,      // same workload, another target of the same architecture, never one of an
                 // emulated board for a real one or the other way round (emulated_target)
  NearestShape,  // same operator and target, the nearest shape (see shape_distance)
  None,          // nothing: use the default schedule
};
const char* tier_name(MatchTier t);

// What marks a canonical target string as an emulated board's (-model=qemu..., see
// compiler/target.h): its timings stand for no real device.
constexpr const char* kEmulatedTargetMarker = " -model=qemu";
bool emulated_target(const std::string& target);

struct LookupKey {
  std::string workload;    // canonical
  std::string op;
  nlohmann::json params;   // shape parameters, for the nearest-shape tier
  std::string target;      // canonical target string
  std::string arch;
  std::string template_name;  // only records of this template version; empty: any
};

// Configs are ranked by a robust statistic of their measurements, not by the luckiest one:
// the median of the medians of a config's correct records (a config with any wrong answer
// is out). `record` is the config's measurement whose median is nearest that statistic.
struct BestResult {
  MatchTier tier = MatchTier::None;
  MeasureRecord record;       // valid unless tier is None
  double distance = 0;        // NearestShape: shape_distance to the query
  double robust_median_s = 0; // the config's median of medians
  int64_t measurements = 0;   // its correct records
};

// The robust pick among records of one (workload, target): per (template, config), the
// median of the records' medians; the lowest wins (ties: the earliest record). Records that
// are not "ok" are ignored, except that a wrong answer rules its config out.
//
// A config measured once ranks behind the configs measured at least twice unless its median
// is below theirs by more than kOnceMargin: the fastest of many configs timed once is biased
// low (it won partly by luck), and the medians of fresh processes differ by 5-15% on the VMs
// we measured, while the tuner re-times its best few, so the configs it picks always have
// several measurements (docs/tuning.md, "Ranking").
//
// A verdict overrides the ranking: the config a tuning run's final re-timing found fastest,
// timed against the default schedule in the same interleaved rounds (tuner/tune.h). Medians
// measured at different times on a busy machine are not comparable: on a shared 2-core VM a
// kernel's median moved 1.6x between minutes, so ranking them picked configs that were
// measured in quiet minutes, not configs that were faster (ResNet-18's tuned build ran at
// 0.9x of its default). The verdict's config is the answer while it has a correct record.
constexpr double kOnceMargin = 0.10;

struct Verdict {
  std::string workload;       // canonical
  std::string target;         // canonical target string
  std::string template_name;
  std::string config_hash;    // of the winning config (the default's when it won)
  std::string run_uuid;       // the tuning run that decided, or empty
  double speedup = 0;         // over the default: the median of the rounds' ratios
  double decided_at = 0;      // Unix seconds
};
// Throws std::invalid_argument naming the field when a verdict is out of bounds.
void check_verdict(const Verdict& v);

std::optional<BestResult> robust_best(const std::vector<MeasureRecord>& records, const Verdict* verdict = nullptr);

// What tuning bought a whole model (tune --model --local): the model compiled with the tuned
// configs and with default schedules, both timed in one process on the same inputs.
struct ModelResult {
  int64_t id = 0;              // assigned by the database
  std::string model;           // the file as the user named it
  std::string model_hash;      // SHA-256 of the file's bytes, hex
  std::string target;          // canonical target string
  std::string device_key;      // "local"
  double tuned_s = 0;          // median latency of the tuned build
  double default_s = 0;        // and of the default build, timed beside it
  double estimate_s = 0;       // what the tuner estimated for the tuned build; 0: none
  int64_t tuned_kernels = 0, tunable_kernels = 0;
  nlohmann::json configs;      // array: per tuned workload {workload, template, config}
  double measured_at = 0;      // Unix seconds
};
// Throws std::invalid_argument naming the field when a model result is out of bounds.
void check_model_result(const ModelResult& m);

// Distance between two shapes of one operator: the sum over their integer parameters of
// |ln(a + 1) - ln(b + 1)|, so doubling a dimension costs about ln 2 whatever its size.
// Parameters missing on one side count as distance 10 each.
double shape_distance(const nlohmann::json& a, const nlohmann::json& b);

// The nearest-shape tier only takes shapes within this distance, ln 4: one dimension 4x
// off, or two 2x. Farther, a tuned config is a guess that can be far slower than the
// default (measured: 1x1000x1024's best on 1024^3 ran at 0.15x of the default schedule).
constexpr double kMaxShapeDistance = 1.3862943611198906;

struct PairCount {
  std::string workload, target;
  int64_t records = 0, ok = 0;
};

struct Stats {
  int64_t records = 0, workloads = 0, targets = 0, runs = 0;
  std::vector<PairCount> per_pair;                // by workload, target
  std::map<std::string, int64_t> errors;          // error code -> records
  std::map<std::string, int64_t> per_run;         // run uuid ("" for none) -> records
  int64_t file_bytes = 0;                         // page_count * page_size
};

struct DistillResult {
  int64_t kept = 0, removed = 0;
  std::vector<PairCount> removed_per_pair;  // `records` = how many go
};

}  // namespace tf::db
