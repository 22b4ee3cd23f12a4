// The proof that the properties bite: each textbook mutant of mutants.cpp
// must be caught by at least one property of properties.hpp. An executable
// of its own (props_mutants) so that builds that run only the properties
// (the sanitizer build) do not compile the mutants.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mutants.hpp"
#include "attn/verify/properties.hpp"

namespace attn::props {
namespace {

// Every mutant is caught by at least one property: RapidCheck finds a
// counterexample within the cases of RC_PARAMS (meson runs Mutants.* as its
// own test, `props_mutants`, with 30 cases per mutant and property and
// shrinking off, for speed; the seed is printed). A property that passes a
// mutant prints nothing; one that catches it prints the counterexample.
TEST(Mutants, EveryMutantIsCaughtByAProperty) {
  std::printf("\nmutant -> properties that caught it\n");
  for (const Mutant& m : mutants()) {
    std::vector<std::string> caught;
    for (const Property& p : properties()) {
      std::printf("--- %s against '%s' (a failure below is the property catching the mutant)\n",
                  m.handle.name.c_str(), p.name.c_str());
      if (!rc::check(m.handle.name + " / " + p.name, [&] { p.check(m.handle, *gen_case(p.cost_budget)); }))
        caught.push_back(p.name);
    }
    std::string list;
    for (const auto& n : caught) list += (list.empty() ? "" : ", ") + n;
    std::printf("%-34s (%s): caught by %zu of %zu properties: %s\n", m.handle.name.c_str(), std::string(m.bug).c_str(),
                caught.size(), properties().size(), list.c_str());
    EXPECT_FALSE(caught.empty()) << m.handle.name << " (" << m.bug << ") escaped every property";
  }
}

}  // namespace
}  // namespace attn::props
