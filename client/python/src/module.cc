// gpukit._gpukit: thin pybind11 bindings of libgpukit (client/cpp/include/gpukit/client.h)
// for the pure-Python package gpukit (client/python/gpukit), which gives them their NumPy-like
// shape. Every call that talks to the daemon runs with the GIL released; Python objects are
// only touched while it is held.
//
// Lifetimes: an Array and a Kernel hold a reference to their Client, so the session stays
// open while any of them lives (or until Client.close()). An Array frees its device memory
// (a free queued on the session's Submit stream, which does not wait for the daemon) and a
// Kernel its compiled module when they are garbage collected or freed.
//
// Pipelined sessions (connect(pipeline=True)): run_op returns an Array at once; its shape,
// dtype and size_bytes wait for the daemon's answer the first time they are read (with the
// GIL released) and raise the op's refusal, naming the op.
//
// Thread safety: every class may be used from several Python threads at once (libgpukit is
// thread-safe); free() while another thread uses the same Array lets that call finish first.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cpp/device_import.h"
#include "client/python/src/daemon_probe.h"
#include "client/python/src/dlpack.h"
#include "client/python/src/errors.h"
#include "client/python/src/gil.h"
#include "gpukit/client.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "runtime/base/dtype.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

absl::Duration Seconds(double seconds) { return absl::Microseconds(seconds * 1e6); }

// A Python buffer (bytes, bytearray, numpy array, memoryview) held as one C-contiguous block
// while a call reads or writes it. Constructed and destroyed with the GIL held.
class ContiguousBuffer {
 public:
  ContiguousBuffer(py::handle object, bool writable) {
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw py::error_already_set();
  }
  ~ContiguousBuffer() { PyBuffer_Release(&view_); }
  ContiguousBuffer(const ContiguousBuffer&) = delete;
  ContiguousBuffer& operator=(const ContiguousBuffer&) = delete;

  void* data() const { return view_.buf; }
  int64_t bytes() const { return static_cast<int64_t>(view_.len); }

 private:
  Py_buffer view_{};
};

class PyArray;

// A session: gpukit::Client, shared with the Arrays and Kernels it made.
class PyClient {
 public:
  explicit PyClient(std::shared_ptr<Client> client) : client_(std::move(client)) {}
  ~PyClient() {
    WithoutGil([this] { client_.reset(); });  // the last reference closes the session
  }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }

  // Client::Sync: raises the first op that failed since the previous sync point.
  void Sync() const {
    absl::Status status;
    WithoutGil([&] { status = client_->Sync(); });
    ThrowIfError(status);
  }

 private:
  std::shared_ptr<Client> client_;
};

// A device array of a session. `array_` is null once freed; calls that need it take a copy
// of the pointer with the GIL held, so a concurrent free() cannot pull it from under them.
// The layout (shape, dtype, bytes) of a pipelined op's result is known once the daemon
// answered the op: it is fetched on first use and kept, so it outlives free().
class PyArray {
 public:
  PyArray(std::shared_ptr<Client> client, Array array)
      : PyArray(std::move(client), std::make_shared<Array>(std::move(array))) {}
  // An array whose shared_ptr does more when the last reference goes (ImportCudaTensor's).
  PyArray(std::shared_ptr<Client> client, std::shared_ptr<Array> array)
      : client_(std::move(client)), handle_(array->handle()), array_(std::move(array)) {}
  ~PyArray() {
    WithoutGil([this] {
      array_.reset();
      client_.reset();
    });
  }
  PyArray(const PyArray&) = delete;
  PyArray& operator=(const PyArray&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }
  const std::string& handle() const { return handle_; }
  const std::vector<int64_t>& shape() const { return Layout().shape; }
  DType dtype() const { return Layout().dtype; }
  int64_t size_bytes() const { return Layout().size_bytes; }
  bool freed() const { return array_ == nullptr; }

  // Waits for the array's op to be answered (GIL released); raises its refusal. The error
  // raised is the session's first failure since its last sync point when there is one (the
  // root cause; the stream then takes ops again), else this op's own.
  void Check() const { Layout(); }

  // The live array, or NOT_FOUND as the daemon answers for a freed handle.
  std::shared_ptr<Array> Live() const {
    if (array_ == nullptr) {
      throw StatusError(absl::NotFoundError(
          absl::StrCat("array handle \"", handle_, "\" was freed in this session")));
    }
    return array_;
  }

