// The invariants of attention as functions of (backend, generated case),
// each one ATTN_PROPERTY entry in properties.cpp:
// each runs the backend in every storage precision of the registry (the
// case's accumulation policy) and asserts with RC_ASSERT, so the same
// function serves the RapidCheck properties over the registry and the
// mutant hunt. Tolerances come from metrics.hpp's derived bounds.
#pragma once

#include <array>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attn/verify/verify.hpp"
#include "attn/verify/cases.hpp"

namespace attn::props {

using PropertyFn = void (*)(const BackendInfo&, const Case&);

struct Property {
  std::string id;        // rows_sum_to_one: the gtest name
  std::string name;      // "rows sum to 1": the tables' name
  PropertyFn check;
  double cost_budget;    // shape budget of its cases (see gen_case)
};

// Every property, in the order properties.cpp defines them.
const std::vector<Property>& properties();

// Adds a property at start-up (through ATTN_PROPERTY).
struct PropertyRegistration {
  explicit PropertyRegistration(const Property& p);
};

// Defines and registers one property: its id, name, the cost budget of its
// cases, and the names of its (backend, case) parameters; the body follows:
//   ATTN_PROPERTY(rows_sum_to_one, "rows sum to 1", 2e6, b, c) { ... RC_ASSERT(...); }
// props_test.cpp runs each over every backend of the registry with RapidCheck
// (rc::check), and over every mutant.
#define ATTN_PROPERTY(id, title, budget, b, c)                                                   \
  void id(const BackendInfo& b, const Case& c);                                                  \
  static const PropertyRegistration id##_registration{Property{#id, title, id, budget}};         \
  void id(const BackendInfo& b, const Case& c)

// The two properties the regression tests call by name.
void shift_invariant(const BackendInfo& b, const Case& c);
void permutation_equivariant(const BackendInfo& b, const Case& c);

// How many cases each (property, backend) pair passed, for the report table.
std::map<std::string, std::map<std::string, int>>& case_tally();
// How many cases a backend could not run at all (a plugin's capabilities:
// every run the property needed threw Unsupported); never counted as passed.
std::map<std::string, std::map<std::string, int>>& unsupported_tally();
// How many cases ran nothing of the backend under test (every precision
// skipped by its precondition, or the property returned early for the
// case's kind): never counted as passed either.
std::map<std::string, std::map<std::string, int>>& not_run_tally();
// Runs whose worst-case output bound was vacuous and that were held to the
// tight verdict instead ([0]), and of those, runs whose tight verdict was
// uninformative too ([1]: it could not fail either); printed after the table.
std::array<long, 2>& vacuous_tally();
// Since the last reset: runs of the backend under test (under_test(); the
// baseline's runs inside a property do not count) that completed (run_case
// counts them) and runs it refused as not supported (for_each_precision
// counts them); a case with refusals and no run was not supported, one with
// neither ran nothing.
int& backend_runs();
int& backend_refusals();
const BackendInfo*& under_test();
// When not empty, the one storage precision the properties run (attn-lab
// verify checks a plugin one configuration at a time); empty: every one.
std::string& only_precision();
// Why the last run a backend refused was refused (Unsupported's message).
std::string& last_refusal();

}  // namespace attn::props
