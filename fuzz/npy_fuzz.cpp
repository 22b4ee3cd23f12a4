// libFuzzer target: the .npy reader on arbitrary bytes. Any outcome but a
// tensor or one attn::Error (a crash, a sanitizer report, another exception,
// an allocation larger than the input justifies) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attn/core/error.hpp"
#include "attn/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = attn::load_npy_bytes(bytes, "fuzz").data;
    // The data it returns cannot exceed what the input held.
    if (t.size() > size) __builtin_trap();
  } catch (const attn::Error&) {
  }
  return 0;
}
