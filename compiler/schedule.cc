#include "compiler/schedule.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "base/error.h"
#include "compiler/ir_mutator.h"

namespace tf::ir {

Stage::Stage(Tensor op) : op_(std::move(op)) {
  for (const IterVar& iv : op_->axes) {
    leaves_.push_back(iv.var);
    all_vars_.push_back(iv.var);
    reduce_[iv.var.get()] = false;
  }
  for (const IterVar& iv : op_->reduce_axes) {
    leaves_.push_back(iv.var);
    all_vars_.push_back(iv.var);
    reduce_[iv.var.get()] = true;
  }
}

std::string Stage::var_name(const Expr& var) const { return var.as<Var>()->name; }

Expr Stage::axis(const std::string& name) const {
  for (const Expr& v : all_vars_) {
    if (var_name(v) == name) return v;
  }
  std::string known;
  for (const Expr& v : leaves_) known += (known.empty() ? "" : ", ") + var_name(v);
  throw UserError(str("stage ", op_->name, " has no axis '", name, "' (loops: ", known, ")"));
}

size_t Stage::leaf_index(const Expr& var, const char* primitive) const {
  for (size_t i = 0; i < leaves_.size(); ++i) {
    if (leaves_[i].same_as(var)) return i;
  }
  throw UserError(str(primitive, " on stage ", op_->name, ": '", var.as<Var>()->name,
                      "' is not a loop of this stage (already split or fused?)"));
}

void Stage::check_leaf(const Expr& var, const char* primitive) const { leaf_index(var, primitive); }

Expr Stage::new_var(const std::string& name, bool reduce) {
  Expr v = Var::make(name);
  all_vars_.push_back(v);
  reduce_[v.get()] = reduce;
  return v;
}

bool Stage::is_reduce_var(const Expr& var) const {
  auto it = reduce_.find(var.get());
  return it != reduce_.end() && it->second;
}

ForKind Stage::kind_of(const Expr& var) const {
  auto it = kinds_.find(var.get());
  return it == kinds_.end() ? ForKind::Serial : it->second;
}

std::pair<Expr, Expr> Stage::split(const Expr& var, int64_t factor) { return split_impl(var, factor, 0); }

std::pair<Expr, Expr> Stage::split_nparts(const Expr& var, int64_t nparts) { return split_impl(var, 0, nparts); }

std::pair<Expr, Expr> Stage::split_impl(const Expr& var, int64_t factor, int64_t nparts) {
  size_t i = leaf_index(var, "split");
  const char* what = nparts ? "nparts" : "factor";
  int64_t value = nparts ? nparts : factor;
  if (value < 1) {
    throw UserError(str("split of ", var_name(var), " in stage ", op_->name, ": ", what, " ", value,
                        " must be at least 1"));
  }
  bool r = is_reduce_var(var);
  Expr outer = new_var(var_name(var) + ".o", r), inner = new_var(var_name(var) + ".i", r);
  relations_.push_back({Relation::Kind::Split, var, outer, inner, Expr(), factor, nparts});
  leaves_[i] = outer;
  leaves_.insert(leaves_.begin() + static_cast<long>(i) + 1, inner);
  return {outer, inner};
}

std::vector<Expr> Stage::tile(const Expr& x, const Expr& y, int64_t fx, int64_t fy) {
  auto [xo, xi] = split(x, fx);
  auto [yo, yi] = split(y, fy);
  reorder({xo, yo, xi, yi});
  return {xo, yo, xi, yi};
}

Expr Stage::fuse(const Expr& outer, const Expr& inner) {
  size_t i = leaf_index(outer, "fuse");
  size_t j = leaf_index(inner, "fuse");
  if (j != i + 1) {
    throw UserError(str("fuse in stage ", op_->name, ": '", var_name(outer), "' and '",
                        var_name(inner), "' are not adjacent loops, outer first"));
  }
  if (is_reduce_var(outer) != is_reduce_var(inner)) {
    throw UserError(str("fuse in stage ", op_->name, ": cannot fuse reduction loop with spatial loop ('",
                        var_name(outer), "', '", var_name(inner), "')"));
  }
  Expr fused = new_var(var_name(outer) + "." + var_name(inner), is_reduce_var(outer));
  relations_.push_back({Relation::Kind::Fuse, Expr(), outer, inner, fused, 0, 0});
  leaves_[i] = fused;
  leaves_.erase(leaves_.begin() + static_cast<long>(j));
  return fused;
}

void Stage::reorder(const std::vector<Expr>& order) {
  std::vector<size_t> pos;
  std::set<const ExprNode*> seen;
  for (const Expr& v : order) {
    pos.push_back(leaf_index(v, "reorder"));
    if (!seen.insert(v.get()).second) {
      throw UserError(str("reorder in stage ", op_->name, ": '", var_name(v), "' is listed twice"));
    }
  }
  std::vector<size_t> sorted = pos;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < order.size(); ++k) leaves_[sorted[k]] = order[k];
}

