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

#define ATTN_INSTANTIATE(A)                                                                      \
  template void scores_tile(const A*, const A*, A*, std::size_t, std::size_t, std::size_t, A); \
  template void pv_tile(const A*, const A*, A*, std::size_t, std::size_t, std::size_t, bool);
ATTN_FOR_EACH_STORAGE(ATTN_INSTANTIATE)
#undef ATTN_INSTANTIATE

}  // namespace attn::detail
