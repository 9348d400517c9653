#include "daemon/core/core.h"

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<std::unique_ptr<Core>> Core::Create(const Clock& clock,
                                                   std::vector<std::unique_ptr<Device>> devices,
                                                   const CoreOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("Core needs at least one device");
  if (options.streams_per_device < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams_per_device = ", options.streams_per_device, " must be >= 1"));
  }
  std::unique_ptr<Core> core(new Core(clock, options));
  for (std::unique_ptr<Device>& device : devices) {
    DeviceSlot slot;
    slot.ledger = std::make_unique<MemoryLedger>(device->properties().memory_total_bytes);
    for (int i = 0; i < options.streams_per_device; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(StreamId stream, device->CreateStream(StreamPriority::kNormal));
      slot.streams.push_back(stream);
    }
    slot.device = std::move(device);
    core->devices_.push_back(std::move(slot));
  }
  return core;
}

Core::Core(const Clock& clock, const CoreOptions& options)
    : clock_(clock),
      options_(options),
      ops_(OpRegistry::Builtin()),
      sessions_(clock, options.sessions, options.limits) {}

Core::~Core() {
  // Sessions hold arrays whose destructors free buffers on the devices: close them first.
  sessions_.CloseAll();
  for (DeviceSlot& slot : devices_) {
    for (StreamId stream : slot.streams) slot.device->DestroyStream(stream).IgnoreError();
  }
}

absl::StatusOr<SessionGrant> Core::OpenSession(OpenSessionParams params) {
  const DeviceSlot& slot = devices_[0];
  params.stream = slot.streams[next_stream_++ % slot.streams.size()];
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Open(params));
  return SessionGrant{session->id(), session->partition(), session->lease()};
}

absl::StatusOr<absl::Duration> Core::KeepAlive(absl::string_view session_id) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  return session->lease();
}

absl::StatusOr<CloseStats> Core::CloseSession(absl::string_view session_id) {
  return sessions_.Close(session_id);
}

int Core::ExpireLeases() { return static_cast<int>(sessions_.ExpireLeases().size()); }

void Core::CloseAllSessions() {
  std::vector<CloseStats> closed = sessions_.CloseAll();
  if (!closed.empty()) spdlog::info("closed {} session(s)", closed.size());
}

ArrayView Core::View(const DeviceArray& array) {
  return {array.handle(), array.desc(), array.bytes(), array.device().properties().index};
}

absl::StatusOr<std::shared_ptr<DeviceArray>> Core::Allocate(const Session& session,
                                                            const TensorDesc& desc) {
  GPUKIT_RETURN_IF_ERROR(ValidateShape(desc.shape, "shape"));
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(desc.shape, desc.dtype));
  DeviceSlot& slot = devices_[0];
  GPUKIT_ASSIGN_OR_RETURN(MemoryReservation reservation,
                          slot.ledger->Reserve(bytes, options_.limits, session.array_count()));
  absl::StatusOr<BufferId> buffer = slot.device->Allocate(bytes);
  if (!buffer.ok()) {
    if (absl::IsResourceExhausted(buffer.status())) {
      return WithReason(buffer.status(), RejectReason::kDeviceMemoryExhausted);
    }
    return buffer.status();
  }
  return std::make_shared<DeviceArray>(NewOpaqueId("a-"), *slot.device, *buffer, desc, bytes,
                                       std::move(reservation));
}

absl::StatusOr<ArrayView> Core::CreateArray(absl::string_view session_id, const TensorDesc& desc) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, Allocate(*session, desc));
  ArrayView view = View(*array);
  GPUKIT_RETURN_IF_ERROR(
      session->AddArray(std::move(array), options_.limits.max_arrays_per_session));
  return view;
}

absl::StatusOr<ArrayView> Core::DescribeArray(absl::string_view session_id,
                                              absl::string_view handle) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  return View(*array);
}

absl::StatusOr<int64_t> Core::FreeArray(absl::string_view session_id, absl::string_view handle) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->RemoveArray(handle));
  return array->bytes();
}

