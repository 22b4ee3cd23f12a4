// Python callables as plugins (include/attn/plugin.h): `--plugin python:MODULE:FUNCTION` makes a Python
// function f(q, k, v, **options) -> out or (out, lse) a row of the registry, its capabilities declared in
// Python (attention_lab.kernel). attn-lab's loader (lib/attn/registry/plugin.cpp) opens this library and asks
// attn_python_kernel(spec) for the kernel's descriptor; run() hands the caller's buffers to
// attention_lab.bridge.call as memoryviews (no copy: the Python side views them as NumPy arrays, and as
// PyTorch tensors through torch.from_numpy) and the kernel's result is copied into the caller's O.
//
// Hand-written C++ because the plugin ABI is C and the interpreter is embedded: the project's virtual
// environment's interpreter (ATTN_PYTHON, the path configured at build time, or the environment variable
// of that name) is the one whose packages are found, the tooling package (ATTN_PYTHON_DIR) is put first on
// sys.path, and every Python exception becomes ATTN_ERROR with its one-line message. The interpreter is
// started once per process and released (the GIL) between calls; calls take the GIL.
#include <Python.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attn/plugin.h"

namespace {

std::mutex start_mutex;
bool started = false;
std::string start_error;

// The message of the pending Python exception, one line (its type and text), and the exception cleared.
std::string python_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  std::string message = "a Python error";
  if (value) {
    PyObject* text = PyObject_Str(value);
    const char* name = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "Exception";
    if (text && PyUnicode_Check(text)) message = std::string(name) + ": " + PyUnicode_AsUTF8(text);
    Py_XDECREF(text);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  for (char& c : message)
    if (c == '\n') c = ' ';
  return message;
}

// Starts the interpreter of the project's environment once; false (and start_error) if it cannot.
bool start_python() {
  std::lock_guard lock(start_mutex);
  if (started) return start_error.empty();
  started = true;
  // Loaded into a running Python (attention_lab.load_plugin in a notebook): that interpreter, as it is (its
  // sys.path, its GIL, which the module releases while a backend runs).
  if (Py_IsInitialized()) return true;
  const char* env_python = std::getenv("ATTN_PYTHON");
  const std::string python = env_python && *env_python ? env_python : ATTN_PYTHON;
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // the host's signals stay the host's
  config.parse_argv = 0;
  // The virtual environment is found from the executable's pyvenv.cfg, as when that python runs.
  PyStatus status = PyConfig_SetBytesString(&config, &config.executable, python.c_str());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    start_error = "cannot start Python (" + python + "): " + (status.err_msg ? status.err_msg : "unknown error");
    return false;
  }
  PyObject* sys_path = PySys_GetObject("path");  // borrowed
  PyObject* dir = PyUnicode_FromString(ATTN_PYTHON_DIR);
  if (!sys_path || !dir || PyList_Insert(sys_path, 0, dir) != 0) start_error = python_error();
  Py_XDECREF(dir);
  PyEval_SaveThread();  // release the GIL: calls take it
  return start_error.empty();
}

// attention_lab.bridge.FUNCTION(*args), the new reference or nullptr (a Python error pending).
PyObject* call_bridge(const char* function, PyObject* args) {
  PyObject* module = PyImport_ImportModule("attention_lab.bridge");
  if (!module) return nullptr;
  PyObject* f = PyObject_GetAttrString(module, function);
  Py_DECREF(module);
  if (!f) return nullptr;
  PyObject* result = PyObject_CallObject(f, args);
  Py_DECREF(f);
  return result;
}

void write_error(char* error, std::size_t size, const std::string& message) {
  if (error && size) std::snprintf(error, size, "%s", message.c_str());
}

// One kernel: its descriptor and the strings it points into, alive while the library is loaded.
struct Kernel {
  attn_plugin descriptor{};
  std::string spec, name, description;
  int id = 0;  // attention_lab.bridge's handle of the kernel
};
std::vector<std::unique_ptr<Kernel>> kernels;

std::size_t element_size(attn_dtype d) { return d == ATTN_F64 ? 8 : d == ATTN_F32 ? 4 : 2; }