void Stage::vectorize(const Expr& var) {
  check_leaf(var, "vectorize");
  kinds_[var.get()] = ForKind::Vectorized;
}
void Stage::unroll(const Expr& var) {
  check_leaf(var, "unroll");
  kinds_[var.get()] = ForKind::Unrolled;
}
void Stage::prefetch(const std::string& input, const Expr& at, const Expr& from, int64_t offset) {
  check_leaf(at, "prefetch");
  if (!from || !from.as<Var>()) throw UserError(str("prefetch on stage ", op_->name, ": 'from' is not a loop"));
  if (offset < 1) {
    throw UserError(str("prefetch on stage ", op_->name, " of ", input, ": offset ", offset, " must be at least 1"));
  }
  prefetches_.push_back({input, at, from, offset});
}

void Stage::tensorize(const Expr& var, const std::string& intrinsic) {
  check_leaf(var, "tensorize");
  if (!is_warp_mma(intrinsic) && !is_wgmma(intrinsic)) {
    throw UserError(str("tensorize on stage ", op_->name, ": '", intrinsic, "' is not a warp-level product (",
                        kMmaTF32, ", ", kMmaF16, ", ", kMmaBF16, ") nor a warpgroup-level one (", kWgmmaF16, ", ",
                        kWgmmaBF16, ")"));
  }
  if (!is_reduce_var(var)) {
    throw UserError(str("tensorize on stage ", op_->name, ": '", var_name(var),
                        "' is not a reduction loop (the product's depth K is)"));
  }
  tensorized_.emplace_back(var, intrinsic);
}
void Stage::parallel(const Expr& var) {
  check_leaf(var, "parallel");
  if (is_reduce_var(var)) {
    throw UserError(str("parallel on stage ", op_->name, ": '", var_name(var),
                        "' is a reduction loop; parallel reduction would race"));
  }
  kinds_[var.get()] = ForKind::Parallel;
}

void Stage::parallel_slices(const Expr& fused) {
  auto r = std::find_if(relations_.begin(), relations_.end(), [&](const Relation& x) {
    return x.kind == Relation::Kind::Fuse && x.fused.same_as(fused);
  });
  if (r == relations_.end()) {
    throw UserError(str("parallel_slices on stage ", op_->name, ": '", var_name(fused),
                        "' is not a loop made by fuse(outer, inner)"));
  }
  parallel(fused);
  sliced_[fused.get()] = r->inner;
}

Expr Stage::sliced_inner(const Expr& var) const {
  auto it = sliced_.find(var.get());
  return it == sliced_.end() ? Expr() : it->second;
}

void Stage::bind(const Expr& var, const std::string& tag) {
  check_leaf(var, "bind");
  std::optional<ForKind> k = parse_thread_tag(tag);
  if (!k) {
    throw UserError(str("bind on stage ", op_->name, ": '", tag,
                        "' is not a GPU axis (blockIdx.x/y/z, threadIdx.x/y/z)"));
  }
  if (is_reduce_var(var)) {
    throw UserError(str("bind on stage ", op_->name, ": '", var_name(var),
                        "' is a reduction loop; spreading it over GPU threads would race"));
  }
  for (const auto& [v, kind] : kinds_) {
    if (kind == *k && v != var.get()) {
      throw UserError(str("bind on stage ", op_->name, ": ", tag, " is already bound in this stage"));
    }
  }
  kinds_[var.get()] = *k;
}

void Stage::compute_at(Stage& consumer, const Expr& var) {
  consumer.check_leaf(var, "compute_at");
  if (&consumer == this) throw UserError(str("compute_at of stage ", name(), " at itself"));
  attach_ = Attach::At;
  attach_stage_ = &consumer;
  attach_var_ = var;
}

void Stage::set_scope_shared(bool one_thread_reduces) {
  if (op_->reduce() && !one_thread_reduces) {
    throw UserError(str("set_scope_shared of stage ", name(), ": a reduction accumulates per thread"));
  }
  scope_ = MemScope::Shared;
}

