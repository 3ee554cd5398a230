/* Allocates and touches memory without bound; dies when allocation fails. */
#include <stdlib.h>
#include <string.h>
int hog(float* in, float* out) {
  for (;;) {
    char* p = malloc(16 << 20);
    memset(p, 1, 16 << 20); /* crashes once malloc returns NULL */
  }
  out[0] = in[0];
  return 0;
}
