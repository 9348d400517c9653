#include "client/python/src/py_client.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cpp/device_import.h"
#include "client/python/src/contiguous_buffer.h"
#include "client/python/src/dlpack.h"
#include "client/python/src/errors.h"
#include "client/python/src/gil.h"
#include "client/python/src/py_array.h"
#include "client/python/src/py_kernel.h"
#include "pybind11/stl.h"
#include "runtime/base/dtype.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

absl::Duration Seconds(double seconds) { return absl::Microseconds(seconds * 1e6); }

std::shared_ptr<PyClient> Connect(
    const std::string& address, const std::string& tenant, const std::string& partition,
    std::optional<int64_t> memory_request_bytes, std::optional<int64_t> memory_limit_bytes,
    std::optional<double> compute_request, std::optional<double> compute_limit, double lease_s,
    int priority, double queue_timeout_s, double call_timeout_s, double connect_timeout_s,
    const std::string& client_name, bool use_shared_memory, bool pipeline, const std::string& token,
    const std::string& tls_ca, const std::string& tls_cert, const std::string& tls_key,
    bool submit_socket) {
  ClientOptions options;
  options.address = address;
  options.tenant = tenant;
  options.token = token;  // "" reads $GPUKIT_TOKEN in Client::Connect
  options.tls_ca_file = tls_ca;
  options.tls_cert_file = tls_cert;
  options.tls_key_file = tls_key;
  options.partition = partition;
  options.resources.memory_request_bytes = memory_request_bytes;
  options.resources.memory_limit_bytes = memory_limit_bytes;
  options.resources.compute_request = compute_request;
  options.resources.compute_limit = compute_limit;
  options.lease = Seconds(lease_s);
  options.task.priority = priority;
  options.task.queue_timeout = Seconds(queue_timeout_s);
  options.call_timeout = Seconds(call_timeout_s);
  options.connect_timeout = Seconds(connect_timeout_s);
  options.client_name = client_name;
  options.use_shared_memory = use_shared_memory;
  options.pipeline = pipeline;
  options.use_submit_socket = submit_socket;
  absl::StatusOr<std::unique_ptr<Client>> client;
  WithoutGil([&] { client = Client::Connect(options); });
  return std::make_shared<PyClient>(std::shared_ptr<Client>(ValueOrThrow(std::move(client))));
}

Attr ToAttr(const std::string& name, py::handle value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<DType>(value)) return value.cast<DType>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    return value.cast<std::vector<int64_t>>();
  }
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat("attribute \"", name, "\" has Python type ",
                   py::str(value.get_type().attr("__name__")).cast<std::string>(),
                   "; give an int, float, bool, DType, str or a list of ints")));
}

// An op's input as the package's gpukit/_array.py hands it over: it checks every operand's
// type (the one place that does, with the op and the input's index in its TypeError), so an
// input is converted here by pybind11, without a check of its own. A bool is an int.
using PyOperand = std::variant<std::shared_ptr<PyArray>, int64_t, double>;

std::shared_ptr<PyArray> RunOp(const PyClient& self, const std::string& op,
                               const std::vector<PyOperand>& inputs, const py::dict& attrs) {
  const std::shared_ptr<Client>& client = self.client();
  std::vector<std::shared_ptr<Array>> arrays;  // alive until the call returns
  std::vector<Operand> operands;
  arrays.reserve(inputs.size());
  operands.reserve(inputs.size());
  for (const PyOperand& input : inputs) {
    if (const auto* array = std::get_if<std::shared_ptr<PyArray>>(&input)) {
      arrays.push_back((*array)->Live());
      operands.emplace_back(*arrays.back());
    } else if (const auto* integer = std::get_if<int64_t>(&input)) {
      operands.emplace_back(*integer);
    } else {
      operands.emplace_back(std::get<double>(input));
    }
  }
  Attrs op_attrs;
  for (const auto& [key, value] : attrs) {
    const std::string name = key.cast<std::string>();
    op_attrs.emplace_back(name, ToAttr(name, value));
  }
  absl::StatusOr<Array> out;
  WithoutGil([&] { out = client->RunOp(op, operands, op_attrs); });
  return std::make_shared<PyArray>(client, ValueOrThrow(std::move(out)));
}

