// The claims ledger: published statements about attention, each an
// experiment with a criterion fixed before it runs and a measured verdict.
// A claim is two things: its ledger entry (tools/claims/ledger.json: id,
// source, quote, statement, experiment, criterion, registration date,
// revisions, retirement), built into attn-lab as a header, and one .cpp file
// in tools/claims/ whose ATTN_CLAIM entry registers the experiment at
// start-up (the claims library is linked whole, so every file's entry is kept).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/verify/verify.hpp"
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

// A criterion's change after a run: the old text, the new and why.
struct Revision {
  std::string_view date, old_criterion, new_criterion, reason;
};

// A claim: its experiment (registered by ATTN_CLAIM in the claim's .cpp)
// and its ledger entry (tools/claims/ledger.json, built into attn-lab):
// source, quote, statement, experiment, criterion, the date it was
// registered, whether that registration preceded the experiment's code
// (pre-registered) and every revision of the criterion.
struct Claim {
  std::string_view id, source, quote, statement, experiment, criterion, registered, note;
  bool preregistered = false;
  std::vector<Revision> revisions;
  Verdict (*run)(const Config&) = nullptr;
};

// Every registered claim with its ledger entry, ordered by id. A claim
// without an entry, an entry missing a field or two claims with one id are
// programming errors reported (as attn::Error) at the first call. Entries
// without an experiment yet (registered ahead of the code) are not listed.
const std::vector<Claim>& all_claims();

// A ledger entry retired because its criterion could not fail: its
// experiment's code is gone, the entry stays with the date and the reason.
struct Retired {
  std::string_view id, statement, source, date, reason;
};
// Every retired entry of the ledger, ordered by id.
const std::vector<Retired>& retired_claims();

// What a claim's .cpp registers: its id and its experiment.
struct Experiment {
  std::string_view id;
  Verdict (*run)(const Config&);
};
// Adds a claim's experiment at start-up (through ATTN_CLAIM(.id, .run)).
struct Registration {
  explicit Registration(const Experiment& e);
};
// (named by __COUNTER__: the claims are compiled as a unity build, several files in one translation unit)
#define ATTN_CLAIM_NAME2(a, b) a##b
#define ATTN_CLAIM_NAME(a, b) ATTN_CLAIM_NAME2(a, b)
#define ATTN_CLAIM(...)                                                                    \
  static const ::attn::claims::Registration ATTN_CLAIM_NAME(attn_claim_registration_, __COUNTER__){ \
      ::attn::claims::Experiment{__VA_ARGS__}};

// The backends claims compare are chosen by trait (registry.hpp):
// baseline_backend(), fused_backend() (FlashAttention's algorithm), exact_backend().

// A timing comparison that noise cannot flip: median_ratio (studies.hpp),
// the ratio of the medians with its bootstrap interval. A timing criterion is
// decided only when the whole interval lies on one side of its threshold;
// otherwise the verdict is inconclusive, within noise.
// holds if the interval lies entirely <= `threshold`, does not hold if entirely above, inconclusive otherwise.
Outcome at_most(const RatioInterval& r, double threshold);
// Timings of `rounds` x `per_round` calls of a and b, alternating rounds so
// that drift of a shared machine falls on both.
void alternate_timings(std::size_t rounds, const std::function<std::vector<double>()>& a,
                       const std::function<std::vector<double>()>& b, std::vector<double>& ta, std::vector<double>& tb);

// Warm timings of one prepared call: rounds `in` to storage and binds the call
// once (one untimed cold call touches its workspace); each call of the
// returned function times `per_round` more calls. Unlike BackendInfo::run
// per round, the rounding and conversion of large inputs (a decode step's
// KV cache: gigabytes in double) is done once, not in every round.
std::function<std::vector<double>()> warm_timer(const BackendInfo& backend, std::string_view precision, Accumulate acc,
                                                const Inputs<double>& in, const Options& opt, std::size_t per_round);

// Least-squares slope of log y against log x: the exponent of a power law
// y ~ x^e fitted on log-log axes (every x, y > 0).
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y);

// True when cfg can measure the heap; otherwise sets v inconclusive, saying why.
bool heap_measurable(const Config& cfg, Verdict& v);

// An outside kernel, a peer of attention_lab.peers loaded through the Python bridge ("torch_flash":
// load_plugin("python:attention_lab.peers:torch_flash")); nullptr, with v inconclusive saying why, when it
// cannot load here (the bridge not built, PyTorch missing from the project's environment).
const BackendInfo* peer_backend(const std::string& function, Verdict& v);
Json to_json(const Claim& c, const Verdict& v, double seconds);

}  // namespace attn::claims
