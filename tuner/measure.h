// One measurement path for `tunefarm run`, `tunefarm farm measure` and `tunefarm tune`: the
// request a board gets, the check of its outputs, and the record the database stores.
//
// Promises: every runner fills inputs the same way (fill_random with seed + argument index,
// on the board), outputs are compared with a reference computed here once per workload
// (MeasureContext caches it), a wrong answer is WRONG_ANSWER and never "ok", and records are
// built in one place (make_record) from what was measured. The error codes are the proto's
// ErrorCode enum; the database stores their lower-case names (db::error_codes()).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "compiler/operators.h"
#include "compiler/reference.h"
#include "db/records.h"
#include "proto/tunefarm.pb.h"

namespace tf {

// How kernels are timed (docs/tuning.md, "Measurement protocol"). The one set of defaults of
// every command and job that measures (`run`, `farm measure`, `tune`, the service's jobs):
// cli/common.h registers them as flags, service/job.h reads them from job files.
struct MeasureOptions {
  int number = 1;            // calls per sample (grown to reach min_repeat_ms)
  int repeat = 5;            // samples
  double min_repeat_ms = 10;
  bool flush = false;
  double cooldown_ms = 0;
  double timeout_s = 0;      // 0: derived from the above (runtime/measure_limits.h)
  // > 0: one sample instead of `repeat` for a kernel whose fastest warm-up call is slower
  // (seconds per call); the tuner sets it to 2x the best so far (a non-contender)
  double cut_slower_than_s = 0;
  // The warm-up lasts at least this long (ms): a fresh process runs slow for a while
  // (runtime/kernel_library.h). The tuner's search skips it (each candidate is compared with
  // others timed alike) and its re-timing of the best uses it.
  double min_warmup_ms = 300;
  uint64_t seed = 1;         // of the inputs
  bool check = true;         // compare outputs with the reference
};

// The outcome of one measurement of one candidate.
struct RunResult {
  tunefarm::v1::ErrorCode error = tunefarm::v1::OK;
  std::string error_msg;
  std::vector<double> samples_s;   // empty unless timed
  int number = 0;
  int warmup_calls = 0;            // calls before the samples (MeasureReply.warmup_calls)
  std::string correctness = "unchecked";  // ok, wrong, unchecked
  bool cut = false;                // one sample only (MeasureOptions::cut_slower_than_s)
  double max_abs_error = 0;
  double tolerance = 0;
  std::string board_id = "local", device_model, board_target;
  // With a baseline (LocalRunner::run_one's): its samples, each taken right after the
  // kernel's of the same index.
  std::vector<double> baseline_samples_s;
  // Where the measurement's time went, seconds: uploading the library to the board (0 on this
  // machine), loading it in the measuring process (the GPU driver's PTX JIT there), and the
  // rest of the measuring process's work (MeasureReply's load_s and run_s).
  double upload_s = 0, load_s = 0, run_s = 0;
  bool cubin = false;  // a CUDA board loaded the kernel's machine code, not its PTX (no JIT)
  bool ok() const { return error == tunefarm::v1::OK; }
  double median_s() const;  // 0 when not timed
  double baseline_median_s() const;  // 0 without a baseline
  // The median over sample pairs of baseline time / kernel time: how many times faster than
  // the baseline the kernel ran, steady where absolute times drift; 0 without a baseline.
  double speedup() const;
};

// "ok", "compile_error", ... (the database's error_code of each proto code).
const char* error_code_name(tunefarm::v1::ErrorCode c);

// A reply as a result, its outputs unchecked: error, samples, baseline samples.
RunResult result_of(const tunefarm::v1::MeasureReply& reply);

// The request that times a compiled model (module ids left empty), its outputs' digests, within
// `timeout_s` (a model's call time is not known in advance): sampled as `o` says, or, without
// it, as runtime/model_abi.h's ModelTimingSettings say (tune --model's comparison).
tunefarm::v1::MeasureRequest model_request(double timeout_s, const MeasureOptions* o = nullptr);

// The inputs that the kernel described by `sidecar` (compiler/driver.h kernel_metadata's
// "packed") takes packed, marked so in `req` (ArgSpec pack_dim / pack_block: the board fills
// them as usual and packs them, as a compiled model passes its constant weights), with room
// for the packing of a baseline kernel timed on the same arguments (`baseline_sidecar`).
// Throws UserError on a sidecar whose packing does not fit the request's arguments.
void set_packed_inputs(tunefarm::v1::MeasureRequest& req, const nlohmann::json& sidecar,
                       const nlohmann::json& baseline_sidecar = nullptr);
// The description `<library>.json` of a compiled kernel; null when there is none or it is
// not JSON.
nlohmann::json read_sidecar_json(const std::string& library);

// What one workload's measurements share: its graph, the request skeleton, and the reference
// output on the seeded inputs (computed on first use).
class MeasureContext {
 public:
  // `g` is the workload's graph, as the caller already built it (build_op).
  MeasureContext(OpGraph g, MeasureOptions o);
  const OpGraph& graph() const { return graph_; }
  const MeasureOptions& options() const { return opts_; }
  // The time limit of later requests (0: derived from the settings).
  void set_timeout_s(double s) { opts_.timeout_s = s; }
  // The cut of later requests (0: none).
  void set_cut_slower_than_s(double s) { opts_.cut_slower_than_s = s; }
  void set_min_warmup_ms(double ms) { opts_.min_warmup_ms = ms; }
  // The request for `function` (module id left empty).
  tunefarm::v1::MeasureRequest request(const std::string& function) const;
  // Turns a board's reply into a result, checking its outputs against the reference.
  RunResult finish(const tunefarm::v1::MeasureReply& reply);

 private:
  OpGraph graph_;
  MeasureOptions opts_;
  int64_t out_elements_ = 0;
  std::vector<float> reference_;  // empty until first needed
};

// A record of a measured candidate (not yet committed).
struct CandidateInfo {
  std::string target;       // canonical target string
  std::string template_id;
  nlohmann::json config;
  double compile_s = 0;
  std::string device_key;   // "local" or the farm key
  std::string run_uuid;
};
db::MeasureRecord make_record(const OpGraph& g, const CandidateInfo& c, const RunResult& r, const MeasureOptions& o);

}  // namespace tf
