/* Built against an installed tlm (pkg-config or CMake package): runs one
 * matmul through the public header and checks one value. */
#include <stdio.h>

#include <tlm.h>

int main(void) {
  static float a[3 * 5], b[5 * 7], c[3 * 7];
  for (int i = 0; i < 15; i++) a[i] = 1.0f;
  for (int i = 0; i < 35; i++) b[i] = 2.0f;
  tlm_runtime *rt;
  if (tlm_create(NULL, &rt) != TLM_OK) {
    fprintf(stderr, "tlm_create: %s\n", tlm_last_error(NULL));
    return 1;
  }
  tlm_op op = tlm_op_matmul();
  tlm_tensor in[2], out;
  tlm_tensor_dense(&in[0], TLM_F32, 2, (int64_t[]){3, 5}, a);
  tlm_tensor_dense(&in[1], TLM_F32, 2, (int64_t[]){5, 7}, b);
  tlm_tensor_dense(&out, TLM_F32, 2, (int64_t[]){3, 7}, c);
  tlm_status st = tlm_run(rt, &op, in, 2, &out, 1);
  int ok = st == TLM_OK && c[0] == 10.0f && c[20] == 10.0f;
  printf("tlm %s embed: %s\n", tlm_version(), ok ? "ok" : tlm_last_error(rt));
  tlm_destroy(rt);
  return ok ? 0 : 1;
}
