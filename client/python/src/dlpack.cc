#include "client/python/src/dlpack.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/python/src/gil.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

// Everything one export allocates, in one object: `managed` points into it (shape, strides)
// and at it (manager_ctx).
template <typename Managed>
struct ExportContext {
  Managed managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::shared_ptr<const void> owner;
};

// The deleter of an exported tensor. Consumers call it once, from any thread, with or without
// the GIL (the DLPack specification allows both). Dropping the owner may free the array and
// close its session in gpukitd, a round trip, so that happens without the GIL.
template <typename Managed>
void DeleteExport(Managed* self) {
  std::unique_ptr<ExportContext<Managed>> context(
      static_cast<ExportContext<Managed>*>(self->manager_ctx));
  WithoutGil([&] { context.reset(); });
}

// The destructor of an export's capsule: releases the tensor unless a consumer took it over
// (and renamed the capsule). Neither call below can set a Python error (the name was checked,
// and the deleter is DeleteExport), so an exception in flight is left as it is.
template <typename Managed, const char* kName>
void DestroyExportCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kName)) return;
  auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule, kName));
  if (managed->deleter != nullptr) managed->deleter(managed);
}

void FillTensor(const DLPackExport& spec, std::vector<int64_t>& shape,
                std::vector<int64_t>& strides, DLTensor& tensor) {
  shape = spec.shape;
  strides.assign(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  }
  tensor.data = reinterpret_cast<void*>(static_cast<uintptr_t>(spec.device_pointer));
  tensor.device = DLDevice{kDLCUDA, spec.device_index};
  tensor.ndim = static_cast<int32_t>(shape.size());
  tensor.dtype = ToDLDataType(spec.dtype);
  tensor.shape = shape.empty() ? nullptr : shape.data();
  tensor.strides = strides.empty() ? nullptr : strides.data();
  tensor.byte_offset = 0;
}

template <typename Managed, const char* kName>
py::object MakeCapsule(DLPackExport spec, uint64_t flags_if_versioned) {
  auto context = std::make_unique<ExportContext<Managed>>();
  FillTensor(spec, context->shape, context->strides, context->managed.dl_tensor);
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
    context->managed.version = DLPackVersion{kDLPackMajorVersion, kDLPackMinorVersion};
    context->managed.flags = flags_if_versioned;
  }
  context->managed.manager_ctx = context.get();
  context->managed.deleter = &DeleteExport<Managed>;
  context->owner = std::move(spec.owner);
  PyObject* capsule =
      PyCapsule_New(&context->managed, kName, &DestroyExportCapsule<Managed, kName>);
  // On failure `context` frees it all; on success it is the capsule's, then its consumer's.
  if (capsule == nullptr) throw py::error_already_set();
  context.release();
  return py::reinterpret_steal<py::object>(capsule);
}

// "the CPU", "CUDA device 1", "a ROCm device (DLPack device type 10)", for messages.
std::string DeviceText(const DLDevice& device) {
  switch (static_cast<int32_t>(device.device_type)) {
    case kDLCPU:
      return "the CPU";
    case kDLCUDA:
      return absl::StrCat("CUDA device ", device.device_id);
    case kDLCUDAHost:
      return "CUDA host (pinned) memory";
    case kDLCUDAManaged:
      return "CUDA managed memory";
    default:
      break;
  }
  const char* name = "device";
  switch (static_cast<int32_t>(device.device_type)) {
    case 4:
      name = "an OpenCL device";
      break;
    case 7:
      name = "a Vulkan device";
      break;
    case 8:
      name = "a Metal device";
      break;
    case 10:
      name = "a ROCm device";
      break;
    case 14:
      name = "a oneAPI device";
      break;
    default:
      name = "a device";
  }
  return absl::StrCat(name, " (DLPack device type ", static_cast<int32_t>(device.device_type), ")");
}

// The name of a DLPack element type, for messages: "float64", "int16", "complex64",
// "float32x4" (lanes), "code 9 (16 bits)".
std::string DataTypeName(DLDataType type) {
  std::string base;
  switch (type.code) {
    case kDLInt:
      base = absl::StrCat("int", int{type.bits});
      break;
    case kDLUInt:
      base = absl::StrCat("uint", int{type.bits});
      break;
    case kDLFloat:
      base = absl::StrCat("float", int{type.bits});
      break;
    case kDLBfloat:
      base = absl::StrCat("bfloat", int{type.bits});
      break;
    case kDLComplex:
      base = absl::StrCat("complex", int{type.bits});
      break;
    case kDLBool:
      base = absl::StrCat("bool (", int{type.bits}, " bits)");
      break;
    default:
      return absl::StrCat("type code ", int{type.code}, " (", int{type.bits}, " bits, ",
                          int{type.lanes}, " lanes)");
  }
  return type.lanes == 1 ? base : absl::StrCat(base, "x", int{type.lanes});
}

