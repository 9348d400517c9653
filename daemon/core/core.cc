#include "daemon/core/core.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/op_pipeline.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/utf8.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// The partitions to start with: the configured ones, plus "default" from what they leave
// of device 0 unless they name it.
std::vector<PartitionSpec> StartupPartitions(const std::vector<PartitionSpec>& configured,
                                             int64_t device0_bytes) {
  std::vector<PartitionSpec> partitions = configured;
  const bool has_default =
      std::any_of(configured.begin(), configured.end(),
                  [](const PartitionSpec& p) { return p.name == kDefaultPartition; });
  if (has_default) return partitions;
  if (std::optional<PartitionSpec> d = ImpliedDefaultPartition(configured, device0_bytes)) {
    partitions.insert(partitions.begin(), *std::move(d));
  }
  return partitions;
}

// The architecture a session's kernels compile for: the device's, where it runs compiled
// kernels (a test double posing as a CUDA device has none, and is not taken for one).
std::string KernelArch(const Device& device, const CoreOptions& options) {
  const std::string& arch = device.properties().kernel_arch;
  return arch.empty() ? options.cpu_kernel_arch : arch;
}

// What a launch may ask of a device: a GPU's own limits; elsewhere those that every GPU gpukit
// accepts (SM 80 and newer) shares, so a request is judged alike on every backend.
struct LaunchLimits {
  int64_t max_grid[3] = {2147483647, 65535, 65535};
  int64_t max_block[3] = {1024, 1024, 64};
  int64_t max_threads_per_block = 1024;
  int64_t max_shared_memory_bytes = 0;  // 0: left to the device
};

LaunchLimits LimitsOf(const Device& device) {
  LaunchLimits limits;
  const DeviceProperties& p = device.properties();
  if (p.kernel_arch.empty()) return limits;
  for (int i = 0; i < 3; ++i) {
    if (p.max_grid_dim[i] > 0) limits.max_grid[i] = p.max_grid_dim[i];
    if (p.max_block_dim[i] > 0) limits.max_block[i] = p.max_block_dim[i];
  }
  if (p.max_threads_per_block > 0) limits.max_threads_per_block = p.max_threads_per_block;
  limits.max_shared_memory_bytes = p.max_shared_memory_per_block_optin_bytes;
  return limits;
}

absl::Status CheckDims(absl::string_view field, const uint32_t (&dims)[3],
                       const int64_t (&max)[3]) {
  constexpr absl::string_view kAxes[] = {"x", "y", "z"};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", kAxes[i], " = 0 must be >= 1"));
    }
    if (dims[i] > max[i]) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", kAxes[i], " = ", dims[i],
                                                     " is above the device's limit of ", max[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLaunchConfig(const LaunchConfig& config, const LaunchLimits& limits) {
  GPUKIT_RETURN_IF_ERROR(CheckDims("grid", config.grid, limits.max_grid));
  GPUKIT_RETURN_IF_ERROR(CheckDims("block", config.block, limits.max_block));
  const uint64_t threads = uint64_t{config.block[0]} * config.block[1] * config.block[2];
  if (threads > static_cast<uint64_t>(limits.max_threads_per_block)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block of ", config.block[0], " x ", config.block[1], " x ", config.block[2],
                     " = ", threads, " threads is above the device's limit of ",
                     limits.max_threads_per_block, " threads per block"));
  }
  if (limits.max_shared_memory_bytes > 0 &&
      config.shared_memory_bytes > limits.max_shared_memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_memory_bytes = ", config.shared_memory_bytes, " is above the device's limit of ",
        limits.max_shared_memory_bytes, " bytes per block"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Core>> Core::Create(const Clock& clock,
                                                   std::vector<std::unique_ptr<Device>> devices,
                                                   const CoreOptions& options,
                                                   std::shared_ptr<JitCompiler> jit) {
  if (devices.empty()) return absl::InvalidArgumentError("Core needs at least one device");
  if (!(options.best_effort_sm_share > 0 && options.best_effort_sm_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "best_effort_sm_share = ", options.best_effort_sm_share, " must be in (0, 1]"));
  }
  if (options.streams_per_partition < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams_per_partition = ", options.streams_per_partition, " must be >= 1"));
  }
  if (options.max_ops_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_ops_in_flight = ", options.max_ops_in_flight, " must be >= 1"));
  }
  if (options.max_kernels_per_session < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_kernels_per_session = ", options.max_kernels_per_session, " must be >= 0"));
  }
  std::vector<DeviceCapacity> capacities;
  std::vector<DeviceSlot> slots;
  for (std::unique_ptr<Device>& device : devices) {
    // Sessions' streams are made per partition when sessions open (PartitionStreams).
    DeviceSlot slot;
    GPUKIT_ASSIGN_OR_RETURN(slot.spill_stream, device->CreateStream(StreamPriority::kLow));
    capacities.push_back({static_cast<int>(slots.size()), device->properties().memory_total_bytes});
    slot.device = std::move(device);
    slots.push_back(std::move(slot));
  }
  SchedulerOptions scheduler_options;
  scheduler_options.limits = options.limits;
  scheduler_options.pacing_burst = options.pacing_burst;
  scheduler_options.best_effort_in_flight = options.best_effort_in_flight;
  scheduler_options.burstable_in_flight = options.burstable_in_flight;
  scheduler_options.pacing_anticipation = options.pacing_anticipation;
  scheduler_options.task_history = options.task_history;
  GPUKIT_ASSIGN_OR_RETURN(
      std::unique_ptr<Scheduler> scheduler,
      Scheduler::Create(clock, capacities,
                        StartupPartitions(options.partitions, capacities[0].memory_bytes),
                        scheduler_options));
  return std::unique_ptr<Core>(
      new Core(clock, options, std::move(slots), std::move(scheduler), std::move(jit)));
}

