#include "attn/registry/backend.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace attn {

std::size_t workspace_cap() {
  if (const char* env = std::getenv("ATTN_MEMORY_CAP")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return static_cast<std::size_t>(v);
    throw Error(std::string("ATTN_MEMORY_CAP='") + env + "' is not a positive number of bytes");
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 4
                               : std::size_t(1) << 32;
}

void check_workspace(std::string_view backend, std::string_view what, std::size_t bytes) {
  const std::size_t cap = workspace_cap();
  if (bytes > cap) {
    auto mib = [](std::size_t b) {
      return b >= (std::size_t(1) << 20) ? std::to_string(b >> 20) + " MiB" : std::to_string(b) + " bytes";
    };
    throw Error(std::string(backend) + " needs " + mib(bytes) + " for " + std::string(what) +
                ", over the memory cap of " + mib(cap) +
                " (a quarter of RAM; set ATTN_MEMORY_CAP to change it)");
  }
}

}  // namespace attn
