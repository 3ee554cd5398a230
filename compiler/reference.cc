#include "compiler/reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "base/bfloat16.h"
#include "base/error.h"
#include "compiler/operator_table.h"

namespace tf {
namespace {

float epilogue(Epilogue e, double acc, const float* bias, int64_t channel) {
  if (e == Epilogue::Bias || e == Epilogue::BiasRelu) acc += bias[channel];
  if (e == Epilogue::Relu || e == Epilogue::BiasRelu) acc = std::max(acc, 0.0);
  return static_cast<float>(acc);
}

// The bias input (input `at`: after the operator's own inputs), or null without one.
const float* bias_of(const Workload& w, const std::vector<const float*>& in, size_t at = 2) {
  bool has = w.epilogue == Epilogue::Bias || w.epilogue == Epilogue::BiasRelu;
  return has ? in.at(at) : nullptr;
}

// Calls row(r) for every r in [0, rows), the rows shared out over this machine's cores (a
// tuner computes one reference per workload: a 1024^3 matmul took 6.5 s in one loop).
template <class Row>
void for_rows(int64_t rows, Row row) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(rows, 64));
  if (threads <= 1) {
    for (int64_t r = 0; r < rows; ++r) row(r);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t r = t; r < rows; r += threads) row(r);
    });
  }
  for (std::thread& th : pool) th.join();
}

// Row i of a product: out[j] = epilogue(sum over k ascending of a(k) * b(k, j)), the sums in
// double. B's rows are read in order (a k-outer loop over one row of sums), so each output's
// terms add up in the same order as a dot product over k would.
template <class A, class B>
void product_row(const Workload& w, int64_t N, int64_t K, A a, B b, const float* bias, float* out) {
  std::vector<double> acc(static_cast<size_t>(N), 0.0);
  for (int64_t k = 0; k < K; ++k) {
    const double x = a(k);
    for (int64_t j = 0; j < N; ++j) acc[static_cast<size_t>(j)] += x * b(k, j);
  }
  for (int64_t j = 0; j < N; ++j) out[j] = epilogue(w.epilogue, acc[static_cast<size_t>(j)], bias, j);
}

void matmul(const Workload& w, const std::vector<const float*>& in, float* out, int64_t batches) {
  int64_t M = w.get("M"), N = w.get("N"), K = w.get("K");
  const bool tb = w.flag("trans_b");  // B given as [N][K]
  const float* bias = bias_of(w, in);
  for_rows(batches * M, [&](int64_t r) {
    const int64_t b = r / M, i = r % M;
    const float* A = in[0] + b * M * K + i * K;
    const float* B = in[1] + b * K * N;
    float* o = out + r * N;
    if (tb) {
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(A[k]) * B[j * K + k];
        o[j] = epilogue(w.epilogue, acc, bias, j);
      }
      return;
    }
    product_row(w, N, K, [&](int64_t k) { return double(A[k]); }, [&](int64_t k, int64_t j) { return double(B[k * N + j]); },
                bias, o);
  });
}

// QuantizeLinear to uint8 as build_qmatmul computes it: the division and rounding in float,
// the zero point added, the saturating cast to int32 (NaN: 0), the clamp to [0, 255].
int64_t quantize_u8(float x, const float* p) {
  float q = std::nearbyint(x / p[0]) + p[1];
  int64_t i = std::isnan(q) ? 0 : q >= 2147483647.0f ? 2147483647 : q <= -2147483648.0f ? -2147483648 : int64_t(q);
  return std::clamp<int64_t>(i, 0, 255);
}

// An int8 product's data element `v` as the uint8 it multiplies: given as uint8
// (dtype=uint8), its value; float, quantized with p = {scale, zero point}; outside the image
// (`inside` false: padding), the quantized 0.0, the zero point.
int64_t data_byte(const Workload& w, float v, bool inside, const float* p) {
  if (!inside) return quantize_u8(0.0f, p);
  return w.types.data == DType::Uint8 ? static_cast<int64_t>(v) : quantize_u8(v, p);
}

