// PyClient, bound as gpukit._gpukit.Client: one session with gpukitd (gpukit::Client), shared
// with the Arrays and Kernels it made, for gpukit.Session (client/python/gpukit/_session.py).
//
//   client = _gpukit.Client.connect("unix:///run/gpukit/gpukitd.sock", tenant="t")
//   out = client.run_op("add", [a, 1.5], {})   # a: a _gpukit.Array of this session
//
// The session closes when the last of the client, its arrays and kernels goes, or at
// close(). In a pipelined session (connect(pipeline=True)) run_op returns its Array at once.
//
// Thread safety: may be used from several Python threads at once (libgpukit is thread-safe);
// every call that talks to the daemon runs with the GIL released.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_PY_CLIENT_H_
#define GPUKIT_CLIENT_PYTHON_SRC_PY_CLIENT_H_

#include <memory>
#include <utility>

#include "gpukit/client.h"
#include "pybind11/pybind11.h"

namespace gpukit::python {

class PyClient {
 public:
  explicit PyClient(std::shared_ptr<Client> client) : client_(std::move(client)) {}
  ~PyClient();  // the last reference closes the session
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }

  // Client::Sync: raises the first op that failed since the previous sync point.
  void Sync() const;

 private:
  std::shared_ptr<Client> client_;
};

// Adds the class Client to `module`.
void RegisterClient(pybind11::module_& module);

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_PY_CLIENT_H_
