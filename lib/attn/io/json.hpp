// The one JSON writer of the library and the tools (the CLI, the studies, the claims, the
// machine's peaks): nlohmann::json, keys in insertion order. A non-finite
// number is written as null (JSON has no Inf or NaN), and invalid UTF-8 in a
// string is replaced rather than thrown on, so writing JSON never fails.
#pragma once

#include <nlohmann/json.hpp>
#include <cmath>
#include <string>

#include "attn/registry/backend.hpp"

namespace attn {

using Json = nlohmann::ordered_json;

// One line, no spaces.
inline std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A backend's traits as an object (attn-lab list --json, attn-bench's context).
inline Json to_json(const BackendTraits& t) {
  return {{"exact", t.exact},
          {"baseline", t.baseline},
          {"weights_from_lse", t.weights_from_lse},
          {"tiled", t.tiled},
          {"own_threads", t.own_threads},
          {"uses_blas", t.uses_blas},
          {"memory_independent_of_n", t.memory_independent_of_n},
          {"plugin", t.plugin}};
}

// A number or null (NaN: "not computed", e.g. the baseline's error for the baseline itself).
inline Json number_or_null(double x) { return std::isnan(x) ? Json(nullptr) : Json(x); }

}  // namespace attn
