/* Never returns. */
int hang(float* in, float* out) {
  volatile int spin = 1;
  while (spin) {
  }
  out[0] = in[0];
  return 0;
}
