// WithoutGil: runs a blocking call (a round trip to gpukitd, the destruction of an array or a
// session, which frees it in the daemon) with the GIL released when the calling thread holds
// it, so other Python threads run meanwhile.
//
//   absl::Status status;
//   WithoutGil([&] { status = array->Read(data, bytes); });
//
// Thread safety: callable from any thread, holding the GIL or not. Destructors and DLPack
// deleters may run on threads that do not hold it (inside another call's released region, or
// a consumer's own thread); `fn` then simply runs.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_GIL_H_
#define GPUKIT_CLIENT_PYTHON_SRC_GIL_H_

#include <utility>

#include "pybind11/pybind11.h"

namespace gpukit::python {

template <typename Fn>
void WithoutGil(Fn&& fn) {
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    std::forward<Fn>(fn)();
  } else {
    std::forward<Fn>(fn)();
  }
}

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_GIL_H_
