// dense.cpu: matmul and batch_matmul on CPUs. The output is tiled into register tiles of
// tile_m rows (unrolled) x tile_n columns (vectorized), the reduction accumulated in them,
// unroll_k deep; B may be packed into panels of tile_n columns first.
#include "compiler/templates/common.h"

namespace tf::templates {
namespace {

class DenseCpu final : public CpuTemplate {
 public:
  // Float16 and bfloat16 operands (dtype=...) are widened to float32 as they are read (F16C's
  // vcvtph2ps where the CPU has it), their products summed in float32.
  DenseCpu()
      : CpuTemplate("dense.cpu", 1, {"matmul", "batch_matmul"}, TargetKind::Llvm,
                    {OperandTypes{}, k16BitTypes[0], k16BitTypes[1]}) {}

  const std::vector<KnobDef>& knobs() const override {
    static const std::vector<KnobDef> k = {
        {"tile_m", KnobType::Int, "rows of C per register tile (unrolled)", 64, {}, kSplit},
        {"tile_n", KnobType::Int, "columns of C per register tile (vectorized)", 256, {}, kSplit},
        {"unroll_k", KnobType::Int, "unroll factor of the reduction loop", 64, {}, kSplit},
        {"pack_b", KnobType::Bool, "copy B into [N/tile_n][K][tile_n] panels first", 0, {}},
        {"order", KnobType::Choice, "outer tile loop order: mn (rows outer) or nm (columns outer)", 0, {"mn", "nm"},
         kReorder},
        {"vectorize", KnobType::Bool, "vectorize the inner tile axis", 0, {}},
        {"unroll", KnobType::Bool, "unroll the register tile", 0, {}},
        {"parallel", KnobType::Bool, "run the outermost tile loop on all threads", 0, {}},
    };
    return k;
  }

  json default_config(const OpGraph& g, const Target& t) const override {
    // Register tiles of full vectors whatever the extents: shift-inwards tails plus
    // partition_loops keep every tile but the last aligned. Extents smaller than a tile get a
    // tile of exactly the extent. Rows per tile fit the vector register file: 8x2 vectors
    // with 32 registers (AVX-512, NEON), 6x2 with 16 (AVX2).
    const int64_t lanes = t.vector_lanes();
    const int64_t rows = t.arch_name() == "x86_64" && lanes < 16 ? 6 : 8;
    size_t d = batch_dim(g);
    int64_t m = out_extent(g, d), n = out_extent(g, d + 1);
    json c;
    c["tile_n"] = vector_tile(n, 2, lanes);
    c["tile_m"] = std::min(m, rows);
    c["unroll_k"] = 4;
    // Packing B pays for itself from 16 rows of A on; B given packed (a model's constant
    // weights, packed once when it is compiled) costs nothing to pack, and its panels stream
    // where B's rows would be read tile_n columns at a time, one page per row (a classifier's
    // 1x1000x1280 read its 5 MB at half the memory bandwidth).
    // A B computed at run time is not packed when tile_n leaves a shifted last column tile:
    // that tile straddles two panels and reads them with gathers, while B's own rows are
    // contiguous there (ViT's attention scores, 197 x 197 x 64: 59 GFLOPS packed, 124 not).
    c["pack_b"] = g.prepacked.count("B") > 0 || (m >= 16 && n % c["tile_n"].get<int64_t>() == 0);
    c["order"] = "nm";
    default_annotations(c);
    return c;
  }

  void apply(Schedule& s, const OpGraph& g, const Target&, const json& c) const override {
    bool batch = batch_dim(g) == 1;
    auto [acc, out] = acc_and_writer(s, g);
    if (c["pack_b"].get<bool>()) {
      // Panels along N: B's last dimension, or the one before K with trans_b=1 ([N][K]).
      const bool tb = g.workload.flag("trans_b");
      if (Stage* p = pack_input(s, g, "B", (batch ? 2 : 1) - (tb ? 1 : 0), c["tile_n"])) {
        const auto& ax = p->op()->axes;
        if (c["parallel"].get<bool>()) p->parallel(ax[0].var);
        if (c["vectorize"].get<bool>()) p->vectorize(ax.back().var);
      }
    }
    schedule_dense_tiles(*out, *acc, batch ? 1 : 0, c);
  }

 protected:
  SplitAxis split_axis(const OpGraph& g, const Target&, const std::string& knob) const override {
    size_t d = batch_dim(g);
    if (knob == "tile_m") return {out_extent(g, d), false, true};
    if (knob == "tile_n") return {out_extent(g, d + 1), true, false};
    return {g.acc->reduce_axes[0].extent, false, false};  // unroll_k
  }

  Tile register_tile(const OpGraph&, const Target&, const json& c) const override {
    return {c["tile_m"], c["tile_n"], c["unroll_k"], ""};
  }
};

}  // namespace

std::unique_ptr<ScheduleTemplate> make_dense_cpu() { return std::make_unique<DenseCpu>(); }

}  // namespace tf::templates
