// conv2d_nchwc.cpu: NCHWc (blocked) convolutions on CPUs. A register tile is tile_w output
// columns by tile_kb blocks of output channels, each block one or more vectors; each input
// element broadcast, each weight row of a block one contiguous vector. No packing or copy
// back: the layouts are the blocked ones.
//
// v2: a 1x1 convolution of stride 1 without padding reads and writes a block's positions as
// one run of OH x OW (its rows follow each other in both layouts), so its register tile is
// tile_w consecutive positions of that run, not of one row: a 7 x 7 layer's 49 positions are
// 10 tiles of 5 (the last shifted back by one) where v1 made 2 tiles of 5 a row for 7 columns
// (30% of the products thrown away). tile_w counts positions there, hence the version.
//
// v3: a 1x1 convolution of stride s > 1 without padding first copies the pixels it reads
// (every s-th of every s-th row) into a unit-stride copy, `<data>.unit_stride`, computed at
// root, and is then the flat 1x1 convolution of v2 over it: its broadcasts read whole cache
// lines (the strided reads used one position of each two a line holds) and its tile runs
// over OH x OW positions. oneDNN's 1x1 kernels copy the same way ("reduce to unit stride").
// Other convolutions with rows under 32 columns whose default row tile leaves a shifted tile
// in every row (7 columns by 4 or 5 on AVX2) tile their positions as one run too, each
// position of a tile reading the window at its own row and column: unless their blocks each
// read channels of their own (a grouped layer whose default tile is one block of 7-10
// positions: one run would need an address register per position, and RegNetY's 14 x 14
// layer ran 0.8x). Rows the row tile divides keep it (their positions share one address).
// tile_w counts positions wherever the positions are one run: which layers those are
// depends on the target's registers (its default tile), as tuning records do.
#include "compiler/ir_mutator.h"
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

// Rows of fewer output columns than this that their default row tile does not divide tile
// their positions as one run (ResNet-50's 3x3 layers on Zen 3, 1 thread, alternating: 7 x 7
// 1.15x, 14 x 14 1.04-1.06x, 512-channel stride 2 to 7 x 7 1.10-1.21x; 28 x 28 1.00x and
// 56 x 56 1.02x, where a tile of 4 divides the rows).
constexpr int64_t kShortRow = 32;

// Whether the convolution is 1x1 without padding (of stride 1, or over a unit-stride copy of
// its input).
bool one_by_one(const OpGraph& g) {
  const Workload& w = g.workload;
  return w.get("R") == 1 && w.get("S") == 1 && w.get("pad") == 0;
}

// Whether the convolution's positions are one run on target `t`: 1x1 ones without padding,
// and others of short rows, not divided by their default row tile, whose blocks share their
// input channels.
bool flat_positions(const OpGraph& g, const Target& t) {
  if (one_by_one(g)) return true;
  const int64_t ow = out_extent(g, 3);
  return ow < kShortRow && !blocks_read_own_channels(g) && ow % blocked_tile(g, t, /*depthwise=*/false).second != 0;
}

// A flat convolution whose input rows (C channels x its OH x OW positions, float32) take
// more than kChunkedInput runs them (knob chunk=auto) in chunks of about kChunk of them: each
// tile of output channels sweeps every position through all C channels, so past the caches
// every tile read the whole input again from memory, in C / ic_block streams a block's plane
// apart. FCN-ResNet50's 2048 -> 512 1x1 layer at 40x40 (13 MB of input), 1 thread on Zen 5:
// 47-51 GF/s in most runs (the same layer at 20x20: 220-236); in chunks of 40-400 positions
// 176-219. Chunks of 512 KB, inside the L2 cache, over chunks of 2 MB (DeepLabv3-ResNet50's
// 1x1 layers at 40x40 and 32x32, 10 runs each, GF/s): 2048 -> 256 152 against 149, 1024 -> 256
// 180 against 119, 1024 -> 2048 224 against 177, 2048 -> 256 at 32x32 227 against 179.
// Explicit sizes chunk any flat convolution; none never does.
constexpr int64_t kChunkedInput = int64_t{4} << 20, kChunk = int64_t{512} << 10;
const std::vector<std::string> kChunkChoices = {"auto", "none", "128K", "256K", "512K", "1M", "2M"};
int64_t chunk_positions(const OpGraph& g, const json& c) {
  const std::string choice = c.value("chunk", std::string("auto"));
  const int64_t C = g.workload.get("C"), positions = out_extent(g, 2) * out_extent(g, 3);
  int64_t bytes = 0;
  if (choice == "auto") {
    if (C * positions * 4 <= kChunkedInput) return 0;
    bytes = kChunk;
  } else if (choice != "none") {
    bytes = std::stoll(choice) << (choice.back() == 'M' ? 20 : 10);
  }
  return bytes ? std::max<int64_t>(1, bytes / (C * 4)) : 0;
}

