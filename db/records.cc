#include "db/records.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

namespace tf::db {
namespace {

// FNV-1a, 64 bit: stable across builds and machines, unlike std::hash.
std::string digest(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

const std::vector<std::string>& error_codes() {
  static const std::vector<std::string> codes = {
      "ok",            // ran and timed
      "compile_error", // the kernel did not build
      "load_error",    // the library did not load on the board
      "runtime_error", // the kernel crashed or returned nonzero
      "timeout",       // it ran longer than the time limit
      "memory_limit",  // it exceeded the memory limit
      "wrong_answer",  // it ran but its output differs from the reference
      "board_lost",    // the board went away mid-measurement
  };
  return codes;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double combined_cost(const std::vector<double>& medians) {
  if (medians.empty()) return std::numeric_limits<double>::infinity();
  for (double m : medians) {
    if (!std::isfinite(m)) return m;
  }
  return median_of(medians);
}

std::optional<double> MeasureRecord::median_s() const {
  if (samples_s.empty()) return std::nullopt;
  return median_of(samples_s);
}

double MeasureRecord::cost_s() const {
  if (error_code != "ok" || correctness == "wrong" || samples_s.empty()) return std::numeric_limits<double>::infinity();
  return median_of(samples_s);
}

std::string config_hash(const nlohmann::json& config) { return digest(config.dump()); }

std::string MeasureRecord::config_hash() const { return db::config_hash(config); }

std::string MeasureRecord::identity() const {
  nlohmann::json id = {{"workload", workload},         {"target", target},
                       {"device_key", device_key},     {"device_model", device_model},
                       {"template", template_name},    {"config", config},
                       {"samples", samples_s},         {"measured_at", measured_at},
                       {"error_code", error_code}};
  return digest(id.dump());
}

namespace {

void fail(const std::string& what) { throw std::invalid_argument(what); }

void check_text(const std::string& value, const char* name, size_t max_len, bool required) {
  if (required && value.empty()) fail(std::string(name) + " is empty");
  if (value.size() > max_len) {
    fail(std::string(name) + " has " + std::to_string(value.size()) + " characters, over the limit of " +
         std::to_string(max_len));
  }
}

// Shown as 1e+19 rather than std::to_string's 20 digits.
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return std::string(buf);
}

void check_range(double v, const char* name, double lo, double hi) {
  if (!std::isfinite(v) || v < lo || v > hi) {
    fail(std::string(name) + " " + number(v) + " is not in [" + number(lo) + ", " + number(hi) + "]");
  }
}

// Runs `check`, prefixing what it throws with `what`.
template <typename F>
void checked(const char* what, F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    fail(std::string(what) + ": " + e.what());
  }
}

}  // namespace

void check_record(const MeasureRecord& r) {
  check_text(r.workload, "workload", kMaxNameLength, true);
  check_text(r.op, "op", kMaxNameLength, true);
  check_text(r.target, "target", kMaxNameLength, true);
  check_text(r.arch, "arch", kMaxNameLength, true);
  check_text(r.device_key, "device_key", kMaxNameLength, false);
  check_text(r.device_model, "device_model", kMaxNameLength, false);
  check_text(r.toolchain, "toolchain", kMaxNameLength, false);
  check_text(r.template_name, "template", kMaxNameLength, true);
  check_text(r.run_uuid, "run", kMaxNameLength, false);
  check_text(r.error_msg, "error_msg", kMaxErrorMsgLength, false);
  if (!r.params.is_object()) fail("params is not a JSON object");
  for (const auto& [key, value] : r.params.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxParamValue) {
      fail("params." + key + " = " + value.dump() + " is not an integer in [0, " + std::to_string(kMaxParamValue) + "]");
    }
  }
  if (r.flops < 0 || r.flops > kMaxFlops) fail("flops " + std::to_string(r.flops) + " is not in [0, 2^62]");
  if (!r.config.is_object()) fail("config is not a JSON object");
  if (r.config.dump().size() > kMaxConfigLength) fail("config is longer than " + std::to_string(kMaxConfigLength) + " characters");
  const auto& codes = error_codes();
  if (std::find(codes.begin(), codes.end(), r.error_code) == codes.end()) {
    fail("unknown error_code '" + r.error_code + "'");
  }
  if (r.correctness != "ok" && r.correctness != "wrong" && r.correctness != "unchecked") {
    fail("correctness '" + r.correctness + "' is not ok, wrong or unchecked");
  }
  if (r.error_code == "ok" && r.samples_s.empty()) fail("error_code ok but no samples");
  if (r.samples_s.size() > kMaxSamples) {
    fail(std::to_string(r.samples_s.size()) + " samples, over the limit of " + std::to_string(kMaxSamples));
  }
  for (double s : r.samples_s) {
    if (!std::isfinite(s) || s <= 0 || s > kMaxSeconds) fail("sample " + number(s) + " is not a time in (0, 1e6] seconds");
  }
  if (r.settings.number < 1 || r.settings.repeat < 1) fail("number and repeat must be at least 1");
  check_range(r.settings.min_repeat_ms, "settings.min_repeat_ms", 0, kMaxSeconds * 1e3);
  check_range(r.settings.cooldown_ms, "settings.cooldown_ms", 0, kMaxSeconds * 1e3);
  check_range(r.compile_s, "compile_s", 0, kMaxSeconds);
  // measured_at must be a date a calendar can show: after 1970, before the year 10000.
  if (!(r.measured_at > 0)) fail("measured_at is not set");
  check_range(r.measured_at, "measured_at", 0, kMaxTimestamp);
}

bool emulated_target(const std::string& target) { return target.find(kEmulatedTargetMarker) != std::string::npos; }

const char* tier_name(MatchTier t) {
  switch (t) {
    case MatchTier::Exact: return "exact";
    case MatchTier::SameArch: return "same-arch";
    case MatchTier::NearestShape: return "nearest-shape";
    case MatchTier::None: return "none";
  }
  return "?";
}

double shape_distance(const nlohmann::json& a, const nlohmann::json& b) {
  double d = 0;
  for (const auto& [k, v] : a.items()) {
    if (!v.is_number_integer()) continue;
    if (!b.contains(k) || !b[k].is_number_integer()) {
      d += 10;
      continue;
    }
    d += std::fabs(std::log(double(v.get<int64_t>()) + 1) - std::log(double(b[k].get<int64_t>()) + 1));
  }
  for (const auto& [k, v] : b.items()) {
    if (v.is_number_integer() && !a.contains(k)) d += 10;
  }
  return d;
}

void check_verdict(const Verdict& v) {
  checked("verdict", [&] {
    check_text(v.workload, "workload", kMaxNameLength, true);
    check_text(v.target, "target", kMaxNameLength, true);
    check_text(v.template_name, "template", kMaxNameLength, true);
    check_text(v.config_hash, "config_hash", kMaxNameLength, true);
    check_text(v.run_uuid, "run_uuid", kMaxNameLength, false);
    check_range(v.speedup, "speedup", 0, kMaxSeconds);
    check_range(v.decided_at, "decided_at", 0, kMaxTimestamp);
  });
}

void check_model_result(const ModelResult& m) {
  checked("model result", [&] {
    check_text(m.model, "model", kMaxNameLength, true);
    check_text(m.model_hash, "model_hash", kMaxNameLength, true);
    check_text(m.target, "target", kMaxNameLength, true);
    check_text(m.device_key, "device_key", kMaxNameLength, true);
    check_range(m.tuned_s, "tuned_s", 0, kMaxSeconds);
    check_range(m.default_s, "default_s", 0, kMaxSeconds);
    check_range(m.estimate_s, "estimate_s", 0, kMaxSeconds);
    check_range(m.measured_at, "measured_at", 0, kMaxTimestamp);
    if (m.tuned_kernels < 0 || m.tunable_kernels < m.tuned_kernels || m.tunable_kernels > kMaxParamValue) {
      fail(std::to_string(m.tuned_kernels) + " tuned of " + std::to_string(m.tunable_kernels) + " tunable kernels");
    }
    if (!m.configs.is_array()) fail("configs is not a JSON array");
    check_text(m.configs.dump(), "configs", kMaxConfigLength * 16, false);
  });
}

std::optional<BestResult> robust_best(const std::vector<MeasureRecord>& records, const Verdict* verdict) {
  struct Group {
    std::vector<const MeasureRecord*> ok;
    bool wrong = false;
    int64_t first_id = INT64_MAX;
  };
  std::map<std::string, Group> groups;
  for (const MeasureRecord& r : records) {
    Group& g = groups[r.template_name + "/" + r.config_hash()];
    if (r.correctness == "wrong" || r.error_code == "wrong_answer") g.wrong = true;
    if (r.error_code != "ok" || r.samples_s.empty()) continue;
    g.ok.push_back(&r);
    g.first_id = std::min(g.first_id, r.id);
  }
  // A config's statistic, and its measurement nearest to it.
  auto summarize = [](const Group& g) {
    std::vector<double> medians;
    for (const MeasureRecord* r : g.ok) medians.push_back(*r->median_s());
    double robust = median_of(medians);
    const MeasureRecord* nearest = g.ok[0];
    for (const MeasureRecord* r : g.ok) {
      double d = std::fabs(*r->median_s() - robust), dn = std::fabs(*nearest->median_s() - robust);
      if (d < dn || (d == dn && r->id < nearest->id)) nearest = r;
    }
    return BestResult{MatchTier::None, *nearest, 0, robust, static_cast<int64_t>(g.ok.size())};
  };
  if (verdict) {
    auto d = groups.find(verdict->template_name + "/" + verdict->config_hash);
    if (d != groups.end() && !d->second.wrong && !d->second.ok.empty()) return summarize(d->second);
  }
  // The best of the configs measured once and the best of those measured more often.
  std::optional<BestResult> best[2];
  int64_t best_first[2] = {0, 0};
  for (const auto& [key, g] : groups) {
    if (g.wrong || g.ok.empty()) continue;
    BestResult r = summarize(g);
    int tier = g.ok.size() > 1 ? 1 : 0;
    std::optional<BestResult>& b = best[tier];
    if (b && (r.robust_median_s > b->robust_median_s ||
              (r.robust_median_s == b->robust_median_s && g.first_id > best_first[tier]))) {
      continue;
    }
    b = r;
    best_first[tier] = g.first_id;
  }
  if (best[0] && best[1] && best[0]->robust_median_s >= (1 - kOnceMargin) * best[1]->robust_median_s) return best[1];
  return best[0] ? best[0] : best[1];
}

}  // namespace tf::db