// The DLPack element types gpukit reads, and what they become. bool (8 bits) is read as uint8,
// as gk.array does with NumPy's bool: the bytes are the same.
struct ImportedType {
  uint8_t code;
  uint8_t bits;
  DType dtype;
};
constexpr ImportedType kImportedTypes[] = {
    {kDLFloat, 32, DType::kFloat32},   {kDLFloat, 16, DType::kFloat16},
    {kDLBfloat, 16, DType::kBFloat16}, {kDLInt, 32, DType::kInt32},
    {kDLInt, 64, DType::kInt64},       {kDLUInt, 8, DType::kUInt8},
    {kDLBool, 8, DType::kUInt8},
};

bool ToDType(DLDataType type, DType& dtype) {
  if (type.lanes != 1) return false;
  for (const ImportedType& known : kImportedTypes) {
    if (known.code == type.code && known.bits == type.bits) {
      dtype = known.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace

DLDataType ToDLDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return DLDataType{kDLFloat, 32, 1};
    case DType::kFloat16:
      return DLDataType{kDLFloat, 16, 1};
    case DType::kBFloat16:
      return DLDataType{kDLBfloat, 16, 1};
    case DType::kInt32:
      return DLDataType{kDLInt, 32, 1};
    case DType::kInt64:
      return DLDataType{kDLInt, 64, 1};
    case DType::kUInt8:
      return DLDataType{kDLUInt, 8, 1};
  }
  return DLDataType{kDLOpaqueHandle, 0, 0};  // unreachable: the switch names every DType
}

std::string FormatShape(const int64_t* values, int64_t count) {
  if (count == 1) return absl::StrCat("(", values[0], ",)");
  return absl::StrCat("(", absl::StrJoin(values, values + count, ", "), ")");
}

py::object MakeDLPackCapsule(DLPackExport spec) {
  if (spec.versioned) {
    const uint64_t flags = spec.is_copy ? kDLPackFlagIsCopied : 0;
    return MakeCapsule<DLManagedTensorVersioned, kDLPackVersionedCapsuleName>(std::move(spec),
                                                                              flags);
  }
  return MakeCapsule<DLManagedTensor, kDLPackCapsuleName>(std::move(spec), 0);
}

DLPackTensor DLPackTensor::Take(py::handle capsule) {
  PyObject* object = capsule.ptr();
  if (!PyCapsule_CheckExact(object)) {
    throw py::type_error(
        absl::StrCat("expected a DLPack capsule, got ",
                     py::str(capsule.get_type().attr("__name__")).cast<std::string>()));
  }
  const bool versioned = PyCapsule_IsValid(object, kDLPackVersionedCapsuleName) != 0;
  if (!versioned && PyCapsule_IsValid(object, kDLPackCapsuleName) == 0) {
    const char* name = PyCapsule_GetName(object);
    PyErr_Clear();  // a capsule may have no name
    const std::string shown = name == nullptr ? "no name" : absl::StrCat("name \"", name, "\"");
    if (PyCapsule_IsValid(object, kDLPackUsedCapsuleName) ||
        PyCapsule_IsValid(object, kDLPackUsedVersionedCapsuleName)) {
      throw py::value_error(absl::StrCat(
          "this DLPack capsule (", shown,
          ") was already consumed; a capsule can be imported once: ask the producer for a new "
          "one (x.__dlpack__())"));
    }
    throw py::type_error(absl::StrCat("expected a DLPack capsule (\"", kDLPackVersionedCapsuleName,
                                      "\" or \"", kDLPackCapsuleName, "\"), got a capsule with ",
                                      shown));
  }
  const char* name = versioned ? kDLPackVersionedCapsuleName : kDLPackCapsuleName;
  void* pointer = PyCapsule_GetPointer(object, name);
  if (pointer == nullptr) throw py::error_already_set();
  // The tensor is ours from the rename on: the producer's capsule destructor leaves it alone,
  // and `tensor` releases it on every path out of here that does not return it.
  if (PyCapsule_SetName(
          object, versioned ? kDLPackUsedVersionedCapsuleName : kDLPackUsedCapsuleName) != 0) {
    throw py::error_already_set();
  }
  DLPackTensor tensor = versioned
                            ? DLPackTensor(nullptr, static_cast<DLManagedTensorVersioned*>(pointer))
                            : DLPackTensor(static_cast<DLManagedTensor*>(pointer), nullptr);
  tensor.Check();
  return tensor;
}

DLPackTensor::DLPackTensor(DLPackTensor&& other) noexcept
    : legacy_(std::exchange(other.legacy_, nullptr)),
      versioned_(std::exchange(other.versioned_, nullptr)),
      shape_(std::move(other.shape_)),
      dtype_(other.dtype_),
      size_bytes_(other.size_bytes_) {}

void DLPackTensor::Release() {
  if (versioned_ != nullptr) {
    DLManagedTensorVersioned* managed = std::exchange(versioned_, nullptr);
    if (managed->deleter != nullptr) managed->deleter(managed);
  } else if (legacy_ != nullptr) {
    DLManagedTensor* managed = std::exchange(legacy_, nullptr);
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
}

bool DLPackTensor::on_host() const {
  const int32_t type = tensor().device.device_type;
  return type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged;
}

const void* DLPackTensor::data() const {
  if (size_bytes_ == 0) return nullptr;
  return static_cast<const char*>(tensor().data) + tensor().byte_offset;
}

bool DLPackTensor::read_only() const {
  return versioned_ != nullptr && (versioned_->flags & kDLPackFlagReadOnly) != 0;
}

std::string DLPackTensor::Describe() const {
  return absl::StrCat("a ", FormatShape(shape_.data(), static_cast<int64_t>(shape_.size())), " ",
                      DTypeName(dtype_), " tensor on ", DeviceText(tensor().device));
}

void DLPackTensor::Check() {
  if (versioned_ != nullptr && versioned_->version.major != kDLPackMajorVersion) {
    // Only version, manager_ctx and deleter may be read at another major version.
    throw py::buffer_error(absl::StrCat("the DLPack tensor has version ", versioned_->version.major,
                                        ".", versioned_->version.minor, "; gpukit reads DLPack ",
                                        kDLPackMajorVersion, ".x"));
  }
  const DLTensor& t = tensor();
  if (t.ndim < 0) throw py::value_error(absl::StrCat("DLPack tensor has ndim = ", t.ndim));
  if (t.ndim > 0 && t.shape == nullptr) {
    throw py::value_error(absl::StrCat("DLPack tensor of ndim ", t.ndim, " has no shape"));
  }
  const std::string shape_text = FormatShape(t.shape, t.ndim);
  if (!on_host() && t.device.device_type != kDLCUDA) {
    throw py::buffer_error(absl::StrCat("DLPack tensor of shape ", shape_text, " is on ",
                                        DeviceText(t.device),
                                        "; gpukit takes host memory (copied) and CUDA devices"));
  }
  if (!ToDType(t.dtype, dtype_)) {
    throw py::type_error(absl::StrCat(
        "DLPack tensor of element type ", DataTypeName(t.dtype),
        " cannot become a gpukit array; gpukit has float32, float16, bfloat16, int32, int64 and "
        "uint8 (bool is taken as uint8)",
        t.dtype.code == kDLFloat && t.dtype.bits == 64 && t.dtype.lanes == 1
            ? ": convert float64 to float32 first"
            : ""));
  }
  shape_.assign(t.shape, t.shape + t.ndim);
  int64_t elements = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (shape_[i] < 0) {
      throw py::value_error(
          absl::StrCat("DLPack tensor has shape ", shape_text, ": shape[", i, "] is negative"));
    }
    if (__builtin_mul_overflow(elements, shape_[i], &elements)) {
      throw py::value_error(absl::StrCat("DLPack tensor has shape ", shape_text,
                                         ", more elements than an int64 counts"));
    }
  }
  if (__builtin_mul_overflow(elements, DTypeSize(dtype_), &size_bytes_)) {
    throw py::value_error(absl::StrCat("DLPack tensor of shape ", shape_text, " is too large"));
  }
  // Null strides mean compact row-major. Otherwise every extent above 1 must have the stride
  // compact row-major order gives it (an extent of 0 or 1 takes any stride: no element is
  // reached through it). A tensor of no elements has no layout to check.
  if (t.strides != nullptr && elements > 0) {
    int64_t expected = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
      if (shape_[i] != 1 && t.strides[i] != expected) {
        std::vector<int64_t> compact(shape_.size(), 1);
        for (int32_t j = t.ndim - 1; j > 0; --j) compact[j - 1] = compact[j] * shape_[j];
        throw py::value_error(absl::StrCat(
            "DLPack tensor of shape ", shape_text, " has strides ", FormatShape(t.strides, t.ndim),
            " (in elements), which are not compact row-major ", FormatShape(compact.data(), t.ndim),
            "; gpukit arrays are C-contiguous: pass a contiguous copy (torch: x.contiguous(), "
            "NumPy: np.ascontiguousarray(x), CuPy: cupy.ascontiguousarray(x))"));
      }
      expected *= shape_[i];
    }
  }
  if (elements > 0 && t.data == nullptr) {
    throw py::value_error(
        absl::StrCat("DLPack tensor of shape ", shape_text, " has no data pointer"));
  }
}

}  // namespace gpukit::python
