// Explicit instantiation of a backend's run/workspace_bytes for every storage
// type and accumulation policy: one line at the end of each backend's .cpp,
// so the tools and tests that link the library never instantiate kernels.
#pragma once

#include "attn/registry/backend.hpp"

#define ATTN_INSTANTIATE_BACKEND_SP(B, S, P)                                                                   \
  template ::attn::Result<S> B::run<S, P>(const ::attn::Inputs<S>&, const ::attn::Options&, ::attn::Workspace&); \
  template std::size_t B::workspace_bytes<S, P>(const ::attn::Shape&, const ::attn::Options&);
#define ATTN_INSTANTIATE_BACKEND_S(B, S)                      \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::fp64) \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::fp32) \
  ATTN_INSTANTIATE_BACKEND_SP(B, S, ::attn::Accumulate::storage)
// The same for a backend's backward pass (HasBackward).
#define ATTN_INSTANTIATE_BACKWARD_SP(B, S, P)                                                                 \
  template ::attn::Gradients<S> B::backward<S, P>(const ::attn::Inputs<S>&, const ::attn::Saved<S>&,          \
                                                  const ::xt::xtensor<S, 4>&, const ::attn::Options&,    \
                                                  ::attn::Workspace&);                                         \
  template std::size_t B::backward_workspace_bytes<S, P>(const ::attn::Shape&, const ::attn::Options&);
#define ATTN_INSTANTIATE_BACKWARD_S(B, S)                      \
  ATTN_INSTANTIATE_BACKWARD_SP(B, S, ::attn::Accumulate::fp64) \
  ATTN_INSTANTIATE_BACKWARD_SP(B, S, ::attn::Accumulate::fp32) \
  ATTN_INSTANTIATE_BACKWARD_SP(B, S, ::attn::Accumulate::storage)
#define ATTN_INSTANTIATE_BACKWARD(B)            \
  ATTN_INSTANTIATE_BACKWARD_S(B, double)        \
  ATTN_INSTANTIATE_BACKWARD_S(B, float)         \
  ATTN_INSTANTIATE_BACKWARD_S(B, ::attn::bf16) \
  ATTN_INSTANTIATE_BACKWARD_S(B, ::attn::fp16)

#define ATTN_INSTANTIATE_BACKEND(B)     \
  ATTN_INSTANTIATE_BACKEND_S(B, double) \
  ATTN_INSTANTIATE_BACKEND_S(B, float)  \
  ATTN_INSTANTIATE_BACKEND_S(B, ::attn::bf16) \
  ATTN_INSTANTIATE_BACKEND_S(B, ::attn::fp16)