Core::Core(const Clock& clock, const CoreOptions& options, std::vector<DeviceSlot> devices,
           std::unique_ptr<Scheduler> scheduler, std::shared_ptr<JitCompiler> jit)
    : clock_(clock),
      options_(options),
      ops_(OpRegistry::Builtin()),
      devices_(std::move(devices)),
      scheduler_(std::move(scheduler)),
      jit_(std::move(jit)),
      sessions_(clock, options.sessions, *scheduler_),
      faults_(clock),
      pending_regions_(clock),
      pending_exports_(clock),
      pending_imports_(clock),
      streams_(options.streams_per_partition, options.best_effort_sm_share) {}

Core::~Core() {
  // Sessions hold arrays whose destructors free buffers on the devices, and hold their
  // streams: close them first. No request runs any more, so dropping the table's
  // references destroys every partition's streams here.
  sessions_.CloseAll();
  std::vector<std::shared_ptr<const void>> streams;
  {
    absl::MutexLock lock(&partitions_mu_);
    streams = streams_.RemoveAll();
  }
  streams.clear();
  for (DeviceSlot& slot : devices_) {
    slot.device->DestroyStream(slot.spill_stream).IgnoreError();
  }
}

absl::StatusOr<SessionGrant> Core::OpenSession(OpenSessionParams params) {
  GPUKIT_RETURN_IF_ERROR(ValidateOpenSessionParams(params));
  const std::string id = NewOpaqueId("s-");
  // Declared before the lock, so dropped after it: if a racing close makes this the last
  // reference, destroying the session may destroy its streams, which waits for the device.
  std::shared_ptr<Session> session;
  // Stream sets of an older SM placement, likewise dropped after the lock.
  std::vector<std::shared_ptr<const void>> replaced;
  {
    // Admission, the stream and registration are one step with respect to DeletePartition
    // (see core.h), so the session either is refused or is registered when the partition's
    // sessions are closed.
    absl::MutexLock lock(&partitions_mu_);
    GPUKIT_ASSIGN_OR_RETURN(
        SessionAdmission admission,
        scheduler_->AdmitSession(id, params.partition, params.resources, params.tenant));
    absl::StatusOr<StreamLease> stream = streams_.Acquire(
        admission.partition, *devices_[admission.device_index].device, admission.qos,
        PlacementOf(admission.partition, admission.device_index), &replaced);
    if (!stream.ok()) {
      scheduler_->EndSession(admission.ticket);
      return stream.status();
    }
    params.stream = stream->stream;
    params.stream_owner = std::move(stream->owner);
    GPUKIT_ASSIGN_OR_RETURN(session, sessions_.Open(id, params, std::move(admission)));
  }
  const SessionAdmission& a = session->admission();
  return SessionGrant{session->id(), session->partition(), session->lease(), a.device_index,
                      a.qos,         a.resources};
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

int64_t Core::Reclaim(const ReclaimPlan& plan) {
  // Candidates: resident, unpinned arrays of sessions on the device (of the partition when
  // the plan names one) whose partitions spill.
  std::vector<ReclaimCandidate> candidates;
  std::vector<std::shared_ptr<DeviceArray>> arrays;
  for (const std::shared_ptr<Session>& session : sessions_.List()) {
    const SessionAdmission& a = session->admission();
    if (a.device_index != plan.device_index) continue;
    if (!plan.partition.empty() && session->partition() != plan.partition) continue;
    if (!scheduler_->SpillEnabled(session->partition())) continue;
    const SessionUsage usage = scheduler_->Usage(session->ticket());
    for (std::shared_ptr<DeviceArray>& array : session->Arrays()) {
      const std::optional<absl::Time> last_used = array->SpillableLastUsed();
      if (!last_used) continue;
      candidates.push_back({reinterpret_cast<uintptr_t>(session.get()), a.qos, array->bytes(),
                            *last_used, usage.memory_used_bytes,
                            a.resources.memory_request_bytes.value_or(0)});
      arrays.push_back(std::move(array));
    }
  }
  int64_t freed = 0;
  for (size_t i : ChooseVictims(candidates, plan.shortfall_bytes, plan.requester)) {
    absl::StatusOr<int64_t> bytes = arrays[i]->Spill(devices_[plan.device_index].spill_stream);
    if (!bytes.ok()) {
      spdlog::error("spilling array {}: {}", arrays[i]->handle(),
                    std::string(bytes.status().message()));
      continue;
    }
    freed += *bytes;
  }
  if (freed > 0) {
    spdlog::info("reclaimed {} bytes on device {} for a {} session", freed, plan.device_index,
                 std::string(QosName(plan.requester.qos)));
  }
  return freed;
}

absl::StatusOr<MemoryReservation> Core::ReserveMemory(const Session& session, int64_t bytes,
                                                      RunningTask* start) {
  // A reclaim frees memory for this request, but another request may take it first, so
  // try a few times before giving up.
  constexpr int kAttempts = 3;
  for (int attempt = 0;; ++attempt) {
    ReclaimPlan plan;
    absl::StatusOr<MemoryReservation> reservation =
        start != nullptr ? start->StartWithMemory(bytes, &plan)
                         : scheduler_->ReserveMemory(session.ticket(), bytes, &plan);
    if (reservation.ok()) return reservation;
    if (plan.shortfall_bytes > 0) {
      if (attempt < kAttempts && Reclaim(plan) > 0) continue;
      scheduler_->CountRefusal(session.ticket(), ReasonOf(reservation.status()));
    }
    return reservation.status();
  }
}

absl::StatusOr<DeviceAllocation> Core::AllocateMemory(const Session& session, int64_t bytes,
                                                      RunningTask* start) {
  GPUKIT_ASSIGN_OR_RETURN(MemoryReservation reservation, ReserveMemory(session, bytes, start));
  absl::StatusOr<BufferId> buffer =
      devices_[session.admission().device_index].device->Allocate(bytes);
  if (!buffer.ok()) {
    if (absl::IsResourceExhausted(buffer.status())) {
      return WithReason(buffer.status(), RejectReason::kDeviceMemoryExhausted);
    }
    return buffer.status();
  }
  return DeviceAllocation{*buffer, std::move(reservation)};
}

absl::StatusOr<std::shared_ptr<DeviceArray>> Core::NewArray(const Session& session,
                                                            const TensorDesc& desc,
                                                            std::string handle,
                                                            RunningTask* start) {
  GPUKIT_RETURN_IF_ERROR(ValidateShape(desc.shape, "shape"));
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(desc.shape, desc.dtype));
  GPUKIT_ASSIGN_OR_RETURN(DeviceAllocation memory, AllocateMemory(session, bytes, start));
  Device& device = *devices_[session.admission().device_index].device;
  if (handle.empty()) handle = NewOpaqueId("a-");
  return std::make_shared<DeviceArray>(std::move(handle), device, memory.buffer, desc, bytes,
                                       std::move(memory.reservation), clock_.Now());
}

