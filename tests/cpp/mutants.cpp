// Each mutant is the textbook algorithm (or the online-softmax recurrence)
// written plainly, with exactly one classic bug switched on. They are
// written apart from the library's kernels on purpose: a mutant must not
// inherit the fix it is meant to lack.
#include "mutants.hpp"

#include "attn/registry/backend_row.hpp"

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
  gqa_modulo,             // query head h reads K/V head h % H_kv instead of h / g
  softcap_after_mask,     // soft-cap applied after the mask (a masked -inf becomes -c)
  sink_in_numerator,      // the sink's exp(sink - m) also added to every output element (a value of 1)
  alibi_wrong_head,       // ALiBi slope of head h + 1 (mod H) for head h
  split_merge_no_rescale, // split-KV: two halves' partial sums merged without rescaling by exp(m_part - m)
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
      case Bug::gqa_modulo: return "mutant:gqa_modulo";
      case Bug::softcap_after_mask: return "mutant:softcap_after_mask";
      case Bug::sink_in_numerator: return "mutant:sink_in_numerator";
      case Bug::alibi_wrong_head: return "mutant:alibi_wrong_head";
      case Bug::split_merge_no_rescale: return "mutant:split_merge_no_rescale";
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
    // (its documents, ALiBi positions and sinks still aligned as they should be)
    Options structural = opt;
    if (top_left) structural.segments.reset();
    const MaskView mask(structural, top_left ? Shape{sh.batch, sh.heads, sh.n_q, sh.n_q, sh.d_k, sh.d_v} : sh);
    const auto diag = std::ptrdiff_t(sh.n_kv) - std::ptrdiff_t(sh.n_q);
    auto same_document = [&](std::size_t b, std::size_t i, std::size_t j) {
      if (!top_left || !opt.segments) return true;  // (the view checks them)
      const Segments& seg = *opt.segments;
      const std::size_t row = seg.shape(0) > 1 ? b : 0;
      const std::ptrdiff_t token = std::ptrdiff_t(i) + diag;
      return token >= 0 && seg(row, std::size_t(token)) == seg(row, j);
    };
    const double scale = opt.scale ? *opt.scale
                         : bug == Bug::scale_one_over_d ? 1.0 / double(sh.d_k)
                                                        : 1.0 / std::sqrt(double(sh.d_k));
    std::vector<A> s(sh.n_kv), o(sh.d_v);
    std::vector<bool> seen(sh.n_kv);
    const A zero = convert<A>(0.0);
    // c tanh(x / c) in A (through float for bf16/fp16, as the library does, so that fp16 holds any cap)
    auto cap = [&](A x) {
      const double c = *opt.softcap;
      if constexpr (is_narrow_float<A>) return A(float(c) * std::tanh(static_cast<float>(x) / float(c)));
      else return A(convert<A>(c) * tanh_of<A>(A(x / convert<A>(c))));
    };
    for (std::size_t b = 0; b < sh.batch; ++b)
      for (std::size_t h = 0; h < sh.heads; ++h)
        for (std::size_t i = 0; i < sh.n_q; ++i) {
          const std::size_t hk = bug == Bug::gqa_modulo ? h % sh.kv_head_count() : h / sh.group();
          const std::size_t h_alibi = bug == Bug::alibi_wrong_head ? (h + 1) % sh.heads : h;
          auto keys = mask.keys(b, i);
          keys.end = std::min(keys.end, sh.n_kv);
          for (std::size_t j = 0; j < sh.n_kv; ++j) {
            A dot = convert<A>(0.0);
            for (std::size_t l = 0; l < sh.d_k; ++l) dot += convert<A>(in.q(b, h, i, l)) * convert<A>(in.k(b, hk, j, l));
            seen[j] = j >= keys.begin && j < keys.end && mask.visible(b, i, j) && same_document(b, i, j);
            s[j] = dot * convert<A>(scale);
            if (opt.softcap && bug != Bug::softcap_after_mask) s[j] = cap(s[j]);
            if (seen[j]) {
              if (opt.alibi_slopes)
                s[j] += convert<A>((*opt.alibi_slopes)(h_alibi) * double(std::ptrdiff_t(j) - std::ptrdiff_t(i) - diag));
              if (mask.has_offset()) s[j] += convert<A>(mask.offset(i, j));
            }
            if (bug != Bug::mask_after_softmax && !seen[j]) s[j] = convert<A>(minus_inf);
            if (opt.softcap && bug == Bug::softcap_after_mask) s[j] = cap(s[j]);
          }
          const A sink = convert<A>(mask.sink(h));
          A m = convert<A>(minus_inf), l = convert<A>(0.0);
          for (std::size_t c = 0; c < sh.d_v; ++c) o[c] = convert<A>(0.0);
          if (bug == Bug::no_rescale) {
            // Online softmax over key blocks of 16, without rescaling O when m grows.
            m = sink;
            l = sink > convert<A>(minus_inf) ? convert<A>(1.0) : zero;
            for (std::size_t j0 = 0; j0 < sh.n_kv; j0 += 16) {
              A m_new = m;
              for (std::size_t j = j0; j < std::min(j0 + 16, sh.n_kv); ++j) m_new = s[j] > m_new ? s[j] : m_new;
              if (!(m_new > convert<A>(minus_inf))) continue;
              l = m > convert<A>(minus_inf) ? A(l * exp_of<A>(m - m_new)) : zero;
              m = m_new;
              for (std::size_t j = j0; j < std::min(j0 + 16, sh.n_kv); ++j) {
                const A p = exp_of<A>(s[j] - m);
                l += p;
                for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += p * convert<A>(in.v(b, hk, j, c));
              }
            }
            for (std::size_t j = 0; j < sh.n_kv; ++j) s[j] = seen[j] ? exp_of<A>(s[j] - m) / l : convert<A>(0.0);
          } else if (bug == Bug::split_merge_no_rescale) {
            // Two halves of the keys, each with its own max m_p, sum l_p and
            // unnormalised O_p, merged as (O_1 + O_2) / (l_1 + l_2) without
            // the factors exp(m_p - m) (the sink joins the first half).
            const std::size_t half = (sh.n_kv + 1) / 2;
            std::vector<A> o_part(sh.d_v);
            for (std::size_t part = 0; part < 2; ++part) {
              const std::size_t j0 = part ? half : 0, j1 = part ? sh.n_kv : half;
              A m_p = part ? convert<A>(minus_inf) : sink;
              for (std::size_t j = j0; j < j1; ++j) m_p = s[j] > m_p ? s[j] : m_p;
              if (!(m_p > convert<A>(minus_inf))) continue;
              A l_p = part ? zero : exp_of<A>(A(sink - m_p));
              for (std::size_t c = 0; c < sh.d_v; ++c) o_part[c] = zero;
              for (std::size_t j = j0; j < j1; ++j) {
                const A p = exp_of<A>(s[j] - m_p);
                l_p += p;
                for (std::size_t c = 0; c < sh.d_v; ++c) o_part[c] += p * convert<A>(in.v(b, hk, j, c));
              }
              l += l_p;
              for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += o_part[c];
              m = m_p > m ? m_p : m;
            }
            for (std::size_t j = 0; j < sh.n_kv; ++j) s[j] = seen[j] && l > zero ? exp_of<A>(s[j] - m) / l : zero;
            for (std::size_t c = 0; c < sh.d_v; ++c) o[c] = l > zero ? A(o[c] / l) : zero;
          } else {
            for (std::size_t j = 0; j < sh.n_kv; ++j) m = s[j] > m ? s[j] : m;
            if (sink > m) m = sink;
            const bool guard = bug != Bug::masked_row_nan;
            const bool row_masked = guard && !(m > convert<A>(minus_inf));
            const A shift = bug == Bug::no_max_shift ? convert<A>(0.0) : m;
            for (std::size_t j = 0; j < sh.n_kv; ++j) {
              s[j] = row_masked ? convert<A>(0.0) : exp_of<A>(s[j] - shift);
              l += s[j];
            }
            const A sink_term = sink > convert<A>(minus_inf) ? exp_of<A>(A(sink - shift)) : zero;
            l += sink_term;
            for (std::size_t j = 0; j < sh.n_kv; ++j) {
              if (!row_masked) s[j] /= l;
              if (bug == Bug::mask_after_softmax && !seen[j]) s[j] = convert<A>(0.0);
              for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += s[j] * convert<A>(in.v(b, hk, j, c));
            }
            if (bug == Bug::sink_in_numerator && !row_masked)
              for (std::size_t c = 0; c < sh.d_v; ++c) o[c] += sink_term / l;
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
      make<Bug::gqa_modulo>("grouped K/V heads mapped h % H_kv instead of h / g"),
      make<Bug::softcap_after_mask>("soft-cap applied after the mask (masked keys get -c, not -inf)"),
      make<Bug::sink_in_numerator>("the sink's term added to the numerator (as a value of 1)"),
      make<Bug::alibi_wrong_head>("ALiBi slope of the next head"),
      make<Bug::split_merge_no_rescale>("split-KV partials merged without rescaling by exp(m_part - m)"),
  };
}

}  // namespace attn::props
