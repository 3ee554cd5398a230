// Targets, named with TVM's strings:
//   llvm                                   the host triple, generic CPU
//   llvm -mcpu=native                      the host triple and this machine's CPU and features
//   llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon
//   cuda -arch=sm_80                       NVIDIA GPUs: PTX through LLVM's NVPTX back end
//   rocm -mcpu=gfx906                      AMD GPUs: code objects through LLVM's AMDGPU back end
// Any kind takes -model=NAME, as in TVM (`-model=bcm2711` for a Raspberry Pi 4): the board
// model. It changes no code, only the database key, so boards that compile alike but time
// differently keep their records apart. A model starting with `qemu` marks an emulated board
// (e.g. `rpi4-qemu`'s `-model=qemu-cortex-a72`): its timings say nothing about real hardware,
// so the database never offers them to another target (see MatchTier::SameArch).
// parse_target resolves `native` to the concrete CPU name, so str() is the same text on
// every machine that means the same target, which makes it usable as a database key.
#pragma once

#include <string>
#include <string_view>

#include "base/target_kind.h"

namespace tf {

struct Target {
  TargetKind kind = TargetKind::Llvm;
  std::string triple;    // llvm: normalized triple, e.g. x86_64-pc-linux-gnu; cuda: nvptx64-nvidia-cuda;
                         // rocm: amdgcn-amd-amdhsa
  std::string cpu;       // llvm: -mcpu (generic when not given); rocm: gfx name
  std::string features;  // llvm: -mattr, comma separated, e.g. +neon,+fp-armv8
  std::string arch;      // cuda: sm_80
  std::string model;     // -model: the board model, part of the key only; empty when not given

  // The canonical text of the target: the database key.
  std::string str() const;
  // What users read: str() without the -mattr feature list (kind, triple, CPU), e.g.
  // "llvm -mtriple=x86_64-pc-linux-gnu -mcpu=znver5".
  std::string short_str() const;
  const TargetKindInfo& info() const { return kind_info(kind); }
  std::string_view kind_name() const { return info().name; }
  bool is_cpu() const { return !info().gpu; }
  bool is_gpu() const { return info().gpu; }
  // The chip LLVM compiles for: -arch of cuda (sm_90), -mcpu otherwise (gfx90a, znver4).
  const std::string& chip() const { return kind == TargetKind::Cuda ? arch : cpu; }
  // A board under emulation (model qemu...): timings that stand for no real device.
  bool emulated() const { return model.rfind("qemu", 0) == 0; }
  // x86_64, aarch64, arm (all 32-bit arm variants) from the triple; for GPUs the kind.
  std::string arch_name() const;
  // Debian's multiarch tuple of an llvm target: x86_64-linux-gnu, arm-linux-gnueabihf.
  std::string multiarch() const;
  // float32 lanes of the widest vector register: 16 with AVX-512, 8 with AVX, 4 with SSE/NEON.
  int vector_lanes() const;
  // Whether a CPU target has an LLVM subtarget feature (avx512vnni, avxvnni, i8mm, dotprod),
  // from its -mcpu and -mattr; false for GPU targets.
  bool has_feature(const std::string& name) const;

  // The instruction the int8 kernels multiply uint8 x int8 bytes with (codegen_cpu.cc, and the
  // summaries of import and compile --model).
  enum class ByteDot { Vnni512, AvxVnni, Usdot, Sdot, None };
  ByteDot byte_dot() const;
};
// "vpdpbusd, AVX512-VNNI", "vpdpbusd, AVX-VNNI", "usdot", "sdot", or that there is none.
const char* byte_dot_name(Target::ByteDot d);

// Throws UserError for an unknown kind or option, a triple LLVM has no backend for, or an
// `llvm` triple that is not a Linux CPU tunefarm compiles for (x86_64, aarch64, arm hard-float).
Target parse_target(const std::string& spec);

// The target for this machine: `llvm -mcpu=native` resolved.
Target host_target();

}  // namespace tf
