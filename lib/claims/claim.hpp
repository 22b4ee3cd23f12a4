// The claims ledger: published statements about attention, each an
// experiment with a criterion fixed before it runs and a measured verdict.
// A claim is one .cpp file in lib/claims/ plus one line in registry.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/studies.hpp"

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

const std::vector<Claim>& all_claims();

// True when cfg can measure the heap; otherwise sets v inconclusive, saying why.
bool heap_measurable(const Config& cfg, Verdict& v);
std::string to_json(const Claim& c, const Verdict& v, double seconds);

// The claims, one per file.
Verdict variance_of_scores(const Config&);
Verdict entropy_collapse(const Config&);
Verdict score_matrix_memory(const Config&);
Verdict flash_error_at_most_twice(const Config&);
Verdict fp16_pv_accumulation(const Config&);
Verdict softmax_saturation(const Config&);
Verdict unshifted_overflow(const Config&);
Verdict reference_precision_ranking(const Config&);
Verdict memory_savings(const Config&);
Verdict golden_bf16_deviation(const Config&);
Verdict online_normalizer(const Config&);
Verdict fp8_incoherent_processing(const Config&);

}  // namespace attn::claims
