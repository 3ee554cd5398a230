#include "costmodel/xgboost_model.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "base/error.h"
#include "costmodel/features.h"

namespace tf::costmodel {
namespace {

void xgb_check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(str("xgboost ", what, ": ", XGBGetLastError()));
}

struct DMatrixDeleter {
  void operator()(void* h) const { XGDMatrixFree(h); }
};
using DMatrix = std::unique_ptr<void, DMatrixDeleter>;

DMatrix make_matrix(const std::vector<float>& rows, size_t n, size_t cols) {
  TF_CHECK(rows.size() == n * cols, "feature rows hold ", rows.size(), " values, expected ", n, " x ", cols);
  DMatrixHandle h = nullptr;
  xgb_check(XGDMatrixCreateFromMat(rows.data(), n, cols, NAN, &h), "matrix");
  return DMatrix(h);
}

// Stored in the model file: a model is only loaded by a tunefarm computing the same features.
std::string feature_tag() {
  std::string all;
  for (const std::string& n : feature_names()) all += n + ",";
  return str("v1:", kNumFeatures, ":", std::hash<std::string>{}(all));
}

}  // namespace

void TrainingSet::add_group(const std::vector<std::vector<float>>& rows, const std::vector<double>& costs_s) {
  TF_CHECK(rows.size() == costs_s.size(), "rows and costs differ in number");
  double best = INFINITY;
  for (double c : costs_s) {
    if (std::isfinite(c) && c > 0) best = std::min(best, c);
  }
  if (!std::isfinite(best) || rows.empty()) return;
  if (num_features == 0) num_features = rows[0].size();
  for (size_t i = 0; i < rows.size(); ++i) {
    TF_CHECK(rows[i].size() == num_features, "row of ", rows[i].size(), " features, expected ", num_features);
    features.insert(features.end(), rows[i].begin(), rows[i].end());
    double c = costs_s[i];
    labels.push_back(std::isfinite(c) && c > 0 ? static_cast<float>(best / c) : 0.0f);
  }
  groups.push_back(static_cast<unsigned>(rows.size()));
}

const std::vector<std::string>& xgboost_objectives() {
  static const std::vector<std::string> o = {"rank:pairwise", "reg:squarederror"};
  return o;
}

XGBoostModel::XGBoostModel(XGBoostOptions o) : opts_(std::move(o)) {
  const auto& known = xgboost_objectives();
  if (std::find(known.begin(), known.end(), opts_.objective) == known.end()) {
    throw UserError(str("cost model objective '", opts_.objective, "': not one of rank:pairwise, reg:squarederror"));
  }
  if (opts_.rounds < 1 || opts_.max_depth < 1) {
    throw UserError(str("cost model rounds ", opts_.rounds, " and depth ", opts_.max_depth, " must be at least 1"));
  }
}

XGBoostModel::~XGBoostModel() {
  if (booster_) XGBoosterFree(booster_);
}

void XGBoostModel::fit(const TrainingSet& data) {
  TF_CHECK(data.rows() > 0, "fit on an empty training set");
  DMatrix m = make_matrix(data.features, data.rows(), data.num_features);
  xgb_check(XGDMatrixSetFloatInfo(m.get(), "label", data.labels.data(), data.labels.size()), "labels");
  xgb_check(XGDMatrixSetUIntInfo(m.get(), "group", data.groups.data(), data.groups.size()), "groups");
  DMatrixHandle mats[] = {m.get()};
  BoosterHandle b = nullptr;
  xgb_check(XGBoosterCreate(mats, 1, &b), "booster");
  auto set = [&](const char* k, const std::string& v) { xgb_check(XGBoosterSetParam(b, k, v.c_str()), k); };
  try {
    set("objective", opts_.objective);
    set("tree_method", "hist");
    set("max_depth", std::to_string(opts_.max_depth));
    set("eta", std::to_string(opts_.eta));
    set("min_child_weight", std::to_string(opts_.min_child_weight));
    set("nthread", std::to_string(opts_.threads));
    set("seed", std::to_string(opts_.seed));
    set("verbosity", "0");
    for (int i = 0; i < opts_.rounds; ++i) xgb_check(XGBoosterUpdateOneIter(b, i, m.get()), "training");
    xgb_check(XGBoosterSetAttr(b, "tunefarm_features", feature_tag().c_str()), "attribute");
  } catch (...) {
    XGBoosterFree(b);
    throw;
  }
  if (booster_) XGBoosterFree(booster_);
  booster_ = b;
}

std::vector<float> XGBoostModel::predict(const std::vector<float>& rows, size_t n) const {
  TF_CHECK(booster_, "predict before fit or load");
  if (n == 0) return {};
  DMatrix m = make_matrix(rows, n, kNumFeatures);
  bst_ulong len = 0;
  const float* out = nullptr;
  xgb_check(XGBoosterPredict(booster_, m.get(), 0, 0, 0, &len, &out), "prediction");
  TF_CHECK(len == n, "xgboost predicted ", len, " values for ", n, " rows");
  return std::vector<float>(out, out + len);
}

void XGBoostModel::save(const std::string& path) const {
  TF_CHECK(booster_, "save before fit or load");
  if (XGBoosterSaveModel(booster_, path.c_str()) != 0) {
    throw UserError(str("cannot write cost model ", path, ": ", XGBGetLastError()));
  }
}

void XGBoostModel::load(const std::string& path) {
  if (!std::ifstream(path).good()) throw UserError(str("cost model ", path, ": cannot open the file"));
  BoosterHandle b = nullptr;
  xgb_check(XGBoosterCreate(nullptr, 0, &b), "booster");
  auto fail = [&](const std::string& why) {
    XGBoosterFree(b);
    throw UserError(str("cost model ", path, ": ", why));
  };
  if (XGBoosterLoadModel(b, path.c_str()) != 0) fail(str("not an XGBoost model (", XGBGetLastError(), ")"));
  const char* tag = nullptr;
  int found = 0;
  if (XGBoosterGetAttr(b, "tunefarm_features", &tag, &found) != 0 || !found) {
    fail("not a tunefarm cost model (no feature tag)");
  }
  if (feature_tag() != tag) {
    fail(str("made for other features (", tag, "; this tunefarm computes ", feature_tag(), ")"));
  }
  bst_ulong nf = 0;
  if (XGBoosterGetNumFeature(b, &nf) != 0 || nf != kNumFeatures) {
    fail(str("has ", nf, " features, expected ", kNumFeatures));
  }
  if (booster_) XGBoosterFree(booster_);
  booster_ = b;
}

}  // namespace tf::costmodel
