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

void check_record(const MeasureRecord& r) {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  auto text = [&](const std::string& value, const char* name, size_t max_len, bool required) {
    if (required && value.empty()) fail(std::string(name) + " is empty");
    if (value.size() > max_len) {
      fail(std::string(name) + " has " + std::to_string(value.size()) + " characters, over the limit of " +
           std::to_string(max_len));
    }
  };
  // Shown as 1e+19 rather than std::to_string's 20 digits.
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  auto in_range = [&](double v, const char* name, double lo, double hi) {
    if (!std::isfinite(v) || v < lo || v > hi) {
      fail(std::string(name) + " " + number(v) + " is not in [" + number(lo) + ", " + number(hi) + "]");
    }
  };
  text(r.workload, "workload", kMaxNameLength, true);
  text(r.op, "op", kMaxNameLength, true);
  text(r.target, "target", kMaxNameLength, true);
  text(r.arch, "arch", kMaxNameLength, true);
  text(r.device_key, "device_key", kMaxNameLength, false);
  text(r.device_model, "device_model", kMaxNameLength, false);
  text(r.toolchain, "toolchain", kMaxNameLength, false);
  text(r.template_name, "template", kMaxNameLength, true);
  text(r.run_uuid, "run", kMaxNameLength, false);
  text(r.error_msg, "error_msg", kMaxErrorMsgLength, false);
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
  in_range(r.settings.min_repeat_ms, "settings.min_repeat_ms", 0, kMaxSeconds * 1e3);
  in_range(r.settings.cooldown_ms, "settings.cooldown_ms", 0, kMaxSeconds * 1e3);
  in_range(r.compile_s, "compile_s", 0, kMaxSeconds);
  // measured_at must be a date a calendar can show: after 1970, before the year 10000.
  if (!(r.measured_at > 0)) fail("measured_at is not set");
  in_range(r.measured_at, "measured_at", 0, kMaxTimestamp);
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
  auto name = [](const char* field, const std::string& value, bool required) {
    if ((required && value.empty()) || value.size() > kMaxNameLength) {
      throw std::invalid_argument(std::string("verdict: ") + field + " is " +
                                  (value.empty() ? "empty" : std::to_string(value.size()) + " characters") +
                                  " (1 to " + std::to_string(kMaxNameLength) + ")");
    }
  };
  name("workload", v.workload, true);
  name("target", v.target, true);
  name("template", v.template_name, true);
  name("config_hash", v.config_hash, true);
  name("run_uuid", v.run_uuid, false);
  if (!std::isfinite(v.speedup) || v.speedup < 0 || v.speedup > kMaxSeconds) {
    throw std::invalid_argument("verdict: speedup " + std::to_string(v.speedup) + " is not a finite number >= 0");
  }
  if (!std::isfinite(v.decided_at) || v.decided_at < 0 || v.decided_at > kMaxTimestamp) {
    throw std::invalid_argument("verdict: decided_at " + std::to_string(v.decided_at) + " is not a Unix time");
  }
}

void check_model_result(const ModelResult& m) {
  auto name = [](const char* field, const std::string& value) {
    if (value.empty() || value.size() > kMaxNameLength) {
      throw std::invalid_argument(std::string("model result: ") + field + " is " +
                                  (value.empty() ? "empty" : std::to_string(value.size()) + " characters") +
                                  " (1 to " + std::to_string(kMaxNameLength) + ")");
    }
  };
  name("model", m.model);
  name("model_hash", m.model_hash);
  name("target", m.target);
  name("device_key", m.device_key);
  for (auto [field, v] : {std::pair{"tuned_s", m.tuned_s}, {"default_s", m.default_s}, {"estimate_s", m.estimate_s}}) {
    if (!std::isfinite(v) || v < 0 || v > kMaxSeconds) {
      throw std::invalid_argument(std::string("model result: ") + field + " " + std::to_string(v) +
                                  " is not a time in seconds");
    }
  }
  if (m.tuned_kernels < 0 || m.tunable_kernels < m.tuned_kernels || m.tunable_kernels > kMaxParamValue) {
    throw std::invalid_argument("model result: " + std::to_string(m.tuned_kernels) + " tuned of " +
                                std::to_string(m.tunable_kernels) + " tunable kernels");
  }
  if (!m.configs.is_array() || m.configs.dump().size() > kMaxErrorMsgLength * 16) {
    throw std::invalid_argument("model result: configs is not an array of at most 1 MiB");
  }
  if (!std::isfinite(m.measured_at) || m.measured_at < 0 || m.measured_at > kMaxTimestamp) {
    throw std::invalid_argument("model result: measured_at " + std::to_string(m.measured_at) + " is not a Unix time");
  }
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
