// Layers on top of the backends: multi-head attention with PyTorch's
// nn.MultiheadAttention semantics (batch_first = True), positions
// (sinusoidal, RoPE), a KV cache for token-by-token decoding, LayerNorm, and
// the pre-norm transformer block. Every layer runs its attention core on
// any backend of the registry, in any storage precision and accumulation
// policy (`Core`); projections, norms and the MLP run in fp64 with BLAS GEMM
// (xtensor-blas), so differences between cores are the cores' own.
//
// Differences from PyTorch, on purpose: no dropout; masks are the suite's
// (mask::Causal for is_causal / a causal attn_mask, mask::KeyPadding for
// key_padding_mask); need_weights returns fp64 weights; weights of the
// streaming core are rebuilt from its logsumexp.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "attn/registry/registry.hpp"

namespace attn {

using Matrix = xt::xtensor<double, 2>;
using Vector = xt::xtensor<double, 1>;
using Sequence = xt::xtensor<double, 3>;  // [B, L, E]

// y = x W^T + b, W: [out, in] as torch.nn.Linear stores it.
struct Linear {
  Matrix weight;
  std::optional<Vector> bias;
  Sequence operator()(const Sequence& x) const;
  std::size_t in_features() const { return weight.shape(1); }
  std::size_t out_features() const { return weight.shape(0); }
};

// Where the attention core runs.
struct Core {
  std::string backend;  // a registered name; empty: fused_backend()
  std::string precision = "fp32";
  Accumulate accumulate = Accumulate::fp32;
  std::size_t threads = 1;
  std::size_t kv_splits = 0;  // split-KV chunks of the streaming backend (0: its automatic choice)
};

// --- Positions ------------------------------------------------------------

// PE[pos, 2i] = sin(pos / 10000^(2i / E)), PE[pos, 2i + 1] = cos(...)
// (Vaswani et al. 2017, section 3.5), positions first .. first + length.
Matrix sinusoidal_encoding(std::size_t length, std::size_t embed_dim, std::size_t first = 0);

// RoPE (Su et al. 2021): the pairs of each head vector rotated by
// position * base^(-2i / d). interleaved: pairs (2i, 2i + 1), as the paper
// and GPT-J; half: pairs (i, i + d / 2), as GPT-NeoX and Llama.
enum class RopeStyle { interleaved, half };
struct Rope {
  RopeStyle style = RopeStyle::half;
  double base = 10000.0;
};
// x: [B, H, L, d] with d even; row l gets position first + l. In place.
void apply_rope(xt::xtensor<double, 4>& x, const Rope& rope, std::size_t first = 0);

// --- Multi-head attention ---------------------------------------------------

struct AttentionOutput {
  Sequence out;                                  // [B, L, E]
  std::optional<xt::xtensor<double, 4>> weights;  // [B, H, L, S] per head
  std::optional<xt::xtensor<double, 3>> mean_weights;  // [B, L, S], averaged over heads
};

struct KVCache;

class MultiheadAttention {
 public:
  // Random weights as torch initialises them (xavier_uniform-like scale,
  // here normal with std 1/sqrt(fan_in)), biases zero unless `bias`.
  // kv_heads (0: num_heads): grouped-query (or, at 1, multi-query) attention,
  // K and V projected to kv_heads heads of head_dim, query head h reading
  // K/V head h / (num_heads / kv_heads), as Llama 2 and Mistral.
  MultiheadAttention(std::size_t embed_dim, std::size_t num_heads, std::size_t kdim, std::size_t vdim, bool bias,
                     std::uint64_t seed, std::size_t kv_heads = 0);
  // kv_heads follows from k's output width (kv_heads x head_dim).
  MultiheadAttention(Linear q, Linear k, Linear v, Linear o, std::size_t num_heads);

  // The attention core's variants (problem.hpp): softcap, sinks and
  // alibi_slopes ([num_heads] each) and segments (self-attention over packed
  // documents, ids per position). Its mask, need_* fields, threads and
  // kv_splits are the call's (forward's mask, the Core) and must be unset.
  void set_variants(Options variants);
  const Options& variants() const { return variants_; }

  // query [B, L, E], key [B, S, kdim], value [B, S, vdim]; self-attention
  // passes the same sequence three times. need_weights: per head, and their
  // mean over heads when `average_weights`.
  AttentionOutput forward(const Sequence& query, const Sequence& key, const Sequence& value, const Core& core,
                          const Mask& mask = mask::None{}, bool need_weights = false, bool average_weights = true,
                          const std::optional<Rope>& rope = std::nullopt) const;

