// The invariances users of attention kernels keep asking about (issue 39;
// FlashAttention issues 414, 988 and 1897, FlashInfer's batch-invariance
// tests): is a row's result the same when the call is repeated, when the
// thread count changes, when the row sits in another batch, in a longer or
// shorter query block, when the keys are split, when K/V heads are shared?
// Each invariance is one entry of the table below: two (or more) ways of
// computing the same rows, compared element by element on fixed problems.
// A comparison's verdict for one backend x storage x accumulation x pass:
//   bitwise:  every compared element has the same bits;
//   within:   some differ, each by no more than the two runs' probabilistic
//             bounds summed (metrics.hpp: what rounding alone can do; the
//             output's and logsumexp's per query row, the gradients' per
//             tensor), which may be uninformative (bounds at or above the
//             values: long sums in bf16 / fp16 storage accumulation);
//   beyond:   some element differs by more (a defect, or a bound that does
//             not hold), the first such element named.
// A pair the backend cannot run (no backward pass, a plugin's capabilities)
// throws Unsupported: not applicable, never counted as bitwise. The problems
// have grouped K/V heads (H = 4, H_kv = 2) where the backend claims them, else
// H_kv = H (every invariance then runs but GQA's).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/io/json.hpp"
#include "attn/registry/registry.hpp"

namespace attn::invariance {

enum class Verdict { bitwise, within, beyond };
std::string_view verdict_name(Verdict v);  // "bitwise", "within bounds", "BEYOND"

struct Subject {
  const BackendInfo* backend = nullptr;
  const PrecisionInfo* precision = nullptr;
  Accumulate accumulate = Accumulate::fp32;
  bool backward = false;  // the gradients (dQ, dK, dV) instead of the output and logsumexp
};

// One comparison, the worst of the invariance's pairs.
struct Outcome {
  Verdict verdict = Verdict::bitwise;
  std::size_t compared = 0;   // elements compared, over every pair
  std::size_t differing = 0;  // of them, not bitwise equal
  double max_diff = 0;        // the largest |a - b|
  double tolerance = 0;       // the summed bounds at that element
  double max_abs = 0;         // the largest |value| compared: bounds at or above it are uninformative
  // The first element that differs (the first beyond the bounds, when any):
  // "pair, tensor[b, h, i, c]: a vs b" with the values to 17 digits.
  std::string first;
  // The problem of that pair (inputs before rounding to storage) and the
  // options of its first computation: the counterexample, saved by the CLI.
  Inputs<double> problem;
  std::string pair;  // "1 thread vs 2", ...
  std::string note;  // a pair left out, and why (a plugin without key padding)
};

struct Invariance {
  std::string id;    // threads
  std::string name;  // "thread count": the report's column
  std::string what;  // the computations compared, one sentence
  bool forward = true, backward = true;  // the passes it applies to
  std::function<Outcome(const Subject&, std::uint64_t seed)> check;
};

// Every invariance, in the report's column order.
const std::vector<Invariance>& invariances();

// One comparison: its outcome's fields into `cell` (verdict, compared,
// differing, max_diff, tolerance, max_abs, informative for a within verdict:
// false when the bounds reached the values compared, first, note), or, when
// the pair cannot run (Unsupported), verdict "not applicable" and the reason.
// A BEYOND outcome's problem is saved as q.npy, k.npy, v.npy beside
// case.json (the cell) in `beyond_dir`, named in cell["counterexample"].
// Returns the outcome, none when not applicable. attn-lab invariance's matrix
// and attn-lab verify's invariance cells.
std::optional<Outcome> check_into(Json& cell, const Invariance& inv, const Subject& s, std::uint64_t seed,
                   const std::string& beyond_dir);

}  // namespace attn::invariance
