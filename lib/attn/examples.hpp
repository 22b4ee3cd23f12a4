// The worked examples of EXAMPLES.md (E1-E5) as problems with the figures the
// notes print, each with its exact value in closed form. One definition,
// used by the golden tests and by `attn-lab demo`. E6 is the cost model,
// checked by static_assert in backend.cpp.
#pragma once

#include <string>
#include <vector>

#include "attn/problem.hpp"

namespace attn {

struct Figure {
  std::string label;           // "E2 weight of A"
  bool is_weight = false;      // a weight [b, h, i, j], else an output [b, h, i, c]
  bool is_slope = false;       // the softmax slope p (1 - p) of that weight p
  std::size_t i = 0, j = 0;    // row and column (b = h = 0)
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

// The value a figure reads from a weight or output x: x, or x (1 - x) for a
// slope. Since |d(p(1-p))/dp| = |1 - 2p| <= 1, an error bound on x bounds it too.
inline double figure_value(const Figure& f, double x) { return f.is_slope ? x * (1 - x) : x; }

}  // namespace attn
