// The invariants of attention as functions of (backend, generated case):
// each runs the backend in every storage precision of the registry (the
// case's accumulation policy) and asserts with RC_ASSERT, so the same
// function serves the RapidCheck properties over the registry and the
// mutant hunt. Tolerances come from metrics.hpp's derived bounds.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attn/verify.hpp"
#include "cases.hpp"

namespace attn::props {

using PropertyFn = void (*)(const BackendInfo&, const Case&);

struct Property {
  std::string name;      // "rows sum to 1"
  PropertyFn check;
  double cost_budget;    // shape budget of its cases (see gen_case)
};

// The properties of DESIGN.md / issue 4, in order (1 ... 10).
const std::vector<Property>& properties();

void rows_sum_to_one(const BackendInfo& b, const Case& c);
void masked_weights_are_zero_and_masked_inputs_irrelevant(const BackendInfo& b, const Case& c);
void agrees_with_reference(const BackendInfo& b, const Case& c);
void shift_invariant(const BackendInfo& b, const Case& c);
void outputs_in_convex_hull(const BackendInfo& b, const Case& c);
void permutation_equivariant(const BackendInfo& b, const Case& c);
void score_variance_scales_with_dk(const BackendInfo& b, const Case& c);
void finite_for_finite_inputs(const BackendInfo& b, const Case& c);
void block_size_independent_and_deterministic(const BackendInfo& b, const Case& c);
void result_shapes(const BackendInfo& b, const Case& c);

// How many cases each (property, backend) pair passed, for the report table.
std::map<std::string, std::map<std::string, int>>& case_tally();

}  // namespace attn::props
