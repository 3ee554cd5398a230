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

}  // namespace tf
