// gpukit._gpukit: thin pybind11 bindings of libgpukit (client/cpp/include/gpukit/client.h)
// for the pure-Python package gpukit (client/python/gpukit), which gives them their NumPy-like
// shape. Each bound class has its own file and Register function: Client (py_client.h),
// Array (py_array.h), Kernel and KernelArgument (py_kernel.h), the errors (errors.h) and
// DaemonProbe (daemon_probe.h). Every call that talks to the daemon runs with the GIL
// released; Python objects are only touched while it is held.
//
// Lifetimes: an Array and a Kernel hold a reference to their Client, so the session stays
// open while any of them lives (or until Client.close()). An Array frees its device memory
// (a free queued on the session's Submit stream, which does not wait for the daemon) and a
// Kernel its compiled module when they are garbage collected or freed.
//
// Thread safety: every class may be used from several Python threads at once (libgpukit is
// thread-safe); free() while another thread uses the same Array lets that call finish first.
#include "client/python/src/daemon_probe.h"
#include "client/python/src/errors.h"
#include "client/python/src/py_array.h"
#include "client/python/src/py_client.h"
#include "client/python/src/py_kernel.h"
#include "pybind11/pybind11.h"
#include "runtime/base/dtype.h"
#include "runtime/base/mutex_mode.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

void RegisterDType(py::module_& module) {
  py::enum_<DType>(module, "DType", "Element type of a gpukit array.")
      .value("float32", DType::kFloat32)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16)
      .value("int32", DType::kInt32)
      .value("int64", DType::kInt64)
      .value("uint8", DType::kUInt8)
      .def_property_readonly(
          "itemsize", [](DType dtype) { return DTypeSize(dtype); }, "Bytes per element.");
}

}  // namespace

// Classes come before the functions that name them, so that docstrings' signatures show
// their Python names.
PYBIND11_MODULE(_gpukit, m) {
  // The process's absl mutexes without Debian's lock-order check (runtime/base/mutex_mode.h).
  gpukit::UseFastMutexes();
  m.doc() =
      "Thin bindings of libgpukit, the C++ client of gpukitd. Use the `gpukit` package; this "
      "module is its implementation.";
  m.attr("__version__") = GPUKIT_VERSION_STRING;
  RegisterErrors(m);
  RegisterDType(m);
  RegisterArray(m);
  RegisterKernel(m);
  RegisterClient(m);
  RegisterDaemonProbe(m);  // gpukit-bench's raw ping
}

}  // namespace gpukit::python
