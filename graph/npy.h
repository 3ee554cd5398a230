// npy: numpy's .npy files for model inputs and outputs (format version 1.0 to 3.0, C order,
// little-endian float32 '<f4', int64 '<i8' and bool '|b1'; float64 '<f8' is read and
// narrowed, int32 '<i4' read and widened to int64).
//
// Promises: a file that is not a .npy, is Fortran-ordered, of another element type, whose
// header is not exactly numpy's dict (the three keys once each, a shape of non-negative
// integers within the graph's tensor limit, nothing but padding after it), or whose data is
// not exactly what the header says is a UserError naming the file and the problem.
#pragma once

#include <cstdint>
#include <string>

#include "graph/graph.h"

namespace tf::graph {

// Refuses a file larger than `max_bytes` (a memory budget) before reading it.
HostTensor read_npy(const std::string& path, int64_t max_bytes = INT64_MAX);
// The same from the file's bytes; `path` names it in errors.
HostTensor parse_npy(const std::string& data, const std::string& path);
// float32, float16 ('<f2'), int64 or bool; bfloat16, which NumPy has no type for, as float32.
void write_npy(const std::string& path, const HostTensor& t);
// `t`, read from an .npy, as a model input of type `want`: a bfloat16 input is given as
// float32 (rounded to nearest even here); others as they are.
HostTensor npy_as_input(HostTensor t, DType want);

}  // namespace tf::graph
