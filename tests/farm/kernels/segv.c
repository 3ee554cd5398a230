/* Writes through a null pointer. */
int crash(float* in, float* out) {
  *(volatile int*)0 = (int)in[0];
  out[0] = 0;
  return 0;
}