absl::Status Core::ZeroArray(const Session& session, DeviceArray& array) {
  if (array.bytes() == 0) return absl::OkStatus();
  return RunTransfer(session, array, "zero", TaskOptions{}, [&](BufferId buffer) {
    return array.device().FillZero(buffer, 0, array.bytes(), session.stream());
  });
}

absl::Status Core::RunTransfer(const Session& session, DeviceArray& array, absl::string_view name,
                               const TaskOptions& options,
                               const std::function<absl::Status(BufferId)>& enqueue) {
  GPUKIT_ASSIGN_OR_RETURN(RunningTask task, StartTask(session, TaskKind::kTransfer, name, options));
  absl::StatusOr<ArrayPin> pin = PinArray(session, array);
  if (!pin.ok()) return Conclude(session, task.Fail(pin.status()));
  return Conclude(
      session, task.Run(array.device(), session.stream(), [&] { return enqueue(pin->buffer()); }));
}

absl::StatusOr<ArrayPin> Core::PinArray(const Session& session, DeviceArray& array) {
  auto restore = [&](int64_t bytes) { return AllocateMemory(session, bytes); };
  return array.Pin(clock_.Now(), restore, devices_[session.admission().device_index].spill_stream);
}

absl::Status Core::Conclude(const Session& session, absl::Status status) {
  // Touch, not the session's own flag: it also sees a lease that lapsed but was not reaped
  // yet, and it orders this check after a concurrent close, which happens under the same
  // lock as the scheduler's cancellation of the session's tasks.
  absl::StatusOr<std::shared_ptr<Session>> live = sessions_.Touch(session.id());
  if (live.ok() && live->get() == &session) return status;
  return absl::NotFoundError(absl::StrCat(
      "session \"", session.id(),
      "\" ended (closed, or its lease lapsed) while the request ran; its arrays are freed, so "
      "what the request did is lost"));
}

