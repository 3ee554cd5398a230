#include "tuner/config_space.h"

#include <random>

#include "base/error.h"

namespace tf {

using json = nlohmann::json;

ConfigSpace::ConfigSpace(const Workload& w, const Target& t)
    : workload_(w), target_(t), graph_(build_op(w)), template_id_(template_name(w, t)),
      knobs_(knob_space(graph_, t)) {
  for (const KnobSpec& k : knobs_) {
    TF_CHECK(!k.candidates.empty(), "knob ", k.name, " has no candidates");
    if (size_ > UINT64_MAX / k.candidates.size()) throw UserError(str("the space of ", template_id_, " for ",
                                                                      w.canonical(), " has over 2^64 points"));
    size_ *= k.candidates.size();
  }
}

std::vector<size_t> ConfigSpace::digits(uint64_t index) const {
  TF_CHECK(index < size_, "config index ", index, " out of a space of ", size_);
  std::vector<size_t> d(knobs_.size());
  for (size_t i = knobs_.size(); i-- > 0;) {
    d[i] = static_cast<size_t>(index % knobs_[i].candidates.size());
    index /= knobs_[i].candidates.size();
  }
  return d;
}

uint64_t ConfigSpace::index_of(const std::vector<size_t>& d) const {
  TF_CHECK(d.size() == knobs_.size(), "digits for ", d.size(), " knobs, space has ", knobs_.size());
  uint64_t index = 0;
  for (size_t i = 0; i < knobs_.size(); ++i) {
    TF_CHECK(d[i] < knobs_[i].candidates.size(), "digit ", d[i], " of knob ", knobs_[i].name);
    index = index * knobs_[i].candidates.size() + d[i];
  }
  return index;
}

json ConfigSpace::to_config(uint64_t index) const {
  std::vector<size_t> d = digits(index);
  json c = json::object();
  for (size_t i = 0; i < knobs_.size(); ++i) c[knobs_[i].name] = knobs_[i].candidates[d[i]];
  return c;
}

std::optional<uint64_t> ConfigSpace::index_of(const json& config) const {
  json c;
  try {
    c = complete_config(graph_, target_, config);
  } catch (const UserError&) {
    return std::nullopt;
  }
  std::vector<size_t> d(knobs_.size());
  for (size_t i = 0; i < knobs_.size(); ++i) {
    const auto& cands = knobs_[i].candidates;
    auto it = std::find(cands.begin(), cands.end(), c[knobs_[i].name]);
    if (it == cands.end()) return std::nullopt;
    d[i] = static_cast<size_t>(it - cands.begin());
  }
  return index_of(d);
}

std::string ConfigSpace::why_pruned(uint64_t index) const {
  return check_constraints(graph_, target_, to_config(index));
}

uint64_t ConfigSpace::valid_size() const {
  if (valid_size_) return *valid_size_;
  uint64_t n = 0;
  if (size_ <= kExactCountLimit) {
    for (uint64_t i = 0; i < size_; ++i) n += valid(i);
  } else {
    std::mt19937_64 rng(1);
    const uint64_t samples = 2000;
    for (uint64_t s = 0; s < samples; ++s) n += valid(rng() % size_);
    n = static_cast<uint64_t>(static_cast<double>(n) / samples * static_cast<double>(size_));
  }
  valid_size_ = n;
  return n;
}

std::optional<uint64_t> ConfigSpace::default_index() const { return index_of(default_config(graph_, target_)); }

std::vector<json> ConfigSpace::template_seeds() const { return seed_configs(graph_, target_); }

json ConfigSpace::to_json() const {
  json knobs = json::array();
  for (const KnobSpec& k : knobs_) {
    knobs.push_back({{"name", k.name}, {"kind", knob_kind_name(k.kind)}, {"help", k.help}, {"candidates", k.candidates}});
  }
  return {{"template", template_id_}, {"size", size_}, {"valid_size", valid_size()},
          {"valid_size_exact", valid_size_exact()}, {"knobs", knobs}};
}

}  // namespace tf
