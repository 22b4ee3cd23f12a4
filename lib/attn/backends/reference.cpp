#include "attn/backends/reference.hpp"

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "attn/backends/naive_kernel.hpp"
#include "attn/double_double.hpp"
#include "attn/instantiate.hpp"

namespace attn::backends {

using exact_t = boost::multiprecision::cpp_bin_float_50;

template <class S, Accumulate P>
Result<S> Reference::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  return detail::naive_attention<S, exact_t>(in, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Reference::workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_workspace_bytes<exact_t>(s);
}

Result<double> reference_attention(const Inputs<double>& in, const Options& opt) {
  Options all = opt;
  all.need_weights = all.need_lse = true;
  Workspace ws;
  return detail::naive_attention<double, exact_t>(in, all, ws, Reference::name);
}

Result<double> compensated_reference_attention(const Inputs<double>& in, const Options& opt) {
  Options all = opt;
  all.need_weights = all.need_lse = true;
  Workspace ws;
  return detail::naive_attention<double, dd>(in, all, ws, "compensated reference");
}

double reference_cost(const Shape& s) {
  return double(s.batch * s.heads * s.n_q * s.n_kv) * double(s.d_k + s.d_v + 100);
}

ATTN_INSTANTIATE_BACKEND(Reference)

}  // namespace attn::backends
