#include "attn/backends/blocked.hpp"

#include "attn/backends/slab_kernel.hpp"
#include "attn/backends/instantiate.hpp"

namespace attn::backends {

template <class S, Accumulate P>
Result<S> Blocked::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return detail::slab_attention<S, accumulate_t<S, P>>(in, opt, ws, block_q(opt), name);
}

template <class S, Accumulate P>
std::size_t Blocked::workspace_bytes(const Shape& s, const Options& opt) {
  return detail::slab_workspace_bytes<S, accumulate_t<S, P>>(s, block_q(opt));
}

template <class S, Accumulate P>
Gradients<S> Blocked::backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                          const Options& opt, Workspace& ws) {
  return detail::slab_backward<S, accumulate_t<S, P>>(in, saved, d_out, opt, ws, block_q(opt), name);
}

template <class S, Accumulate P>
std::size_t Blocked::backward_workspace_bytes(const Shape& s, const Options& opt) {
  return detail::slab_backward_workspace_bytes<S, accumulate_t<S, P>>(s, opt, block_q(opt));
}

ATTN_INSTANTIATE_BACKEND(Blocked)
ATTN_INSTANTIATE_BACKWARD(Blocked)

}  // namespace attn::backends
