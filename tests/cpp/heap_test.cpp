// The heap counter (attn/core/alloc_counter.hpp) that attn-lab's and
// attn-bench's peak memory figures come from: a scope's growth is seen, also
// after a library has freed through operator delete a block that operator new
// never counted (libtorch_cpu does while it loads; the counter wrapped below
// zero and read every later peak as 0).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "attn/core/alloc_counter.hpp"

namespace {

constexpr std::size_t mib = std::size_t(1) << 20;

// The growth a Watch sees over one allocation of `bytes` (touched, so it is real), freed before returning.
std::size_t growth_of(std::size_t bytes) {
  attn::heap::Watch watch;
  void* volatile p = ::operator new(bytes);
  std::memset(p, 1, bytes);
  const std::size_t g = watch.peak_growth();
  ::operator delete(p);
  return g;
}

TEST(Heap, WatchSeesAnAllocation) {
  const std::size_t g = growth_of(64 * mib);
  EXPECT_GE(g, 64 * mib);
  EXPECT_LT(g, 65 * mib);  // the block (malloc_usable_size: a page more at most), not the process's heap
}

TEST(Heap, WatchSeesAnAllocationAfterAForeignFree) {
  // A block from malloc, larger than all the counter has seen live but smaller than the allocation watched
  // next (as libtorch_cpu's 6168 bytes against naive's 64 MiB), freed through operator delete (which frees
  // it with free, the counting operators' own pairing): live below zero, then above it again.
  void* foreign = std::malloc(16 * mib);
  ASSERT_NE(foreign, nullptr);
  std::memset(foreign, 1, 4096);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // the mismatch is the case under test
  ::operator delete(foreign);
#pragma GCC diagnostic pop
  const std::size_t g = growth_of(64 * mib);
  EXPECT_GE(g, 64 * mib);
  EXPECT_LT(g, 65 * mib);
  EXPECT_LT(growth_of(1), std::size_t(4096));  // a one-byte block: its own size, no wrapped difference
}

}  // namespace
