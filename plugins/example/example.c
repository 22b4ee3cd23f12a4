/* The example plugin: textbook attention in plain C, one row at a time, in
 * double whatever the storage. Copy it to start your own kernel (README,
 * "Verify your own kernel"):
 *   cc -O2 -shared -fPIC -I include plugins/example/example.c -o libmine.so -lm
 * It claims fp64 and fp32 storage with fp64 arithmetic, every mask and
 * variant, and the logsumexp.
 *
 * Built with -DATTN_EXAMPLE_MASK_AFTER_SOFTMAX it is the deliberately wrong
 * plugin of the tests: the softmax runs over every key and the mask then
 * zeroes the masked weights, which no longer sum to 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn/plugin.h"

static double load(const attn_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t at = a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + d * t->strides[3];
  return t->dtype == ATTN_F64 ? ((const double*)t->data)[at] : (double)((const float*)t->data)[at];
}

static void store(attn_tensor* t, int64_t a, int64_t b, int64_t c, int64_t d, double x) {
  const int64_t at = a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + d * t->strides[3];
  if (t->dtype == ATTN_F64) ((double*)t->data)[at] = x;
  else ((float*)t->data)[at] = (float)x;
}

/* Whether query i (position pos = i + n_kv - n_q) of batch b sees key j. */
static int visible(const attn_options* o, int64_t b, int64_t i, int64_t pos, int64_t j, int64_t n_kv) {
  if (o->segments) {
    if (pos < 0) return 0; /* a query before the first token (n_q > n_kv) is in no document */
    const int64_t* ids = o->segments + (o->segment_rows > 1 ? b * n_kv : 0);
    if (ids[pos] != ids[j]) return 0;
  }
  switch (o->mask) {
    case ATTN_MASK_CAUSAL: return j <= pos;
    case ATTN_MASK_WINDOW: return j <= pos && j > pos - o->window;
    case ATTN_MASK_KEY_PADDING: return j < o->valid_length[b];
    case ATTN_MASK_BOOLEAN: return o->allowed[i * n_kv + j] != 0;
    case ATTN_MASK_BIAS: return !isinf(o->bias[i * n_kv + j]) || o->bias[i * n_kv + j] > 0;
    default: return 1;
  }
}

static attn_status run(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_options* o,
                       attn_tensor* out, double* lse, char* error, size_t error_size) {
  const int64_t B = q->shape[0], H = q->shape[1], n_q = q->shape[2], d_k = q->shape[3];
  const int64_t H_kv = k->shape[1], n_kv = k->shape[2], d_v = v->shape[3];
  double* s = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
  if (!s) {
    snprintf(error, error_size, "example: out of memory for %lld scores", (long long)n_kv);
    return ATTN_ERROR;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t hk = h / (H / H_kv), pos = i + n_kv - n_q;
        const double sink = o->sinks ? o->sinks[h] : -INFINITY;
        double m = sink, sum = 0;
        for (int64_t j = 0; j < n_kv; ++j) {
          double x = 0;
          for (int64_t l = 0; l < d_k; ++l) x += load(q, b, h, i, l) * load(k, b, hk, j, l);
          x *= o->scale;
          if (o->softcap > 0) x = o->softcap * tanh(x / o->softcap);
          if (o->alibi_slopes) x += o->alibi_slopes[h] * (double)(j - pos);
          if (o->mask == ATTN_MASK_BIAS) x += o->bias[i * n_kv + j];
#ifndef ATTN_EXAMPLE_MASK_AFTER_SOFTMAX
          if (!visible(o, b, i, pos, j, n_kv)) x = -INFINITY;
#endif
          s[j] = x;
          if (x > m) m = x;
        }
        for (int64_t j = 0; j < n_kv; ++j) sum += s[j] = m == -INFINITY ? 0 : exp(s[j] - m);
        if (m != -INFINITY) sum += exp(sink - m);
#ifdef ATTN_EXAMPLE_MASK_AFTER_SOFTMAX
        for (int64_t j = 0; j < n_kv; ++j)
          if (!visible(o, b, i, pos, j, n_kv)) s[j] = 0;
#endif
        for (int64_t l = 0; l < d_v; ++l) {
          double acc = 0;
          for (int64_t j = 0; j < n_kv; ++j) acc += s[j] * load(v, b, hk, j, l);
          store(out, b, h, i, l, sum > 0 ? acc / sum : 0.0);
        }
        if (lse) lse[(b * H + h) * n_q + i] = m == -INFINITY ? -INFINITY : m + log(sum);
      }
  free(s);
  return ATTN_OK;
}

static const attn_plugin kPlugin = {
    ATTN_PLUGIN_ABI_VERSION,
#ifdef ATTN_EXAMPLE_MASK_AFTER_SOFTMAX
    "wrong-mask-after-softmax",
    "the example with a bug: the mask zeroes weights after the softmax (tests only)",
#else
    "example",
    "textbook attention in plain C, one row at a time in double (plugins/example/example.c)",
#endif
    ATTN_CAP_F64 | ATTN_CAP_F32 | ATTN_CAP_ACC_FP64 | ATTN_CAP_CAUSAL | ATTN_CAP_WINDOW | ATTN_CAP_KEY_PADDING |
        ATTN_CAP_BOOLEAN | ATTN_CAP_BIAS | ATTN_CAP_GQA | ATTN_CAP_SOFTCAP | ATTN_CAP_SINKS | ATTN_CAP_ALIBI |
        ATTN_CAP_SEGMENTS | ATTN_CAP_LSE,
    run,
    {0, 0, 0, 0}, /* accumulate_by_dtype: the ACC flags hold for every storage type */
    NULL,         /* backward: none (no ATTN_CAP_BACKWARD) */
};

const attn_plugin* attn_plugin_get(uint32_t index) { return index == 0 ? &kPlugin : NULL; }