absl::StatusOr<RunningTask> Core::StartTask(const Session& session, TaskKind kind,
                                            absl::string_view name, const TaskOptions& options) {
  absl::StatusOr<RunningTask> task = RunningTask::Create(*scheduler_, session, kind, name, options);
  if (!task.ok()) return Conclude(session, task.status());
  return task;
}

absl::StatusOr<ArrayView> Core::CreateArray(absl::string_view session_id, const TensorDesc& desc) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_RETURN_IF_ERROR(session->CheckArrayRoom(options_.limits.max_arrays_per_session));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array,
                          Conclude(*session, NewArray(*session, desc)));
  // The pool hands a block back to whichever session allocates next: zero it before this
  // session can read it, so no array ever shows another session's (or tenant's) bytes. On
  // failure the array is dropped, and with it its memory.
  GPUKIT_RETURN_IF_ERROR(ZeroArray(*session, *array));
  ArrayView view = View(*array);
  GPUKIT_RETURN_IF_ERROR(Conclude(
      *session, session->AddArray(std::move(array), options_.limits.max_arrays_per_session)));
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
  absl::StatusOr<int64_t> bytes;
  if (absl::StatusOr<std::shared_ptr<DeviceArray>> array = session->RemoveArray(handle);
      array.ok()) {
    bytes = (*array)->bytes();
  } else {
    bytes = array.status();
  }
  // The array is dropped by now: freed, unless work in flight still pins it.
  return Conclude(*session, std::move(bytes));
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
                              int64_t offset, absl::Span<const char> data,
                              const TaskOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  GPUKIT_RETURN_IF_ERROR(CheckRange(*array, offset, data.size()));
  if (data.empty()) return absl::OkStatus();
  return RunTransfer(*session, *array, "upload", options, [&](BufferId buffer) {
    return array->device().CopyHostToDevice(buffer, offset, data.data(),
                                            static_cast<int64_t>(data.size()), session->stream());
  });
}

absl::Status Core::ReadArray(absl::string_view session_id, absl::string_view handle, int64_t offset,
                             absl::Span<char> out, const TaskOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceArray> array, session->FindArray(handle));
  GPUKIT_RETURN_IF_ERROR(CheckRange(*array, offset, out.size()));
  if (out.empty()) return absl::OkStatus();
  return RunTransfer(*session, *array, "download", options, [&](BufferId buffer) {
    return array->device().CopyDeviceToHost(out.data(), buffer, offset,
                                            static_cast<int64_t>(out.size()), session->stream());
  });
}

