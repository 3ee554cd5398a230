// Winograd minimal filtering for 3x3 stride-1 convolutions (Lavin and Gray, "Fast Algorithms
// for Convolutional Neural Networks", 2015): F(m x m, 3 x 3) computes an m x m output tile
// from an (m+2) x (m+2) input tile with (m+2)^2 multiplications per channel pair instead of
// 9 m^2 (F(4x4,3x3): 36 against 144).
//
//   Y = A^T [ sum over input channels c of U_c (.) V_c ] A,   U = G g G^T,   V = B^T d B
//
// g is a 3x3 filter, d an input tile, (.) the elementwise product. The operator
// conv2d_winograd_nchwc (compiler/operator_table.h) takes U, transformed ahead of time from
// the NCHWc weights by winograd_weight_transform: a compiled model does it at compile time,
// once, as it packs other constant weights.
//
// A dilated convolution (dilation d) is d x d undilated ones: the outputs whose row is r mod d
// read only the input rows r - pad + d t (tap k of output r + d u reads t = u + k), and the
// same for columns. Each such class is tiled as an undilated convolution (winograd_tiling):
// DeepLab's atrous ResNet layers (rates 2 and 4) take the multiplications Winograd saves.
#pragma once

#include <cstdint>
#include <vector>

namespace tf {

struct WinogradMatrices {
  int m = 0;      // output tile
  int alpha = 0;  // input tile, m + 2
  // Row-major: bt is alpha x alpha, g is alpha x 3, at is m x alpha. Every entry of bt and
  // at is a small integer (exact in float); g's fractions are applied in double at transform
  // time.
  std::vector<double> bt, g, at;
};

// The tiles of F(m x m, 3 x 3) over one image of H x W with `pad` and `dilation`: every
// residue class (row mod dilation) takes as many tiles as the largest, the first; tile row
// th is class th / per_h, tile th % per_h of it (so for dilation 1, th is the tile row).
struct WinogradTiling {
  int64_t m = 0;
  int64_t oh = 0, ow = 0;        // the output's size
  int64_t per_h = 0, per_w = 0;  // tiles per residue class along each axis
  int64_t nh = 0, nw = 0;        // dilation * per_h, dilation * per_w
  // The output's share of the nh x nw tiles' m^2 outputs (1 where the tiles fit exactly).
  double useful() const;
};
WinogradTiling winograd_tiling(int64_t H, int64_t W, int64_t pad, int64_t dilation, int64_t m);

// The matrices of F(m x m, 3 x 3) for m = 2 or 4 (the interpolation points 0, 1, -1 and,
// for m = 4, 2, -2, with the point at infinity); nullptr for another m.
const WinogradMatrices* winograd_matrices(int m);

// U[alpha][alpha][K/ob][C][ob] of NCHWc weights [K/ob][C/ib][3][3][ib][ob].
std::vector<float> winograd_weight_transform(const float* weight, int64_t K, int64_t C, int64_t ib, int64_t ob,
                                             int m);

}  // namespace tf
