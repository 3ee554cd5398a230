// memory_budget: how much memory the model tools may give a model's tensors.
//
// Shapes come from the model file, and a 300-byte model can ask for 2^31 floats
// (ConstantOfShape, Expand, Tile, an input's declared shape). Before anything is allocated,
// the reference evaluation, the compiler and `run` check what a model needs against a budget,
// and refuse, naming the node (or input), the shape and the bytes, what does not fit.
//
// The budget is `--max-memory` where a command takes it, else a quarter of this machine's
// memory: the smallest of physical memory, the cgroup's memory.max and RLIMIT_AS / RLIMIT_DATA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tf::graph {

// A quarter of the memory this process may use (see above).
int64_t default_memory_budget();

// "8G", "512M", "64k", "1.5G" (binary units, case-insensitive, an optional trailing B or iB)
// or plain bytes; UserError naming `flag` and the text otherwise, or when not positive.
int64_t parse_memory_size(const std::string& flag, const std::string& text);

// "8.0 GiB", "512 KiB", "100 bytes".
std::string format_bytes(int64_t bytes);

// Bytes of a tensor of `dtype` and `shape` as the tools hold it (float32 4, int64 and bool 8);
// saturates at INT64_MAX.
int64_t tensor_bytes(DType dtype, const Shape& shape);

// UserError "<what> <dtype> <shape> is <bytes>, over the memory budget of <budget> (--max-memory)"
// when one tensor does not fit.
void check_tensor_budget(const std::string& what, DType dtype, const Shape& shape, int64_t budget);

// check_tensor_budget of each input of `g`, and of each output of node `n`, named as the
// errors of the reference evaluation and the compiler name them.
void check_input_budgets(const Graph& g, int64_t budget);
void check_output_budgets(const Graph& g, const Node& n, int64_t budget);

// UserError "<holds> <total> (inputs, outputs and a workspace of <workspace>), over the memory
// budget of ..." when `workspace` and the tensors' bytes together pass the budget (`holds`
// says whose run: "a run of the model would hold", "lib.so: a run holds").
void check_run_budget(const std::string& holds, int64_t workspace, const std::vector<int64_t>& tensor_bytes,
                      int64_t budget);

// What the reference evaluation of `g` holds at its peak, the inputs included, each value
// freed after its last reader: refuses (naming the node) a single value past the budget or a
// peak past it, before anything is allocated.
void check_reference_memory(const Graph& g, int64_t budget);

}  // namespace tf::graph
