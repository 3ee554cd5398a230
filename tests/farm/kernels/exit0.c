/* Ends its process from a constructor, before the runner can reply: must not read as OK. */
#include <stdlib.h>
__attribute__((constructor)) static void leave(void) { exit(0); }
int scale(float* in, float* out) {
  out[0] = in[0];
  return 0;
}