// Byte t of a quad word (an int32 value held as a float), as int8.
int64_t quad_byte(float word_value, int64_t t) {
  auto word = static_cast<uint32_t>(static_cast<int32_t>(word_value));
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * t)));
}

struct ConvDims {
  int64_t N, C, H, W, K, R, S, st, pad, dil, OH, OW;
};

ConvDims conv_dims(const Workload& w, bool depthwise) {
  ConvDims d{};
  d.N = w.get("N"), d.C = w.get("C"), d.H = w.get("H"), d.W = w.get("W");
  d.K = depthwise ? d.C : w.get("K");
  d.R = w.get("R"), d.S = w.get("S"), d.st = w.get("stride"), d.pad = w.get("pad"), d.dil = w.get("dilation");
  d.OH = (d.H + 2 * d.pad - d.dil * (d.R - 1) - 1) / d.st + 1;
  d.OW = (d.W + 2 * d.pad - d.dil * (d.S - 1) - 1) / d.st + 1;
  return d;
}

// Calls f(n, k, oh, ow, c, r, s, h, x) for each term inside the image.
template <typename F>
double conv_point(const ConvDims& d, int64_t oh, int64_t ow, int64_t c0, int64_t c1, F term) {
  double acc = 0;
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t r = 0; r < d.R; ++r) {
      for (int64_t s = 0; s < d.S; ++s) {
        int64_t h = oh * d.st + r * d.dil - d.pad, x = ow * d.st + s * d.dil - d.pad;
        if (h < 0 || h >= d.H || x < 0 || x >= d.W) continue;
        acc += term(c, r, s, h, x);
      }
    }
  }
  return acc;
}

}  // namespace

namespace ops {

void reference_matmul(const Workload& w, const Inputs& in, float* out) { matmul(w, in, out, 1); }
// As build_qmatmul computes it: the quantization in float (a division, round half to even,
// the zero point added), the saturating cast to int32 (NaN to 0), the clamp to [0, 255]; the
// products exact; the scale and offset in double.
void reference_qmatmul(const Workload& w, const Inputs& in, float* out) {
  const int64_t M = w.get("M"), N = w.get("N"), K = w.get("K");
  const float *A = in[0], *B = in[1], *aq = in[2], *scale = in[2] + 2, *offset = in[2] + 2 + N;
  const float* bias = bias_of(w, in, 3);
  auto quant = [&](float x) { return data_byte(w, x, true, aq); };
  // The weights' bytes: byte k % 4 of quad word B[k / 4][j].
  auto weight = [&](int64_t k, int64_t j) { return quad_byte(B[k / 4 * N + j], k % 4); };
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += quant(A[i * K + k]) * weight(k, j);
      // Padding bytes of the last quad (k >= K) meet A's zero bytes.
      double v = double(static_cast<float>(static_cast<int32_t>(acc))) * scale[j] + offset[j];
      out[i * N + j] = epilogue(w.epilogue, v, bias, j);
    }
  }
}

// As build_matmul_bf16 (build_matmul_fp16) computes it: A rounded to bfloat16 (float16; to
// nearest, ties to even), B's halves read from the bits of its words; the products exact, the
// sum in double.
void reference_matmul_pairs(const Workload& w, const Inputs& in, float* out, const HalfPairs& f) {
  const int64_t M = w.get("M"), N = w.get("N"), K = w.get("K");
  const float *A = in[0], *B = in[1];
  const float* bias = bias_of(w, in);
  for_rows(M, [&](int64_t i) {
    product_row(
        w, N, K, [&](int64_t k) { return double(f.round(A[i * K + k])); },
        [&](int64_t k, int64_t j) { return double(f.half(B[k / 2 * N + j], k)); }, bias, out + i * N);
  });
}
void reference_matmul_bf16(const Workload& w, const Inputs& in, float* out) { reference_matmul_pairs(w, in, out, kBF16Pairs); }
void reference_matmul_fp16(const Workload& w, const Inputs& in, float* out) { reference_matmul_pairs(w, in, out, kF16Pairs); }

