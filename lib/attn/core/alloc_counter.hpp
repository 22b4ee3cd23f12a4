// Measured heap: a counting global operator new/delete, linked only into
// executables that report peak memory (attn-lab, attn-bench). It tracks the
// live bytes and their high-water mark, with malloc_usable_size as the size
// of each block (so frees need no header and sizes match exactly).
#pragma once

#include <cstddef>

namespace attn::heap {

std::size_t live_bytes();
// Restarts the high-water mark at the current live bytes.
void reset_peak();
std::size_t peak_bytes();

// The heap growth of a scope: peak during it minus live at its start.
struct Watch {
  std::size_t start = (reset_peak(), live_bytes());
  std::size_t peak_growth() const { return peak_bytes() - start; }
};

}  // namespace attn::heap
