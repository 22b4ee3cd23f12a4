// A small command-line reader for attn-lab: `--name value`, `--name=value`
// and flags; every unknown or malformed option is one clear Error.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "attn/core/error.hpp"

namespace attn::cli {

class Args {
 public:
  // `valued`: options that take a value; `flags`: options that do not.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& flags) {
    for (std::size_t i = 0; i < argv.size(); ++i) {
      std::string a = argv[i], value;
      if (a.rfind("--", 0) != 0) throw Error("unexpected argument '" + a + "' (options start with --)");
      const auto eq = a.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
      }
      if (flags.count(a)) {
        if (inline_value) throw Error(a + " takes no value");
        flags_.insert(a);
      } else if (valued.count(a)) {
        if (!inline_value) {
          if (i + 1 >= argv.size()) throw Error(a + " needs a value");
          value = argv[++i];
        }
        if (values_.count(a)) throw Error(a + " given twice");
        values_[a] = value;
      } else {
        throw Error("unknown option '" + a + "' (see --help)");
      }
    }
  }

  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  double real(const std::string& name, double fallback) const {
    return has(name) ? parse_real(str(name), name) : fallback;
  }
  std::uint64_t count(const std::string& name, std::uint64_t fallback) const {
    return has(name) ? parse_count(str(name), name) : fallback;
  }

  static double parse_real(const std::string& s, const std::string& what) {
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
      throw Error(what + ": '" + s + "' is not a finite number");
    return x;
  }
  static std::uint64_t parse_count(const std::string& s, const std::string& what) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || s[0] == '-' || *end != '\0' || errno == ERANGE)
      throw Error(what + ": '" + s + "' is not a non-negative integer");
    return x;
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace attn::cli
