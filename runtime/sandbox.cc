#include "runtime/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

// Landlock ABI 4 to 6 postdate the kernel headers of Debian 12; the values are fixed UAPI.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

namespace tf::farm {
namespace {

// struct landlock_ruleset_attr as of ABI 6; the kernel takes the prefix its ABI knows.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

// File-system rights each ABI can restrict.
uint64_t fs_rights(int abi) {
  uint64_t r = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;  // ABI 1: bits 0..12
  if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return r;
}

// Allows `rights` beneath `path` (a directory) or on it (a file); a missing path is skipped.
bool allow_path(int ruleset, const char* path, uint64_t rights) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR;
  struct stat st {};
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) {
    // Directory rights mean nothing on a file and make the rule invalid.
    rights &= LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE;
  }
  landlock_path_beneath_attr attr{};
  attr.allowed_access = rights;
  attr.parent_fd = fd;
  long rc = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
  close(fd);
  return rc == 0;
}

std::string apply_landlock(int abi, const std::vector<std::string>& modules) {
  RulesetAttr attr{};
  attr.handled_access_fs = fs_rights(abi);
  size_t size = sizeof(uint64_t);
  if (abi >= 4) {
    attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    size = sizeof attr;
  }
  int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, size, 0));
  if (ruleset < 0) return std::string("landlock_create_ruleset: ") + std::strerror(errno);
  const uint64_t read_exec = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  const uint64_t read_only = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  bool ok = true;
  for (const char* dir : {"/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32", "/usr/local/lib"}) {
    ok &= allow_path(ruleset, dir, read_exec);
  }
  ok &= allow_path(ruleset, "/etc/ld.so.cache", read_only);
  ok &= allow_path(ruleset, "/sys/devices/system/cpu", read_only);
  for (const std::string& m : modules) ok &= allow_path(ruleset, m.c_str(), LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE);
  if (!ok) {
    close(ruleset);
    return std::string("landlock_add_rule: ") + std::strerror(errno);
  }
  long rc = syscall(SYS_landlock_restrict_self, ruleset, 0);
  int err = errno;
  close(ruleset);
  if (rc != 0) return std::string("landlock_restrict_self: ") + std::strerror(err);
  return "";
}

std::string apply_seccomp() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return "seccomp_init failed";
  int rc = 0;
  auto deny = [&](int syscall_nr) {
    if (syscall_nr < 0) return;  // not a system call on this architecture
    rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), syscall_nr, 0);
  };
  for (int nr : {SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace),
                 SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(socket), SCMP_SYS(socketpair),
                 SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept), SCMP_SYS(accept4),
                 SCMP_SYS(setsid), SCMP_SYS(setpgid), SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(mount),
                 SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(bpf), SCMP_SYS(perf_event_open),
                 SCMP_SYS(userfaultfd), SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
                 SCMP_SYS(io_uring_register), SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
                 SCMP_SYS(init_module), SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(kexec_load),
                 SCMP_SYS(reboot), SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(acct), SCMP_SYS(tkill),
                 SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_send_signal), SCMP_SYS(pidfd_getfd), SCMP_SYS(mknod),
                 SCMP_SYS(mknodat), SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(chown),
                 SCMP_SYS(fchown), SCMP_SYS(lchown), SCMP_SYS(fchownat), SCMP_SYS(setxattr), SCMP_SYS(lsetxattr),
                 SCMP_SYS(fsetxattr), SCMP_SYS(removexattr), SCMP_SYS(lremovexattr), SCMP_SYS(fremovexattr),
                 SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(fanotify_init),
                 SCMP_SYS(personality), SCMP_SYS(iopl), SCMP_SYS(ioperm), SCMP_SYS(setuid), SCMP_SYS(setgid),
                 SCMP_SYS(setreuid), SCMP_SYS(setregid), SCMP_SYS(setresuid), SCMP_SYS(setresgid)}) {
    deny(nr);
  }
  // Threads are clone with CLONE_THREAD; anything else would be a new process.
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  // glibc creates threads with clone3 and falls back to clone on ENOSYS; clone3's flags sit
  // in memory, out of seccomp's sight.
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  // Signals only to itself (abort() and raise() use tgkill on their own pid).
  auto self = static_cast<scmp_datum_t>(getpid());
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, self));
  rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_NE, self));
  if (rc != 0) {
    seccomp_release(ctx);
    return "seccomp_rule_add failed";
  }
  rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) return std::string("seccomp_load: ") + std::strerror(-rc);
  return "";
}

}  // namespace

int landlock_abi() {
  long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : static_cast<int>(v);
}

std::string describe_sandbox(bool seccomp) {
  std::string s = "process group, no_new_privs, ";
  int abi = landlock_abi();
  if (abi == 0) {
    s += "no landlock (kernels can read what the board's user can)";
  } else {
    s += "landlock ABI " + std::to_string(abi) + " (files" + std::string(abi >= 4 ? ", TCP" : "") +
         std::string(abi >= 6 ? ", signals" : "") + ")";
  }
  return s + (seccomp ? ", seccomp" : ", no seccomp (user-mode emulation)");
}

std::string enter_sandbox(const std::vector<std::string>& modules, bool seccomp) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return std::string("no_new_privs: ") + std::strerror(errno);
  if (int abi = landlock_abi(); abi > 0) {
    if (std::string err = apply_landlock(abi, modules); !err.empty()) return err;
  }
  return seccomp ? apply_seccomp() : "";
}

}  // namespace tf::farm
