/* Broken plugins for the tests (plugins/meson.build builds one library per
 * flaw): each must get one clear error from attention-lab, and nothing else
 * may break.
 *   -DBAD_ABI     a descriptor of ABI version 999
 *   -DBAD_ERROR   run() fails with a message
 *   -DBAD_NAN     run() writes NaN into the output
 *   -DBAD_CRASH   run() dereferences NULL (verify must report it, not die) */
#include <math.h>
#include <stdio.h>

#include "attn/plugin.h"

static attn_status run(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_options* o,
                       attn_tensor* out, double* lse, char* error, size_t error_size) {
  (void)k;
  (void)v;
  (void)o;
#if defined(BAD_ERROR)
  (void)out;
  (void)lse;
  snprintf(error, error_size, "bad-error: refuses every call (n_q = %lld)", (long long)q->shape[2]);
  return ATTN_ERROR;
#elif defined(BAD_CRASH)
  (void)q;
  (void)out;
  (void)lse;
  (void)error;
  (void)error_size;
  volatile int* nowhere = NULL;
  return (attn_status)*nowhere;
#else
  (void)error;
  (void)error_size;
  for (int64_t a = 0; a < out->shape[0]; ++a)
    for (int64_t b = 0; b < out->shape[1]; ++b)
      for (int64_t c = 0; c < out->shape[2]; ++c) {
        for (int64_t d = 0; d < out->shape[3]; ++d)
          ((double*)out->data)[a * out->strides[0] + b * out->strides[1] + c * out->strides[2] + d * out->strides[3]] = NAN;
        if (lse) lse[(a * q->shape[1] + b) * q->shape[2] + c] = NAN;
      }
  return ATTN_OK;
#endif
}

static const attn_plugin kPlugin = {
#ifdef BAD_ABI
    999u,
#else
    ATTN_PLUGIN_ABI_VERSION,
#endif
#if defined(BAD_ERROR)
    "bad-error",
#elif defined(BAD_CRASH)
    "bad-crash",
#elif defined(BAD_ABI)
    "bad-abi",
#else
    "bad-nan",
#endif
    "a broken plugin of the tests (plugins/testing/bad.c)",
    ATTN_CAP_F64 | ATTN_CAP_ACC_FP64 | ATTN_CAP_LSE,
    run,
    {0, 0, 0, 0}, /* accumulate_by_dtype: the ACC flags hold for every storage type */
    NULL,         /* backward: none (no ATTN_CAP_BACKWARD) */
};

const attn_plugin* attn_plugin_get(uint32_t index) { return index == 0 ? &kPlugin : NULL; }
