#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "attn/npy.hpp"
#include "cli/command.hpp"

namespace attn::cli {

void refuse_overwrite(const Args& args, std::initializer_list<const char*> outputs) {
  if (args.flag("--force")) return;
  for (const char* o : outputs)
    if (args.has(o) && std::filesystem::exists(args.str(o)))
      throw Error(std::string(o) + " " + args.str(o) + " exists already; pass --force to replace it");
}

Accumulate accumulate_option(const Args& args, const PrecisionInfo& p) {
  return args.has("--accumulate") ? parse_accumulate(args.str("--accumulate")) : p.default_accumulate;
}

std::size_t threads_option(const Args& args) {
  const std::uint64_t t = args.count("--threads", 1);
  set_blas_threads(static_cast<int>(std::clamp<std::uint64_t>(t, 1, 1024)));  // validate() rejects the rest
  return t;
}

void print_json(const Json& j) { std::cout << dump(j) << "\n"; }

namespace {
template <std::size_t N, std::size_t M>
void save_reshaped(const std::string& path, const xt::xtensor<double, N>& t) {
  std::array<std::size_t, M> shape;
  std::copy(t.shape().end() - M, t.shape().end(), shape.begin());
  save_npy_atomic(path, xt::xtensor<double, M>(xt::adapt(t.data(), t.size(), xt::no_ownership(), shape)));
}
}  // namespace

void save_with_rank(const std::string& path, const xt::xtensor<double, 4>& t, std::size_t rank) {
  switch (rank) {
    case 4: return save_npy_atomic(path, t);
    case 3: return save_reshaped<4, 3>(path, t);
    case 2: return save_reshaped<4, 2>(path, t);
  }
  throw Error("save_with_rank: rank " + std::to_string(rank));
}

void save_with_rank(const std::string& path, const xt::xtensor<double, 3>& t, std::size_t rank) {
  switch (rank) {
    case 3: return save_npy_atomic(path, t);
    case 2: return save_reshaped<3, 2>(path, t);
    case 1: return save_reshaped<3, 1>(path, t);
  }
  throw Error("save_with_rank: rank " + std::to_string(rank));
}

}  // namespace attn::cli