// The zero-copy import of another library's CUDA memory: `tensor` is a checked kDLCUDA
// tensor, imported with Client::ImportDeviceMemory, and kept alive (unreleased) for as long
// as the array uses its memory: its destruction calls the producer's deleter.
std::shared_ptr<PyArray> ImportCudaTensor(const std::shared_ptr<Client>& client,
                                          DLPackTensor tensor) {
  if (tensor.device().device_type != kDLCUDA) {
    throw py::buffer_error(absl::StrCat("from_dlpack: ", tensor.Describe(),
                                        ": gpukitd imports CUDA device memory only; pass "
                                        "copy=True to copy it through host memory"));
  }
  if (tensor.read_only()) {
    throw py::buffer_error(absl::StrCat(
        "from_dlpack: ", tensor.Describe(),
        " is read-only, and a gpukit array may be written; pass copy=True for a copy"));
  }
  if (tensor.size_bytes() == 0) {  // no memory to share: an empty array is the same thing
    absl::StatusOr<Array> empty;
    WithoutGil([&] { empty = client->Empty(tensor.shape(), tensor.dtype()); });
    return std::make_shared<PyArray>(client, ValueOrThrow(std::move(empty)));
  }
  const uint64_t pointer = reinterpret_cast<uint64_t>(tensor.data());
  const int device = static_cast<int>(tensor.device().device_id);
  absl::StatusOr<Array> imported;
  WithoutGil([&] {
    // The capsule was asked for with stream 1: the producer's work is ordered before what
    // comes next on the legacy default stream, so once that is idle the memory is ready.
    absl::Status ready = internal::SynchronizeLegacyStream(device);
    if (ready.ok()) {
      imported = client->ImportDeviceMemory(pointer, tensor.shape(), tensor.dtype());
    } else {
      imported = ready;
    }
  });
  Array array = ValueOrThrow(std::move(imported));  // on error `tensor` is released here
  // The producer's tensor lives as long as the array: the last reference to it (the PyArray,
  // or a capsule exported from it) frees the array in gpukitd first, which unmaps the memory
  // there, and then hands the tensor back to its producer.
  auto owner = std::make_shared<DLPackTensor>(std::move(tensor));
  std::shared_ptr<Array> shared(new Array(std::move(array)), [owner](Array* done) mutable {
    delete done;
    if (!Py_IsInitialized()) {  // too late to call into the producer: leave the tensor be
      new std::shared_ptr<DLPackTensor>(std::move(owner));  // NOLINT: leaked on purpose
      return;
    }
    py::gil_scoped_acquire gil;
    owner.reset();
  });
  return std::make_shared<PyArray>(client, std::move(shared));
}

// The array of a DLPack capsule: a copy for host memory (gpukitd cannot read this process's
// memory in place), the producer's own memory for a CUDA tensor (ImportCudaTensor). `copy` is
// the array API's: None copies where needed, False refuses to, True insists.
std::shared_ptr<PyArray> FromDLPack(const PyClient& self, py::handle capsule,
                                    std::optional<bool> copy) {
  DLPackTensor tensor = DLPackTensor::Take(capsule);
  if (!tensor.on_host()) {
    if (copy == true) {
      throw py::buffer_error(
          absl::StrCat("from_dlpack(copy=True) got ", tensor.Describe(),
                       " from its producer; a copy needs host memory (dl_device=(1, 0))"));
    }
    return ImportCudaTensor(self.client(), std::move(tensor));
  }
  if (copy == false) {
    throw py::buffer_error(absl::StrCat(
        "from_dlpack(copy=False): ", tensor.Describe(),
        " can only be copied into gpukitd (it cannot use this process's memory in place); "
        "pass copy=None or True"));
  }
  absl::StatusOr<Array> array;
  WithoutGil([&] {
    array = self.client()->FromBytes(tensor.data(), tensor.size_bytes(), tensor.shape(),
                                     tensor.dtype());
  });
  tensor.Release();  // copied: the producer may let go of it now
  return std::make_shared<PyArray>(self.client(), ValueOrThrow(std::move(array)));
}

}  // namespace

PyClient::~PyClient() {
  WithoutGil([this] { client_.reset(); });  // the last reference closes the session
}

void PyClient::Sync() const {
  absl::Status status;
  WithoutGil([&] { status = client_->Sync(); });
  ThrowIfError(status);
}

