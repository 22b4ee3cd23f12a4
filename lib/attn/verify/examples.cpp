#include "attn/verify/examples.hpp"

#include <cmath>

namespace attn {

namespace {

using Matrix = std::vector<std::vector<double>>;

Matrix matmul(const Matrix& a, const Matrix& b) {
  Matrix c(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < b.size(); ++k)
      for (std::size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

xt::xtensor<double, 4> tensor(const Matrix& m) {
  auto t = xt::xtensor<double, 4>::from_shape({1, 1, m.size(), m[0].size()});
  for (std::size_t i = 0; i < m.size(); ++i)
    for (std::size_t j = 0; j < m[0].size(); ++j) t(0, 0, i, j) = m[i][j];
  return t;
}

// softmax of `s` in long double: the closed form the notes round.
std::vector<long double> softmax(const std::vector<long double>& s) {
  long double m = s[0], l = 0;
  for (auto x : s) m = std::max(m, x);
  std::vector<long double> p;
  for (auto x : s) l += std::exp(x - m);
  for (auto x : s) p.push_back(std::exp(x - m) / l);
  return p;
}

// E1: X = [A; B; C], Q = X W_Q, K = X W_K, V = X W_V.
WorkedExample e1_tokens() {
  const Matrix x = {{1, 0}, {0, 1}, {1, 1}};
  const Matrix w_q = {{1, 0}, {0, 1}}, w_k = {{1, 1}, {0, 1}}, w_v = {{1, 0}, {1, 2}};
  WorkedExample e{"E1", "self-attention over tokens A, B, C (d = 2)",
                  {tensor(matmul(x, w_q)), tensor(matmul(x, w_k)), tensor(matmul(x, w_v))}, {}, {}};
  // Unscaled scores Q K^T as printed; with the 1/sqrt(2) scale, every weight
  // and output of the three rows has a closed form.
  const long double scores[3][3] = {{1, 0, 1}, {1, 1, 2}, {2, 1, 3}};
  const long double v[3][2] = {{1, 0}, {1, 2}, {2, 2}};
  const char* names = "ABC";
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<long double> s;
    for (auto x : scores[i]) s.push_back(x / std::sqrt(2.0L));
    const auto p = softmax(s);
    for (std::size_t j = 0; j < 3; ++j)
      e.figures.push_back({std::string("E1 weight ") + names[i] + "->" + names[j], Quantity::weight, i, j,
                           static_cast<double>(p[j]), 0.0, p[j]});
    for (std::size_t c = 0; c < 2; ++c) {
      long double o = 0;
      for (std::size_t j = 0; j < 3; ++j) o += p[j] * v[j][c];
      e.figures.push_back({std::string("E1 output ") + names[i] + "[" + std::to_string(c) + "]", Quantity::output, i, c,
                           static_cast<double>(o), 0.0, o});
    }
  }
  return e;
}

// E2: row C of E1, the figures printed to 3 decimals.
WorkedExample e2_row_c() {
  WorkedExample e = e1_tokens();
  e.id = "E2";
  e.title = "one query step by step (row C of E1)";
  const double printed_w[3] = {0.284, 0.140, 0.576}, printed_o[2] = {1.576, 1.432};
  std::vector<Figure> row_c;
  for (const Figure& f : e.figures) {
    if (f.i != 2) continue;
    Figure g = f;
    g.label = "E2 " + f.label.substr(3);
    g.printed = f.what == Quantity::weight ? printed_w[f.j] : printed_o[f.j];
    g.printed_tolerance = 5e-4;
    row_c.push_back(g);
  }
  // The row's sum of exponentials, exp(lse): the notes print 14.481, the sum
  // of exps of scores already rounded to 3 decimals (exact: 14.4835). Their
  // tolerance follows: each exp(s +- 5e-4) is off by up to exp(s) 5e-4, each
  // printed exp by 5e-4 more, and the sum by 5e-4: 14.481 * 5e-4 + 4 * 5e-4.
  long double sum = 0;
  for (long double x : {2.0L, 1.0L, 3.0L}) sum += std::exp(x / std::sqrt(2.0L));
  row_c.push_back({"E2 sum of exp", Quantity::sum_exp, 2, 0, 14.481, 14.481 * 5e-4 + 4 * 5e-4, sum});
  e.figures = row_c;
  return e;
}

// E3: logits [8, 0] (d_k = 1, scale 1) and the same query with d_k = 64,
// scale 1/8: logits [1, 0].
WorkedExample e3_saturation(std::size_t d_k) {
  auto q = xt::xtensor<double, 4>::from_shape({1, 1, 1, d_k});
  auto k = xt::xtensor<double, 4>::from_shape({1, 1, 2, d_k});
  auto v = xt::xtensor<double, 4>::from_shape({1, 1, 2, 1});
  q.fill(0);
  k.fill(0);
  q(0, 0, 0, 0) = 8;
  k(0, 0, 0, 0) = 1;
  v(0, 0, 0, 0) = 1;  // output = the first weight
  v(0, 0, 1, 0) = 0;
  WorkedExample e{"E3", "softmax saturation, d_k = " + std::to_string(d_k), {q, k, v}, {}, {}};
  if (d_k == 1) e.opt.scale = 1.0;  // the unscaled logits [8, 0]
  const long double logit = d_k == 1 ? 8.0L : 8.0L / std::sqrt(static_cast<long double>(d_k));
  const long double p = 1 / (1 + std::exp(-logit));
  const bool sharp = d_k == 1;
  const std::string dk = " (d_k=" + std::to_string(d_k) + ")";
  e.figures.push_back({"E3 p" + dk, Quantity::weight, 0, 0, sharp ? 0.9997 : 0.731, sharp ? 5e-5 : 5e-4, p});
  e.figures.push_back({"E3 output = p" + dk, Quantity::output, 0, 0, sharp ? 0.9997 : 0.731, sharp ? 5e-5 : 5e-4, p});
  e.figures.push_back({"E3 slope p(1-p)" + dk, Quantity::slope, 0, 0, sharp ? 0.0003 : 0.197, sharp ? 5e-5 : 5e-4,
                       p * (1 - p)});
  return e;
}

// E4: the causal mask on E1 (row B), and a length-4 causal sequence.
WorkedExample e4_causal() {
  WorkedExample e = e1_tokens();
  e.id = "E4";
  e.title = "causal mask on row B of E1";
  e.opt.mask = mask::Causal{};
  e.figures = {{"E4 weight B->A", Quantity::weight, 1, 0, 0.5, 5e-4, 0.5L},
               {"E4 weight B->B", Quantity::weight, 1, 1, 0.5, 5e-4, 0.5L},
               {"E4 weight B->C (masked)", Quantity::weight, 1, 2, 0.0, 0.0, 0.0L}};
  return e;
}

WorkedExample e4_length4() {
  auto q = xt::xtensor<double, 4>::from_shape({1, 1, 4, 2});
  auto k = q, v = q;
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t c = 0; c < 2; ++c) {
      q(0, 0, i, c) = 0.5 * double(i + 1) - double(c);
      k(0, 0, i, c) = 1.0 - 0.25 * double(i * (c + 1));
      v(0, 0, i, c) = double(i) + 0.5 * double(c);
    }
  WorkedExample e{"E4", "length-4 causal sequence, position 2", {q, k, v}, {}, {}};
  e.opt.mask = mask::Causal{};
  e.figures = {{"E4 weight 2->3 (masked)", Quantity::weight, 2, 3, 0.0, 0.0, 0.0L}};
  return e;
}

// E5: scores [0, 0] over values [2, 0] and [0, 4].
WorkedExample e5_weighted_sum() {
  auto q = xt::xtensor<double, 4>::from_shape({1, 1, 1, 1});
  auto k = xt::xtensor<double, 4>::from_shape({1, 1, 2, 1});
  auto v = xt::xtensor<double, 4>::from_shape({1, 1, 2, 2});
  q.fill(0);
  k(0, 0, 0, 0) = 1;
  k(0, 0, 1, 0) = -1;
  v(0, 0, 0, 0) = 2, v(0, 0, 0, 1) = 0, v(0, 0, 1, 0) = 0, v(0, 0, 1, 1) = 4;
  WorkedExample e{"E5", "plain weighted sum", {q, k, v}, {}, {}};
  e.figures = {{"E5 weight 0", Quantity::weight, 0, 0, 0.5, 5e-4, 0.5L},
               {"E5 weight 1", Quantity::weight, 0, 1, 0.5, 5e-4, 0.5L},
               {"E5 output 0", Quantity::output, 0, 0, 1.0, 5e-4, 1.0L},
               {"E5 output 1", Quantity::output, 0, 1, 2.0, 5e-4, 2.0L}};
  return e;
}

}  // namespace

FigureReading read_figure(const Figure& f, const xt::xtensor<double, 4>& out, const xt::xtensor<double, 4>* weights,
                          const xt::xtensor<double, 3>* lse, const ErrorBound& bound) {
  switch (f.what) {
    case Quantity::output:
      return {true, out(0, 0, f.i, f.j), bound.out};
    case Quantity::weight:
      if (!weights) return {};
      return {true, (*weights)(0, 0, f.i, f.j), bound.weights};
    case Quantity::slope: {
      if (!weights) return {};
      // |d(p(1 - p))| <= |dp| (|1 - 2p| + |dp|) <= |dp| (1 + |dp|)
      const double p = (*weights)(0, 0, f.i, f.j);
      return {true, p * (1 - p), bound.weights * (1 + bound.weights)};
    }
    case Quantity::sum_exp: {
      if (!lse) return {};
      const double sum = std::exp((*lse)(0, 0, f.i));
      return {true, sum, sum * (std::expm1(bound.lse) + 0x1p-52)};  // + the rounding of exp
    }
  }
  return {};
}

std::vector<WorkedExample> worked_examples() {
  return {e1_tokens(), e2_row_c(), e3_saturation(1), e3_saturation(64),
          e4_causal(), e4_length4(), e5_weighted_sum()};
}

}  // namespace attn
