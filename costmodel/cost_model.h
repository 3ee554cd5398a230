// CostModel: predicts which schedule candidates run fastest, from their features.
//
// Promises: fit() learns from a TrainingSet and replaces what the model knew; predict() gives
// one score per row, higher meaning faster, and is deterministic for a fitted model; a model
// saves to a file and loads back to identical predictions. Only the order of scores is
// meaningful (a ranking objective has no unit). Failures of the model library throw
// std::runtime_error; a file that is not a model of this feature set throws UserError naming
// the file.
//
// Implementations: XGBoostModel (costmodel/xgboost_model.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tf::costmodel {

// Rows of features grouped by workload: a ranking objective compares rows of one group only.
// A row's label is its throughput relative to the fastest correct row of its group (1 for the
// fastest, 0.5 for one twice as slow), and 0 for a failed candidate, which ranks last.
struct TrainingSet {
  size_t num_features = 0;
  std::vector<float> features;    // rows x num_features, row-major
  std::vector<float> labels;      // one per row
  std::vector<unsigned> groups;   // rows per group, in row order

  size_t rows() const { return labels.size(); }
  // Adds one group: the features of each candidate and its measured cost in seconds (+inf
  // or 0 for a failure). Groups with no correct row are dropped: they say nothing of speed.
  void add_group(const std::vector<std::vector<float>>& rows, const std::vector<double>& costs_s);
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // Learns from `data` (at least one row). Replaces the earlier fit.
  virtual void fit(const TrainingSet& data) = 0;
  // Whether fit() or load() gave it something to predict with.
  virtual bool trained() const = 0;
  // One score per row of `rows` (n rows of num_features each); higher is predicted faster.
  virtual std::vector<float> predict(const std::vector<float>& rows, size_t n) const = 0;
  virtual void save(const std::string& path) const = 0;
  virtual void load(const std::string& path) = 0;
};

}  // namespace tf::costmodel
