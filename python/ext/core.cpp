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

#include <chrono>
#include <cmath>
#include <optional>
#include <set>
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

// An array of any real dtype and any strides as the library's float64 tensor: one conversion, straight into
// the tensor's buffer (numpy.copyto through a view of it), and no other copy on the way.
template <std::size_t N>
xt::xtensor<double, N> tensor(const py::array& a, const char* name) {
  if (a.ndim() != static_cast<py::ssize_t>(N))
    throw attn::Error(std::string(name) + ": expected " + std::to_string(N) + " dimensions, got " +
                      std::to_string(a.ndim()));
  std::array<std::size_t, N> shape{};
  for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(a.shape(i));
  xt::xtensor<double, N> t(shape);
  if (t.size() == 0) return t;
  const py::array_t<double> view(std::vector<py::ssize_t>(a.shape(), a.shape() + N), t.data(),
                                 py::capsule(t.data(), [](void*) {}));  // a view: the tensor owns the memory
  py::module_::import("numpy").attr("copyto")(view, a, py::arg("casting") = "unsafe");
  return t;
}

template <std::size_t N>
py::array_t<double> array(const xt::xtensor<double, N>& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array_t<double> a(shape);
  std::copy(t.data(), t.data() + t.size(), a.mutable_data());
  return a;
}

std::string shape_text(const xt::xtensor<double, 4>& t) {
  return "[" + std::to_string(t.shape(0)) + ", " + std::to_string(t.shape(1)) + ", " + std::to_string(t.shape(2)) +
         ", " + std::to_string(t.shape(3)) + "]";
}

// One call's result: the library's RunReport and the options it ran with (what check() needs).
struct Result {
  attn::RunReport report;
  attn::Options options;
  std::string backend;
  attn::Shape shape;
  double call_seconds = 0;  // the library's whole call (b.run: rounding, workspace, the backend): wall time
};

// The problem's options from keyword arguments (attention_lab.api passes them; None is absent): the one parser
// of attend, check_output, backward and ground_truth. An unknown keyword is a TypeError naming it.
attn::Options options_of(const attn::Shape& s, const py::kwargs& kw) {
  static const std::set<std::string> known = {"scale", "causal", "window", "key_lengths", "allowed", "bias",
                                              "softcap", "sinks", "alibi", "segments", "kv_splits", "threads",
                                              "block_q", "block_k", "need_lse", "need_weights"};
  for (const auto& item : kw)
    if (!known.count(item.first.cast<std::string>()))
      throw py::type_error("unknown option '" + item.first.cast<std::string>() + "'");
  const auto get = [&](const char* name) -> py::object {
    return kw.contains(name) ? py::object(kw[name]) : py::object(py::none());
  };
  // A value of the type an option takes, or a TypeError naming the option and what it was given.
  const auto as = [&]<class T>(const char* name, const char* what, T*) -> T {
    const py::object x = get(name);
    try {
      return x.cast<T>();
    } catch (const py::cast_error&) {
      throw py::type_error(std::string("option ") + name + ": " + what + ", not " +
                           py::str(py::type::of(x).attr("__name__")).cast<std::string>());
    }
  };
  const auto array = [&](const char* name) -> std::optional<Array> {
    if (get(name).is_none()) return std::nullopt;
    return as(name, "an array of numbers", static_cast<Array*>(nullptr));
  };
  const auto count = [&](const char* name, std::size_t fallback) {
    if (get(name).is_none()) return fallback;
    const long long n = as(name, "a whole number", static_cast<long long*>(nullptr));
    if (n < 0) throw attn::Error(std::string(name) + " must be >= 0, not " + std::to_string(n));
    return static_cast<std::size_t>(n);
  };
  attn::Options opt;
  if (!get("scale").is_none()) opt.scale = as("scale", "a number", static_cast<double*>(nullptr));
  const bool causal = !get("causal").is_none() && as("causal", "a bool", static_cast<bool*>(nullptr));
  const bool window = !get("window").is_none();
  const std::optional<Array> key_lengths = array("key_lengths"), allowed = array("allowed"), bias = array("bias");
  const int masks = int(causal && !window) + int(window) + int(key_lengths.has_value()) + int(allowed.has_value()) +
                    int(bias.has_value());
  if (masks > 1) throw attn::Error("give one mask: causal, window, key_lengths, allowed or bias");
  if (window) opt.mask = attn::mask::SlidingWindow{count("window", 1)};
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
  if (!get("softcap").is_none()) opt.softcap = as("softcap", "a number", static_cast<double*>(nullptr));
  if (const auto sinks = array("sinks")) opt.sinks = tensor<1>(*sinks, "sinks");
  const py::object alibi = get("alibi");
  if (py::isinstance<py::bool_>(alibi)) {
    if (alibi.cast<bool>()) opt.alibi_slopes = attn::alibi_slopes(s.heads);
  } else if (!alibi.is_none()) {
    opt.alibi_slopes = tensor<1>(as("alibi", "True or an array of slopes", static_cast<Array*>(nullptr)), "alibi");
  }
  if (const auto segments = array("segments")) {
    const xt::xtensor<double, 2> g = tensor<2>(*segments, "segments");
    opt.segments = attn::Segments(g.shape());
    std::transform(g.begin(), g.end(), opt.segments->begin(), [](double x) {
      if (!std::isfinite(x) || x != std::trunc(x)) throw attn::Error("segments: each must be a whole number");
      return std::int64_t(x);
    });
  }
  opt.kv_splits = count("kv_splits", 0);
  opt.threads = count("threads", 1);
  if (opt.threads < 1) throw attn::Error("threads must be at least 1");
  opt.block_q = count("block_q", 0);
  opt.block_k = count("block_k", 0);
  opt.need_lse = !get("need_lse").is_none() && as("need_lse", "a bool", static_cast<bool*>(nullptr));
  opt.need_weights = !get("need_weights").is_none() && as("need_weights", "a bool", static_cast<bool*>(nullptr));
  return opt;
}