absl::StatusOr<Core::PreparedOp> Core::PrepareOp(const Session& session, absl::string_view op_name,
                                                 absl::Span<const OpInput> inputs,
                                                 const AttrMap& attrs, const TaskOptions& options,
                                                 std::string output_handle) {
  GPUKIT_ASSIGN_OR_RETURN(const OpDef* op, ops_.Find(op_name));
  if (Device& device = *devices_[session.admission().device_index].device;
      !device.SupportsOp(op_name)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "op \"", op_name, "\" cannot run on device ", device.properties().index, " (",
        BackendName(device.properties().backend), " backend): it has no kernels for it"));
  }
  // Plan first: a malformed request is refused before it takes a place in the queue.
  std::vector<std::shared_ptr<DeviceArray>> arrays(inputs.size());
  std::vector<OperandDesc> descs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OperandDesc desc;
    if (inputs[i].is_scalar) {
      desc.is_scalar = true;
      desc.scalar = inputs[i].scalar;
    } else {
      absl::StatusOr<std::shared_ptr<DeviceArray>> array = session.FindArray(inputs[i].handle);
      if (!array.ok()) return PrefixStatus(array.status(), absl::StrCat("inputs[", i, "]: "));
      desc.tensor = (*array)->desc();
      arrays[i] = *std::move(array);
    }
    descs.push_back(std::move(desc));
  }
  OpLaunch launch;
  launch.op = op;
  GPUKIT_ASSIGN_OR_RETURN(launch.plan, ops_.Plan(*op, descs, attrs));
  GPUKIT_RETURN_IF_ERROR(session.CheckArrayRoom(options_.limits.max_arrays_per_session));
  GPUKIT_RETURN_IF_ERROR(faults_.CheckLaunch(session.tenant()));
  GPUKIT_ASSIGN_OR_RETURN(RunningTask task, StartTask(session, TaskKind::kOp, op_name, options));
  launch.sliceable = task.higher_class_open();
  // Pin every input until the op has run, even if the client frees it meanwhile; a spilled
  // input comes back to the device here.
  std::vector<ArrayPin> pins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OpOperand operand;
    if (inputs[i].is_scalar) {
      operand.is_scalar = true;
      operand.scalar = inputs[i].scalar;
    } else {
      absl::StatusOr<ArrayPin> pin = PinArray(session, *arrays[i]);
      if (!pin.ok()) {
        return Conclude(session,
                        task.Fail(PrefixStatus(pin.status(), absl::StrCat("inputs[", i, "]: "))));
      }
      operand.desc = arrays[i]->desc();
      operand.buffer = pin->buffer();
      pins.push_back(*std::move(pin));
    }
    launch.inputs.push_back(std::move(operand));
  }
  // The output's reservation starts the task: one scheduler call for both, as only the
  // output's allocation lies between them (the inputs are resident now).
  absl::StatusOr<std::shared_ptr<DeviceArray>> output =
      NewArray(session, launch.plan.output, std::move(output_handle), &task);
  if (!output.ok()) return Conclude(session, task.Fail(output.status()));
  auto no_restore = [](int64_t) -> absl::StatusOr<DeviceAllocation> {
    return absl::InternalError("a new array cannot be spilled before it is registered");
  };
  absl::StatusOr<ArrayPin> output_pin = (*output)->Pin(clock_.Now(), no_restore, {});
  if (!output_pin.ok()) return Conclude(session, task.Fail(output_pin.status()));
  launch.output = output_pin->buffer();
  return PreparedOp{std::move(task), std::move(launch), std::move(pins), *std::move(output),
                    *std::move(output_pin)};
}

absl::StatusOr<ArrayView> Core::RunOp(absl::string_view session_id, absl::string_view op_name,
                                      absl::Span<const OpInput> inputs, const AttrMap& attrs,
                                      const TaskOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  devices_[session->admission().device_index].device->ExpectWork();
  GPUKIT_ASSIGN_OR_RETURN(
      PreparedOp op, PrepareOp(*session, op_name, inputs, attrs, options, /*output_handle=*/""));
  Device& device = op.output->device();
  absl::Status ran = op.task.RunOp(device, session->stream(), op.launch);
  GPUKIT_RETURN_IF_ERROR(Conclude(
      *session,
      NoteExecutorFailure(*session, device, absl::StrCat("op ", op_name), std::move(ran))));
  ArrayView view = View(*op.output);
  GPUKIT_RETURN_IF_ERROR(Conclude(
      *session, session->AddArray(std::move(op.output), options_.limits.max_arrays_per_session)));
  return view;
}

absl::StatusOr<std::unique_ptr<OpPipeline>> Core::OpenPipeline(absl::string_view session_id) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  {
    absl::MutexLock lock(&pipelines_mu_);
    if (!pipelines_.insert(session->id()).second) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session \"", session->id(),
          "\" already has an open pipeline (one Submit stream per session at a time)"));
    }
  }
  return std::unique_ptr<OpPipeline>(new OpPipeline(
      *this, std::move(session), options_.max_ops_in_flight, options_.pipeline_growth_bytes));
}

void Core::ClosePipeline(const std::string& session_id) {
  absl::MutexLock lock(&pipelines_mu_);
  pipelines_.erase(session_id);
}

