// PyArray, bound as gpukit._gpukit.Array: a device array of a session (gpukit::Array) for
// gpukit.Array (client/python/gpukit/_array.py), which wraps it.
//
// An array holds a reference to its Client, so the session stays open while it lives (or
// until Client.close()). Its device memory is freed (a free queued on the session's Submit
// stream, which does not wait for the daemon) when it is garbage collected or freed. In a
// pipelined session its layout (shape, dtype, bytes) is known once the daemon answered the op
// that makes it: it is fetched on first use, with the GIL released, and kept, so it outlives
// free(); the op's refusal is raised then, naming the op.
//
// Thread safety: may be used from several Python threads at once; calls that need the array
// take a copy of its pointer with the GIL held, so a free() on another thread lets them finish
// first. Every call that talks to the daemon runs with the GIL released.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_PY_ARRAY_H_
#define GPUKIT_CLIENT_PYTHON_SRC_PY_ARRAY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpukit/client.h"
#include "pybind11/pybind11.h"
#include "runtime/base/dtype.h"

namespace gpukit::python {

class PyArray {
 public:
  PyArray(std::shared_ptr<Client> client, Array array)
      : PyArray(std::move(client), std::make_shared<Array>(std::move(array))) {}
  // An array whose shared_ptr does more when the last reference goes (an imported CUDA
  // tensor's: its deleter hands the tensor back to its producer).
  PyArray(std::shared_ptr<Client> client, std::shared_ptr<Array> array)
      : client_(std::move(client)), handle_(array->handle()), array_(std::move(array)) {}
  ~PyArray();
  PyArray(const PyArray&) = delete;
  PyArray& operator=(const PyArray&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }
  const std::string& handle() const { return handle_; }
  // The layout; each waits for the array's op to be answered, and raises its refusal.
  const std::vector<int64_t>& shape() const { return Layout().shape; }
  DType dtype() const { return Layout().dtype; }
  int64_t size_bytes() const { return Layout().size_bytes; }
  bool freed() const { return array_ == nullptr; }

  // Waits for the array's op to be answered (GIL released); raises its refusal. The error
  // raised is the session's first failure since its last sync point when there is one (the
  // root cause; the stream then takes ops again), else this op's own.
  void Check() const { Layout(); }

  // The live array, or NOT_FOUND as the daemon answers for a freed handle.
  std::shared_ptr<Array> Live() const;

  // Downloads into `out`, a writable C-contiguous buffer of size_bytes (Array::Read).
  void Read(pybind11::handle out) const;
  // Uploads `data`, a C-contiguous buffer of size_bytes (Array::Write).
  void Write(pybind11::handle data) const;

  // Maps the array's device memory into this process (Array::Map): (device pointer, bytes,
  // CUDA device ordinal).
  pybind11::tuple Map() const;

  // A DLPack capsule ("dltensor_versioned", or the legacy "dltensor") over the array's mapping
  // (Map). The capsule's tensor holds the array and its client until the consumer releases
  // it, so the memory outlives this object, and a free() meanwhile takes effect only then.
  pybind11::object ToDLPack(bool versioned, bool is_copy) const;

  // Frees the device memory now, unless a call on another thread still uses the array: then
  // when that call ends. A second free() does nothing.
  void Free();

 private:
  struct ArrayLayout {
    std::vector<int64_t> shape;
    DType dtype = DType::kFloat32;
    int64_t size_bytes = 0;
  };

  // The layout, fetched once (with the GIL released, as it may wait for the daemon's answer
  // to a pipelined op) and kept; raises the op's refusal.
  const ArrayLayout& Layout() const;

  // Waits for the op's answer (GIL released) and keeps the layout, or the refusal in error_
  // (returned). Raises nothing; no sync point.
  absl::Status Resolve() const;

  std::shared_ptr<Client> client_;
  std::string handle_;
  std::shared_ptr<Array> array_;  // null once freed
  // Set with the GIL held.
  mutable std::optional<ArrayLayout> layout_;
  mutable std::optional<absl::Status> error_;
};

// Adds the class Array to `module`.
void RegisterArray(pybind11::module_& module);

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_PY_ARRAY_H_