void reference_batch_matmul(const Workload& w, const Inputs& in, float* out) { matmul(w, in, out, w.get("B")); }

// group=G: filter k reads channels [g * C/G, (g + 1) * C/G) of its group g = k / (K/G).
void reference_conv2d_nchw(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, false);
  const int64_t Cg = d.C / w.get("group"), Kg = d.K / w.get("group");
  const float *data = in[0], *wt = in[1], *bias = bias_of(w, in);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const int64_t c0 = k / Kg * Cg;
          double acc = conv_point(d, oh, ow, c0, c0 + Cg,
                                  [&](int64_t c, int64_t r, int64_t s, int64_t h, int64_t x) {
                                    return double(data[((n * d.C + c) * d.H + h) * d.W + x]) *
                                           wt[((k * Cg + c - c0) * d.R + r) * d.S + s];
                                  });
          out[((n * d.K + k) * d.OH + oh) * d.OW + ow] = epilogue(w.epilogue, acc, bias, k);
        }
}

void reference_conv2d_nhwc(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, false);
  const float *data = in[0], *wt = in[1], *bias = bias_of(w, in);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t oh = 0; oh < d.OH; ++oh)
      for (int64_t ow = 0; ow < d.OW; ++ow)
        for (int64_t k = 0; k < d.K; ++k) {
          double acc = conv_point(d, oh, ow, 0, d.C, [&](int64_t c, int64_t r, int64_t s, int64_t h, int64_t x) {
            return double(data[((n * d.H + h) * d.W + x) * d.C + c]) * wt[((r * d.S + s) * d.C + c) * d.K + k];
          });
          out[((n * d.OH + oh) * d.OW + ow) * d.K + k] = epilogue(w.epilogue, acc, bias, k);
        }
}

void reference_depthwise_conv2d_nchw(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, true);
  const float *data = in[0], *wt = in[1], *bias = bias_of(w, in);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          double acc = conv_point(d, oh, ow, c, c + 1, [&](int64_t cc, int64_t r, int64_t s, int64_t h, int64_t x) {
            return double(data[((n * d.C + cc) * d.H + h) * d.W + x]) * wt[(cc * d.R + r) * d.S + s];
          });
          out[((n * d.C + c) * d.OH + oh) * d.OW + ow] = epilogue(w.epilogue, acc, bias, c);
        }
}

// NCHWc: data [N][C/ib][H][W][ib], weight [K/ob][span/ib][R][S][ib][ob], out [N][K/ob][OH][OW][ob]:
// output block k/ob reads the span input channels from start(k/ob) (NchwcGroups), every
// weight as given (a model's are zero where two groups meet).
void reference_conv2d_nchwc(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, false);
  int64_t ib = w.get("ic_block"), ob = w.get("oc_block");
  const NchwcGroups gr = nchwc_groups(w);
  const int64_t span = gr.span();
  const float *data = in[0], *wt = in[1], *bias = bias_of(w, in);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const int64_t c0 = gr.start(k / ob);
          double acc = conv_point(
              d, oh, ow, c0, c0 + span, [&](int64_t c, int64_t r, int64_t s, int64_t h, int64_t x) {
                double v = data[(((n * (d.C / ib) + c / ib) * d.H + h) * d.W + x) * ib + c % ib];
                const int64_t cl = c - c0;
                return v * wt[((((k / ob) * (span / ib) + cl / ib) * d.R + r) * d.S + s) * ib * ob +
                              (cl % ib) * ob + k % ob];
              });
          out[(((n * (d.K / ob) + k / ob) * d.OH + oh) * d.OW + ow) * ob + k % ob] =
              epilogue(w.epilogue, acc, bias, k);
        }
}

