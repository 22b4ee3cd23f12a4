#include "attn/backends/math.hpp"

#include "attn/backends/slab_kernel.hpp"
#include "attn/backends/instantiate.hpp"

namespace attn::backends {

// One slab holding every query row: the whole score matrix of a head.
template <class S, Accumulate P>
Result<S> Math::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return detail::slab_attention<S, accumulate_t<S, P>>(in, opt, ws, in.shape().n_q, name);
}

template <class S, Accumulate P>
std::size_t Math::workspace_bytes(const Shape& s, const Options&) {
  return detail::slab_workspace_bytes<S, accumulate_t<S, P>>(s, s.n_q);
}

template <class S, Accumulate P>
Gradients<S> Math::backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                          const Options& opt, Workspace& ws) {
  return detail::slab_backward<S, accumulate_t<S, P>>(in, saved, d_out, opt, ws, in.shape().n_q, name);
}

template <class S, Accumulate P>
std::size_t Math::backward_workspace_bytes(const Shape& s, const Options& opt) {
  return detail::slab_backward_workspace_bytes<S, accumulate_t<S, P>>(s, opt, s.n_q);
}

ATTN_INSTANTIATE_BACKEND(Math)
ATTN_INSTANTIATE_BACKWARD(Math)

}  // namespace attn::backends
