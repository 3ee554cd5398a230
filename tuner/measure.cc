#include "tuner/measure.h"

#include <algorithm>
#include <chrono>

#include "base/file_io.h"
#include "base/error.h"
#include "compiler/target.h"
#include "runtime/kernel_library.h"
#include "runtime/measure_limits.h"
#include "runtime/model_abi.h"
#include "runtime/pack_layout.h"
#include "tuner/tuning_records.h"

namespace tf {

namespace pb = tunefarm::v1;

const char* error_code_name(pb::ErrorCode c) {
  switch (c) {
    case pb::OK: return "ok";
    case pb::COMPILE_ERROR: return "compile_error";
    case pb::LOAD_ERROR: return "load_error";
    case pb::RUNTIME_ERROR: return "runtime_error";
    case pb::TIMEOUT: return "timeout";
    case pb::MEMORY_LIMIT: return "memory_limit";
    case pb::WRONG_ANSWER: return "wrong_answer";
    case pb::BOARD_LOST: return "board_lost";
    default: return "runtime_error";
  }
}

double RunResult::median_s() const { return db::median_of(samples_s); }
double RunResult::baseline_median_s() const { return db::median_of(baseline_samples_s); }

double RunResult::speedup() const {
  std::vector<double> ratios;
  for (size_t i = 0; i < std::min(samples_s.size(), baseline_samples_s.size()); ++i) {
    if (samples_s[i] > 0) ratios.push_back(baseline_samples_s[i] / samples_s[i]);
  }
  return db::median_of(ratios);
}

MeasureContext::MeasureContext(OpGraph g, MeasureOptions o) : graph_(std::move(g)), opts_(o) {
  out_elements_ = 1;
  for (int64_t d : graph_.output->shape) out_elements_ *= d;
}

pb::MeasureRequest MeasureContext::request(const std::string& function) const {
  pb::MeasureRequest req;
  req.set_function(function);
  auto add = [&](const ir::Tensor& t, bool output) {
    pb::ArgSpec* a = req.add_args();
    for (int64_t d : t->shape) a->add_shape(d);
    a->set_is_output(output);
    if (std::string d = graph_.arg_dtype(t); d != "float32") a->set_dtype(d);
  };
  for (const ir::Tensor& t : graph_.inputs) add(t, false);
  add(graph_.output, true);
  req.set_number(opts_.number);
  req.set_repeat(opts_.repeat);
  req.set_min_repeat_ms(opts_.min_repeat_ms);
  req.set_flush_cache(opts_.flush);
  req.set_cooldown_ms(opts_.cooldown_ms);
  req.set_seed(opts_.seed);
  req.set_timeout_s(opts_.timeout_s);
  req.set_cut_slower_than_s(opts_.cut_slower_than_s);
  req.set_min_warmup_ms(opts_.min_warmup_ms);
  // Values travel back when they are small enough; otherwise only a digest (unchecked).
  req.set_outputs(!opts_.check ? pb::OUTPUT_NONE : out_elements_ * 4 <= (16 << 20) ? pb::OUTPUT_VALUES : pb::OUTPUT_DIGEST);
  return req;
}

RunResult result_of(const pb::MeasureReply& reply) {
  RunResult r;
  r.error = reply.error();
  r.error_msg = reply.error_msg();
  r.number = reply.number();
  r.warmup_calls = reply.warmup_calls();
  r.load_s = reply.load_s();
  r.run_s = reply.run_s();
  if (!r.ok()) return r;
  r.samples_s.assign(reply.samples_s().begin(), reply.samples_s().end());
  r.baseline_samples_s.assign(reply.baseline_samples_s().begin(), reply.baseline_samples_s().end());
  r.cut = reply.cut();
  return r;
}

pb::MeasureRequest model_request(double timeout_s, const MeasureOptions* m) {
  const TimingOptions o = model_timing_options();
  pb::MeasureRequest req;
  req.set_model(true);
  req.set_number(m ? m->number : o.number);
  req.set_repeat(m ? m->repeat : o.repeat);
  req.set_min_repeat_ms(m ? m->min_repeat_ms : o.min_repeat_ms);
  req.set_min_warmup_ms(m ? m->min_warmup_ms : o.min_warmup_ms);
  req.set_rewarm_ms(o.rewarm_ms);
  req.set_seed(m ? m->seed : 1);
  if (m) {
    req.set_flush_cache(m->flush);
    req.set_cooldown_ms(m->cooldown_ms);
  }
  req.set_timeout_s(timeout_s);
  req.set_outputs(pb::OUTPUT_DIGEST);
  return req;
}

void set_packed_inputs(pb::MeasureRequest& req, const nlohmann::json& sidecar, const nlohmann::json& baseline_sidecar) {
  // The packing each of the two kernels asks of argument k, as (dim, block), block 0 for none.
  auto packings = [&](const nlohmann::json& side) {
    std::vector<std::pair<int64_t, int64_t>> p(static_cast<size_t>(req.args_size()), {0, 0});
    if (!side.is_object() || !side.contains("packed")) return p;
    for (const nlohmann::json& e : side["packed"]) {
      int64_t arg = e.value("arg", int64_t{-1}), dim = e.value("dim", int64_t{-1}), block = e.value("block", int64_t{0});
      if (arg < 0 || arg >= req.args_size() || req.args(static_cast<int>(arg)).is_output() || dim < 0 ||
          dim >= req.args(static_cast<int>(arg)).shape_size() || block < 1 || block > kMaxPackBlock) {
        throw UserError(str("kernel description packs argument ", arg, " (dimension ", dim, ", block ", block,
                            "), which its workload's arguments do not allow"));
      }
      p[static_cast<size_t>(arg)] = {dim, block};
    }
    return p;
  };
  const auto own = packings(sidecar), base = packings(baseline_sidecar);
  for (int k = 0; k < req.args_size(); ++k) {
    pb::ArgSpec& a = *req.mutable_args(k);
    const auto [dim, block] = own[static_cast<size_t>(k)];
    if (block > 0) {
      a.set_pack_dim(dim);
      a.set_pack_block(block);
    }
    if (const auto [bdim, bblock] = base[static_cast<size_t>(k)]; bblock > 0 && (bdim != dim || bblock != block))
      a.set_min_elements(packed_elements({a.shape().begin(), a.shape().end()}, static_cast<size_t>(bdim), bblock));
  }
}

nlohmann::json read_sidecar_json(const std::string& library) {
  std::string text;
  try {
    text = read_file(library + ".json");
  } catch (const std::runtime_error&) {
    return nullptr;  // none
  }
  return nlohmann::json::parse(text, nullptr, false);
}

RunResult MeasureContext::finish(const pb::MeasureReply& reply) {
  RunResult r = result_of(reply);
  if (!r.ok()) return r;
  if (!opts_.check || reply.outputs_size() != 1 ||
      reply.outputs(0).values().size() != static_cast<size_t>(out_elements_) * 4) {
    return r;
  }
  if (reference_.empty()) {
    std::vector<std::vector<float>> inputs;
    std::vector<const float*> ptrs;
    uint64_t i = 0;
    for (const ir::Tensor& t : graph_.inputs) {
      int64_t n = 1;
      for (int64_t d : t->shape) n *= d;
      inputs.emplace_back(static_cast<size_t>(n));
      fill_typed(graph_.arg_dtype(t), inputs.back().data(), n, opts_.seed + i++);
      ptrs.push_back(inputs.back().data());
    }
    reference_.resize(static_cast<size_t>(out_elements_));
    reference_compute(graph_.workload, ptrs, reference_.data());
  }
  const float* got = reinterpret_cast<const float*>(reply.outputs(0).values().data());
  OutputCheck c = compare_with_reference(graph_, reference_.data(), got);
  r.max_abs_error = c.max_abs_error;
  r.tolerance = c.tolerance;
  r.correctness = c.ok() ? "ok" : "wrong";
  if (!c.ok()) {
    r.error = pb::WRONG_ANSWER;
    r.error_msg = "output element " + std::to_string(c.worst_index) + " off by " + std::to_string(c.max_abs_error) +
                  " (tolerance " + std::to_string(c.tolerance) + ")";
  }
  return r;
}

db::MeasureRecord make_record(const OpGraph& g, const CandidateInfo& c, const RunResult& res, const MeasureOptions& o) {
  db::MeasureRecord r;
  const Workload& w = g.workload;
  r.workload = w.canonical();
  r.op = w.op;
  r.params = workload_params(w);
  r.flops = g.flops;
  r.target = c.target;
  r.arch = parse_target(c.target).arch_name();
  r.device_key = c.device_key;
  r.device_model = !res.device_model.empty() ? res.device_model : c.device_key == "local" ? local_device_model() : "";
  r.toolchain = toolchain_version();
  r.template_name = c.template_id;
  r.config = c.config;
  // A wrong answer keeps its samples (they say how fast the wrong kernel was) but never ranks.
  if (res.ok() || res.error == pb::WRONG_ANSWER) r.samples_s = res.samples_s;
  r.settings = {res.number > 0 ? res.number : o.number, res.cut ? 1 : o.repeat, o.min_repeat_ms, o.flush, o.cooldown_ms};
  r.error_code = error_code_name(res.error);
  r.error_msg = res.error_msg.substr(0, db::kMaxErrorMsgLength);
  r.compile_s = c.compile_s;
  r.measured_at = unix_now();
  r.correctness = res.correctness;
  r.run_uuid = c.run_uuid;
  return r;
}

}  // namespace tf