void Stage::storage_layout(std::vector<size_t> order, int64_t pad, bool core_matrices) {
  if (scope_ != MemScope::Shared) {
    throw UserError(str("storage_layout of stage ", name(), ": only shared stages (cache_read_shared) have one"));
  }
  std::vector<size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> all(op_->shape.size());
  std::iota(all.begin(), all.end(), size_t{0});
  if (sorted != all) {
    throw UserError(str("storage_layout of stage ", name(), ": the order must be a permutation of its ",
                        op_->shape.size(), " dimensions"));
  }
  if (pad < 0 || pad > 64) throw UserError(str("storage_layout of stage ", name(), ": pad ", pad, " is not in 0..64"));
  if (core_matrices && (order.size() < 2 || pad * op_->dtype.bytes() % 16 != 0)) {
    throw UserError(str("storage_layout of stage ", name(), ": core matrices need two dimensions and a pad of whole ",
                        "16 bytes (pad ", pad, ", ", order.size(), " dimensions)"));
  }
  storage_order_ = std::move(order);
  storage_pad_ = pad;
  storage_core_matrices_ = core_matrices;
}

void Stage::multi_buffer(int n, int reads_in_flight) {
  if (scope_ != MemScope::Shared) {
    throw UserError(str("multi_buffer of stage ", name(), ": only shared stages (cache_read_shared) can be"));
  }
  if (n < 2 || n > kMaxBuffers) {
    throw UserError(
        str("multi_buffer of stage ", name(), ": ", n, " buffers (2 to ", kMaxBuffers, ")"));
  }
  if (reads_in_flight < 0 || reads_in_flight > 1) {
    throw UserError(str("multi_buffer of stage ", name(), ": ", reads_in_flight,
                        " iterations of reads in flight (0 or 1)"));
  }
  if (n - 1 - reads_in_flight < 1) {
    throw UserError(str("multi_buffer of stage ", name(), ": ", n,
                        " buffers with reads in flight (it needs 3 or more: ",
                        "one read, one still read by the iteration before, one being copied)"));
  }
  buffers_ = n;
  reads_in_flight_ = reads_in_flight;
}

void Stage::compute_inline() {
  if (op_->reduce()) {
    throw UserError(str("compute_inline of stage ", name(), ": a reduction cannot be inlined"));
  }
  attach_ = Attach::Inline;
  attach_stage_ = nullptr;
}

void Stage::compute_root() {
  attach_ = Attach::Root;
  attach_stage_ = nullptr;
}

// ---- Schedule ----

Schedule::Schedule(const Tensor& output) : output_(output) {
  // Depth-first post-order gives dependency order.
  std::set<const Operation*> visited;
  std::function<void(const Tensor&)> visit = [&](const Tensor& t) {
    if (!visited.insert(t.get()).second) return;
    if (t->is_placeholder()) {
      placeholders_[t->name] = t;
      return;
    }
    for (const Tensor& in : inputs_of(t)) visit(in);
    stages_.push_back(std::make_unique<Stage>(t));
  };
  visit(output);
}

bool Schedule::has_stage(const std::string& name) const {
  for (const auto& s : stages_) {
    if (s->name() == name) return true;
  }
  return false;
}

Stage& Schedule::stage(const std::string& name) {
  for (auto& s : stages_) {
    if (s->name() == name) return *s;
  }
  std::string known;
  for (auto& s : stages_) known += (known.empty() ? "" : ", ") + s->name();
  throw UserError(str("schedule has no stage '", name, "' (stages: ", known, ")"));
}

Stage& Schedule::operator[](const Tensor& t) { return stage(t->name); }

std::vector<Stage*> Schedule::stages() {
  std::vector<Stage*> out;
  for (auto& s : stages_) out.push_back(s.get());
  return out;
}

void Schedule::set_op(Stage& s, Tensor op) {
  if (s.op_ == output_) output_ = op;
  s.op_ = std::move(op);
}

void Schedule::replace_reads(const std::string& name,
                             const std::function<Expr(const TensorRead*)>& rewrite) {
  class Rewriter : public IRMutator {
   public:
    Rewriter(const std::string& n, const std::function<Expr(const TensorRead*)>& f) : n_(n), f_(f) {}
    Expr mutate_expr(const Expr& e) override {
      Expr x = IRMutator::mutate_expr(e);
      const TensorRead* r = x.as<TensorRead>();
      if (r && r->op->name == n_) return f_(r);
      return x;
    }

   private:
    const std::string& n_;
    const std::function<Expr(const TensorRead*)>& f_;
  };
  Rewriter rw(name, rewrite);
  for (auto& s : stages_) {
    Expr body = rw.mutate_expr(s->op_->body);
    if (body.same_as(s->op_->body)) continue;
    auto op = std::make_shared<Operation>(*s->op_);
    op->body = body;
    set_op(*s, op);
  }
}

