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
  const WinogradMatrices& wm = *winograd_matrices(static_cast<int>(m));
  const int64_t a = wm.alpha;
  int64_t OH = conv_out(H, 3, 1, pad, 1), OW = conv_out(W, 3, 1, pad, 1);
  const float *data = in[0], *u = in[1];
  bool bias = w.epilogue == Epilogue::Bias || w.epilogue == Epilogue::BiasRelu;
  bool relu = w.epilogue == Epilogue::Relu || w.epilogue == Epilogue::BiasRelu;
  std::vector<double> vt(static_cast<size_t>(C * a * a)), acc(static_cast<size_t>(a * a));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t th = 0; th * m < OH; ++th)
      for (int64_t tw = 0; tw * m < OW; ++tw) {
        for (int64_t c = 0; c < C; ++c) {  // V = B^T d B
          double d[8][8], t[8][8] = {};
          for (int64_t i = 0; i < a; ++i)
            for (int64_t j = 0; j < a; ++j) {
              int64_t h = th * m + i - pad, x = tw * m + j - pad;
              bool in_image = h >= 0 && h < H && x >= 0 && x < W;
              d[i][j] = in_image ? data[(((n * (C / ib) + c / ib) * H + h) * W + x) * ib + c % ib] : 0.0;
            }
          for (int64_t xi = 0; xi < a; ++xi)
            for (int64_t j = 0; j < a; ++j)
              for (int64_t i = 0; i < a; ++i) t[xi][j] += wm.bt[static_cast<size_t>(xi * a + i)] * d[i][j];
          for (int64_t xi = 0; xi < a; ++xi)
            for (int64_t nu = 0; nu < a; ++nu) {
              double s = 0;
              for (int64_t j = 0; j < a; ++j) s += t[xi][j] * wm.bt[static_cast<size_t>(nu * a + j)];
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
          for (int64_t i = 0; i < m && th * m + i < OH; ++i)
            for (int64_t j = 0; j < m && tw * m + j < OW; ++j) {
              double y = 0;
              for (int64_t xi = 0; xi < a; ++xi)
                for (int64_t nu = 0; nu < a; ++nu)
                  y += wm.at[static_cast<size_t>(i * a + xi)] * wm.at[static_cast<size_t>(j * a + nu)] *
                       acc[static_cast<size_t>(xi * a + nu)];
              if (bias) y += in[2][k];
              if (relu) y = std::max(y, 0.0);
              int64_t oh = th * m + i, ow = tw * m + j;
              out[(((n * (K / ob) + k / ob) * OH + oh) * OW + ow) * ob + k % ob] = static_cast<float>(y);
            }
        }
      }
}

}  // namespace ops
}  // namespace tf
