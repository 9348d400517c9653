#include "client/python/src/py_array.h"

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/python/src/contiguous_buffer.h"
#include "client/python/src/dlpack.h"
#include "client/python/src/errors.h"
#include "client/python/src/gil.h"

namespace gpukit::python {
namespace py = pybind11;

PyArray::~PyArray() {
  WithoutGil([this] {
    array_.reset();
    client_.reset();
  });
}

std::shared_ptr<Array> PyArray::Live() const {
  if (array_ == nullptr) {
    throw StatusError(absl::NotFoundError(
        absl::StrCat("array handle \"", handle_, "\" was freed in this session")));
  }
  return array_;
}

void PyArray::Read(py::handle out) const {
  Check();
  std::shared_ptr<Array> array = Live();
  ContiguousBuffer buffer(out, /*writable=*/true);
  absl::Status status;
  WithoutGil([&] { status = array->Read(buffer.data(), buffer.bytes()); });
  ThrowIfError(status);
}

void PyArray::Write(py::handle data) const {
  std::shared_ptr<Array> array = Live();
  ContiguousBuffer buffer(data, /*writable=*/false);
  absl::Status status;
  WithoutGil([&] { status = array->Write(buffer.data(), buffer.bytes()); });
  ThrowIfError(status);
}

py::tuple PyArray::Map() const {
  std::shared_ptr<Array> array = Live();
  absl::StatusOr<DeviceMapping> mapping = absl::InternalError("not mapped");
  WithoutGil([&] { mapping = array->Map(); });
  ThrowIfError(mapping.status());
  return py::make_tuple(mapping->device_pointer, mapping->size_bytes, mapping->device_index);
}

py::object PyArray::ToDLPack(bool versioned, bool is_copy) const {
  // What an exported tensor keeps alive; the array goes first, then (if it was the last
  // reference) the session.
  struct ExportOwner {
    std::shared_ptr<Client> client;
    std::shared_ptr<Array> array;
  };
  std::shared_ptr<Array> array = Live();
  absl::StatusOr<DeviceMapping> mapping = absl::InternalError("not mapped");
  WithoutGil([&] { mapping = array->Map(); });
  ThrowIfError(mapping.status());
  DLPackExport spec;
  spec.device_pointer = mapping->device_pointer;
  spec.device_index = mapping->device_index;
  spec.shape = shape();
  spec.dtype = dtype();
  spec.versioned = versioned;
  spec.is_copy = is_copy;
  spec.owner = std::make_shared<const ExportOwner>(ExportOwner{client_, std::move(array)});
  return MakeDLPackCapsule(std::move(spec));
}

void PyArray::Free() {
  if (array_ == nullptr) return;
  // Keeps shape and dtype readable after the free; a refused op's error stays for sync().
  Resolve().IgnoreError();
  std::shared_ptr<Array> array = std::move(array_);
  if (array == nullptr) return;
  absl::Status status;
  WithoutGil([&] {
    if (array.use_count() == 1) status = array->Free();
    array.reset();
  });
  ThrowIfError(status);
}

const PyArray::ArrayLayout& PyArray::Layout() const {
  if (layout_.has_value()) return *layout_;
  if (error_.has_value()) throw StatusError(*error_);
  absl::Status status = Resolve();
  if (status.ok()) return *layout_;
  // The first time a refusal shows: the session's first failure since its last sync point,
  // if any, is the root cause to raise (a sync point: the stream then takes ops again).
  WithoutGil([&] {
    absl::Status first = client_->Sync();
    if (!first.ok()) status = first;
  });
  throw StatusError(status);
}

absl::Status PyArray::Resolve() const {
  if (layout_.has_value()) return absl::OkStatus();
  if (error_.has_value()) return *error_;
  std::shared_ptr<Array> array = Live();
  absl::Status status;
  ArrayLayout layout;
  WithoutGil([&] {
    status = array->status();
    if (status.ok()) layout = ArrayLayout{array->shape(), array->dtype(), array->size_bytes()};
  });
  if (status.ok()) {
    layout_ = std::move(layout);
  } else {
    error_ = status;
  }
  return status;
}

void RegisterArray(py::module_& module) {
  py::class_<PyArray, std::shared_ptr<PyArray>>(module, "Array", "A device array (gpukit::Array).")
      .def_property_readonly("handle", &PyArray::handle)
      .def_property_readonly("shape",
                             [](const PyArray& self) {
                               py::tuple shape(self.shape().size());
                               for (size_t i = 0; i < self.shape().size(); ++i) {
                                 shape[i] = py::int_(self.shape()[i]);
                               }
                               return shape;
                             })
      .def_property_readonly("dtype", &PyArray::dtype)
      .def_property_readonly("size_bytes", &PyArray::size_bytes)
      .def_property_readonly("freed", &PyArray::freed)
      .def("check", &PyArray::Check,
           "Waits for the daemon's answer to the op that makes the array; raises its refusal.")
      .def_property_readonly("session_id",
                             [](const PyArray& self) { return self.client()->session_id(); })
      .def("read_into", &PyArray::Read, py::arg("out"),
           "Downloads the array into `out`, a writable C-contiguous buffer of size_bytes.")
      .def("write", &PyArray::Write, py::arg("data"),
           "Uploads `data`, a C-contiguous buffer of size_bytes, into the array.")
      .def("map", &PyArray::Map,
           "Maps the device memory into this process, zero-copy (Array::Map): returns "
           "(device_pointer, size_bytes, device_index).")
      .def("dlpack", &PyArray::ToDLPack, py::arg("versioned"), py::arg("is_copy") = false,
           "A DLPack capsule of the mapped device memory (Array::Map), kDLCUDA, which keeps "
           "the array and its session alive until the consumer releases it.")
      .def("free", &PyArray::Free, "Frees the device memory now (Free).");
}

}  // namespace gpukit::python