  // One decoding step: x [B, 1, E] at position cache.length(); appends its
  // key and value (after RoPE; kv_heads heads) to the cache, attends its
  // query over the whole cache (which, for the newest token, is exactly the
  // causal row; ALiBi's distances count from it). With one query the
  // streaming core splits the cache across workers (split-KV, Core::kv_splits).
  // Segments are refused here: a growing cache has no fixed document ids.
  Sequence decode(const Sequence& x, KVCache& cache, const Core& core,
                  const std::optional<Rope>& rope = std::nullopt) const;

  std::size_t embed_dim() const { return w_o_.out_features(); }
  std::size_t num_heads() const { return heads_; }
  std::size_t head_dim() const { return embed_dim() / heads_; }
  std::size_t kv_heads() const { return w_k_.out_features() / head_dim(); }
  const Linear& w_q() const { return w_q_; }
  const Linear& w_k() const { return w_k_; }
  const Linear& w_v() const { return w_v_; }
  const Linear& w_o() const { return w_o_; }
  Linear& w_o() { return w_o_; }

  // [B, L, H * d] <-> [B, H, L, d]
  static xt::xtensor<double, 4> split_heads(const Sequence& x, std::size_t heads);
  static Sequence merge_heads(const xt::xtensor<double, 4>& x);

 private:
  void check() const;
  Options call_options(const Core& core, const Mask& mask, bool need_weights) const;
  Linear w_q_, w_k_, w_v_, w_o_;
  std::size_t heads_;
  Options variants_;
};

// A torch.nn.MultiheadAttention state_dict saved as one .npy file per key in
// `dir` (np.save(dir + "/" + key + ".npy", tensor.numpy())): in_proj_weight
// [3E, E] or q_proj_weight, k_proj_weight, v_proj_weight ([E, kdim], [E, vdim]
// when kdim or vdim != E); out_proj.weight [E, E]; optional in_proj_bias
// [3E] and out_proj.bias [E]. Grouped-query weights (not torch's, which has
// no H_kv): k_proj_weight and v_proj_weight with H_kv x d rows, in_proj_bias
// [E + 2 H_kv d]. Every missing file or wrong shape is one Error naming it.
MultiheadAttention load_state_dict(const std::string& dir, std::size_t num_heads);

// Keys and values of every token decoded so far, per K/V head: [B, H_kv, length, d].
// Grows by appending (amortised: capacity doubles), so memory is linear in
// the cached length.
struct KVCache {
  std::size_t batch = 0, heads = 0, head_dim = 0;
  std::size_t length() const { return length_; }
  void append(const xt::xtensor<double, 4>& k, const xt::xtensor<double, 4>& v);  // [B, H_kv, 1, d] each
  Inputs<double> view_with(const xt::xtensor<double, 4>& q) const;  // q [B, H_q, 1, d] over the cache
  std::size_t bytes() const { return (k_.capacity() + v_.capacity()) * sizeof(double); }

 private:
  std::size_t length_ = 0;
  std::vector<double> k_, v_;  // [length][B][H][d]: appending never moves the old entries' order
};

// --- LayerNorm and the pre-norm block ----------------------------------------

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension
// (biased variance, as torch.nn.LayerNorm).
struct LayerNorm {
  Vector gamma, beta;
  double eps = 1e-5;
  explicit LayerNorm(std::size_t dim, double eps = 1e-5);
  Sequence operator()(const Sequence& x) const;
};

enum class Activation { relu, gelu };  // gelu: the exact erf form

// h = x + MHA(LN1(x)); y = h + W2 act(W1 LN2(h) + b1) + b2.
struct PreNormBlock {
  LayerNorm ln1, ln2;
  MultiheadAttention attention;
  Linear mlp_in, mlp_out;
  Activation activation = Activation::gelu;
  PreNormBlock(std::size_t embed_dim, std::size_t num_heads, std::size_t mlp_dim, Activation act,
               std::uint64_t seed, std::size_t kv_heads = 0);
  Sequence operator()(const Sequence& x, const Core& core, const Mask& mask = mask::None{},
                      const std::optional<Rope>& rope = std::nullopt) const;
};

// N(0, 1) values, reproducible from the seed (for layer inputs).
Sequence random_sequence(std::size_t batch, std::size_t length, std::size_t dim, std::uint64_t seed);

}  // namespace attn