// The shape's batch and heads from q (4-D): what options_of needs (ALiBi's default slopes).
attn::Shape heads_of(const py::array& q) {
  attn::Shape s;
  if (q.ndim() == 4) {
    s.batch = static_cast<std::size_t>(q.shape(0));
    s.heads = static_cast<std::size_t>(q.shape(1));
  }
  return s;
}

Result attend(const py::array& q, const py::array& k, const py::array& v, const std::string& backend, const std::string& precision,
              std::optional<std::string> accumulate, const attn::Options& opt, std::size_t repetitions = 0) {
  attn::Inputs<double> in{tensor<4>(q, "q"), tensor<4>(k, "k"), tensor<4>(v, "v")};
  const attn::BackendInfo& b = attn::backend_info(backend);
  const attn::PrecisionInfo& p = attn::precision_info(precision);
  const attn::Accumulate acc = accumulate ? attn::parse_accumulate(*accumulate) : p.default_accumulate;
  Result r{{}, opt, backend, in.shape()};
  {
    py::gil_scoped_release unlocked;
    const auto t0 = std::chrono::steady_clock::now();
    r.report = b.run(precision, acc, in, opt, {}, repetitions);
    r.call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return r;
}

struct BackwardResult {
  attn::BackwardReport report;
  attn::Options options;
  std::string backend;
};

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
      .def_property_readonly("call_seconds", [](const Result& r) { return r.call_seconds; })
      .def_property_readonly("warm_seconds", [](const Result& r) { return r.report.warm_seconds; })
      .def_property_readonly("flops", [](const Result& r) {  // of Q K^T and P V, halved for causal (backend.hpp)
        return attn::flops(r.shape, std::holds_alternative<attn::mask::Causal>(r.options.mask));
      })
      .def_property_readonly("workspace_bytes", [](const Result& r) { return r.report.workspace_bytes; })
      .def_property_readonly("backend", [](const Result& r) { return r.backend; })
      .def_property_readonly("precision", [](const Result& r) { return std::string(r.report.precision); })
      .def_property_readonly("accumulate",
                             [](const Result& r) { return std::string(attn::accumulate_name(r.report.accumulate)); });

  m.def(
      "attend",
      [](const py::array& q, const py::array& k, const py::array& v, const std::string& backend, const std::string& precision,
         std::optional<std::string> accumulate, std::size_t repetitions, const py::kwargs& kw) {
        return attend(q, k, v, backend, precision, accumulate, options_of(heads_of(q), kw), repetitions);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("backend"), py::arg("precision"),
      py::arg("accumulate") = py::none(), py::arg("repetitions") = 0);

  // The verdict of verify() on a result, as the JSON every tool writes (attn/verify/verdict_json.hpp).
  m.def("check", [](const Result& r) { return verdict(r.report, r.options); });

  // The verdict on an output computed elsewhere (a Python kernel's, say) from q, k, v under the options: judged
  // as an outside kernel's (the traits of a plugin row) that stores in `precision` and computes under
  // `accumulate`. The report around it (the inputs rounded to the precision, the unit roundoffs and underflow
  // allowances) comes from the baseline backend's run on the same problem, whose output it replaces.
  m.def(
      "check_output",
      [](const py::array& out, const py::array& q, const py::array& k, const py::array& v, const std::string& precision,
         std::optional<std::string> accumulate, const py::kwargs& kw) {
        attn::Options opt = options_of(heads_of(q), kw);
        opt.need_lse = opt.need_weights = false;
        xt::xtensor<double, 4> o = tensor<4>(out, "out");
        Result r = attend(q, k, v, std::string(attn::baseline_backend().name), precision, accumulate, opt);
        if (o.shape() != r.report.out.shape())
          throw attn::Error("out: shape " + shape_text(o) + ", expected " + shape_text(r.report.out) +
                            " (q's batch, heads and n_q, v's d_v)");
        r.report.out = std::move(o);
        r.report.lse.reset();
        r.report.weights.reset();
        r.report.traits = attn::BackendTraits{};
        r.report.traits.plugin = true;
        const attn::Accumulate acc = r.report.accumulate;
        return verdict(attn::judged_as(std::move(r.report), acc), opt);
      },
      py::arg("out"), py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("precision"),
      py::arg("accumulate") = py::none());

  // The backward pass of a backend (the forward once, untimed, then one backward call) and its verdict.
  py::class_<BackwardResult>(m, "BackwardResult")
      .def_property_readonly("dq", [](const BackwardResult& r) { return array(r.report.grads.dq); })
      .def_property_readonly("dk", [](const BackwardResult& r) { return array(r.report.grads.dk); })
      .def_property_readonly("dv", [](const BackwardResult& r) { return array(r.report.grads.dv); })
      .def_property_readonly("out", [](const BackwardResult& r) { return array(r.report.forward.out); })
      .def_property_readonly("seconds", [](const BackwardResult& r) { return r.report.seconds; })
      .def_property_readonly("backend", [](const BackwardResult& r) { return r.backend; })
      .def_property_readonly("precision", [](const BackwardResult& r) { return std::string(r.report.forward.precision); });
  m.def(
      "backward",
      [](const py::array& q, const py::array& k, const py::array& v, const py::array& d_out, const std::string& backend,
         const std::string& precision, std::optional<std::string> accumulate, const py::kwargs& kw) {
        attn::Inputs<double> in{tensor<4>(q, "q"), tensor<4>(k, "k"), tensor<4>(v, "v")};
        const xt::xtensor<double, 4> g = tensor<4>(d_out, "d_out");
        const attn::BackendInfo& b = attn::backend_info(backend);
        const attn::PrecisionInfo& p = attn::precision_info(precision);
        const attn::Accumulate acc = accumulate ? attn::parse_accumulate(*accumulate) : p.default_accumulate;
        BackwardResult r{{}, options_of(heads_of(q), kw), backend};
        py::gil_scoped_release unlocked;
        r.report = b.run_backward(precision, acc, in, g, r.options);
        return r;
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("d_out"), py::kw_only(), py::arg("backend"),
      py::arg("precision"), py::arg("accumulate") = py::none());
  m.def("check_backward", [](const BackwardResult& r) {
    attn::GradientCheck c;
    {
      py::gil_scoped_release unlocked;
      c = attn::verify_backward(r.report, r.options);
    }
    attn::Json j = {{"truth", attn::truth_name(c.truth)}, {"passed", c.passed()}, {"within", c.within},
                    {"within_tight", c.tight_within}, {"tight_informative", c.tight_informative}};
    for (const auto& part : c.parts) j[std::string(part.name)] = attn::to_json(part);
    return json_to_python(j);
  });

  // The ground truth the verdicts use (verify.hpp: 50 digits where affordable, else double-double, else fp64),
  // of q, k, v rounded to `precision` when one is given.
  m.def(
      "ground_truth",
      [](const py::array& q, const py::array& k, const py::array& v, std::optional<std::string> precision, const py::kwargs& kw) {
        attn::Inputs<double> in{tensor<4>(q, "q"), tensor<4>(k, "k"), tensor<4>(v, "v")};
        attn::Options opt = options_of(heads_of(q), kw);
        opt.need_lse = opt.need_weights = true;
        double u_store = attn::precision_info("fp64").unit_roundoff;
        if (precision) {
          const attn::PrecisionInfo& p = attn::precision_info(*precision);
          in = attn::rounded_to(p, in);
          u_store = p.unit_roundoff;
        }
        attn::validate(in, opt);
        attn::GroundTruth t;
        {
          py::gil_scoped_release unlocked;
          t = attn::ground_truth(in, opt, u_store);
        }
        py::dict d;
        d["out"] = array(xt::xtensor<double, 4>(t.result.out));
        d["lse"] = t.result.lse ? py::object(array(*t.result.lse)) : py::object(py::none());
        d["weights"] = t.result.weights ? py::object(array(*t.result.weights)) : py::object(py::none());
        d["truth"] = std::string(attn::truth_name(t.kind));
        d["out_error"] = t.out_error;
        return d;
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("precision") = py::none());
}
