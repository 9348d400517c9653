#include "client/python/src/daemon_probe.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cpp/channel.h"
#include "client/python/src/errors.h"
#include "client/python/src/gil.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "pybind11/stl.h"

namespace gpukit::python {
namespace py = pybind11;
namespace {

class DaemonProbe {
 public:
  // A connected channel to `address` ("" for $GPUKIT_ADDR or the default socket), or
  // UNAVAILABLE when nothing accepts within `timeout_s`.
  static std::shared_ptr<DaemonProbe> Connect(const std::string& address, double timeout_s) {
    const std::string target = address.empty() ? DefaultClientTarget() : address;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel;
    WithoutGil([&] { channel = ConnectChannel(target, absl::Microseconds(timeout_s * 1e6)); });
    return std::make_shared<DaemonProbe>(target, ValueOrThrow(std::move(channel)));
  }

  DaemonProbe(std::string address, std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)), channel_(std::move(channel)) {}

  const std::string& address() const { return address_; }

  // grpc.health.v1.Health/Check with an empty request, through the generic call path, so
  // that the ping costs what any gRPC server costs and no generated health stub is needed.
  // Raises the call's error, or Unavailable when the answer is not SERVING.
  void Ping(double timeout_s) const {
    static const grpc::internal::RpcMethod kCheck("/grpc.health.v1.Health/Check",
                                                  grpc::internal::RpcMethod::NORMAL_RPC);
    absl::Status status;
    WithoutGil([&] {
      grpc::Slice empty;
      grpc::ByteBuffer request(&empty, 1);
      grpc::ByteBuffer response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           absl::ToChronoMicroseconds(absl::Microseconds(timeout_s * 1e6)));
      status = FromGrpc(
          grpc::internal::BlockingUnaryCall(channel_.get(), kCheck, &context, request, &response),
          context);
      if (!status.ok()) return;
      std::vector<grpc::Slice> slices;
      if (!response.Dump(&slices).ok()) {
        status = absl::InternalError("unreadable health check response");
        return;
      }
      std::string bytes;
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      if (bytes != std::string("\x08\x01", 2)) {  // HealthCheckResponse{status: SERVING}
        status = absl::UnavailableError(absl::StrCat("gpukitd at ", address_, " is not SERVING"));
      }
    });
    ThrowIfError(status);
  }

  // AdminService Status and ListDevices, as a dict: version, backend, device_count and
  // devices (a list of {index, name, backend, memory_total_bytes}).
  py::dict Info() const {
    v1::StatusResponse status_response;
    v1::ListDevicesResponse devices_response;
    absl::Status status;
    WithoutGil([&] {
      auto admin = v1::AdminService::NewStub(channel_);
      grpc::ClientContext status_context;
      status = FromGrpc(admin->Status(&status_context, v1::StatusRequest(), &status_response),
                        status_context);
      if (!status.ok()) return;
      grpc::ClientContext devices_context;
      status = FromGrpc(
          admin->ListDevices(&devices_context, v1::ListDevicesRequest(), &devices_response),
          devices_context);
    });
    ThrowIfError(status);
    py::list devices;
    for (const v1::DeviceInfo& device : devices_response.devices()) {
      py::dict entry;
      entry["index"] = device.index();
      entry["name"] = device.name();
      entry["backend"] = device.backend();
      entry["memory_total_bytes"] = device.memory_total_bytes();
      devices.append(entry);
    }
    py::dict info;
    info["version"] = status_response.version();
    info["backend"] = status_response.backend();
    info["device_count"] = status_response.device_count();
    info["devices"] = devices;
    return info;
  }

  // ComputeService ListOps, as a list of dicts, one per built-in op in the daemon's order:
  // name, summary, min_inputs, max_inputs, attrs (names), backends, attr_info (dicts: name,
  // type as its enum name "ATTR_TYPE_INT", required, default_value, doc) and inputs (dicts:
  // name, dtypes as enum names "DTYPE_FLOAT32", scalar_ok).
  py::list Ops() const {
    v1::ListOpsResponse response;
    absl::Status status;
    WithoutGil([&] {
      grpc::ClientContext context;
      status = FromGrpc(
          v1::ComputeService::NewStub(channel_)->ListOps(&context, v1::ListOpsRequest(), &response),
          context);
    });
    ThrowIfError(status);
    py::list ops;
    for (const v1::OpInfo& op : response.ops()) {
      py::dict entry;
      entry["name"] = op.name();
      entry["summary"] = op.summary();
      entry["min_inputs"] = op.min_inputs();
      entry["max_inputs"] = op.max_inputs();
      entry["attrs"] = std::vector<std::string>(op.attrs().begin(), op.attrs().end());
      entry["backends"] = std::vector<std::string>(op.backends().begin(), op.backends().end());
      py::list attr_info;
      for (const v1::OpAttrInfo& attr : op.attr_info()) {
        py::dict spec;
        spec["name"] = attr.name();
        spec["type"] = v1::AttrType_Name(attr.type());
        spec["required"] = attr.required();
        spec["default_value"] = attr.default_value();
        spec["doc"] = attr.doc();
        attr_info.append(spec);
      }
      entry["attr_info"] = attr_info;
      py::list inputs;
      for (const v1::OpInputInfo& input : op.inputs()) {
        py::dict spec;
        spec["name"] = input.name();
        std::vector<std::string> dtypes;
        for (int dtype : input.dtypes()) dtypes.push_back(v1::DType_Name(dtype));
        spec["dtypes"] = dtypes;
        spec["scalar_ok"] = input.scalar_ok();
        inputs.append(spec);
      }
      entry["inputs"] = inputs;
      ops.append(entry);
    }
    return ops;
  }

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

void RegisterDaemonProbe(py::module_& module) {
  py::class_<DaemonProbe, std::shared_ptr<DaemonProbe>>(
      module, "DaemonProbe",
      "A bare channel to gpukitd without a session (gpukit-bench's raw ping and daemon info).")
      .def_static("connect", &DaemonProbe::Connect, py::arg("address") = "",
                  py::arg("timeout_s") = 5.0,
                  "Connects to `address` (\"\": $GPUKIT_ADDR or the default socket).")
      .def_property_readonly("address", &DaemonProbe::address)
      .def("ping", &DaemonProbe::Ping, py::arg("timeout_s") = 5.0,
           "One grpc.health.v1.Health/Check round trip; raises unless the daemon is SERVING.")
      .def("info", &DaemonProbe::Info,
           "The daemon's version, backend and devices (AdminService Status, ListDevices).")
      .def("ops", &DaemonProbe::Ops,
           "The daemon's built-in ops (ComputeService ListOps): a list of dicts with name, "
           "summary, min_inputs, max_inputs, attrs, backends, attr_info and inputs.");
}

}  // namespace gpukit::python
