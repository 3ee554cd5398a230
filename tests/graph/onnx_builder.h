// A builder of ONNX models for tests: inputs, outputs, initializers and nodes through
// protobuf's API, then imported (or serialized to a file) as a user's model would be.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/onnx_import.h"

namespace tf::graph::testing {

struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;

  explicit ModelBuilder(int64_t opset = 17) {
    m.set_ir_version(8);
    auto* os = m.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  void input(const std::string& name, std::vector<int64_t> dims,
             int type = onnx::TensorProto::FLOAT) {
    auto* vi = g->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (int64_t d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d < 0)
        dim->set_dim_param("batch");
      else
        dim->set_dim_value(d);
    }
  }
  void output(const std::string& name, std::vector<int64_t> dims = {},
              int type = onnx::TensorProto::FLOAT) {
    auto* vi = g->add_output();
    vi->set_name(name);
    if (dims.empty()) return;
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void floats(const std::string& name, std::vector<float> v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (float x : v) t->add_float_data(x);
  }
  void ints(const std::string& name, std::vector<int64_t> v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  // An int8 or uint8 initializer (`type` INT8 or UINT8) of `dims`, as raw bytes (`raw`) or in
  // int32_data, as exporters write either.
  void bytes(const std::string& name, std::vector<int64_t> dims, std::vector<int32_t> v,
             int type = onnx::TensorProto::INT8, bool raw = true) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    if (!raw) {
      for (int32_t x : v) t->add_int32_data(x);
      return;
    }
    std::string r;
    for (int32_t x : v) r.push_back(static_cast<char>(x));
    t->set_raw_data(r);
  }
  // A float initializer of `dims` (floats() makes 1-D ones).
  void floats_shaped(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + out[0] : name);
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  void save(const std::string& path) const {
    std::string bytes = m.SerializeAsString();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) throw std::runtime_error("cannot write " + path);
    std::fclose(f);
  }
  Graph import() const { return import_onnx_bytes(m.SerializeAsString(), "test.onnx"); }
  std::string error() const {
    try {
      import();
    } catch (const tf::UserError& e) {
      return e.what();
    }
    return "";
  }
};

inline void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t e : v) a->add_ints(e);
}

inline void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

inline void set_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const std::string& e : v) a->add_strings(e);
}


}  // namespace tf::graph::testing