// Layers whose output-channel tiles have at most this many position tiles prefetch the next
// channel tile's weights by default (knob prefetch): a channel tile's weights come from
// memory in a model (ResNeXt-50 streams its 96 MB of weights through a 32 MB L3 in every
// call) and the first position tile that reads them waits for them, while the next channel
// tile's can arrive during this one's tiles. Where a channel tile has few position tiles the
// wait is a large share of its time: ResNeXt-50's 1024 -> 2048 1x1 layer at 7 x 7 (7 tiles),
// 1 thread on Zen 5, 0.91 against 0.99 ms alone with caches flushed, 2.96 against 3.30 ms for
// its 3 calls in the model; where it has many, the weights stay in the L2 cache over them and
// the prefetches are load slots lost (its 14 x 14 layers, 28 tiles: no gain; 28 x 28 and
// 56 x 56 layers 3-7% slower). Prefetching every position tile's share only (1/7 of the lines
// each) gave nothing at 7 x 7: the first tile's requests arrive in time, a trickle does not.
// And only where a channel tile's weights take at most kPrefetchBytes, so that two of them
// and the input stay in a 1 MB L2 cache: ResNet-50's 512-channel 3x3 layer at 7 x 7 (576 KB
// of weights a tile) ran 1.25x slower prefetching, the tile it reused evicted by the next.
constexpr int64_t kPrefetchTiles = 8, kPrefetchBytes = int64_t{256} << 10;

// The unit-stride copy's stage name for input `data`.
std::string unit_stride_name(const ir::Tensor& data) { return data->name + ".unit_stride"; }

// Reads of `from` become reads of `to` at (n, c, oh, ow, cb): the indices' batch, channel
// block and lane kept, the row and column the output's.
class ReadsAtOutputPosition final : public ir::IRMutator {
 public:
  ReadsAtOutputPosition(const ir::Operation* from, ir::Tensor to, Expr oh, Expr ow)
      : from_(from), to_(std::move(to)), oh_(std::move(oh)), ow_(std::move(ow)) {}
  Expr mutate_expr(const Expr& e) override {
    Expr m = ir::IRMutator::mutate_expr(e);
    if (const ir::TensorRead* r = m.as<ir::TensorRead>(); r && r->op.get() == from_) {
      TF_CHECK(r->indices.size() == 5, "a blocked convolution's input has 5 axes, not ", r->indices.size());
      return ir::read(to_, {r->indices[0], r->indices[1], oh_, ow_, r->indices[4]});
    }
    return m;
  }

 private:
  const ir::Operation* from_;
  ir::Tensor to_;
  Expr oh_, ow_;
};

// Whether the default config (register tile tw x tkb) prefetches weights: at most
// kPrefetchTiles position tiles per channel tile, whose weights take at most kPrefetchBytes.
bool prefetches_by_default(const OpGraph& g, const Target& t, int64_t tw, int64_t tkb) {
  const int64_t oh = out_extent(g, 2), ow = out_extent(g, 3);
  const int64_t tiles = flat_positions(g, t) ? (oh * ow + tw - 1) / tw : oh * ((ow + tw - 1) / tw);
  const ir::Tensor& w = g.inputs[1];  // [K / ob][...]: a channel block's weights
  return tiles <= kPrefetchTiles && ir::num_elements(w->shape) / w->shape[0] * tkb * w->dtype.bytes() <= kPrefetchBytes;
}

class Conv2dNchwcCpu final : public NchwcConvTemplate {
 public:
  Conv2dNchwcCpu() : NchwcConvTemplate("conv2d_nchwc.cpu", 3, {"conv2d_nchwc"}, TargetKind::Llvm) {}

  SplitAxis split_axis(const OpGraph& g, const Target& t, const std::string& knob) const override {
    if (knob == "tile_w" && flat_positions(g, t)) return {out_extent(g, 2) * out_extent(g, 3), false, true};
    return NchwcConvTemplate::split_axis(g, t, knob);
  }