Tensor Schedule::cache_write(const Tensor& t, const std::vector<size_t>& layout_in) {
  Stage& s = (*this)[t];
  const Operation& op = *s.op();
  if (!op.reduce()) {
    throw UserError(str("cache_write of stage ", op.name, ": only reductions can be cached"));
  }
  if (s.relations().size() > 0) {
    throw UserError(str("cache_write of stage ", op.name, ": apply it before splitting the stage"));
  }
  std::vector<size_t> identity(op.axes.size());
  std::iota(identity.begin(), identity.end(), size_t{0});
  std::vector<size_t> layout = layout_in.empty() ? identity : layout_in;
  std::vector<size_t> sorted = layout;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != identity) {
    throw UserError(str("cache_write of stage ", op.name, ": the layout must order each of its ", op.axes.size(),
                        " axes exactly once"));
  }
  // The local stage takes over the reduction with its own axis variables, its dimensions in
  // `layout` order.
  VarMap remap;
  auto local = std::make_shared<Operation>(op);
  local->name = op.name + ".local";
  local->axes.clear();
  local->shape.clear();
  for (size_t d : layout) {
    const IterVar& iv = op.axes[d];
    local->axes.push_back({Var::make(iv.name()), iv.extent});
    local->shape.push_back(op.shape[d]);
    remap[iv.var.get()] = local->axes.back().var;
  }
  local->reduce_axes.clear();
  std::vector<Expr> raxes;
  for (const IterVar& iv : op.reduce_axes) {
    local->reduce_axes.push_back({Var::make(iv.name()), iv.extent});
    remap[iv.var.get()] = local->reduce_axes.back().var;
    raxes.push_back(local->reduce_axes.back().var);
  }
  const Reduce* r = op.reduce();
  local->body = Reduce::make(r->reduce, substitute(r->source, remap), raxes);

  auto copy = std::make_shared<Operation>(op);
  copy->reduce_axes.clear();
  std::vector<Expr> idx;
  for (size_t d : layout) idx.push_back(op.axes[d].var);
  copy->body = TensorRead::make(local, idx);

  // The local stage goes right before `t` in dependency order.
  auto it = std::find_if(stages_.begin(), stages_.end(), [&](auto& p) { return p.get() == &s; });
  Stage fresh(copy);
  fresh.attach_ = s.attach_;
  fresh.attach_stage_ = s.attach_stage_;
  fresh.attach_var_ = s.attach_var_;
  set_op(s, copy);
  s.leaves_ = fresh.leaves_;
  s.all_vars_ = fresh.all_vars_;
  s.reduce_ = fresh.reduce_;
  s.kinds_.clear();
  s.sliced_.clear();
  stages_.insert(it, std::make_unique<Stage>(local));
  return local;
}

Tensor Schedule::packed_layout(const std::string& input, size_t dim, int64_t block, bool given) {
  auto pit = placeholders_.find(input);
  if (pit == placeholders_.end()) {
    throw UserError(str("pack: '", input, "' is not an input of this workload"));
  }
  const Tensor in = pit->second;
  if (dim >= in->shape.size()) {
    throw UserError(str("pack of ", input, ": dimension ", dim, " out of range (tensor has ",
                        in->shape.size(), ")"));
  }
  if (block < 1) throw UserError(str("pack of ", input, ": block ", block, " must be at least 1"));
  if (has_stage(input + ".pack") || placeholders_.count(input + ".pack")) {
    throw UserError(str("pack of ", input, ": already packed"));
  }
  int64_t extent = in->shape[dim];
  int64_t blocks = (extent + block - 1) / block;
  // Packed shape: [blocks, other dims..., block].
  std::vector<int64_t> shape = {blocks};
  std::vector<std::string> names = {"b"};
  for (size_t d = 0; d < in->shape.size(); ++d) {
    if (d == dim) continue;
    shape.push_back(in->shape[d]);
    names.push_back("d" + std::to_string(d));
  }
  shape.push_back(block);
  names.push_back("x");
  Tensor packed = given ? placeholder(input + ".pack", shape, in->dtype)
                        : compute(input + ".pack", shape, names, [&](const std::vector<Expr>& ax) {
                            std::vector<Expr> idx;
                            size_t k = 1;
                            Expr orig = ax[0] * block + ax.back();
                            for (size_t d = 0; d < in->shape.size(); ++d) idx.push_back(d == dim ? orig : ax[k++]);
                            if (extent % block == 0) return read(in, idx);
                            Expr zero = in->dtype.is_float() ? f32(0.0) : IntImm::make_typed(0, in->dtype);
                            return select(orig < Expr(extent), read(in, idx), zero);
                          });
  replace_reads(input, [&](const TensorRead* r) {
    std::vector<Expr> idx = {r->indices[dim] / block};
    for (size_t d = 0; d < r->indices.size(); ++d) {
      if (d != dim) idx.push_back(r->indices[d]);
    }
    idx.push_back(r->indices[dim] % block);
    return TensorRead::make(packed, idx);
  });
  packs_.push_back({input, dim, block, given});
  return packed;
}

