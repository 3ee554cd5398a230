/* A hostile kernel: tries what an attacker's upload would, and reports in out[] what worked
 * (1) and what the sandbox refused (0). out[15] = 42 shows that it ran at all.
 *   out[0]  read the board's command line (/proc/<board>/cmdline)
 *   out[1]  open the board's token file (found in that command line, or the usual places)
 *   out[2]  start a process (fork)
 *   out[3]  open a TCP socket and connect
 *   out[4]  list the board's work directory (other leases' uploads)
 *   out[5]  send a signal to the board
 *   out[6]  create a file in /tmp
 *   out[7]  leave the process group
 *   out[8]  start a thread (must work: libgomp needs it)
 *   out[9]  read /etc/passwd
 *   out[10] exec a program */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <libgen.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void* nothing(void* arg) { return arg; }

static int board_cmdline(char* buf, size_t n) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t got = read(fd, buf, n - 1);
  close(fd);
  if (got <= 0) return -1;
  buf[got] = 0;
  return (int)got;
}

int escape(float* in, float* out) {
  (void)in;
  for (int i = 0; i < 16; ++i) out[i] = 0;
  char cmd[4096];
  int len = board_cmdline(cmd, sizeof cmd);
  out[0] = len > 0;
  for (int i = 0; len > 0 && i < len; i += (int)strlen(cmd + i) + 1) {
    if (strcmp(cmd + i, "--token-file") == 0 && i + 13 < len) {
      int fd = open(cmd + i + 13, O_RDONLY);
      if (fd >= 0) out[1] = 1, close(fd);
    }
  }
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) out[2] = 1, waitpid(pid, NULL, 0);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(22);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    out[3] = 1;
    connect(s, (struct sockaddr*)&a, sizeof a);
    close(s);
  }
  Dl_info info;
  if (dladdr((void*)escape, &info) && info.dli_fname) {
    char self[4096];
    snprintf(self, sizeof self, "%s", info.dli_fname);
    DIR* d = opendir(dirname(dirname(self)));
    if (d) out[4] = readdir(d) != NULL, closedir(d);
  }
  out[5] = kill(getppid(), 0) == 0;
  int f = open("/tmp/tunefarm-escape-test-file", O_CREAT | O_WRONLY, 0600);
  if (f >= 0) out[6] = 1, close(f), unlink("/tmp/tunefarm-escape-test-file");
  out[7] = setpgid(0, 0) == 0 || setsid() >= 0;
  pthread_t t;
  if (pthread_create(&t, NULL, nothing, NULL) == 0) out[8] = 1, pthread_join(t, NULL);
  int p = open("/etc/passwd", O_RDONLY);
  if (p >= 0) out[9] = 1, close(p);
  char* argv[] = {"/bin/true", NULL};
  execv("/bin/true", argv); /* returns only when refused */
  out[10] = 0;
  out[15] = 42;
  return 0;
}
