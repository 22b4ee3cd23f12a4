// The allocator of every xtensor container in the project, force-included
// before any other header (meson.build: -include), so that all translation
// units agree on xt::xtensor's type.
//
// Why: xtensor's default, std::allocator, hands out malloc's 16-byte
// alignment, so a tensor's first value sat 16, 32 or 48 bytes into a cache
// line depending on the heap's history, and with it every row of a d = 128
// K or V: each 64-byte vector load then straddles two lines. The fp32 decode
// step over a 1 GiB KV cache took 1.3-1.9x as long with K and V 32 bytes into
// a line as with them on a line (four alternated pairs, docs/performance.md,
// section 34), so the same benchmark's time depended on what ran before it in
// the process. 64 bytes: a cache line, and an AVX-512 vector.
//
// Hand-written rather than xsimd::aligned_allocator: that one calls malloc
// directly, past the counting operator new (attn/core/alloc_counter.cpp) from
// which the memory reports read every tensor's bytes; this one allocates with
// the aligned operator new, which the counter sees.
#pragma once

#include <cstddef>
#include <new>

namespace attn {

inline constexpr std::size_t tensor_alignment = 64;

template <class T>
struct TensorAllocator {
  using value_type = T;
  TensorAllocator() noexcept = default;
  template <class U>
  TensorAllocator(const TensorAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{tensor_alignment}));
  }
  // (unsized: clang declares the sized aligned delete only with -fsized-deallocation, which the fuzz build lacks)
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{tensor_alignment}); }
  template <class U>
  struct rebind {
    using other = TensorAllocator<U>;
  };
  template <class U>
  bool operator==(const TensorAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace attn

#define XTENSOR_DEFAULT_ALLOCATOR(T) ::attn::TensorAllocator<T>
