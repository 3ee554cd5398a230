// Linking object code into a shared library with lld, so cross targets need no host compiler.
//
// ld.lld-19 comes from Debian's lld-19 package; $TUNEFARM_LLD overrides the path. Kernels
// that use parallel loops link against libgomp.so.1 of the target's architecture (for
// aarch64: the libgomp1-arm64-cross package on an x86_64 build machine).
#pragma once

#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/target.h"

namespace tf {

struct CommandResult {
  int exit_code;       // -1 when the program could not be started
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (looked up in PATH) with the arguments, waiting for it to finish.
CommandResult run_command(const std::vector<std::string>& argv);

// Throws std::runtime_error naming the command and its output when linking fails.
void link_shared_library(const std::string& object_path, const std::string& out_path,
                         const Target& target, bool openmp, bool libm);
// The same for several objects (a compiled model's kernels and runner) in one library;
// `nodelete`: the library stays mapped after dlclose (it holds state a reload must find: a GPU
// model's device memory and loaded modules).
//
// Objects must not name _GLOBAL_OFFSET_TABLE_: LLVM 19's lld, run in this process, keeps a
// pointer to that symbol after the link that defined it and writes through it in the next link
// (valgrind: an invalid write in Writer::finalizeSections). LLVM's objects never name it; GNU
// as names it in any object with GOT relocations, so the gcc-built GPU model runtime has it
// stripped when it is built (compiler/CMakeLists.txt).
void link_shared_library(const std::vector<std::string>& objects, const std::string& out_path,
                         const Target& target, bool openmp, bool libm, bool nodelete = false);

// Links an AMDGPU object into a code object (.hsaco: a shared ELF the HIP runtime loads), as
// ROCm's own toolchain does with `ld.lld -shared`. Throws like link_shared_library.
void link_amdgpu_code_object(const std::string& object_path, const std::string& out_path);

// One loadable module of GPU device code holding `funcs` (compiler/codegen_llvm.h): PTX text for
// cuda, a code object for rocm, as the target kind's table says. `tmp` is a path prefix for
// intermediate files (removed). The one place either is made: a kernel library
// (compiler/driver.h) and a model's modules (compiler/model_codegen.h) both come here.
std::string gpu_device_module(const std::vector<ir::LoweredFunc>& funcs, const Target& target, const std::string& tmp);

}  // namespace tf
