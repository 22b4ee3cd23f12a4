#include "attn/backends/naive.hpp"

#include "attn/backends/naive_kernel.hpp"
#include "attn/backends/instantiate.hpp"

namespace attn::backends {

template <class S, Accumulate P>
Result<S> Naive::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return detail::naive_attention<S, accumulate_t<S, P>>(in, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Naive::workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_workspace_bytes<accumulate_t<S, P>>(s);
}

template <class S, Accumulate P>
Gradients<S> Naive::backward(const Inputs<S>& in, const Saved<S>& saved, const xt::xtensor<S, 4>& d_out,
                             const Options& opt, Workspace& ws) {
  return detail::naive_backward<S, accumulate_t<S, P>>(in, &saved.out, d_out, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Naive::backward_workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_backward_workspace_bytes<accumulate_t<S, P>>(s);
}

ATTN_INSTANTIATE_BACKEND(Naive)
ATTN_INSTANTIATE_BACKWARD(Naive)

}  // namespace attn::backends
