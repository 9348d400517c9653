// The gpukit.Error hierarchy of the Python module: one Python exception class per gRPC status
// code a gpukit call can fail with, each carrying the code's name, the daemon's message and
// the admission reason (the "gpukit-reason" trailer, see docs/api.md, Errors).
//
//   RegisterErrors(module);                   // once, when the module is imported
//   ...
//   absl::StatusOr<gpukit::Array> array = ...;
//   ThrowIfError(array.status());             // raises gpukit.ResourceExhausted, ...
//
// C++ code raises a StatusError; the translator RegisterErrors installs turns it into the
// Python exception. Python code sees:
//
//   try:
//       gk.empty((1 << 30,), "float32")
//   except gpukit.ResourceExhausted as e:
//       e.code     # "RESOURCE_EXHAUSTED"
//       e.reason   # "REASON_SESSION_LIMIT_EXCEEDED", or None
//       e.message  # the daemon's message
//
// Thread safety: StatusError and ThrowIfError may be used from any thread, with or without
// the GIL; the translator runs with the GIL held (pybind11 calls it so).
#ifndef GPUKIT_CLIENT_PYTHON_SRC_ERRORS_H_
#define GPUKIT_CLIENT_PYTHON_SRC_ERRORS_H_

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace gpukit::python {

// A failed absl::Status on its way to Python.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status) : status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return "gpukit status error"; }

 private:
  absl::Status status_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// Creates Error and its subclasses in `module` and registers the translator of StatusError.
void RegisterErrors(pybind11::module_& module);

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_ERRORS_H_