// A memoryview over a strided tensor's bytes, from its first element to one past its last.
PyObject* view_of(const attn_tensor& t, bool writable) {
  std::int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] == 0) return PyMemoryView_FromMemory(static_cast<char*>(t.data), 0, PyBUF_READ);
    last += (t.shape[i] - 1) * t.strides[i];
  }
  const Py_ssize_t bytes = Py_ssize_t((last + 1) * std::int64_t(element_size(t.dtype)));
  return PyMemoryView_FromMemory(static_cast<char*>(t.data), bytes, writable ? PyBUF_WRITE : PyBUF_READ);
}

PyObject* tensor_args(const attn_tensor& t, bool writable) {
  return Py_BuildValue("(Ni(LLLL)(LLLL))", view_of(t, writable), int(t.dtype), (long long)t.shape[0],
                       (long long)t.shape[1], (long long)t.shape[2], (long long)t.shape[3], (long long)t.strides[0],
                       (long long)t.strides[1], (long long)t.strides[2], (long long)t.strides[3]);
}

// A [count] double array as a tuple (None for NULL).
PyObject* doubles(const double* p, std::int64_t count) {
  if (!p) Py_RETURN_NONE;
  PyObject* t = PyTuple_New(count);
  for (std::int64_t i = 0; i < count; ++i) PyTuple_SET_ITEM(t, i, PyFloat_FromDouble(p[i]));
  return t;
}

// The options as attention_lab.bridge takes them (a dict), or nullptr (a Python error pending).
PyObject* options_dict(const attn_options* o, std::int64_t H, std::int64_t n_q, std::int64_t n_kv) {
  PyObject* options = Py_BuildValue(
      "{s:d,s:i,s:i,s:L,s:d,s:N,s:N,s:i}", "scale", o->scale, "accumulate", int(o->accumulate), "mask", int(o->mask),
      "window", (long long)o->window, "softcap", o->softcap, "sinks", doubles(o->sinks, H), "alibi_slopes",
      doubles(o->alibi_slopes, H), "threads", int(o->threads));
  if (options && o->mask == ATTN_MASK_BIAS) PyDict_SetItemString(options, "bias", doubles(o->bias, n_q * n_kv));
  return options;
}

// The caller's [B, H, n_q] logsumexp as a memoryview (None for NULL).
PyObject* lse_view(const double* lse, const attn_tensor& q, bool writable) {
  if (!lse) Py_RETURN_NONE;
  return PyMemoryView_FromMemory(reinterpret_cast<char*>(const_cast<double*>(lse)),
                                 Py_ssize_t(q.shape[0] * q.shape[1] * q.shape[2] * sizeof(double)),
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

// attention_lab.bridge.FUNCTION(args) under the GIL (args built here, under it too) as the ABI's status:
// None is ATTN_OK, a string ATTN_UNSUPPORTED with it as the message, an exception ATTN_ERROR with its line.
template <class Build>
attn_status bridge_status(const char* function, Build&& build_args, char* error, std::size_t error_size) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* args = build_args();
  PyObject* result = args ? call_bridge(function, args) : nullptr;
  Py_XDECREF(args);
  attn_status status = ATTN_OK;
  if (!result) {
    write_error(error, error_size, python_error());
    status = ATTN_ERROR;
  } else if (result != Py_None) {  // a string: not supported after all
    write_error(error, error_size, PyUnicode_Check(result) ? PyUnicode_AsUTF8(result) : "not supported");
    status = ATTN_UNSUPPORTED;
  }
  Py_XDECREF(result);
  PyGILState_Release(gil);
  return status;
}

attn_status run(const Kernel& k, const attn_tensor* q, const attn_tensor* kt, const attn_tensor* v,
                const attn_options* o, attn_tensor* out, double* lse, char* error, std::size_t error_size) {
  return bridge_status("call", [&]() -> PyObject* {
    PyObject* options = options_dict(o, q->shape[1], q->shape[2], kt->shape[2]);
    return options ? Py_BuildValue("(iNNNNNN)", k.id, tensor_args(*q, false), tensor_args(*kt, false),
                                   tensor_args(*v, false), tensor_args(*out, true), lse_view(lse, *q, true), options)
                   : nullptr;
  }, error, error_size);
}

attn_status backward(const Kernel& k, const attn_tensor* q, const attn_tensor* kt, const attn_tensor* v,
                     const attn_tensor* out, const double* lse, const attn_tensor* d_out, const attn_options* o,
                     attn_tensor* dq, attn_tensor* dk, attn_tensor* dv, char* error, std::size_t error_size) {
  return bridge_status("backward", [&]() -> PyObject* {
    PyObject* options = options_dict(o, q->shape[1], q->shape[2], kt->shape[2]);
    return options ? Py_BuildValue("(iNNNNNNNNNN)", k.id, tensor_args(*q, false), tensor_args(*kt, false),
                                   tensor_args(*v, false), tensor_args(*out, false), lse_view(lse, *q, false),
                                   tensor_args(*d_out, false), tensor_args(*dq, true), tensor_args(*dk, true),
                                   tensor_args(*dv, true), options)
                   : nullptr;
  }, error, error_size);
}

// The run and backward functions of the descriptors: one per slot, since the ABI's functions take no kernel
// handle.
template <int Slot>
attn_status run_slot(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_options* o,
                     attn_tensor* out, double* lse, char* error, std::size_t error_size) {
  return run(*kernels[Slot], q, k, v, o, out, lse, error, error_size);
}
template <int Slot>
attn_status backward_slot(const attn_tensor* q, const attn_tensor* k, const attn_tensor* v, const attn_tensor* out,
                          const double* lse, const attn_tensor* d_out, const attn_options* o, attn_tensor* dq,
                          attn_tensor* dk, attn_tensor* dv, char* error, std::size_t error_size) {
  return backward(*kernels[Slot], q, k, v, out, lse, d_out, o, dq, dk, dv, error, error_size);
}
template <int... S>
constexpr auto make_slots(std::integer_sequence<int, S...>) {
  return std::array<decltype(&run_slot<0>), sizeof...(S)>{&run_slot<S>...};
}
template <int... S>
constexpr auto make_backward_slots(std::integer_sequence<int, S...>) {
  return std::array<decltype(&backward_slot<0>), sizeof...(S)>{&backward_slot<S>...};
}
constexpr int max_kernels = 32;
constexpr auto slots = make_slots(std::make_integer_sequence<int, max_kernels>{});
constexpr auto backward_slots = make_backward_slots(std::make_integer_sequence<int, max_kernels>{});

}  // namespace

