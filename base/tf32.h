// TF32 on the host: a float32 with the 13 low bits of its mantissa dropped, rounded to
// nearest with ties away from zero, as NVIDIA's cvt.rna.tf32.f32 rounds the operands of a
// TF32 tensor-core product (compiler/ir.h kMmaTF32). Infinities and NaNs stay as they are.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tf {

inline float round_tf32(float x) {
  if (!std::isfinite(x)) return x;
  return std::bit_cast<float>((std::bit_cast<uint32_t>(x) + 0x1000u) & ~0x1FFFu);
}

}  // namespace tf