  // The flat form: the reduction over [N][K/ob][1][OH * OW][ob] (position p at row p / OW,
  // column p % OW), the output reading it at oh * OW + ow; of stride s > 1, reading the
  // unit-stride copy [N][C/ib][OH][OW][ib] of the pixels it uses.
  OpGraph schedule_graph(const OpGraph& g, const Target& t, const json&) const override {
    if (!flat_positions(g, t)) return g;
    const ir::Tensor& old = g.acc;
    const ir::Reduce* red = old->reduce();
    TF_CHECK(red && old->axes.size() == 5, id(), ": ", old->name, " is not a blocked convolution's reduction");
    const int64_t oh = old->shape[2], ow = old->shape[3], stride = g.workload.get("stride");
    ir::Tensor unit;
    if (stride > 1 && one_by_one(g)) {
      const ir::Tensor& data = g.inputs[0];
      TF_CHECK(data->shape.size() == 5, id(), ": ", data->name, " is not a blocked input");
      unit = ir::compute(unit_stride_name(data), {data->shape[0], data->shape[1], oh, ow, data->shape[4]},
                         {"n", "c", "h", "w", "cb"}, [&](const std::vector<Expr>& ax) {
                           return ir::read(data, {ax[0], ax[1], ax[2] * Expr(stride), ax[3] * Expr(stride), ax[4]});
                         });
    }
    std::vector<ir::IterVar> axes;
    for (const ir::IterVar& r : old->reduce_axes) axes.push_back(ir::reduce_axis(r.extent, r.name()));
    const std::string name = old == g.output ? old->name + "_flat" : old->name;
    ir::Tensor acc = ir::compute(
        name, {old->shape[0], old->shape[1], 1, oh * ow, old->shape[4]}, {"n", "ko", "one", "p", "kb"},
        [&](const std::vector<Expr>& ax) {
          ir::VarMap m;
          m[old->axes[0].var.get()] = ax[0];
          m[old->axes[1].var.get()] = ax[1];
          m[old->axes[2].var.get()] = ax[3] / Expr(ow);
          m[old->axes[3].var.get()] = ax[3] % Expr(ow);
          m[old->axes[4].var.get()] = ax[4];
          for (size_t i = 0; i < axes.size(); ++i) m[old->reduce_axes[i].var.get()] = axes[i].var;
          Expr source = ir::substitute(red->source, m);
          if (unit) {
            source = ReadsAtOutputPosition(g.inputs[0].get(), unit, ax[3] / Expr(ow), ax[3] % Expr(ow))
                         .mutate_expr(source);
          }
          return ir::sum(source, axes);
        },
        axes);
    return with_reduction_viewed(g, acc, "positions", [&](const std::vector<Expr>& ax) {
      return ir::read(acc, {ax[0], ax[1], Expr(0), ax[2] * Expr(ow) + ax[3], ax[4]});
    });
  }

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_w", KnobType::Int,
         "output columns per register tile (unrolled); where the positions are one run (1x1 unpadded convolutions, "
         "others of rows under 32 columns the default row tile does not divide), positions of its OH x OW",
         64, {}, kSplit},
        {"tile_kb", KnobType::Int, "output channel blocks per register tile (unrolled; each block vectorized)", 16, {},
         kSplit},
        {"reduce_order", KnobType::Choice,
         "reduction loop order: crs (input channel blocks, then the window, then a block's channels) or rsc "
         "(the window outermost)",
         0, {"crs", "rsc"}, kReorder},
        {"inline_pad", KnobType::Bool, "read padding through a select instead of a padded copy", 0, {}},
        {"chunk", KnobType::Choice,
         "where the positions are one run: run them in chunks of about this many bytes of input (each "
         "channel tile reading a chunk, not the whole input); auto: 512K where the input takes over 4 MB",
         0, kChunkChoices, KnobKind::Choice},
        {"prefetch", KnobType::Bool,
         "each step over the input channel blocks also prefetches the weights the next output channel tile reads "
         "at that step (default: where a channel tile has at most 8 position tiles and 256 KB of weights)",
         0, {}},
        {"vectorize", KnobType::Bool, "vectorize the output channel block", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost loops (batch, channel tiles, rows) on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    auto [kb, tw] = blocked_tile(g, t, /*depthwise=*/false,
                                 flat_positions(g, t) ? out_extent(g, 2) * out_extent(g, 3) : 0);
    json c;
    c["tile_w"] = tw;
    c["tile_kb"] = kb;
    c["reduce_order"] = "crs";
    c["inline_pad"] = false;
    c["chunk"] = "auto";
    c["prefetch"] = prefetches_by_default(g, t, tw, kb);
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target& t, const json& c) const override {
    schedule_pad(s, g, c, t.vector_lanes(), /*blocked=*/true);
    const bool flat = flat_positions(g, t);
    if (flat) {
      // The output's view of the flat reduction (and the epilogue's stages) inline into it;
      // a unit-stride copy is computed at root, over all threads, a block's lanes one vector;
      // the padded copy is schedule_pad's.
      const std::string unit = unit_stride_name(g.inputs[0]);
      for (Stage* st : s.stages()) {
        if (st->op()->name == unit) {
          const auto& ax = st->op()->axes;  // n, c, h, w, cb
          if (c["parallel"].get<bool>()) st->parallel(st->fuse(st->fuse(ax[0].var, ax[1].var), ax[2].var));
          if (c["vectorize"].get<bool>()) st->vectorize(ax[4].var);
        } else if (st->op() != g.acc && st->op() != g.output && !(g.pad && st->op() == g.pad)) {
          st->compute_inline();
        }
      }
    }
    auto [acc, out] = acc_and_writer(s, g);
    schedule_nchwc_tiles(*out, *acc, c, block_vectors(g, t, c), flat, slices_positions(g),
                         flat ? chunk_positions(g, c) : 0, c["prefetch"].get<bool>() ? g.inputs[1]->name : "");
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_conv2d_nchwc_cpu() { return std::make_unique<Conv2dNchwcCpu>(); }

}  // namespace tf::templates
