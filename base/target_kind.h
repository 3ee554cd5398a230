// The kinds of target tunefarm compiles for, and what each one means, in one table. Code asks
// the table (or switches on the enum) instead of comparing the kind's name: a new kind is a row
// here, a code generator (compiler/codegen_*.cc) and, for a GPU, a runtime (runtime/gpu_runtime.cc).
//
// Header-only: the board's runner, which links nothing of the project but the runtime, reads it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tf {

enum class TargetKind { Llvm, Cuda, Rocm };

struct TargetKindInfo {
  TargetKind kind;
  std::string_view name;            // the first word of a target string; the database key's too
  bool gpu;
  std::string_view triple;          // GPUs: the one triple; llvm: "" (the host's or -mtriple)
  std::string_view arch_option;     // the option naming the chip: -mcpu (llvm, rocm), -arch (cuda)
  std::string_view module_format;   // what a kernel's loadable module holds: so, ptx, hsaco
  std::string_view module_noun;     // the same for people: "shared libraries", "PTX", "code objects"
  std::string_view driver;          // the driver library a board loads at run time; "" for CPUs
  int warp = 1;                     // threads that run in lock step (AMD: wave32 chips say so in gpu.cc)
  // GPUs whose module_format is compiled by the driver at load time: the format of machine code
  // it loads as it is (cuda: cubin, what ptxas makes); "" where module_format is that already.
  std::string_view machine_code_format = "";
};

inline constexpr TargetKindInfo kTargetKinds[] = {
    {TargetKind::Llvm, "llvm", false, "", "mcpu", "so", "shared libraries", "", 1},
    {TargetKind::Cuda, "cuda", true, "nvptx64-nvidia-cuda", "arch", "ptx", "PTX", "libcuda.so.1", 32, "cubin"},
    {TargetKind::Rocm, "rocm", true, "amdgcn-amd-amdhsa", "mcpu", "hsaco", "code objects", "libamdhip64.so", 64},
};

constexpr const TargetKindInfo& kind_info(TargetKind k) { return kTargetKinds[static_cast<int>(k)]; }
constexpr std::string_view kind_name(TargetKind k) { return kind_info(k).name; }

// The kind named `name` ("llvm", "cuda", "rocm"), or nullopt.
inline std::optional<TargetKind> parse_target_kind(std::string_view name) {
  for (const TargetKindInfo& i : kTargetKinds) {
    if (i.name == name) return i.kind;
  }
  return std::nullopt;
}

// The GPU kind whose modules are in `format` ("ptx", "cubin", "hsaco"), or nullopt.
inline std::optional<TargetKind> kind_of_module_format(std::string_view format) {
  for (const TargetKindInfo& i : kTargetKinds) {
    if (i.gpu && (i.module_format == format || (!i.machine_code_format.empty() && i.machine_code_format == format)))
      return i.kind;
  }
  return std::nullopt;
}

// "llvm, cuda, rocm": for messages listing the kinds.
inline std::string target_kind_names() {
  std::string s;
  for (const TargetKindInfo& i : kTargetKinds) {
    if (!s.empty()) s += ", ";
    s += i.name;
  }
  return s;
}

}  // namespace tf