  void Read(py::handle out) const {
    Check();
    std::shared_ptr<Array> array = Live();
    ContiguousBuffer buffer(out, /*writable=*/true);
    absl::Status status;
    WithoutGil([&] { status = array->Read(buffer.data(), buffer.bytes()); });
    ThrowIfError(status);
  }

  void Write(py::handle data) const {
    std::shared_ptr<Array> array = Live();
    ContiguousBuffer buffer(data, /*writable=*/false);
    absl::Status status;
    WithoutGil([&] { status = array->Write(buffer.data(), buffer.bytes()); });
    ThrowIfError(status);
  }

  // Maps the array's device memory into this process (Array::Map): (device pointer, bytes,
  // CUDA device ordinal).
  py::tuple Map() const {
    std::shared_ptr<Array> array = Live();
    absl::StatusOr<DeviceMapping> mapping = absl::InternalError("not mapped");
    WithoutGil([&] { mapping = array->Map(); });
    ThrowIfError(mapping.status());
    return py::make_tuple(mapping->device_pointer, mapping->size_bytes, mapping->device_index);
  }

  // A DLPack capsule ("dltensor_versioned", or the legacy "dltensor") over the array's mapping
  // (Map). The capsule's tensor holds the array and its client until the consumer releases
  // it, so the memory outlives this object, and a free() meanwhile takes effect only then.
  py::object ToDLPack(bool versioned, bool is_copy) const {
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

  // Frees the device memory now, unless a call on another thread still uses the array: then
  // when that call ends. A second free() does nothing.
  void Free() {
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

 private:
  // What an exported tensor keeps alive; the array goes first, then (if it was the last
  // reference) the session.
  struct ExportOwner {
    std::shared_ptr<Client> client;
    std::shared_ptr<Array> array;
  };

  struct ArrayLayout {
    std::vector<int64_t> shape;
    DType dtype = DType::kFloat32;
    int64_t size_bytes = 0;
  };

  // The layout, fetched once (with the GIL released, as it may wait for the daemon's answer
  // to a pipelined op) and kept; raises the op's refusal.
  const ArrayLayout& Layout() const {
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

  // Waits for the op's answer (GIL released) and keeps the layout, or the refusal in error_
  // (returned). Raises nothing; no sync point.
  absl::Status Resolve() const {
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

  std::shared_ptr<Client> client_;
  std::string handle_;
  std::shared_ptr<Array> array_;
  // Set with the GIL held.
  mutable std::optional<ArrayLayout> layout_;
  mutable std::optional<absl::Status> error_;
};

// A compiled kernel of a session; freed in the daemon when collected or freed.
class PyKernel {
 public:
  PyKernel(std::shared_ptr<Client> client, Kernel kernel)
      : client_(std::move(client)), kernel_(std::move(kernel)) {}
  ~PyKernel() {
    WithoutGil([this] {
      if (!freed_) client_->FreeKernel(kernel_).IgnoreError();  // the session may be gone
      client_.reset();
    });
  }
  PyKernel(const PyKernel&) = delete;
  PyKernel& operator=(const PyKernel&) = delete;

  const std::shared_ptr<Client>& client() const { return client_; }
  const Kernel& kernel() const { return kernel_; }
  bool freed() const { return freed_; }

  void Free() {
    if (freed_) return;
    freed_ = true;
    absl::Status status;
    WithoutGil([&] { status = client_->FreeKernel(kernel_); });
    ThrowIfError(status);
  }

 private:
  std::shared_ptr<Client> client_;
  Kernel kernel_;
  bool freed_ = false;
};

// A kernel launch argument whose C type the caller chose (gpukit/_kernel.py picks it).
struct PyKernelArgument {
  std::variant<std::shared_ptr<PyArray>, float, double, int32_t, int64_t, uint32_t, uint64_t> value;
};

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

std::shared_ptr<PyClient> Connect(
    const std::string& address, const std::string& tenant, const std::string& partition,
    std::optional<int64_t> memory_request_bytes, std::optional<int64_t> memory_limit_bytes,
    std::optional<double> compute_request, std::optional<double> compute_limit, double lease_s,
    int priority, double queue_timeout_s, double call_timeout_s, double connect_timeout_s,
    const std::string& client_name, bool use_shared_memory, bool pipeline, const std::string& token,
    const std::string& tls_ca, const std::string& tls_cert, const std::string& tls_key) {
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

std::shared_ptr<PyArray> RunOp(const PyClient& self, const std::string& op, py::list inputs,
                               py::dict attrs) {
  const std::shared_ptr<Client>& client = self.client();
  std::vector<std::shared_ptr<Array>> arrays;  // alive until the call returns
  std::vector<Operand> operands;
  arrays.reserve(inputs.size());
  operands.reserve(inputs.size());
  for (py::handle input : inputs) {
    // One class lookup per Array (the caster's load) instead of two (isinstance, then cast):
    // pybind11 finds a class by hashing its mangled name, on every op's every input.
    py::detail::make_caster<PyArray> array;
    if (array.load(input, /*convert=*/false)) {
      arrays.push_back(py::detail::cast_op<const PyArray&>(array).Live());
      operands.emplace_back(*arrays.back());
    } else if (py::isinstance<py::bool_>(input) || py::isinstance<py::int_>(input)) {
      operands.emplace_back(input.cast<int64_t>());
    } else if (py::isinstance<py::float_>(input)) {
      operands.emplace_back(input.cast<double>());
    } else {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("inputs[", operands.size(), "] of \"", op, "\" is a ",
                       py::str(input.get_type().attr("__name__")).cast<std::string>(),
                       "; give an Array, int or float")));
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

template <typename T>
PyKernelArgument MakeArgument(T value) {
  return PyKernelArgument{value};
}

}  // namespace

PYBIND11_MODULE(_gpukit, m) {
  m.doc() =
      "Thin bindings of libgpukit, the C++ client of gpukitd. Use the `gpukit` package; this "
      "module is its implementation.";
  m.attr("__version__") = GPUKIT_VERSION_STRING;
  RegisterErrors(m);
  RegisterDaemonProbe(m);  // gpukit-bench's raw ping

  py::enum_<DType>(m, "DType", "Element type of a gpukit array.")
      .value("float32", DType::kFloat32)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16)
      .value("int32", DType::kInt32)
      .value("int64", DType::kInt64)
      .value("uint8", DType::kUInt8)
      .def_property_readonly(
          "itemsize", [](DType dtype) { return DTypeSize(dtype); }, "Bytes per element.");

  py::class_<PyClient, std::shared_ptr<PyClient>>(m, "Client",
                                                  "One session with gpukitd (gpukit::Client).")
      .def_static(
          "connect", &Connect, py::arg("address") = "", py::arg("tenant") = "",
          py::arg("partition") = "", py::arg("memory_request_bytes") = py::none(),
          py::arg("memory_limit_bytes") = py::none(), py::arg("compute_request") = py::none(),
          py::arg("compute_limit") = py::none(), py::arg("lease_s") = 0.0, py::arg("priority") = 0,
          py::arg("queue_timeout_s") = 0.0, py::arg("call_timeout_s") = 60.0,
          py::arg("connect_timeout_s") = 5.0, py::arg("client_name") = "",
          py::arg("use_shared_memory") = true, py::arg("pipeline") = false, py::arg("token") = "",
          py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
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
           "Runs a built-in op (RunOp); inputs are Arrays, ints or floats.")
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

  py::class_<PyArray, std::shared_ptr<PyArray>>(m, "Array", "A device array (gpukit::Array).")
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

  py::class_<PyKernel, std::shared_ptr<PyKernel>>(m, "Kernel",
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

  py::class_<PyKernelArgument>(m, "KernelArgument",
                               "A kernel argument with its C type: an array's device pointer, "
                               "or a scalar passed by value.")
      .def_static("array", &MakeArgument<std::shared_ptr<PyArray>>, py::arg("array"))
      .def_static("f32", &MakeArgument<float>, py::arg("value"))
      .def_static("f64", &MakeArgument<double>, py::arg("value"))
      .def_static("i32", &MakeArgument<int32_t>, py::arg("value"))
      .def_static("i64", &MakeArgument<int64_t>, py::arg("value"))
      .def_static("u32", &MakeArgument<uint32_t>, py::arg("value"))
      .def_static("u64", &MakeArgument<uint64_t>, py::arg("value"));
}

}  // namespace gpukit::python
