// The one JSON writer of the tools (the CLI, the studies, the claims, the
// machine's peaks): nlohmann::json, keys in insertion order. A non-finite
// number is written as null (JSON has no Inf or NaN), and invalid UTF-8 in a
// string is replaced rather than thrown on, so writing JSON never fails.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace attn {

using Json = nlohmann::ordered_json;

// One line, no spaces.
inline std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace attn
