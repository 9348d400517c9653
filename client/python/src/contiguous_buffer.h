// ContiguousBuffer: a Python buffer (bytes, bytearray, a NumPy array, a memoryview) held as one
// C-contiguous block while a call reads or writes it, as Array.write/read_into and
// Client.from_buffer take their data.
//
//   ContiguousBuffer buffer(data, /*writable=*/false);  // raises BufferError if not contiguous
//   WithoutGil([&] { status = array->Write(buffer.data(), buffer.bytes()); });
//
// Thread safety: constructed and destroyed with the GIL held; data() may be used without it
// while the object lives.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_CONTIGUOUS_BUFFER_H_
#define GPUKIT_CLIENT_PYTHON_SRC_CONTIGUOUS_BUFFER_H_

#include <cstdint>

#include "pybind11/pybind11.h"

namespace gpukit::python {

class ContiguousBuffer {
 public:
  ContiguousBuffer(pybind11::handle object, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
      throw pybind11::error_already_set();
    }
  }
  ~ContiguousBuffer() { PyBuffer_Release(&view_); }
  ContiguousBuffer(const ContiguousBuffer&) = delete;
  ContiguousBuffer& operator=(const ContiguousBuffer&) = delete;

  void* data() const { return view_.buf; }
  int64_t bytes() const { return static_cast<int64_t>(view_.len); }

 private:
  Py_buffer view_{};
};

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_CONTIGUOUS_BUFFER_H_
