#include <algorithm>
#include <cmath>

#include "claims/claim.hpp"

namespace attn::claims {

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::holds: return "holds";
    case Outcome::does_not_hold: return "does not hold";
    case Outcome::inconclusive: return "inconclusive";
  }
  return "?";
}

namespace {
std::vector<Claim>& registered() {
  static std::vector<Claim> claims;
  return claims;
}
}  // namespace

Registration::Registration(const Claim& c) { registered().push_back(c); }

const std::vector<Claim>& all_claims() {
  static const std::vector<Claim> sorted = [] {
    std::vector<Claim> claims = registered();
    std::sort(claims.begin(), claims.end(), [](const Claim& a, const Claim& b) { return a.id < b.id; });
    for (std::size_t i = 1; i < claims.size(); ++i)
      if (claims[i].id == claims[i - 1].id) throw Error("two claims have the id '" + std::string(claims[i].id) + "'");
    return claims;
  }();
  return sorted;
}

bool heap_measurable(const Config& cfg, Verdict& v) {
  if (cfg.heap_reset && cfg.heap_peak_growth) return true;
  v.outcome = Outcome::inconclusive;
  v.why = "no heap measurement available (run from attn-lab, which links the counting allocator)";
  return false;
}

Json to_json(const Claim& c, const Verdict& v, double seconds) {
  Json figures = Json::object(), plots = Json::array();
  for (const Figure& f : v.figures) figures[f.name] = f.value;
  for (const Plot& pl : v.plots) {
    Json series = Json::object();
    for (const auto& [label, ys] : pl.series) series[label] = ys;
    plots.push_back({{"title", pl.title},
                     {"xlabel", pl.xlabel},
                     {"ylabel", pl.ylabel},
                     {"logx", pl.logx},
                     {"logy", pl.logy},
                     {"x", pl.x},
                     {"series", series}});
  }
  return {{"id", c.id},
          {"source", c.source},
          {"quote", c.quote},
          {"statement", c.statement},
          {"experiment", c.experiment},
          {"criterion", c.criterion},
          {"verdict", outcome_name(v.outcome)},
          {"why", v.why},
          {"command", "attn-lab claims --only " + std::string(c.id)},
          {"seconds", seconds},
          {"figures", figures},
          {"plots", plots}};
}

}  // namespace attn::claims
