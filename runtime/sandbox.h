// The sandbox an uploaded kernel runs in: what tunefarm-board-runner applies to itself after
// reading its request and before loading the kernel library.
//
// An rpc_server runs native code that strangers compiled. The board confines it in layers,
// each applied by the runner to itself (no privileges needed) and inherited by every thread
// the kernel starts:
//   process group   the runner is spawned into a group of its own; the board kills the whole
//                   group after every measurement, so nothing it started outlives it.
//   no_new_privs    set-uid programs cannot raise its privileges.
//   Landlock        (Linux 5.13+) files: read and execute under /usr, /lib*, the loader cache,
//                   CPU topology under /sys, and the kernel library itself; nothing else can be
//                   opened, listed, written or created (not the board's token file, /proc, nor
//                   other leases' uploads). ABI 4+ also denies TCP bind and connect; ABI 6+
//                   denies signals to processes outside the sandbox and abstract unix sockets.
//   seccomp         process creation (fork, vfork, clone without CLONE_THREAD, clone3), exec,
//                   sockets, ptrace and cross-process memory access, signals to other
//                   processes, leaving the process group, namespaces, mounts, BPF, io_uring,
//                   keyrings, kernel modules, chmod/chown and extended attributes are refused
//                   with EPERM. Threads (the kernels' thread pool) keep working.
// When the kernel lacks Landlock, the runner goes on with the other layers and the board
// says so at start-up (see describe_sandbox): files readable by the board's user are then
// readable by kernels, so run boards as a dedicated user (deploy/ does, with DynamicUser).
// Under user-mode emulation (a board started with --runner-prefix qemu-aarch64) there is no
// seccomp layer, and qemu-user offers no Landlock either: qemu refuses to install a filter
// for its guest (the filter would have to speak the host's system calls). Such a board is a
// test device: it says so at start, and deploy/BOARDS.md says not to give it to strangers.
#pragma once

#include <string>
#include <vector>

namespace tf::farm {

// Landlock ABI version of the running kernel; 0 when Landlock is unavailable.
int landlock_abi();

// One line for logs and GetInfo: which layers this machine gives, e.g.
// "process group, no_new_privs, landlock ABI 7 (files, TCP, signals), seccomp".
// `seccomp` false: the layers of an emulated board's runner (no seccomp).
std::string describe_sandbox(bool seccomp = true);

// Applies no_new_privs, Landlock (when available) and seccomp (unless `seccomp` is false:
// runners under user-mode emulation) to the calling process, allowing `modules` (the kernel
// library, and a baseline's) to be read and mapped executable. Call from a single-threaded process before
// loading the kernel. Returns an empty string on success, else what failed.
std::string enter_sandbox(const std::vector<std::string>& modules, bool seccomp = true);

}  // namespace tf::farm
