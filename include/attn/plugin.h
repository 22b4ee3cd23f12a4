/* attn/plugin.h: the C ABI of an attention kernel that attention-lab loads
 * from a shared library at run time (dlopen), verifies and benchmarks like
 * its own backends. C99; nothing of C++ crosses it; the caller owns every
 * buffer, so a timed call allocates nothing of the caller's.
 *
 * A plugin library exports one function,
 *
 *   const attn_plugin* attn_plugin_get(uint32_t index);
 *
 * returning its index-th kernel (0, 1, ...) and NULL past the last: one
 * library may hold several kernels, each a row of attention-lab's registry
 * under its own name. The descriptor it returns must live as long as the
 * library is loaded (a static object).
 *
 * The problem (attention-lab's contract, lib/attn/core/problem.hpp):
 *   O = softmax(scale Q K^T + mask) V, per batch b and query head h,
 *   q [B, H, n_q, d_k], k [B, H_kv, n_kv, d_k], v [B, H_kv, n_kv, d_v],
 *   o [B, H, n_q, d_v]; query head h reads K/V head h / (H / H_kv).
 *   The mask aligns bottom-right: query i is position i + n_kv - n_q.
 *   A fully masked row has output 0 and logsumexp -inf (with a sink:
 *   output 0 and logsumexp sink_h).
 * The variants, in this order of a score: soft-cap c tanh(s / c), ALiBi
 * slope_h (j - i - (n_kv - n_q)), the mask's bias or -inf, documents;
 * a sink logit per query head joins the softmax's denominator only.
 *
 * Tensors are strided views: element (a, b, c, d) of t lives at
 *   (char*)t.data + size(dtype) (a strides[0] + b strides[1] + c strides[2] + d strides[3])
 * strides in elements, not bytes. bf16 and fp16 are their IEEE/bfloat bit
 * patterns in uint16_t.
 *
 * run() returns ATTN_OK, or another status with a one-line message in
 * `error` (at most error_size bytes, NUL-terminated). It must not throw
 * (C++ plugins catch everything), must not keep pointers past the call,
 * and must write every element of `o` (and of `lse` when it is not NULL).
 * attention-lab calls it only with what the descriptor's capabilities
 * claim; a combination outside them is reported as "not supported".
 */
#ifndef ATTN_PLUGIN_H
#define ATTN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. Version 2 added the optional backward(); a version-1 descriptor (no
 * backward field) is still loaded, forward only; any other version is refused. */
#define ATTN_PLUGIN_ABI_VERSION 2u

/* Storage types of Q, K, V and O (all four share one). */
typedef enum attn_dtype { ATTN_F64 = 0, ATTN_F32 = 1, ATTN_BF16 = 2, ATTN_F16 = 3 } attn_dtype;

/* The arithmetic the caller asks for: fp64, fp32, or the storage type itself. */
typedef enum attn_accumulate { ATTN_ACC_FP64 = 0, ATTN_ACC_FP32 = 1, ATTN_ACC_STORAGE = 2 } attn_accumulate;

/* The bit of an accumulation in attn_plugin.accumulate_by_dtype. */
#define ATTN_ACC_BIT(a) (1u << (a))

/* Capability flags (attn_plugin.capabilities). */
/* storage types */
#define ATTN_CAP_F64 (1ull << 0)
#define ATTN_CAP_F32 (1ull << 1)
#define ATTN_CAP_BF16 (1ull << 2)
#define ATTN_CAP_F16 (1ull << 3)
/* accumulation policies: for every storage type claimed, unless accumulate_by_dtype says otherwise */
#define ATTN_CAP_ACC_FP64 (1ull << 4)
#define ATTN_CAP_ACC_FP32 (1ull << 5)
#define ATTN_CAP_ACC_STORAGE (1ull << 6)
/* masks (no mask is always supported) */
#define ATTN_CAP_CAUSAL (1ull << 8)
#define ATTN_CAP_WINDOW (1ull << 9)
#define ATTN_CAP_KEY_PADDING (1ull << 10)
#define ATTN_CAP_BOOLEAN (1ull << 11)
#define ATTN_CAP_BIAS (1ull << 12)
/* variants */
#define ATTN_CAP_GQA (1ull << 16)     /* H_kv < H */
#define ATTN_CAP_SOFTCAP (1ull << 17)
#define ATTN_CAP_SINKS (1ull << 18)
#define ATTN_CAP_ALIBI (1ull << 19)
#define ATTN_CAP_SEGMENTS (1ull << 20)
/* outputs and execution */
#define ATTN_CAP_LSE (1ull << 24)     /* writes the logsumexp when asked */
#define ATTN_CAP_THREADS (1ull << 25) /* uses attn_options.threads workers */
#define ATTN_CAP_BACKWARD (1ull << 26) /* has backward() (ABI 2) */

