// libFuzzer target: the checks a model or kernel library passes before the loader maps it
// (runtime/kernel_library.h check_kernel_library, which ModelAbi runs for `run --model`,
// tunefarm.load and a board's runner). Whatever the bytes, the check must answer without
// reading outside them; a file it passes has its headers and loaded segments inside it, so
// the loader cannot fault on reading them. (Loading a library runs its code: that a
// well-formed library is safe to load is not what this checks.)
#include <elf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/kernel_library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool this_machine : {true, false}) {
    if (!tf::check_kernel_library(bytes, this_machine).empty() || size < sizeof(Elf64_Ehdr)) continue;
    if (data[EI_CLASS] != ELFCLASS64) continue;
    // Passed: the program headers and every loadable segment lie within the bytes.
    Elf64_Ehdr eh;
    std::memcpy(&eh, data, sizeof eh);
    if (eh.e_phoff > size || eh.e_phnum > (size - eh.e_phoff) / sizeof(Elf64_Phdr)) __builtin_trap();
    for (size_t i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph;
      std::memcpy(&ph, data + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof ph);
      if ((ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC) && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
