// The claims ledger: published statements about attention, each an
// experiment with a criterion fixed before it runs and a measured verdict.
// A claim is one .cpp file in tools/claims/: its metadata (id, source,
// quote, statement, experiment, criterion) in an ATTN_CLAIM entry beside the
// experiment's code, registered at start-up (the claims library is linked
// whole, so every file's entry is kept).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/verify.hpp"
#include "studies/studies.hpp"

namespace attn::claims {

enum class Outcome { holds, does_not_hold, inconclusive };
std::string_view outcome_name(Outcome o);  // "holds", "does not hold", "inconclusive"

struct Figure {
  std::string name;
  double value = 0;
};

// A figure for the report, where one helps: lines y(x), one per series.
struct Plot {
  std::string title, xlabel, ylabel;
  bool logx = false, logy = false;
  std::vector<double> x;
  std::vector<std::pair<std::string, std::vector<double>>> series;  // (label, y for each x)
};

struct Verdict {
  Outcome outcome = Outcome::inconclusive;
  std::string why;              // the numbers that decided it, in a sentence
  std::vector<Figure> figures;  // the measured figures
  std::vector<Plot> plots;      // optional figures for the report
};

struct Config {
  std::string profile = "quick";  // smoke (tests: tiny), quick (scripts/run), full (paper-sized)
  bool full() const { return profile == "full"; }
  bool smoke() const { return profile == "smoke"; }
  std::uint64_t seed = 2026;
  Progress progress;
  // The heap high-water mark, from the executable's counting allocator (not
  // part of the library): restart it, then read its growth since.
  std::function<void()> heap_reset;
  std::function<std::size_t()> heap_peak_growth;
};

struct Claim {
  std::string_view id, source, quote, statement, experiment, criterion;
  Verdict (*run)(const Config&);
};

// Every registered claim, ordered by id.
const std::vector<Claim>& all_claims();

// Adds a claim to the ledger at start-up (through ATTN_CLAIM); a second
// claim with the same id is a programming error reported at the first
// all_claims().
struct Registration {
  explicit Registration(const Claim& c);
};
#define ATTN_CLAIM(...) \
  static const ::attn::claims::Registration attn_claim_registration{::attn::claims::Claim{__VA_ARGS__}};

// The backends claims compare are chosen by trait (registry.hpp):
// baseline_backend(), fused_backend() (FlashAttention's algorithm), exact_backend().

// True when cfg can measure the heap; otherwise sets v inconclusive, saying why.
bool heap_measurable(const Config& cfg, Verdict& v);
Json to_json(const Claim& c, const Verdict& v, double seconds);

}  // namespace attn::claims
