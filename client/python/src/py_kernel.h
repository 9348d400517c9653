// PyKernel, bound as gpukit._gpukit.Kernel: a compiled custom kernel of a session
// (gpukit::Kernel), and KernelArgument, a launch argument with the C type that
// gpukit/_kernel.py chose for it.
//
// A kernel holds a reference to its Client, so the session stays open while it lives; its
// module is freed in the daemon when it is garbage collected or freed.
//
// Thread safety: may be used from several Python threads at once (libgpukit is thread-safe);
// launch and free run with the GIL released.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_PY_KERNEL_H_
#define GPUKIT_CLIENT_PYTHON_SRC_PY_KERNEL_H_

#include <memory>
#include <utility>

#include "gpukit/client.h"
#include "pybind11/pybind11.h"

namespace gpukit::python {

class PyKernel {
 public:
  PyKernel(std::shared_ptr<Client> client, Kernel kernel)
      : client_(std::move(client)), kernel_(std::move(kernel)) {}
  ~PyKernel();  // frees the kernel in the daemon unless freed; the session may be gone
  PyKernel(const PyKernel&) = delete;
  PyKernel& operator=(const PyKernel&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }
  const Kernel& kernel() const { return kernel_; }
  bool freed() const { return freed_; }

  // Frees the kernel in the daemon (FreeKernel); a second call does nothing.
  void Free();

 private:
  std::shared_ptr<Client> client_;
  Kernel kernel_;
  bool freed_ = false;
};

// Adds the classes Kernel and KernelArgument to `module`.
void RegisterKernel(pybind11::module_& module);

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_PY_KERNEL_H_
