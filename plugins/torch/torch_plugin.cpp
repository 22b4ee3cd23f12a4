// PyTorch's CPU attention as plugins (include/attn/plugin.h), through the
// C++ library of Debian's libtorch-dev (1.13): two kernels,
//   torch-math  S = (scale Q) K^T, P = softmax(S), O = P V in ATen's batched
//               GEMM and softmax (Q scaled first as nn.MultiheadAttention
//               does, then at::bmm, at::_softmax, at::bmm: what at::matmul
//               and at::softmax call), written into S and P buffers the plugin keeps between
//               calls of one shape and straight into the caller's O, so that
//               its timings exclude allocation as the ABI promises (a plugin
//               that allocated 2 n^2 scores per call would time the page
//               faults of fresh memory, not PyTorch's arithmetic). Variants
//               in ATen ops as a PyTorch user writes them (soft-cap by tanh,
//               ALiBi and documents as an additive mask, sinks as an extra
//               score column dropped after the softmax, GQA by
//               repeat_interleave of K and V); logsumexp by at::logsumexp
//   torch-sdpa  at::_scaled_dot_product_attention, the entry point this
//               libtorch exports (1.13: no scale argument, no logsumexp,
//               top-left causal alignment): every mask, ALiBi and documents
//               go in as its attn_mask; soft-cap and sinks it cannot express.
//               It allocates per call as it does for any PyTorch user.
// Every tensor is PyTorch's own arithmetic in its own storage type: fp64 in
// fp64, fp32 in fp32, bf16 as ATen runs bf16 on CPU (products accumulated in
// fp32, results rounded to bf16: within the suite's storage-accumulation
// bound). ATen has no fp16 matmul on CPU in 1.13, so fp16 is not claimed.
// Hand-written C++ around ATen because the ABI is C: no exception crosses
// it (every one becomes ATTN_ERROR with its message).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>

#include "attn/plugin.h"