extern "C" {

// No kernel of its own: kernels come from attn_python_kernel.
const attn_plugin* attn_plugin_get(uint32_t) { return nullptr; }

// The descriptor of the Python kernel `spec` (MODULE:FUNCTION), or NULL with a one-line message in `error`.
const attn_plugin* attn_python_kernel(const char* spec, char* error, size_t error_size) {
  if (!start_python()) {
    write_error(error, error_size, start_error);
    return nullptr;
  }
  if (kernels.size() >= std::size_t(max_kernels)) {
    write_error(error, error_size, "at most " + std::to_string(max_kernels) + " Python kernels per process");
    return nullptr;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* args = Py_BuildValue("(s)", spec);
  PyObject* d = call_bridge("describe", args);
  Py_XDECREF(args);
  const attn_plugin* found = nullptr;
  auto k = std::make_unique<Kernel>();
  if (!d) {
    write_error(error, error_size, python_error());
  } else {
    PyObject* acc = nullptr;
    const char *name = nullptr, *description = nullptr;
    unsigned long long capabilities = 0;
    if (!PyArg_ParseTuple(d, "issKO", &k->id, &name, &description, &capabilities, &acc) || !PySequence_Check(acc) ||
        PySequence_Size(acc) != 4) {
      write_error(error, error_size, "attention_lab.bridge.describe returned no (id, name, description, "
                                     "capabilities, accumulate_by_dtype) tuple");
      PyErr_Clear();
    } else {
      k->spec = spec;
      k->name = name;
      k->description = description;
      k->descriptor.abi_version = ATTN_PLUGIN_ABI_VERSION;
      k->descriptor.name = k->name.c_str();
      k->descriptor.description = k->description.c_str();
      k->descriptor.capabilities = capabilities;
      for (Py_ssize_t i = 0; i < 4; ++i) {
        PyObject* bits = PySequence_GetItem(acc, i);
        k->descriptor.accumulate_by_dtype[i] = uint8_t(PyLong_AsLong(bits));
        Py_XDECREF(bits);
      }
      k->descriptor.run = slots[kernels.size()];
      if (capabilities & ATTN_CAP_BACKWARD) k->descriptor.backward = backward_slots[kernels.size()];
      kernels.push_back(std::move(k));
      found = &kernels.back()->descriptor;
    }
    Py_DECREF(d);
  }
  PyGILState_Release(gil);
  return found;
}

}  // extern "C"
