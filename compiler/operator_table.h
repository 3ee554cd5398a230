// The compiler's operators, one row each: the only place an operator's name is mapped to what
// it is. A row gives the keys of its workload spec (compiler/workload.h), the rules its sizes
// obey, the tensors and FLOPs parse_workload bounds, its tensor expressions (build_op,
// compiler/operators.h) and its reference implementation (compiler/reference.h). Adding an
// operator is a builder, a reference and one row; its schedule templates are registered apart
// (compiler/templates/all.def).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/operators.h"
#include "compiler/workload.h"

namespace tf {

struct WorkloadKey {
  const char* name;
  int64_t default_value;  // kRequiredKey when the user must give it
  int64_t min_value;
  // Left out of the canonical form at its default (a key added later: records made before it
  // keep their workload strings).
  bool optional = false;
};
constexpr int64_t kRequiredKey = -1;

// The tensors a workload reads, writes or stages (padded copies included), in elements, and
// its FLOPs per call; nullopt where the product overflows 64 bits.
struct Footprint {
  std::vector<std::pair<const char*, std::optional<int64_t>>> tensors;
  std::optional<int64_t> flops;
};

struct OperatorDef {
  const char* name;
  std::vector<WorkloadKey> keys;  // in their declared order (Workload::canonical prints it)
  // Rules across keys beyond each key's bounds (a convolution's output is not empty, blocks
  // divide the channels); throws UserError naming `spec`. Null when there are none.
  void (*check)(const Workload& w, const std::string& spec);
  Footprint (*footprint)(const Workload& w);
  void (*build)(OpGraph& g);  // fills inputs, pad, acc, output and flops of g.workload
  void (*reference)(const Workload& w, const std::vector<const float*>& inputs, float* output);
  // A small workload of it: the schedule templates' registry test checks every template's
  // defaults and constraints on it, so a new template is checked without editing a list.
  const char* example;
  // The operand types it computes in (parse_workload refuses others by name).
  std::vector<OperandTypes> types = {OperandTypes{}};
  // A small workload of each of its other types, for the same test.
  std::vector<const char*> typed_examples = {};
  // Its output is float32 whatever its operands' types (an int8 product scaled back in the
  // kernel: qmatmul, qconv2d_nchwc), so epilogues apply to every type; else integer operands
  // give an int32 sum and take epilogue=none.
  bool float_output = false;
};

// Every operator, in a fixed order (known_ops()).
const std::vector<OperatorDef>& operator_table();

// The row of `op`, or nullptr.
const OperatorDef* find_operator(const std::string& op);

// Output extent of a convolution along one spatial dimension (0 when the window does not fit).
// Every value is at most kMaxWorkloadValue (2^31 - 1), so no term can overflow 64 bits.
inline int64_t conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  int64_t span = dilation * (k - 1) + 1;
  int64_t padded = in + 2 * pad;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

// A grouped convolution (group=G: output channel k reads only the C/G input channels of its
// group k / (K/G)) in the blocked layout (conv2d_nchwc): output block ko (oc_block channels)
// reads the `span` input channels from channel start(ko), whole input blocks (ic_block) that
// hold the channels of every group the block's filters belong to. Where the block lies in
// one group (oc_block divides K/G) the span is that group's C/G channels; where it holds
// several (K/G divides oc_block: RegNet's and ResNeXt's narrow groups on 16-lane vectors) it
// is the C/G channels of each; where it straddles two (RegNet's groups of 24 in blocks of 16)
// it is the input blocks from the first group's first channel to the last group's last, as
// many for every block as the most any block needs (a block near the end starting early
// enough to stay inside C). The weights [K/ob][span/ib][R][S][ib][ob] hold zeros where a
// channel of one group meets a filter of another: the kernel multiplies them as any other (a
// vector of filters, each input channel broadcast). group=1 is the dense convolution (span
// C, start 0).
class NchwcGroups {
 public:
  NchwcGroups(int64_t C, int64_t K, int64_t group, int64_t ob, int64_t ib);
  int64_t C, K, group, ob, ib;
  int64_t channels() const { return C / group; }  // input channels of one group
  int64_t filters() const { return K / group; }   // output channels of one group
  bool block_in_group() const { return filters() % ob == 0; }
  // Whether blocks of ob output channels fit the groups exactly (ob divides K/G or K/G
  // divides ob): no block straddles two groups, and a block reads only its groups' channels.
  bool whole() const { return filters() % ob == 0 || ob % filters() == 0; }
  int64_t span() const { return blocks_ * ib; }
  // The first input channel output block ko reads (a multiple of ib).
  int64_t start(int64_t ko) const { return std::min(first_block(ko), C / ib - blocks_) * ib; }
  // Whether every block reads only its own groups' channels (whole(), and those channels are
  // whole input blocks): the start is then the closed form of the layouts before straddling.
  bool exact() const { return whole() && span() == (block_in_group() ? channels() : ob / filters() * channels()); }
  // The first input block output block `ko` reads, as an expression of it.
  ir::Expr start_block(const ir::Expr& ko) const;
  // The share of the channels a block reads that its filters compute with: (C/G) / span.
  double useful() const { return double(channels()) / double(span()); }

 private:
  int64_t first_block(int64_t ko) const { return ko * ob / filters() * channels() / ib; }
  int64_t blocks_ = 0;  // input blocks a block reads (span / ib)
};
NchwcGroups nchwc_groups(const Workload& w);

// The builders and references the table points to (compiler/operators.cc, reference.cc).
namespace ops {
void build_matmul(OpGraph& g);
void build_qmatmul(OpGraph& g);
void build_matmul_bf16(OpGraph& g);
void build_matmul_fp16(OpGraph& g);
void build_batch_matmul(OpGraph& g);
void build_conv2d_nchw(OpGraph& g);
void build_conv2d_nhwc(OpGraph& g);
void build_depthwise_conv2d_nchw(OpGraph& g);
void build_conv2d_nchwc(OpGraph& g);
void build_qconv2d_nchwc(OpGraph& g);
void build_conv2d_nchwc_bf16(OpGraph& g);
void build_conv2d_nchwc_fp16(OpGraph& g);
void build_depthwise_conv2d_nchwc(OpGraph& g);
void build_qdepthwise_conv2d_nchwc(OpGraph& g);
void build_conv2d_winograd_nchwc(OpGraph& g);

using Inputs = std::vector<const float*>;
void reference_matmul(const Workload& w, const Inputs& in, float* out);
void reference_qmatmul(const Workload& w, const Inputs& in, float* out);
void reference_matmul_bf16(const Workload& w, const Inputs& in, float* out);
void reference_matmul_fp16(const Workload& w, const Inputs& in, float* out);
void reference_batch_matmul(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_nchw(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_nhwc(const Workload& w, const Inputs& in, float* out);
void reference_depthwise_conv2d_nchw(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_nchwc(const Workload& w, const Inputs& in, float* out);
void reference_qconv2d_nchwc(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_nchwc_bf16(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_nchwc_fp16(const Workload& w, const Inputs& in, float* out);
void reference_depthwise_conv2d_nchwc(const Workload& w, const Inputs& in, float* out);
void reference_qdepthwise_conv2d_nchwc(const Workload& w, const Inputs& in, float* out);
void reference_conv2d_winograd_nchwc(const Workload& w, const Inputs& in, float* out);
}  // namespace ops

}  // namespace tf
