#include "attn/backends/reference.hpp"

#include "attn/backends/reference_exact.hpp"

#include "attn/backends/naive_kernel.hpp"
#include "attn/core/double_double.hpp"
#include "attn/backends/instantiate.hpp"

namespace attn::backends {


template <class S, Accumulate P>
Result<S> Reference::run(const Inputs<S>& in, const Options& opt, Workspace& ws) {
  exact_caches_freed_at_thread_exit();
  return detail::naive_attention<S, exact_t>(in, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Reference::workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_workspace_bytes<exact_t>(s);
}

Result<double> reference_attention(const Inputs<double>& in, const Options& opt) {
  exact_caches_freed_at_thread_exit();
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

template <class S, Accumulate P>
Gradients<S> Reference::backward(const Inputs<S>& in, const Saved<S>&, const xt::xtensor<S, 4>& d_out,
                                 const Options& opt, Workspace& ws) {
  exact_caches_freed_at_thread_exit();
  return detail::naive_backward<S, exact_t>(in, nullptr, d_out, opt, ws, name);
}

template <class S, Accumulate P>
std::size_t Reference::backward_workspace_bytes(const Shape& s, const Options&) {
  return detail::naive_backward_workspace_bytes<exact_t>(s);
}

Gradients<double> reference_gradients(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out,
                                      const Options& opt) {
  exact_caches_freed_at_thread_exit();
  Workspace ws;
  return detail::naive_backward<double, exact_t>(in, nullptr, d_out, opt, ws, Reference::name);
}

exact_t reference_gradient_dot(const Inputs<double>& in, const xt::xtensor<double, 4>& d_out, const Options& opt,
                               const Inputs<double>& direction, const xt::xtensor<double, 1>* sink_direction) {
  exact_caches_freed_at_thread_exit();
  Workspace ws;
  exact_t sum = 0;
  detail::naive_backward_into<double, exact_t>(
      in, nullptr, d_out, opt, ws, Reference::name,
      [&](detail::Grad which, std::size_t b, std::size_t h, std::size_t row, std::size_t col, const exact_t& x) {
        switch (which) {
          case detail::Grad::dq: sum += x * exact_t(direction.q(b, h, row, col)); break;
          case detail::Grad::dk: sum += x * exact_t(direction.k(b, h, row, col)); break;
          case detail::Grad::dv: sum += x * exact_t(direction.v(b, h, row, col)); break;
          case detail::Grad::dsinks:
            if (sink_direction) sum += x * exact_t((*sink_direction)(h));
            break;
          case detail::Grad::dbias: break;
        }
      });
  return sum;
}

double reference_cost(const Shape& s) {
  return double(s.batch * s.heads * s.n_q * s.n_kv) * double(s.d_k + s.d_v + 100);
}

ATTN_INSTANTIATE_BACKEND(Reference)
ATTN_INSTANTIATE_BACKWARD(Reference)

}  // namespace attn::backends