Stage& Schedule::pack(const std::string& input, size_t dim, int64_t block) {
  Tensor packed = packed_layout(input, dim, block, false);
  stages_.insert(stages_.begin(), std::make_unique<Stage>(packed));
  return *stages_.front();
}

void Schedule::pack_given(const std::string& input, size_t dim, int64_t block) {
  Tensor packed = packed_layout(input, dim, block, true);
  placeholders_[packed->name] = packed;
}

Stage& Schedule::cache_read_shared(const std::string& input) { return cache_shared(input, nullptr, nullptr); }

Stage& Schedule::cache_read_shared_16(const std::string& input, bool bfloat16) {
  return cache_shared(input, bfloat16 ? kFloatToBF16 : kFloatToF16, bfloat16 ? kBF16ToFloat : kF16ToFloat);
}

void Schedule::store_16_bits(Stage& s, bool bfloat16) {
  const Tensor old = s.op();
  if (old->reduce()) throw UserError(str("store_16_bits of stage ", old->name, ": a reduction accumulates in float32"));
  if (old->dtype != Type::float32()) {
    throw UserError(str("store_16_bits of stage ", old->name, ": it is ", old->dtype.str(), ", not float32"));
  }
  auto op = std::make_shared<Operation>(*old);
  op->body = Call::make(bfloat16 ? kFloatToBF16 : kFloatToF16, {old->body});
  op->dtype = op->body.type();
  Tensor narrow = op;
  set_op(s, narrow);
  const char* widen = bfloat16 ? kBF16ToFloat : kF16ToFloat;
  replace_reads(old->name, [&](const TensorRead* r) {
    return Call::make(widen, {TensorRead::make(narrow, r->indices)});
  });
}

Stage& Schedule::cache_shared(const std::string& input, const char* narrow, const char* widen) {
  auto pit = placeholders_.find(input);
  if (pit == placeholders_.end()) throw UserError(str("cache_read: '", input, "' is not an input of this workload"));
  if (has_stage(input + ".shared")) throw UserError(str("cache_read of ", input, ": already cached"));
  const Tensor& in = pit->second;
  if (narrow && in->dtype != Type::float32()) {
    throw UserError(str("cache_read of ", input, " in 16 bits: it is ", in->dtype.str(), ", not float32"));
  }
  std::vector<std::string> names;
  for (size_t d = 0; d < in->shape.size(); ++d) names.push_back("d" + std::to_string(d));
  Tensor copy = compute(input + ".shared", in->shape, names, [&](const std::vector<Expr>& ax) {
    Expr v = read(in, ax);
    return narrow ? Call::make(narrow, {v}) : v;
  });
  replace_reads(input, [&](const TensorRead* r) {
    Expr v = TensorRead::make(copy, r->indices);
    return widen ? Call::make(widen, {v}) : v;
  });
  stages_.insert(stages_.begin(), std::make_unique<Stage>(copy));
  stages_.front()->scope_ = MemScope::Shared;
  return *stages_.front();
}

std::vector<Expr> unroll_up_to(Stage& s, const Expr& var, int64_t extent, int64_t whole) {
  if (extent <= whole) {
    s.unroll(var);
    return {var};
  }
  for (int64_t f : {8, 4, 2}) {
    if (extent % f == 0) {
      auto [outer, inner] = s.split(var, f);
      s.unroll(inner);
      return {outer, inner};
    }
  }
  return {var};
}

}  // namespace tf::ir
