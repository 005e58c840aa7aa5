/* A plain C program that uses only <hixl/hixl.h>: every rank puts into its
 * right neighbour's symmetric and registered memory, gets them back, and
 * checks the error codes of the C API.  Prints "N passed, N failed". */
#include <hixl/hixl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                                                               \
  do {                                                                                                            \
    if (cond) {                                                                                                   \
      ++passed;                                                                                                   \
    } else {                                                                                                      \
      ++failed;                                                                                                   \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, hixl_last_error()); \
    }                                                                                                             \
  } while (0)

int main(void) {
  enum { kLen = 65536 };
  CHECK(hixl_rank() == HIXL_ERR_NOT_INITIALIZED);
  CHECK(hixl_put(0, "x", 1, 1) == HIXL_ERR_NOT_INITIALIZED);
  CHECK(strstr(hixl_last_error(), "before hixl_init") != NULL);
  CHECK(hixl_alloc(8) == NULL);

  CHECK(hixl_init() == HIXL_SUCCESS);
  CHECK(hixl_init() == HIXL_ERR_ALREADY_INITIALIZED);
  const int me = hixl_rank(), n = hixl_world_size();
  CHECK(me >= 0 && n >= 1 && me < n);
  const int right = (me + 1) % n, left = (me + n - 1) % n;

  unsigned char *sym = hixl_alloc(kLen);
  unsigned char *reg = malloc(kLen);
  unsigned char *src = malloc(kLen);
  unsigned char *back = malloc(kLen);
  CHECK(sym != NULL && reg != NULL && src != NULL && back != NULL);
  memset(sym, 0, kLen);
  memset(reg, 0, kLen);
  CHECK(hixl_register_memory(reg, kLen) == HIXL_SUCCESS);
  uint64_t mine = (uint64_t)(uintptr_t)reg;
  uint64_t *addrs = calloc((size_t)n, sizeof(uint64_t));
  CHECK(hixl_allgather(&mine, addrs, sizeof mine) == HIXL_SUCCESS);

  for (int i = 0; i < kLen; ++i) src[i] = (unsigned char)(i * 7 + me);
  CHECK(hixl_put(right, src, (uint64_t)(uintptr_t)sym, kLen) == HIXL_SUCCESS);
  CHECK(hixl_put(right, src, addrs[right], kLen) == HIXL_SUCCESS);
  CHECK(hixl_barrier() == HIXL_SUCCESS);
  int ok_sym = 1, ok_reg = 1;
  for (int i = 0; i < kLen; ++i) {
    ok_sym &= sym[i] == (unsigned char)(i * 7 + left);
    ok_reg &= reg[i] == (unsigned char)(i * 7 + left);
  }
  CHECK(ok_sym);
  CHECK(ok_reg);
  CHECK(hixl_get(right, addrs[right], back, kLen) == HIXL_SUCCESS);
  CHECK(hixl_fence() == HIXL_SUCCESS);
  int ok_get = 1;
  for (int i = 0; i < kLen; ++i) ok_get &= back[i] == (unsigned char)(i * 7 + me);
  CHECK(ok_get);

  /* Errors. */
  CHECK(hixl_put(n, src, addrs[right], 8) == HIXL_ERR_INVALID_RANK);
  CHECK(hixl_put(right, NULL, addrs[right], 8) == HIXL_ERR_INVALID_ARG);
  CHECK(hixl_put(right, src, addrs[right] + kLen - 4, 8) == HIXL_ERR_NOT_REGISTERED);
  CHECK(strncmp(hixl_last_error(), "Remote memory not registered", 28) == 0);
  CHECK(hixl_get(right, UINT64_MAX - 2, back, 8) == HIXL_ERR_INVALID_ARG);
  CHECK(hixl_register_memory(NULL, 8) == HIXL_ERR_INVALID_ARG);
  CHECK(hixl_deregister_memory(src) == HIXL_ERR_INVALID_ARG);
  CHECK(strncmp(hixl_strerror(HIXL_ERR_TIMEOUT), "HIXL_ERR_TIMEOUT", 16) == 0);

  CHECK(hixl_barrier() == HIXL_SUCCESS);
  CHECK(hixl_deregister_memory(reg) == HIXL_SUCCESS);
  CHECK(hixl_free(sym) == HIXL_SUCCESS);
  CHECK(hixl_finalize() == HIXL_SUCCESS);
  CHECK(hixl_barrier() == HIXL_ERR_NOT_INITIALIZED);
  CHECK(strstr(hixl_last_error(), "after hixl_finalize") != NULL);
  free(addrs);
  free(reg);
  free(src);
  free(back);
  printf("rank %d: %d passed, %d failed\n", me, passed, failed);
  return failed == 0 ? 0 : 1;
}
