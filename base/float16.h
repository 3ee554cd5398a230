// IEEE float16 (binary16) on the host: 1 sign, 5 exponent (bias 15), 10 fraction bits.
// Rounding to nearest, ties to even, as the kernels' conversion does (compiler/ir.h round_f16);
// past the largest half (65504; 65520 and above round away) to infinity; subnormals kept; a
// NaN stays a quiet NaN with its sign and top payload. Done with integer arithmetic, so it
// needs neither F16C nor _Float16.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tf {

inline uint16_t f16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  f &= 0x7FFFFFFFu;
  if (f > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((f >> 13) & 0x3FFu));  // NaN
  if (f >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (and inf): inf
  if (f < 0x38800000u) {
    // Below 2^-14: a subnormal half, in units of 2^-24 (the scaling is exact; nearbyint rounds
    // half to even in the default rounding mode).
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::bit_cast<float>(f) * 0x1p24f)));
  }
  // Normal: the exponent rebiased (127 -> 15), the 13 dropped fraction bits rounded to even.
  const uint32_t r = f - (112u << 23);
  return static_cast<uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
}

inline float f16_value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));
  if (e == 0) return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(std::ldexp(static_cast<float>(m), -24)));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// x rounded to the nearest float16, as a float.
inline float round_f16(float x) { return f16_value(f16_bits(x)); }

// Pairs in int32 words (matmul_fp16's weights, compiler/operators.cc): lo and hi rounded to
// float16, lo in the low half, the word's bits carried in a float (as kernel arguments and
// constants hold them).
inline float f16_pair(float lo, float hi) {
  return std::bit_cast<float>(static_cast<uint32_t>(f16_bits(lo)) | static_cast<uint32_t>(f16_bits(hi)) << 16);
}

// Half t (0: low, 1: high) of a pair word held in a float, as a float.
inline float f16_half(float word, int64_t t) {
  const auto bits = std::bit_cast<uint32_t>(word);
  return f16_value(static_cast<uint16_t>(t % 2 ? bits >> 16 : bits & 0xFFFFu));
}

}  // namespace tf