namespace {
absl::Status CheckRange(const DeviceArray& array, int64_t offset, size_t bytes) {
  if (offset < 0 || offset > array.bytes() ||
      static_cast<int64_t>(bytes) > array.bytes() - offset) {
    return absl::OutOfRangeError(absl::StrCat("byte range [", offset, ", ", offset, " + ", bytes,
                                              ") is outside array ", array.handle(), " of ",
                                              array.bytes(), " bytes"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Core::WriteArray(absl::string_view session_id, absl::string_view handle,
                              int64_t offset, absl::Span<const char> data) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  GPUKIT_RETURN_IF_ERROR(CheckRange(*array, offset, data.size()));
  if (data.empty()) return absl::OkStatus();
  Device& device = array->device();
  GPUKIT_RETURN_IF_ERROR(device.CopyHostToDevice(
      array->buffer(), offset, data.data(), static_cast<int64_t>(data.size()), session->stream()));
  return SynchronizeStream(device, session->stream());
}

absl::Status Core::ReadArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                             absl::Span<char> out) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  GPUKIT_RETURN_IF_ERROR(CheckRange(*array, offset, out.size()));
  if (out.empty()) return absl::OkStatus();
  Device& device = array->device();
  GPUKIT_RETURN_IF_ERROR(device.CopyDeviceToHost(
      out.data(), array->buffer(), offset, static_cast<int64_t>(out.size()), session->stream()));
  return SynchronizeStream(device, session->stream());
}

absl::StatusOr<ArrayView> Core::RunOp(absl::string_view session_id, absl::string_view op_name,
                                      absl::Span<const OpInput> inputs, const AttrMap& attrs) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(const OpDef* op, ops_.Find(op_name));
  // Hold every input array until the op has run, even if the client frees it meanwhile.
  std::vector<std::shared_ptr<DeviceArray>> held;
  std::vector<OperandDesc> descs;
  OpLaunch launch;
  launch.op = op;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OperandDesc desc;
    OpOperand operand;
    if (inputs[i].is_scalar) {
      desc.is_scalar = operand.is_scalar = true;
      desc.scalar = operand.scalar = inputs[i].scalar;
    } else {
      absl::StatusOr<std::shared_ptr<DeviceArray>> array = session->FindArray(inputs[i].handle);
      if (!array.ok()) {
        return absl::Status(array.status().code(),
                            absl::StrCat("inputs[", i, "]: ", array.status().message()));
      }
      desc.tensor = operand.desc = (*array)->desc();
      operand.buffer = (*array)->buffer();
      held.push_back(*std::move(array));
    }
    descs.push_back(std::move(desc));
    launch.inputs.push_back(std::move(operand));
  }
  GPUKIT_ASSIGN_OR_RETURN(launch.plan, ops_.Plan(*op, descs, attrs));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> output,
                          Allocate(*session, launch.plan.output));
  launch.output = output->buffer();
  Device& device = output->device();
  GPUKIT_RETURN_IF_ERROR(device.RunOp(launch, session->stream()));
  GPUKIT_RETURN_IF_ERROR(SynchronizeStream(device, session->stream()));
  ArrayView view = View(*output);
  GPUKIT_RETURN_IF_ERROR(
      session->AddArray(std::move(output), options_.limits.max_arrays_per_session));
  return view;
}

std::vector<SessionSummary> Core::ListSessions() const {
  const absl::Time now = clock_.Now();
  std::vector<SessionSummary> list;
  for (const std::shared_ptr<Session>& s : sessions_.List()) {
    list.push_back({s->id(), s->tenant(), s->partition(), s->client(), s->array_count(),
                    s->memory_bytes(), now - s->opened_at(),
                    std::max(absl::ZeroDuration(), s->lease_deadline() - now)});
  }
  return list;
}

std::vector<DeviceSummary> Core::ListDevices() const {
  std::vector<DeviceSummary> list;
  for (const DeviceSlot& slot : devices_) {
    list.push_back({slot.device->properties(), slot.device->GetMemoryInfo().used_bytes});
  }
  return list;
}

int64_t Core::array_count() const {
  int64_t count = 0;
  for (const std::shared_ptr<Session>& s : sessions_.List()) count += s->array_count();
  return count;
}

absl::string_view Core::backend() const {
  return BackendName(devices_[0].device->properties().backend);
}

}  // namespace gpukit