typedef enum attn_mask_kind {
  ATTN_MASK_NONE = 0,
  ATTN_MASK_CAUSAL = 1,      /* key j visible iff j <= i + n_kv - n_q */
  ATTN_MASK_WINDOW = 2,      /* causal and j > i + n_kv - n_q - window */
  ATTN_MASK_KEY_PADDING = 3, /* keys j < valid_length[b] visible */
  ATTN_MASK_BOOLEAN = 4,     /* allowed[i n_kv + j] != 0: visible */
  ATTN_MASK_BIAS = 5         /* bias[i n_kv + j] added to the score; -inf masks */
} attn_mask_kind;

typedef struct attn_tensor {
  void* data;
  attn_dtype dtype;
  int64_t shape[4];
  int64_t strides[4]; /* in elements */
} attn_tensor;

typedef struct attn_options {
  double scale;               /* already resolved (1/sqrt(d_k) unless given) */
  attn_accumulate accumulate;
  attn_mask_kind mask;
  int64_t window;             /* ATTN_MASK_WINDOW */
  const int64_t* valid_length; /* [B], ATTN_MASK_KEY_PADDING */
  const uint8_t* allowed;     /* [n_q, n_kv] row-major, ATTN_MASK_BOOLEAN; broadcast over B and H */
  const double* bias;         /* [n_q, n_kv] row-major, ATTN_MASK_BIAS; broadcast over B and H */
  double softcap;             /* > 0: soft-capping; 0: none */
  const double* sinks;        /* [H] sink logits (-inf: none for that head), or NULL */
  const double* alibi_slopes; /* [H], or NULL */
  const int64_t* segments;    /* [segment_rows, n_kv] document ids, or NULL: query i (token i + n_kv - n_q)
                                 sees key j only if both are in one document; a query before the first
                                 token (n_q > n_kv) is in none and sees no key */
  int64_t segment_rows;       /* 1 (broadcast) or B */
  int32_t threads;            /* >= 1; honoured if ATTN_CAP_THREADS */
} attn_options;

typedef enum attn_status {
  ATTN_OK = 0,
  ATTN_ERROR = 1,       /* the call failed; `error` says why */
  ATTN_UNSUPPORTED = 2  /* this combination is not supported after all; `error` says which */
} attn_status;

typedef struct attn_plugin {
  uint32_t abi_version;     /* ATTN_PLUGIN_ABI_VERSION: first, so any layout can be checked */
  const char* name;         /* the registry row's name: letters, digits, '-', '_' */
  const char* description;  /* one line */
  uint64_t capabilities;    /* ATTN_CAP_* */
  /* q, k, v: inputs; o: output [B, H, n_q, d_v], same dtype; lse: [B, H, n_q]
   * doubles, contiguous, or NULL when not asked for. */
  attn_status (*run)(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_options* options,
                     attn_tensor* o, double* lse, char* error, size_t error_size);
  /* Optional (all 0: the ATTN_CAP_ACC_* flags hold for every storage type): per storage type
   * (indexed by attn_dtype), the ATTN_ACC_BIT()s of the accumulations it runs that type with,
   * e.g. a kernel that computes fp32 storage in fp32 and fp64 in fp64 only. */
  uint8_t accumulate_by_dtype[4];
  /* ABI 2, optional (ATTN_CAP_BACKWARD, else NULL): the gradients dq, dk, dv of L = sum(d_o * o) for the
   * forward that run() computed on the same q, k, v and options; o and lse [B, H, n_q] are what that run()
   * wrote (lse: the logsumexp asked for where the kernel claims ATTN_CAP_LSE, else NULL). d_o has o's shape; dq, dk, dv have q's, k's and v's shapes, all one
   * dtype; every element of dq, dk and dv is written. Not called with sinks or a bias's gradient. */
  attn_status (*backward)(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_tensor* o,
                          const double* lse, const attn_tensor* d_o, const attn_options* options, attn_tensor* dq,
                          attn_tensor* dk, attn_tensor* dv, char* error, size_t error_size);
} attn_plugin;

/* The one symbol a plugin library exports. */
typedef const attn_plugin* (*attn_plugin_get_fn)(uint32_t index);
#define ATTN_PLUGIN_ENTRY "attn_plugin_get"

#ifdef __cplusplus
}
#endif

#endif /* ATTN_PLUGIN_H */
