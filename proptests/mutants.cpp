// Each mutant is the textbook algorithm (or the online-softmax recurrence)
// written plainly, with exactly one classic bug switched on. They are
// written apart from the library's kernels on purpose: a mutant must not
// inherit the fix it is meant to lack.
#include "mutants.hpp"

#include "attn/backend_row.hpp"

#include <cmath>
#include <vector>

namespace attn::props {

namespace {

enum class Bug {
  mask_after_softmax,     // softmax over every key, masked weights zeroed afterwards (no renormalisation)
  no_max_shift,           // exp(s) without subtracting the row max: overflows for large logits
  no_rescale,             // online softmax that does not rescale the accumulator when the max grows
  scale_one_over_d,       // default scale 1/d_k instead of 1/sqrt(d_k)
  causal_top_left,        // causal/window aligned top-left (j <= i) when n_q != n_kv
  narrowed_accumulation,  // accumulates one format narrower than asked (fp64 -> fp32 -> storage)
  masked_row_nan,         // a fully masked row computes exp(-inf - (-inf)) = NaN
};

// The narrowed accumulation: fp64 asked -> fp32; fp32 asked -> the storage when it is narrower.
template <class S, Accumulate P>
using narrowed_t = std::conditional_t<P == Accumulate::fp64, float,
                                      std::conditional_t<is_narrow_float<S>, S, accumulate_t<S, P>>>;
template <class S, Accumulate P, Bug bug>
using mutant_acc_t = std::conditional_t<bug == Bug::narrowed_accumulation, narrowed_t<S, P>, accumulate_t<S, P>>;

template <Bug bug>
struct MutantBackend {
  static constexpr std::string_view name = [] {
    switch (bug) {
      case Bug::mask_after_softmax: return "mutant:mask_after_softmax";
      case Bug::no_max_shift: return "mutant:no_max_shift";
      case Bug::no_rescale: return "mutant:no_rescale";
      case Bug::scale_one_over_d: return "mutant:scale_1/d";
      case Bug::causal_top_left: return "mutant:causal_top_left";
      case Bug::narrowed_accumulation: return "mutant:narrowed_accumulation";
      case Bug::masked_row_nan: return "mutant:masked_row_nan";
    }
    return "mutant";
  }();
  static constexpr std::string_view description = "a deliberately broken backend";
  static constexpr BackendTraits traits{};

  template <class S, Accumulate P>
  static std::size_t workspace_bytes(const Shape&, const Options&) {
    return 0;
  }

