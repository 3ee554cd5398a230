// The packed layout of a kernel input (a compiled model's constant weights, packed once at
// compile time; a board packs a tuning kernel's input the same way: proto ArgSpec.pack_block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf {

// `data` of `shape` with dimension `dim` cut into blocks of `block`: [blocks][the other
// dimensions...][block], zero-filled past the dimension's end (Schedule::pack's layout).
std::vector<float> pack_layout(const std::vector<float>& data, const std::vector<int64_t>& shape, size_t dim,
                               int64_t block);

// How many elements pack_layout gives.
int64_t packed_elements(const std::vector<int64_t>& shape, size_t dim, int64_t block);

// The largest block a measurement may ask a board to pack an input in (proto ArgSpec).
constexpr int64_t kMaxPackBlock = 4096;

}  // namespace tf
