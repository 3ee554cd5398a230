/* Creates the file MARKER_PATH when it runs: proves whether a kernel was executed. */
#include <stdio.h>
int mark(float* in, float* out) {
  FILE* f = fopen(MARKER_PATH, "w");
  if (f) fclose(f);
  out[0] = in[0];
  return 0;
}