absl::StatusOr<KernelView> Core::CompileKernel(absl::string_view session_id,
                                               const CompileRequest& request) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  if (jit_ == nullptr) {
    return absl::FailedPreconditionError(
        "NVRTC JIT compiler not available: gpukitd could not load libnvrtc at start-up (its "
        "log says where it looked), so it compiles no kernels");
  }
  GPUKIT_RETURN_IF_ERROR(session->CheckKernelRoom(options_.max_kernels_per_session));
  Device& device = *devices_[session->admission().device_index].device;
  const std::string arch = KernelArch(device, options_);
  // No lock is held while NVRTC runs (seconds, for heavy templates): the session's other
  // requests go on meanwhile, and AddKernel decides on the limit again afterwards.
  absl::StatusOr<JitResult> result = jit_->Compile(request, arch);
  if (!result.ok()) {
    const absl::string_view message = result.status().message();
    session->SetCompileLog({std::string(message), true});
    if (message.size() <= kMaxCompileErrorBytes) return result.status();
    const size_t cut = Utf8PrefixBytes(message, kMaxCompileErrorBytes);
    return absl::Status(
        result.status().code(),
        absl::StrCat(message.substr(0, cut), "\n[", message.size() - cut, " of ", message.size(),
                     " bytes cut; ComputeService.GetCompileLog returns the whole log]"));
  }
  JitResult compiled = *std::move(result);
  session->SetCompileLog({compiled.kernel->log, false});
  KernelView view;
  view.handle = NewOpaqueId("k-");
  view.entries = compiled.kernel->entries;
  view.lowered_names = compiled.kernel->lowered_names;
  view.arch = arch;
  view.origin = compiled.origin;
  if (compiled.origin == KernelOrigin::kCompiled) view.compile_time = compiled.kernel->compile_time;
  view.log = compiled.kernel->log;
  GPUKIT_RETURN_IF_ERROR(session->AddKernel(
      std::make_shared<SessionKernel>(view.handle, device, std::move(compiled.kernel), arch),
      options_.max_kernels_per_session));
  spdlog::debug("kernel compiled: session={} kernel={} entries={} arch={} origin={} compile_ms={}",
                session->id(), view.handle, absl::StrJoin(view.entries, ","), arch,
                std::string(KernelOriginName(view.origin)),
                absl::ToDoubleMilliseconds(view.compile_time));
  return view;
}

absl::StatusOr<CompileLog> Core::LastCompileLog(absl::string_view session_id) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  return session->compile_log();
}

absl::StatusOr<absl::Duration> Core::LaunchKernel(absl::string_view session_id,
                                                  absl::string_view handle, absl::string_view entry,
                                                  const LaunchConfig& config,
                                                  absl::Span<const KernelArgInput> args,
                                                  const TaskOptions& options) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  // The launch holds its own reference: a FreeKernel meanwhile unloads the module only
  // once the launch has completed.
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<SessionKernel> kernel, session->FindKernel(handle));
  GPUKIT_ASSIGN_OR_RETURN(const size_t index, kernel->FindEntry(entry));
  Device& device = kernel->device();
  // Everything that needs no device is checked first: a malformed request is refused
  // before it takes a place in the queue, whatever the backend.
  GPUKIT_RETURN_IF_ERROR(CheckLaunchConfig(config, LimitsOf(device)));
  if (args.size() > kMaxKernelArgs) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.size(), " args; a launch takes at most ", kMaxKernelArgs));
  }
  std::vector<std::shared_ptr<DeviceArray>> arrays(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].is_array) {
      absl::StatusOr<std::shared_ptr<DeviceArray>> array = session->FindArray(args[i].handle);
      if (!array.ok()) return PrefixStatus(array.status(), absl::StrCat("args[", i, "]: "));
      arrays[i] = *std::move(array);
    } else if (args[i].size_bytes < 1 || args[i].size_bytes > sizeof(args[i].bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("args[", i, "] is a scalar of ",
                                                     args[i].size_bytes,
                                                     " bytes; a scalar has 1 to 8 bytes"));
    }
  }
  if (device.properties().backend == BackendKind::kCpu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel launch requires a GPU; the kernel compiled (for ", kernel->arch(),
        "), but the session's device ", device.properties().index, " is on the ",
        BackendName(device.properties().backend), " backend, which cannot run device code"));
  }
  GPUKIT_RETURN_IF_ERROR(faults_.CheckLaunch(session->tenant()));
  GPUKIT_ASSIGN_OR_RETURN(
      RunningTask task, StartTask(*session, TaskKind::kKernel, kernel->entries()[index], options));
  // Pin every array until the kernel has run, even if the client frees it meanwhile; a
  // spilled one comes back to the device here.
  std::vector<ArrayPin> pins;
  std::vector<KernelArg> device_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    KernelArg& arg = device_args[i];
    if (args[i].is_array) {
      absl::StatusOr<ArrayPin> pin = PinArray(*session, *arrays[i]);
      if (!pin.ok()) {
        return Conclude(*session,
                        task.Fail(PrefixStatus(pin.status(), absl::StrCat("args[", i, "]: "))));
      }
      arg.kind = KernelArg::Kind::kBuffer;
      arg.buffer = pin->buffer();
      pins.push_back(*std::move(pin));
    } else {
      arg.kind = KernelArg::Kind::kScalar;
      std::memcpy(arg.bytes, args[i].bytes, sizeof(arg.bytes));
      arg.size_bytes = args[i].size_bytes;
    }
  }
  // The module is loaded on the first launch, inside the task: loading is device work.
  absl::StatusOr<FunctionId> function = kernel->Function(index);
  if (!function.ok()) return Conclude(*session, task.Fail(function.status()));
  absl::Duration device_time;
  absl::Status ran = task.Run(
      device, session->stream(),
      [&] { return device.Launch(*function, config, device_args, session->stream()); },
      &device_time);
  ran = NoteExecutorFailure(*session, device, absl::StrCat("kernel ", kernel->entries()[index]),
                            std::move(ran));
  GPUKIT_RETURN_IF_ERROR(Conclude(*session, std::move(ran)));
  return device_time;
}

