// Large allocations on transparent huge pages, for a process that will hold a big model's
// weights.
//
// Compiling a model copies its weights several times on the way into the library (the file
// read, the ONNX tensors, their float values, packed and transposed layouts, LLVM's constant
// and object buffers): AlexNet's 224 MiB of weights touched 2.3 GB of fresh memory, 577,000
// page faults of 4 KiB, which in a virtual machine cost more than the compile's own work
// (11.0-12.5 s, half of it system time; 4.4-6.3 s with 35,000 faults, on 2 MiB pages).
// glibc's malloc backs its large blocks with transparent huge pages (madvise) when its tunable
// glibc.malloc.hugetlb is 1, and reads tunables only when a program starts: so the program
// starts itself again, once, with the tunable added.
#pragma once

namespace tf {

// Call first thing in main(), before any thread starts, with main's argv. When `wanted`, and
// neither this process nor the user set glibc.malloc.hugetlb, re-executes this program
// (/proc/self/exe) with argv and GLIBC_TUNABLES gaining glibc.malloc.hugetlb=1; the process
// that starts puts GLIBC_TUNABLES back as the caller had it, so that the programs it starts
// (build workers, sandboxed kernels) inherit the caller's environment. Returns (doing nothing)
// where the re-execution fails, in a sanitizer build (its allocator is not glibc's), in a
// program started through the dynamic loader by name, and in the re-executed process.
void use_huge_page_malloc(char** argv, bool wanted);

}  // namespace tf
