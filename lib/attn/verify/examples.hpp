// The worked examples of EXAMPLES.md (E1-E5) as problems with the figures the
// notes print, each with its exact value in closed form. One definition,
// used by the golden tests and by `attn-lab demo`. E6 is the cost model,
// checked by static_assert in backend.cpp.
#pragma once

#include <string>
#include <vector>

#include "attn/verify/metrics.hpp"
#include "attn/core/problem.hpp"

namespace attn {

// What a figure reads from a result (at batch 0, head 0).
enum class Quantity {
  weight,   // weights[i, j]
  output,   // out[i, j]
  slope,    // p (1 - p) of p = weights[i, j]
  sum_exp,  // exp(lse[i]): the row's sum of exponentials of the scaled scores
};

struct Figure {
  std::string label;           // "E2 weight C->A"
  Quantity what = Quantity::output;
  std::size_t i = 0, j = 0;    // row and column
  double printed = 0;          // as printed in the notes
  double printed_tolerance = 0;  // half a unit of the last printed digit
  long double exact = 0;       // closed form
};

struct WorkedExample {
  std::string id, title;
  Inputs<double> in;
  Options opt;
  std::vector<Figure> figures;
};

std::vector<WorkedExample> worked_examples();

// A figure read off a result (batch 0, head 0), with the bound on its error
// that follows from the result's ErrorBound; `available` is false when the
// result lacks the weights or logsumexp the figure needs.
struct FigureReading {
  bool available = false;
  double value = 0, bound = 0;
};
FigureReading read_figure(const Figure& f, const xt::xtensor<double, 4>& out,
                          const xt::xtensor<double, 4>* weights, const xt::xtensor<double, 3>* lse,
                          const ErrorBound& bound);


}  // namespace attn
