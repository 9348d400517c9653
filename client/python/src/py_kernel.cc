#include "client/python/src/py_kernel.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/python/src/errors.h"
#include "client/python/src/gil.h"
#include "client/python/src/py_array.h"
#include "pybind11/stl.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

// A kernel launch argument whose C type the caller chose (gpukit/_kernel.py picks it).
struct PyKernelArgument {
  std::variant<std::shared_ptr<PyArray>, float, double, int32_t, int64_t, uint32_t, uint64_t> value;
};

template <typename T>
PyKernelArgument MakeArgument(T value) {
  return PyKernelArgument{value};
}

Dim3 ToDim3(const std::vector<uint32_t>& dims, const char* name) {
  if (dims.empty() || dims.size() > 3) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(name, " has ", dims.size(), " dimensions; give 1 to 3")));
  }
  Dim3 dim;
  dim.x = dims[0];
  if (dims.size() > 1) dim.y = dims[1];
  if (dims.size() > 2) dim.z = dims[2];
  return dim;
}

double LaunchKernel(const PyKernel& kernel, const std::string& entry,
                    const std::vector<uint32_t>& grid, const std::vector<uint32_t>& block,
                    uint32_t shared_memory_bytes, const std::vector<PyKernelArgument>& args) {
  const std::shared_ptr<Client>& client = kernel.client();
  std::vector<std::shared_ptr<Array>> arrays;  // alive until the call returns
  std::vector<KernelArgument> arguments;
  arrays.reserve(args.size());
  arguments.reserve(args.size());
  for (const PyKernelArgument& arg : args) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::shared_ptr<PyArray>>) {
            arrays.push_back(v->Live());
            arguments.emplace_back(*arrays.back());
          } else {
            arguments.emplace_back(v);
          }
        },
        arg.value);
  }
  const Dim3 grid_dim = ToDim3(grid, "grid");
  const Dim3 block_dim = ToDim3(block, "block");
  absl::StatusOr<absl::Duration> device_time;
  WithoutGil([&] {
    device_time = client->LaunchKernel(kernel.kernel(), entry, grid_dim, block_dim,
                                       shared_memory_bytes, arguments);
  });
  return absl::ToDoubleSeconds(ValueOrThrow(std::move(device_time)));
}

}  // namespace

PyKernel::~PyKernel() {
  WithoutGil([this] {
    if (!freed_) client_->FreeKernel(kernel_).IgnoreError();  // the session may be gone
    client_.reset();
  });
}

void PyKernel::Free() {
  if (freed_) return;
  freed_ = true;
  absl::Status status;
  WithoutGil([&] { status = client_->FreeKernel(kernel_); });
  ThrowIfError(status);
}

void RegisterKernel(py::module_& module) {
  py::class_<PyKernelArgument>(module, "KernelArgument",
                               "A kernel argument with its C type: an array's device pointer, "
                               "or a scalar passed by value.")
      .def_static("array", &MakeArgument<std::shared_ptr<PyArray>>, py::arg("array"))
      .def_static("f32", &MakeArgument<float>, py::arg("value"))
      .def_static("f64", &MakeArgument<double>, py::arg("value"))
      .def_static("i32", &MakeArgument<int32_t>, py::arg("value"))
      .def_static("i64", &MakeArgument<int64_t>, py::arg("value"))
      .def_static("u32", &MakeArgument<uint32_t>, py::arg("value"))
      .def_static("u64", &MakeArgument<uint64_t>, py::arg("value"));

  py::class_<PyKernel, std::shared_ptr<PyKernel>>(module, "Kernel",
                                                  "A compiled kernel (gpukit::Kernel).")
      .def_property_readonly("handle", [](const PyKernel& self) { return self.kernel().handle; })
      .def_property_readonly("entries", [](const PyKernel& self) { return self.kernel().entries; })
      .def_property_readonly("lowered_names",
                             [](const PyKernel& self) { return self.kernel().lowered_names; })
      .def_property_readonly("arch", [](const PyKernel& self) { return self.kernel().arch; })
      .def_property_readonly("origin", [](const PyKernel& self) { return self.kernel().origin; })
      .def_property_readonly("compile_ms",
                             [](const PyKernel& self) { return self.kernel().compile_ms; })
      .def_property_readonly("log", [](const PyKernel& self) { return self.kernel().log; })
      .def_property_readonly("freed", &PyKernel::freed)
      .def("launch", &LaunchKernel, py::arg("entry"), py::arg("grid"), py::arg("block"),
           py::arg("shared_memory_bytes"), py::arg("args"),
           "Launches an entry (LaunchKernel) and returns the device time in seconds.")
      .def("free", &PyKernel::Free, "Frees the kernel in the daemon (FreeKernel).");
}

}  // namespace gpukit::python