absl::Status Core::FreeKernel(absl::string_view session_id, absl::string_view handle) {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_.Touch(session_id));
  // The kernel drops here, unloading its module, unless a launch still holds it.
  return Conclude(*session, session->RemoveKernel(handle).status());
}

absl::Status Core::CreatePartition(const PartitionSpec& spec) {
  return scheduler_->CreatePartition(spec);
}

absl::StatusOr<PartitionSpec> Core::UpdatePartition(absl::string_view name,
                                                    const PartitionFieldMask& mask,
                                                    const PartitionSpec& values) {
  return scheduler_->UpdatePartition(name, mask, values);
}

SmPlacement Core::PlacementOf(absl::string_view partition, int device_index) const {
  std::vector<PartitionSpec> on_device;
  for (PartitionStatus& status : scheduler_->ListPartitions()) {
    if (status.spec.device_index == device_index) on_device.push_back(std::move(status.spec));
  }
  const absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(on_device);
  auto it = placed.find(partition);
  return it != placed.end() ? it->second : SmPlacement{};
}

std::vector<PartitionStatus> Core::WithSmCounts(std::vector<PartitionStatus> statuses) const {
  absl::flat_hash_map<int, std::vector<PartitionSpec>> by_device;
  for (const PartitionStatus& status : statuses) {
    by_device[status.spec.device_index].push_back(status.spec);
  }
  absl::flat_hash_map<int, absl::flat_hash_map<std::string, SmPlacement>> placed;
  for (const auto& [index, specs] : by_device) placed[index] = PlaceSms(specs);
  absl::MutexLock lock(&partitions_mu_);
  for (PartitionStatus& status : statuses) {
    const int index = status.spec.device_index;
    if (index < 0 || index >= static_cast<int>(devices_.size())) continue;
    status.sm_count = streams_.SmCount(status.spec.name, *devices_[index].device,
                                       placed[index][status.spec.name]);
  }
  return statuses;
}

std::vector<PartitionStatus> Core::ListPartitions() const {
  return WithSmCounts(scheduler_->ListPartitions());
}

absl::StatusOr<PartitionStatus> Core::GetPartitionStatus(absl::string_view name) const {
  for (PartitionStatus& status : ListPartitions()) {
    if (status.spec.name == name) return std::move(status);
  }
  return absl::NotFoundError(
      absl::StrCat("partition \"", absl::CHexEscape(name.substr(0, 80)), "\" does not exist"));
}

std::vector<TaskInfo> Core::ListTasks(const TaskFilter& filter) const {
  return scheduler_->ListTasks(filter);
}

absl::Status Core::CancelTask(uint64_t task_id, absl::string_view why) {
  return scheduler_->Cancel(task_id, why);
}