// As build_conv2d_nchwc_bf16 (_fp16): the data rounded to bfloat16 (float16), the weights'
// halves read from the bits of their words, the products exact, the sum in double.
void reference_conv2d_nchwc_pairs(const Workload& w, const Inputs& in, float* out, const HalfPairs& f) {
  ConvDims d = conv_dims(w, false);
  const int64_t ib = w.get("ic_block"), ob = w.get("oc_block");
  const float *data = in[0], *B = in[1], *bias = bias_of(w, in);
  auto weight = [&](int64_t k, int64_t c, int64_t r, int64_t s) {
    return f.half(B[((((k / ob) * (d.C / 2) + c / 2) * d.R + r) * d.S + s) * ob + k % ob], c);
  };
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          double acc = conv_point(d, oh, ow, 0, d.C, [&](int64_t c, int64_t r, int64_t s, int64_t h, int64_t x) {
            float v = data[(((n * (d.C / ib) + c / ib) * d.H + h) * d.W + x) * ib + c % ib];
            return double(f.round(v)) * weight(k, c, r, s);
          });
          out[(((n * (d.K / ob) + k / ob) * d.OH + oh) * d.OW + ow) * ob + k % ob] = epilogue(w.epilogue, acc, bias, k);
        }
}
void reference_conv2d_nchwc_bf16(const Workload& w, const Inputs& in, float* out) {
  reference_conv2d_nchwc_pairs(w, in, out, kBF16Pairs);
}
void reference_conv2d_nchwc_fp16(const Workload& w, const Inputs& in, float* out) {
  reference_conv2d_nchwc_pairs(w, in, out, kF16Pairs);
}

// As build_qconv2d_nchwc: every tap sums, the padding's being the quantized 0.0.
void reference_qconv2d_nchwc(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, false);
  const int64_t ib = w.get("ic_block"), ob = w.get("oc_block");
  const float *data = in[0], *B = in[1], *p = in[2];
  const float* bias = bias_of(w, in, 3);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          int64_t acc = 0;
          for (int64_t c = 0; c < d.C; ++c)
            for (int64_t r = 0; r < d.R; ++r)
              for (int64_t s = 0; s < d.S; ++s) {
                int64_t h = oh * d.st + r * d.dil - d.pad, x = ow * d.st + s * d.dil - d.pad;
                bool inside = h >= 0 && h < d.H && x >= 0 && x < d.W;
                float v = inside ? data[(((n * (d.C / ib) + c / ib) * d.H + h) * d.W + x) * ib + c % ib] : 0.0f;
                float word = B[((((k / ob) * (d.C / 4) + c / 4) * d.R + r) * d.S + s) * ob + k % ob];
                acc += data_byte(w, v, inside, p) * quad_byte(word, c % 4);
              }
          double v = double(static_cast<float>(static_cast<int32_t>(acc))) * p[2 + k] + p[2 + d.K + k];
          out[(((n * (d.K / ob) + k / ob) * d.OH + oh) * d.OW + ow) * ob + k % ob] = epilogue(w.epilogue, v, bias, k);
        }
}

// data [N][C/b][H][W][b], weight [C/b][width][R][S][b], out [N][C/b][OH][OW][b]: output
// channel c sums input channels c / width * width + i, i < width.
void reference_depthwise_conv2d_nchwc(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, true);
  int64_t b = w.get("block"), g = w.get("width");
  const float *data = in[0], *wt = in[1], *bias = bias_of(w, in);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const int64_t c0 = c / g * g;
          double acc = conv_point(
              d, oh, ow, c0, c0 + g, [&](int64_t cc, int64_t r, int64_t s, int64_t h, int64_t x) {
                double v = data[(((n * (d.C / b) + cc / b) * d.H + h) * d.W + x) * b + cc % b];
                return v * wt[((((c / b) * g + cc - c0) * d.R + r) * d.S + s) * b + c % b];
              });
          out[(((n * (d.C / b) + c / b) * d.OH + oh) * d.OW + ow) * b + c % b] =
              epilogue(w.epilogue, acc, bias, c);
        }
}

