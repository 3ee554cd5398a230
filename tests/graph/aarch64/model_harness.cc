// Runs a compiled model on an aarch64 system (under qemu-aarch64 in the tests) through its C
// ABI (compiler/model_entry.h):
//   model_harness MODEL.so IN_0.bin ... IN_n.bin OUT_0.bin ... OUT_m.bin
// Inputs are raw float32 files of exactly the model's input sizes; outputs are written raw.
// Exit status: 0, 1 when the model fails, 3 for bad usage or files.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <vector>

template <typename F>
F entry(void* h, const char* name) {
  F f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) std::fprintf(stderr, "no %s in the library\n", name);
  return f;
}

int64_t elements(const int64_t* shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2) return 3;
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 3;
  }
  auto num_in = entry<int32_t (*)()>(h, "tf_model_num_inputs");
  auto num_out = entry<int32_t (*)()>(h, "tf_model_num_outputs");
  auto in_ndim = entry<int32_t (*)(int32_t)>(h, "tf_model_input_ndim");
  auto in_shape = entry<const int64_t* (*)(int32_t)>(h, "tf_model_input_shape");
  auto out_ndim = entry<int32_t (*)(int32_t)>(h, "tf_model_output_ndim");
  auto out_shape = entry<const int64_t* (*)(int32_t)>(h, "tf_model_output_shape");
  auto run = entry<int32_t (*)(const float* const*, float* const*, void*)>(h, "tf_model_run");
  if (!num_in || !num_out || !out_ndim || !out_shape || !run) return 3;
  int32_t ni = num_in(), no = num_out();
  if (argc != 2 + ni + no || (ni > 0 && (!in_ndim || !in_shape))) {
    std::fprintf(stderr, "the model has %d inputs and %d outputs\n", ni, no);
    return 3;
  }
  std::vector<std::vector<float>> ins(ni), outs(no);
  for (int32_t i = 0; i < ni; ++i) {
    ins[i].resize(elements(in_shape(i), in_ndim(i)));
    std::FILE* f = std::fopen(argv[2 + i], "rb");
    if (!f || std::fread(ins[i].data(), 4, ins[i].size(), f) != ins[i].size()) return 3;
    std::fclose(f);
  }
  for (int32_t o = 0; o < no; ++o) outs[o].resize(elements(out_shape(o), out_ndim(o)));
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (auto& v : ins) in_ptrs.push_back(v.data());
  for (auto& v : outs) out_ptrs.push_back(v.data());
  if (run(in_ptrs.data(), out_ptrs.data(), nullptr) != 0) return 1;
  for (int32_t o = 0; o < no; ++o) {
    std::FILE* f = std::fopen(argv[2 + ni + o], "wb");
    if (!f || std::fwrite(outs[o].data(), 4, outs[o].size(), f) != outs[o].size()) return 3;
    std::fclose(f);
  }
  return 0;
}
