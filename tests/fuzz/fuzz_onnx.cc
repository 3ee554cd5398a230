// libFuzzer target: ONNX import (hostile model files), then the graph passes, task
// extraction, the fusion and memory plans and the nodes' kernel expressions on whatever imports
// (and on its graph at one image, where it has one). Bad input must be a UserError, never
// a crash, a hang or an allocation without bound.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "graph/fusion.h"
#include "graph/image_loop.h"
#include "graph/memory_plan.h"
#include "graph/node_te.h"
#include "graph/onnx_import.h"
#include "graph/pass.h"
#include "graph/tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tf::graph::Graph g = tf::graph::import_onnx_bytes(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
    tf::graph::PassOptions o;
    o.channel_block = 8;  // as for an AVX2 target: transform-conv-layout runs too
    tf::graph::run_passes(g, o);
    tf::graph::extract_tasks(g);
    // The memory plan as a compile makes it: Concats in place where they can be.
    const std::vector<tf::graph::FusedGroup> fused = tf::graph::plan_fusion(g);
    const std::vector<tf::graph::InPlaceConcat> in_place = tf::graph::in_place_concats(g, fused);
    tf::graph::plan_memory(g, tf::graph::without_in_place(fused, in_place), in_place);
    tf::graph::check_node_expressions(g);  // what import runs: each node's kernel expression
    // The graph at one image, where the model keeps its images apart (graph/image_loop.h): what a
    // CPU library of a batch may compile instead.
    if (std::optional<tf::graph::ImageLoop> loop = tf::graph::image_loop(g)) {
      tf::graph::extract_tasks(loop->per_image);
      tf::graph::check_node_expressions(loop->per_image);
    }
  } catch (const tf::UserError&) {
  }
  return 0;
}
