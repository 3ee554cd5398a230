// onnx_to_16bit IN OUT float16|bfloat16: a float32 ONNX model as the same model in 16 bits, as
// torch.onnx.export(model.half(), x.half()) writes one: float32 initializers and Constant
// tensors stored in the type (rounded to nearest even), Casts to float32 made Casts to it,
// float32 inputs and outputs declared of it, value_info dropped. For
// tests/graph/float16_io_test.py (Debian's Python has no onnx package).
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "base/float16.h"

namespace {

// A float32 tensor (raw_data or float_data) as the same tensor of `type`.
void narrow(onnx::TensorProto& t, int type) {
  if (t.data_type() != onnx::TensorProto::FLOAT) return;
  std::vector<float> f;
  if (t.has_raw_data()) {
    f.resize(t.raw_data().size() / 4);
    std::memcpy(f.data(), t.raw_data().data(), f.size() * 4);
  } else {
    f.assign(t.float_data().begin(), t.float_data().end());
  }
  std::string raw(f.size() * 2, '\0');
  for (size_t k = 0; k < f.size(); ++k) {
    const uint16_t h =
        type == onnx::TensorProto::FLOAT16 ? tf::f16_bits(f[k]) : tf::bf16_bits(f[k]);
    std::memcpy(raw.data() + 2 * k, &h, 2);
  }
  t.clear_float_data();
  t.set_raw_data(raw);
  t.set_data_type(type);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || (std::string(argv[3]) != "float16" && std::string(argv[3]) != "bfloat16")) {
    std::cerr << "usage: onnx_to_16bit IN OUT float16|bfloat16\n";
    return 2;
  }
  const int type =
      std::string(argv[3]) == "float16" ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::BFLOAT16;
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto m;
  if (!in || !m.ParseFromString(bytes.str())) {
    std::cerr << argv[1] << ": not an ONNX model\n";
    return 1;
  }
  onnx::GraphProto* g = m.mutable_graph();
  for (onnx::TensorProto& t : *g->mutable_initializer()) narrow(t, type);
  for (onnx::NodeProto& n : *g->mutable_node()) {
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.type() == onnx::AttributeProto::TENSOR) narrow(*a.mutable_t(), type);
      if (n.op_type() == "Cast" && a.name() == "to" && a.i() == onnx::TensorProto::FLOAT)
        a.set_i(type);
    }
  }
  for (auto* side : {g->mutable_input(), g->mutable_output()}) {
    for (onnx::ValueInfoProto& vi : *side) {
      auto* tt = vi.mutable_type()->mutable_tensor_type();
      if (tt->elem_type() == onnx::TensorProto::FLOAT) tt->set_elem_type(type);
    }
  }
  g->clear_value_info();
  std::ofstream out(argv[2], std::ios::binary);
  if (!m.SerializeToOstream(&out)) {
    std::cerr << "cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
