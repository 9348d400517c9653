// gpukit._gpukit.DaemonProbe: a bare channel to gpukitd, without a session, for gpukit-bench
// (client/python/gpukit/bench.py): the raw gRPC ping that the other figures are measured
// against, and what the daemon says about itself (its devices, its ops: tests/python holds the
// package's ops against them).
//
//   probe = _gpukit.DaemonProbe.connect("unix:///run/gpukit/gpukitd.sock", 5.0)
//   probe.ping()   # grpc.health.v1.Health/Check: one round trip, no gpukit code runs
//   probe.info()   # {"version": "0.1.0", "backend": "cpu", "device": "CPU simulation device", ...}
//   probe.ops()    # [{"name": "add", "summary": ..., "attrs": [], "backends": ["cpu"]}, ...]
//
// Errors are gpukit.Error subclasses (Unavailable when nothing answers). Thread safety: a
// probe may be used from several Python threads at once (a grpc::Channel is thread-safe).
#ifndef GPUKIT_CLIENT_PYTHON_SRC_DAEMON_PROBE_H_
#define GPUKIT_CLIENT_PYTHON_SRC_DAEMON_PROBE_H_

#include "pybind11/pybind11.h"

namespace gpukit::python {

// Adds the class DaemonProbe to `module`.
void RegisterDaemonProbe(pybind11::module_& module);

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_DAEMON_PROBE_H_