absl::StatusOr<int> Core::DeletePartition(absl::string_view name, bool force) {
  std::vector<std::string> sessions;
  // The table's references to the partition's streams, dropped when this returns (after
  // the lock, and after its sessions are closed): the streams go then, or with the last
  // request of a closed session that still runs on them.
  std::vector<std::shared_ptr<const void>> streams;
  {
    // With OpenSession's step (see core.h): every session admitted into the partition
    // before this is registered by now, so the loop below closes it.
    absl::MutexLock lock(&partitions_mu_);
    GPUKIT_ASSIGN_OR_RETURN(sessions, scheduler_->DeletePartition(name, force));
    streams = streams_.Remove(name);
  }
  int closed = 0;
  for (const std::string& id : sessions) {
    if (sessions_.Close(id).ok()) ++closed;
  }
  if (closed > 0) {
    spdlog::warn("partition {} deleted with force: {} session(s) closed", std::string(name),
                 closed);
  }
  return closed;
}

absl::StatusOr<Principal> Core::SessionOwner(absl::string_view session_id) const {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<const Session> session, sessions_.Find(session_id));
  return session->owner();
}

absl::StatusOr<bool> Core::HigherClassSessionOpen(absl::string_view session_id) const {
  GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<const Session> session, sessions_.Find(session_id));
  return scheduler_->HigherClassSessionOpen(session->ticket());
}

std::vector<SessionSummary> Core::ListSessions() const {
  const absl::Time now = clock_.Now();
  std::vector<SessionSummary> list;
  for (const std::shared_ptr<Session>& s : sessions_.List()) {
    const SessionUsage usage = scheduler_->Usage(s->ticket());
    SessionSummary summary;
    summary.session_id = s->id();
    summary.tenant = s->tenant();
    summary.partition = s->partition();
    summary.client = s->client();
    summary.owner = s->owner();
    summary.arrays = s->array_count();
    summary.memory_bytes = usage.memory_used_bytes;
    summary.spilled_bytes = std::max<int64_t>(0, s->memory_bytes() - usage.memory_used_bytes);
    summary.age = now - s->opened_at();
    summary.lease_remaining = std::max(absl::ZeroDuration(), s->lease_deadline() - now);
    summary.device_index = s->admission().device_index;
    summary.qos = s->admission().qos;
    summary.resources = s->admission().resources;
    summary.device_time = usage.device_time;
    summary.tasks_finished = usage.tasks_finished;
    list.push_back(std::move(summary));
  }
  return list;
}

void Core::CheckLiveness() {
  { absl::MutexLock lock(&partitions_mu_); }
  { absl::MutexLock lock(&pipelines_mu_); }
  scheduler_->session_count();
  sessions_.count();
}

std::vector<TenantUsage> Core::ListTenants() const { return scheduler_->ListTenants(); }

std::vector<DeviceSummary> Core::ListDevices() const {
  std::vector<DeviceSummary> list;
  const std::vector<std::string> held_back = faults_.HeldBack();
  for (const DeviceSlot& slot : devices_) {
    DeviceSummary summary;
    summary.properties = slot.device->properties();
    summary.memory_used_bytes = slot.device->GetMemoryInfo().used_bytes;
    if (const auto* remote = dynamic_cast<const RemoteDevice*>(slot.device.get())) {
      summary.executor = remote->executor_state();
    }
    if (summary.executor.has_value() && summary.executor->last_fault.has_value()) {
      const ExecutorFaultRecord& fault = *summary.executor->last_fault;
      WorkFault last = {.time = fault.time,
                        .device = summary.properties.index,
                        .kind = fault.kind,
                        .error = fault.error};
      std::optional<WorkFault> attributed = faults_.LastFault(summary.properties.index);
      if (attributed.has_value() &&
          absl::AbsDuration(attributed->time - fault.time) < absl::Seconds(30)) {
        last.session_id = attributed->session_id;
        last.tenant = attributed->tenant;
        last.work = attributed->work;
      }
      summary.last_fault = std::move(last);
    }
    summary.held_back = held_back;
    list.push_back(std::move(summary));
  }
  return list;
}

absl::Status Core::NoteExecutorFailure(const Session& session, const Device& device,
                                       absl::string_view work, absl::Status status) {
  auto kind = status.GetPayload(kExecutorFaultPayload);
  if (!kind.has_value()) return status;
  const std::string kind_text(*kind);
  if (kind_text == "fault" || kind_text == "hang" || kind_text == "exited") {
    spdlog::warn("device {}: {} of session {} (tenant {}) cost the executor a restart: {}",
                 device.properties().index, std::string(work), session.id(), session.tenant(),
                 std::string(status.message()));
    faults_.Record({.device = device.properties().index,
                    .kind = kind_text,
                    .error = std::string(status.message()),
                    .session_id = session.id(),
                    .tenant = session.tenant(),
                    .work = std::string(work)});
  }
  return absl::Status(status.code(), absl::StrCat(work, ": ", status.message()));
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
