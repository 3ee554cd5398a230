// npy: numpy's .npy files for model inputs and outputs (format version 1.0 to 3.0, C order,
// little-endian float32 '<f4', int64 '<i8' and bool '|b1'; float64 '<f8' is read and
// narrowed, int32 '<i4' read and widened to int64).
//
// Promises: a file that is not a .npy, is Fortran-ordered, of another element type, or
// shorter than its header says is a UserError naming the file and the problem.
#pragma once

#include <string>

#include "graph/graph.h"

namespace tf::graph {

HostTensor read_npy(const std::string& path);
void write_npy(const std::string& path, const HostTensor& t);  // float32, int64 or bool

}  // namespace tf::graph