  template <class S, Accumulate P>
  static Result<S> run(const Inputs<S>& in, const Options& opt, Workspace&) {
    using A = mutant_acc_t<S, P, bug>;
    const Shape sh = in.shape();
    const double minus_inf = -std::numeric_limits<double>::infinity();
    Result<S> r;
    r.out = xt::xtensor<S, 4>::from_shape({sh.batch, sh.heads, sh.n_q, sh.d_v});
    if (opt.need_weights) r.weights = xt::xtensor<double, 4>::from_shape({sh.batch, sh.heads, sh.n_q, sh.n_kv});
    if (opt.need_lse) r.lse = xt::xtensor<double, 3>::from_shape({sh.batch, sh.heads, sh.n_q});
    // The top-left bug: causal and window masks aligned as if n_kv were n_q.
    const bool top_left = bug == Bug::causal_top_left && (std::holds_alternative<mask::Causal>(opt.mask) ||
                                                          std::holds_alternative<mask::SlidingWindow>(opt.mask));
    const MaskView mask(opt, top_left ? Shape{sh.batch, sh.heads, sh.n_q, sh.n_q, sh.d_k, sh.d_v} : sh);
    const double scale = opt.scale ? *opt.scale
                         : bug == Bug::scale_one_over_d ? 1.0 / double(sh.d_k)
                                                        : 1.0 / std::sqrt(double(sh.d_k));
    std::vector<A> s(sh.n_kv), o(sh.d_v);
    std::vector<bool> seen(sh.n_kv);
    for (std::size_t b = 0; b < sh.batch; ++b)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i) {
          auto keys = mask.keys(b, i);
          keys.end = std::min(keys.end, sh.n_kv);
          for (std::size_t j = 0; j < sh.n_kv; ++j) {
            A dot = convert<A>(0.0);
            for (std::size_t l = 0; l < sh.d_k; ++l) dot += convert<A>(in.q(b, h, i, l)) * convert<A>(in.k(b, h, j, l));
            double offset = 0;
            if (mask.elementwise() && j < keys.end) offset = mask.offset(i, std::min(j, sh.n_kv - 1));
            seen[j] = j >= keys.begin && j < keys.end && offset != minus_inf;
            s[j] = dot * convert<A>(scale) + convert<A>(seen[j] ? offset : 0.0);
            if (bug != Bug::mask_after_softmax && !seen[j]) s[j] = convert<A>(minus_inf);
          }
          A m = convert<A>(minus_inf), l = convert<A>(0.0);
          for (std::size_t c = 0; c < sh.d_v; ++c) o[c] = convert<A>(0.0);
          if (bug == Bug::no_rescale) {
            // Online softmax over key blocks of 16, without rescaling O when m grows.
            for (std::size_t j0 = 0; j0 < sh.n_kv; j0 += 16) {
              A m_new = m;
              for (std::size_t j = j0; j < std::min(j0 + 16, sh.n_kv); ++j) m_new = s[j] > m_new ? s[j] : m_new;
              if (!(m_new > convert<A>(minus_inf))) continue;
              l = l * exp_of<A>(m - m_new);
              m = m_new;
              for (std::size_t j = j0; j < std::min(j0 + 16, sh.n_kv); ++j) {
                const A p = exp_of<A>(s[j] - m);
                l += p;
                for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += p * convert<A>(in.v(b, h, j, c));
              }
            }
            for (std::size_t j = 0; j < sh.n_kv; ++j) s[j] = seen[j] ? exp_of<A>(s[j] - m) / l : convert<A>(0.0);
          } else {
            for (std::size_t j = 0; j < sh.n_kv; ++j) m = s[j] > m ? s[j] : m;
            const bool guard = bug != Bug::masked_row_nan;
            const bool row_masked = guard && !(m > convert<A>(minus_inf));
            const A shift = bug == Bug::no_max_shift ? convert<A>(0.0) : m;
            for (std::size_t j = 0; j < sh.n_kv; ++j) {
              s[j] = row_masked ? convert<A>(0.0) : exp_of<A>(s[j] - shift);
              l += s[j];
            }
            for (std::size_t j = 0; j < sh.n_kv; ++j) {
              if (!row_masked) s[j] /= l;
              if (bug == Bug::mask_after_softmax && !seen[j]) s[j] = convert<A>(0.0);
              for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += s[j] * convert<A>(in.v(b, h, j, c));
            }
            if (bug == Bug::no_max_shift) m = convert<A>(0.0);
            if (row_masked) l = convert<A>(0.0);
          }
          const bool empty = bug != Bug::masked_row_nan && !(l > convert<A>(0.0));
          for (std::size_t c = 0; c < sh.d_v; ++c)
            r.out(b, h, i, c) = empty ? convert<S>(0.0) : convert<S>(bug == Bug::no_rescale ? A(o[c] / l) : o[c]);
          if (r.weights)
            for (std::size_t j = 0; j < sh.n_kv; ++j) (*r.weights)(b, h, i, j) = convert<double>(s[j]);
          if (r.lse) (*r.lse)(b, h, i) = empty ? minus_inf : convert<double>(A(m + log_of<A>(l)));
        }
    return r;
  }
};

template <Bug bug>
Mutant make(std::string_view what) {
  return {row_of<MutantBackend<bug>>(), what};
}

}  // namespace

std::vector<Mutant> mutants() {
  return {
      make<Bug::mask_after_softmax>("mask applied after the softmax (weights not renormalised)"),
      make<Bug::no_max_shift>("softmax without the max shift (overflows for large logits)"),
      make<Bug::no_rescale>("online softmax without rescaling the accumulator on a new max"),
      make<Bug::scale_one_over_d>("scale 1/d_k instead of 1/sqrt(d_k)"),
      make<Bug::causal_top_left>("causal mask aligned top-left (off by n_kv - n_q) for n_q != n_kv"),
      make<Bug::narrowed_accumulation>("accumulation silently one format narrower than asked"),
      make<Bug::masked_row_nan>("a fully masked row yields NaN (no guard on m = -inf)"),
  };
}

}  // namespace attn::props