// As build_qdepthwise_conv2d_nchwc computes it: the data's bytes (given, or quantized), the
// padding the zero point, the sum exact, then scale and offset.
void reference_qdepthwise_conv2d_nchwc(const Workload& w, const Inputs& in, float* out) {
  ConvDims d = conv_dims(w, true);
  const int64_t b = w.get("block");
  const float *data = in[0], *wt = in[1], *p = in[2];
  const float* bias = bias_of(w, in, 3);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          double acc = 0;
          for (int64_t r = 0; r < d.R; ++r)
            for (int64_t s = 0; s < d.S; ++s) {
              int64_t h = oh * d.st + r * d.dil - d.pad, x = ow * d.st + s * d.dil - d.pad;
              bool inside = h >= 0 && h < d.H && x >= 0 && x < d.W;
              float v = inside ? data[(((n * (d.C / b) + c / b) * d.H + h) * d.W + x) * b + c % b] : 0.0f;
              acc += double(data_byte(w, v, inside, p)) * wt[(((c / b) * d.R + r) * d.S + s) * b + c % b];
            }
          double v = double(static_cast<float>(acc)) * p[2 + c] + p[2 + d.C + c];
          out[(((n * (d.C / b) + c / b) * d.OH + oh) * d.OW + ow) * b + c % b] = epilogue(w.epilogue, v, bias, c);
        }
}

}  // namespace ops

void reference_compute(const Workload& w, const std::vector<const float*>& inputs, float* output) {
  const OperatorDef* def = find_operator(w.op);
  TF_CHECK(def, "no reference for ", w.op);
  if (w.types.precision == Precision::Float32) return def->reference(w, inputs, output);
  // Reduced precision: the two operands rounded as the products round them (a bias is not).
  OpGraph g = build_op(w);
  TF_CHECK(inputs.size() >= 2 && g.inputs.size() == inputs.size(), "reference of ", w.canonical(), ": ",
           inputs.size(), " inputs");
  float (*round)(float) = precision_rounding(w.types.precision);
  std::vector<std::vector<float>> rounded(2);
  std::vector<const float*> in = inputs;
  for (size_t i = 0; i < 2; ++i) {
    rounded[i].resize(static_cast<size_t>(ir::num_elements(g.inputs[i]->shape)));
    for (size_t j = 0; j < rounded[i].size(); ++j) rounded[i][j] = round(inputs[i][j]);
    in[i] = rounded[i].data();
  }
  def->reference(w, in, output);
}

OutputCheck check_against_reference(const OpGraph& g, const std::vector<const float*>& inputs, const float* output) {
  std::vector<float> ref(static_cast<size_t>(ir::num_elements(g.output->shape)));
  reference_compute(g.workload, inputs, ref.data());
  return compare_with_reference(g, ref.data(), output);
}

OutputCheck compare_with_reference(const OpGraph& g, const float* ref, const float* output) {
  const int64_t n = ir::num_elements(g.output->shape);
  int64_t terms = 1;
  for (const ir::IterVar& iv : g.acc->reduce_axes) terms *= iv.extent;
  if (g.check_terms > 0) terms = g.check_terms;
  OutputCheck c;
  c.tolerance = 1e-5 + 2e-7 * static_cast<double>(terms);
  for (int64_t i = 0; i < n; ++i) {
    double err = std::fabs(double(output[i]) - double(ref[i]));
    if (g.check_relative) err /= std::max(1.0, std::fabs(double(ref[i])));
    if (std::isnan(err)) err = INFINITY;
    if (err > c.max_abs_error || c.worst_index < 0) {
      c.max_abs_error = err;
      c.worst_index = i;
    }
  }
  return c;
}

}  // namespace tf
