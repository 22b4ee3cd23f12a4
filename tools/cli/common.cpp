#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>

#include "attn/io/npy.hpp"
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

void refuse_oversized_inputs(const Args& args, std::string_view what, long double values) {
  const long double bytes = values * sizeof(double), most = static_cast<long double>(SIZE_MAX);
  check_workspace("--random " + args.str("--random"), what, bytes < most ? static_cast<std::size_t>(bytes) : SIZE_MAX);
}

void print_json(const Json& j) { std::cout << dump(j) << "\n"; }

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

extern const std::string_view kVariantHelp = R"(variants (each composes with the others and with every mask):
  grouped-query attention        K and V with fewer heads than Q (H = g H_kv); query head h
                                 reads K/V head h / g. attend: --random B,H,NQ,NKV,DK,DV,HKV
                                 or .npy K/V files with H_kv heads; layer: --kv-heads HKV
  --softcap C                    logit soft-capping: s -> C tanh(s / C) after scaling, before
                                 ALiBi and the mask (Gemma 2)
  --sinks SINKS.npy              one sink logit per query head ([H], float; -inf: none) that
                                 joins each row's softmax denominator and carries no value
  --alibi                        ALiBi with the paper's geometric slopes for H heads, computed
                                 on the fly: s += slope_h (j - i - (n_kv - n_q))
  --alibi-slopes SLOPES.npy      ALiBi with these slopes ([H])
  --segments IDS.npy             document ids of packed sequences ([n_kv] or [B, n_kv],
                                 integers below 2^53); a query (token i + n_kv - n_q) sees only
                                 keys of its own document
  --kv-splits K                  split-KV decoding: the streaming backend splits the keys into
                                 K chunks per query block (default 0: chosen from the shape)
)";

void variant_options(const Args& args, Options& opt, std::size_t heads, std::size_t batch) {
  if (args.has("--softcap")) opt.softcap = args.real("--softcap", 0);
  auto per_head = [&](const char* name) {
    xt::xtensor<double, 1> t = load_npy_1d(args.str(name), name);
    if (t.size() != heads)
      throw Error(std::string(name) + " " + args.str(name) + " has " + std::to_string(t.size()) +
                  " values, expected one per query head (" + std::to_string(heads) + ")");
    return t;
  };
  if (args.has("--sinks")) opt.sinks = per_head("--sinks");
  if (args.flag("--alibi") && args.has("--alibi-slopes")) throw Error("give --alibi or --alibi-slopes, not both");
  if (args.flag("--alibi")) opt.alibi_slopes = alibi_slopes(heads);
  if (args.has("--alibi-slopes")) opt.alibi_slopes = per_head("--alibi-slopes");
  if (args.has("--segments")) {
    const std::string path = args.str("--segments");
    const xt::xtensor<double, 2> ids = load_npy_rows(path, "--segments");
    const std::size_t rows = ids.shape(0), n = ids.shape(1);
    if (rows != 1 && rows != batch)
      throw Error("--segments " + path + " has " + std::to_string(rows) + " rows, expected 1 or the batch " +
                  std::to_string(batch));
    Segments seg = Segments::from_shape({rows, n});
    for (std::size_t x = 0; x < rows * n; ++x) {
      const double id = ids.data()[x];
      if (!(std::fabs(id) < 0x1p53) || id != std::floor(id))
        throw Error("--segments " + path + ": document ids must be integers (entry " + std::to_string(x) + " is " +
                    std::to_string(id) + ")");
      seg.data()[x] = static_cast<std::int64_t>(id);
    }
    opt.segments = std::move(seg);
  }
  opt.kv_splits = args.count("--kv-splits", 0);
}

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
