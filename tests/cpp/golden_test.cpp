// Golden tests: the worked examples of EXAMPLES.md (E1-E6) through every
// backend x precision x accumulation policy of the registry, and once end to
// end through the attn-lab CLI with .npy files.
//
// Tolerance of a printed figure: half a unit of its last printed digit (the
// notes round) plus the tight criterion of verify.hpp for that figure: the
// probabilistic bound (metrics.hpp) and, for every backend but the baseline,
// 2x the baseline's error in the same figure plus one rounding in each run.
// A weight whose exact value is 0 is masked: it must be 0.0.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <xtensor/xnpy.hpp>

#include "attn/verify/examples.hpp"
#include "attn/verify/metrics.hpp"
#include "attn/io/npy.hpp"
#include "attn/registry/registry.hpp"
#include "attn/verify/verify.hpp"

namespace attn {
namespace {

// E6: the cost of an explicit score matrix, and the head split of d_model.
static_assert(scores_per_head({1, 1, 1024, 1024, 64, 64}) == 1'048'576);
static_assert(scores_per_head({1, 1, 2048, 2048, 64, 64}) == 4'194'304);
static_assert(scores_per_head({1, 1, 2048, 2048, 64, 64}) == 4 * scores_per_head({1, 1, 1024, 1024, 64, 64}));
static_assert(score_matrix_bytes<fp16>({1, 1, 1024, 1024, 64, 64}) == 2u << 20);  // 2 MiB
static_assert(score_matrix_bytes<fp16>({1, 1, 2048, 2048, 64, 64}) == 8u << 20);  // 8 MiB
static_assert(head_dim(768, 12) == 64);
static_assert(flops({1, 1, 1024, 1024, 64, 64}) == 4.0 * 1024 * 1024 * 64);

TEST(Golden, E6ScaleOfA64DimensionalHeadIsOneEighth) {
  Options opt;
  EXPECT_EQ(opt.resolved_scale({1, 12, 8, 8, head_dim(768, 12), 64}), 1.0 / 8.0);
}

TEST(Golden, E1ProjectionsMatchTheNotes) {
  const WorkedExample e1 = worked_examples().front();
  const double q[3][2] = {{1, 0}, {0, 1}, {1, 1}}, k[3][2] = {{1, 1}, {0, 1}, {1, 2}},
               v[3][2] = {{1, 0}, {1, 2}, {2, 2}};
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t c = 0; c < 2; ++c) {
      EXPECT_EQ(e1.in.q(0, 0, i, c), q[i][c]);
      EXPECT_EQ(e1.in.k(0, 0, i, c), k[i][c]);
      EXPECT_EQ(e1.in.v(0, 0, i, c), v[i][c]);
    }
}

TEST(Golden, WorkedExamplesThroughEveryBackendAndPrecision) {
  std::size_t checked = 0;
  double worst_tolerance = 0;
  for (const WorkedExample& e : worked_examples()) {
    for (const BackendInfo& backend : all_backends())
      for (const PrecisionInfo& precision : precisions())
        for (Accumulate acc : accumulate_policies()) {
      SCOPED_TRACE(e.id + " " + e.title + " / " + backend.name + " " + std::string(precision.name) + " accumulate " +
                   std::string(accumulate_name(acc)));
      Options opt = e.opt;
      opt.need_weights = opt.need_lse = true;
      const RunReport r = backend.run(precision.name, acc, e.in, opt);
      // Every example's inputs are exact in every format, so the figures apply unchanged.
      ASSERT_TRUE(r.rounded_inputs.q == e.in.q && r.rounded_inputs.k == e.in.k && r.rounded_inputs.v == e.in.v);
      const RunReport base = baseline_backend().run(precision.name, acc, e.in, opt);
      const Check check = verify(r, opt, ground_truth(r.rounded_inputs, opt, r.u_store), &base);
      EXPECT_TRUE(check.within) << "verify(): row " << check.out_worst.row << " error " << check.out_worst.error << " above " << check.out_worst.tolerance;
      EXPECT_TRUE(check.tight_within) << "verify(): row " << check.out_tight.row << " error " << check.out_tight.error
                                      << " above the tight tolerance " << check.out_tight.tolerance << " (" << check.criterion << ")";
      for (const Figure& f : e.figures) {
        // The tight criterion per figure: the probabilistic bound and, for
        // every backend but the baseline, 2x the baseline's own error in the
        // same figure plus one rounding of it in each run.
        ErrorBound b = check.probable;
        if (r.traits.weights_from_lse) b.weights = check.probable.weights_from_lse;  // rebuilt from the logsumexp
        const FigureReading got =
            read_figure(f, r.out, r.weights ? &*r.weights : nullptr, r.lse ? &*r.lse : nullptr, b);
        const FigureReading bgot =
            read_figure(f, base.out, base.weights ? &*base.weights : nullptr, base.lse ? &*base.lse : nullptr, b);
        ASSERT_TRUE(got.available && bgot.available) << f.label << ": the backend returned no weights/logsumexp";
        const double exact = static_cast<double>(f.exact);
        double tight = got.bound;
        if (!r.traits.baseline)
          tight = std::min(tight, 2 * std::fabs(bgot.value - exact) + 2 * (r.u_acc + r.u_store) * std::fabs(exact));
        if (f.what == Quantity::weight && f.exact == 0) {
          EXPECT_EQ(got.value, 0.0) << f.label << ": a masked weight must be exactly 0";
        } else {
          EXPECT_LE(std::fabs(got.value - f.printed), f.printed_tolerance + tight)
              << f.label << ": got " << got.value << ", notes print " << f.printed << " (baseline " << bgot.value
              << ")";
          worst_tolerance = std::max(worst_tolerance, tight);
        }
        if (r.traits.exact && precision.unit_roundoff == 0x1p-53) {
          // The 50-digit reference, rounded once to double, matches the closed form
          // to within a few units of double rounding: relative to the value, or
          // for a slope p (1 - p) relative to p (1 - p is formed in double).
          const double scale = f.what == Quantity::slope ? 1.0 : std::fabs(exact);
          EXPECT_LE(std::fabs(got.value - exact), 4 * 0x1p-53 * scale) << f.label;
        }
        ++checked;
      }
        }
  }
  std::printf("checked %zu figures; the largest tight tolerance beyond the printed digits: %.3g\n", checked,
              worst_tolerance);
  EXPECT_GT(checked, 0u);
}

// --- End to end through the CLI ------------------------------------------------

struct Cli {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("attn-golden-" + std::to_string(::getpid()));
  Cli() { std::filesystem::create_directories(dir); }
  ~Cli() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  // Runs attn-lab with `args`; returns its exit code, stdout and stderr.
  int run(const std::string& args, std::string* out = nullptr, std::string* err = nullptr) const {
    const char* exe = std::getenv("ATTN_LAB");
    if (!exe) throw std::runtime_error("ATTN_LAB is not set (meson test sets it to the attn-lab binary)");
    const std::string cmd = std::string(exe) + " " + args + " >" + path("stdout") + " 2>" + path("stderr");
    const int status = std::system(cmd.c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    if (out) *out = slurp(path("stdout"));
    if (err) *err = slurp(path("stderr"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

TEST(GoldenCli, E2EndToEndWithNpyFiles) {
  Cli cli;
  const WorkedExample e2 = worked_examples()[1];
  ASSERT_EQ(e2.id, "E2");
  // The notes' tensors as [n, d] float32 files, as a user would dump them.
  xt::dump_npy(cli.path("q.npy"), xt::xtensor<float, 2>(xt::view(xt::cast<float>(e2.in.q), 0, 0)));
  xt::dump_npy(cli.path("k.npy"), xt::xtensor<float, 2>(xt::view(xt::cast<float>(e2.in.k), 0, 0)));
  xt::dump_npy(cli.path("v.npy"), xt::xtensor<float, 2>(xt::view(xt::cast<float>(e2.in.v), 0, 0)));
  for (const BackendInfo& b : all_backends()) {
    const std::string& backend = b.name;
    SCOPED_TRACE(backend);
    std::string out, err;
    const int code = cli.run("attend --q " + cli.path("q.npy") + " --k " + cli.path("k.npy") + " --v " +
                                 cli.path("v.npy") + " --backend " + backend +
                                 " --precision fp64 --out " + cli.path("o.npy") + " --weights " +
                                 cli.path("w.npy") + " --lse " + cli.path("l.npy") + " --check --json --force",
                             &out, &err);
    ASSERT_EQ(code, 0) << err;
    EXPECT_NE(out.find("\"within\":true"), std::string::npos) << out;
    auto o = load_npy_2d(cli.path("o.npy"), "o");
    auto w = load_npy_2d(cli.path("w.npy"), "w");
    ASSERT_EQ(o.shape(0), 3u);
    ASSERT_EQ(w.shape(1), 3u);
    for (const Figure& f : e2.figures) {
      if (f.what == Quantity::sum_exp) continue;
      const double x = f.what == Quantity::weight ? w(f.i, f.j) : o(f.i, f.j);
      EXPECT_NEAR(x, f.printed, f.printed_tolerance) << f.label;
    }
  }
}

TEST(GoldenCli, AnExistingOutputIsKeptWithoutForce) {
  Cli cli;
  {
    std::ofstream f(cli.path("mine.npy"));
    f << "the user's file";
  }
  std::string out, err;
  EXPECT_EQ(cli.run("attend --random 1,1,4,4,8,8 --out " + cli.path("mine.npy"), &out, &err), 2);
  EXPECT_NE(err.find("exists already; pass --force to replace it"), std::string::npos) << err;
  std::ifstream f(cli.path("mine.npy"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "the user's file");
  EXPECT_EQ(cli.run("attend --random 1,1,4,4,8,8 --force --out " + cli.path("mine.npy"), &out, &err), 0) << err;
  const NpyTensor mine = load_npy(cli.path("mine.npy"), "mine");
  EXPECT_EQ(mine.data.shape(2), 4u);
  EXPECT_EQ(mine.rank, 4u);
}

TEST(GoldenCli, BadInputIsOneLineAndExitCodeTwo) {
  Cli cli;
  const std::pair<std::string, std::string> cases[] = {
      {"attend --q " + cli.path("missing.npy") + " --k x --v y", "cannot open"},
      {"attend --random 1,1,4,4,8", "6 numbers"},
      {"attend --random 1,1,4,4,8,8 --backend nosuch", "unknown backend 'nosuch'"},
      {"attend --random 1,1,4,0,8,8", "zero-sized dimension"},
      // inputs alone far past any memory cap (1.4 TiB in fp64): refused with their size before any allocation
      {"attend --random 1,1,1000000000,1000000000,64,64", "for its inputs Q, K and V in fp64, over the memory cap"},
      {"attend --random 1,1,4,4,8,8 --mask window:0", "window must be >= 1"},
      {"attend --random 1,1,4,4,8,8 --precision fp8", "unknown precision 'fp8'"},
      {"attend --random 1,1,4,4,8,8 --frobnicate", "unknown option '--frobnicate'"},
      {"frobnicate", "unknown command"},
      {"attend --random 1,1,4,4,8,8 --seed", "--seed needs a value"},
      {"attend --random 1,1,4,4,8,8 --seed 1 --seed 2", "--seed given twice"},
      {"attend --q q.npy --k k.npy --v v.npy --random 1,1,4,4,8,8", "either --q/--k/--v or --random, not both"},
      {"attend --random 1,1,4,4,8,8 --threads 0", "threads is 0, must be between 1 and 1024"},
      {"attend --random 1,1,4,4,8,8 --scale -1", "must be finite and >= 0"},
      {"attend --random 1,1,4,4,8,8 --scale nan", "not a finite number"},
      {"attend --random 1,1,4,4,8,8 --mask keypad:" + cli.path("none.npy"), "cannot open"},
      {"attend --random 1,1,4,4,8,8 --mask sideways", "is not one of none, causal"},
      {"attend --random 1,1,4,4,8,8 --json=yes", "--json takes no value"},
      {"attend 1,1,4,4,8,8", "unexpected argument"},
      {"layer --random 1,4,6,4", "not divisible by num_heads"},
      {"layer --random 1,1000000,100000,8", "its E x E query and output projections in fp64, over the memory cap"},
      {"layer --random 1,4,8,2 --rope odd", "--rope must be half or interleaved"},
      {"layer --random 1,4,8,2 --decode", "add --causal"},
      {"layer --random 1,4,8,2 --layer block --decode", "go with mha"},
  };
  for (const auto& [args, message] : cases) {
    std::string out, err;
    EXPECT_EQ(cli.run(args, &out, &err), 2) << args;
    EXPECT_NE(err.find(message), std::string::npos) << args << " -> " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << args << " -> " << err;
  }
}

}  // namespace
}  // namespace attn
