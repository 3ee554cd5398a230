// image_loop: running a batched model one image at a time.
//
// A model compiled at batch N runs each kernel over all N images before the next kernel
// starts, so every intermediate is N images large: past the caches, each layer reads its input
// back from memory. Where the model treats the images apart (no operator mixes the rows of
// axis 0), the same results come from the graph at batch 1 run N times, one image's slice of
// every input and output at a time, with a workspace of one image that stays in cache from
// one kernel to the next (docs/models.md, "Batches one image at a time"). ResNet-50 at batch 32
// on a 2-core Zen 5 VM, 1 thread: 69.6 ms an image batched, 48.1 one image at a time.
//
// What it promises:
//   - image_loop(g) returns a loop only when running `per_image` `images` times on
//     consecutive slices of axis 0 computes what `g` computes: every input and output of g has
//     axis 0 of the same size N > 1; the graph rebuilt with axis 0 of its inputs set to 1 infers
//     (every node's shape inference, as import ran it; a Reshape's or Expand's shape or a
//     Resize's sizes that is a constant with N in element 0, for data with N in axis 0, read
//     with 1 there: the exporter's Concat(Shape(x)[0], ...) folded at --dim; a constant of N
//     equal rows read by an elementwise operator or as GatherElements' indices, read as its
//     first row); every value computed
//     from an input is [N, rest...] in g and [1, rest...] in the copy (values that read no input
//     are the same in both); and every node keeps the rows of axis 0 apart (OpDef::rows_apart:
//     elementwise operators and the products do; the others say how, and the unknown ones do not).
//     Otherwise nullopt, with the reason in `why`.
//   - It is a CPU-library choice (compile_model and extract_tasks for CPU targets), taken where
//     it pays (pays_per_image): the batch's intermediates outgrow a cache (images x the largest
//     per-image intermediate > 4 MiB), each image's kernels have work enough to gain from it
//     (8 MFLOP a kernel on average: RegNetY-400MF's 4 do not), and weights that one image uses
//     fewer than 16 times each (a product whose rows are the images: an MLP; a classifier) would
//     take at most a tenth of the arithmetic's time to read at every image. ResNets, DenseNets,
//     SqueezeNet and MobileNet-v2 take it; RegNetY-400MF and MLPs do not. The pass
//     one-image-at-a-time marks the graphs that take it (Graph::one_image_at_a_time;
//     --disable-pass one-image-at-a-time and --opt-level below 2 leave the batch whole).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "graph/graph.h"

namespace tf {
struct Target;
}

namespace tf::graph {

struct ImageLoop {
  int64_t images = 1;  // how many slices of axis 0 (N)
  Graph per_image;     // the graph at one image: axis 0 of every input and output is 1
  // For pays_per_image, at one image: the products' and convolutions' arithmetic, the kernels
  // (nodes but the elementwise ones, which fuse), the largest intermediate, and the bytes of
  // weights used fewer than 16 times each (a product of one row per image: read at every image).
  double flops = 0;
  int64_t kernels = 0;
  int64_t largest_bytes = 0;
  int64_t streamed_weight_bytes = 0;
};

// The loop that computes `g` one image at a time, or nullopt (and the reason in *why).
std::optional<ImageLoop> image_loop(const Graph& g, std::string* why = nullptr);

// Whether one image at a time pays (the rules above).
bool pays_per_image(const ImageLoop& loop);

// The graph a library for `t` compiles in place of `g`: the per-image graph where `t` is a CPU
// and g is marked one_image_at_a_time, else nullopt.
std::optional<ImageLoop> image_loop_for(const Graph& g, const Target& t);

}  // namespace tf::graph
