// The generated problems of the property suite. A Case is a small readable
// description (shape, mask kind and parameters, magnitude, seed, policy,
// block sizes) from which the tensors and masks are built deterministically,
// so RapidCheck shrinks it to a counterexample one can read and replay.
#pragma once

#include <rapidcheck.h>

#include <optional>
#include <ostream>
#include <string>

#include "attn/core/random.hpp"
#include "attn/registry/registry.hpp"

namespace attn::props {

enum class MaskKind { none, causal, window, keypad, boolean, bias };
enum class Magnitude {
  unit,        // scaled scores with standard deviation 1
  tiny,        // 1e-3: nearly uniform weights
  large,       // 10 .. 1e4 (the scaled scores' standard deviation)
  near_limit,  // |Q| up to half the storage format's largest value, as far as A can hold Q.K
};

struct Case {
  Shape shape;
  MaskKind mask = MaskKind::none;
  std::size_t window = 1;                 // window: keys seen
  std::vector<std::size_t> valid_length;  // keypad: per batch
  std::size_t masked_row = 0;             // boolean/bias: a fully masked query row (n_q = none)
  std::size_t masked_keys_begin = 0, masked_keys_end = 0;  // boolean/bias: keys masked for every query
  Magnitude magnitude = Magnitude::unit;
  double logit_scale = 1;
  Accumulate policy = Accumulate::fp32;
  std::size_t block_q = 0, block_k = 0;  // 0: the backend's default
  std::size_t threads = 1;               // Options::threads (streaming's workers)
  std::uint64_t seed = 0;
  // The variants (problem.hpp), each present in about a quarter of the cases:
  // shape.kv_heads = heads / group (grouped-query attention when group > 1)
  std::optional<double> softcap;
  enum class Sinks { none, random, some_minus_inf } sinks = Sinks::none;  // N(0, 2) logits per head
  enum class Alibi { none, geometric, random } alibi = Alibi::none;
  std::size_t documents = 0;     // > 0: packed documents of random lengths (segments)
  bool documents_split = false;  // one document id reused after another (a split document)
  std::size_t kv_splits = 0;     // Options::kv_splits (0: the backend's choice)

  // The inputs for storage whose largest finite value is max_storage (Q is
  // scaled per format only for Magnitude::near_limit).
  Inputs<double> inputs(double max_storage, double max_accumulate) const;
  Options options() const;
  bool has_masked_rows() const;
  bool has_variants() const {
    return shape.kv_head_count() != shape.heads || softcap || sinks != Sinks::none || alibi != Alibi::none || documents > 0;
  }
  // The case without any variant (the MHA shape, plain scores).
  Case plain() const;
};

void showValue(const Case& c, std::ostream& os);
std::string describe(const Case& c);
// RC_TAG / RC_CLASSIFY of the coverage that matters (mask, magnitude, cross,
// d_k != d_v, fully masked rows, ragged blocks); call from a property body.
void classify(const Case& c);

// Cases whose reference (50 digits, ~2.9 us an exp) stays cheap:
// B H n_q n_kv (d_k + d_v + 100) <= budget.
rc::Gen<Case> gen_case(double cost_budget, bool allow_masks = true);

// The largest finite value of a storage precision and of the accumulation
// type of a policy, by precision name.

}  // namespace attn::props

namespace rc {
template <>
struct Arbitrary<attn::props::Case> {
  static Gen<attn::props::Case> arbitrary() { return attn::props::gen_case(2e6); }
};
}  // namespace rc
