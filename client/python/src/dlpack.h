// DLPack for the Python module: capsules that export an array's mapped device memory, and
// the validated reading of capsules other libraries export (the ABI is dlpack_abi.h; the
// Python protocol, __dlpack__ and from_dlpack's calls to producers, is gpukit/_dlpack.py).
//
// Export: a capsule whose tensor points at an array's mapping (Array::Map) and keeps what
// the caller gives as `owner` (the array and its session) alive until the consumer calls
// the tensor's deleter:
//
//   DLPackExport spec{mapping.device_pointer, mapping.device_index, shape, dtype,
//                     /*versioned=*/true, /*is_copy=*/false, owner};
//   py::object capsule = MakeDLPackCapsule(std::move(spec));  // "dltensor_versioned"
//
// Import: DLPackTensor takes the tensor of a producer's capsule over (renaming the capsule
// "used_..."), checks it is something gpukit can hold (a compact row-major tensor of a gpukit
// dtype, on host memory or a CUDA device), and calls the producer's deleter exactly once:
// when released or destroyed, also when a check fails.
//
//   DLPackTensor tensor = DLPackTensor::Take(capsule);  // ValueError, TypeError, BufferError
//   if (tensor.on_host()) upload(tensor.data(), tensor.size_bytes(), tensor.shape(), ...);
//   tensor.Release();                                    // the producer may free it now
//
// Errors are Python exceptions (this is the module's boundary): ValueError for a layout
// gpukit cannot take (strides that are not compact row-major, negative extents), TypeError
// for an element type gpukit does not have, BufferError for a device it cannot read or a
// DLPack major version it does not know.
//
// Thread safety: MakeDLPackCapsule and DLPackTensor's members run with the GIL held. The
// deleter of an exported tensor may be called from any thread, with or without the GIL: it
// touches no Python object and drops `owner` with the GIL released.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_DLPACK_H_
#define GPUKIT_CLIENT_PYTHON_SRC_DLPACK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/python/src/dlpack_abi.h"
#include "pybind11/pybind11.h"
#include "runtime/base/dtype.h"

namespace gpukit::python {

// What an export describes, and what keeps its memory valid.
struct DLPackExport {
  uint64_t device_pointer = 0;  // a CUDA device pointer of this process
  int device_index = 0;         // its CUDA ordinal in this process
  std::vector<int64_t> shape;   // compact row-major; strides are written out explicitly
  DType dtype = DType::kFloat32;
  bool versioned = true;  // DLManagedTensorVersioned ("dltensor_versioned"), else legacy
  bool is_copy = false;   // sets kDLPackFlagIsCopied (versioned only)
  // Destroyed, without the GIL, when the consumer calls the deleter (or when the capsule is
  // collected unconsumed).
  std::shared_ptr<const void> owner;
};

// A new capsule holding a managed tensor of `spec`: kDLCUDA on spec.device_index, writable,
// byte_offset 0, explicit strides. The tensor's deleter frees what this allocated and drops
// spec.owner; the capsule's destructor calls it only if no consumer took the tensor.
pybind11::object MakeDLPackCapsule(DLPackExport spec);

// The DLPack element type of a gpukit dtype (bfloat16 is kDLBfloat, 16 bits).
DLDataType ToDLDataType(DType dtype);

// "(3, 2)", as Python prints a tuple of ints.
std::string FormatShape(const int64_t* values, int64_t count);

// A producer's tensor taken over from its capsule. Move-only; releases the tensor (calls the
// producer's deleter) when destroyed, with the GIL held.
class DLPackTensor {
 public:
  // Takes over the tensor of `capsule`, a "dltensor_versioned" or "dltensor" capsule that no
  // consumer took yet, and checks it. Raises TypeError for anything else (ValueError for a
  // capsule already used), and the errors above; the producer's deleter has been called
  // whenever this raises after taking the tensor over.
  static DLPackTensor Take(pybind11::handle capsule);

  DLPackTensor(DLPackTensor&& other) noexcept;
  DLPackTensor& operator=(DLPackTensor&& other) = delete;
  DLPackTensor(const DLPackTensor&) = delete;
  DLPackTensor& operator=(const DLPackTensor&) = delete;
  ~DLPackTensor() { Release(); }

  // Calls the producer's deleter now; data() is invalid from then on. A second call does
  // nothing. Call it with the GIL held (producers' deleters may need it).
  void Release();

  const DLDevice& device() const { return tensor().device; }
  // Memory this process can read directly: kDLCPU, kDLCUDAHost or kDLCUDAManaged.
  bool on_host() const;
  // The first element (the tensor's data plus its byte_offset); null for no elements.
  const void* data() const;
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t size_bytes() const { return size_bytes_; }
  // The producer marked the memory read-only (versioned tensors only).
  bool read_only() const;
  // "a (3, 2) float32 tensor on CUDA device 0", for messages.
  std::string Describe() const;

 private:
  DLPackTensor(DLManagedTensor* legacy, DLManagedTensorVersioned* versioned)
      : legacy_(legacy), versioned_(versioned) {}
  const DLTensor& tensor() const {
    return versioned_ != nullptr ? versioned_->dl_tensor : legacy_->dl_tensor;
  }
  // Checks the tensor and fills shape_, dtype_ and size_bytes_; raises as Take says.
  void Check();

  // Exactly one is set until Release().
  DLManagedTensor* legacy_ = nullptr;
  DLManagedTensorVersioned* versioned_ = nullptr;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kFloat32;
  int64_t size_bytes_ = 0;
};

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_DLPACK_H_
