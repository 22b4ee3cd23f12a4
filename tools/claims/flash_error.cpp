// Claim "flash-2x": the streaming (online softmax) backend's error is at most
// twice that of a baseline computing in the same (storage) precision, as
// FlashAttention's tests define it (tests/test_flash_attn.py: the error of
// flash_attn_func at most twice that of `attention_ref(..., upcast=False,
// reorder_ops=True)`, PyTorch ops in the storage type).
#include <cmath>
#include <limits>
#include <sstream>

#include "attn/core/random.hpp"
#include "claims/claim.hpp"

namespace attn::claims {

Verdict flash_error_at_most_twice(const Config& cfg);

// The claim's source, quote, experiment and criterion: tools/claims/ledger.json.
ATTN_CLAIM(.id = "flash-2x", .run = flash_error_at_most_twice)

namespace {

// FlashAttention's baseline (`out_pt` of its tests): the reference written
// with PyTorch ops on storage-type tensors, each op computing in fp32 (GPU
// GEMMs and softmax accumulate in fp32) and rounding its result to the
// storage type: K / sqrt(d_k) rounded, S = Q K'^T rounded, the mask,
// P = softmax(S) rounded, O = P V rounded. Written here (a few loops) since
// no backend of the suite rounds its intermediate tiles: naive with storage
// accumulation rounds every operation, naive with fp32 accumulation none.
template <class S>
xt::xtensor<double, 4> pytorch_style_baseline(const Inputs<double>& in, bool causal) {
  const Shape sh = in.shape();
  const std::size_t n_q = sh.n_q, n_kv = sh.n_kv, d_k = sh.d_k, d_v = sh.d_v;
  xt::xtensor<double, 4> out = xt::zeros<double>({sh.batch, sh.heads, n_q, d_v});
  auto rounded = [](float x) { return static_cast<float>(convert<S>(x)); };
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_k)));
  const float minus_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> k(n_kv * d_k), s(n_kv);
  for (std::size_t b = 0; b < sh.batch; ++b)
    for (std::size_t h = 0; h < sh.heads; ++h) {
      const std::size_t kv = h / sh.group();
      for (std::size_t j = 0; j < n_kv; ++j)
        for (std::size_t l = 0; l < d_k; ++l) k[j * d_k + l] = rounded(static_cast<float>(in.k(b, kv, j, l)) * scale);
      for (std::size_t i = 0; i < n_q; ++i) {
        float m = minus_inf;
        for (std::size_t j = 0; j < n_kv; ++j) {
          if (causal && j > i + n_kv - n_q) {
            s[j] = minus_inf;
            continue;
          }
          float acc = 0;
          for (std::size_t l = 0; l < d_k; ++l) acc += static_cast<float>(in.q(b, h, i, l)) * k[j * d_k + l];
          s[j] = rounded(acc);
          m = std::max(m, s[j]);
        }
        float sum = 0;
        for (std::size_t j = 0; j < n_kv; ++j) sum += s[j] = s[j] == minus_inf ? 0.0f : std::exp(s[j] - m);
        for (std::size_t j = 0; j < n_kv; ++j) s[j] = rounded(s[j] / sum);
        for (std::size_t c = 0; c < d_v; ++c) {
          float acc = 0;
          for (std::size_t j = 0; j < n_kv; ++j) acc += s[j] * static_cast<float>(in.v(b, kv, j, c));
          out(b, h, i, c) = static_cast<double>(rounded(acc));
        }
      }
    }
  return out;
}

}  // namespace


Verdict flash_error_at_most_twice(const Config& cfg) {
  Verdict v;
  std::vector<std::size_t> ns = {64, 256, 1024};
  if (cfg.full()) ns.push_back(4096);
  if (cfg.smoke()) ns = {64};
  double worst = 0;
  std::string worst_at;
  bool zero = false;
  const BackendInfo& streaming = fused_backend();
  for (std::string_view precision : {"bf16", "fp16"})
    for (std::size_t n : ns)
      for (double scale : {1.0, 10.0, 100.0})
        for (bool causal : {false, true}) {
          Options opt;
          if (causal) opt.mask = mask::Causal{};
          const Inputs<double> in = random_inputs({1, 1, n, n, 64, 64}, cfg.seed + n, scale);
          const RunReport s = streaming.run(precision, Accumulate::fp32, in, opt, {}, 0);
          const xt::xtensor<double, 4> b = precision == "bf16" ? pytorch_style_baseline<bf16>(s.rounded_inputs, causal)
                                                               : pytorch_style_baseline<fp16>(s.rounded_inputs, causal);
          // Errors against the exact attention of the rounded inputs (FlashAttention's tests take an fp32
          // computation rounded to the storage type instead, whose own rounding adds to both errors).
          const GroundTruth truth = ground_truth(s.rounded_inputs, opt, s.u_store);
          const double es = verify(s, opt, truth).out.max_abs;
          double eb = 0;
          for (std::size_t x = 0; x < b.size(); ++x) eb = std::max(eb, std::fabs(b.data()[x] - truth.result.out.data()[x]));
          std::ostringstream tag;
          tag << precision << " n=" << n << " scale=" << scale << (causal ? " causal" : "");
          v.figures.push_back({tag.str() + " streaming", es});
          v.figures.push_back({tag.str() + " PyTorch-style baseline", eb});
          if (eb == 0) {
            zero = true;
            continue;
          }
          if (es / eb > worst) {
            worst = es / eb;
            worst_at = tag.str();
          }
          if (cfg.progress) cfg.progress("flash-2x: " + tag.str());
        }
  v.figures.push_back({"max ratio", worst});
  v.outcome = zero ? Outcome::inconclusive : worst <= 2 ? Outcome::holds : Outcome::does_not_hold;
  std::ostringstream why;
  why.precision(3);
  why << "largest err(streaming, fp32 accumulation) / err(FlashAttention's tests' baseline: PyTorch ops in the storage "
         "type, fp32 inside each op) = "
      << worst << " (" << worst_at << ")" << (zero ? "; the baseline's error was 0 somewhere" : "");
  v.why = why.str();
  return v;
}

}  // namespace attn::claims
