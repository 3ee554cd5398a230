#include "runtime/pack_layout.h"

namespace tf {

std::vector<float> pack_layout(const std::vector<float>& data, const std::vector<int64_t>& shape, size_t dim,
                               int64_t block) {
  // Packed [blocks][other dims...][block]; element (b, rest..., x) is the input at dim = b*block+x.
  int64_t extent = shape.at(dim), inner = 1, outer = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  for (size_t d = 0; d < dim; ++d) outer *= shape[d];
  std::vector<float> out(static_cast<size_t>(packed_elements(shape, dim, block)), 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < extent; ++e)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t b = e / block, x = e % block;
        out[static_cast<size_t>(((b * outer + o) * inner + i) * block + x)] =
            data[static_cast<size_t>((o * extent + e) * inner + i)];
      }
  return out;
}

int64_t packed_elements(const std::vector<int64_t>& shape, size_t dim, int64_t block) {
  int64_t n = (shape.at(dim) + block - 1) / block * block;
  for (size_t d = 0; d < shape.size(); ++d)
    if (d != dim) n *= shape[d];
  return n;
}

}  // namespace tf
