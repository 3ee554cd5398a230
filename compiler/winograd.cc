#include "compiler/winograd.h"

#include <algorithm>
#include <functional>

#include "base/error.h"
#include "compiler/operator_table.h"

namespace tf {

const WinogradMatrices* winograd_matrices(int m) {
  static const WinogradMatrices f2{
      2, 4,
      {1, 0, -1, 0,  //
       0, 1, 1, 0,   //
       0, -1, 1, 0,  //
       0, 1, 0, -1},
      {1, 0, 0,        //
       0.5, 0.5, 0.5,  //
       0.5, -0.5, 0.5, //
       0, 0, 1},
      {1, 1, 1, 0,  //
       0, 1, -1, -1}};
  static const WinogradMatrices f4{
      4, 6,
      {4, 0, -5, 0, 1, 0,    //
       0, -4, -4, 1, 1, 0,   //
       0, 4, -4, -1, 1, 0,   //
       0, -2, -1, 2, 1, 0,   //
       0, 2, -1, -2, 1, 0,   //
       0, 4, 0, -5, 0, 1},
      {1.0 / 4, 0, 0,                 //
       -1.0 / 6, -1.0 / 6, -1.0 / 6,  //
       -1.0 / 6, 1.0 / 6, -1.0 / 6,   //
       1.0 / 24, 1.0 / 12, 1.0 / 6,   //
       1.0 / 24, -1.0 / 12, 1.0 / 6,  //
       0, 0, 1},
      {1, 1, 1, 1, 1, 0,    //
       0, 1, -1, 2, -2, 0,  //
       0, 1, 1, 4, 4, 0,    //
       0, 1, -1, 8, -8, 1}};
  if (m == 2) return &f2;
  if (m == 4) return &f4;
  return nullptr;
}

double WinogradTiling::useful() const {
  if (nh == 0 || nw == 0) return 0;
  return double(oh) / double(nh * m) * (double(ow) / double(nw * m));
}

WinogradTiling winograd_tiling(int64_t H, int64_t W, int64_t pad, int64_t dilation, int64_t m) {
  WinogradTiling t;
  t.m = m;
  t.oh = conv_out(H, 3, 1, pad, dilation);
  t.ow = conv_out(W, 3, 1, pad, dilation);
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  t.per_h = ceil_div(ceil_div(t.oh, dilation), m);
  t.per_w = ceil_div(ceil_div(t.ow, dilation), m);
  t.nh = dilation * t.per_h;
  t.nw = dilation * t.per_w;
  return t;
}

std::vector<float> winograd_weight_transform(const float* weight, int64_t K, int64_t C, int64_t ib, int64_t ob,
                                             int m) {
  const WinogradMatrices* wm = winograd_matrices(m);
  TF_CHECK(wm, "no Winograd matrices for m=", m);
  const int64_t a = wm->alpha;
  std::vector<float> u(static_cast<size_t>(a * a * K * C));
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t c = 0; c < C; ++c) {
      double g[3][3];
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s)
          g[r][s] = weight[((((k / ob) * (C / ib) + c / ib) * 3 + r) * 3 + s) * ib * ob + (c % ib) * ob + k % ob];
      double gg[8][3] = {};  // G g
      for (int64_t x = 0; x < a; ++x)
        for (int s = 0; s < 3; ++s)
          for (int r = 0; r < 3; ++r) gg[x][s] += wm->g[x * 3 + r] * g[r][s];
      for (int64_t x = 0; x < a; ++x)
        for (int64_t y = 0; y < a; ++y) {
          double v = 0;  // (G g G^T)[x][y]
          for (int s = 0; s < 3; ++s) v += gg[x][s] * wm->g[y * 3 + s];
          u[static_cast<size_t>((((x * a + y) * (K / ob) + k / ob) * C + c) * ob + k % ob)] = static_cast<float>(v);
        }
    }
  }
  return u;
}

