// Measured heap: a counting global operator new/delete, linked only into
// executables that report peak memory (attn-lab, attn-bench). It tracks the
// live bytes and their high-water mark, with malloc_usable_size as the size
// of each block (so frees need no header and sizes match exactly).
//
// "Live" is the bytes allocated through these operators less the bytes freed
// through them, and it is signed: a library may free through operator delete
// a block that did not come from operator new (libtorch_cpu does while it
// loads: with the Python peers in attn-bench, a 6168-byte block freed when
// live stood at 4880), which takes live below zero. Unsigned, it wrapped, and
// every later peak read 0 (naive's 64 MiB score matrix at n = 4096 as no
// growth, in every run with the peers). A Watch's growth is a difference, so
// it holds as long as no such block is freed inside the watched scope.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace attn::heap {

std::int64_t live_bytes();
// Restarts the high-water mark at the current live bytes.
void reset_peak();
std::int64_t peak_bytes();

// The heap growth of a scope: peak during it minus live at its start.
struct Watch {
  std::int64_t start = (reset_peak(), live_bytes());
  std::size_t peak_growth() const { return std::size_t(std::max<std::int64_t>(0, peak_bytes() - start)); }
};

}  // namespace attn::heap
