// Assembling PTX into machine code (a cubin) with NVIDIA's ptxas, where the tuner's machine
// has it: a CUDA board then loads the cubin without its driver's PTX JIT, which otherwise
// runs on the board for every candidate, between measurements (docs/farm.md, "GPU boards").
//
// Which ptxas: $TF_PTXAS (a path; "off" for none), else `ptxas` in PATH, else
// /usr/local/cuda/bin/ptxas. A cubin holds code for one architecture (sm_90 runs on sm_90
// only, sm_80 on sm_80 to sm_89) and loads on drivers of its ptxas's CUDA major version or
// newer; the tuner uploads it only to boards that say both (tuner/farm_runner.cc), PTX to the
// others.
#pragma once

#include <optional>
#include <string>

namespace tf {

struct Ptxas {
  std::string path;
  int cuda_version = 0;  // 1000 x major + 10 x minor, from `ptxas --version` (13000 for 13.0)
};

// The ptxas to use, or nullopt with the reason in `why` (none found, $TF_PTXAS=off, one that
// does not run or says no version).
std::optional<Ptxas> find_ptxas(std::string* why);

// "release 13.0, V13.0.88" -> 13000; 0 when `version_output` names no release.
int ptxas_cuda_version(const std::string& version_output);

enum class AssembleStatus { Ok, NoSuchArch, Failed };
struct AssembleResult {
  AssembleStatus status = AssembleStatus::Failed;
  std::string message;  // ptxas's words when it did not assemble
};

// Assembles `ptx_path` for `arch` (sm_90) into `cubin_path`. NoSuchArch: this ptxas has no
// such architecture (CUDA 13 dropped sm_70), which leaves the PTX to the board's driver;
// Failed: ptxas refused the code (too much shared memory, say), the candidate's error.
AssembleResult assemble_ptx(const Ptxas& ptxas, const std::string& ptx_path, const std::string& arch,
                            const std::string& cubin_path);

}  // namespace tf