namespace ops {

// The operator's definition, in double: each output tile is A^T [sum_c U_c (.) B^T d_c B] A.
void reference_conv2d_winograd_nchwc(const Workload& w, const Inputs& in, float* out) {
  int64_t N = w.get("N"), C = w.get("C"), H = w.get("H"), W = w.get("W"), K = w.get("K");
  int64_t pad = w.get("pad"), ib = w.get("ic_block"), ob = w.get("oc_block"), m = w.get("tile");
  int64_t d = w.get("dilation");
  const WinogradMatrices& wm = *winograd_matrices(static_cast<int>(m));
  const int64_t a = wm.alpha;
  const WinogradTiling t = winograd_tiling(H, W, pad, d, m);
  const int64_t OH = t.oh, OW = t.ow;
  const float *data = in[0], *u = in[1];
  bool bias = w.epilogue == Epilogue::Bias || w.epilogue == Epilogue::BiasRelu;
  bool relu = w.epilogue == Epilogue::Relu || w.epilogue == Epilogue::BiasRelu;
  std::vector<double> vt(static_cast<size_t>(C * a * a)), acc(static_cast<size_t>(a * a));
  // Tile (th, tw): residue class (rh, rw), tile (sh, sw) of it; its output (i, j) is row
  // rh + d (sh m + i), its input (i, j) row rh - pad + d (sh m + i), columns likewise.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t th = 0; th < t.nh; ++th)
      for (int64_t tw = 0; tw < t.nw; ++tw) {
        const int64_t rh = th / t.per_h, sh = th % t.per_h, rw = tw / t.per_w, sw = tw % t.per_w;
        for (int64_t c = 0; c < C; ++c) {  // V = B^T d B
          double dt[8][8], tt[8][8] = {};
          for (int64_t i = 0; i < a; ++i)
            for (int64_t j = 0; j < a; ++j) {
              int64_t h = rh - pad + d * (sh * m + i), x = rw - pad + d * (sw * m + j);
              bool in_image = h >= 0 && h < H && x >= 0 && x < W;
              dt[i][j] = in_image ? data[(((n * (C / ib) + c / ib) * H + h) * W + x) * ib + c % ib] : 0.0;
            }
          for (int64_t xi = 0; xi < a; ++xi)
            for (int64_t j = 0; j < a; ++j)
              for (int64_t i = 0; i < a; ++i) tt[xi][j] += wm.bt[static_cast<size_t>(xi * a + i)] * dt[i][j];
          for (int64_t xi = 0; xi < a; ++xi)
            for (int64_t nu = 0; nu < a; ++nu) {
              double s = 0;
              for (int64_t j = 0; j < a; ++j) s += tt[xi][j] * wm.bt[static_cast<size_t>(nu * a + j)];
              vt[static_cast<size_t>((c * a + xi) * a + nu)] = s;
            }
        }
        for (int64_t k = 0; k < K; ++k) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t xi = 0; xi < a; ++xi)
            for (int64_t nu = 0; nu < a; ++nu)
              for (int64_t c = 0; c < C; ++c)
                acc[static_cast<size_t>(xi * a + nu)] +=
                    double(u[(((xi * a + nu) * (K / ob) + k / ob) * C + c) * ob + k % ob]) *
                    vt[static_cast<size_t>((c * a + xi) * a + nu)];
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < m; ++j) {
              const int64_t oh = rh + d * (sh * m + i), ow = rw + d * (sw * m + j);
              if (oh >= OH || ow >= OW) continue;
              double y = 0;
              for (int64_t xi = 0; xi < a; ++xi)
                for (int64_t nu = 0; nu < a; ++nu)
                  y += wm.at[static_cast<size_t>(i * a + xi)] * wm.at[static_cast<size_t>(j * a + nu)] *
                       acc[static_cast<size_t>(xi * a + nu)];
              if (bias) y += in[2][k];
              if (relu) y = std::max(y, 0.0);
              out[(((n * (K / ob) + k / ob) * OH + oh) * OW + ow) * ob + k % ob] = static_cast<float>(y);
            }
        }
      }
}

}  // namespace ops
}  // namespace tf
