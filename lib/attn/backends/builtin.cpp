// The built-in backends: the one list that names them. Adding a backend is
// its header/source pair under backends/ plus one row here.
#include "attn/registry/backend_row.hpp"
#include "attn/backends/blocked.hpp"
#include "attn/backends/math.hpp"
#include "attn/backends/naive.hpp"
#include "attn/backends/reference.hpp"
#include "attn/backends/streaming.hpp"

namespace attn {

std::vector<BackendInfo> builtin_backends() {
  return {row_of<backends::Naive>(), row_of<backends::Math>(), row_of<backends::Blocked>(),
          row_of<backends::Streaming>(), row_of<backends::Reference>()};
}

}  // namespace attn
