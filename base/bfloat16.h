// bfloat16 on the host: the upper 16 bits of a float32. Rounding to nearest, ties to even, as
// the kernels' conversion does (compiler/ir.h bf16x2); a NaN stays a quiet NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tf {

inline uint16_t bf16_bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float bf16_value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// x rounded to the nearest bfloat16, as a float.
inline float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

// Pairs in int32 words (compiler/ir.h bf16x2): lo and hi rounded to bfloat16, lo in the low
// half, the word's bits carried in a float (as kernel arguments and constants hold them).
inline float bf16_pair(float lo, float hi) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16_bits(lo)) | static_cast<uint32_t>(bf16_bits(hi)) << 16);
}

// Half t (0: low, 1: high) of a pair word held in a float, as a float.
inline float bf16_half(float word, int64_t t) {
  const auto bits = std::bit_cast<uint32_t>(word);
  return bf16_value(static_cast<uint16_t>(t % 2 ? bits >> 16 : bits));
}

}  // namespace tf
