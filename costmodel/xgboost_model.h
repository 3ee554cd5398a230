// XGBoostModel: the CostModel of tunefarm, gradient-boosted trees through XGBoost's C API.
//
// The default objective is pairwise ranking (rank:pairwise), which learns which of two
// candidates of one workload is faster and so compares across shapes of different scale;
// regression on the relative throughput (reg:squarederror) is the option. Trees are built
// with the hist method on one thread with a fixed seed, so a fit is reproducible and leaves
// the other core to the builds and measurements it overlaps with.
#pragma once

#include <memory>
#include <string>

#include "costmodel/cost_model.h"

namespace tf::costmodel {

struct XGBoostOptions {
  std::string objective = "rank:pairwise";  // or reg:squarederror
  int rounds = 60;
  int max_depth = 6;
  double eta = 0.2;
  double min_child_weight = 1;
  int threads = 1;
  uint64_t seed = 0;
};

// The objectives fit() accepts, for --help and error messages.
const std::vector<std::string>& xgboost_objectives();

class XGBoostModel : public CostModel {
 public:
  // Throws UserError for an unknown objective or a non-positive rounds/depth.
  explicit XGBoostModel(XGBoostOptions o = {});
  ~XGBoostModel() override;
  XGBoostModel(const XGBoostModel&) = delete;
  XGBoostModel& operator=(const XGBoostModel&) = delete;

  std::string name() const override { return "xgboost " + opts_.objective; }
  void fit(const TrainingSet& data) override;
  bool trained() const override { return booster_ != nullptr; }
  std::vector<float> predict(const std::vector<float>& rows, size_t n) const override;
  void save(const std::string& path) const override;
  void load(const std::string& path) override;

 private:
  XGBoostOptions opts_;
  void* booster_ = nullptr;  // BoosterHandle
};

}  // namespace tf::costmodel