namespace {

at::ScalarType scalar_type(attn_dtype d) {
  switch (d) {
    case ATTN_F64: return at::kDouble;
    case ATTN_F32: return at::kFloat;
    case ATTN_BF16: return at::kBFloat16;
    case ATTN_F16: return at::kHalf;
  }
  return at::kDouble;
}

at::Tensor wrap(const attn_tensor& t) {
  return at::from_blob(t.data, at::IntArrayRef(t.shape, 4), at::IntArrayRef(t.strides, 4),
                       at::TensorOptions().dtype(scalar_type(t.dtype)));
}

// The additive mask [B or 1, H or 1, n_q, n_kv] in `type` (0 or -inf, plus
// ALiBi and the bias), bottom-right aligned as the suite's contract says; an
// undefined tensor when nothing is masked or added.
at::Tensor additive_mask(const attn_options& o, int64_t B, int64_t H, int64_t n_q, int64_t n_kv, at::ScalarType type) {
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const int64_t off = n_kv - n_q;
  const at::Tensor i = at::arange(n_q, opts).unsqueeze(1), j = at::arange(n_kv, opts).unsqueeze(0);
  const double inf = INFINITY;
  at::Tensor m;  // [.., n_q, n_kv] double
  auto add = [&](const at::Tensor& t) { m = m.defined() ? m + t : t; };
  switch (o.mask) {
    case ATTN_MASK_NONE: break;
    case ATTN_MASK_CAUSAL: add(at::where(j <= i + off, 0.0, -inf)); break;
    case ATTN_MASK_WINDOW:
      add(at::where((j <= i + off).logical_and(j > i + off - double(o.window)), 0.0, -inf));
      break;
    case ATTN_MASK_KEY_PADDING: {
      const at::Tensor len = at::from_blob(const_cast<int64_t*>(o.valid_length), {B}, at::kLong).to(at::kDouble);
      add(at::where(j.view({1, 1, 1, n_kv}) < len.view({B, 1, 1, 1}), 0.0, -inf));
      break;
    }
    case ATTN_MASK_BOOLEAN: {
      const at::Tensor a = at::from_blob(const_cast<uint8_t*>(o.allowed), {n_q, n_kv}, at::kByte);
      add(at::where(a != 0, 0.0, -inf));
      break;
    }
    case ATTN_MASK_BIAS: add(at::from_blob(const_cast<double*>(o.bias), {n_q, n_kv}, at::kDouble).clone()); break;
  }
  if (o.alibi_slopes) {
    const at::Tensor slopes = at::from_blob(const_cast<double*>(o.alibi_slopes), {H}, at::kDouble);
    add(slopes.view({1, H, 1, 1}) * (j - i - double(off)).view({1, 1, n_q, n_kv}));
  }
  if (o.segments) {
    const int64_t rows = o.segment_rows;
    const at::Tensor ids = at::from_blob(const_cast<int64_t*>(o.segments), {rows, n_kv}, at::kLong);
    at::Tensor token = at::arange(n_q, at::kLong) + off;  // query i is token i + n_kv - n_q
    const at::Tensor before = token < 0;
    token = token.clamp_min(0);
    const at::Tensor qid = ids.index_select(1, token);  // [rows, n_q]
    const at::Tensor same = qid.unsqueeze(2).eq(ids.unsqueeze(1)).logical_and(before.logical_not().view({1, n_q, 1}));
    add(at::where(same, 0.0, -inf).view({rows, 1, n_q, n_kv}));
  }
  return m.defined() ? m.to(type) : m;
}

// K or V with each K/V head repeated for its g query heads (PyTorch 1.13 has no grouped attention).
at::Tensor repeated(const at::Tensor& t, int64_t H) {
  const int64_t g = H / t.size(1);
  return g == 1 ? t : t.repeat_interleave(g, 1);
}

// torch-math's buffers, kept between calls of one shape (one set: a new
// shape replaces them). The additive mask is kept too when it depends on the
// shape alone (causal or a window, no ALiBi, documents or bias), so causal
// calls do not rebuild n_q x n_kv doubles each time.
struct Workspace {
  std::tuple<at::ScalarType, int64_t, int64_t, int64_t, int64_t> key{at::kDouble, -1, -1, -1, -1};  // B H, n_q, n_kv, d
  at::Tensor Qs, S, P;  // [B H, n_q, d], [B H, n_q, n_kv] twice
  std::tuple<int, int64_t, int64_t, int64_t> mask_key{-1, -1, -1, -1};
  at::Tensor mask;
};
std::mutex workspace_mutex;
Workspace workspace;

bool mask_of_shape_only(const attn_options& o) {
  return (o.mask == ATTN_MASK_CAUSAL || o.mask == ATTN_MASK_WINDOW) && !o.alibi_slopes && !o.segments;
}

// O = softmax(scale Q K^T + mask) V for 3-D [B H, n, d] views, S and P in the kept buffers.
void math_into(const at::Tensor& Q3, const at::Tensor& K3, const at::Tensor& V3, const attn_options& o,
               const at::Tensor& mask, int64_t B, int64_t H, double* lse, at::Tensor& O3) {
  const int64_t n_q = Q3.size(1), n_kv = K3.size(1);
  const auto key = std::make_tuple(Q3.scalar_type(), Q3.size(0), n_q, n_kv, Q3.size(2));
  if (workspace.key != key) {
    workspace.Qs = workspace.S = workspace.P = at::Tensor();  // release before allocating the new shape's
    workspace.Qs = at::empty_like(Q3, at::MemoryFormat::Contiguous);
    workspace.S = at::empty({Q3.size(0), n_q, n_kv}, Q3.options());
    workspace.P = at::empty_like(workspace.S);
    workspace.key = key;
  }
  at::Tensor& S = workspace.S;
  // Q scaled first, then S = Q K^T, as nn.MultiheadAttention does in 1.13. Not
  // baddbmm(beta = 0, alpha = scale) into S: ATen 1.13's small-matrix kernel
  // multiplies S's old values by beta, and 0 x the -inf a mask left is NaN.
  workspace.Qs.copy_(Q3).mul_(o.scale);
  at::bmm_out(S, workspace.Qs, K3.transpose(1, 2));
  if (o.softcap > 0) S.div_(o.softcap).tanh_().mul_(o.softcap);
  if (mask.defined()) S.view({B, H, n_q, n_kv}).add_(mask);
  if (lse) at::from_blob(lse, {Q3.size(0), n_q}, at::kDouble).copy_(at::logsumexp(S, -1));
  at::_softmax_out(workspace.P, S, -1, false);
  at::bmm_out(O3, workspace.P, V3);
}

template <bool sdpa>
attn_status run(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_options* o,
                attn_tensor* out, double* lse, char* error, size_t error_size) {
  try {
    if (o->threads >= 1 && at::get_num_threads() != o->threads) at::set_num_threads(o->threads);
    const at::Tensor Q = wrap(*q), K = repeated(wrap(*k), q->shape[1]), V = repeated(wrap(*v), q->shape[1]);
    const int64_t B = q->shape[0], H = q->shape[1], n_q = q->shape[2], n_kv = k->shape[2];
    std::unique_lock<std::mutex> lock(workspace_mutex, std::defer_lock);
    at::Tensor mask;
    if (!sdpa && !o->sinks && mask_of_shape_only(*o)) {
      lock.lock();
      const auto mkey = std::make_tuple(int(o->mask) * 64 + int(Q.scalar_type()), int64_t(o->window), n_q, n_kv);
      if (workspace.mask_key != mkey) {
        workspace.mask = at::Tensor();
        workspace.mask = additive_mask(*o, B, H, n_q, n_kv, Q.scalar_type());
        workspace.mask_key = mkey;
      }
      mask = workspace.mask;
    } else {
      mask = additive_mask(*o, B, H, n_q, n_kv, Q.scalar_type());
    }
    at::Tensor O;
    if constexpr (sdpa) {
      if (std::fabs(o->scale * std::sqrt(double(q->shape[3])) - 1) > 1e-15) {
        std::snprintf(error, error_size, "torch 1.13's _scaled_dot_product_attention has no scale argument");
        return ATTN_UNSUPPORTED;
      }
      O = std::get<0>(at::_scaled_dot_product_attention(Q, K, V, mask.defined() ? c10::optional<at::Tensor>(mask)
                                                                                 : c10::nullopt,
                                                        0.0, false, false));
    } else if (!o->sinks) {
      if (!lock.owns_lock()) lock.lock();
      const int64_t d = q->shape[3], d_v = v->shape[3];
      at::Tensor out4 = wrap(*out);
      at::Tensor O3 = out4.is_contiguous() ? out4.view({B * H, n_q, d_v}) : at::empty({B * H, n_q, d_v}, Q.options());
      math_into(Q.reshape({B * H, n_q, d}), K.reshape({B * H, n_kv, d}), V.reshape({B * H, n_kv, d_v}), *o, mask, B, H,
                lse, O3);
      if (!out4.is_contiguous()) out4.copy_(O3.view({B, H, n_q, d_v}));
      return ATTN_OK;
    } else {
      at::Tensor S = at::matmul(Q, K.transpose(-2, -1)) * o->scale;
      if (o->softcap > 0) S = at::tanh(S / o->softcap) * o->softcap;
      if (mask.defined()) S = S + mask;
      if (o->sinks) {  // one more column per row: the sink's logit, dropped after the softmax
        const at::Tensor sinks = at::from_blob(const_cast<double*>(o->sinks), {H}, at::kDouble).to(S.scalar_type());
        S = at::cat({S, sinks.view({1, H, 1, 1}).expand({B, H, n_q, 1})}, -1);
      }
      if (lse) at::from_blob(lse, {B, H, n_q}, at::kDouble).copy_(at::logsumexp(S, -1));
      at::Tensor P = at::softmax(S, -1);
      if (o->sinks) P = P.narrow(-1, 0, n_kv);
      O = at::matmul(P, V);
    }
    wrap(*out).copy_(O);
    return ATTN_OK;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return ATTN_ERROR;
  }
}

constexpr uint64_t kMasks = ATTN_CAP_CAUSAL | ATTN_CAP_WINDOW | ATTN_CAP_KEY_PADDING | ATTN_CAP_BOOLEAN | ATTN_CAP_BIAS;
constexpr uint64_t kStorage = ATTN_CAP_F64 | ATTN_CAP_F32 | ATTN_CAP_BF16;
constexpr uint64_t kAcc = ATTN_CAP_ACC_FP64 | ATTN_CAP_ACC_FP32 | ATTN_CAP_ACC_STORAGE;

const attn_plugin kKernels[] = {
    {ATTN_PLUGIN_ABI_VERSION, "torch-math",
     "PyTorch 1.13 CPU: Q * scale, at::bmm, at::_softmax, at::bmm (nn.MultiheadAttention's math path) into kept buffers, "
     "variants in ATen ops",
     kStorage | kAcc | kMasks | ATTN_CAP_GQA | ATTN_CAP_SOFTCAP | ATTN_CAP_SINKS | ATTN_CAP_ALIBI |
         ATTN_CAP_SEGMENTS | ATTN_CAP_LSE | ATTN_CAP_THREADS,
     run<false>,
     {ATTN_ACC_BIT(ATTN_ACC_FP64), ATTN_ACC_BIT(ATTN_ACC_FP32), ATTN_ACC_BIT(ATTN_ACC_STORAGE), 0}},
    {ATTN_PLUGIN_ABI_VERSION, "torch-sdpa",
     "PyTorch 1.13 CPU: at::_scaled_dot_product_attention (masks, ALiBi and documents as its attn_mask)",
     kStorage | kAcc | kMasks | ATTN_CAP_GQA | ATTN_CAP_ALIBI | ATTN_CAP_SEGMENTS | ATTN_CAP_THREADS,
     run<true>,
     {ATTN_ACC_BIT(ATTN_ACC_FP64), ATTN_ACC_BIT(ATTN_ACC_FP32), ATTN_ACC_BIT(ATTN_ACC_STORAGE), 0}},
};

}  // namespace

extern "C" const attn_plugin* attn_plugin_get(uint32_t index) {
  return index < sizeof kKernels / sizeof kKernels[0] ? &kKernels[index] : nullptr;
}
