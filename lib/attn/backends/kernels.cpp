#include "attn/backends/kernels.hpp"

#include <xtensor-blas/xblas.hpp>

namespace attn::detail {

namespace {
template <class T>
auto matrix(T* p, std::size_t rows, std::size_t cols) {
  return xt::adapt(p, rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
}
}  // namespace

template <class A>
void scores_tile(const A* x, const A* y, A* c, std::size_t rows, std::size_t cols, std::size_t d, A alpha) {
  if constexpr (is_native_float<A>) {
    auto out = matrix(c, rows, cols);
    xt::blas::gemm(matrix(x, rows, d), matrix(y, cols, d), out, false, true, alpha, A(0));
  } else {
    scores_loops<A, A>(x, y, c, rows, cols, d, alpha);
  }
}

template <class A>
void pv_tile(const A* p, const A* v, A* o, std::size_t rows, std::size_t k, std::size_t d_v, bool add) {
  if constexpr (is_native_float<A>) {
    auto out = matrix(o, rows, d_v);
    xt::blas::gemm(matrix(p, rows, k), matrix(v, k, d_v), out, false, false, A(1), add ? A(1) : A(0));
  } else {
    pv_loops<A, A>(p, v, o, rows, k, d_v, add);
  }
}

template <class A>
void gemm_tn(const A* x, const A* y, A* c, std::size_t m, std::size_t n, std::size_t k, A alpha, bool add) {
  if constexpr (is_native_float<A>) {
    auto out = matrix(c, m, n);
    xt::blas::gemm(matrix(x, k, m), matrix(y, k, n), out, true, false, alpha, add ? A(1) : A(0));
  } else {
    const A zero = convert<A>(0.0);
    for (std::size_t r = 0; r < m; ++r)
      for (std::size_t col = 0; col < n; ++col) {
        A sum = zero;
        for (std::size_t l = 0; l < k; ++l) sum += x[l * m + r] * y[l * n + col];
        c[r * n + col] = add ? A(c[r * n + col] + A(alpha * sum)) : A(alpha * sum);
      }
  }
}

#define ATTN_INSTANTIATE(A)                                                                      \
  template void scores_tile(const A*, const A*, A*, std::size_t, std::size_t, std::size_t, A); \
  template void pv_tile(const A*, const A*, A*, std::size_t, std::size_t, std::size_t, bool); \
  template void gemm_tn(const A*, const A*, A*, std::size_t, std::size_t, std::size_t, A, bool);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
