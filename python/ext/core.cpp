// attention_lab._core: the library's registry, one backend call and its verdict, for Python
// (python/attention_lab/api.py is the typed, documented layer over it; users import that).
//
// pybind11, not nanobind: Debian 12 packages pybind11 (pybind11-dev, found by meson through pkg-config),
// while nanobind would come from PyPI with its support library built as a meson subproject; the project's
// rule is packages, nothing vendored. nanobind's advantages (smaller binaries, DLPack ndarrays) matter
// little here: tensors cross once per call, as float64 arrays, because the library's entry point takes
// Inputs<double> (each backend rounds them to its storage type itself, as for the CLI's .npy inputs).
//
// Errors: attn::Error (bad shapes, options, unknown names: the CLI's one-line messages) is ValueError;
// attn::Unsupported (a combination a backend does not claim) is NotImplementedError. The GIL is released
// while a backend or the verdict runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "attn/core/error.hpp"
#include "attn/core/problem.hpp"
#include "attn/io/json.hpp"
#include "attn/registry/plugin.hpp"
#include "attn/registry/registry.hpp"
#include "attn/verify/verdict_json.hpp"
#include "attn/verify/verify.hpp"

namespace py = pybind11;

namespace {

using Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

template <std::size_t N>
xt::xtensor<double, N> tensor(const Array& a, const char* name) {
  if (a.ndim() != static_cast<py::ssize_t>(N))
    throw attn::Error(std::string(name) + ": expected " + std::to_string(N) + " dimensions, got " +
                      std::to_string(a.ndim()));
  std::array<std::size_t, N> shape{};
  for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(a.shape(i));
  xt::xtensor<double, N> t(shape);
  std::copy(a.data(), a.data() + a.size(), t.data());
  return t;
}

template <std::size_t N>
py::array_t<double> array(const xt::xtensor<double, N>& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array_t<double> a(shape);
  std::copy(t.data(), t.data() + t.size(), a.mutable_data());
  return a;
}

// One call's result: the library's RunReport and the options it ran with (what check() needs).
struct Result {
  attn::RunReport report;
  attn::Options options;
  std::string backend;
};

attn::Options options_of(const attn::Shape& s, std::optional<double> scale, bool causal, std::optional<std::size_t> window,
                         std::optional<Array> key_lengths, std::optional<Array> allowed, std::optional<Array> bias,
                         std::optional<double> softcap, std::optional<Array> sinks, py::object alibi,
                         std::optional<Array> segments, std::size_t kv_splits, std::size_t threads,
                         std::size_t block_q, std::size_t block_k, bool need_lse, bool need_weights) {
  attn::Options opt;
  opt.scale = scale;
  const int masks = int(causal && !window) + int(window.has_value()) + int(key_lengths.has_value()) +
                    int(allowed.has_value()) + int(bias.has_value());
  if (masks > 1) throw attn::Error("give one mask: causal, window, key_lengths, allowed or bias");
  if (window) opt.mask = attn::mask::SlidingWindow{*window};
  else if (causal) opt.mask = attn::mask::Causal{};
  else if (key_lengths) {
    attn::mask::KeyPadding m;
    for (double x : tensor<1>(*key_lengths, "key_lengths")) {
      if (!(x >= 0) || x != static_cast<double>(static_cast<std::size_t>(x)))
        throw attn::Error("key_lengths: each must be a whole number >= 0");
      m.valid_length.push_back(static_cast<std::size_t>(x));
    }
    opt.mask = m;
  } else if (allowed) {
    const xt::xtensor<double, 2> a = tensor<2>(*allowed, "allowed");
    attn::mask::Boolean m;
    m.allowed = xt::xtensor<std::uint8_t, 2>(a.shape());
    std::transform(a.begin(), a.end(), m.allowed.begin(), [](double x) { return std::uint8_t(x != 0); });
    opt.mask = m;
  } else if (bias) {
    opt.mask = attn::mask::AdditiveBias{tensor<2>(*bias, "bias")};
  }
  opt.softcap = softcap;
  if (sinks) opt.sinks = tensor<1>(*sinks, "sinks");
  if (py::isinstance<py::bool_>(alibi)) {
    if (alibi.cast<bool>()) opt.alibi_slopes = attn::alibi_slopes(s.heads);
  } else if (!alibi.is_none()) {
    opt.alibi_slopes = tensor<1>(alibi.cast<Array>(), "alibi");
  }
  if (segments) {
    const xt::xtensor<double, 2> g = tensor<2>(*segments, "segments");
    opt.segments = attn::Segments(g.shape());
    std::transform(g.begin(), g.end(), opt.segments->begin(), [](double x) { return std::int64_t(x); });
  }
  opt.kv_splits = kv_splits;
  if (threads < 1) throw attn::Error("threads must be at least 1");
  opt.threads = threads;
  opt.block_q = block_q;
  opt.block_k = block_k;
  opt.need_lse = need_lse;
  opt.need_weights = need_weights;
  return opt;
}

Result attend(const Array& q, const Array& k, const Array& v, const std::string& backend, const std::string& precision,
              std::optional<std::string> accumulate, const attn::Options& opt) {
  attn::Inputs<double> in{tensor<4>(q, "q"), tensor<4>(k, "k"), tensor<4>(v, "v")};
  const attn::BackendInfo& b = attn::backend_info(backend);
  const attn::PrecisionInfo& p = attn::precision_info(precision);
  const attn::Accumulate acc = accumulate ? attn::parse_accumulate(*accumulate) : p.default_accumulate;
  Result r{{}, opt, backend};
  {
    py::gil_scoped_release unlocked;
    r.report = b.run(precision, acc, in, opt);
  }
  return r;
}

py::object json_to_python(const attn::Json& j) {
  return py::module_::import("json").attr("loads")(attn::dump(j));
}

// verify()'s verdicts on a report, as the JSON every tool writes (attn/verify/verdict_json.hpp), and `passed`.
py::object verdict(const attn::RunReport& report, const attn::Options& opt) {
  attn::Check c;
  {
    py::gil_scoped_release unlocked;
    c = attn::verify(report, opt);
  }
  attn::Json j = attn::to_json(c);
  j["passed"] = c.passed();
  return json_to_python(j);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "attention-lab's library for Python (use attention_lab.api)";
  py::register_exception<attn::Unsupported>(m, "Unsupported", PyExc_NotImplementedError);
  py::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const attn::Unsupported& x) {
      PyErr_SetString(PyExc_NotImplementedError, x.what());
    } catch (const attn::Error& x) {
      PyErr_SetString(PyExc_ValueError, x.what());
    }
  });

  m.def("backends", [] {
    py::list out;
    for (const attn::BackendInfo& b : attn::all_backends())
      out.append(py::dict(py::arg("name") = b.name, py::arg("description") = b.description,
                          py::arg("traits") = json_to_python(attn::to_json(b.traits)), py::arg("source") = b.source,
                          py::arg("backward") = b.has_backward));
    return out;
  });
  // A C plugin library's kernels as rows of the registry (include/attn/plugin.h): their names.
  m.def("load_plugin", [](const std::string& path) { return attn::load_plugin(path); }, py::arg("path"));
  m.def("precisions", [] {
    py::list out;
    for (const attn::PrecisionInfo& p : attn::precisions())
      out.append(py::dict(py::arg("name") = std::string(p.name), py::arg("unit_roundoff") = p.unit_roundoff,
                          py::arg("max_finite") = p.max_finite, py::arg("bytes") = p.bytes,
                          py::arg("default_accumulate") = std::string(attn::accumulate_name(p.default_accumulate))));
    return out;
  });

  py::class_<Result>(m, "Result")
      .def_property_readonly("out", [](const Result& r) { return array(r.report.out); })
      .def_property_readonly("lse", [](const Result& r) -> py::object {
        return r.report.lse ? py::object(array(*r.report.lse)) : py::none();
      })
      .def_property_readonly("weights", [](const Result& r) -> py::object {
        return r.report.weights ? py::object(array(*r.report.weights)) : py::none();
      })
      .def_property_readonly("seconds", [](const Result& r) { return r.report.seconds; })
      .def_property_readonly("workspace_bytes", [](const Result& r) { return r.report.workspace_bytes; })
      .def_property_readonly("backend", [](const Result& r) { return r.backend; })
      .def_property_readonly("precision", [](const Result& r) { return std::string(r.report.precision); })
      .def_property_readonly("accumulate",
                             [](const Result& r) { return std::string(attn::accumulate_name(r.report.accumulate)); });

  m.def(
      "attend",
      [](const Array& q, const Array& k, const Array& v, const std::string& backend, const std::string& precision,
         std::optional<std::string> accumulate, std::optional<double> scale, bool causal,
         std::optional<std::size_t> window, std::optional<Array> key_lengths, std::optional<Array> allowed,
         std::optional<Array> bias, std::optional<double> softcap, std::optional<Array> sinks, py::object alibi,
         std::optional<Array> segments, std::size_t kv_splits, std::size_t threads, std::size_t block_q,
         std::size_t block_k, bool need_lse, bool need_weights) {
        const attn::Shape s{static_cast<std::size_t>(q.ndim() == 4 ? q.shape(0) : 0),
                            static_cast<std::size_t>(q.ndim() == 4 ? q.shape(1) : 0)};
        return attend(q, k, v, backend, precision, accumulate,
                      options_of(s, scale, causal, window, key_lengths, allowed, bias, softcap, sinks, alibi, segments,
                                 kv_splits, threads, block_q, block_k, need_lse, need_weights));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("backend"), py::arg("precision"),
      py::arg("accumulate") = py::none(), py::arg("scale") = py::none(), py::arg("causal") = false,
      py::arg("window") = py::none(), py::arg("key_lengths") = py::none(), py::arg("allowed") = py::none(),
      py::arg("bias") = py::none(), py::arg("softcap") = py::none(), py::arg("sinks") = py::none(),
      py::arg("alibi") = py::none(), py::arg("segments") = py::none(), py::arg("kv_splits") = 0,
      py::arg("threads") = 1, py::arg("block_q") = 0, py::arg("block_k") = 0, py::arg("need_lse") = false,
      py::arg("need_weights") = false);

  // The verdict of verify() on a result, as the JSON every tool writes (attn/verify/verdict_json.hpp).
  m.def("check", [](const Result& r) { return verdict(r.report, r.options); });

  // The verdict on an output computed elsewhere (a Python kernel's, say) from q, k, v under the options: judged
  // as an outside kernel's (the traits of a plugin row) that stores in `precision` and computes under
  // `accumulate`. The report around it (the inputs rounded to the precision, the unit roundoffs and underflow
  // allowances) comes from the baseline backend's run on the same problem, whose output it replaces.
  m.def(
      "check_output",
      [](const Array& out, const Array& q, const Array& k, const Array& v, const std::string& precision,
         std::optional<std::string> accumulate, std::optional<double> scale, bool causal,
         std::optional<std::size_t> window, std::optional<Array> key_lengths, std::optional<Array> allowed,
         std::optional<Array> bias, std::optional<double> softcap, std::optional<Array> sinks, py::object alibi,
         std::optional<Array> segments) {
        const attn::Shape s{static_cast<std::size_t>(q.ndim() == 4 ? q.shape(0) : 0),
                            static_cast<std::size_t>(q.ndim() == 4 ? q.shape(1) : 0)};
        const attn::Options opt = options_of(s, scale, causal, window, key_lengths, allowed, bias, softcap, sinks, alibi,
                                             segments, 0, 1, 0, 0, false, false);
        xt::xtensor<double, 4> o = tensor<4>(out, "out");
        Result r = attend(q, k, v, std::string(attn::baseline_backend().name), precision, accumulate, opt);
        if (o.shape() != r.report.out.shape())
          throw attn::Error("out: shape [" + std::to_string(o.shape(0)) + ", " + std::to_string(o.shape(1)) + ", " +
                            std::to_string(o.shape(2)) + ", " + std::to_string(o.shape(3)) + "], expected [" +
                            std::to_string(r.report.out.shape(0)) + ", " + std::to_string(r.report.out.shape(1)) +
                            ", " + std::to_string(r.report.out.shape(2)) + ", " +
                            std::to_string(r.report.out.shape(3)) + "] (q's batch, heads, n_q and v's d_v)");
        r.report.out = std::move(o);
        r.report.lse.reset();
        r.report.weights.reset();
        r.report.traits = attn::BackendTraits{};
        r.report.traits.plugin = true;
        const attn::Accumulate acc = r.report.accumulate;
        return verdict(attn::judged_as(std::move(r.report), acc), opt);
      },
      py::arg("out"), py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("precision"),
      py::arg("accumulate") = py::none(), py::arg("scale") = py::none(), py::arg("causal") = false,
      py::arg("window") = py::none(), py::arg("key_lengths") = py::none(), py::arg("allowed") = py::none(),
      py::arg("bias") = py::none(), py::arg("softcap") = py::none(), py::arg("sinks") = py::none(),
      py::arg("alibi") = py::none(), py::arg("segments") = py::none());
}