void RegisterClient(py::module_& module) {
  py::class_<PyClient, std::shared_ptr<PyClient>>(module, "Client",
                                                  "One session with gpukitd (gpukit::Client).")
      .def_static("connect", &Connect, py::arg("address") = "", py::arg("tenant") = "",
                  py::arg("partition") = "", py::arg("memory_request_bytes") = py::none(),
                  py::arg("memory_limit_bytes") = py::none(),
                  py::arg("compute_request") = py::none(), py::arg("compute_limit") = py::none(),
                  py::arg("lease_s") = 0.0, py::arg("priority") = 0,
                  py::arg("queue_timeout_s") = 0.0, py::arg("call_timeout_s") = 60.0,
                  py::arg("connect_timeout_s") = 5.0, py::arg("client_name") = "",
                  py::arg("use_shared_memory") = true, py::arg("pipeline") = false,
                  py::arg("token") = "", py::arg("tls_ca") = "", py::arg("tls_cert") = "",
                  py::arg("tls_key") = "", py::arg("submit_socket") = true,
                  "Connects and opens a session (gpukit::Client::Connect); with `pipeline`, "
                  "ops go through the session's Submit stream and return at once.")
      .def_property_readonly("session_id",
                             [](const PyClient& self) { return self.client()->session_id(); })
      .def_property_readonly("address",
                             [](const PyClient& self) { return self.client()->address(); })
      .def_property_readonly("partition",
                             [](const PyClient& self) { return self.client()->partition(); })
      .def_property_readonly("qos_class",
                             [](const PyClient& self) { return self.client()->qos_class(); })
      .def_property_readonly("device_index",
                             [](const PyClient& self) { return self.client()->device_index(); })
      .def_property_readonly(
          "lease_s",
          [](const PyClient& self) { return absl::ToDoubleSeconds(self.client()->lease()); })
      .def(
          "empty",
          [](const PyClient& self, std::vector<int64_t> shape, DType dtype) {
            absl::StatusOr<Array> array;
            WithoutGil([&] { array = self.client()->Empty(std::move(shape), dtype); });
            return std::make_shared<PyArray>(self.client(), ValueOrThrow(std::move(array)));
          },
          py::arg("shape"), py::arg("dtype"), "Array that reads as zeros (Create).")
      .def(
          "from_buffer",
          [](const PyClient& self, py::handle data, std::vector<int64_t> shape, DType dtype) {
            ContiguousBuffer buffer(data, /*writable=*/false);
            absl::StatusOr<Array> array;
            WithoutGil([&] {
              array =
                  self.client()->FromBytes(buffer.data(), buffer.bytes(), std::move(shape), dtype);
            });
            return std::make_shared<PyArray>(self.client(), ValueOrThrow(std::move(array)));
          },
          py::arg("data"), py::arg("shape"), py::arg("dtype"),
          "Array holding the bytes of `data`, any C-contiguous buffer (Create + Upload).")
      .def("run_op", &RunOp, py::arg("op"), py::arg("inputs"), py::arg("attrs") = py::dict(),
           "Runs a built-in op (RunOp); inputs are Arrays, ints or floats (gpukit._array checks "
           "them: no second check here).")
      .def("from_dlpack", &FromDLPack, py::arg("capsule"), py::arg("copy") = py::none(),
           "Array of a DLPack capsule (\"dltensor_versioned\" or \"dltensor\"), which it "
           "consumes: host memory is copied (Create + Upload) and released right after; CUDA "
           "memory is imported without a copy (Import) and released once the array is freed.")
      .def(
          "compile_kernel",
          [](const PyClient& self, const std::string& source, std::vector<std::string> entries,
             std::vector<std::string> options,
             std::vector<std::pair<std::string, std::string>> headers) {
            absl::StatusOr<Kernel> kernel;
            WithoutGil([&] {
              kernel = self.client()->CompileKernel(source, std::move(entries), std::move(options),
                                                    headers);
            });
            return std::make_shared<PyKernel>(self.client(), ValueOrThrow(std::move(kernel)));
          },
          py::arg("source"), py::arg("entries"), py::arg("options") = std::vector<std::string>(),
          py::arg("headers") = std::vector<std::pair<std::string, std::string>>(),
          "Compiles CUDA C++ with NVRTC in the daemon (CompileKernel).")
      .def(
          "last_compile_log",
          [](const PyClient& self) {
            absl::StatusOr<std::string> log;
            WithoutGil([&] { log = self.client()->LastCompileLog(); });
            return ValueOrThrow(std::move(log));
          },
          "NVRTC's whole log of the session's last compile (GetCompileLog).")
      .def("sync", &PyClient::Sync,
           "Waits until every op written so far has run (Client::Sync); raises the first op "
           "that failed since the previous sync point, naming it.")
      .def(
          "keep_alive",
          [](const PyClient& self) {
            absl::Status status;
            WithoutGil([&] { status = self.client()->KeepAlive(); });
            ThrowIfError(status);
          },
          "Renews the lease now (a background thread does this by itself).")
      .def(
          "close",
          [](const PyClient& self) {
            absl::Status status;
            WithoutGil([&] { status = self.client()->Close(); });
            ThrowIfError(status);
          },
          "Closes the session; its arrays and kernels become invalid. A second close does "
          "nothing.");
}

}  // namespace gpukit::python
