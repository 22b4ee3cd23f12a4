#include "attn/backends/naive.hpp"

#include "attn/backends/naive_kernel.hpp"
#include "attn/instantiate.hpp"

namespace attn::backends {

template <class S, Accumulate P>
Result<S> Naive::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return detail::naive_attention<S, accumulate_t<S, P>>(in, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Naive::workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_workspace_bytes<accumulate_t<S, P>>(s);
}

ATTN_INSTANTIATE_BACKEND(Naive)

}  // namespace attn::backends
