#include "graph/quantize.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "base/error.h"
#include "graph/onnx_import.h"
#include "graph/reference_run.h"

namespace tf::graph {
namespace {

// The clipping threshold t of values whose magnitudes have histogram `hist` (bins of equal
// width from 0): the one whose histogram, clipped at t and quantized to `levels` bins, is
// closest to the clipped one in KL divergence (the entropy calibration of TensorRT and ONNX
// Runtime). In bins from 0.
size_t entropy_threshold(const std::vector<double>& hist, size_t levels) {
  const size_t n = hist.size();
  double best = INFINITY;
  size_t best_i = n;
  std::vector<double> p, q;
  for (size_t i = levels; i <= n; ++i) {
    // P: the first i bins, the values past them clipped into the last.
    p.assign(hist.begin(), hist.begin() + static_cast<std::ptrdiff_t>(i));
    for (size_t k = i; k < n; ++k) p[i - 1] += hist[k];
    // Q: those i bins merged into `levels` groups, each group's count spread evenly over its
    // non-empty bins (an empty bin stays empty: its values would not exist).
    q.assign(i, 0.0);
    for (size_t g = 0; g < levels; ++g) {
      const size_t from = g * i / levels, to = (g + 1) * i / levels;
      double sum = 0;
      size_t nonzero = 0;
      for (size_t k = from; k < to; ++k) {
        sum += hist[k];
        nonzero += hist[k] != 0;
      }
      for (size_t k = from; k < to; ++k) q[k] = hist[k] != 0 ? sum / static_cast<double>(nonzero) : 0;
    }
    double ps = 0, qs = 0;
    for (size_t k = 0; k < i; ++k) {
      ps += p[k];
      qs += q[k];
    }
    if (ps == 0 || qs == 0) continue;
    double kl = 0;
    for (size_t k = 0; k < i; ++k) {
      if (p[k] == 0) continue;
      // A bin Q leaves empty where P is not (the clipped-in last one) costs as a tiny count.
      const double pk = p[k] / ps, qk = std::max(q[k], 1e-4) / qs;
      kl += pk * std::log(pk / qk);
    }
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return best_i;
}

// The range [lo, hi] of a tensor's values over the samples: min and max; with a percentile
// p < 100, the p-th percentile of the values above and below; or by entropy, min and max
// clipped to the threshold of entropy_threshold over the magnitudes.
struct Range {
  std::vector<float> values;  // kept for percentiles and entropy
  float lo = INFINITY, hi = -INFINITY;
  void add(const HostTensor& t, bool keep) {
    for (float v : t.f) {
      if (std::isnan(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (keep) values.push_back(v);
    }
  }
  void finish(const QuantizeOptions& o) {
    if (values.empty() || o.method == Calibration::MinMax) return;
    if (o.method == Calibration::Percentile && o.percentile < 100) {
      auto at = [&](double q) {
        auto k = static_cast<size_t>(std::llround(q / 100.0 * static_cast<double>(values.size() - 1)));
        std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
        return values[k];
      };
      hi = at(o.percentile);
      lo = at(100 - o.percentile);
    }
    if (o.method == Calibration::Entropy) {
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      if (amax > 0 && std::isfinite(amax)) {
        constexpr size_t kBins = 2048;
        std::vector<double> hist(kBins, 0.0);
        // Exact zeros (a Relu's floor, padding) are left out: the zero point keeps 0 exact, and
        // their spike in the first bin would make every merge of it look costly, so the
        // threshold would shrink until no bins merge.
        for (float v : values) {
          if (v != 0) hist[std::min(kBins - 1, static_cast<size_t>(std::fabs(v) / amax * kBins))] += 1;
        }
        // Values of one sign (after a Relu) spread over all 255 levels of uint8; of both signs,
        // or int8 symmetric, each side has 128.
        const size_t levels = !o.symmetric && (lo >= 0 || hi <= 0) ? 255 : 128;
        const float t = static_cast<float>(entropy_threshold(hist, levels)) * amax / kBins;
        hi = std::min(hi, t);
        lo = std::max(lo, -t);
      }
    }
    values.clear();
    values.shrink_to_fit();
  }
};

// Scale and zero point of an activation's range (uint8 asymmetric, or int8 symmetric): the
// range always holds 0, so zero (padding, a Relu's floor) is exact.
std::pair<float, int32_t> activation_params(const Range& r, bool symmetric) {
  float lo = std::min(0.0f, std::isfinite(r.lo) ? r.lo : 0.0f), hi = std::max(0.0f, std::isfinite(r.hi) ? r.hi : 0.0f);
  if (symmetric) {
    float m = std::max(-lo, hi);
    return {m > 0 ? m / 127.0f : 1.0f, 0};
  }
  float s = (hi - lo) / 255.0f;
  if (!(s > 0) || !std::isfinite(s)) return {1.0f, 0};
  auto z = static_cast<int32_t>(std::nearbyint(-lo / s));
  return {s, std::clamp(z, 0, 255)};
}

onnx::TensorProto* add_initializer(onnx::GraphProto& g, const std::string& name, int type, const std::vector<int64_t>& dims) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

std::string bytes_of(const std::vector<int32_t>& v) {
  std::string r;
  for (int32_t x : v) r.push_back(static_cast<char>(x));
  return r;
}

}  // namespace

std::string quantize_model(const std::string& bytes, const std::string& what,
                           const std::vector<std::map<std::string, HostTensor>>& samples,
                           const QuantizeOptions& o, QuantizeReport* report) {
  if (o.method == Calibration::Percentile && !(o.percentile > 50 && o.percentile <= 100))
    throw UserError(str("percentile ", o.percentile, " is not in (50, 100]"));
  if (samples.empty()) throw UserError("no calibration samples");
  Graph g = import_onnx_bytes(bytes, what, o.bind);
  onnx::ModelProto m;
  m.ParseFromString(bytes);  // import parsed it already
  onnx::GraphProto& gp = *m.mutable_graph();
  for (const std::string& in : g.inputs) {
    for (size_t k = 0; k < samples.size(); ++k) {
      if (!samples[k].count(in)) throw UserError(str(what, ": calibration sample ", k, " has no input '", in, "'"));
    }
  }
  // Float initializers, read from the file: the imported graph may have merged equal ones
  // (a model whose layers share copies of the same weights), and each reader is quantized.
  // Exporters give each copy a name of its own through an Identity (PyTorch), which the
  // import drops: a weight is found through those too.
  std::map<std::string, const onnx::TensorProto*> float_inits;
  for (const auto& t : gp.initializer()) {
    if (t.data_type() == onnx::TensorProto::FLOAT) float_inits[t.name()] = &t;
  }
  for (bool more = true; more;) {
    more = false;
    for (const auto& n : gp.node()) {
      if (n.op_type() == "Identity" && n.input_size() == 1 && n.output_size() == 1 && float_inits.count(n.input(0)) &&
          !float_inits.count(n.output(0))) {
        float_inits[n.output(0)] = float_inits.at(n.input(0));
        more = true;
      }
    }
  }
  // The anchors' activations (computed float32 values or model inputs) and constant weights.
  std::vector<std::string> acts;
  std::map<std::string, int64_t> weights;  // name -> per-channel axis
  int anchors = 0;
  for (const auto& n : gp.node()) {
    const std::string& op = n.op_type();
    if ((op != "Conv" && op != "MatMul" && op != "Gemm") || n.input_size() < 2) continue;
    ++anchors;
    const std::string& x = n.input(0);
    if (g.values.count(x) && !g.is_constant(x) && g.value(x).dtype == DType::F32 &&
        std::find(acts.begin(), acts.end(), x) == acts.end())
      acts.push_back(x);
    const std::string& w = n.input(1);
    if (float_inits.count(w)) {
      int64_t rank = float_inits.at(w)->dims_size();
      int64_t axis = 0;
      if (op == "MatMul") axis = rank - 1;
      if (op == "Gemm") {
        int64_t trans_b = 0;
        for (const auto& a : n.attribute()) {
          if (a.name() == "transB") trans_b = a.i();
        }
        axis = trans_b ? 0 : 1;
      }
      if (rank >= 1) weights[w] = axis;
    }
  }
  if (anchors == 0) throw UserError(str(what, ": nothing to quantize: the model has no Conv, MatMul or Gemm"));

  // Calibration: the activations' ranges over the samples.
  std::map<std::string, Range> ranges;
  Graph probe = g;
  probe.outputs.clear();
  for (const std::string& a : acts) {
    if (!g.is_input(a)) probe.outputs.push_back(a);
  }
  const bool keep = o.method == Calibration::Entropy || (o.method == Calibration::Percentile && o.percentile < 100);
  for (const auto& sample : samples) {
    std::map<std::string, HostTensor> feeds;
    for (const std::string& in : g.inputs) feeds[in] = sample.at(in);
    std::map<std::string, HostTensor> out = probe.outputs.empty() ? std::map<std::string, HostTensor>{}
                                                                   : run_reference(probe, feeds);
    for (const std::string& a : acts) ranges[a].add(g.is_input(a) ? feeds.at(a) : out.at(a), keep);
  }
  for (auto& [name, r] : ranges) r.finish(o);

  // Fresh names beside the model's.
  std::set<std::string> used;
  for (const auto& t : gp.initializer()) used.insert(t.name());
  for (const auto& i : gp.input()) used.insert(i.name());
  for (const auto& n : gp.node()) {
    for (const auto& y : n.output()) used.insert(y);
    used.insert(n.name());
  }
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; used.count(name); ++k) name = str(base, "_", k);
    used.insert(name);
    return name;
  };
  const bool per_channel = o.per_channel && g.opset >= 13;
  const auto act_type = o.symmetric ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;

  // The pairs and weights, each emitted right before its first reader.
  std::map<std::string, std::string> replaced;  // tensor -> its dequantized name
  std::vector<onnx::NodeProto> pending;
  auto qdq_node = [&](const std::string& op, std::vector<std::string> in, const std::string& out, int64_t axis) {
    onnx::NodeProto n;
    n.set_op_type(op);
    n.set_name(fresh(out + "/" + op));
    for (const std::string& s : in) n.add_input(s);
    n.add_output(out);
    if (axis >= 0) {
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(axis);
    }
    pending.push_back(n);
  };
  auto quantize_activation = [&](const std::string& x) {
    auto [s, z] = activation_params(ranges.at(x), o.symmetric);
    std::string sn = fresh(x + "_scale"), zn = fresh(x + "_zero_point");
    add_initializer(gp, sn, onnx::TensorProto::FLOAT, {})->add_float_data(s);
    add_initializer(gp, zn, act_type, {})->set_raw_data(bytes_of({z}));
    std::string q = fresh(x + "_quantized"), dq = fresh(x + "_dequantized");
    qdq_node("QuantizeLinear", {x, sn, zn}, q, -1);
    qdq_node("DequantizeLinear", {q, sn, zn}, dq, -1);
    replaced[x] = dq;
  };
  auto quantize_weight = [&](const std::string& w, int64_t axis) {
    const HostTensor t = tensor_from_onnx(*float_inits.at(w), str(what, ": initializer '", w, "'"));
    const Shape& shape = t.shape;
    const int64_t channels = per_channel ? shape[static_cast<size_t>(axis)] : 1;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    auto channel_of = [&](int64_t k) { return per_channel ? (k / inner) % channels : 0; };
    std::vector<float> amax(static_cast<size_t>(channels), 0.0f);
    for (int64_t k = 0; k < t.size(); ++k) {
      float v = std::fabs(t.f[static_cast<size_t>(k)]);
      if (std::isfinite(v)) amax[channel_of(k)] = std::max(amax[channel_of(k)], v);
    }
    std::vector<float> scale(amax.size());
    for (size_t c = 0; c < amax.size(); ++c) scale[c] = amax[c] > 0 ? amax[c] / 127.0f : 1.0f;
    std::vector<int32_t> q(static_cast<size_t>(t.size()));
    for (int64_t k = 0; k < t.size(); ++k) {
      float v = std::nearbyint(t.f[static_cast<size_t>(k)] / scale[channel_of(k)]);
      q[static_cast<size_t>(k)] = static_cast<int32_t>(std::clamp(std::isfinite(v) ? v : 0.0f, -127.0f, 127.0f));
    }
    std::string qn = fresh(w + "_quantized"), sn = fresh(w + "_scale"), zn = fresh(w + "_zero_point");
    add_initializer(gp, qn, onnx::TensorProto::INT8, shape)->set_raw_data(bytes_of(q));
    std::vector<int64_t> pdims = per_channel ? std::vector<int64_t>{channels} : std::vector<int64_t>{};
    onnx::TensorProto* st = add_initializer(gp, sn, onnx::TensorProto::FLOAT, pdims);
    for (float s : scale) st->add_float_data(s);
    add_initializer(gp, zn, onnx::TensorProto::INT8, pdims)->set_raw_data(bytes_of(std::vector<int32_t>(scale.size(), 0)));
    std::string dq = fresh(w + "_dequantized");
    qdq_node("DequantizeLinear", {qn, sn, zn}, dq, per_channel ? axis : -1);
    replaced[w] = dq;
  };

  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  nodes.Swap(gp.mutable_node());
  std::set<std::string> quantized_weights;
  int readers = 0;
  for (onnx::NodeProto& n : nodes) {
    const std::string& op = n.op_type();
    bool anchor = (op == "Conv" || op == "MatMul" || op == "Gemm") && n.input_size() >= 2;
    if (anchor) {
      bool any = false;
      if (ranges.count(n.input(0))) {
        if (!replaced.count(n.input(0))) quantize_activation(n.input(0));
        n.set_input(0, replaced.at(n.input(0)));
        any = true;
      }
      if (weights.count(n.input(1))) {
        if (!replaced.count(n.input(1))) quantize_weight(n.input(1), weights.at(n.input(1)));
        quantized_weights.insert(n.input(1));
        n.set_input(1, replaced.at(n.input(1)));
        any = true;
      }
      readers += any;
    }
    for (onnx::NodeProto& p : pending) *gp.add_node() = std::move(p);
    pending.clear();
    *gp.add_node() = std::move(n);
  }
  // Float weights nothing reads any more are dropped.
  std::set<std::string> still_read;
  for (const auto& n : gp.node()) {
    for (const auto& in : n.input()) still_read.insert(in);
  }
  for (const auto& out : gp.output()) still_read.insert(out.name());
  auto* inits = gp.mutable_initializer();
  for (int k = inits->size() - 1; k >= 0; --k) {
    if (quantized_weights.count(inits->Get(k).name()) && !still_read.count(inits->Get(k).name())) inits->DeleteSubrange(k, 1);
  }
  if (report) {
    report->activations = static_cast<int>(ranges.size());
    report->weights = static_cast<int>(quantized_weights.size());
    report->nodes = readers;
    report->per_channel = per_channel;
  }
  return m.SerializeAsString();
}

}  // namespace tf::graph
