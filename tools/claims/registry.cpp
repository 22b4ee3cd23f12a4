#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "attn/registry/plugin.hpp"
#include "claims/claim.hpp"
#include "ledger_json.hpp"

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

Registration::Registration(const Experiment& e) {
  Claim c;
  c.id = e.id;
  c.run = e.run;
  registered().push_back(c);
}

namespace {
// The ledger built into the binary, parsed once; the strings live as long as the program.
const Json& ledger() {
  static const Json parsed = [] {
    try {
      return Json::parse(ledger_json);
    } catch (const Json::exception& e) {
      throw Error(std::string("tools/claims/ledger.json: ") + e.what());
    }
  }();
  return parsed;
}

std::string_view field(const Json& entry, const char* name) {
  const auto it = entry.find(name);
  if (it == entry.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    throw Error("tools/claims/ledger.json: claim '" + entry.value("id", std::string("?")) + "' has no " + name);
  return it->get_ref<const std::string&>();
}
}  // namespace

const std::vector<Claim>& all_claims() {
  static const std::vector<Claim> sorted = [] {
    std::vector<Claim> claims = registered();
    std::sort(claims.begin(), claims.end(), [](const Claim& a, const Claim& b) { return a.id < b.id; });
    for (std::size_t i = 1; i < claims.size(); ++i)
      if (claims[i].id == claims[i - 1].id) throw Error("two claims have the id '" + std::string(claims[i].id) + "'");
    for (Claim& c : claims) {
      const Json* entry = nullptr;
      for (const Json& e : ledger().at("claims"))
        if (e.is_object() && e.value("id", std::string()) == c.id) entry = &e;
      if (!entry)
        throw Error("claim '" + std::string(c.id) + "' has no entry in tools/claims/ledger.json (its source, quote and "
                    "criterion belong there, committed before the experiment)");
      c.source = field(*entry, "source");
      c.quote = field(*entry, "quote");
      c.statement = field(*entry, "statement");
      c.experiment = field(*entry, "experiment");
      c.criterion = field(*entry, "criterion");
      c.registered = field(*entry, "registered");
      c.preregistered = entry->value("preregistered", false);
      if (entry->contains("note")) c.note = field(*entry, "note");
      if (entry->contains("revisions"))
        for (const Json& r : entry->at("revisions"))
          c.revisions.push_back({field(r, "date"), field(r, "old_criterion"), field(r, "new_criterion"), field(r, "reason")});
    }
    return claims;
  }();
  return sorted;
}

const std::vector<Retired>& retired_claims() {
  static const std::vector<Retired> retired = [] {
    std::vector<Retired> out;
    for (const Json& e : ledger().at("claims"))
      if (e.is_object() && e.contains("retired")) {
        const Json& r = e.at("retired");
        out.push_back({field(e, "id"), field(e, "statement"), field(e, "source"), field(r, "date"), field(r, "reason")});
      }
    std::sort(out.begin(), out.end(), [](const Retired& a, const Retired& b) { return a.id < b.id; });
    for (const Retired& r : out)
      for (const Claim& c : registered())
        if (c.id == r.id)
          throw Error("claim '" + std::string(r.id) + "' is retired in tools/claims/ledger.json but its experiment still runs");
    return out;
  }();
  return retired;
}

Outcome at_most(const RatioInterval& r, double threshold) {
  return r.high <= threshold ? Outcome::holds : r.low > threshold ? Outcome::does_not_hold : Outcome::inconclusive;
}

void alternate_timings(std::size_t rounds, const std::function<std::vector<double>()>& a,
                       const std::function<std::vector<double>()>& b, std::vector<double>& ta, std::vector<double>& tb) {
  for (std::size_t k = 0; k < rounds; ++k) {
    for (double t : a()) ta.push_back(t);
    for (double t : b()) tb.push_back(t);
  }
}

std::function<std::vector<double>()> warm_timer(const BackendInfo& backend, std::string_view precision, Accumulate acc,
                                                const Inputs<double>& in, const Options& opt, std::size_t per_round) {
  const PrecisionInfo& p = precision_info(precision);
  // The prepared call holds its own copy of the inputs in storage precision.
  std::shared_ptr<PreparedCall> call = backend.prepare(p, acc, rounded_to(p, in), opt);
  call->call();  // cold: allocation and first touch, not timed
  return [call, per_round] {
    std::vector<double> t;
    for (std::size_t k = 0; k < per_round; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      call->call();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return t;
  };
}

double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) throw Error("loglog_slope: needs two or more (x, y) pairs");
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += std::log(x[i]) / double(x.size()), my += std::log(y[i]) / double(x.size());
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  return sxy / sxx;
}

bool heap_measurable(const Config& cfg, Verdict& v) {
  if (cfg.heap_reset && cfg.heap_peak_growth) return true;
  v.outcome = Outcome::inconclusive;
  v.why = "no heap measurement available (run from attn-lab, which links the counting allocator)";
  return false;
}

const BackendInfo* peer_backend(const std::string& function, Verdict& v) {
  try {
    return &backend_info(load_plugin("python:attention_lab.peers:" + function).at(0));
  } catch (const Error& e) {
    v.outcome = Outcome::inconclusive;
    v.why = std::string("the peer could not be loaded: ") + e.what();
    return nullptr;
  }
}

Json to_json(const Claim& c, const Verdict& v, double seconds) {
  Json figures = Json::object(), plots = Json::array(), revisions = Json::array();
  for (const Revision& r : c.revisions)
    revisions.push_back({{"date", r.date}, {"old_criterion", r.old_criterion}, {"new_criterion", r.new_criterion},
                         {"reason", r.reason}});
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
          {"registered", c.registered},
          {"preregistered", c.preregistered},
          {"revisions", revisions},
          {"verdict", outcome_name(v.outcome)},
          {"why", v.why},
          {"command", "attn-lab claims --only " + std::string(c.id)},
          {"seconds", seconds},
          {"figures", figures},
          {"plots", plots}};
}

}  // namespace attn::claims
