// The DLPack ABI (DLPack 1.x, https://dmlc.github.io/dlpack/latest/): the C structs, enum
// values and capsule names through which Python array libraries hand each other tensors
// without copies. Declared here from the specification, so the module needs no dlpack.h; only
// the parts gpukit uses are named. The layouts must match the specification exactly: they are
// read and written by other libraries (PyTorch, CuPy, NumPy, JAX).
//
// A producer (`__dlpack__`) returns a PyCapsule named kDLPackVersionedCapsuleName holding a
// DLManagedTensorVersioned (or, for consumers that asked for no version, kDLPackCapsuleName
// holding a legacy DLManagedTensor). The consumer renames the capsule to the "used_" name
// when it takes the tensor over, and calls `deleter` once when it no longer needs the memory;
// the capsule's destructor calls `deleter` only while the capsule still has its unused name.
//
//   const auto* managed = static_cast<DLManagedTensorVersioned*>(
//       PyCapsule_GetPointer(capsule, kDLPackVersionedCapsuleName));
//   if (managed->version.major != kDLPackMajorVersion) { /* call deleter, refuse */ }
//
// Thread safety: plain data; see dlpack.h for who may call a deleter from where.
#ifndef GPUKIT_CLIENT_PYTHON_SRC_DLPACK_ABI_H_
#define GPUKIT_CLIENT_PYTHON_SRC_DLPACK_ABI_H_

#include <cstddef>
#include <cstdint>

extern "C" {

// The ABI version a DLManagedTensorVersioned carries. A consumer must refuse (and call the
// deleter of) a tensor whose major version differs from its own; a newer minor version only
// adds enum values.
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

// DLDevice::device_type. Only the types gpukit produces or consumes are named; the others
// (OpenCL 4, Vulkan 7, Metal 8, ROCm 10, ...) are refused by number.
enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,      // page-locked host memory (cudaMallocHost): host-readable
  kDLCUDAManaged = 13,  // managed memory (cudaMallocManaged): host-readable
};

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;  // the CUDA ordinal in the producer's process; 0 for host memory
};

// DLDataType::code.
enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,  // stored as 8 bits
};

// An element type: `code` (a DLDataTypeCode), `bits` per lane and `lanes` per element (1 for
// scalars; more for vector types, which gpukit does not have).
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

// A strided tensor; owns nothing.
struct DLTensor {
  // Start of the allocation; the elements begin `byte_offset` bytes after it. May be null
  // for a tensor of no elements.
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  // `ndim` extents.
  int64_t* shape;
  // `ndim` strides in elements (not bytes). Null means compact row-major; DLPack 1.x asks
  // producers to set it whenever ndim > 0, and consumers still accept null.
  int64_t* strides;
  uint64_t byte_offset;
};

// The legacy (unversioned) managed tensor: a DLTensor and how to release it. Capsule names
// kDLPackCapsuleName / kDLPackUsedCapsuleName.
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  // Releases the tensor, `self` included. May be null (nothing to release).
  void (*deleter)(DLManagedTensor* self);
};

// DLManagedTensorVersioned::flags.
inline constexpr uint64_t kDLPackFlagReadOnly = uint64_t{1} << 0;
// The producer made a copy for this export, which the consumer owns alone.
inline constexpr uint64_t kDLPackFlagIsCopied = uint64_t{1} << 1;

// The managed tensor of DLPack 1.x. Capsule names kDLPackVersionedCapsuleName /
// kDLPackUsedVersionedCapsuleName. `version`, `manager_ctx` and `deleter` keep their places in
// every future major version, so a consumer can always release a tensor it refuses.
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  // Releases the tensor, `self` included. May be null (nothing to release).
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;  // kDLPackFlag* bits
  DLTensor dl_tensor;
};

}  // extern "C"

// The layouts other libraries read (LP64: 64-bit pointers).
static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4);
static_assert(offsetof(DLTensor, device) == 8 && offsetof(DLTensor, ndim) == 16 &&
              offsetof(DLTensor, dtype) == 20 && offsetof(DLTensor, shape) == 24 &&
              offsetof(DLTensor, strides) == 32 && offsetof(DLTensor, byte_offset) == 40 &&
              sizeof(DLTensor) == 48);
static_assert(offsetof(DLManagedTensor, manager_ctx) == 48 &&
              offsetof(DLManagedTensor, deleter) == 56 && sizeof(DLManagedTensor) == 64);
static_assert(offsetof(DLManagedTensorVersioned, manager_ctx) == 8 &&
              offsetof(DLManagedTensorVersioned, deleter) == 16 &&
              offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32 &&
              sizeof(DLManagedTensorVersioned) == 80);

namespace gpukit::python {

// The version gpukit reads and writes. Exports say 1.0: they use nothing a later minor
// version added.
inline constexpr uint32_t kDLPackMajorVersion = 1;
inline constexpr uint32_t kDLPackMinorVersion = 0;

// Capsule names. They must be these exact statically allocated strings (consumers compare
// the names, and CPython keeps the pointer).
inline constexpr char kDLPackCapsuleName[] = "dltensor";
inline constexpr char kDLPackUsedCapsuleName[] = "used_dltensor";
inline constexpr char kDLPackVersionedCapsuleName[] = "dltensor_versioned";
inline constexpr char kDLPackUsedVersionedCapsuleName[] = "used_dltensor_versioned";

}  // namespace gpukit::python

#endif  // GPUKIT_CLIENT_PYTHON_SRC_DLPACK_ABI_H_
