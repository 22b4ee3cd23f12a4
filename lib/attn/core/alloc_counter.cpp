#include "attn/core/alloc_counter.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace attn::heap {

namespace {
std::atomic<std::int64_t> live{0}, peak{0};  // signed: see alloc_counter.hpp

void* counted(void* p) {
  if (!p) throw std::bad_alloc();
  const auto size = std::int64_t(malloc_usable_size(p));
  const std::int64_t now = live.fetch_add(size, std::memory_order_relaxed) + size;
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  return p;
}
void uncounted(void* p) {
  if (!p) return;
  live.fetch_sub(std::int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
void* aligned(std::size_t n, std::align_val_t a) {
  const auto al = static_cast<std::size_t>(a);
  return std::aligned_alloc(al, (n + al - 1) / al * al);
}
}  // namespace

std::int64_t live_bytes() { return live.load(std::memory_order_relaxed); }
void reset_peak() { peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed); }
std::int64_t peak_bytes() { return peak.load(std::memory_order_relaxed); }

}  // namespace attn::heap

using attn::heap::aligned;
using attn::heap::counted;
using attn::heap::uncounted;

void* operator new(std::size_t n) { return counted(std::malloc(n ? n : 1)); }
void* operator new[](std::size_t n) { return counted(std::malloc(n ? n : 1)); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(aligned(n ? n : 1, a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(aligned(n ? n : 1, a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n ? n : 1);
  return p ? counted(p) : nullptr;
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
